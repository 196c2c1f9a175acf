#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mig_mode
short_description: Enable or disable MIG mode on selected NVIDIA GPUs, resetting only the GPUs that need it
version_added: 0.1.0
description:
  - Makes MIG mode (current and pending) on the selected GPUs what you declare, either directly with
    O(enabled) or derived per GPU from a MIG layout (O(layout), O(config_file) with O(config_name), or a named
    layout in O(config_name) such as C(all-balanced) or C(all-disabled)), like C(nvidia-mig-parted apply --mode-only).
  - Reads the current and the pending mode of every GPU. A GPU already in the declared mode is not touched.
  - On Ampere (A100, A30) a mode change stays pending until a GPU reset. The module resets a GPU only when
    O(allow_reset=true), only that GPU (never all GPUs, unlike mig-parted), and only when no process holds
    it. Otherwise it reports per GPU C(reset_required) or C(reboot_required) and why (which processes hold it,
    or that the GPU exposes no reset, as in passthrough VMs).
  - On Hopper and later (H100, H200, GH200, and Blackwell - B200, B300, GB200, RTX PRO 6000 - as NVIDIA's
    tools treat it) no reset is needed; the mode applies at once on an idle GPU, but is lost at reboot (the mig
    role installs a boot-time unit that re-applies it).
  - Disabling MIG first destroys the GPU's compute and GPU instances (NVML refuses to disable MIG while they
    exist); it refuses, before changing anything, if a process runs on one of them.
  - Never fails for a change that only waits for a reset or reboot; check C(reset_required),
    C(reboot_required) and C(pending) in the result.
options:
  gpus:
    description:
      - Which GPUs to manage. C(all), or a list of GPU indices, UUIDs (C(GPU-...)) or model names
        (C(NVIDIA H200) or C(H200)). A selector that matches no GPU is an error.
      - With C(all), GPUs without MIG support are skipped; naming one explicitly with O(enabled=true) is an error.
    type: list
    elements: str
    default: [all]
  enabled:
    description:
      - The MIG mode to set on every selected GPU. Mutually exclusive with O(layout), O(config_file) and O(config_name).
    type: bool
  layout:
    description:
      - Derive the mode from an inline layout (see M(gpuops.nvidia.mig_layout)); each entry's C(mig_enabled).
    type: list
    elements: dict
  config_file:
    description:
      - Derive the mode from a mig-parted v1 config file on the target (C(mig-enabled) of the selected entries).
    type: path
  config_name:
    description:
      - With O(config_file), the config in it. Without, a named layout (C(all-disabled), C(all-enabled),
        C(all-balanced), C(all-<size>) such as C(all-1g), C(all-<profile>) such as C(all-1g.10gb)).
    type: str
  allow_reset:
    description:
      - Reset GPUs whose change is pending and that need a reset (Ampere), one GPU at a time, only the GPUs that
        need it, and only when no process holds them.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports the changes, resets and reboots that would happen; makes no NVML call that changes anything.
  diff_mode:
    support: full
    details: Before and after current/pending mode per GPU.
  idempotent:
    support: full
requirements:
  - On a real GPU host, the Python package C(nvidia-ml-py) and the NVIDIA driver; root.
notes:
  - A GPU reset is blocked by every driver client (nvidia-persistenced, DCGM, the fabric manager, nvidia_drm, the
    device plugin). Stop them first; the R(gpuops.nvidia.mig,ansible_collections.gpuops.nvidia.mig_role) role does
    that for the units you list.
  - With the simulator (C(GPUOPS_SIMULATED_GPUS)), the same rules apply to simulated GPUs.
seealso:
  - module: gpuops.nvidia.mig_layout
  - module: gpuops.nvidia.gpu_info
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.node_lock
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Enable MIG on every MIG-capable GPU, resetting idle Ampere GPUs
  gpuops.nvidia.mig_mode:
    enabled: true
    allow_reset: true
  register: mig

- name: Tell what still waits for a reboot
  ansible.builtin.debug:
    msg: "GPU {{ item.index }}: {{ item.reason }}"
  loop: "{{ mig.gpus | selectattr('reboot_required') }}"

- name: Mode from the same mig-parted file mig_layout uses
  gpuops.nvidia.mig_mode:
    config_file: /etc/nvidia-mig-manager/config.yaml
    config_name: all-1g.10gb

- name: Disable MIG on the H100s only
  gpuops.nvidia.mig_mode:
    gpus: [H100 80GB HBM3]
    enabled: false
"""

RETURN = r"""
changed:
  description: Whether any GPU's mode (current or pending) changed or a GPU was reset.
  returned: always
  type: bool
