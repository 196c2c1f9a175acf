#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_simulator
short_description: Drive the simulated GPUs of a lab node (reboot, processes, injected faults)
version_added: 0.1.0
description:
  - Acts on the simulated GPUs named by C(GPUOPS_SIMULATED_GPUS) so that playbooks and tests can rehearse
    what happens on real hardware, such as a host reboot (instances lost, Hopper and Blackwell lose MIG mode,
    compute mode back to Default), a workload holding a GPU or a MIG device, a passthrough VM without per-GPU
    reset, or an NVML call failing in the middle of an apply.
  - Refuses to run when C(GPUOPS_SIMULATED_GPUS) is not set, so it can never touch real GPUs.
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [reboot, add_process, remove_process, inject_fault, set_reset_supported, show, inject_health, add_xid,
              set_kernel_log_readable]
  index:
    description: GPU index, for C(add_process), C(set_reset_supported), C(inject_health) and C(add_xid).
    type: int
  pid:
    description: Process id, for C(add_process) and C(remove_process).
    type: int
  name:
    description: Process name, for C(add_process).
    type: str
    default: workload
  used_memory_mib:
    description: GPU memory the process uses, for C(add_process).
    type: int
    default: 0
  gi_id:
    description: GPU instance the process runs in (MIG-enabled GPUs), for C(add_process).
    type: int
  ci_id:
    description: Compute instance the process runs in (MIG-enabled GPUs), for C(add_process).
    type: int
  after_calls:
    description: For C(inject_fault), the mutating NVML call (counting from the next one as 1) that fails.
    type: int
    default: 1
  error:
    description: For C(inject_fault), the NVML error name, e.g. C(IN_USE) or C(INSUFFICIENT_RESOURCES).
    type: str
  call:
    description: For C(inject_fault), count only calls of this name (e.g. C(create_gpu_instance)).
    type: str
  supported:
    description: For C(set_reset_supported), whether a per-GPU reset is exposed.
    type: bool
  fault:
    description:
      - For C(inject_health), the health fault to set on GPU O(index) (see docs/health.md), one of C(lost),
        C(missing) (NVML does not list the GPU; its PCI function stays in the simulated host tree), C(ecc_mode),
        C(ecc_volatile_corrected), C(ecc_volatile_uncorrected), C(ecc_aggregate_corrected),
        C(ecc_aggregate_uncorrected), C(row_remap_pending), C(row_remap_failure), C(remapped_rows_corrected),
        C(remapped_rows_uncorrected), C(retired_pages_pending), C(retired_pages_single_bit),
        C(retired_pages_double_bit), C(nvlink_down), C(nvlink_replay), C(nvlink_recovery), C(nvlink_crc_flit),
        C(nvlink_crc_data), C(pcie_generation), C(pcie_width), C(clock_events), C(temperature), C(fabric_state),
        C(fabric_status), C(fabric_degraded), C(fabric_route_recovery), C(fabric_route_unhealthy),
        C(fabric_access_timeout_recovery), C(fabric_incorrect_configuration), C(fabric_clique_id) (a tray in another
        clique), C(fabric_cluster_uuid) (a tray of another NVLink domain), C(hang) (the GPU's health read blocks
        until the reading process is killed, as a GPU whose driver never answers; M(gpuops.nvidia.gpu_health_read)'s deadline ends it), or
        C(healthy) (back to the healthy defaults).
      - A fault on what the GPU answers NOT_SUPPORTED for (an NVLink of a PCIe card, page retirement on Ampere and
        later) is refused.
    type: str
  value:
    description:
      - For C(inject_health), the fault's value (true/false, a count, a generation or width, a list of clock event
        reasons, a fabric state or status, a clique id, a cluster UUID, an incorrect configuration's name).
    type: raw
    default: true
  link:
    description: For the C(nvlink_*) faults of C(inject_health), the link number.
    type: int
  code:
    description: For C(add_xid), the Xid code the driver logs for GPU O(index).
    type: int
  xid_text:
    description: For C(add_xid), the text after the code (default C(simulated Xid <code>)). (Not C(message), which
      Ansible keeps for itself.)
    type: str
  readable:
    description: For C(set_kernel_log_readable), whether the kernel log can be read.
    type: bool
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Events such as a reboot happen each time they are asked for.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Reboot the simulated node
  gpuops.nvidia.gpu_simulator:
    action: reboot

- name: A training job holds GPU 2
  gpuops.nvidia.gpu_simulator:
    action: add_process
    index: 2
    pid: 4242
    name: train.py

- name: GPU 3 has a row remap pending
  gpuops.nvidia.gpu_simulator:
    action: inject_health
    index: 3
    fault: row_remap_pending

- name: GPU 3 fell off the bus (a lost GPU and its Xid line)
  gpuops.nvidia.gpu_simulator:
    action: "{{ item.action }}"
    index: 3
    fault: "{{ item.fault | default(omit) }}"
    code: "{{ item.code | default(omit) }}"
    xid_text: "{{ item.xid_text | default(omit) }}"
  loop:
    - {action: inject_health, fault: lost}
    - {action: add_xid, code: 79, xid_text: GPU has fallen off the bus.}

- name: The third NVML call from now fails
  gpuops.nvidia.gpu_simulator:
    action: inject_fault
    after_calls: 3
    error: INSUFFICIENT_RESOURCES
"""

RETURN = r"""
line:
  description: The kernel-log line the simulated driver logged.
  returned: action=add_xid
  type: str
  sample: "NVRM: Xid (PCI:0000:47:00): 79, GPU has fallen off the bus."
boot_id:
  description: The simulated boot counter after a reboot.
  returned: action=reboot
  type: int
state:
  description: The whole simulator state document.
  returned: action=show
  type: dict
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    ENV_STATE,
    GpuBackendError,
    NvmlError,
    simulated,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Done, Failure, ModuleRun, run_module)

