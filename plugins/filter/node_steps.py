# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Jinja filters over the gpu_node role's step registry (plugins/module_utils/node/_node_steps.py).

Documentation of each filter lives next to this file (node_step_gates.yml, node_plan_args.yml) so that
``ansible-doc -t filter gpuops.nvidia.<name>`` renders it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The registry is imported where the filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process (issue 36).


def node_step_gates(plan, managed, check_mode=False):
    """Documented in node_step_gates.yml."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_steps import gates
    try:
        return gates(plan, managed, check_mode)
    except ValueError as exc:
        raise AnsibleFilterError("node_step_gates: %s" % exc)


def node_plan_args(inputs, only=None):
    """Documented in node_plan_args.yml."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_steps import plan_args
    try:
        return plan_args(inputs, only)
    except ValueError as exc:
        raise AnsibleFilterError("node_plan_args: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"node_step_gates": node_step_gates, "node_plan_args": node_plan_args}
