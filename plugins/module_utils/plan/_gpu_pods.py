# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pausing a node's GPU DaemonSet pods without deleting a pod (PRIVATE to gpuops.nvidia). Pure: no I/O.

A node's device plugin, GPU feature discovery and MPS control daemon pods hold its GPUs (their device files, NVML
handles): while they run, a GPU reset fails and the plugin keeps advertising the devices it enumerated when it
started. Deleting the pods races the DaemonSet controller, which recreates them at once. Instead, every such
DaemonSet carries, in each term of its pod template's required node affinity, the expression
``gpuops.nvidia/gpu-pods-paused NotIn ["true"]`` (the device plugin release this collection installs gets it from
its chart values); labelling a node ``gpuops.nvidia/gpu-pods-paused=true`` makes the DaemonSet controller remove
the pods from that node, and removing the label brings them back (Kubernetes: a DaemonSet runs a pod on every node
that matches its node affinity, https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#how-daemon-pods-are-scheduled).

The label is set together with the annotation ``gpuops.nvidia/gpu-pods-paused-by`` (who paused) and
``gpuops.nvidia/gpu-pods-paused-daemonsets`` (the DaemonSets that had a pod there, to wait for when resuming), in
one PATCH: a run that is interrupted leaves the mark, the next run resumes the node, and a label an administrator
set (no mark of ours) is never removed by us.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

PAUSE_LABEL = "gpuops.nvidia/gpu-pods-paused"
PAUSE_VALUE = "true"
PAUSED_BY = "gpuops.nvidia/gpu-pods-paused-by"
PAUSED_DAEMONSETS = "gpuops.nvidia/gpu-pods-paused-daemonsets"


def pause_expression():
    """The node-affinity expression that keeps a DaemonSet's pods off a paused node."""
    return {"key": PAUSE_LABEL, "operator": "NotIn", "values": [PAUSE_VALUE]}


def _required_terms(affinity):
    node = (affinity or {}).get("nodeAffinity")
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    return required.get("nodeSelectorTerms") if isinstance(required, dict) else None


def affinity_errors(affinity, what):
    """A user's affinity value (a chart's, named ``what`` in the message) that the pause expression cannot be added
    to; [] when it can."""
    if affinity is None:
        return []
    terms = _required_terms(affinity) if isinstance(affinity, dict) else None
    if not isinstance(affinity, dict) or (terms is not None and not (
            isinstance(terms, list) and terms and all(isinstance(t, dict) for t in terms)
            and all(isinstance(t.get("matchExpressions", []), list) for t in terms))):
        return ["%s must be a mapping whose nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms, where given, is a non-empty list of terms with matchExpressions lists (the "
                "collection adds its pause expression to each term), got %r" % (what, affinity)]
    return []


def pausable_affinity(affinity, default_terms):
    """An affinity value with the pause expression in every required node-affinity term (terms are ORed), so that
    the DaemonSet's pods leave a node that node_gpu_pods paused. ``affinity`` is the user's own value (its terms and
    other keys are kept); without required terms of its own, the chart's ``default_terms`` are used (Helm replaces
    a list value whole, so they are given again)."""
    out = dict(affinity or {})
    terms = _required_terms(affinity)
    terms = [dict(t) for t in (terms if terms else default_terms)]
    for term in terms:
        expressions = list(term.get("matchExpressions") or [])
        if pause_expression() not in expressions:
            expressions.append(pause_expression())
        term["matchExpressions"] = expressions
    node = dict(out.get("nodeAffinity") or {})
    node["requiredDuringSchedulingIgnoredDuringExecution"] = dict(
        node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}, nodeSelectorTerms=terms)
    out["nodeAffinity"] = node
    return out


def _excludes(expression):
    if expression.get("key") != PAUSE_LABEL:
        return False
    if expression.get("operator") == "DoesNotExist":
        return True
    return expression.get("operator") == "NotIn" and PAUSE_VALUE in (expression.get("values") or [])


def excludes_paused(pod_spec):
    """Whether a pod template's spec keeps its pods off a node labelled PAUSE_LABEL=PAUSE_VALUE: its required node
    affinity has terms, and every term (terms are ORed) has an expression that excludes the label."""
    affinity = ((pod_spec or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    if not terms:
        return False
    return all(any(_excludes(e) for e in (term.get("matchExpressions") or [])) for term in terms)


def daemonset_id(daemonset):
    return "%s/%s" % (daemonset["metadata"].get("namespace"), daemonset["metadata"]["name"])


def not_pausable(daemonsets):
    """Messages for the DaemonSets whose pods would stay on a paused node."""
    return ["DaemonSet %s does not keep its pods off a paused node: add %s to every nodeSelectorTerm of its pod "
            "template's spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution (for a Helm chart, "
            "its affinity value)" % (daemonset_id(d), json.dumps(pause_expression(), sort_keys=True))
            for d in daemonsets if not excludes_paused(((d.get("spec") or {}).get("template") or {}).get("spec"))]


def owned_pods(pods, daemonsets):
    """{daemonset id: [pod, ...]} of the pods (listed on one node) that these DaemonSets own."""
    ids = set(daemonset_id(d) for d in daemonsets)
    out = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        for owner in meta.get("ownerReferences") or []:
            key = "%s/%s" % (meta.get("namespace"), owner.get("name"))
            if owner.get("kind") == "DaemonSet" and key in ids:
                out.setdefault(key, []).append(pod)
    return out


def pod_ready(pod):
    """Running, not being deleted, and its Ready condition True."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def mark(node):
    """(label value or None, paused-by or None, [daemonset ids]) of a node."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        recorded = json.loads(annotations.get(PAUSED_DAEMONSETS) or "[]")
    except ValueError:
        recorded = []
    if not isinstance(recorded, list):
        recorded = []
    return (meta.get("labels") or {}).get(PAUSE_LABEL), annotations.get(PAUSED_BY), [str(r) for r in recorded]


def pause_patch(node, owner, holding):
    """The merge patch that pauses the node's GPU pods, or None where the node is already paused (by us: nothing to
    do; by someone else: theirs to release, and we do not take it over)."""
    label, dummy_by, dummy_recorded = mark(node)
    if label == PAUSE_VALUE:
        return None
    return {"metadata": {"labels": {PAUSE_LABEL: PAUSE_VALUE},
                         "annotations": {PAUSED_BY: owner, PAUSED_DAEMONSETS: json.dumps(sorted(holding))}}}


def resume_patch(node, owner):
    """The merge patch that lets the GPU pods back, or None: only a pause marked by ``owner`` is released (the
    annotations alone, left by a run killed half-way through an earlier release, are cleared too)."""
    label, paused_by, dummy_recorded = mark(node)
    if paused_by != owner:
        return None
    patch = {"metadata": {"annotations": {PAUSED_BY: None, PAUSED_DAEMONSETS: None}}}
    if label is not None:
        patch["metadata"]["labels"] = {PAUSE_LABEL: None}
    return patch
