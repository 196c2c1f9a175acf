# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate's marks on a Kubernetes Node (PRIVATE: do not use from other collections).

A pure planner (no I/O) for the module node_health: it checks a health verdict computed elsewhere, and says which
writes take a Node to the marks that verdict asks for:

- a node with blocking findings is cordoned (or left cordoned, whoever did it) with the collection's mark
  (``_kube_nodes.cordon_patch``), tainted ``gpuops.nvidia/gpu-unhealthy=<first blocking kind>:NoSchedule``, and
  carries a Node condition of its own type, ``GpuopsNvidiaGpuHealthy``, status ``False``, with the findings per GPU;
- a healthy node loses that taint and that condition, and its cordon when the cordon carries the collection's mark;
  another taint, another condition type and an unmarked cordon are never touched;
- where the node has a burn-in record (_burn_in.summary), the Node carries it as the annotation
  ``gpuops.nvidia/burn-in`` (compact JSON: level, verdict, time, driver, DCGM version, failed tests), written when it
  differs and never removed by this planner (a node without a record keeps what an earlier one wrote).

The Kubernetes rules this relies on (kubernetes/api at v0.33.0, core/v1/types.go): ``NodeSpec.Taints`` is
``+listType=atomic``, so a patch carries the whole list (guarded by the node's resourceVersion, so a taint that
someone adds meanwhile makes the write fail 409 and the caller reads again instead of dropping it);
``NodeStatus.Conditions`` is ``patchStrategy=merge, patchMergeKey=type``, so a strategic merge patch of the node's
``status`` subresource writes or deletes (``$patch: delete``) our type alone, and fields it leaves out keep their
stored values (lastTransitionTime is sent only when the status changes). A write to the node itself drops status
changes, one to ``status`` drops spec changes (kubernetes pkg/registry/core/node/strategy.go, PrepareForUpdate).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import annotation_value
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import order_key
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import to_label_value
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_nodes import BURN_IN_ANNOTATION
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_nodes import OWNER_ANNOTATION, cordon_patch

TAINT_KEY = "gpuops.nvidia/gpu-unhealthy"
TAINT_EFFECT = "NoSchedule"
TAINT_FALLBACK = "gpu-unhealthy"
CONDITION_TYPE = "GpuopsNvidiaGpuHealthy"
REASON_FALLBACK = "GpuUnhealthy"
# The condition's message is cut here (the findings that do not fit are counted): the node object is read by every
# kubelet heartbeat and every `kubectl describe`, and the run's own output lists them all.
MESSAGE_LIMIT = 4096
MAX_FINDINGS = 4096
KIND_LIMIT = 128
FINDING_MESSAGE_LIMIT = 2048

