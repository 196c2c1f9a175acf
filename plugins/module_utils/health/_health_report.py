# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet health sweep's report (issue 50): one JSON document and one HTML page per sweep (PRIVATE to
gpuops.nvidia). Pure: no I/O (the module health_report reads the earlier reports and writes the files).

- ``report(sweep, rows)``: the report dict - the sweep (time, check mode, id, the quarantine breaker), one row per node
  (sorted by name) and the totals; the input is validated, every problem named by its row and field (``ReportError``);
- ``render_html(report, history)``: one self-contained page (no external asset, no script), every value escaped,
  with an inline SVG plot of findings and quarantined nodes per sweep where ``history`` holds earlier reports;
- ``stamp``, ``stamp_of``, ``report_files``, ``history_files``, ``prune_files``: the time-stamped file names
  ``health-report-YYYYmmddTHHMMSSZ.json`` / ``.html`` and which of them to load or remove.

Same input, same bytes: nothing here reads the clock, the locale or a dict's insertion order. Target-side code:
Python 3.9+ (runs on the controller).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import html
import math
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _rfc3339

VERSION = 1
# ("unhealthy": a blocking finding where no cluster was there to quarantine the node)
STATES = ("healthy", "unhealthy", "quarantined", "released", "held_by_breaker", "unresponsive")
FINDING_ACTIONS = ("block", "warn")
# The action that says a row's node was quarantined by this sweep (the quarantine module's wording).
NEWLY_QUARANTINED = "quarantined"
ROW_KEYS = ("node", "gpus", "state", "findings", "actions", "quarantined_since", "quarantine_seconds")
FINDING_KEYS = ("gpu", "bus_id", "kind", "message", "action")
BREAKER_KEYS = ("open", "limit", "window_hours", "quarantined_in_window", "held")
# what health_quarantine's breaker also says, kept as given: the GPU nodes counted, the percentage and the bound, the
# nodes this sweep quarantined
BREAKER_MORE = ("gpu_nodes", "percent", "max_nodes", "quarantined_now")
SWEEP_KEYS = ("time", "check_mode", "id", "breaker")
TOTALS = ("nodes", "healthy", "unhealthy", "quarantined", "newly_quarantined", "released", "held_by_breaker", "unresponsive",
          "findings")

