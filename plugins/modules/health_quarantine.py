#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: health_quarantine
short_description: Quarantine and release GPU nodes after a health sweep, with flap damping and a circuit breaker
version_added: 0.4.0
description:
  - Takes the health O(verdicts) of the nodes one sweep read (M(gpuops.nvidia.gpu_health_read)'s C(health.gate)) and
    decides, with every GPU node the Kubernetes API lists, which nodes to quarantine, keep, count and release.
  - B(Quarantine) - an unhealthy node gets the health gate's marks (as M(gpuops.nvidia.node_health) writes them - the
    collection's cordon, the taint C(gpuops.nvidia/gpu-unhealthy), the condition C(GpuopsNvidiaGpuHealthy=False))
    and the records C(gpuops.nvidia/health-quarantine) (since when, healthy sweeps counted) and
    C(gpuops.nvidia/health-last-quarantined), written with the cordon and the taint in one patch.
  - B(Flap damping) - a quarantined node is released only after O(release_after) consecutive healthy sweeps; an
    unhealthy sweep starts the count again. A node site.yml's gate marked is adopted the same way.
  - B(Circuit breaker) - within O(window_hours) at most O(breaker_percent) % of the GPU nodes (rounded up) and at most
    O(breaker_max_nodes) nodes are newly quarantined, counted from the C(gpuops.nvidia/health-last-quarantined)
    records, so every sweep, job slice and controller counts the same nodes. Beyond it the nodes stay in service,
    their findings are returned and the module fails naming the breaker, after writing what the limit allows. Nothing
    is queued for later; a later sweep acts on what it reads.
  - An administrator's cordon, taints and conditions are never touched.
  - Each node is written on the node as it was read (its resourceVersion); a node changed meanwhile is read and
    planned again, up to three times. An unhealthy node's cordon, taint and records are written first (one patch),
    then its condition; a released node loses its condition first and its cordon, taint and record last, so an
    interrupted run leaves every node guarded or released, never unguarded with the marks half gone.
  - Check mode reads the nodes and returns what would be written; it writes nothing and does not fail on the breaker
    (RV(breaker) says it would open).
  - Runs where the Kubernetes API is reachable (delegated to the controller, once per sweep); run it under the
    cluster lock (M(gpuops.nvidia.cluster_lease)) where job slices sweep at the same time.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  verdicts:
    description:
      - The sweep's verdict per Node name, each a mapping with C(healthy), C(blocking) and C(warnings) as
        M(gpuops.nvidia.node_health)'s O(gpuops.nvidia.node_health#module:verdict) takes it.
    type: dict
    required: true
  gpu_node_selector:
    description:
      - The label selector of the GPU nodes, the circuit breaker's denominator (each swept node it does not select is
        counted too).
    type: str
    default: nvidia.com/gpu.present=true
  release_after:
    description: Consecutive healthy sweeps before a quarantined node is released (1 to 100).
    type: int
    default: 2
  breaker_percent:
    description: At most this percentage of the GPU nodes (rounded up) is newly quarantined in a window (0 to 100).
    type: float
    default: 10
  breaker_max_nodes:
    description: And at most this many nodes (0 to 100000), whatever the percentage allows.
    type: int
    default: 10
  window_hours:
    description: The circuit breaker's window, in hours (0 to 2160).
    type: float
    default: 24
  owner:
    description:
      - The value of the cordon mark C(gpuops.nvidia/cordoned-by); the default is the C(gpuops.nvidia.gpu_node) role's,
        so the sweep's cordon and site.yml's gate are one cordon.
    type: str
    default: gpuops.nvidia.gpu_node
