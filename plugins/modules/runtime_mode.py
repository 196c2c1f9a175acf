#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: runtime_mode
short_description: Set nvidia-container-runtime's mode (auto, cdi, legacy) with nvidia-ctk's own config editing
version_added: 0.3.0
description:
  - Reads C(mode) of C([nvidia-container-runtime]) in the runtime's config (C(auto) when the file or the key is
    absent). Only when it differs from O(mode), runs C(nvidia-ctk config --in-place --set
    nvidia-container-runtime.mode=<mode>) on a private copy (nvidia-ctk rewrites whatever file it is given, in place
    and not atomically, dropping its comments), checks that the copy reads back with that mode, and replaces the
    config atomically. An unchanged mode leaves the file untouched, comments included.
  - In check mode the copy is still made and edited in private, so the diff is nvidia-ctk's real result.
options:
  mode:
    description:
      - V(auto) - the runtime picks (CDI where a spec and CDI device requests are there, else legacy).
      - V(cdi) - devices only from CDI specs (keep the spec true with M(gpuops.nvidia.cdi_spec)).
      - V(legacy) - the nvidia-container-runtime-hook path (no CDI).
    type: str
    choices: [auto, cdi, legacy]
    required: true
  config_path:
    description: The runtime's config file.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  nvidia_ctk_path:
    description: The nvidia-ctk program; found in PATH, /usr/bin, /usr/local/bin or /usr/sbin when not set.
    type: path
  backup:
    description: Keep the replaced config as C(<config_path>.<pid>.<timestamp>~).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
requirements:
  - nvidia-ctk (NVIDIA Container Toolkit) with C(config --set).
seealso:
  - module: gpuops.nvidia.cdi_spec
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The runtime injects devices from CDI specs only
  gpuops.nvidia.runtime_mode:
    mode: cdi
"""

RETURN = r"""
mode:
  description: The mode the config sets after the run (in check mode, would set).
  returned: success
  type: str
previous_mode:
  description: The mode the config set before.
  returned: success
  type: str
backup_file:
  description: The backup of the replaced config, with O(backup).
  returned: when a backup was made
  type: str
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import CTK_PACKAGE
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    LiveFileError, ToolNotFound, read_live, require_tool, write_atomic)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    ModuleRun, Refusal, nothing_changed, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._nvidia_ctk import NvidiaCtkRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._runtime_mode import (
    ARGUMENT_SPEC, KEY, RuntimeModeError, current_mode, path_problem)


class RuntimeMode(ModuleRun):
    """validate (the path, nvidia-ctk) -> read (the live config's mode) -> plan (the mode differs: nvidia-ctk's edit
    of a private copy) -> apply (the atomic write, read back)."""

    argument_spec = ARGUMENT_SPEC
    errors = (LiveFileError,)

    def validate(self):
        problem = path_problem(self.params["config_path"])
        return [problem] if problem else []

    def read(self):
        p = self.params
        try:
            self.ctk = require_tool(self.module.get_bin_path, p, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
        except ToolNotFound as exc:
            self.refuse(str(exc))
        live = read_live(p["config_path"], "config_path")
        try:
            before = current_mode(live, p["config_path"])
        except RuntimeModeError as exc:
            self.refuse(str(exc))
        self.result.update(mode=p["mode"], previous_mode=before, config_path=p["config_path"])
        return live, before

    def plan(self, current):
        live, before = current
        path, mode = self.params["config_path"], self.params["mode"]
        if before == mode:
            return None
        after = candidate(NvidiaCtkRunner(self.module.run_command, self.ctk), live, path, mode)
        self.set_diff(live or "", after, header=path)
        return after

    def apply(self, current, changes):
        path = self.params["config_path"]
        if self.params["backup"] and current[0] is not None:
            self.result["backup_file"] = self.module.backup_local(path)
        write_atomic(self.module, path, changes)
        if read_live(path, "written config") != changes:
            self.fail("%s does not read back as written" % path, changed=True)


def main():
    run_module(RuntimeMode)


def candidate(runner, live, path, mode):
    """nvidia-ctk's edit of a private copy of the config (the defaults when there is none), checked to set ``mode``;
    a Refusal (nothing changed) when nvidia-ctk fails or its edit does not set ``mode``."""
    with runner.private_directory() as tmp:
        copy = os.path.join(tmp, "config.toml")
        if live is not None:
            with open(copy, "w") as handle:
                handle.write(live)
        rc, out, err = runner.command("config", "--in-place", "--set", "%s=%s" % (KEY, mode), "--config=%s" % copy)
        if rc != 0 or not os.path.isfile(copy):
            raise Refusal(nothing_changed("`nvidia-ctk config --set %s=%s` failed on a private copy of %s (exit %s): %s"
                                          % (KEY, mode, path, rc, (err or out).strip())))
        with open(copy) as handle:
            text = handle.read()
    try:
        got = current_mode(text, "nvidia-ctk's edit of %s" % path)
    except RuntimeModeError as exc:
        raise Refusal(nothing_changed(str(exc))) from exc
    if got != mode:
        raise Refusal(nothing_changed("nvidia-ctk's edit of %s sets mode %r, not %r: refused" % (path, got, mode)))
    return text


if __name__ == "__main__":
    main()
