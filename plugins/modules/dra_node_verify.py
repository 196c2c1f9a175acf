#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_node_verify
short_description: Wait until a node's ResourceSlices list exactly the GPUs or MIG devices it has
version_added: 0.1.0
description:
  - Under NVIDIA's DRA driver (provider C(dra)), the node's kubelet plugin publishes its devices as ResourceSlices of
    driver C(gpu.nvidia.com) (C(resource.k8s.io/v1)). This module polls them until they list exactly what the node's
    GPU facts promise - one device of type C(gpu) per GPU with MIG disabled, one of type C(mig) per MIG device of a GPU
    with MIG enabled (matched by UUID, parent UUID and profile) and nothing else - counting only the pool's newest
    generation.
  - The DRA counterpart of M(gpuops.nvidia.device_plugin_verify); gpuops.nvidia.gpu_node runs it before it uncordons
    a node. Read-only; fails after O(timeout) seconds listing every difference.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.wait_options
options:
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it.
    type: str
    required: true
  gpus:
    description: The node's GPU facts (gpuops.nvidia.gpu_info's C(nvidia_gpus) fact, or its C(gpus) list).
    type: raw
    required: true
  timeout:
    default: 300
  interval:
    default: 5.0
attributes:
  check_mode:
    support: full
    details: Read-only; it checks in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The node publishes exactly its devices before it is uncordoned
  gpuops.nvidia.dra_node_verify:
    node_name: "{{ inventory_hostname }}"
    gpus: "{{ ansible_facts.nvidia_gpus }}"
  delegate_to: localhost
"""

RETURN = r"""
expected:
  description: The devices the node must publish, by UUID.
  returned: always
  type: dict
published:
  description: The devices its ResourceSlices list, by UUID (with the device names the driver gave them).
  returned: always
  type: dict
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import interval_error, seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS


def read_slices(kube, node_name):
    listed = kube.get("list the ResourceSlices of node %s" % node_name, _kube.dra_path("resourceslices"),
                      fieldSelector="spec.nodeName=%s,spec.driver=%s" % (node_name, _dra.DRIVER))
    return listed.get("items") or []


def read_state(kube, node_name, gpus):
    """(the node's ResourceSlices of the driver, how they differ from what the GPUs need)."""
    slices = read_slices(kube, node_name)
    return slices, _dra.slice_problems(slices, node_name, gpus)


class DraNodeVerify(KubeRun):
    """validate -> read (the node's ResourceSlices, polled until they are what the GPUs need or the timeout) -> plan:
    nothing to change; a node that does not publish exactly its devices fails the run. Changes nothing."""

    argument_spec = dict(
        node_name=dict(type="str", required=True),
        gpus=dict(type="raw", required=True),
        timeout=dict(type="int", default=WAITS["dra_slices"].timeout),
        interval=dict(type="float", default=WAITS["dra_slices"].interval),
        **_kube.AUTH_ARG_SPEC
    )

    def validate(self):
        p = self.params
        gpus = p["gpus"].get("gpus") if isinstance(p["gpus"], dict) else p["gpus"]
        errors = _kube.auth_param_errors(p)
        if not isinstance(gpus, list) or not all(isinstance(g, dict) and g.get("uuid") for g in gpus):
            errors.append("gpus must be the GPU facts of gpuops.nvidia.gpu_info (the nvidia_gpus fact or its gpus "
                          "list, each GPU with its uuid)")
        errors.extend(e for e in (seconds_error("timeout", p["timeout"]), interval_error("interval", p["interval"]))
                      if e)
        if not errors:
            self.gpus = gpus
            self.result["expected"] = _dra.expected_devices(gpus)
        return errors

    def read(self):
        p = self.params
        kube = self.kube
        _kube_nodes.lookup_node(kube, node_name=p["node_name"], method="name")
        return self.wait("dra_slices", lambda: read_state(kube, p["node_name"], self.gpus), p["timeout"],
                         p["interval"]).seen

    def plan(self, current):
        slices, problems = current
        p = self.params
        self.result["published"] = _dra.published_devices(slices, p["node_name"])[0]
        if problems:
            self.fail("node %s does not publish exactly its devices after %d s: %s. The node stays cordoned; the next "
                      "run checks again (a kubelet plugin that started before a MIG change publishes the old devices "
                      "until it restarts)" % (p["node_name"], p["timeout"], "; ".join(problems)), problems=problems)
        return None


def main():
    run_module(DraNodeVerify)


if __name__ == "__main__":
    main()