attributes:
  check_mode:
    support: full
    details: Reads the nodes only; RV(nodes) says what a real run would write.
  diff_mode:
    support: full
    details: Before and after of each written node's marks and records.
  idempotent:
    support: full
    details: A healthy fleet is not written to; a quarantined node's healthy sweep count is the only change a repeated
      sweep makes, which is the sweep's purpose.
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Quarantine and release after a sweep
  gpuops.nvidia.health_quarantine:
    verdicts: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['__sweep', 'health', 'gate']))) }}"
    release_after: 2
    breaker_percent: 10
    breaker_max_nodes: 5
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
nodes:
  description: One entry per swept node, by name.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The Node's name.
      type: str
    action:
      description: C(quarantine) (newly), C(keep) (quarantined, still unhealthy), C(count) (quarantined, a healthy
        sweep counted), C(release), C(held) (unhealthy, left in service by the circuit breaker) or C(healthy).
      type: str
    healthy_sweeps:
      description: Consecutive healthy sweeps counted while quarantined.
      type: int
    quarantined_since:
      description: When the sweep quarantined the node (RFC 3339), or null.
      type: str
    changes:
      description: What was written (in check mode, would be).
      type: list
      elements: str
    blocking:
      description: The verdict's blocking findings.
      type: list
      elements: dict
    warnings:
      description: The verdict's warnings.
      type: list
      elements: dict
  sample:
    - {node: gpu-node-17, action: quarantine, healthy_sweeps: 0, quarantined_since: "2026-11-29T07:00:00Z",
       changes: ["cordon the node, marked gpuops.nvidia/cordoned-by=gpuops.nvidia.gpu_node"], blocking: [], warnings: []}
breaker:
  description: The circuit breaker.
  returned: always
  type: dict
  contains:
    open:
      description: More nodes were unhealthy than the limit let this sweep quarantine.
      type: bool
    limit:
      description: Nodes that may be newly quarantined in the window.
      type: int
    gpu_nodes:
      description: The GPU nodes counted.
      type: int
    quarantined_in_window:
      description: The nodes newly quarantined in the window before this sweep.
      type: list
      elements: str
    quarantined_now:
      description: The nodes this sweep quarantined (would, in check mode).
      type: list
      elements: str
    held:
      description: The unhealthy nodes the breaker left in service.
      type: list
      elements: str