PREFIX = "health-report-"
LATEST = ("health-report-latest.json", "health-report-latest.html")
# A report's file name: its sweep's time stamp and, where the sweep's id is not its time (an AWX job id: two job slices
# sweep in the same second), that id made safe for a file name.
_STAMPED = re.compile(r"^health-report-(\d{8}T\d{6}Z(?:-[A-Za-z0-9_]{1,64})?)\.(json|html)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


class ReportError(ValueError):
    """Bad input for the report: ``errors`` lists every problem, each naming its row (index and node) and field and
    saying what is valid; ``str()`` joins them."""

    def __init__(self, errors):
        super(ReportError, self).__init__("; ".join(errors))
        self.errors = list(errors)


# ---- validation ----------------------------------------------------------------------------------------------------
def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_time(value):
    """An RFC 3339 time with its offset (``2026-11-29T06:17:10Z``, ``...+02:00``, fractions allowed) as an aware UTC
    datetime (whole seconds: the report's times have no fraction); ValueError saying what is valid otherwise
    (common/_rfc3339, the collection's one parser)."""
    return _rfc3339.parse(value).replace(microsecond=0)


def format_time(moment):
    """An aware datetime as the report writes every time: RFC 3339 in UTC, whole seconds, ``Z``."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unknown(where, given, valid):
    extra = sorted(str(k) for k in given if k not in valid)
    return ["%s: unknown key(s) %s (valid: %s)" % (where, ", ".join(extra), ", ".join(valid))] if extra else []


def _sweep(sweep, errors):
    if not isinstance(sweep, dict):
        errors.append("sweep: must be a dict with %s, not %s" % (", ".join(SWEEP_KEYS), type(sweep).__name__))
        return None
    errors.extend(_unknown("sweep", sweep, SWEEP_KEYS))
    out = {}
    try:
        out["time"] = format_time(parse_time(sweep.get("time")))
    except ValueError as exc:
        errors.append("sweep.time: %s" % exc)
    check = sweep.get("check_mode", False)
    if not isinstance(check, bool):
        errors.append("sweep.check_mode: must be true or false, not %r" % (check,))
    out["check_mode"] = check
    sweep_id = sweep.get("id")
    if not isinstance(sweep_id, str) or not sweep_id.strip():
        errors.append("sweep.id: must be a non-empty string naming the sweep, not %r" % (sweep_id,))
    out["id"] = sweep_id
    breaker = sweep.get("breaker")
    if breaker is None:
        # no cluster: nothing was quarantined, no breaker counted
        out["breaker"] = None
        return out
    if not isinstance(breaker, dict):
        errors.append("sweep.breaker: must be null (no cluster) or a dict with %s, not %r" % (
            ", ".join(BREAKER_KEYS), breaker))
        return out
    errors.extend(_unknown("sweep.breaker", breaker, BREAKER_KEYS + BREAKER_MORE))
    checks = (("open", lambda v: isinstance(v, bool), "true or false"),
              ("limit", lambda v: _is_int(v) and v >= 0, "an integer, 0 or more"),
              ("window_hours", lambda v: _is_number(v) and v >= 0, "a number of hours, 0 or more"),
              ("quarantined_in_window", lambda v: (_is_int(v) and v >= 0) or _names(v),
               "an integer, 0 or more, or the list of those nodes' names"))
    out["breaker"] = {}
    for key, good, valid in checks:
        value = breaker.get(key)
        if not good(value):
            errors.append("sweep.breaker.%s: must be %s, not %r" % (key, valid, value))
        out["breaker"][key] = len(value) if isinstance(value, list) else value
    for key in BREAKER_MORE:
        if key in breaker:
            out["breaker"][key] = sorted(breaker[key]) if isinstance(breaker[key], list) else breaker[key]
    held = breaker.get("held", [])
    if not isinstance(held, list) or not all(isinstance(n, str) and n for n in held):
        errors.append("sweep.breaker.held: must be a list of node names, not %r" % (held,))
    else:
        out["breaker"]["held"] = sorted(held)
    return out


def _names(value):
    return isinstance(value, list) and all(isinstance(n, str) and n for n in value)


def _finding(where, finding, errors):
    if not isinstance(finding, dict):
        errors.append("%s: must be a dict with %s, not %r" % (where, ", ".join(FINDING_KEYS), finding))
        return None
    errors.extend(_unknown(where, finding, FINDING_KEYS))
    gpu, bus_id = finding.get("gpu"), finding.get("bus_id")
    kind, message, action = finding.get("kind"), finding.get("message"), finding.get("action")
    if gpu is not None and not (_is_int(gpu) and gpu >= 0):
        errors.append("%s.gpu: must be a GPU index (an integer, 0 or more) or null, not %r" % (where, gpu))
    if bus_id is not None and not isinstance(bus_id, str):
        errors.append("%s.bus_id: must be a PCI bus id string or null, not %r" % (where, bus_id))
    if not isinstance(kind, str) or not kind:
        errors.append("%s.kind: must be a non-empty string (the finding's kind), not %r" % (where, kind))
    if not isinstance(message, str):
        errors.append("%s.message: must be a string, not %r" % (where, message))
    if action not in FINDING_ACTIONS:
        errors.append("%s.action: %r is not one of %s" % (where, action, ", ".join(FINDING_ACTIONS)))
    return {"gpu": gpu, "bus_id": bus_id, "kind": kind, "message": message, "action": action}


def _row(index, row, errors):
    if not isinstance(row, dict):
        errors.append("rows[%d]: must be a dict with %s, not %r" % (index, ", ".join(ROW_KEYS), row))
        return None
    node = row.get("node")
    where = "rows[%d] (node %s)" % (index, node) if isinstance(node, str) and node else "rows[%d]" % index
    errors.extend(_unknown(where, row, ROW_KEYS))
    if not isinstance(node, str) or not node:
        errors.append("%s.node: must be a non-empty node name, not %r" % (where, node))
    gpus, state = row.get("gpus"), row.get("state")
    if not (_is_int(gpus) and gpus >= 0):
        errors.append("%s.gpus: must be the node's GPU count (an integer, 0 or more), not %r" % (where, gpus))
    if state not in STATES:
        errors.append("%s.state: %r is not one of %s" % (where, state, ", ".join(STATES)))
    findings, actions = row.get("findings", []), row.get("actions", [])
    if not isinstance(findings, list):
        errors.append("%s.findings: must be a list of findings, not %r" % (where, findings))
        findings = []
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        errors.append("%s.actions: must be a list of strings, not %r" % (where, actions))
        actions = []
    since, seconds = row.get("quarantined_since"), row.get("quarantine_seconds")
    if since is not None:
        try:
            since = format_time(parse_time(since))
        except ValueError as exc:
            errors.append("%s.quarantined_since: %s (or null)" % (where, exc))
    if seconds is not None and not (_is_int(seconds) and seconds >= 0):
        errors.append("%s.quarantine_seconds: must be an integer, 0 or more, or null, not %r" % (where, seconds))
    return {"node": node, "gpus": gpus, "state": state,
            "findings": [_finding("%s.findings[%d]" % (where, i), f, errors) for i, f in enumerate(findings)],
            "actions": list(actions), "quarantined_since": since, "quarantine_seconds": seconds}


def totals(rows):
    """The report's totals of validated ``rows``: nodes per state, the nodes this sweep quarantined (action
    ``quarantined``) and the findings of all nodes."""
    out = dict((key, 0) for key in TOTALS)
    out["nodes"] = len(rows)
    for row in rows:
        out[row["state"]] += 1
        out["findings"] += len(row["findings"])
        if row["state"] == "quarantined" and NEWLY_QUARANTINED in row["actions"]:
            out["newly_quarantined"] += 1
    return out


def report(sweep, rows):
    """The report dict of one sweep (module docstring); ReportError naming every bad field otherwise."""
    errors = []
    out_sweep = _sweep(sweep, errors)
    out_rows = []
    if not isinstance(rows, list):
        errors.append("rows: must be a list of node rows, not %s" % type(rows).__name__)
    else:
        out_rows = [_row(i, r, errors) for i, r in enumerate(rows)]
    seen = {}
    for index, row in enumerate(out_rows):
        if row and isinstance(row["node"], str) and row["node"]:
            if row["node"] in seen:
                errors.append("rows[%d] (node %s): the node is also rows[%d]; one row per node"
                              % (index, row["node"], seen[row["node"]]))
            seen.setdefault(row["node"], index)
    if errors:
        raise ReportError(errors)
    out_rows.sort(key=lambda r: r["node"])
    return {"version": VERSION, "sweep": out_sweep, "nodes": out_rows, "totals": totals(out_rows)}


def history_point(earlier):
    """(time, findings, quarantined nodes) of an earlier report (as loaded from its JSON); ValueError when it is not
    a report this module wrote."""
    try:
        moment = parse_time(earlier["sweep"]["time"])
        counts = earlier["totals"]["findings"], earlier["totals"]["quarantined"]
    except (KeyError, TypeError) as exc:
        raise ValueError("not a health report (no sweep.time or totals: %s)" % exc) from exc
    if not all(_is_int(c) and c >= 0 for c in counts):
        raise ValueError("not a health report (totals.findings and totals.quarantined must be counts)")
    return moment, counts[0], counts[1]


# ---- file names ------------------------------------------------------------------------------------------------------
def stamp(time):
    """The file names' time stamp of an RFC 3339 time: ``20261129T061710Z``."""
    return parse_time(time).strftime("%Y%m%dT%H%M%SZ")


