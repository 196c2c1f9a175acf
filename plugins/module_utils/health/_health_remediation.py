# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet health sweep's remediation with consent (PRIVATE: do not use from other collections).

A pure planner (no I/O) for the module health_remediation, which runs after health_quarantine. Per swept node it says
what the sweep may do about the node's blocking findings, and what it records before doing it:

- **consent** (``gpu_node_health_remediation``, per node): ``none`` (the default) does nothing; ``reset`` allows a GPU
  reset; ``reboot`` allows a reset and, where a reset cannot clear the findings, a node reboot. Nothing is done
  without it.
- **only a quarantined node** (health_quarantine's ``quarantine`` or ``keep``: cordoned and tainted) is remediated; a
  node the circuit breaker held in service, a healthy node and one counting healthy sweeps are not.
- **which findings what clears**: a GPU reset clears ``_gpu_health.RESET_CLEARS`` (a pending row remap, a pending
  page retirement; gpu_health_reset resets for those alone, and only idle GPUs); a reboot is needed for ``REBOOT_CLEARS``
  (a lost, missing or unresponsive GPU, an unresponsive NVML, a fatal Xid, and a fatal NVSwitch SXid: the sweep keeps
  this boot's fatal Xids and SXids blocking until the node boots again, so a GPU reset cannot clear one, whatever
  NVIDIA's immediate action for it; for an SXid, NVIDIA's Fabric Manager guide asks for a host restart or a reset of
  the NVSwitches with the GPUs, which gpu_health_reset does not do).
  A node with any other blocking finding (a failed remap, a degraded PCIe link, the fabric, ...) needs an operator:
  no rung clears it, so none is tried.
- **the record before the attempt**: each attempt's time goes into the annotation ``gpuops.nvidia/health-remediation``
  (JSON: the attempt times in the window, the last action) in a write that must succeed before the attempt is made, so
  an attempt killed half-way still counts, and a node never resets or reboots in a loop.
- **the cap**: at most ``max_attempts`` attempts per node in ``window_hours``. A node at the cap that still needs a
  remediation stays quarantined and gets the condition ``GpuopsNvidiaGpuRemediation=False`` (reason ``NeedsOperator``,
  the attempts and the findings in its message): a type of its own, because health_quarantine rewrites
  ``GpuopsNvidiaGpuHealthy`` from the findings every sweep. The condition goes when the node is released.
- **escalation**: with ``reboot`` consent, a node whose last attempt in the window was a reset and whose reset-clearable
  findings are still there is rebooted (gpu_health_reset's own advice for a finding the reset did not clear).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import table_errors
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import RESET_CLEARS
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_quarantine import (
    KEEP, QUARANTINE, RELEASE, HEALTHY, annotations, format_time, parse_time)

RECORD = "gpuops.nvidia/health-remediation"
CONDITION_TYPE = "GpuopsNvidiaGpuRemediation"
NEEDS_OPERATOR = "NeedsOperator"

# The consent, from the least to the most the sweep may do.
CONSENTS = ("none", "reset", "reboot")
# Blocking finding kinds that only a reboot clears.
REBOOT_CLEARS = ("gpu_lost", "gpu_missing", "gpu_unresponsive", "nvml_unresponsive", "xid_fatal", "sxid_fatal")

DEFAULTS = {"max_attempts": 2, "window_hours": 24}
# (lowest, highest, whole number)
LIMITS = {"max_attempts": (1, 100, True), "window_hours": (0, 24 * 90, False)}

# What the sweep does with a node (``decide``'s ``action``).
NONE, RESET, REBOOT, OPERATOR = "none", "reset", "reboot", "needs_operator"
ACTIONS = (NONE, RESET, REBOOT, OPERATOR)

# The condition's message is cut here (the node object is read by every kubelet heartbeat's watchers).
_MESSAGE_MAX = 1024


def settings_errors(settings):
    """Every problem with ``settings`` (a dict of DEFAULTS' keys), each saying what is valid."""
    return table_errors(settings, LIMITS)


def consent_errors(consents):
    """Every node whose consent is not one of CONSENTS, naming the valid ones."""
    if not isinstance(consents, dict):
        return ["the consent must be a mapping of node name to one of %s, got %s" % (
            ", ".join(CONSENTS), type(consents).__name__)]
    return ["remediation of node %s must be one of %s, got %r" % (name, ", ".join(CONSENTS), value)
            for name, value in sorted(consents.items(), key=lambda kv: str(kv[0])) if value not in CONSENTS]


def record(node):
    """The node's remediation record {"attempts": [seconds, ...] (sorted), "last": {"action", "at", "gpus"} or None};
    an absent or unreadable record reads as no attempt (an unreadable one is replaced by the next write)."""
    text = annotations(node).get(RECORD)
    empty = {"attempts": [], "last": None}
    if text is None:
        return empty
    try:
        value = json.loads(text)
    except ValueError:
        return empty
    if not isinstance(value, dict):
        return empty
    attempts = sorted(t for t in (parse_time(a) for a in value.get("attempts") or [] if isinstance(a, str))
                      if t is not None) if isinstance(value.get("attempts"), list) else []
    last = value.get("last")
    if not (isinstance(last, dict) and last.get("action") in (RESET, REBOOT) and parse_time(last.get("at"))):
        last = None
    else:
        gpus = last.get("gpus")
        last = {"action": last["action"], "at": parse_time(last["at"]),
                "gpus": sorted(g for g in gpus if isinstance(g, int) and not isinstance(g, bool))
                if isinstance(gpus, list) else []}
    return {"attempts": attempts, "last": last}


def record_text(attempts, last):
    return json.dumps({"attempts": [format_time(t) for t in attempts],
                       "last": None if last is None else {"action": last["action"], "at": format_time(last["at"]),
                                                          "gpus": list(last["gpus"])}},
                      sort_keys=True, separators=(",", ":"))


def in_window(attempts, now, window_hours):
    """The attempts within the window that ends ``now`` (a time after ``now``, a clock that went back, counts too:
    it cannot be shown to be outside the window)."""
    start = now - window_hours * 3600.0
    return [t for t in attempts if t >= start]


def condition(node):
    """The node's GpuopsNvidiaGpuRemediation condition, or None."""
    for item in (node.get("status") or {}).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") == CONDITION_TYPE:
            return item
    return None


def classify(blocking):
    """{"reset": [GPU indexes a reset clears], "reboot": [kinds only a reboot clears], "other": [kinds no rung
    clears]} of a verdict's blocking findings (each {"gpu", "kind", ...})."""
    reset, reboot, other = set(), [], []
    for finding in blocking or []:
        kind = finding.get("kind")
        if kind in RESET_CLEARS and finding.get("gpu") is not None:
            reset.add(finding["gpu"])
        elif kind in REBOOT_CLEARS:
            if kind not in reboot:
                reboot.append(kind)
        elif kind not in other:
            other.append(kind)
    return {"reset": sorted(reset), "reboot": reboot, "other": other}


def _findings_text(blocking):
    out = []
    for finding in blocking or []:
        where = "node" if finding.get("gpu") is None else "GPU %s" % finding["gpu"]
        text = "%s on %s" % (finding.get("kind"), where)
        if text not in out:
            out.append(text)
    return ", ".join(out) or "none"


def operator_message(attempts, last, blocking, settings):
    text = ("%d remediation attempt(s) in %g h (at %s; the last a %s) did not clear: %s; the cap is %d: an operator "
            "must act, the node stays quarantined" % (
                len(attempts), settings["window_hours"], ", ".join(format_time(t) for t in attempts),
                last["action"] if last else "reset", _findings_text(blocking), settings["max_attempts"]))
    return text if len(text) <= _MESSAGE_MAX else text[:_MESSAGE_MAX - 3] + "..."


def decide(quarantine_action, consent, blocking, node, settings, now):
    """One node's decision: {"action" (ACTIONS), "gpus" (to reset), "reason" (why this, in words), "attempts" (in the
    window, this one included), "record" (the record to write: {"attempts", "last"}, or None to leave it),
    "condition" ("set", "drop" or None), "message" (the condition's)}.

    ``quarantine_action``: health_quarantine's action for the node; ``consent``: one of CONSENTS; ``blocking``: the
    verdict's blocking findings; ``node``: the Node as read; ``settings``: DEFAULTS' keys; ``now``: seconds."""
    merged = dict(DEFAULTS, **settings)
    held = record(node)
    counted = in_window(held["attempts"], now, merged["window_hours"])
    out = {"action": NONE, "gpus": [], "reason": None, "attempts": len(counted), "record": None, "condition": None,
           "message": None}
    have_condition = condition(node) is not None
    if quarantine_action in (RELEASE, HEALTHY):
        if have_condition:
            out["condition"] = "drop"
            out["reason"] = "released: the remediation condition goes with the quarantine"
        return out
    if quarantine_action not in (QUARANTINE, KEEP):
        why = {"held": "left in service by the circuit breaker: not remediated (only a quarantined node is)",
               "count": "quarantined and healthy this sweep: nothing to remediate"}
        out["reason"] = why.get(quarantine_action, "not quarantined: not remediated")
        return out
    if consent not in (RESET, REBOOT):
        out["reason"] = "no consent (gpu_node_health_remediation is none)"
        return out
    found = classify(blocking)
    if found["other"]:
        out["reason"] = "no remediation clears %s: an operator must act" % ", ".join(found["other"])
        return out
    if found["reboot"]:
        if consent != REBOOT:
            out["reason"] = ("%s needs a node reboot, and gpu_node_health_remediation is reset (reboot allows it)"
                             % ", ".join(found["reboot"]))
            return out
        want, gpus = REBOOT, []
    elif found["reset"]:
        last = held["last"]
        escalate = (consent == REBOOT and last is not None and last["action"] == RESET
                    and last["at"] in counted and set(found["reset"]) & set(last["gpus"]))
        want, gpus = (REBOOT, []) if escalate else (RESET, found["reset"])
    else:
        out["reason"] = "no blocking finding a remediation clears"
        return out
    if len(counted) >= merged["max_attempts"]:
        out["action"] = OPERATOR
        out["reason"] = "the cap: %d attempt(s) in %g h, at most %d" % (
            len(counted), merged["window_hours"], merged["max_attempts"])
        out["message"] = operator_message(counted, held["last"], blocking, merged)
        current = condition(node) or {}
        if current.get("status") != "False" or current.get("reason") != NEEDS_OPERATOR or \
                current.get("message") != out["message"]:
            out["condition"] = "set"
        return out
    out["action"], out["gpus"] = want, gpus
    out["attempts"] = len(counted) + 1
    out["record"] = {"attempts": sorted(counted + [now]), "last": {"action": want, "at": now, "gpus": gpus}}
    out["reason"] = ("a reset did not clear %s (the last attempt, at %s): reboot" % (
        ", ".join("GPU %d" % g for g in found["reset"]), format_time(held["last"]["at"]))
        if want == REBOOT and not found["reboot"] else
        ("%s: reboot" % ", ".join(found["reboot"]) if want == REBOOT else
         "reset GPU %s (%s)" % (", ".join(str(g) for g in gpus), _findings_text(
             [f for f in blocking if f.get("kind") in RESET_CLEARS]))))
    if have_condition:
        # (a node below the cap again, its earlier attempts out of the window: the operator's condition is stale)
        out["condition"] = "drop"
    return out


def node_writes(node, decision, now):
    """The writes ``decision`` needs on ``node``: {"spec_patch" (the record, on the node as read), "status_patch"
    (the condition set or deleted), "changes" (in words)}. The record goes in a patch of its own, written before the
    attempt is made."""
    spec = status = None
    changes = []
    if decision["record"] is not None:
        spec = {"metadata": {"annotations": {RECORD: record_text(decision["record"]["attempts"],
                                                                 decision["record"]["last"])},
                             # counted from what was read: written only onto the node as it was read
                             "resourceVersion": (node.get("metadata") or {}).get("resourceVersion")}}
        changes.append("record the %s attempt (%d in the window)" % (decision["action"], decision["attempts"]))
    if decision["condition"] == "set":
        stamp = format_time(now)
        current = condition(node) or {}
        written = {"type": CONDITION_TYPE, "status": "False", "reason": NEEDS_OPERATOR,
                   "message": decision["message"], "lastHeartbeatTime": stamp}
        written["lastTransitionTime"] = (current.get("lastTransitionTime") if current.get("status") == "False"
                                         and current.get("lastTransitionTime") else stamp)
        status = {"status": {"conditions": [written]}}
        changes.append("set condition %s=False (%s)" % (CONDITION_TYPE, NEEDS_OPERATOR))
    elif decision["condition"] == "drop":
        status = {"status": {"conditions": [{"type": CONDITION_TYPE, "$patch": "delete"}]}}
        changes.append("remove condition %s" % CONDITION_TYPE)
    return {"spec_patch": spec, "status_patch": status, "changes": changes}
