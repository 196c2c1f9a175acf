# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The /dev/char links of the NVIDIA device nodes, and the udev rule that makes them at boot (PRIVATE to gpuops.nvidia).

Why: runc with systemd's cgroup driver allows a container's devices by the path ``/dev/char/<major>:<minor>``, and the
NVIDIA driver does not create those links; a ``systemctl daemon-reload`` then takes the GPUs from running containers
whose runtime is not in CDI mode ("Failed to initialize NVML: Unknown Error", NVIDIA/nvidia-container-toolkit#48).
NVIDIA's fix is ``nvidia-ctk system create-dev-char-symlinks --create-all`` and a udev rule that runs it again when the
driver binds a GPU (the rule's text: RULE_LINE; NVIDIA/nvidia-container-toolkit#48, NVIDIA/nvidia-docker#1730).

What the command does (NVIDIA/nvidia-container-toolkit v1.20.0, docs/readings/dev-char-symlinks-real-ctk.md): with
``--create-all`` it links every possible NVIDIA node (control nodes, each PCI GPU, every MIG capability) as
``<dev-char-path>/M:m`` -> the host's ``/dev/...`` path; it never replaces an existing name, exits 0 whatever it did,
and its ``--dry-run`` logs the same ``Creating link L => T`` lines and makes nothing. So the expected set is read from
its own dry run, the links on disk are compared with it (a link is right when it resolves to the target, udev's
relative ``../nvidia0`` included), and the command runs only where a link is missing. A name that is there and points
elsewhere is reported, never replaced (nvidia-ctk would not replace it either).

Here: the options, the rule's text, the read (``read``: one dry run, one lstat/readlink per link, the rule file) and the
reasons the node plan and the module share. Commands run as argument lists; nothing here writes.

The verified-state stamp (``stamp_file``, node/_live_file's stamps): after a run outside check mode, dev_char_symlinks
records the links the dry run named with what that answer depends on (``inputs``: nvidia-ctk's identity, the NVIDIA
majors of /proc/devices, the MIG capability minors, the PCI devices, the boot). gpu_node_plan's check (``read`` with
``trust_stamp``) takes the links from a stamp whose inputs are unchanged instead of starting nvidia-ctk on every
converged re-run, and still looks at every link and the rule; any difference, or no stamp, is the dry run. The module
itself always runs the dry run. The stamp lives beside the links' directory (``/dev/.char.gpuops-verified.json``: on
the boot's devtmpfs, gone with the boot whose majors it describes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError, read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    binary_identity, load_stamp, stamp_path, stamp_text)

DEFAULT_DEV_CHAR = "/dev/char"
DEFAULT_RULE_PATH = "/lib/udev/rules.d/71-nvidia-dev-char.rules"

ARGUMENT_SPEC = dict(
    dev_char_path=dict(type="path", default=DEFAULT_DEV_CHAR),
    udev_rule=dict(type="bool", default=True),
    udev_rule_path=dict(type="path", default=DEFAULT_RULE_PATH),
    nvidia_ctk_path=dict(type="path"),
)

# NVIDIA's rule (NVIDIA/nvidia-container-toolkit#48): run the command when the nvidia driver binds a PCI device.
RULE_MATCH = 'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia"'
RULE_HEADER = ("# Managed by gpuops.nvidia (dev_char_symlinks): /dev/char links of the NVIDIA device nodes, made again\n"
               "# each time the driver binds a GPU (NVIDIA/nvidia-container-toolkit#48).\n")
_LINK = re.compile(r"Creating link (\S+) => (\S+?)\"?$")
# characters udev's RUN key would split on or substitute (spaces, quotes, % and $ substitutions)
_UNSAFE = re.compile(r"[\s\"'%$\\]")


class DevCharError(Exception):
    """nvidia-ctk's dry run failed, or its output names no link where it found devices; ``str()`` says which."""


def path_problems(params):
    """What is wrong with the paths (messages), before anything is read."""
    errors = []
    for option in ("dev_char_path", "udev_rule_path"):
        value = params.get(option) or ""
        if "\x00" in value or not value.startswith("/") or value.rstrip("/") != value or value == "/":
            errors.append("%s %r must be an absolute path (a directory's or a file's), without a trailing / or a NUL"
                          % (option, value))
        elif params.get("udev_rule") and option == "dev_char_path" and _UNSAFE.search(value):
            errors.append("dev_char_path %r goes into the udev rule's RUN command, which udev splits on white space "
                          "and substitutes %% and $ in: use a path without white space, quotes, %%, $ or \\" % value)
    return errors


def place_problems(params):
    """What on the node stands where the links' directory or the rule file must go (messages): a non-directory at
    dev_char_path, a non-directory where a parent directory of either must be."""
    errors = []
    checks = [("dev_char_path", params["dev_char_path"], True)]
    if params.get("udev_rule"):
        checks.append(("udev_rule_path", params["udev_rule_path"], False))
    for option, path, is_dir in checks:
        if os.path.lexists(path) and is_dir and not os.path.isdir(path):
            errors.append("%s %s exists and is not a directory; give the directory for the links" % (option, path))
            continue
        parent = os.path.dirname(path)
        while parent and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            errors.append("%s %s cannot be created: %s is not a directory" % (option, path, parent))
    return errors


def command(ctk, dev_char_path, dry_run=False):
    """The argv of ``nvidia-ctk system create-dev-char-symlinks --create-all`` (``--dev-char-path`` where not the
    default)."""
    argv = [ctk, "system", "create-dev-char-symlinks", "--create-all"]
    if dev_char_path != DEFAULT_DEV_CHAR:
        argv.append("--dev-char-path=%s" % dev_char_path)
    if dry_run:
        argv.append("--dry-run")
    return argv


def rule_text(ctk, dev_char_path):
    """The udev rule's file: NVIDIA's rule, with the nvidia-ctk this node has (and the links' directory where it is not
    /dev/char). None where the nvidia-ctk path cannot stand in a udev RUN key."""
    if _UNSAFE.search(ctk) or not ctk.startswith("/"):
        return None
    return '%s%s, RUN+="%s"\n' % (RULE_HEADER, RULE_MATCH, " ".join(command(ctk, dev_char_path)))


def parse_links(text):
    """[(link, target)] of ``Creating link L => T`` log lines (logrus' text and terminal formats), in order."""
    out = []
    for line in (text or "").splitlines():
        match = _LINK.search(line.strip())
        if match:
            out.append((match.group(1), match.group(2)))
    return out


def link_state(link, target):
    """``right`` (a symlink that resolves to ``target``: absolute or relative to its directory), ``missing`` (nothing
    there), or what is there instead (``-> /dev/null``, ``a file``, ``a directory``)."""
    if not os.path.lexists(link):
        return "missing"
    if os.path.islink(link):
        text = os.readlink(link)
        resolved = os.path.normpath(os.path.join(os.path.dirname(link), text))
        return "right" if resolved == os.path.normpath(target) else "-> %s" % text
    return "a directory" if os.path.isdir(link) else "a file"


def expected_links(run_command, ctk, dev_char_path):
    """[(link, target)] that ``--create-all`` makes on this node (its dry run); DevCharError when it fails."""
    rc, out, err = run_command(command(ctk, dev_char_path, dry_run=True))
    if rc != 0:
        last = [line for line in ((err or "") + "\n" + (out or "")).splitlines() if line.strip()]
        raise DevCharError("`%s` failed (exit %s): %s" % (" ".join(command(ctk, dev_char_path, dry_run=True)), rc,
                                                          last[0] if last else "no output"))
    return parse_links((err or "") + "\n" + (out or ""))


STAMP_SUFFIX = ".gpuops-verified.json"
STAMP_VERSION = 1


def stamp_file(dev_char_path):
    """The stamp's path: beside the links' directory, hidden."""
    return stamp_path(dev_char_path, STAMP_SUFFIX)


def _digest(path):
    """sha256 of a (proc) file's text; None where it is absent or unreadable."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (IOError, OSError):
        return None


def inputs(ctk, dev_char_path, root="/"):
    """What nvidia-ctk's --create-all answer depends on, read without running it (``root``: the node's root, "/" but
    on a simulated node): its binary, the links' directory, the NVIDIA majors (/proc/devices), the MIG capability
    minors, the PCI devices it looks for GPUs among, and the boot."""
    def under(relative):
        return os.path.join(root, relative)
    try:
        pci = sorted(os.listdir(under("sys/bus/pci/devices")))
    except OSError:
        pci = None
    return {"version": STAMP_VERSION, "ctk": binary_identity(ctk), "dev_char_path": dev_char_path,
            "proc_devices": _digest(under("proc/devices")),
            "mig_minors": _digest(under("proc/driver/nvidia-caps/mig-minors")), "pci": pci,
            "boot_id": _digest("/proc/sys/kernel/random/boot_id")}


def stamp_record(ctk, dev_char_path, links, root="/"):
    """The stamp's text for ``links`` (the dry run's answer) under today's inputs."""
    return stamp_text({"inputs": inputs(ctk, dev_char_path, root), "links": [list(pair) for pair in links]})


