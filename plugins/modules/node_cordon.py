#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_cordon
short_description: Cordon, drain the GPU pods of, uncordon or read this host's Kubernetes Node
version_added: 0.1.0
description:
  - Finds the Kubernetes Node that is this host (as M(gpuops.nvidia.node_labels) does) and marks it unschedulable
    (O(state=cordoned)), schedulable again (O(state=uncordoned)), or only reads it (O(state=query)).
  - With O(drain=true) and O(state=cordoned), evicts the pods on the node that request or limit a GPU resource
    (a resource name starting with O(drain_resource_prefix)) through the Eviction API, so PodDisruptionBudgets are
    respected, and waits until they are gone. DaemonSet pods and finished pods are left alone.
  - Used by the gpuops.nvidia.gpu_node role around disruptive steps (MIG mode or layout change, reboot).
  - With O(owner), a cordon is marked with the annotation C(gpuops.nvidia/cordoned-by=OWNER), set in the same change
    as C(spec.unschedulable), and O(state=uncordoned) releases only a cordon carrying that mark. A later run can so
    release a cordon that an interrupted run (killed, or whose uncordon failed) left behind, and never uncordons a
    node that an administrator or another tool cordoned.
  - Check mode only reads; it reports what would change and which pods would be evicted.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  state:
    description:
      - V(cordoned) sets C(spec.unschedulable=true); V(uncordoned) sets it to false; V(query) changes nothing and
        returns the node's labels and schedulability (the role reads MIG-ownership labels with it).
    type: str
    choices: [cordoned, uncordoned, query]
    default: query
  drain:
    description: With O(state=cordoned), evict the node's GPU pods and wait until they are gone.
    type: bool
    default: false
  drain_resource_prefix:
    description: A pod is a GPU pod when one of its containers requests or limits a resource whose name starts with this.
    type: str
    default: nvidia.com/
  drain_timeout:
    description: Seconds to wait for the evicted pods to be gone (evictions refused by a PodDisruptionBudget are
      retried), from 0 to 86400 (one day).
    type: int
    default: 300
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it. Tried first when given.
    type: str
  hostname:
    description: Host names to match (as in M(gpuops.nvidia.node_labels)); default the host the module runs on.
    type: list
    elements: str
  internal_ips:
    description: IP addresses to match against C(InternalIP) addresses; default the host the module runs on.
    type: list
    elements: str
  owner:
    description:
      - Who cordons. With O(state=cordoned), a node this task cordons also gets the annotation
        C(gpuops.nvidia/cordoned-by) set to this value; a node that was already cordoned is left as it is (its mark,
        if any, is kept).
      - With O(state=uncordoned), only a node whose C(gpuops.nvidia/cordoned-by) annotation equals this value is
        uncordoned, and the annotation removed; a node cordoned by anyone else stays cordoned (reported in
        RV(cordoned_by)). Without O(owner), O(state=uncordoned) uncordons the node whoever cordoned it.
    type: str
  node_lookup:
    description: How to find the node (as in M(gpuops.nvidia.node_labels)).
    type: str
    choices: [auto, name, hostname, internal_ip]
    default: auto
attributes:
  check_mode:
    support: full
    details: Reads only; reports the change and the pods that would be evicted.
  diff_mode:
    support: full
    details: Before and after C(unschedulable) of the node, and its C(gpuops.nvidia/cordoned-by) annotation.
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Cordon the node and drain its GPU pods before changing its MIG layout
  gpuops.nvidia.node_cordon:
    node_name: gpu-node-17
    state: cordoned
    drain: true
  delegate_to: localhost

- name: Uncordon it afterwards
  gpuops.nvidia.node_cordon:
    node_name: gpu-node-17
    state: uncordoned
  delegate_to: localhost

- name: Cordon marked as ours, so that a later run releases it even if this one is killed before it uncordons
  gpuops.nvidia.node_cordon:
    node_name: gpu-node-17
    state: cordoned
    owner: gpuops.nvidia.gpu_node
  delegate_to: localhost

