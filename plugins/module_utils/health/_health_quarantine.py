# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet health sweep's quarantine (PRIVATE: do not use from other collections).

A pure planner (no I/O) for the module health_quarantine. A sweep reads every node's GPU health (gpu_health_read) and
hands the verdicts here with every GPU node the API lists; this says, per node, what the sweep does:

- **quarantine**: an unhealthy node that is not quarantined gets the health gate's marks (``_health_marks``: the
  collection's cordon, the taint ``gpuops.nvidia/gpu-unhealthy``, the condition ``GpuopsNvidiaGpuHealthy=False``) and
  the record ``gpuops.nvidia/health-quarantine`` (when, and the healthy sweeps counted since), in the same write as the
  cordon and the taint, so a node is never cordoned without its record or recorded without its cordon;
- **flap damping**: a quarantined node is released only after ``release_after`` consecutive healthy sweeps; a sweep
  that finds it unhealthy again starts the count again;
- **the circuit breaker**: within ``window_hours`` at most ``ceil(breaker_percent % of the GPU nodes)`` and at most
  ``breaker_max_nodes`` nodes are newly quarantined (NVIDIA/NVSentinel's quarantine circuit breaker: a percentage of
  the GPU nodes, NVSentinel issue 1228; an absolute bound beside it, its PR 1713). The window counts the record
  ``gpuops.nvidia/health-last-quarantined`` that every new quarantine writes and a release keeps, so sweeps, job
  slices and controllers all count the same nodes. The nodes beyond the limit stay in service, their findings are
  reported, and the sweep fails naming the breaker. Nothing is queued: a later sweep acts on what it reads then
  (NVSentinel issue 450: a breaker closed after days replayed stale events);