def stamped_links(ctk, dev_char_path, root="/"):
    """The links a stamp recorded where its inputs equal today's, else None."""
    recorded = load_stamp(stamp_file(dev_char_path))
    if not recorded or recorded.get("inputs") != inputs(ctk, dev_char_path, root):
        return None
    links = recorded.get("links")
    if not isinstance(links, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in links):
        return None
    return [tuple(pair) for pair in links]


def read(run_command, ctk, params, trust_stamp=False, root="/"):
    """The node as the step sees it: {"links": [(link, target)], "missing": [...], "other": [(link, what)],
    "rule_path", "rule" (its text or None), "rule_wanted" (None without udev_rule), "stamped" (the links came from the
    stamp)}. ``trust_stamp``: take the links from a stamp whose inputs are unchanged (gpu_node_plan's check). DevCharError
    on a failed dry run, InputFileError on a rule file that cannot be read."""
    links = stamped_links(ctk, params["dev_char_path"], root) if trust_stamp else None
    stamped = links is not None
    if links is None:
        links = expected_links(run_command, ctk, params["dev_char_path"])
    missing, other = [], []
    for link, target in links:
        state = link_state(link, target)
        if state == "missing":
            missing.append((link, target))
        elif state != "right":
            other.append((link, state))
    state = {"links": links, "missing": missing, "other": other, "rule_path": params["udev_rule_path"],
             "rule": None, "rule_wanted": None, "stamped": stamped}
    if params["udev_rule"]:
        state["rule_wanted"] = rule_text(ctk, params["dev_char_path"])
        if state["rule_wanted"] is None:
            raise DevCharError("nvidia-ctk's path %r cannot stand in a udev RUN key (white space, a quote, %%, $ or \\, "
                               "or not absolute): set nvidia_ctk_path to a plain absolute path, or udev_rule=false"
                               % ctk)
        path = params["udev_rule_path"]
        if os.path.lexists(path):
            state["rule"] = read_text(path, "udev_rule_path")
    return state


