#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_gpu_pods
short_description: Pause and resume the GPU DaemonSet pods of one Kubernetes Node, without deleting a pod
version_added: 0.3.0
description:
  - A node's device plugin, GPU feature discovery and MPS control daemon pods (and a DCGM exporter, if one runs) hold
    its GPUs while they run, so a GPU reset fails, and the device plugin keeps advertising the devices it found when it
    started. This module makes them leave the node before a disruptive GPU change and come back after it.
  - O(state=paused) labels the node C(gpuops.nvidia/gpu-pods-paused=true), with the annotations
    C(gpuops.nvidia/gpu-pods-paused-by=OWNER) and C(gpuops.nvidia/gpu-pods-paused-daemonsets) (the DaemonSets that
    had a pod there) in the same change, then waits (up to O(timeout) seconds) until no pod of the O(daemonsets) is
    left on the node. Each of
    those DaemonSets must keep its pods off such a node; every term of its required node affinity holds the
    expression C(key=gpuops.nvidia/gpu-pods-paused operator=NotIn values=[true]) (the device plugin release of
    M(gpuops.nvidia.device_plugin) has it). One that does not is named, and nothing changes. The DaemonSet
    controller removes the pods, so nothing races it.
  - O(state=running) removes the label and annotations, only where the annotation says O(owner) paused the node, and
    waits (up to O(timeout) seconds) until each DaemonSet recorded at the pause has a Ready pod on the node again. A
    node paused by anyone else
    is left as it is. A run killed in between leaves the mark, so the next run resumes the node.
  - O(state=query) only reads.
  - Check mode reads, and reports the change and the pods that would leave or come back.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.wait_options
options:
  node_name:
    description: The Node's name, as C(kubectl get nodes) shows it.
    type: str
    required: true
  state:
    description: V(paused), V(running) or V(query).
    type: str
    choices: [paused, running, query]
    default: query
  daemonsets:
    description:
      - The DaemonSets whose pods hold the node's GPUs, each found by its namespace and a label selector (or its name).
      - A selector that matches no DaemonSet is reported as a warning of the task, not an error (the DaemonSet may not be
        installed yet).
    type: list
    elements: dict
    default: []
    suboptions:
      namespace:
        description: Namespace of the DaemonSets.
        type: str
        required: true
      selector:
        description: Label selector (C(app.kubernetes.io/instance=nvdp)); empty means every DaemonSet of the namespace.
        type: str
        default: ""
      name:
        description: One DaemonSet by name, instead of a selector.
        type: str
  owner:
    description: Who pauses; stored in the annotation, and only this owner's pause is released.
    type: str
    default: gpuops.nvidia.gpu_node
  timeout:
    default: 300
  interval:
    default: 2.0
attributes:
  check_mode:
    support: full
    details: Reads only; reports what would change.
  diff_mode:
    support: full
    details: The node's pause label and annotations before and after.
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Make the device plugin release's pods (and the DCGM exporter's) leave the node before a MIG change
  gpuops.nvidia.node_gpu_pods:
    node_name: gpu-node-17
    state: paused
    daemonsets:
      - {namespace: nvidia-device-plugin, selector: app.kubernetes.io/instance=nvdp}
      - {namespace: monitoring, selector: app=dcgm-exporter}
  delegate_to: localhost

- name: Let them back once the change is done, and wait until they are Ready
  gpuops.nvidia.node_gpu_pods:
    node_name: gpu-node-17
    state: running
    daemonsets:
      - {namespace: nvidia-device-plugin, selector: app.kubernetes.io/instance=nvdp}
  delegate_to: localhost
"""

RETURN = r"""
paused:
  description: Whether the node carries the pause label now (in check mode, would).
  returned: success
  type: bool
paused_by:
  description: The C(gpuops.nvidia/gpu-pods-paused-by) annotation before this task (null when absent).
  returned: success
  type: str
  sample: gpuops.nvidia.gpu_node
