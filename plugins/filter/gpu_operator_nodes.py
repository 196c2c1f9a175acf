# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_operator_nodes
short_description: The GPU nodes' declarations that gpuops.nvidia.gpu_operator checks against the ClusterPolicy
version_added: 0.2.0
description:
  - Takes the variables of every GPU node and the node-to-profile map of
    P(gpuops.nvidia.device_plugin_profiles#filter), and returns the O(gpuops.nvidia.gpu_operator#module:nodes) list of
    M(gpuops.nvidia.gpu_operator) - each node's Kubernetes name (C(gpu_node_kube_node_name), default the inventory
    name), its profile, who writes its containerd runtime (C(gpu_node_containerd_owner), default C(auto)) and the
    containerd files this collection would write there (C(containerd_runtime_config_path),
    C(containerd_runtime_drop_in_path); none when C(gpu_node_manage_containerd) is false) - and whether any node
    leaves MIG to the operator (C(gpu_node_mig_owner=gpu_operator)).
positional: _input, nodes, plan
options:
  _input:
    description: A mapping of node name to that node's variables (for example C(hostvars)).
    type: dict
    required: true
  nodes:
    description: The inventory names of the nodes to include.
    type: list
    elements: str
    required: true
  plan:
    description: The result of P(gpuops.nvidia.device_plugin_profiles#filter) for the same nodes.
    type: dict
    required: true
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The nodes as gpuops.nvidia.gpu_operator needs them
  ansible.builtin.set_fact:
    operator_nodes: "{{ hostvars | gpuops.nvidia.gpu_operator_nodes(ansible_play_hosts_all, plan) }}"
"""

RETURN = r"""
_value:
  description: C(nodes) (a list of C({name, profile, containerd_owner, containerd_files})) and C(mig_to_operator)
    (true when a node has C(gpu_node_mig_owner=gpu_operator)).
  type: dict
"""

from ansible.errors import AnsibleFilterError

CONFIG_PATH = "/etc/containerd/config.toml"
DROP_IN_PATH = "/etc/containerd/conf.d/99-nvidia.toml"


def _bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def gpu_operator_nodes(hostvars, nodes, plan):
    out, mig_to_operator = [], False
    for node in nodes:
        hv = hostvars[node]
        if node not in plan.get("nodes", {}):
            raise AnsibleFilterError("node %s has no device plugin profile in the plan" % node)
        manage = _bool(hv.get("gpu_node_manage_containerd", True))
        files = []
        if manage:
            files = [hv.get("containerd_runtime_config_path") or CONFIG_PATH,
                     hv.get("containerd_runtime_drop_in_path") or DROP_IN_PATH]
        out.append({"name": hv.get("gpu_node_kube_node_name") or node, "profile": plan["nodes"][node],
                    "containerd_owner": hv.get("gpu_node_containerd_owner") or "auto", "containerd_files": files})
        mig_to_operator = mig_to_operator or hv.get("gpu_node_mig_owner") == "gpu_operator"
    return {"nodes": out, "mig_to_operator": mig_to_operator}


class FilterModule(object):
    def filters(self):
        return {"gpu_operator_nodes": gpu_operator_nodes}
