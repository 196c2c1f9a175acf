# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: node_step_gates
short_description: Which of the gpuops.nvidia.gpu_node role's steps run on a node, from its node plan
version_added: 0.3.0
description:
  - From the result of M(gpuops.nvidia.gpu_node_plan) and whether the controller manages each node step on this
    node, one mapping of step name to whether it runs, and C(disruptive) - whether a disruptive step (MIG) changes
    the GPUs, so that the node is quiesced for it.
  - A step runs where it is managed (for MIG, also where the plan found it managed,
    RV(gpuops.nvidia.gpu_node_plan#module:mig.managed)) and the plan found work for it, or, for compute mode and
    the CDI spec, where a disruptive step changes the GPUs (a GPU reset returns the compute mode to Default and
    changes the MIG devices the spec lists), or, for containerd's runtime, the runtime's mode and the CDI spec, where
    the NVIDIA Container Toolkit's step runs (it installs the nvidia-ctk they run) - except in check mode where the
    toolkit is not installed yet (RV(gpuops.nvidia.gpu_node_plan#module:installs)): they cannot be planned then.
  - The steps and these rules are the collection's step registry (C(module_utils/_node_steps.py)), the same one
    gpu_node_plan builds its options from.
positional: _input, managed, check_mode
options:
  _input:
    description: The registered result of M(gpuops.nvidia.gpu_node_plan).
    type: dict
    required: true
  managed:
    description:
      - For each node step (C(mig), C(compute_mode), C(container_toolkit), C(containerd_runtime), C(cdi),
        C(runtime_mode)), whether the controller manages it on this node; every step, and no other, must be named.
    type: dict
    required: true
  check_mode:
    description: Whether the run is in check mode (C(ansible_check_mode)).
    type: bool
    default: false
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Which steps run on this node
  ansible.builtin.set_fact:
    gates: >-
      {{ plan | gpuops.nvidia.node_step_gates({'mig': true, 'compute_mode': true, 'container_toolkit': false,
                                               'containerd_runtime': true, 'runtime_mode': false, 'cdi': false},
                                              ansible_check_mode) }}

- name: Compute mode where its step runs
  ansible.builtin.include_role:
    name: gpuops.nvidia.compute_mode
  when: gates.compute_mode
"""

RETURN = r"""
_value:
  description: Each node step -> whether it runs (bool), and C(disruptive) (bool).
  type: dict
  sample: {mig: true, compute_mode: true, container_toolkit: false, containerd_runtime: false, cdi: true,
           runtime_mode: false, disruptive: true}
"""

from ansible.errors import AnsibleFilterError

# The registry is imported where the filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process (issue 36).


def node_step_gates(plan, managed, check_mode=False):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._node_steps import gates
    try:
        return gates(plan, managed, check_mode)
    except ValueError as exc:
        raise AnsibleFilterError("node_step_gates: %s" % exc)


def node_plan_args(inputs, only=None):
    """Documented in node_plan_args.yml."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils._node_steps import plan_args
    try:
        return plan_args(inputs, only)
    except ValueError as exc:
        raise AnsibleFilterError("node_plan_args: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"node_step_gates": node_step_gates, "node_plan_args": node_plan_args}