"""

import time

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_marks
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_quarantine as quarantine
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import dns_subdomain_errors
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import write_as_planned
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, ModuleRun, run_module

SETTINGS = ("release_after", "breaker_percent", "breaker_max_nodes", "window_hours")
ATTEMPTS = 3


class HealthQuarantine(ModuleRun):
    """validate -> read (the GPU nodes) -> plan (_health_quarantine) -> apply (each node: read, plan, write, with the
    conflict retry) -> after (the breaker's failure)."""

    argument_spec = dict(
        verdicts=dict(type="dict", required=True),
        gpu_node_selector=dict(type="str", default="nvidia.com/gpu.present=true"),
        release_after=dict(type="int", default=2),
        breaker_percent=dict(type="float", default=10),
        breaker_max_nodes=dict(type="int", default=10),
        window_hours=dict(type="float", default=24),
        owner=dict(type="str", default="gpuops.nvidia.gpu_node"),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    errors = (KubeError,)

    def validate(self):
        _kube.require_client()
        self.settings = dict((key, self.params[key]) for key in SETTINGS)
        errors = quarantine.settings_errors(self.settings)
        self.verdicts = {}
        for name, verdict in sorted(self.params["verdicts"].items()):
            found = dns_subdomain_errors(name, "node name %r" % name)
            found += ["verdicts[%s]: %s" % (name, e) for e in _health_marks.verdict_errors(verdict)]
            errors.extend(found)
            if not found:
                self.verdicts[name] = _health_marks.check_verdict(verdict)
        owner = self.params["owner"]
        if not (isinstance(owner, str) and 0 < len(owner) <= 253):
            errors.append("owner must be 1 to 253 characters, got %r" % (owner,))
        return errors

    def read(self):
        _kube.mask_kubeconfig_secrets(self.module)
        self.kube = _kube.Kube.from_params(self.params)
        self.now = time.time()
        listed = self.kube.get("list the GPU nodes (%s)" % self.params["gpu_node_selector"], "/api/v1/nodes",
                               labelSelector=self.params["gpu_node_selector"]).get("items") or []
        nodes = dict((quarantine.node_name(n), n) for n in listed)
        for name in sorted(set(self.verdicts) - set(nodes)):
            nodes[name] = self.read_node(name)
        return nodes

    def read_node(self, name):
        try:
            return self.kube.get("read node %s" % name, _kube.node_path(name))
        except KubeError as exc:
            if exc.status == 404:
                raise KubeError("node %s, which the sweep read, does not exist in the cluster (404); check "
                                "gpu_node_kube_node_name; nothing changed" % name, status=404)
            raise

    def plan(self, current):
        decided = quarantine.plan(list(current.values()), self.verdicts, self.settings, self.now)
        self.decided = decided
        self.rows, self.writes = [], {}
        before, after = {}, {}
        for name in sorted(self.verdicts):
            marks = self.node_writes(current[name], name)
            decision = decided["nodes"][name]
            self.rows.append({
                "node": name, "action": decision["action"], "healthy_sweeps": decision["healthy_sweeps"],
                "quarantined_since": None if decision["since"] is None else quarantine.format_time(decision["since"]),
                "changes": list(marks["changes"]), "blocking": self.verdicts[name]["blocking"],
                "warnings": self.verdicts[name]["warnings"]})
            if marks["changes"]:
                self.writes[name] = marks
                before[name], after[name] = marks["before"], marks["after"]
        self.result.update(nodes=self.rows, breaker=decided["breaker"])
        if self.writes:
            self.set_diff(before, after, header="GPU nodes' health marks")
        return self.writes

    def node_writes(self, node, name):
        return quarantine.node_writes(node, self.verdicts[name], self.decided["nodes"][name], self.params["owner"],
                                      self.now, self.settings["release_after"])

    def apply(self, current, changes):
        for name in sorted(changes):
            row = [r for r in self.rows if r["node"] == name][0]
            # (after a conflict: the node read again and its marks planned on what is there now)
            write_as_planned(changes[name], lambda name=name: self.node_writes(self.read_node(name), name),
                             lambda marks, name=name: self.write(name, marks), tries=ATTEMPTS)
            row["written"] = True

    def write(self, name, marks):
        """An unhealthy node's cordon, taint and records first, then its condition; a released node's condition first,
        then the rest: the node is guarded until its last write."""
        spec = ("spec", marks["spec_patch"])
        status = ("status", marks["status_patch"])
        releasing = self.decided["nodes"][name]["action"] == quarantine.RELEASE
        for what, patch in ([status, spec] if releasing else [spec, status]):
            if patch is None:
                continue
            if what == "spec":
                self.kube.patch("write the health sweep's cordon, taint and records on node %s" % name,
                                _kube.node_path(name), patch)
                continue
            answer = self.kube.patch("write the health sweep's condition on node %s (status subresource)" % name,
                                     _kube.node_path(name, "status"), patch, strategic=True)
            if releasing and spec[1] is not None and "resourceVersion" in spec[1].get("metadata", {}):
                # our own status write moved the node's resourceVersion: the spec patch goes onto the node it answered
                spec[1]["metadata"]["resourceVersion"] = (answer.get("metadata") or {}).get("resourceVersion")

    def after(self, current, changes):
        breaker = self.decided["breaker"]
        if not breaker["open"]:
            return
        text = ("circuit breaker open: %d unhealthy nodes were to be newly quarantined, and at most %d may be in %g h "
                "(%g %% of %d GPU nodes, at most %d; %d already in this window%s); %s: %s; left in service with their "
                "findings reported: %s. A later sweep acts on what it reads then" % (
                    len(breaker["quarantined_now"]) + len(breaker["held"]), breaker["limit"], breaker["window_hours"],
                    breaker["percent"], breaker["gpu_nodes"], breaker["max_nodes"],
                    len(breaker["quarantined_in_window"]),
                    (": " + ", ".join(breaker["quarantined_in_window"])) if breaker["quarantined_in_window"] else "",
                    "would quarantine" if self.module.check_mode else "quarantined",
                    ", ".join(breaker["quarantined_now"]) or "none", ", ".join(breaker["held"])))
        if self.module.check_mode:
            self.module.warn(text)
            return
        raise Failure(text)


def main():
    run_module(HealthQuarantine)


if __name__ == "__main__":
    main()
