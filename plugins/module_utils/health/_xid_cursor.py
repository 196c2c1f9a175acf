# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health sweep's cursor in the kernel log: which Xid and SXid lines a node's sweep has seen, so that the next
sweep reports only the new ones, while a fatal Xid or SXid keeps blocking for the rest of the boot. Pure: the caller
reads the cursor file, the boot id and the kernel log (``_xid.read_kernel_log_timed``) and writes the next cursor.

The cursor file (``gpu_health_read``'s ``cursor_path``) holds::

    {"version": 1, "boot_id": "<the kernel's boot id>",
     "last": {"ts": <monotonic seconds of the last Xid/SXid line seen>, "line": "<its text>"} or null,
     "events": [<the Xid and SXid events seen this boot that keep blocking: ``keep``>]}

``advance`` compares it with this boot's lines:

- no cursor (absent, empty or not a cursor: the last two with a warning): every line of this boot is new;
- another boot id: the node rebooted (``rebooted``): every line of this boot is new and the previous boot's events are
  dropped (a reboot clears what they asked for);
- the same boot: the lines after the cursor's line are new (found by its timestamp and text, so lines logged in the
  same microsecond are told apart by their order, the same text twice in one microsecond counting once across a
  sweep's boundary); where the oldest line the log still has is newer than the cursor's
  and the cursor's line is gone, the log rotated past it (``rotated``: lines may have been missed) and every line is
  new. The events kept keep blocking whether or not their lines are still in the log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._xid import (
    classify, classify_sxid, parse_line, parse_sxid_line)

VERSION = 1


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _problem(cursor):
    """What makes ``cursor`` (a parsed JSON value) not a version 1 cursor, or None."""
    if not isinstance(cursor, dict):
        return "its top level is not an object"
    if cursor.get("version") != VERSION:
        return "version is %r, expected %d" % (cursor.get("version"), VERSION)
    if not isinstance(cursor.get("boot_id"), str) or not cursor["boot_id"]:
        return "boot_id is not a non-empty string"
    last = cursor.get("last")
    if last is not None and not (isinstance(last, dict) and _number(last.get("ts"))
                                 and isinstance(last.get("line"), str)):
        return "last is neither null nor {ts: seconds, line: text}"
    events = cursor.get("events")
    if not isinstance(events, list) or [e for e in events if not (
            isinstance(e, dict) and _number(e.get("ts")) and isinstance(e.get("line"), str))]:
        return "events is not a list of {ts, line, ...} objects"
    return None


def parse_cursor(text, path="the cursor file"):
    """(the cursor, a warning or None) from the cursor file's ``text`` (None: no file). An empty file, text that is
    not JSON or JSON that is not a version 1 cursor is no cursor, with a warning saying why; never raises."""
    if text is None:
        return None, None
    if not text.strip():
        return None, "%s is empty; it is treated as no cursor (every Xid line of this boot is new) and rewritten" % path
    try:
        cursor = json.loads(text)
    except ValueError as exc:
        return None, "%s is not JSON (%s); it is treated as no cursor (every Xid line of this boot is new) and " \
                     "rewritten" % (path, exc)
    problem = _problem(cursor)
    if problem:
        return None, "%s is not a version %d health cursor (%s); it is treated as no cursor (every Xid line of this " \
                     "boot is new) and rewritten" % (path, VERSION, problem)
    return cursor, None


def cursor_text(cursor):
    """The cursor file's content for ``cursor`` (one form, so that an unchanged cursor is an unchanged file)."""
    return json.dumps(cursor, indent=1, sort_keys=True) + "\n"


def event(ts, line):
    """The event of one timestamped kernel-log line: an Xid {"type": "xid", "ts", "line", "bus_id", "code", "pid",
    "process", "message", "fatal", "cause", "mnemonic", "action"}, an SXid {"type": "sxid", "ts", "line", "switch",
    "bus_id", "code", "fatal" (``_xid.classify_sxid``: the line's Fatal, or an always-fatal code), "scope", "link",
    "message"}, or None for an SXid's detail line (its Severity or Data) and any other line."""
    xid = parse_line(line)
    if xid is not None:
        found = classify(xid["code"], xid["message"])
        return {"type": "xid", "ts": ts, "line": line, "bus_id": xid["bus_id"], "code": xid["code"],
                "pid": xid["pid"], "process": xid["process"], "message": xid["message"], "fatal": found["fatal"],
                "cause": found["cause"], "mnemonic": found["mnemonic"], "action": found["action"]}
    sxid = parse_sxid_line(line)
    if sxid is None or sxid["detail"]:
        return None
    found = classify_sxid(sxid["code"], sxid["fatal"])
    return {"type": "sxid", "ts": ts, "line": line, "switch": sxid["switch"], "bus_id": sxid["bus_id"],
            "code": sxid["code"], "fatal": found["fatal"], "scope": found["scope"], "link": sxid["link"],
            "message": sxid["message"]}


def fatal_event(found):
    """``advance``'s default ``keep``: a fatal Xid (``_xid.classify``) or a fatal SXid (``_xid.classify_sxid``) keeps
    blocking for the rest of the boot."""
    return found["type"] in ("xid", "sxid") and bool(found["fatal"])


def _kept(events):
    """One event per (type, bus id, code), the first logged: the findings name each GPU's code once anyway, and the
    cursor stays small however often the driver repeats a line."""
    seen, out = set(), []
    for found in events:
        key = (found.get("type"), found.get("bus_id"), found.get("code"))
        if key not in seen:
            seen.add(key)
            out.append(found)
    return out


def _new_lines(last, lines, oldest):
    """(the lines after ``last``, whether the log rotated past it, a warning or None)."""
    if last is None:
        return list(lines), False, None
    ts, text = last["ts"], last["line"]
    position = None
    for index, (line_ts, line_text) in enumerate(lines):
        if line_ts == ts and line_text == text:
            position = index
    if position is not None:
        return list(lines[position + 1:]), False, None
    if oldest is not None and oldest > ts:
        return list(lines), True, (
            "the kernel log no longer reaches back to the last Xid line the previous sweep saw (%.6f s after boot; "
            "the oldest line now is at %.6f s): it rotated, and Xid lines logged in between may have been missed"
            % (ts, oldest))
    return [entry for entry in lines if entry[0] >= ts], False, (
        "the last Xid line the previous sweep saw (%.6f s after boot) is not in the kernel log, though older lines "
        "are: every Xid line from its time on is taken as new" % ts)


def advance(text, boot_id, lines, oldest=None, keep=fatal_event, path="the cursor file"):
    """The sweep's view of the kernel log from the cursor file's ``text`` (None: no file), this boot's ``boot_id``
    (None: unknown, taken as the cursor's boot with a warning), the log's Xid and SXid ``lines`` ([[monotonic seconds,
    text]] in the log's order; other lines are skipped) and the timestamp of the ``oldest`` line the log still has
    (None: the first of ``lines``). ``keep``: whether a new event keeps blocking for the rest of the boot.

    Returns {"new": [the new lines' events], "outstanding": [the kept events of this boot, then the new ones],
    "rebooted" (the cursor was another boot's), "rotated" (the log rotated past the cursor), "first" (there was no
    usable cursor), "warnings", "cursor" (the next cursor), "text" (its file content), "changed" (whether the file
    changes: new lines, a new boot, or no usable cursor)}."""
    warnings = []
    cursor, problem = parse_cursor(text, path)
    if problem:
        warnings.append(problem)
    lines = [(float(ts), line) for ts, line in lines if event(ts, line) is not None or parse_sxid_line(line)]
    if oldest is None and lines:
        oldest = lines[0][0]
    if boot_id is None:
        warnings.append("the boot id could not be read: the cursor is taken as this boot's")
        boot_id = cursor["boot_id"] if cursor else "unknown"
    rebooted = cursor is not None and cursor["boot_id"] != boot_id
    same_boot = cursor is not None and not rebooted
    fresh, rotated, warning = _new_lines(cursor["last"] if same_boot else None, lines, oldest)
    if warning:
        warnings.append(warning)
    new = [found for found in (event(ts, line) for ts, line in fresh) if found is not None]
    kept = list(cursor["events"]) if same_boot else []
    last = cursor["last"] if same_boot else None
    if fresh:
        last = {"ts": fresh[-1][0], "line": fresh[-1][1]}
    following = {"version": VERSION, "boot_id": boot_id, "last": last,
                 "events": _kept(kept + [found for found in new if keep(found)])}
    following_text = cursor_text(following)
    return {"new": new, "outstanding": kept + new, "rebooted": rebooted, "rotated": rotated, "first": cursor is None,
            "warnings": warnings, "cursor": following, "text": following_text, "changed": following_text != text}
