#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: device_plugin_verify
short_description: Wait until a node advertises the GPUs its device plugin config promises
version_added: 0.2.0
description:
  - Computes what the node must advertise under its device plugin profile and GPU facts - GPUs x replicas under
    C(nvidia.com/gpu) or C(nvidia.com/gpu.shared), MIG devices under C(nvidia.com/gpu) (C(single)) or
    C(nvidia.com/mig-<profile>) (C(mixed)) - and polls the Node's C(status.allocatable) until it does.
  - For an MPS profile, also waits for a ready pod of the MPS control daemon DaemonSet on the node in O(namespace)
    (the chart's C(<release>-mps-control-daemon), the GPU Operator's C(nvidia-device-plugin-mps-control-daemon)).
  - The same check as M(gpuops.nvidia.device_plugin)'s O(gpuops.nvidia.device_plugin#module:verify), per node, for
    either provider (the standalone chart or the GPU Operator).
  - Read-only; fails after O(timeout) seconds with what the node advertises instead.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.wait_options
options:
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it.
    type: str
    required: true
  profile:
    description: The node's device plugin profile (the same keys as M(gpuops.nvidia.device_plugin)'s profiles).
    type: dict
    required: true
    suboptions:
      name:
        description: Profile name.
        type: str
        required: true
      sharing:
        description: C(none), C(time-slicing) or C(mps).
        type: str
        choices: [none, time-slicing, mps]
        default: none
      replicas:
        description: Replicas per GPU.
        type: int
      rename_by_default:
        description: Shared GPUs are advertised as C(<name>.shared).
        type: bool
        default: false
      fail_requests_greater_than_one:
        description: Not used here (accepted so that a profile can be passed as it is).
        type: bool
      mig_strategy:
        description: MIG strategy of the profile.
        type: str
        choices: [none, single, mixed]
        default: none
      resources:
        description: Resources shared, each C({name, replicas}).
        type: list
        elements: dict
      flags:
        description: Not used here (accepted so that a profile can be passed as it is).
        type: dict
  gpus:
    description: The node's GPU facts from M(gpuops.nvidia.gpu_info), read after any MIG change.
    type: raw
    required: true
  namespace:
    description: Namespace of the MPS control daemon's pods (the chart's release namespace, or the operator's).
    type: str
  timeout:
    default: 300
  interval:
    default: 5.0
attributes:
  check_mode:
    support: full
    details: Read-only; it runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The node advertises 8 x 4 nvidia.com/gpu and runs the MPS daemon
  gpuops.nvidia.device_plugin_verify:
    node_name: gpu-node-17
    profile: {name: mps-4, sharing: mps, replicas: 4}
    gpus: "{{ ansible_facts.nvidia_gpus }}"
    namespace: gpu-operator
  delegate_to: localhost
"""

RETURN = r"""
expected:
  description: The resources and counts the node must advertise.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": 32}
allocatable:
  description: The node's C(nvidia.com/*) allocatable resources when the check passed.
  returned: success
  type: dict
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import interval_error, seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _rollout
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS


class DevicePluginVerify(KubeRun):
    """validate -> read (the node's allocatable resources and, for MPS, its control daemon pod, waited for by
    _rollout until they are what the profile promises or the timeout, which fails the run) -> plan: nothing to
    change. Changes nothing."""

    argument_spec = dict(
        node_name=dict(type="str", required=True),
        profile=dict(type="dict", required=True, options=_device_plugin.PROFILE_ARG_SPEC),
        gpus=dict(type="raw", required=True),
        namespace=dict(type="str"),
        timeout=dict(type="int", default=WAITS["rollout"].timeout),
        interval=dict(type="float", default=WAITS["rollout"].interval),
        **_kube.AUTH_ARG_SPEC
    )

    def validate(self):
        p = self.params
        profile = _device_plugin.normalize_profile(dict((k, v) for k, v in p["profile"].items()
                                                        if v is not None or k == "name"))
        errors = _device_plugin.profile_errors(profile, None)
        gpus = p["gpus"].get("gpus") if isinstance(p["gpus"], dict) else p["gpus"]
        if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
            errors.append("gpus must be the GPU facts of gpuops.nvidia.gpu_info (the nvidia_gpus fact or its gpus "
                          "list)")
        if profile["sharing"] == "mps" and not p["namespace"]:
            errors.append("namespace is required with an MPS profile (where the MPS control daemon's pods run)")
        errors.extend(e for e in (seconds_error("timeout", p["timeout"]), interval_error("interval", p["interval"]))
                      if e)
        if not errors:
            self.profile = profile
            self.result["expected"] = _device_plugin.expected_allocatable(profile, gpus)
        return errors

    def read(self):
        p = self.params
        kube = self.kube
        _kube_nodes.lookup_node(kube, node_name=p["node_name"], method="name")     # a name no Node has: says so at once
        return _rollout.verify_rollout(kube, {p["node_name"]: self.result["expected"]},
                                       [p["node_name"]] if self.profile["sharing"] == "mps" else [], p["namespace"],
                                       p["timeout"], p["interval"])

    def plan(self, current):
        self.result["allocatable"] = current[self.params["node_name"]]
        return None


def main():
    run_module(DevicePluginVerify)


if __name__ == "__main__":
    main()
