# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Jinja filters of the health_sweep role: its settings' check, the fleet health report's rows and its summary lines.

Documentation of each filter lives next to this file (health_sweep_settings_errors.yml, health_sweep_rows.yml,
health_sweep_lines.yml) so that ``ansible-doc -t filter gpuops.nvidia.<name>`` renders it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The quarantine's action -> the report's state, and the action as the report says it.
STATES = {"quarantine": "quarantined", "keep": "quarantined", "count": "quarantined", "release": "released",
          "held": "held_by_breaker", "healthy": "healthy"}


# The remediation's settings among the sweep's: checked by _health_remediation (without the prefix).
REMEDIATION_PREFIX = "remediation_"
REMEDIATION_CONSENT = "remediation"


def health_sweep_settings_errors(settings):
    """Documented in health_sweep_settings_errors.yml."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_quarantine import settings_errors
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_remediation
    if not isinstance(settings, dict):
        raise AnsibleFilterError("health_sweep_settings_errors: a mapping of settings, got %r" % (settings,))
    values, remediation, errors = {}, {}, []
    for key, value in settings.items():
        if key == REMEDIATION_CONSENT:
            errors.extend(_health_remediation.consent_errors(value))
            continue
        # (extra variables and survey answers arrive as text: a number in text is that number)
        if isinstance(value, str):
            try:
                value = int(value) if value.strip().lstrip("-").isdigit() else float(value)
            except ValueError:
                pass
        if isinstance(key, str) and key.startswith(REMEDIATION_PREFIX):
            remediation[key[len(REMEDIATION_PREFIX):]] = value
        else:
            values[key] = value
    errors.extend(settings_errors(values))
    errors.extend(REMEDIATION_PREFIX + e if e.split(" ")[0] in _health_remediation.LIMITS else e
                  for e in _health_remediation.settings_errors(remediation))
    return errors


def _action_text(decision, release_after):
    action = decision["action"]
    if action == "quarantine":
        return "quarantined"
    if action == "keep":
        return "kept in quarantine (unhealthy again: healthy sweeps counted from 0)"
    if action == "count":
        return "healthy sweep %d of %d" % (decision["healthy_sweeps"], release_after)
    if action == "release":
        return "released after %d healthy sweeps" % decision["healthy_sweeps"]
    if action == "held":
        return "held: breaker open (left in service)"
    return None


def _gpus(indexes):
    return ", ".join(str(i) for i in indexes)


def _remediation_text(done):
    """What the sweep's remediation did on one node, in words: ``done`` is the role's record of it ({"plan": one of
    health_remediation's nodes, "check_mode", "reset": gpu_health_reset's result or None, "rebooted": bool or None,
    "failed": the failure's message or None})."""
    plan = done.get("plan") or {}
    action = plan.get("action")
    check = bool(done.get("check_mode"))
    out = []
    if action == "reset":
        reset = done.get("reset")
        if check or not reset:
            out.append("would reset GPU %s (attempt %s)" % (_gpus(plan.get("gpus") or []), plan.get("attempts")))
        else:
            for entry in reset.get("resets") or []:
                out.append("GPU %s reset (attempt %s): %s %s" % (
                    entry.get("index"), plan.get("attempts"), ", ".join(entry.get("clears") or []),
                    "cleared" if entry.get("cleared") else "still there"))
            for entry in reset.get("not_reset") or []:
                out.append("attempt %s: %s" % (plan.get("attempts"), entry.get("reason")))
            if not reset.get("resets") and not reset.get("not_reset"):
                out.append("attempt %s: no GPU left to reset (the finding was gone)" % plan.get("attempts"))
    elif action == "reboot":
        if check:
            out.append("would drain and reboot the node (attempt %s)" % plan.get("attempts"))
        elif done.get("rebooted") is True:
            out.append("drained and rebooted the node (attempt %s)" % plan.get("attempts"))
        else:
            out.append("reboot attempt %s not completed: the drain, the next kernel's check or the reboot failed" % plan.get("attempts"))
    elif action == "needs_operator":
        out.append("needs an operator (condition GpuopsNvidiaGpuRemediation=False, NeedsOperator): %s"
                   % plan.get("reason"))
    elif plan.get("consent") not in (None, "none") and plan.get("reason") and \
            not str(plan.get("reason")).startswith(("released", "quarantined and healthy")):
        out.append("not remediated: %s" % plan["reason"])
    if done.get("failed"):
        out.append("the remediation failed: %s" % done["failed"])
    return out


def _rows(nodes, decisions, unanswered, now, release_after, remediation=None):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_quarantine import parse_time
    decided = dict((d["node"], d) for d in decisions or [])
    remedied = dict((d["node"], d) for d in remediation or [] if isinstance(d, dict) and d.get("node"))
    stamp = parse_time(now)
    rows = []
    for node in nodes:
        verdict = node["verdict"]
        findings = [dict(f, action="block") for f in verdict["blocking"]] + \
            [dict(f, action="warn") for f in verdict["warnings"]]
        decision = decided.get(node["name"])
        actions, since, seconds = [], None, None
        if decision is None:
            # no cluster (or the quarantine did not run): the verdict alone
            state = "healthy" if verdict["healthy"] else "unhealthy"
        else:
            state = STATES[decision["action"]]
            text = _action_text(decision, release_after)
            actions = [text] if text else []
            since = decision.get("quarantined_since")
            if since and stamp is not None and parse_time(since) is not None and state == "quarantined":
                seconds = max(0, int(stamp - parse_time(since)))
        if node["name"] in remedied:
            actions.extend(_remediation_text(remedied[node["name"]]))
        if node.get("unresponsive"):
            actions.append("unresponsive GPU reads: %s" % ", ".join(
                "GPU %s" % (u.get("gpu") if u.get("gpu") is not None else "(all)") for u in node["unresponsive"]))
        rows.append({"node": node["name"], "gpus": int(node.get("gpus") or 0), "state": state, "findings": findings,
                     "actions": actions, "quarantined_since": since, "quarantine_seconds": seconds})
    for host in unanswered or []:
        rows.append({"node": str(host), "gpus": 0, "state": "unresponsive", "findings": [],
                     "actions": ["the node did not answer the sweep (unreachable, or its read failed)"],
                     "quarantined_since": None, "quarantine_seconds": None})
    return rows


def health_sweep_rows(nodes, decisions=None, unanswered=None, now=None, release_after=2, remediation=None):
    """Documented in health_sweep_rows.yml."""
    if not isinstance(nodes, list) or not isinstance(decisions, (list, type(None))) \
            or not isinstance(unanswered, (list, type(None))) or not isinstance(remediation, (list, type(None))):
        raise AnsibleFilterError("health_sweep_rows: the nodes' reads, the decisions (or null) and the unanswered hosts "
                                 "must be lists; got %s, %s, %s" % (type(nodes).__name__, type(decisions).__name__,
                                                                    type(unanswered).__name__))
    try:
        return _rows(nodes, decisions, unanswered, now, release_after, remediation)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        # (the role builds these from its own tasks' results: anything else is a broken caller, said as such)
        raise AnsibleFilterError("health_sweep_rows: a read is a mapping with name, gpus, verdict (healthy, blocking, "
                                 "warnings: lists of findings) and unresponsive, a decision one of "
                                 "health_quarantine's nodes (node, action: %s, healthy_sweeps, quarantined_since); "
                                 "%s: %s" % (", ".join(sorted(STATES)), type(exc).__name__, exc))


def health_sweep_lines(report):
    """Documented in health_sweep_lines.yml."""
    try:
        lines = []
        for row in report.get("nodes") or []:
            if row["state"] == "healthy" and not row["findings"]:
                continue
            parts = ["%s: %s" % (row["node"], row["state"])]
            parts.extend(str(a) for a in row["actions"])
            parts.extend(str(f["message"]) for f in row["findings"])
            lines.append(" - ".join(parts))
        totals = report.get("totals") or {}
        lines.append("%d nodes: %s" % (int(totals.get("nodes", 0)), ", ".join(
            "%s %d" % (key.replace("_", " "), int(totals[key])) for key in sorted(totals)
            if key != "nodes" and totals[key]) or "all healthy"))
        return lines
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise AnsibleFilterError("health_sweep_lines: a report of gpuops.nvidia.health_report (nodes: rows with node, "
                                 "state, actions, findings; totals: counts); %s: %s" % (type(exc).__name__, exc))


class FilterModule(object):
    def filters(self):
        return {"health_sweep_settings_errors": health_sweep_settings_errors, "health_sweep_rows": health_sweep_rows,
                "health_sweep_lines": health_sweep_lines}
