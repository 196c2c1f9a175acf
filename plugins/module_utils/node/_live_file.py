# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Live files on the node: read one safely, write one atomically, find (or require) an installed tool, identify a
file or an installed binary without trusting its name, and keep a verified-state stamp (PRIVATE to gpuops.nvidia).

Used by the steps that write a node's files from a tool's output (containerd_runtime, cdi_spec) and by the node
plan, which compares what they recorded with the node. Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import tempfile

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import (
    InputFileError, read_bytes, read_text)


class LiveFileError(InputFileError):
    """A live file that cannot be read (``read_live``): ``msg`` (also ``str()``) says why and that nothing changed;
    ``fields`` is what the failure reports besides (``changed=False``, as before this was raised). Not _module_run's
    Failure: the MIG boot script runs this file without ansible-core (an InputFileError is a ValueError, which it
    reports). A module that reads live files lists it in its ``errors``."""

    def __init__(self, msg):
        super(LiveFileError, self).__init__(msg)
        self.msg = msg
        self.fields = dict(changed=False)


def read_live(path, what):
    """Text of a live file, None when absent; not a regular file, unreadable, over 16 MiB or not UTF-8 ->
    LiveFileError (nothing changed)."""
    if not os.path.lexists(path):
        return None
    try:
        return read_text(path, what)
    except InputFileError as exc:
        raise LiveFileError("%s; it is left untouched, nothing changed" % exc) from exc


def write_atomic(module, path, text):
    """Write ``text`` to ``path`` through a temporary file in the same directory and atomic_move
    (an existing file keeps its mode, owner and SELinux context; a new one gets 0644 under umask 022). The
    temporary file is named ``.<name>.<random>``: hidden, and with no ``.toml``, ``.yaml`` or ``.json`` ending, so
    no reader of that directory's ``*.toml`` imports or CDI specs ever loads it half-written."""
    path = os.path.realpath(path)  # a symlinked file stays a symlink; its target is replaced
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def file_digest(path):
    """sha256 of a file's bytes; None when absent; a marker (never equal to a digest) for anything else: not a
    regular file (a FIFO is never opened, a device never read), over the size read_live accepts, unreadable."""
    if not os.path.lexists(path):
        return None
    try:
        return hashlib.sha256(read_bytes(path, "file")).hexdigest()
    except InputFileError as exc:
        return "unusable: %s" % exc


def binary_identity(path):
    """What identifies an installed binary without reading it: its real path and the inode's number, size,
    mtime and ctime (a package upgrade or any rewrite gives a new inode or a new ctime; ctime cannot be set back
    by user tools). Files up to 64 KiB (scripts) are also hashed."""
    if not path:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        return ["unreadable", real, exc.__class__.__name__]
    out = [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]
    if st.st_size <= 65536:
        out.append(file_digest(real))
    return out


# Where a tool not named by its option is looked for, besides PATH.
TOOL_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/sbin"]
# The package that provides each system tool the driver's modules and services and the MPS unit run (one name on apt
# and dnf), for require_tool's message.
SYSTEM_TOOL_PACKAGES = {"modprobe": "kmod", "rmmod": "kmod", "modinfo": "kmod", "systemctl": "systemd",
                        "mkdir": "coreutils", "sh": "bash (or dash)"}


class ToolNotFound(Exception):
    """A tool a step needs is missing or not executable. ``str()`` is the module's failure message, ``reason`` the
    short form gpu_node_plan reports as the step's work."""

    def __init__(self, message, reason):
        super(ToolNotFound, self).__init__(message)
        self.reason = reason


def find_tool(get_bin_path, params, option, name, opt_dirs=None):
    """The path ``params[option]`` names (ToolNotFound unless it is an executable file), else what ``get_bin_path``
    (AnsibleModule.get_bin_path) finds in PATH or ``opt_dirs`` (TOOL_DIRS by default), else None; ``option`` None:
    no parameter names the tool. The steps and gpu_node_plan find a tool this one way, so that the plan checks the
    very binary the step would run."""
    given = params[option] if option else None
    if not given:
        return get_bin_path(name, opt_dirs=TOOL_DIRS if opt_dirs is None else opt_dirs)
    if not (os.path.isfile(given) and os.access(given, os.X_OK)):
        raise ToolNotFound("%s %s does not exist or is not executable (give the path of the %s program)"
                           % (option, given, name), "%s %s is not executable" % (name, given))
    return given


def require_tool(get_bin_path, params, option, name, package, opt_dirs=None):
    """``find_tool`` for a tool the step cannot do without: a tool not found is ToolNotFound too, whose message
    names every place searched (``option`` where one names the tool, PATH and ``opt_dirs``) and the ``package`` that
    provides it, and whose ``reason`` is ``"<name> not found"``."""
    path = find_tool(get_bin_path, params, option, name, opt_dirs)
    if path is None:
        raise ToolNotFound("%s was not found (looked in %s): install the %s package, which provides it%s"
                           % (name, ", ".join(["PATH"] + list(TOOL_DIRS if opt_dirs is None else opt_dirs)), package,
                              ", or set %s" % option if option else ""), "%s not found" % name)
    return path


def command_program(get_bin_path, argv):
    """The program a command line (an argument list) would run, as ``run_command`` finds it (``~`` and ``$VARS``
    expanded; a bare name looked up in PATH), or None when it names no executable file."""
    first = os.path.expanduser(os.path.expandvars(argv[0]))
    program = first if os.sep in first else get_bin_path(first) or first
    return program if os.path.isfile(program) and os.access(program, os.X_OK) else None


# ------------------------------------------------------------------------------------------------------
# Verified-state stamps: a step that verified a file records, in a hidden JSON file beside it, what it verified; a
# later run (or gpu_node_plan) that computes the same inputs trusts the record instead of running the tools again.
# Each step keeps its own suffix and record (containerd_runtime: _containerd_stamp, cdi_spec: _cdi).
# ------------------------------------------------------------------------------------------------------
def stamp_path(path, suffix):
    """``<directory>/.<name><suffix>``: beside ``path``, hidden, so that it goes where the file goes."""
    directory, name = os.path.split(path)
    return os.path.join(directory, "." + name + suffix)


def stamp_text(record, indent=None):
    """A stamp's text: ``record`` as JSON with sorted keys (equal records give equal bytes), ending in a newline."""
    return json.dumps(record, sort_keys=True, indent=indent) + "\n"


def parse_stamp(text):
    """The record a stamp's text holds, or None when it is not a JSON object."""
    try:
        recorded = json.loads(text)
    except (TypeError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def load_stamp(path):
    """The record of the stamp file at ``path``, or None when it is absent, unreadable or not a JSON object."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError, ValueError):
        return None
    return parse_stamp(text)