- name: Release only a cordon we made (an administrator's cordon stays)
  gpuops.nvidia.node_cordon:
    node_name: gpu-node-17
    state: uncordoned
    owner: gpuops.nvidia.gpu_node
  delegate_to: localhost

- name: Read the node's labels (who owns MIG?)
  gpuops.nvidia.node_cordon:
    node_name: gpu-node-17
  register: node
"""

RETURN = r"""
node:
  description: Name of the Node that was matched.
  returned: success
  type: str
  sample: gpu-node-17
labels:
  description: The node's labels.
  returned: success
  type: dict
unschedulable_before:
  description: Whether the node was cordoned before this task.
  returned: success
  type: bool
unschedulable:
  description: Whether the node is cordoned now (in check mode, would be).
  returned: success
  type: bool
cordoned_by:
  description: The node's C(gpuops.nvidia/cordoned-by) annotation before this task (null when absent).
  returned: success
  type: str
  sample: gpuops.nvidia.gpu_node
taints:
  description: The node's taints as read (before this task), each C(key), C(value) and C(effect).
  returned: success
  type: list
  elements: dict
  sample: [{key: gpuops.nvidia/gpu-unhealthy, value: row_remap_pending, effect: NoSchedule}]
burn_in:
  description: The node's C(gpuops.nvidia/burn-in) annotation as read (the burn-in record the health gate put there,
    see M(gpuops.nvidia.node_health)), or null.
  returned: success
  type: str
conditions:
  description: The node's conditions as read, each C(type), C(status) and C(reason) (the health gate finds its own
    C(GpuopsNvidiaGpuHealthy) here).
  returned: success
  type: list
  elements: dict
evicted:
  description: C(namespace/name) of the GPU pods evicted (in check mode, that would be evicted).
  returned: success
  type: list
  elements: str
"""

import time

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_nodes import BURN_IN_ANNOTATION
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_nodes import OWNER_ANNOTATION, cordon_patch
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS, wait


def is_gpu_pod(pod, prefix):
    """True when a running/pending pod (not a DaemonSet's) asks for a resource named prefix*."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "DaemonSet":
            return False
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            if any(str(k).startswith(prefix) for k in (resources.get(part) or {})):
                return True
    return False


def gpu_pods(kube, node, prefix):
    found = []
    for pod in _kube.pods_on_node(kube, node):
        if is_gpu_pod(pod, prefix):
            found.append("%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"]["name"]))
    return sorted(found)


def evict(kube, pod):
    namespace, name = pod.split("/", 1)
    # no apiVersion: the API server reads the body as its eviction endpoint's version (policy/v1 or v1beta1)
    kube.create("evict pod %s" % pod, _kube.pods_path(namespace, name, "eviction"),
                {"metadata": {"name": name, "namespace": namespace}})


def drain(kube, node, prefix, timeout, clock=time.monotonic, sleep=time.sleep):
    """Evict the node's GPU pods and wait (the table's ``drain``, one read a second) until none is left; fails after
    ``timeout``
    seconds naming those still there (a Failure raised to the module's base). A pod is asked once while it stays
    (404: already gone; 429: a PodDisruptionBudget refuses it for now, asked again on the next read). Returns the
    pods found at the start."""
    pending = gpu_pods(kube, node, prefix)
    evicted = list(pending)
    if not pending:
        return evicted
    state = {"pending": pending, "asked": set()}

    def evict_then_list():
        for pod in state["pending"]:
            if pod in state["asked"]:
                continue
            try:
                evict(kube, pod)
                state["asked"].add(pod)
            except KubeError as exc:
                if exc.status == 404:
                    state["asked"].add(pod)
                elif exc.status != 429:  # 429: a PodDisruptionBudget refuses it for now; retry
                    raise
        state["pending"] = gpu_pods(kube, node, prefix)
        state["asked"] &= set(state["pending"])
        return state["pending"]

    polled = wait("drain", evict_then_list, timeout, clock=clock, sleep=sleep)
    if not polled.done:
        raise Failure("node %s is cordoned but these GPU pods are still there after %ss: %s. They may be "
                      "held by a PodDisruptionBudget or a long grace period; nothing else was changed. "
                      "Uncordon with state=uncordoned if you give up." % (node, timeout, ", ".join(polled.seen)),
                      node=node, unschedulable=True, pending=polled.seen, changed=True)
    return evicted