daemonsets:
  description: C(namespace/name) of the DaemonSets found from O(daemonsets).
  returned: success
  type: list
  elements: str
holding:
  description: C(namespace/name) of the DaemonSets that had a pod on the node when this task started.
  returned: success
  type: list
  elements: str
waited:
  description: Seconds spent waiting for pods to leave or to be Ready.
  returned: success
  type: float
"""

import json

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import interval_error, seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS


class NodeGpuPods(KubeRun):
    """validate -> read (node, DaemonSets, their pods on the node) -> plan (patch, reasons, diff) -> apply -> after:
    wait for the pods to leave or return."""

    argument_spec = dict(
        node_name=dict(type="str", required=True),
        state=dict(type="str", default="query", choices=["paused", "running", "query"]),
        daemonsets=dict(type="list", elements="dict", default=[], options=dict(
            namespace=dict(type="str", required=True),
            selector=dict(type="str", default=""),
            name=dict(type="str"))),
        owner=dict(type="str", default="gpuops.nvidia.gpu_node"),
        timeout=dict(type="int", default=WAITS["pods_gone"].timeout),
        interval=dict(type="float", default=WAITS["pods_gone"].interval),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)

    def validate(self):
        p = self.params
        errors = [e for e in (seconds_error("timeout", p["timeout"]), interval_error("interval", p["interval"])) if e]
        errors.extend(_kube_names.dns_subdomain_errors(p["node_name"], "node_name"))
        for entry in p["daemonsets"]:
            errors.extend(_kube_names.dns_label_errors(entry["namespace"], "daemonsets namespace"))
            if entry["name"] and entry["selector"]:
                errors.append("daemonsets entry in %s: give a name or a selector, not both" % entry["namespace"])
        if not 0 < len(p["owner"]) <= 253:
            errors.append("owner must be 1 to 253 characters (an annotation value), got %r" % p["owner"])
        return errors

    def read(self):
        node, daemonsets, warnings = self.read_daemonsets()
        for warning in warnings:
            self.module.warn(warning)
        return dict(node=node, daemonsets=daemonsets, holding=sorted(self.pods(daemonsets)))

    def read_daemonsets(self):
        p = self.params
        node = self.kube.get("read node %s" % p["node_name"], _kube.node_path(p["node_name"]))
        daemonsets, warnings = [], []
        for entry in p["daemonsets"]:
            if entry["name"]:
                found = _kube.read_or_none(self.kube, "read DaemonSet %s/%s" % (entry["namespace"], entry["name"]),
                                           _kube.daemonsets_path(entry["namespace"], entry["name"]))
                found = [found] if found else []
            else:
                query = {"labelSelector": entry["selector"]} if entry["selector"] else {}
                found = self.kube.get("list DaemonSets in %s" % entry["namespace"],
                                      _kube.daemonsets_path(entry["namespace"]), **query).get("items") or []
            for item in found:
                item.setdefault("metadata", {}).setdefault("namespace", entry["namespace"])
            if not found:
                warnings.append("no DaemonSet in namespace %s matches %s" % (
                    entry["namespace"], "name %s" % entry["name"] if entry["name"] else
                    "selector %r" % entry["selector"]))
            daemonsets.extend(found)
        unique = dict((_gpu_pods.daemonset_id(d), d) for d in daemonsets)
        return node, [unique[k] for k in sorted(unique)], warnings

    def pods(self, daemonsets):
        return _gpu_pods.owned_pods(_kube.pods_on_node(self.kube, self.params["node_name"]), daemonsets)

    def plan(self, current):
        """The patch of the node (None: none), with the result and the diff."""
        p = self.params
        node, daemonsets, holding = current["node"], current["daemonsets"], current["holding"]
        label, paused_by, recorded = _gpu_pods.mark(node)
        patch, paused = self.patch(node, daemonsets, holding)
        self.result.update(paused=paused, paused_by=paused_by, waited=0.0, holding=holding,
                           daemonsets=[_gpu_pods.daemonset_id(d) for d in daemonsets])
        if patch is not None:
            self.set_diff(self.view(label, paused_by, recorded), self.view_after(patch),
                          header="node/%s" % p["node_name"])
        return patch

    def apply(self, current, changes):
        p = self.params
        self.kube.patch("%s the GPU pods of node %s" % ("pause" if p["state"] == "paused" else "resume",
                                                        p["node_name"]), _kube.node_path(p["node_name"]), changes)

    def after(self, current, changes):
        p = self.params
        if self.module.check_mode or p["state"] == "query":
            return
        if p["state"] == "paused" or changes is not None:    # an earlier run's pause may still be emptying the node
            self.result["waited"] = self.wait_pods(current["daemonsets"], _gpu_pods.mark(current["node"])[2])

    def patch(self, node, daemonsets, holding):
        """(patch or None, paused after) for the requested state."""
        p = self.params
        label = _gpu_pods.mark(node)[0]
        if p["state"] == "paused":
            problems = _gpu_pods.not_pausable(daemonsets)
            if problems:
                self.refuse("node %s: %s" % (p["node_name"], "; ".join(problems)), problems=problems)
            return _gpu_pods.pause_patch(node, p["owner"], holding), True
        if p["state"] == "running":
            patch = _gpu_pods.resume_patch(node, p["owner"])
            return patch, label == _gpu_pods.PAUSE_VALUE and patch is None
        return None, label == _gpu_pods.PAUSE_VALUE

    def wait_pods(self, daemonsets, recorded):
        """Until no pod of the DaemonSets is on the node (paused), or each recorded DaemonSet that still exists has a
        Ready pod there (running). Fails after the timeout, naming the pods."""
        p = self.params

        def pending():
            owned = self.pods(daemonsets)
            if p["state"] == "paused":
                return sorted("%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"]["name"])
                              for pods in owned.values() for pod in pods)
            known = set(_gpu_pods.daemonset_id(d) for d in daemonsets)
            return sorted(ds for ds in recorded if ds in known
                          and not any(_gpu_pods.pod_ready(pod) for pod in owned.get(ds, [])))
        polled = self.wait("pods_gone" if p["state"] == "paused" else "pods_ready", pending, p["timeout"],
                           p["interval"])
        if polled.done:
            return round(polled.waited, 1)
        what = "still on the node" if p["state"] == "paused" else "without a Ready pod on the node"
        state = ("paused (label %s=%s) and as it was" % (_gpu_pods.PAUSE_LABEL, _gpu_pods.PAUSE_VALUE)
                 if p["state"] == "paused" else "resumed")
        raise Failure("node %s: after %ss, %s %s. The node stays %s; a later run resumes from there."
                      % (p["node_name"], p["timeout"], ", ".join(polled.seen), what, state),
                      pending=polled.seen, changed=True)

    @staticmethod
    def view(label, paused_by, recorded):
        return {_gpu_pods.PAUSE_LABEL: label, _gpu_pods.PAUSED_BY: paused_by, _gpu_pods.PAUSED_DAEMONSETS: recorded}

    @staticmethod
    def view_after(patch):
        meta = patch["metadata"]
        recorded = (meta.get("annotations") or {}).get(_gpu_pods.PAUSED_DAEMONSETS)
        return {_gpu_pods.PAUSE_LABEL: (meta.get("labels") or {}).get(_gpu_pods.PAUSE_LABEL),
                _gpu_pods.PAUSED_BY: (meta.get("annotations") or {}).get(_gpu_pods.PAUSED_BY),
                _gpu_pods.PAUSED_DAEMONSETS: json.loads(recorded) if recorded else None}


def main():
    run_module(NodeGpuPods)


if __name__ == "__main__":
    main()