VERDICT_KEYS = ("healthy", "blocking", "warnings")
FINDING_KEYS = ("gpu", "bus_id", "kind", "message")
# A PCI address as NVML writes it (nvmlPciInfo_t.busId: domain:bus:device.function, 8 or 4 hex digits of domain).
_BUS_ID = re.compile(r"^(?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class VerdictError(ValueError):
    """The verdict is not what node_health takes; ``errors``: every problem found."""

    def __init__(self, errors):
        super(VerdictError, self).__init__("; ".join(errors))
        self.errors = errors


def _shown(value):
    return repr(value)[:80]


def _finding_errors(where, item):
    if not isinstance(item, dict):
        return ["%s must be a mapping with keys %s, got %s" % (where, ", ".join(FINDING_KEYS), _shown(item))]
    errors = []
    unknown = sorted(str(k) for k in item if k not in FINDING_KEYS)
    if unknown:
        errors.append("%s has unknown keys %s (valid: %s)" % (where, ", ".join(unknown), ", ".join(FINDING_KEYS)))
    missing = [k for k in FINDING_KEYS if k not in item]
    if missing:
        errors.append("%s lacks %s (gpu and bus_id may be null for a finding of no one GPU)"
                      % (where, ", ".join(missing)))
    gpu = item.get("gpu")
    if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < 1024):
        errors.append("%s.gpu must be a GPU index (an integer from 0 to 1023) or null, got %s" % (where, _shown(gpu)))
    bus_id = item.get("bus_id")
    if bus_id is not None and not (isinstance(bus_id, str) and _BUS_ID.match(bus_id)):
        errors.append("%s.bus_id must be a PCI address as NVML writes it (e.g. 00000000:47:00.0) or null, got %s"
                      % (where, _shown(bus_id)))
    kind = item.get("kind")
    if "kind" in item and not (isinstance(kind, str) and kind.strip() and len(kind) <= KIND_LIMIT
                               and not _CONTROL.search(kind)):
        errors.append("%s.kind must be a non-empty string of at most %d characters without control characters "
                      "(e.g. row_remap_pending), got %s" % (where, KIND_LIMIT, _shown(kind)))
    message = item.get("message")
    if "message" in item and not (isinstance(message, str) and message.strip()
                                  and len(message) <= FINDING_MESSAGE_LIMIT):
        errors.append("%s.message must be a non-empty string of at most %d characters, got %s"
                      % (where, FINDING_MESSAGE_LIMIT, _shown(message)))
    return errors


def verdict_errors(verdict):
    """Every problem with ``verdict`` ({"healthy": bool, "blocking": [finding], "warnings": [finding]}, a finding
    {"gpu": int|null, "bus_id": str|null, "kind": str, "message": str}), as sentences; [] when it is good."""
    if not isinstance(verdict, dict):
        return ["verdict must be a mapping with keys %s, got %s" % (", ".join(VERDICT_KEYS), _shown(verdict))]
    errors = []
    unknown = sorted(str(k) for k in verdict if k not in VERDICT_KEYS)
    if unknown:
        errors.append("verdict has unknown keys %s (valid: %s)" % (", ".join(unknown), ", ".join(VERDICT_KEYS)))
    healthy = verdict.get("healthy")
    if not isinstance(healthy, bool):
        errors.append("verdict.healthy must be true or false, got %s" % _shown(healthy))
    for name, required in (("blocking", True), ("warnings", False)):
        if name not in verdict and not required:
            continue
        items = verdict.get(name)
        if not isinstance(items, list):
            errors.append("verdict.%s must be a list of findings, got %s" % (name, _shown(items)))
            continue
        if len(items) > MAX_FINDINGS:
            errors.append("verdict.%s has %d findings, at most %d are taken" % (name, len(items), MAX_FINDINGS))
            continue
        for index, item in enumerate(items):
            errors.extend(_finding_errors("verdict.%s[%d]" % (name, index), item))
    blocking = verdict.get("blocking")
    if isinstance(healthy, bool) and isinstance(blocking, list) and healthy == bool(blocking):
        errors.append("verdict.healthy is %s but verdict.blocking has %d findings: a verdict is healthy exactly when "
                      "nothing blocks" % (str(healthy).lower(), len(blocking)))
    return errors


def ordered(found):
    """Findings in the health read's one order (``_gpu_health.order_key``: by GPU, then by PCI address, then the rest;
    stable), which the gate's verdict already has: the taint, the condition's reason and message and the module's
    result read this order, as the run's message does, whatever order a verdict from elsewhere lists them in."""
    return sorted(found, key=lambda f: order_key(f.get("gpu"), f.get("bus_id")))


def check_verdict(verdict):
    """``verdict`` with warnings defaulted to [] and both lists ``ordered``; raises VerdictError naming every
    problem."""
    errors = verdict_errors(verdict)
    if errors:
        raise VerdictError(errors)
    return dict(verdict, blocking=ordered(verdict["blocking"]), warnings=ordered(verdict.get("warnings") or []))


def taint_value(blocking):
    """The taint's value: the first blocking finding's kind (``ordered``) made a label value."""
    return to_label_value(ordered(blocking)[0]["kind"], TAINT_FALLBACK) if blocking else TAINT_FALLBACK