def reasons(state):
    """Why the step has work (short reasons; empty: none)."""
    out = []
    if state["missing"]:
        out.append("%d of %d /dev/char links missing (e.g. %s -> %s)" % (
            len(state["missing"]), len(state["links"]), state["missing"][0][0], state["missing"][0][1]))
    if state["rule_wanted"] is not None and state["rule"] != state["rule_wanted"]:
        out.append("udev rule %s %s" % (state["rule_path"], "absent" if state["rule"] is None else "differs"))
    return out


def other_warning(other):
    """The warning for names that are there and point elsewhere (left alone, as nvidia-ctk leaves them)."""
    shown = ", ".join("%s (%s)" % pair for pair in other[:5])
    if len(other) > 5:
        shown += " and %d more" % (len(other) - 5)
    return ("%d /dev/char name(s) of NVIDIA device nodes exist but do not point to the node: %s. They were left alone "
            "(nvidia-ctk never replaces a name either); remove them and run again if they are stale"
            % (len(other), shown))


def check(run_command, ctk, params, root="/"):
    """The node plan's check: reasons (a read that fails is a reason too: the module then fails with it); the links
    from the module's stamp where its inputs are unchanged."""
    try:
        return reasons(read(run_command, ctk, params, trust_stamp=True, root=root))
    except (DevCharError, InputFileError) as exc:
        return [str(exc)]