- an administrator's cordon, taints and conditions are never touched (``_health_marks``);
- a node whose marks someone else took off (site.yml's gate releases a healthy node at once) is not quarantined any
  more: its stale record goes with the next write.

A node is quarantined when it carries the gate's taint. A node site.yml's gate marked (taint, no record) is adopted:
kept while unhealthy, released after ``release_after`` healthy sweeps, and not counted by the breaker (it was out of
service before this sweep).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_marks
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _rfc3339
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import table_errors

RECORD = "gpuops.nvidia/health-quarantine"
LAST = "gpuops.nvidia/health-last-quarantined"

DEFAULTS = {"release_after": 2, "breaker_percent": 10, "breaker_max_nodes": 10, "window_hours": 24}
# What each setting takes (checked by ``settings_errors``): (lowest, highest, whole number).
LIMITS = {"release_after": (1, 100, True), "breaker_percent": (0, 100, False), "breaker_max_nodes": (0, 100000, True),
          "window_hours": (0, 24 * 90, False)}

# What the sweep does with a node (``plan``'s ``action``).
QUARANTINE, KEEP, COUNT, RELEASE, HELD, HEALTHY = "quarantine", "keep", "count", "release", "held", "healthy"


def format_time(seconds):
    """RFC 3339, UTC, whole seconds (what the records and the condition carry)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(seconds)))


def parse_time(text):
    """Whole seconds since the epoch of an RFC 3339 time (``format_time``'s form; fractions and offsets allowed), or
    None where there is none (common/_rfc3339, the collection's one parser)."""
    return _rfc3339.whole_seconds_or_none(text)


def settings_errors(settings):
    """Every problem with ``settings`` (a dict of DEFAULTS' keys), each saying what is valid."""
    return table_errors(settings, LIMITS)


def breaker_limit(gpu_nodes, percent, max_nodes):
    """How many nodes may be newly quarantined in a window: the percentage of the GPU nodes rounded up, at most
    ``max_nodes``."""
    # (a percentage of a whole count: rounded to a millionth first, so 10 % of 30 is 3, not 4)
    return min(int(math.ceil(round(gpu_nodes * percent / 100.0, 6))), max_nodes)


def node_name(node):
    return (node.get("metadata") or {}).get("name")


def annotations(node):
    return (node.get("metadata") or {}).get("annotations") or {}


def is_quarantined(node):
    """The node carries the health gate's taint (whoever of the gate and the sweep put it there)."""
    return any(isinstance(t, dict) and t.get("key") == _health_marks.TAINT_KEY
               and t.get("effect") == _health_marks.TAINT_EFFECT for t in (node.get("spec") or {}).get("taints") or [])


def record(node):
    """The node's quarantine record {"since": seconds or None, "healthy_sweeps": n}, or None when absent; an unreadable
    record reads as one with no time and no healthy sweep (the next write replaces it)."""
    text = annotations(node).get(RECORD)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return {"since": None, "healthy_sweeps": 0}
    sweeps = value.get("healthy_sweeps")
    return {"since": parse_time(value.get("since")),
            "healthy_sweeps": sweeps if isinstance(sweeps, int) and not isinstance(sweeps, bool) and sweeps >= 0 else 0}


def record_text(since, healthy_sweeps):
    return json.dumps({"since": format_time(since), "healthy_sweeps": healthy_sweeps}, sort_keys=True,
                      separators=(",", ":"))


def in_window(node, now, window_hours):
    """The node was newly quarantined within the window that ends ``now``."""
    when = parse_time(annotations(node).get(LAST))
    return when is not None and now - window_hours * 3600.0 <= when <= now


def plan(nodes, verdicts, settings, now):
    """What a sweep does with each node it read.

    ``nodes``: every GPU node the API lists (the breaker's denominator, with each swept node the list lacks);
    ``verdicts``: {node name: the gate's verdict (``_health_marks.check_verdict``'d)} of the nodes this sweep read;
    ``settings``: DEFAULTS' keys; ``now``: seconds since the epoch. Returns {"nodes": {name: {"action", "healthy_sweeps",
    "since"}}, "breaker": {...}}. Every swept node must be in ``nodes`` (the caller reads each)."""
    merged = dict(DEFAULTS, **settings)
    by_name = dict((node_name(n), n) for n in nodes)
    missing = sorted(set(verdicts) - set(by_name))
    if missing:
        raise ValueError("swept nodes not given: %s" % ", ".join(missing))
    limit = breaker_limit(len(by_name), merged["breaker_percent"], merged["breaker_max_nodes"])
    counted = sorted(name for name, node in by_name.items() if in_window(node, now, merged["window_hours"]))
    decided, candidates = {}, []
    for name in sorted(verdicts):
        node, healthy = by_name[name], verdicts[name]["healthy"]
        held = record(node) if is_quarantined(node) else None
        if is_quarantined(node) and held is None:
            held = {"since": None, "healthy_sweeps": 0}     # the gate's marks without our record: adopted
        if held is None:
            if healthy:
                decided[name] = {"action": HEALTHY, "healthy_sweeps": 0, "since": None}
            else:
                candidates.append(name)
            continue
        since = held["since"] if held["since"] is not None else now
        if not healthy:
            decided[name] = {"action": KEEP, "healthy_sweeps": 0, "since": since}
            continue
        sweeps = held["healthy_sweeps"] + 1
        decided[name] = {"action": RELEASE if sweeps >= merged["release_after"] else COUNT, "healthy_sweeps": sweeps,
                         "since": since}
    budget = max(0, limit - len(counted))
    for i, name in enumerate(candidates):
        decided[name] = {"action": QUARANTINE if i < budget else HELD, "healthy_sweeps": 0,
                         "since": now if i < budget else None}
    held = candidates[budget:]
    return {"nodes": decided,
            "breaker": {"open": bool(held), "limit": limit, "gpu_nodes": len(by_name),
                        "percent": merged["breaker_percent"], "max_nodes": merged["breaker_max_nodes"],
                        "window_hours": merged["window_hours"], "quarantined_in_window": counted,
                        "quarantined_now": candidates[:budget], "held": held}}


def node_writes(node, verdict, decision, owner, now, release_after):
    """The writes that take ``node`` where ``decision`` (one of ``plan``'s) says: ``_health_marks.plan``'s dict
    (``spec_patch``, ``status_patch``, ``changes``, ``spec_changes``, ``status_changes``, ``before``, ``after``) with
    the records added to the spec patch. A kept or counted node keeps its marks as they are (the findings of the sweep
    that quarantined it, or the newer ones of a sweep that found it unhealthy again); a held or healthy node gets none
    (a stale record of a node someone else released is dropped)."""
    action = decision["action"]
    stamp = format_time(now)
    notes = {}
    if action in (QUARANTINE, KEEP):
        marks = _health_marks.plan(node, verdict, owner, stamp)
    elif action == RELEASE:
        marks = _health_marks.plan(node, {"healthy": True, "blocking": [], "warnings": []}, owner, stamp)
    else:
        before = _health_marks.node_marks(node, owner)
        marks = {"spec_patch": None, "status_patch": None, "changes": [], "spec_changes": [], "status_changes": [],
                 "before": before, "after": dict(before)}
    have = annotations(node)
    if action in (QUARANTINE, KEEP, COUNT):
        want = record_text(decision["since"], decision["healthy_sweeps"])
        if have.get(RECORD) != want:
            notes[RECORD] = want
            marks["spec_changes"].append(
                "record the quarantine: since %s, healthy sweeps %d of %d" % (
                    format_time(decision["since"]), decision["healthy_sweeps"], release_after)
                if action != QUARANTINE else "record the quarantine: since %s" % stamp)
    elif have.get(RECORD) is not None:
        notes[RECORD] = None
        marks["spec_changes"].append("drop the quarantine record" if action == RELEASE else
                                     "drop the stale quarantine record (the gate's marks were taken off by another run)")
    if action == QUARANTINE:
        notes[LAST] = stamp
        marks["spec_changes"].append("record %s=%s (the circuit breaker's window counts it)" % (LAST, stamp))
    if notes:
        spec = marks["spec_patch"] or {}
        meta = spec.setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(notes)
        # the records are counted from what was read (healthy sweeps, the breaker's window): written only onto the
        # node as it was read, so a concurrent writer makes this write fail 409 and it is planned again
        meta["resourceVersion"] = (node.get("metadata") or {}).get("resourceVersion")
        marks["spec_patch"] = spec
    marks["changes"] = marks["spec_changes"] + marks["status_changes"]
    return marks