def condition_reason(blocking):
    """The condition's reason, CamelCase as Kubernetes' reasons are: the first blocking kind's words (``ordered``;
    row_remap_pending -> RowRemapPending)."""
    words = re.findall(r"[A-Za-z0-9]+", ordered(blocking)[0]["kind"]) if blocking else []
    reason = "".join(w[:1].upper() + w[1:] for w in words)
    if not reason or not reason[0].isalpha():
        reason = REASON_FALLBACK + reason
    return reason[:KIND_LIMIT]


def _finding_text(item):
    """A finding's message on one line; prefixed with its GPU and bus id where the message does not name the bus
    id itself (the policy's messages do: "GPU 3 (00000000:47:00.0): remapped rows pending - ...")."""
    message = " ".join(item["message"].split())
    if item.get("bus_id") and item["bus_id"].lower() in message.lower():
        return message
    where = " ".join(x for x in ("GPU %d" % item["gpu"] if item.get("gpu") is not None else "",
                                 "(%s)" % item["bus_id"] if item.get("bus_id") else "") if x)
    return "%s: %s" % (where, message) if where else message


def condition_message(blocking):
    """The findings, ``ordered`` (by GPU, then by PCI address, findings of neither last), each naming its GPU and bus
    id, numbered; cut at MESSAGE_LIMIT characters, saying how many findings were left out."""
    found = ordered(blocking)
    head = "%d GPU health finding%s block%s this node: " % (
        len(found), "" if len(found) == 1 else "s", "s" if len(found) == 1 else "")
    parts = ["[%d] %s" % (index + 1, _finding_text(item)) for index, item in enumerate(found)]
    text = head + "; ".join(parts)
    if len(text) <= MESSAGE_LIMIT:
        return text
    for kept in range(len(parts) - 1, -1, -1):
        text = head + "; ".join(parts[:kept]) + " ... and %d more (the run's output lists them all)" % (
            len(parts) - kept)
        if len(text) <= MESSAGE_LIMIT:
            return text
    return text[:MESSAGE_LIMIT]


def node_marks(node, owner):
    """What the node carries now, as the module reports it: schedulability, the cordon mark, the burn-in annotation,
    every taint, and our condition (None when absent)."""
    spec = node.get("spec") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    ours = [c for c in conditions if isinstance(c, dict) and c.get("type") == CONDITION_TYPE]
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return {"unschedulable": bool(spec.get("unschedulable")),
            OWNER_ANNOTATION: annotations.get(OWNER_ANNOTATION), BURN_IN_ANNOTATION: annotations.get(BURN_IN_ANNOTATION),
            "taints": [dict(t) for t in spec.get("taints") or [] if isinstance(t, dict)],
            "condition": dict(ours[0]) if ours else None}


def _is_ours(taint):
    return taint.get("key") == TAINT_KEY and taint.get("effect") == TAINT_EFFECT