def stamp_of(name):
    """The key of a report file's name (``health-report-20261129T061710Z.json`` -> ``20261129T061710Z``,
    ``health-report-20261129T061710Z-6101.json`` -> ``20261129T061710Z-6101``), None for any other name. Keys sort as
    the sweeps ran (by time, then by id)."""
    match = _STAMPED.match(name)
    return match.group(1) if match else None


def key(time, sweep_id=None):
    """The file key of the sweep at ``time`` with id ``sweep_id``: the time stamp, and the id (only letters, digits and
    _, at most 64) where it is not the time itself."""
    base = stamp(time)
    if not sweep_id or sweep_id == time:
        return base
    return base + "-" + _UNSAFE.sub("_", sweep_id)[:64]


def report_files(time, sweep_id=None):
    """(JSON name, HTML name) of the report of the sweep at ``time`` with id ``sweep_id``."""
    base = PREFIX + key(time, sweep_id)
    return base + ".json", base + ".html"


def _stamps(names, suffix=None):
    out = {}
    for name in names:
        match = _STAMPED.match(name)
        if match and (suffix is None or match.group(2) == suffix):
            out.setdefault(match.group(1), []).append(name)
    return out


def history_files(names, count=30, before=None):
    """The earlier JSON reports to load among file ``names``: the last ``count`` by their time-stamped names
    (``health-report-YYYYmmddTHHMMSSZ.json``), oldest first; ``before``: only those older than that stamp. Other
    names (latest, temporary files, anything else) are never chosen."""
    stamps = sorted(s for s in _stamps(names, "json") if before is None or s < before)
    return [PREFIX + s + ".json" for s in (stamps[-count:] if count > 0 else [])]


