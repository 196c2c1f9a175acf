# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: device_plugin_skip_xids
short_description: The Xids NVIDIA's device plugin should skip, from every GPU node's health policy
version_added: 0.1.0
description:
  - NVIDIA's device plugin marks a GPU unhealthy on every Xid it does not skip and never takes that back while it
    runs. The health gate decides per node, by C(gpu_node_health_policy), which Xid kinds (C(xid_fatal), C(xid_gpu),
    C(xid_application)) block the node. This filter returns the Xids the plugin should skip so that an Xid the policy
    does not block does not take a GPU out of service for good - for M(gpuops.nvidia.device_plugin)'s
    O(gpuops.nvidia.device_plugin#module:skip_xids).
  - One chart serves the whole fleet, so an Xid is skipped only when no node's policy blocks it (the intersection of
    the nodes' lists), and the plugin's Xid check is turned off (C(all)) only when no node blocks any Xid kind. Nodes
    whose policies differ keep the Xids one of them blocks checked (C(held)).
  - An explicit O(setting) (C(all) or a list of Xid codes) is returned as given, after validation.
positional: _input, nodes, setting
options:
  _input:
    description: A mapping of node name to that node's variables (for example C(hostvars)), restricted by O(nodes).
    type: dict
    required: true
  nodes:
    description: The GPU nodes whose policies count.
    type: list
    elements: str
    required: true
  setting:
    description: C(auto) (from the policies), C(all), or a list of Xid codes (whole numbers from 1 to 99999).
    type: raw
    default: auto
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The Xids the device plugin skips, from the fleet's health policies
  ansible.builtin.set_fact:
    skip: "{{ hostvars | gpuops.nvidia.device_plugin_skip_xids(ansible_play_hosts_all, 'auto') }}"
"""

RETURN = r"""
_value:
  description:
    - C(skip) (C(all), or the sorted Xid codes), C(source) (C(policy) or C(setting)), C(differ) (whether the nodes'
      policies differ on Xids), C(held) (Xid code to the nodes whose policy blocks it, for the Xids other nodes would
      skip) and C(summary) (one line to show).
  type: dict
"""

from ansible.errors import AnsibleFilterError

# The planner and plugin_utils are imported where the filter runs, not when this file loads: ansible-core loads every
# filter file of the collection to find any one gpuops.nvidia filter, in every task's fresh worker process, and compiles
# the collection's Python from source each time (issue 36; at load time this file cost every worker that used any
# gpuops.nvidia filter the health planners' import, docs/readings/fleet-compare-session16-2cores.md).

SETTING_NAME = "cluster_device_plugin_skip_xids"


def _summary(decided, nodes):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin_health
    skip = decided["skip"]
    if skip == _device_plugin_health.ALL:
        text = "the device plugin's Xid check is off: no node's health policy blocks an Xid"
    elif not skip:
        text = "the device plugin skips only its own Xids"
    else:
        text = "the device plugin skips Xid %s besides its own" % ", ".join(str(code) for code in skip)
    if decided["source"] == "setting":
        return text + " (%s)" % SETTING_NAME
    text += " (from the health policies of %d node(s))" % len(nodes)
    if decided["held"]:
        text += "; still checked because some node's policy blocks them: Xid %s" % ", ".join(
            "%d (%s)" % (code, ", ".join(names[:3]) + (", ..." if len(names) > 3 else ""))
            for code, names in sorted(decided["held"].items())[:10])
        if len(decided["held"]) > 10:
            text += ", and %d more" % (len(decided["held"]) - 10)
    return text


def device_plugin_skip_xids(hostvars, nodes, setting="auto"):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin_health
    from ansible_collections.gpuops.nvidia.plugins.plugin_utils.hostvars import node_variables
    if not hasattr(hostvars, "get") or not hasattr(hostvars, "__getitem__"):
        raise AnsibleFilterError("device_plugin_skip_xids: the input must be a mapping of node name to variables "
                                 "(hostvars), got %s" % type(hostvars).__name__)
    if isinstance(nodes, str) or not isinstance(nodes, (list, tuple)):
        raise AnsibleFilterError("device_plugin_skip_xids: nodes must be a list of node names, got %r" % (nodes,))
    errors = _device_plugin_health.setting_errors(setting, SETTING_NAME)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    policies = {}
    if setting == "auto":
        for node in nodes:
            policy = node_variables(hostvars, node, "device_plugin_skip_xids").get("gpu_node_health_policy")
            policies[node] = dict(policy) if hasattr(policy, "items") else ({} if policy is None else policy)
    try:
        decided = _device_plugin_health.resolve(setting, policies, SETTING_NAME)
    except ValueError as exc:
        node = next((n for n in policies if _policy_error(policies[n])), None)
        raise AnsibleFilterError("device_plugin_skip_xids: %s%s" % (
            "node %s: gpu_node_health_policy: " % node if node else "", exc))
    decided["summary"] = _summary(decided, nodes)
    return decided


def _policy_error(policy):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin_health
    try:
        _device_plugin_health.node_skips(policy)
    except ValueError:
        return True
    return False


class FilterModule(object):
    def filters(self):
        return {"device_plugin_skip_xids": device_plugin_skip_xids}