def plan(node, verdict, owner, now, release_cordon=True, burn_in=None):
    """The writes that take ``node`` (the API's dict) to the marks ``verdict`` (checked) asks for.

    ``owner``: the cordon mark's value; ``now``: the RFC 3339 time a written condition carries (heartbeat, and
    transition when its status changes); ``release_cordon``: with a healthy verdict, release a cordon marked
    ``owner`` too; ``burn_in``: the node's burn-in summary (checked, _burn_in.summary_errors) to carry as the
    annotation BURN_IN_ANNOTATION, None to leave the annotation as it is. Returns a dict: ``spec_patch`` (a JSON
    merge patch of the node, or None), ``status_patch`` (a strategic merge patch of node/status, or None), ``changes``
    (sentences; ``spec_changes`` and ``status_changes`` are those of each patch), ``before`` and ``after``
    (node_marks-shaped)."""
    before = node_marks(node, owner)
    unhealthy = not verdict["healthy"]
    changes = []            # the node's (spec_patch) first, then its status's (status_patch)
    spec_patch = cordon_patch(unhealthy, before["unschedulable"], before[OWNER_ANNOTATION], owner) \
        if unhealthy or release_cordon else None
    if spec_patch is not None:
        changes.append("cordon the node, marked %s=%s" % (OWNER_ANNOTATION, owner) if unhealthy
                       else "release the collection's cordon (%s=%s)" % (OWNER_ANNOTATION, owner))
    taints = list(before["taints"])
    if unhealthy:
        want = {"key": TAINT_KEY, "value": taint_value(verdict["blocking"]), "effect": TAINT_EFFECT}
        index = next((i for i, t in enumerate(taints) if _is_ours(t)), None)
        if index is None:
            taints.append(want)
            changes.append("add taint %s=%s:%s" % (TAINT_KEY, want["value"], TAINT_EFFECT))
        elif taints[index] != want:
            changes.append("set taint %s to %s:%s (was %s)" % (TAINT_KEY, want["value"], TAINT_EFFECT,
                                                               taints[index].get("value")))
            taints[index] = want
    else:
        gone = [t for t in taints if _is_ours(t)]
        taints = [t for t in taints if not _is_ours(t)]
        if gone:
            changes.append("remove taint %s=%s:%s" % (TAINT_KEY, gone[0].get("value"), TAINT_EFFECT))
    if burn_in is not None and annotation_value(burn_in) != before[BURN_IN_ANNOTATION]:
        spec_patch = spec_patch or {}
        spec_patch.setdefault("metadata", {}).setdefault("annotations", {})[BURN_IN_ANNOTATION] = \
            annotation_value(burn_in)
        changes.append("record the burn-in on the node (%s=%s: %s, driver %s)" % (
            BURN_IN_ANNOTATION, burn_in["level"], burn_in["verdict"], burn_in["driver"]))
    if taints != before["taints"]:
        spec_patch = spec_patch or {}
        spec_patch.setdefault("spec", {})["taints"] = taints or None
        # the whole list (taints are atomic), written only onto the node as it was read
        spec_patch.setdefault("metadata", {})["resourceVersion"] = (node.get("metadata") or {}).get("resourceVersion")

    spec_changes = list(changes)
    status_patch = None
    condition = before["condition"]
    if unhealthy:
        want = {"type": CONDITION_TYPE, "status": "False", "reason": condition_reason(verdict["blocking"]),
                "message": condition_message(verdict["blocking"])}
        if condition is None or any(condition.get(k) != v for k, v in want.items()):
            written = dict(want, lastHeartbeatTime=now)
            if condition is None or condition.get("status") != "False" or not condition.get("lastTransitionTime"):
                written["lastTransitionTime"] = now
            status_patch = {"status": {"conditions": [written]}}
            condition = dict(condition or {}, **written)
            verb = "set" if before["condition"] is None else "update"
            changes.append("%s condition %s=False (%s)" % (verb, CONDITION_TYPE, want["reason"]))
    elif condition is not None:
        status_patch = {"status": {"conditions": [{"type": CONDITION_TYPE, "$patch": "delete"}]}}
        condition = None
        changes.append("remove condition %s" % CONDITION_TYPE)

    after = dict(before, taints=taints, condition=condition)
    if spec_patch and "unschedulable" in spec_patch.get("spec", {}):
        after["unschedulable"] = spec_patch["spec"]["unschedulable"]
    for key in (OWNER_ANNOTATION, BURN_IN_ANNOTATION):
        if spec_patch and key in (spec_patch.get("metadata") or {}).get("annotations", {}):
            after[key] = spec_patch["metadata"]["annotations"][key]
    return {"spec_patch": spec_patch, "status_patch": status_patch, "changes": changes,
            "spec_changes": spec_changes, "status_changes": changes[len(spec_changes):], "before": before,
            "after": after}
