#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_health
short_description: Put the GPU health gate's marks on a Kubernetes Node, or take them off
version_added: 0.3.0
description:
  - Takes a health O(verdict) computed elsewhere (the GPU health read and its policy) for the Node O(node_name), and
    makes the Node say it.
  - A verdict with blocking findings (C(healthy=false)) cordons the node, marked with the annotation
    C(gpuops.nvidia/cordoned-by=OWNER) in the same change (as M(gpuops.nvidia.node_cordon) does; a node already
    cordoned, by anyone, stays as it is), taints it C(gpuops.nvidia/gpu-unhealthy=<reason>:NoSchedule) (the reason
    is the first blocking finding's C(kind), made a valid label value), and sets the Node condition
    C(GpuopsNvidiaGpuHealthy) to C(False) with the findings per GPU in its message.
  - The findings are taken in one order, the health read's (by GPU index, then by PCI address for findings of a GPU
    NVML does not list, then the rest, each group as listed). The taint, the condition's reason and message and the
    returned C(blocking) follow it, as the gate's own verdict and the run's failure message already do.
  - A healthy verdict removes that taint and that condition, and releases the cordon only when it carries the
    annotation C(gpuops.nvidia/cordoned-by=OWNER) (and O(release_cordon) is true). An administrator's cordon, any
    other taint and any other condition are never touched.
  - The healthy node's condition is removed rather than set to C(True); a condition that only a provisioning run
    writes would claim health long after anyone looked (no monitor keeps it current), and a fleet of healthy
    nodes is then not written to at all.
  - The taint list is written whole (Kubernetes keeps it as one value) on the node as it was read (its
    resourceVersion); a node changed meanwhile is read again and the change planned again, up to three times.
    The condition is written with a strategic merge patch of the node's C(status) subresource, which merges
    conditions by type, so the kubelet's conditions and any other tool's are kept.
  - Heartbeat - C(lastHeartbeatTime) is written only together with a change of the condition (its status, reason or
    message), and C(lastTransitionTime) only when its status changes; a run that finds the node as the verdict
    says writes nothing and reports no change.
  - Check mode reads the node and reports what would change; it writes nothing.
  - Runs where the Kubernetes API is reachable (usually delegated to the controller, as
    M(gpuops.nvidia.node_cordon)).
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it.
    type: str
    required: true
  verdict:
    description:
      - The health verdict, checked before anything is read or changed. A mapping with C(healthy) (bool),
        C(blocking) (list of findings) and optionally C(warnings) (list of findings); nothing else.
      - A finding is a mapping with exactly C(gpu) (the GPU's index, or null for a finding of no one GPU),
        C(bus_id) (its PCI address as NVML writes it, e.g. C(00000000:47:00.0), or null), C(kind) (a short name
        of the finding, e.g. C(row_remap_pending)) and C(message) (what was found and what fixes it).
      - C(healthy) must be true exactly when C(blocking) is empty. Warnings put no mark on the node; they are
        returned as given.
    type: dict
    required: true
  owner:
    description:
      - The value of the cordon mark C(gpuops.nvidia/cordoned-by) this module sets and releases (1 to 253
        characters). The default is the gpuops.nvidia.gpu_node role's, so a cordon the role made around a
        disruptive step and one this module made are the same cordon.
    type: str
    default: gpuops.nvidia.gpu_node
  burn_in:
    description:
      - The node's burn-in record in short, as the health read returns it (C(health.burn_in) of
        M(gpuops.nvidia.gpu_info) - C(level), C(verdict), C(time), C(driver), C(dcgm_version), C(failed)), carried by
        the Node as the annotation C(gpuops.nvidia/burn-in) (compact JSON, written only when it differs), so that
        whoever reads the Node sees when and how its GPUs were burned in and which tests failed.
      - Null (the default, and the health read's value where the node has no burn-in record) leaves the annotation
        as it is.
    type: dict
  release_cordon:
    description:
      - With a healthy verdict, release a cordon marked O(owner). V(false) removes the taint and the condition but
        leaves the cordon for a later step (for example an uncordon after the device plugin's verification).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reads the node only; RV(changes) says what a real run would write.
  diff_mode:
    support: full
    details: Before and after of the node's C(unschedulable), its cordon mark, its burn-in annotation, its taints
      and the condition.
  idempotent:
    support: full
    details: A second run with the same verdict writes nothing (no heartbeat-only writes).
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Mark a node whose GPU 3 has remapped rows pending
  gpuops.nvidia.node_health:
    node_name: gpu-node-17
    verdict:
      healthy: false
      blocking:
        - gpu: 3
          bus_id: "00000000:47:00.0"
          kind: row_remap_pending
          message: "GPU 3 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot"
      warnings: []
  delegate_to: localhost

- name: The next run found it healthy - take the gate's marks off (an administrator's cordon stays)
  gpuops.nvidia.node_health:
    node_name: gpu-node-17
    verdict: {healthy: true, blocking: [], warnings: []}
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: The Node's name.
  returned: success
  type: str
  sample: gpu-node-17
state:
  description: C(unhealthy) (the verdict blocks; the marks are on) or C(healthy) (the gate's marks are off).
  returned: success
  type: str
  sample: unhealthy
changes:
  description: What was written (in check mode, would be), one sentence each; empty when nothing.
  returned: success
  type: list
  elements: str
  sample: ["cordon the node, marked gpuops.nvidia/cordoned-by=gpuops.nvidia.gpu_node",
           "add taint gpuops.nvidia/gpu-unhealthy=row_remap_pending:NoSchedule",
           "set condition GpuopsNvidiaGpuHealthy=False (RowRemapPending)"]
unschedulable_before:
  description: Whether the node was cordoned before this task.
  returned: success
  type: bool
unschedulable:
  description: Whether the node is cordoned now (in check mode, would be).
  returned: success
  type: bool
cordoned_by:
  description: The node's C(gpuops.nvidia/cordoned-by) annotation before this task (null when absent); a cordon
    without it is an administrator's, and stays.
  returned: success
  type: str
taint:
  description: The gate's taint on the node now (in check mode, would be), or null.
  returned: success
  type: dict
  sample: {key: gpuops.nvidia/gpu-unhealthy, value: row_remap_pending, effect: NoSchedule}
burn_in:
  description: The node's C(gpuops.nvidia/burn-in) annotation now (in check mode, would be), or null.
  returned: success
  type: str
  sample: '{"dcgm_version":"4.2.3","driver":"570.172.08","failed":[],"level":"medium","time":"2026-11-29T10:00:00Z","verdict":"pass"}'
condition:
  description: The node's C(GpuopsNvidiaGpuHealthy) condition now (in check mode, would be), or null.
  returned: success
  type: dict
blocking:
  description: The verdict's blocking findings, in the health read's order (the order of the condition's message).
  returned: success
  type: list
  elements: dict
warnings_found:
  description: The verdict's warnings (no mark on the node).
  returned: success
  type: list
  elements: dict
"""

import time


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _burn_in
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_marks
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module

# A node changed between our read and our taint write (a conflict): read and plan again, this many tries in all.
ATTEMPTS = 3


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class NodeHealthMarks(KubeRun):
    """validate -> read the node -> plan (_health_marks) -> apply one write, then plan again on the node the API
    server answers, until the plan has no work (check mode: the first plan only). A conflict (a taint added
    meanwhile) reads and plans again (the base's retry). An error reports what was written before it."""

    argument_spec = dict(
        node_name=dict(type="str", required=True),
        verdict=dict(type="dict", required=True),
        owner=dict(type="str", default="gpuops.nvidia.gpu_node"),
        release_cordon=dict(type="bool", default=True),
        burn_in=dict(type="dict"),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    conflict_tries = ATTEMPTS

    def __init__(self, module):
        super(NodeHealthMarks, self).__init__(module)
        self.result.update(changes=[])
        self.written = []           # the changes written so far (a failed run reports them as changed)
        self.first = None           # the first plan: its ``before`` is the node as this task found it

    def validate(self):
        errors = _health_marks.verdict_errors(self.params["verdict"])
        owner = self.params["owner"]
        if not (isinstance(owner, str) and 0 < len(owner) <= 253):
            errors.append("owner must be 1 to 253 characters (it is stored as the value of the %s annotation), got %r"
                          % (_kube_nodes.OWNER_ANNOTATION, owner))
        if self.params["burn_in"] is not None:
            errors.extend(_burn_in.summary_errors(self.params["burn_in"]))
        if not errors:
            self.verdict = _health_marks.check_verdict(self.params["verdict"])
        return errors

    def read(self):
        return _kube_nodes.lookup_node(self.kube, node_name=self.params["node_name"], method="name")[0]

    def plan(self, current):
        plan = self.replan(current)
        # (a try after a conflict may find nothing left to write, but the writes of the try before stay changes)
        return plan if plan["changes"] or self.written else None

    def replan(self, node):
        plan = _health_marks.plan(node, self.verdict, self.params["owner"], _now(),
                                  release_cordon=self.params["release_cordon"], burn_in=self.params["burn_in"])
        self.report(self.params["node_name"], plan)
        return plan

    def apply(self, current, changes):
        """One write, then plan again on the node it answers, until the plan has no work: the next write carries
        that node's resourceVersion, and what the first wrote is not written again."""
        plan = changes
        while plan["changes"]:
            plan = self.replan(self.apply_one(self.kube, self.params["node_name"], plan))

    def failing(self, exc):
        if isinstance(exc, KubeError):
            # what this task wrote before the error stays written: say so (changed) and what it was
            self.result.pop("diff", None)
            self.result.update(changed=bool(self.written), changes=list(self.written))

    def report(self, name, plan):
        self.first = self.first or plan
        before, after = self.first["before"], plan["after"]
        changes = self.written + [c for c in plan["changes"] if c not in self.written]
        ours = [t for t in after["taints"] if t.get("key") == _health_marks.TAINT_KEY
                and t.get("effect") == _health_marks.TAINT_EFFECT]
        self.result.update(
            node=name, state="healthy" if self.verdict["healthy"] else "unhealthy",
            changed=bool(changes), changes=changes,
            unschedulable_before=before["unschedulable"], unschedulable=after["unschedulable"],
            cordoned_by=before[_kube_nodes.OWNER_ANNOTATION], burn_in=after[_kube_nodes.BURN_IN_ANNOTATION],
            taint=ours[0] if ours else None,
            condition=after["condition"], blocking=self.verdict["blocking"], warnings_found=self.verdict["warnings"])
        if self.module._diff and changes:
            header = "node/%s" % name
            self.result["diff"] = dict(before=before, after=after, before_header=header, after_header=header)

    def apply_one(self, kube, name, plan):
        """Write the first of the plan's two patches that has work; return the node as the API server answers.
        Unhealthy: cordon and taint first (they keep work off the node), then the condition. Healthy: the condition
        first, the taint and the cordon last, so an interrupted run leaves the node guarded."""
        writes = [("status", plan["status_patch"], plan["status_changes"]),
                  ("spec", plan["spec_patch"], plan["spec_changes"])]
        if not self.verdict["healthy"]:
            writes.reverse()
        what, patch, done = [w for w in writes if w[1] is not None][0]
        if what == "spec":
            answer = kube.patch("write the GPU health gate's cordon, taint and burn-in record on node %s" % name,
                                _kube.node_path(name), patch)
        else:
            answer = kube.patch("write the GPU health gate's condition on node %s (status subresource)" % name,
                                _kube.node_path(name, "status"), patch, strategic=True)
        self.written.extend(c for c in done if c not in self.written)
        return answer


def main():
    run_module(NodeHealthMarks)


if __name__ == "__main__":
    main()