REQUIRED = {
    "add_process": ["index", "pid"],
    "remove_process": ["pid"],
    "inject_fault": ["error"],
    "set_reset_supported": ["index", "supported"],
    "inject_health": ["index", "fault"],
    "add_xid": ["index", "code"],
    "set_kernel_log_readable": ["readable"],
}


def _value(value):
    """A templated value arrives as text: "8" is 8, "true"/"no" are booleans; anything else is kept as it is."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and text.isascii():
            return int(text)
        if text.lower() in ("true", "yes", "on", "false", "no", "off"):
            return text.lower() in ("true", "yes", "on")
    return value


class SimulatorControl(ModuleRun):
    """One test hook of the simulator: validate (refuses real GPUs before anything) -> read the simulator (action=show:
    its state is the answer) -> plan: the action -> apply it (check mode: reported as "would <action>")."""

    argument_spec = dict(
        action=dict(type="str", required=True,
                    choices=["reboot", "add_process", "remove_process", "inject_fault",
                             "set_reset_supported", "show", "inject_health", "add_xid",
                             "set_kernel_log_readable"]),
        index=dict(type="int"), pid=dict(type="int"), name=dict(type="str", default="workload"),
        used_memory_mib=dict(type="int", default=0), gi_id=dict(type="int"), ci_id=dict(type="int"),
        after_calls=dict(type="int", default=1), error=dict(type="str"), call=dict(type="str"),
        supported=dict(type="bool"), fault=dict(type="str"), value=dict(type="raw", default=True),
        link=dict(type="int"), code=dict(type="int"), xid_text=dict(type="str"), readable=dict(type="bool"),
    )
    errors = (GpuBackendError, NvmlError)

    def validate(self):
        p = self.params
        # (in the module's own words, which its tests and the bad-input corpus assert)
        if not simulated():
            raise Failure("gpu_simulator acts only on simulated GPUs and %s is not set on this host" % ENV_STATE)
        missing = [k for k in REQUIRED.get(p["action"], []) if p[k] is None]
        if missing:
            raise Failure("action=%s needs %s" % (p["action"], ", ".join(missing)))
        return []

    def read(self):
        self.sim = get_backend()
        if self.params["action"] == "show":
            raise Done(changed=False, state=self.sim.raw_state())
        return None

    def plan(self, current):
        if self.module.check_mode:
            self.result["msg"] = "would %s" % self.params["action"]
        return self.params["action"]

    def failing(self, exc):
        # the simulator checks an action's input before it writes its state (one write, under its lock): an action it
        # refuses changed nothing
        self.result["changed"] = False

    def apply(self, current, changes):
        p, sim = self.params, self.sim
        if changes == "reboot":
            self.result["boot_id"] = sim.reboot()
        elif changes == "add_process":
            sim.add_process(p["index"], p["pid"], p["name"], p["used_memory_mib"], p["gi_id"], p["ci_id"])
        elif changes == "remove_process":
            sim.remove_process(p["pid"])
        elif changes == "inject_fault":
            sim.inject_fault(p["after_calls"], p["error"], p["call"])
        elif changes == "set_reset_supported":
            sim.set_reset_supported(p["index"], p["supported"])
        elif changes == "inject_health":
            sim.inject_health(p["index"], p["fault"], _value(p["value"]), p["link"])
        elif changes == "add_xid":
            self.result["line"] = sim.add_xid(p["index"], p["code"], p["xid_text"])
        elif changes == "set_kernel_log_readable":
            sim.set_kernel_log_readable(p["readable"])


def main():
    run_module(SimulatorControl)


if __name__ == "__main__":
    main()
