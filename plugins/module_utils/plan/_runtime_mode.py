# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-container-runtime's mode in its config.toml: what it is, and whether it must change (PRIVATE to
gpuops.nvidia). No I/O: runtime_mode (the module) edits the file with nvidia-ctk on a private copy; gpu_node_plan
reads it and decides here.

Facts (NVIDIA/nvidia-container-toolkit v1.20.0, commit 5505e2f9; tests/fixtures/nvidia-ctk/README.md): the key is
``mode`` of the table ``[nvidia-container-runtime]`` (api/config/v1/runtime.go); a config without it, or no config
file at all, means ``auto`` (the default config, ``nvidia-ctk config default``). ``nvidia-ctk config --in-place --set
nvidia-container-runtime.mode=<m>`` does not check the value, rewrites the whole file in place (comments dropped,
keys sorted, unset defaults as ``#key = value`` lines) even when nothing changes, and creates a missing file from
the defaults: so it runs only on a private copy, and only when the mode differs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (
    ContainerdConfigError, parse_toml)

MODES = ("auto", "cdi", "legacy")
DEFAULT_MODE = "auto"
TABLE = "nvidia-container-runtime"
KEY = "%s.mode" % TABLE

ARGUMENT_SPEC = dict(
    mode=dict(type="str", choices=list(MODES), required=True),
    config_path=dict(type="path", default="/etc/nvidia-container-runtime/config.toml"),
    nvidia_ctk_path=dict(type="path"),
    backup=dict(type="bool", default=False),
)


def path_problem(path):
    """What is wrong with config_path (a message), or None."""
    if "\x00" in path or not path.startswith("/") or path.endswith("/"):
        return "config_path %r must be the absolute path of a file, without a NUL character" % path
    return None


class RuntimeModeError(Exception):
    """A config that cannot be read as TOML, or a result that is not what was asked; ``str()`` says which."""


def current_mode(text, path):
    """The mode a config's text sets (``auto`` when the file is absent or does not set it); RuntimeModeError for a
    config that is not TOML, or a mode that is not a string."""
    if text is None:
        return DEFAULT_MODE
    try:
        tree = parse_toml(text, path)
    except ContainerdConfigError as exc:
        raise RuntimeModeError("%s; it is left untouched" % exc)
    table = tree.get(TABLE, {})
    mode = table.get("mode", DEFAULT_MODE) if isinstance(table, dict) else None
    if not isinstance(mode, str):
        raise RuntimeModeError("%s: [%s] mode is not a string (%r); it is left untouched" % (path, TABLE, mode))
    return mode


def mode_reason(text, path, desired):
    """Why the runtime mode step has work (a short reason), or None."""
    try:
        mode = current_mode(text, path)
    except RuntimeModeError as exc:
        return str(exc)
    return None if mode == desired else "nvidia-container-runtime mode %s -> %s" % (mode, desired)
