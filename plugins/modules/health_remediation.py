#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: health_remediation
short_description: Decide and record the health sweep's remediation of quarantined GPU nodes, with consent and a cap
version_added: 0.4.0
description:
  - Runs after M(gpuops.nvidia.health_quarantine) with its RV(gpuops.nvidia.health_quarantine#module:nodes), and says
    per node what the sweep may do about its blocking findings - C(reset) (the GPUs to reset, which the
    gpuops.nvidia.health_sweep role then hands to M(gpuops.nvidia.gpu_health_reset), which resets idle GPUs only),
    C(reboot), C(needs_operator) or C(none) - and why.
  - B(Consent) - O(consent) per node, C(none), C(reset) (a GPU reset) or C(reboot) (a reset and, where a reset cannot
    clear the findings, a node reboot). Nothing is done without it.
  - Only a quarantined node (action C(quarantine) or C(keep)) is remediated; a node the circuit breaker held in service
    is not.
  - A reset clears a pending row remap or page retirement; a reboot is needed for a lost, missing or unresponsive GPU,
    an unresponsive NVML and a fatal Xid (the sweep keeps this boot's fatal Xids blocking until the node boots again).
    Any other blocking finding needs an operator, and nothing is tried. With C(reboot) consent, a node whose last
    attempt in the window was a reset of GPUs that still have the finding is rebooted.
  - B(The record before the attempt) - each attempt is written into the annotation C(gpuops.nvidia/health-remediation)
    (JSON - the attempt times in the window and the last action) on the node as it was read, before this module
    returns it, so a run killed during the attempt still counts it. A node changed meanwhile is read and decided again,
    up to three times.
  - B(The cap) - at most O(max_attempts) attempts per node in O(window_hours). A node at the cap that still needs a
    remediation stays quarantined and gets the condition C(GpuopsNvidiaGpuRemediation=False), reason
    C(NeedsOperator), its message naming the attempts and the findings. The condition is removed when the node is
    released.
  - Check mode reads the nodes and returns what would be done; it writes nothing.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  decisions:
    description:
      - M(gpuops.nvidia.health_quarantine)'s RV(gpuops.nvidia.health_quarantine#module:nodes) - each a mapping with
        C(node), C(action) and C(blocking) (the findings, each with C(gpu) and C(kind)).
    type: list
    elements: dict
    required: true
  consent:
    description:
      - The remediation allowed per Node name, C(none), C(reset) or C(reboot); a node not named is C(none).
    type: dict
    default: {}
  max_attempts:
    description: At most this many remediation attempts per node in the window (1 to 100).
    type: int
    default: 2
  window_hours:
    description: The window of the cap, in hours (0 to 2160).
    type: float
    default: 24
attributes:
  check_mode:
    support: full
    details: Reads the nodes only; RV(nodes) says what a real run would record and do.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: Each run that decides an attempt records it (the attempt is the sweep's purpose); a node at the cap, or
      with nothing to remediate, is not written to again.
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Remediation after the quarantine
  gpuops.nvidia.health_remediation:
    decisions: "{{ quarantine.nodes }}"
    consent: {gpu-node-17: reset}
    max_attempts: 2
    window_hours: 24
  delegate_to: localhost
  run_once: true
  register: remediation
"""

RETURN = r"""
nodes:
  description: One entry per decided node.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The Node's name.
      type: str
    consent:
      description: Its consent.
      type: str
    action:
      description: C(reset) (the GPUs in C(gpus)), C(reboot), C(needs_operator) (at the cap; the condition is set) or
        C(none).
      type: str
    gpus:
      description: The GPU indexes to reset.
      type: list
      elements: int
    reason:
      description: Why, in words (null where there is nothing to say).
      type: str
    attempts:
      description: Attempts in the window, this one included.
      type: int
    changes:
      description: What was written (in check mode, would be).
      type: list
      elements: str
  sample:
    - {node: gpu-node-17, consent: reset, action: reset, gpus: [3], attempts: 1,
       reason: "reset GPU 3 (row_remap_pending on GPU 3)", changes: ["record the reset attempt (1 in the window)"]}
"""

import time

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_remediation as remediation
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import dns_subdomain_errors
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import write_as_planned
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module

SETTINGS = ("max_attempts", "window_hours")
ATTEMPTS = 3
QUARANTINE_ACTIONS = ("quarantine", "keep", "count", "release", "held", "healthy")


class HealthRemediation(ModuleRun):
    """validate -> read (the decided nodes) -> plan (_health_remediation) -> apply (each node: the record, then the
    condition, with the conflict retry)."""

    argument_spec = dict(
        decisions=dict(type="list", elements="dict", required=True),
        consent=dict(type="dict", default={}),
        max_attempts=dict(type="int", default=2),
        window_hours=dict(type="float", default=24),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    errors = (KubeError,)

    def validate(self):
        _kube.require_client()
        self.settings = dict((key, self.params[key]) for key in SETTINGS)
        errors = remediation.settings_errors(self.settings)
        consent = self.params["consent"] or {}
        errors.extend(remediation.consent_errors(consent))
        self.consent = consent
        self.decisions = {}
        for i, entry in enumerate(self.params["decisions"]):
            name = entry.get("node")
            found = dns_subdomain_errors(name, "decisions[%d].node %r" % (i, name)) if isinstance(name, str) else [
                "decisions[%d].node must be a node name, got %r" % (i, name)]
            if entry.get("action") not in QUARANTINE_ACTIONS:
                found.append("decisions[%d].action must be one of %s (health_quarantine's), got %r" % (
                    i, ", ".join(QUARANTINE_ACTIONS), entry.get("action")))
            blocking = entry.get("blocking", [])
            if not isinstance(blocking, list) or not all(isinstance(f, dict) for f in blocking):
                found.append("decisions[%d].blocking must be a list of findings (mappings with gpu and kind)" % i)
            if not found and name in self.decisions:
                found.append("decisions: node %s is named twice" % name)
            errors.extend(found)
            if not found:
                self.decisions[name] = {"action": entry["action"], "blocking": blocking}
        return errors

    def read(self):
        _kube.mask_kubeconfig_secrets(self.module)
        self.kube = _kube.Kube.from_params(self.params)
        self.now = time.time()
        return dict((name, self.read_node(name)) for name in sorted(self.decisions))

    def read_node(self, name):
        return self.kube.get("read node %s" % name, _kube.node_path(name))

    def decide(self, node, name):
        entry = self.decisions[name]
        decision = remediation.decide(entry["action"], self.consent.get(name, "none"), entry["blocking"], node,
                                      self.settings, self.now)
        return decision, remediation.node_writes(node, decision, self.now)

    def row(self, name, decision, writes):
        return {"node": name, "consent": self.consent.get(name, "none"), "action": decision["action"],
                "gpus": list(decision["gpus"]), "reason": decision["reason"], "attempts": decision["attempts"],
                "changes": list(writes["changes"])}

    def plan(self, current):
        self.rows, self.writes = {}, {}
        for name in sorted(self.decisions):
            decision, writes = self.decide(current[name], name)
            self.rows[name] = self.row(name, decision, writes)
            if writes["changes"]:
                self.writes[name] = (decision, writes)
        self.result["nodes"] = [self.rows[name] for name in sorted(self.rows)]
        return self.writes

    def apply(self, current, changes):
        for name in sorted(changes):
            # (after a conflict: the node read again and decided on what is there now: another sweep's attempt counts)
            write_as_planned(changes[name], lambda name=name: self.decide(self.read_node(name), name),
                             lambda planned, name=name: self.write(name, planned), tries=ATTEMPTS)
        self.result["nodes"] = [self.rows[name] for name in sorted(self.rows)]

    def write(self, name, planned):
        """The attempt's record, then the condition, on node ``name``."""
        decision, writes = planned
        self.rows[name] = self.row(name, decision, writes)
        if writes["spec_patch"] is not None:
            self.kube.patch("record the health sweep's remediation attempt on node %s" % name,
                            _kube.node_path(name), writes["spec_patch"])
        if writes["status_patch"] is not None:
            self.kube.patch("write the health sweep's remediation condition on node %s (status subresource)" % name,
                            _kube.node_path(name, "status"), writes["status_patch"], strategic=True)
        self.rows[name]["written"] = True


def main():
    run_module(HealthRemediation)


if __name__ == "__main__":
    main()
