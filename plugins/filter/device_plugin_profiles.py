# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: device_plugin_profiles
short_description: Device plugin profiles for a fleet from each node's declared sharing strategy
version_added: 0.1.0
description:
  - Takes the variables of every GPU node (C(gpu_node_sharing), C(gpu_node_replicas), C(gpu_node_mig_strategy),
    C(gpu_node_device_list_strategy); the gpuops.nvidia.gpu_node role's defaults where a node does not set them) and
    returns the profiles for M(gpuops.nvidia.device_plugin) (one per distinct strategy, named C(default), C(ts-<N>),
    C(mps-<N>), C(mig-<strategy>), with C(-<device list strategy>) appended where that is not C(envvar)) and the
    profile each node selects with its C(nvidia.com/device-plugin.config) label.
positional: _input
options:
  _input:
    description: A mapping of node name to that node's variables (for example C(hostvars)), restricted by O(nodes).
    type: dict
    required: true
  nodes:
    description: The node names to include.
    type: list
    elements: str
    required: true
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Profiles for the device plugin, and each node's choice
  ansible.builtin.set_fact:
    plan: "{{ hostvars | gpuops.nvidia.device_plugin_profiles(ansible_play_hosts_all) }}"
"""

RETURN = r"""
_value:
  description: C(profiles) (a list for M(gpuops.nvidia.device_plugin)'s O(gpuops.nvidia.device_plugin#module:profiles))
    and C(nodes) (node name to profile name).
  type: dict
"""

from ansible.errors import AnsibleFilterError

# (plugin_utils is imported where the filter runs, not when this file loads: ansible-core loads every filter file of the
# collection in every task's worker to find any one gpuops.nvidia filter; see declared.py)

STRATEGIES = ("mig", "mps", "time-slicing", "none")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")


def profile_for(sharing, replicas=None, mig_strategy="mixed", device_list_strategy="envvar"):
    """The device plugin profile for one declared strategy (raises ValueError on a bad declaration). A device list
    strategy other than the plugin's default (envvar) is the profile's flags.plugin.deviceListStrategy and part of
    its name: nodes that differ in it need different configs."""
    if device_list_strategy not in DEVICE_LIST_STRATEGIES:
        raise ValueError("device list strategy %r is not one of %s"
                         % (device_list_strategy, ", ".join(DEVICE_LIST_STRATEGIES)))
    profile = _sharing_profile(sharing, replicas, mig_strategy)
    if device_list_strategy != "envvar":
        profile["name"] = "%s-%s" % (profile["name"], device_list_strategy)
        profile["flags"] = {"plugin": {"deviceListStrategy": device_list_strategy}}
    return profile


def _sharing_profile(sharing, replicas, mig_strategy):
    if sharing not in STRATEGIES:
        raise ValueError("sharing strategy %r is not one of %s" % (sharing, ", ".join(STRATEGIES)))
    if sharing == "none":
        return {"name": "default"}
    if sharing == "mig":
        if mig_strategy not in ("single", "mixed"):
            raise ValueError("MIG strategy %r is not one of single, mixed" % (mig_strategy,))
        return {"name": "mig-%s" % mig_strategy, "mig_strategy": mig_strategy}
    try:
        count = int(replicas)
    except (TypeError, ValueError, OverflowError):     # OverflowError: an infinite float
        count = 0
    if count < 2 or str(count) != str(replicas).strip():
        raise ValueError("%s needs replicas, a whole number of 2 or more, got %r" % (sharing, replicas))
    short = "ts" if sharing == "time-slicing" else "mps"
    return {"name": "%s-%d" % (short, count), "sharing": sharing, "replicas": count}


def device_plugin_profiles(hostvars, nodes):
    from ansible_collections.gpuops.nvidia.plugins.plugin_utils.hostvars import node_variables
    if not hasattr(hostvars, "get") or not hasattr(hostvars, "__getitem__"):
        raise AnsibleFilterError("device_plugin_profiles: the input must be a mapping of node name to variables "
                                 "(hostvars), got %s" % type(hostvars).__name__)
    if isinstance(nodes, str) or not isinstance(nodes, (list, tuple)):
        raise AnsibleFilterError("device_plugin_profiles: nodes must be a list of node names, got %r" % (nodes,))
    profiles, chosen = {}, {}
    for node in nodes:
        hv = node_variables(hostvars, node, "device_plugin_profiles")
        try:
            profile = profile_for(hv.get("gpu_node_sharing", "none"), hv.get("gpu_node_replicas"),
                                  hv.get("gpu_node_mig_strategy", "mixed"),
                                  hv.get("gpu_node_device_list_strategy", "envvar"))
        except ValueError as exc:
            raise AnsibleFilterError("node %s: %s" % (node, exc))
        profiles[profile["name"]] = profile
        chosen[node] = profile["name"]
    if "default" not in profiles:
        profiles["default"] = {"name": "default"}
    return {"profiles": [profiles[k] for k in sorted(profiles)], "nodes": chosen}


class FilterModule(object):
    def filters(self):
        return {"device_plugin_profiles": device_plugin_profiles}
