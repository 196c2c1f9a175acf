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
    choices: [reboot, add_process, remove_process, inject_fault, set_reset_supported, show]
  index:
    description: GPU index, for C(add_process) and C(set_reset_supported).
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

- name: The third NVML call from now fails
  gpuops.nvidia.gpu_simulator:
    action: inject_fault
    after_calls: 3
    error: INSUFFICIENT_RESOURCES
"""

RETURN = r"""
boot_id:
  description: The simulated boot counter after a reboot.
  returned: action=reboot
  type: int
state:
  description: The whole simulator state document.
  returned: action=show
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu import (
    ENV_STATE,
    GpuBackendError,
    NvmlError,
    simulated,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu_backend import get_backend

REQUIRED = {
    "add_process": ["index", "pid"],
    "remove_process": ["pid"],
    "inject_fault": ["error"],
    "set_reset_supported": ["index", "supported"],
}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True,
                        choices=["reboot", "add_process", "remove_process", "inject_fault",
                                 "set_reset_supported", "show"]),
            index=dict(type="int"), pid=dict(type="int"), name=dict(type="str", default="workload"),
            used_memory_mib=dict(type="int", default=0), gi_id=dict(type="int"), ci_id=dict(type="int"),
            after_calls=dict(type="int", default=1), error=dict(type="str"), call=dict(type="str"),
            supported=dict(type="bool"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not simulated():
        module.fail_json(msg="gpu_simulator acts only on simulated GPUs and %s is not set on this host" % ENV_STATE)
    missing = [k for k in REQUIRED.get(p["action"], []) if p[k] is None]
    if missing:
        module.fail_json(msg="action=%s needs %s" % (p["action"], ", ".join(missing)))
    try:
        sim = get_backend()
        if p["action"] == "show":
            module.exit_json(changed=False, state=sim.raw_state())
        if module.check_mode:
            module.exit_json(changed=True, msg="would %s" % p["action"])
        result = {}
        if p["action"] == "reboot":
            result["boot_id"] = sim.reboot()
        elif p["action"] == "add_process":
            sim.add_process(p["index"], p["pid"], p["name"], p["used_memory_mib"], p["gi_id"], p["ci_id"])
        elif p["action"] == "remove_process":
            sim.remove_process(p["pid"])
        elif p["action"] == "inject_fault":
            sim.inject_fault(p["after_calls"], p["error"], p["call"])
        elif p["action"] == "set_reset_supported":
            sim.set_reset_supported(p["index"], p["supported"])
    except (GpuBackendError, NvmlError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