class NodeCordon(KubeRun):
    """validate -> read this host's Node -> plan (_kube_nodes.cordon_patch) -> apply the patch -> after: drain the
    GPU pods (in check mode, list those a drain would evict)."""

    argument_spec = dict(
        state=dict(type="str", default="query", choices=["cordoned", "uncordoned", "query"]),
        drain=dict(type="bool", default=False),
        drain_resource_prefix=dict(type="str", default="nvidia.com/"),
        drain_timeout=dict(type="int", default=WAITS["drain"].timeout),
        node_name=dict(type="str"),
        hostname=dict(type="list", elements="str"),
        internal_ips=dict(type="list", elements="str"),
        node_lookup=dict(type="str", default="auto", choices=["auto", "name", "hostname", "internal_ip"]),
        owner=dict(type="str"),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)

    def validate(self):
        p = self.params
        errors = []
        if p["drain"] and p["state"] != "cordoned":
            errors.append("drain=true needs state=cordoned (a node is drained only after it is cordoned), got "
                          "state=%s" % p["state"])
        error = seconds_error("drain_timeout", p["drain_timeout"])
        if error or not p["drain_resource_prefix"]:
            errors.append(error or "drain_resource_prefix must not be empty")
        if p["owner"] is not None and not (0 < len(p["owner"]) <= 253):
            errors.append("owner must be 1 to 253 characters (it is stored as the value of the %s annotation), "
                          "got %r" % (OWNER_ANNOTATION, p["owner"]))
        return errors

    def read(self):
        node = _kube_nodes.find_this_node(self.kube, self.params)[0]
        self.name = node["metadata"]["name"]
        before = bool((node.get("spec") or {}).get("unschedulable"))
        marked_by = (node["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION)
        status = node.get("status") or {}
        annotations = node["metadata"].get("annotations") or {}
        self.result.update(node=self.name, labels=dict(node["metadata"].get("labels") or {}),
                           unschedulable_before=before, unschedulable=before, cordoned_by=marked_by, evicted=[],
                           burn_in=annotations.get(BURN_IN_ANNOTATION),
                           taints=[dict(t) for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)],
                           conditions=[dict((k, c.get(k)) for k in ("type", "status", "reason"))
                                       for c in status.get("conditions") or [] if isinstance(c, dict)])
        return before, marked_by

    def plan(self, current):
        p = self.params
        if p["state"] == "query":
            return None
        before, marked_by = current
        patch = cordon_patch(p["state"] == "cordoned", before, marked_by, p["owner"])
        if patch is not None:
            after = patch.get("spec", {}).get("unschedulable", before)
            self.result["unschedulable"] = after
            mark_after = patch.get("metadata", {}).get("annotations", {}).get(OWNER_ANNOTATION, marked_by)
            self.set_diff({"unschedulable": before, OWNER_ANNOTATION: marked_by},
                          {"unschedulable": after, OWNER_ANNOTATION: mark_after}, header="node/%s" % self.name)
        return patch

    def apply(self, current, changes):
        want = self.params["state"] == "cordoned"
        self.kube.patch("%s node %s" % ("cordon" if want else "uncordon", self.name), _kube.node_path(self.name),
                        changes)

    def after(self, current, changes):
        p = self.params
        if p["state"] != "cordoned" or not p["drain"]:
            return
        if self.module.check_mode:
            self.result["evicted"] = gpu_pods(self.kube, self.name, p["drain_resource_prefix"])
        else:
            self.result["evicted"] = drain(self.kube, self.name, p["drain_resource_prefix"],
                                           p["drain_timeout"])
        if self.result["evicted"]:
            self.result["changed"] = True


def main():
    run_module(NodeCordon)


if __name__ == "__main__":
    main()