def prune_files(names, keep, current):
    """The report files to remove among ``names`` so that ``keep`` reports (a report: its JSON and HTML of one stamp)
    are left, counting the report stamped ``current`` (never removed): the oldest first, only the time-stamped
    names."""
    grouped = _stamps(names)
    others = sorted(s for s in grouped if s != current)
    excess = len(others) + 1 - keep
    return sorted(n for s in others[:max(excess, 0)] for n in grouped[s])


# ---- HTML ----------------------------------------------------------------------------------------------------------
def duration(seconds):
    """Time in quarantine as the page writes it: ``3 h 12 min``, ``12 min``; ``""`` for none."""
    if seconds is None:
        return ""
    hours, minutes = seconds // 3600, seconds % 3600 // 60
    return "%d h %d min" % (hours, minutes) if hours else "%d min" % minutes


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _finding_text(finding):
    where = []
    if finding["gpu"] is not None:
        where.append("GPU %d" % finding["gpu"])
    if finding["bus_id"]:
        where.append("(%s)" % finding["bus_id"])
    head = " ".join(where)
    return "%s%s [%s]: %s" % (head + " " if head else "", finding["kind"], finding["action"], finding["message"])


def _breaker_text(breaker):
    state = "OPEN" if breaker["open"] else "closed"
    text = "breaker %s: %d quarantined in the last %s h (limit %d%s)" % (
        state, breaker["quarantined_in_window"], _number(breaker["window_hours"]), breaker["limit"],
        (" of %d GPU nodes" % breaker["gpu_nodes"]) if breaker.get("gpu_nodes") is not None else "")
    if breaker["held"]:
        text += "; held back: %s" % ", ".join(breaker["held"])
    return text


def _number(value):
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


STYLE = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}"
         "th,td{border:1px solid #bbb;padding:.3em .6em;vertical-align:top;text-align:left}"
         "th{background:#eee}ul{margin:0;padding-left:1.2em}.check{font-weight:bold;color:#a60}"
         ".open{font-weight:bold;color:#b00}.s-quarantined,.s-unhealthy,.s-unresponsive,.s-held_by_breaker{background:#fdd}"
         ".s-released{background:#dfd}")


def _list(items):
    if not items:
        return ""
    return "<ul>%s</ul>" % "".join("<li>%s</li>" % _e(i) for i in items)