gpus:
  description: One entry per managed GPU.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: "NVML index.", type: int, returned: always}
    uuid: {description: "GPU UUID.", type: str, returned: always}
    name: {description: "GPU model.", type: str, returned: always}
    architecture: {description: "GPU architecture.", type: str, returned: always}
    desired: {description: "C(Enabled) or C(Disabled).", type: str, returned: always}
    before: {description: "C(current) and C(pending) mode before.", type: dict, returned: always}
    after: {description: "C(current) and C(pending) mode after (predicted in check mode).", type: dict, returned: always}
    actions:
      description: What was (check mode - would be) done, in order (C(destroy_instances), C(set_mig_mode), C(reset_gpu)).
      type: list
      elements: str
      returned: always
    activation_status:
      description: NVML's activation status from SetMigMode (C(SUCCESS), C(IN_USE), C(RESET_REQUIRED)); null if not called.
      type: str
      returned: always
    changed: {description: "Whether this GPU changed.", type: bool, returned: always}
    pending: {description: "The declared mode is not active yet.", type: bool, returned: always}
    reset_required: {description: "A GPU reset would activate it (not done; see reason).", type: bool, returned: always}
    reboot_required: {description: "Only a reboot activates it here (no reset exposed, or the GPU is busy).", type: bool, returned: always}
    reason: {description: "Why the mode is not active yet.", type: str, returned: always}
    processes: {description: "Processes holding the GPU (pid, name).", type: list, elements: dict, returned: always}
pending:
  description: Indices of GPUs whose declared mode is not active yet.
  returned: always
  type: list
  elements: int
reset_required:
  description: Indices of GPUs that need a reset.
  returned: always
  type: list
  elements: int
reboot_required:
  description: Indices of GPUs that need a reboot.
  returned: always
  type: list
  elements: int
skipped_gpus:
  description: GPUs left alone and why (no MIG support).
  returned: always
  type: list
  elements: dict
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import (
    apply_mode,
    desired_modes,
    mode_problems,
    mode_result,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Failure, ModuleRun, Refusal, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock_with_backend


class MigMode(ModuleRun):
    """(node lock) read the GPUs -> plan the modes (_mig_apply.desired_modes, refused with mode_problems) -> apply
    each GPU's mode (_mig_apply.apply_mode, which in check mode only reports) -> after: the result per GPU."""

    argument_spec = dict(
        lock_timeout=dict(type="int"),
        gpus=dict(type="list", elements="str", default=["all"]),
        enabled=dict(type="bool"),
        layout=dict(type="list", elements="dict"),
        config_file=dict(type="path"),
        config_name=dict(type="str"),
        allow_reset=dict(type="bool", default=False),
    )
    module_options = dict(
        mutually_exclusive=[("enabled", "layout"), ("enabled", "config_file"), ("enabled", "config_name"),
                            ("layout", "config_file"), ("layout", "config_name")],
        required_one_of=[("enabled", "layout", "config_file", "config_name")],
    )
    errors = (GpuBackendError,)
    apply_in_check_mode = True          # apply_mode reports in check mode and changes nothing

    def lock(self):
        self.results = []
        return module_lock_with_backend(self, "mig_mode")

    def read(self):
        module = self.module
        # a GPU reset on real GPUs runs nvidia-smi through the module (its failure to start raises, not exits)
        self.backend = get_backend(run_command=lambda argv: module.run_command(argv, handle_exceptions=False))
        try:
            return self.backend.read_all()
        except NvmlError as exc:
            raise self.nvml_failure(exc) from exc
        except GpuBackendError as exc:
            raise Refusal(str(exc), gpus=[]) from exc

    def plan(self, current):
        by_index = dict((g["index"], g) for g in current["gpus"])
        try:
            want, self.skipped = desired_modes(current["gpus"], self.params)
        except MigLayoutError as exc:
            raise Refusal(str(exc)) from exc
        problem = mode_problems(by_index, want, self.params["allow_reset"])
        if problem:
            raise Refusal(problem)
        self.by_index = by_index
        return want

    def apply(self, current, changes):
        try:
            for index in sorted(changes):
                self.results.append(apply_mode(self.backend, self.by_index[index], changes[index],
                                               self.params["allow_reset"], check_mode=self.module.check_mode))
        except NvmlError as exc:
            raise self.nvml_failure(exc) from exc
        except GpuBackendError as exc:
            raise Failure(str(exc), gpus=self.results, changed=any(r["changed"] for r in self.results)) from exc

    def after(self, current, changes):
        results = self.results
        self.result = mode_result(results, self.skipped)
        self.set_diff(dict(("gpu %d" % r["index"], r["before"]) for r in results),
                      dict(("gpu %d" % r["index"], r["after"]) for r in results))

    def nvml_failure(self, exc):
        """The failure for an NVML error part way: what was carried out, and whether it changed a GPU."""
        return Failure("NVML error %s: %s. Re-run to continue from the current state." % (exc.name, exc),
                       gpus=self.results, changed=any(r["changed"] for r in self.results))


def main():
    run_module(MigMode)


if __name__ == "__main__":
    main()
