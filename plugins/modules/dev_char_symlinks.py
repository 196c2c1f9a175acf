#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dev_char_symlinks
short_description: Keep the /dev/char links of the NVIDIA device nodes, and the udev rule that makes them at boot
version_added: 0.3.0
description:
  - runc with systemd's cgroup driver allows a container's devices by their C(/dev/char/MAJOR:MINOR) paths, which the
    NVIDIA driver does not create; after a C(systemctl daemon-reload) a container whose runtime is not in CDI mode
    loses its GPUs ("Failed to initialize NVML - Unknown Error", NVIDIA/nvidia-container-toolkit issue 48).
  - Reads the links NVIDIA's C(nvidia-ctk system create-dev-char-symlinks --create-all) would make (its C(--dry-run)),
    and runs the command only where one is missing. A link is right when it resolves to its node (udev's relative
    links count). A name that is there and points elsewhere is left alone with a warning (nvidia-ctk never replaces
    one either).
  - With O(udev_rule), keeps NVIDIA's udev rule that runs the command again whenever the driver binds a GPU, so the
    links come back after a reboot (C(/dev) is rebuilt at boot).
  - In check mode nothing is written; RV(created) lists the links that would be made.
  - Outside check mode it records the links the dry run named, with what they depend on (nvidia-ctk, the NVIDIA
    majors in C(/proc/devices), the MIG capability minors, the PCI devices, the boot), in a hidden stamp beside
    O(dev_char_path) (C(/dev/.char.gpuops-verified.json)). gpuops.nvidia.gpu_node_plan takes the links from a
    stamp whose inputs are unchanged instead of running nvidia-ctk on every converged re-run; this module always
    runs the dry run. Deleting the stamp only makes the next plan run the dry run.
options:
  dev_char_path:
    description: The directory of the links (nvidia-ctk's C(--dev-char-path)).
    type: path
    default: /dev/char
  udev_rule:
    description: Keep the udev rule file O(udev_rule_path).
    type: bool
    default: true
  udev_rule_path:
    description: The udev rule file (NVIDIA suggests C(/lib/udev/rules.d/71-nvidia-dev-char.rules)).
    type: path
    default: /lib/udev/rules.d/71-nvidia-dev-char.rules
  nvidia_ctk_path:
    description: The nvidia-ctk program; found in PATH, /usr/bin, /usr/local/bin or /usr/sbin when not set.
    type: path
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
  - nvidia-ctk (NVIDIA Container Toolkit 1.12 or newer) and a loaded NVIDIA driver.
seealso:
  - module: gpuops.nvidia.runtime_mode
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: /dev/char links of the NVIDIA nodes, kept after reboots by NVIDIA's udev rule
  gpuops.nvidia.dev_char_symlinks:
"""

RETURN = r"""
links:
  description: How many links C(--create-all) makes on this node (its nodes and their MIG capabilities).
  returned: success
  type: int
  sample: 278
created:
  description: The links made (in check mode, that would be made), as C(LINK -> TARGET).
  returned: success
  type: list
  elements: str
  sample: ["/dev/char/195:0 -> /dev/nvidia0"]
other:
  description: Names that exist and do not point to their node (left alone), as C(LINK (what is there)).
  returned: success
  type: list
  elements: str
udev_rule_changed:
  description: Whether the udev rule file was (in check mode, would be) written.
  returned: success
  type: bool
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import CTK_PACKAGE
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    LiveFileError, ToolNotFound, require_tool, write_atomic)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _dev_char
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._containerd_distribution import node_root


def _lines(pairs):
    return "".join("%s -> %s\n" % pair for pair in pairs)


class DevCharSymlinks(ModuleRun):
    """validate (the paths) -> read (nvidia-ctk's dry run, the links, the rule) -> plan (missing links, the rule) ->
    apply (the command, the rule written atomically; read back)."""

    argument_spec = _dev_char.ARGUMENT_SPEC
    errors = (LiveFileError,)

    def validate(self):
        return _dev_char.path_problems(self.params)

    def read(self):
        p = self.params
        try:
            self.ctk = require_tool(self.module.get_bin_path, p, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
        except ToolNotFound as exc:
            self.refuse(str(exc))
        problems = _dev_char.place_problems(p)
        if problems:
            self.refuse("; ".join(problems))
        try:
            state = _dev_char.read(self.module.run_command, self.ctk, p)
        except (_dev_char.DevCharError, InputFileError) as exc:
            self.refuse(str(exc))
        if state["other"]:
            self.module.warn(_dev_char.other_warning(state["other"]))
        self.result.update(links=len(state["links"]), created=[], udev_rule_changed=False,
                           other=["%s (%s)" % pair for pair in state["other"]])
        return state

    def plan(self, current):
        state = current
        rule = state["rule_wanted"] is not None and state["rule"] != state["rule_wanted"]
        if not state["missing"] and not rule:
            return None
        self.result.update(created=["%s -> %s" % pair for pair in state["missing"]], udev_rule_changed=rule)
        right = [pair for pair in state["links"] if pair not in state["missing"] and pair[0] not in
                 dict(state["other"])]
        before = _lines(right) + ("\n# %s\n%s" % (state["rule_path"], state["rule"] or "") if rule else "")
        after = _lines(right + state["missing"]) + ("\n# %s\n%s" % (state["rule_path"], state["rule_wanted"])
                                                    if rule else "")
        self.set_diff(before, after, header=self.params["dev_char_path"])
        return {"links": bool(state["missing"]), "rule": rule}

    def apply(self, current, changes):
        state = current
        p = self.params
        if changes["links"]:
            rc, out, err = self.module.run_command(_dev_char.command(self.ctk, p["dev_char_path"]))
            still = [pair for pair in state["missing"] if _dev_char.link_state(*pair) != "right"]
            if rc != 0:
                self.fail("`%s` failed (exit %s): %s" % (" ".join(_dev_char.command(self.ctk, p["dev_char_path"])), rc,
                                                         (err or out).strip()),
                          changed=len(still) < len(state["missing"]))
            if still:
                self.fail("nvidia-ctk ran and %d link(s) are still not there (e.g. %s -> %s)"
                          % (len(still), still[0][0], still[0][1]), changed=True)
        if changes["rule"]:
            write_atomic(self.module, p["udev_rule_path"], state["rule_wanted"])

    def after(self, current, changes):
        """Outside check mode, the links the dry run named and what they depend on, for gpu_node_plan's next check
        (node/_dev_char's stamp; not a change: the links and the rule are the node's state)."""
        if self.module.check_mode:
            return
        p = self.params
        path = _dev_char.stamp_file(p["dev_char_path"])
        text = _dev_char.stamp_record(self.ctk, p["dev_char_path"], current["links"], node_root())
        try:
            with open(path) as handle:
                if handle.read() == text:
                    return
        except (IOError, OSError):
            pass
        write_atomic(self.module, path, text)


def main():
    run_module(DevCharSymlinks)


if __name__ == "__main__":
    main()