def _svg(points):
    """The plot of ``points`` [(datetime, findings, quarantined)], oldest first: one polyline per series."""
    width, height, left, right, top, bottom = 720, 260, 60, 170, 20, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    first, last = points[0][0], points[-1][0]
    span = (last - first).total_seconds()
    peak = max(1, max(max(p[1], p[2]) for p in points))

    def x(moment):
        return left + (plot_w * (moment - first).total_seconds() / span if span else plot_w / 2.0)

    def y(count):
        return top + plot_h - plot_h * count / float(peak)

    def line(series, colour):
        coords = " ".join("%.1f,%.1f" % (x(p[0]), y(p[series])) for p in points)
        return '<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (colour, coords)

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" '
             'aria-label="findings and quarantined nodes per sweep">' % (width, height, width, height),
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>' % (left, top + plot_h, left + plot_w, top + plot_h),
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>' % (left, top, left, top + plot_h)]
    for count in sorted(set((0, peak // 2, peak))):
        parts.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%d</text>' % (left - 6, y(count) + 4, count))
    for anchor, moment in (("start", first), ("end", last)):
        parts.append('<text x="%.1f" y="%d" font-size="11" text-anchor="%s">%s</text>'
                     % (x(moment), top + plot_h + 16, anchor, _e(format_time(moment))))
    parts.append('<text x="%.1f" y="%d" font-size="12" text-anchor="middle">sweep time (UTC)</text>'
                 % (left + plot_w / 2.0, height - 8))
    parts.append('<text x="14" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 14 %.1f)">'
                 'count</text>' % (top + plot_h / 2.0, top + plot_h / 2.0))
    parts.append(line(1, "#c0392b"))
    parts.append(line(2, "#2c3e91"))
    legend_x = left + plot_w + 15
    for row, (label, colour) in enumerate((("findings", "#c0392b"), ("quarantined nodes", "#2c3e91"))):
        ly = top + 10 + row * 20
        parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                     % (legend_x, ly, legend_x + 20, ly, colour))
        parts.append('<text x="%d" y="%d" font-size="12">%s</text>' % (legend_x + 26, ly + 4, label))
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(doc, history=()):
    """The page of report ``doc``: header (sweep, check mode, breaker, totals), one table row per node and, where
    ``history`` (earlier reports, as loaded from their JSON) holds at least one sweep before this one, an inline SVG
    plot of findings and quarantined nodes per sweep, this one included. Earlier reports that are not reports
    (``history_point``) or not older than this sweep are left out of the plot."""
    sweep, counts = doc["sweep"], doc["totals"]
    now = parse_time(sweep["time"])
    points = {}
    for earlier in history or ():
        try:
            point = history_point(earlier)
        except ValueError:
            continue
        if point[0] < now:
            points[point[0]] = point
    points = [points[k] for k in sorted(points)]
    title = "GPU fleet health sweep %s" % sweep["time"]
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           "<title>%s</title>" % _e(title), "<style>%s</style>" % STYLE, "</head>", "<body>",
           "<h1>%s</h1>" % _e(title), "<p>Sweep id: %s</p>" % _e(sweep["id"])]
    if sweep["check_mode"]:
        out.append('<p class="check">check mode: nothing was marked</p>')
    else:
        out.append("<p>applied: the quarantines and releases below were marked on the nodes</p>")
    breaker = sweep["breaker"]
    if breaker is None:
        out.append("<p>no cluster: the findings are reported, no node was marked</p>")
    else:
        out.append('<p class="%s">%s</p>' % ("open" if breaker["open"] else "closed", _e(_breaker_text(breaker))))
    out.append("<p>%s</p>" % _e(", ".join("%s: %d" % (k.replace("_", " "), counts[k]) for k in TOTALS)))
    out.append("<table>")
    out.append("<tr><th>node</th><th>GPUs</th><th>state</th><th>findings</th><th>actions</th>"
               "<th>time in quarantine</th></tr>")
    for row in doc["nodes"]:
        out.append('<tr class="s-%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>' % (
            _e(row["state"]), _e(row["node"]), _e(row["gpus"]), _e(row["state"]),
            _list([_finding_text(f) for f in row["findings"]]), _list(row["actions"]),
            _e(duration(row["quarantine_seconds"]))))
    out.append("</table>")
    if points:
        points.append((now, counts["findings"], counts["quarantined"]))
        out.append("<h2>Findings per sweep</h2>")
        out.append(_svg(points))
    out.extend(["</body>", "</html>", ""])
    return "\n".join(out)
