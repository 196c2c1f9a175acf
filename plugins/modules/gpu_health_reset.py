#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_health_reset
short_description: Reset the idle GPUs whose blocking health findings a GPU reset clears, and read their health again
version_added: 0.3.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Reads every GPU's health (as M(gpuops.nvidia.gpu_info) does, with O(health_policy)) and picks the GPUs with a
    blocking finding that a GPU reset clears - a pending row remap (Ampere and later), a pending page retirement
    (before Ampere). NVML's nvmlDeviceGetRemappedRows says of a pending remap that a reset is required to actually
    remap the row (docs/health.md, "The remediation").
  - Resets each such GPU that is idle - no process NVML lists on it, no process holding its device file, MIG mode
    disabled, a reset exposed (not a passthrough VM's GPU) - through the collection's one reset path (the one
    M(gpuops.nvidia.mig_mode) uses - C(nvidia-smi --gpu-reset -i <bus id>) on a real node), then reads the health
    again and returns it.
  - A GPU that is not idle is not reset; RV(not_reset) says why, naming the processes and holders (PID, command, and
    the pod where the process's cgroup names one).
  - Only GPUs with such a finding are touched; a node with none changes nothing. The gpuops.nvidia.gpu_node role runs
    this module only with the user's consent (C(gpu_node_health_reset)), with the node cordoned and its GPU pods
    paused.
  - With the environment variable C(GPUOPS_SIMULATED_GPUS) set, works on simulated GPUs.
options:
  health_policy:
    description:
      - "What each health finding kind does, C(block), C(warn) or C(ignore), over the defaults (docs/health.md). A
        finding the policy does not block is not a reason to reset."
      - An unknown kind or action is an error that names the valid ones.
    type: dict
    default: {}
  gpus:
    description:
      - The GPU indexes that may be reset; the others are not, whatever their findings. All GPUs when not given.
    type: list
    elements: int
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.node_lock
attributes:
  check_mode:
    support: full
    details: Reads the GPUs and reports which it would reset and why the others not; makes no GPU call but reads.
  diff_mode:
    support: full
  idempotent:
    support: full
    details: Once reset, a GPU's pending finding is gone and a second run resets nothing.
notes:
  - A reset ends every context on the GPU. This module refuses a GPU that NVML or /proc shows in use, but the caller
    must keep new work off it between the read and the reset (the gpu_node role cordons the node and pauses its GPU
    DaemonSet pods first).
  - Where the pending finding is still there after the reset, the GPU keeps its blocking finding in RV(health); reboot
    the node.
"""

EXAMPLES = r"""
- name: Reset the idle GPUs with a pending row remap (the node already cordoned and drained)
  gpuops.nvidia.gpu_health_reset:
  register: reset

- name: Show what was not reset, and why
  ansible.builtin.debug:
    msg: "{{ reset.not_reset | map(attribute='reason') | list }}"
  when: reset.not_reset | length > 0

- name: Only GPU 3 may be reset
  gpuops.nvidia.gpu_health_reset:
    gpus: [3]
"""

RETURN = r"""
resets:
  description: The GPUs that were reset (in check mode, would be), with the findings the reset clears.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: GPU index., type: int}
    pci_bus_id: {description: Its PCI bus id as NVML writes it., type: str}
    clears: {description: The blocking finding kinds a reset clears on it., type: list, elements: str}
    cleared:
      description: Whether the health read after the reset no longer has them (null in check mode).
      type: bool
  sample: [{"index": 3, "pci_bus_id": "00000000:47:00.0", "clears": ["row_remap_pending"], "cleared": true}]
not_reset:
  description: The GPUs with such a finding that were not reset, and why (C(reason) names the GPU, its bus id and what
    stops the reset - the processes and holders by PID and command).
  returned: always
  type: list
  elements: dict
  sample: [{"index": 2, "pci_bus_id": "00000000:19:00.0", "clears": ["row_remap_pending"],
            "reason": "GPU 2 (00000000:19:00.0) not reset - in use by 1 process(es) NVML lists: PID 4242 python; the
            GPU keeps its blocking finding"}]
health:
  description: The GPUs' health after the resets (before them in check mode, and where nothing was reset), in
    M(gpuops.nvidia.gpu_info)'s RV(gpuops.nvidia.gpu_info#module:health) shape without each GPU's read fields
    (C(verdict), C(healthy), C(blocking), C(warnings), C(findings), C(kernel_log), C(gate)).
  returned: always
  type: dict
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_reset
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend, module_runner
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
    HealthPolicyError, summary, validate_policy)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock_with_backend


class GpuHealthReset(ModuleRun):
    """(node lock) read the health -> plan (_health_reset) -> reset the idle GPUs -> read the health again."""

    argument_spec = dict(
        lock_timeout=dict(type="int"),
        health_policy=dict(type="dict", default={}),
        gpus=dict(type="list", elements="int"),
    )

    def validate(self):
        errors = []
        try:
            self.policy = validate_policy(self.params["health_policy"] or None)
        except HealthPolicyError as exc:
            errors.append(str(exc))
        bad = [g for g in self.params["gpus"] or [] if not 0 <= g <= 1023]
        if bad:
            errors.append("gpus: %s are not GPU indexes (0 to 1023)" % ", ".join(str(g) for g in bad))
        return errors

    def lock(self):
        return module_lock_with_backend(self, "gpu_health_reset")

    def _health(self):
        return summary(self.backend.read_health(), self.policy, gpus=False)

    def read(self):
        module = self.module
        try:
            self.backend = get_backend(run_command=module_runner(module))
            health = self._health()
        except (GpuBackendError, NvmlError) as exc:
            self.fail("cannot read the GPUs' health: %s" % exc)
        only = self.params["gpus"]
        wanted = _health_reset.candidates(health["findings"], None if only is None else set(only))
        gpus, holders = {}, {}
        for index in sorted(wanted):
            try:
                gpus[index] = self.backend.read_gpu(index)
                holders[index] = self.backend.device_holders(index)
            except (GpuBackendError, NvmlError, OSError) as exc:
                module.warn("GPU %d could not be read before its reset: %s" % (index, exc))
                gpus.pop(index, None)
        return {"health": health, "gpus": gpus, "holders": holders}

    def plan(self, current):
        health = current["health"]
        only = self.params["gpus"]
        decisions = _health_reset.plan(health["findings"], current["gpus"], current["holders"],
                                       None if only is None else set(only), own_pid=os.getpid())
        self.decisions = decisions
        self.result.update(
            resets=[dict(index=d["index"], pci_bus_id=d["pci_bus_id"], clears=d["clears"], cleared=None)
                    for d in decisions if d["reset"]],
            not_reset=[dict(index=d["index"], pci_bus_id=d["pci_bus_id"], clears=d["clears"], reason=d["reason"])
                       for d in decisions if not d["reset"]],
            health=health)
        for entry in self.result["not_reset"]:
            self.module.warn(entry["reason"])
        self.set_diff(_health_reset.blocking_view(health["findings"]),
                      _health_reset.predicted(health["findings"], decisions), header="blocking health findings")
        return self.result["resets"]

    def apply(self, current, changes):
        done = []
        for entry in changes:
            try:
                self.backend.reset_gpu(entry["index"])
            except (GpuBackendError, NvmlError) as exc:
                self.fail("GPU %d (%s): the reset failed: %s%s" % (
                    entry["index"], entry["pci_bus_id"], exc,
                    "; reset before it: GPU %s" % ", ".join(str(i) for i in done) if done else "; no GPU was reset"),
                    changed=bool(done))
            done.append(entry["index"])
        try:
            after = self._health()
        except (GpuBackendError, NvmlError) as exc:
            self.fail("GPU(s) %s were reset but their health cannot be read again: %s" % (
                ", ".join(str(i) for i in done), exc), changed=True)
        still = _health_reset.candidates(after["findings"])
        for entry in changes:
            entry["cleared"] = entry["index"] not in still
            if not entry["cleared"]:
                self.module.warn("GPU %d (%s): %s still there after the reset; reboot the node" % (
                    entry["index"], entry["pci_bus_id"], ", ".join(still[entry["index"]])))
        self.result["health"] = after
        self.set_diff(_health_reset.blocking_view(current["health"]["findings"]),
                      _health_reset.blocking_view(after["findings"]), header="blocking health findings")


def main():
    run_module(GpuHealthReset)


if __name__ == "__main__":
    main()
