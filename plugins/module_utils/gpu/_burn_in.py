# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's burn-in (issue 50 item 3): DCGM's diagnostic at a declared level before the node's first service, and
again after its driver changes; its record on the node (PRIVATE to gpuops.nvidia).

Levels are dcgmi's run levels (``dcgmi diag -r N``; NVIDIA DCGM documentation, "DCGM Diagnostics", run levels 1 to 4:
1 is the quick deployment check of seconds, 2 adds short tests of about two minutes, 3 the longer stress tests of about
half an hour, 4 the extended ones of hours): ``quick`` 1, ``medium`` 2, ``long`` 3, ``extended`` 4.

The record is one JSON file on the node (``RECORD``, under the simulated node's root in the lab), written atomically
after each run: the level, the verdict (``pass`` or ``fail``), the time, the loaded driver's version, DCGM's version,
and the failures and warnings in dcgmi's own words (``_dcgm.describe``). A node is burned in once per driver version
and level: a record that passed at this driver and at the declared level or above is enough; a failed record is not
(the next run burns in again), and the health read turns it into a blocking finding of every GPU it names
(``findings``), so that the health gate keeps the node out of service until a burn-in passes. At medium and above
the record also holds the GPU-to-GPU bandwidth check (``bandwidth``: _nvbandwidth), whose failures, each naming its
test and GPU pair (``link``), are the burn-in's failures like dcgmi's.
Pure but for ``read_record`` (one small file).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

LEVELS = {"quick": 1, "medium": 2, "long": 3, "extended": 4}
RECORD = "/var/lib/gpuops/burn-in.json"
VERDICTS = ("pass", "fail")


class BurnInError(ValueError):
    """Input that cannot be used; the message says what is wrong and what is valid."""


def record_path(environ=None):
    """Where the record is on this node: under the simulated node's root (GPUOPS_SIMULATED_ROOT), beside the simulated
    GPUs' state file where they have no root (GPUOPS_SIMULATED_GPUS: never the test machine's own /var/lib), else
    RECORD."""
    environ = os.environ if environ is None else environ
    if environ.get("GPUOPS_SIMULATED_ROOT"):
        return os.path.join(environ["GPUOPS_SIMULATED_ROOT"], RECORD.lstrip("/"))
    if environ.get("GPUOPS_SIMULATED_GPUS"):
        return environ["GPUOPS_SIMULATED_GPUS"] + ".burn-in.json"
    return RECORD


def level_of(name):
    if name not in LEVELS:
        raise BurnInError("burn-in level must be one of %s, got %r" % (", ".join(LEVELS), name))
    return LEVELS[name]


def parse_record(text):
    """The record's JSON -> dict; BurnInError naming what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BurnInError("the burn-in record is not JSON (%s)" % exc)
    if not isinstance(doc, dict) or doc.get("level") not in LEVELS or doc.get("verdict") not in VERDICTS \
            or not isinstance(doc.get("driver"), str):
        raise BurnInError("the burn-in record needs a level (%s), a verdict (pass, fail) and a driver version, got %r"
                          % (", ".join(LEVELS), text[:200]))
    for key in ("failures", "warnings"):
        if not isinstance(doc.get(key, []), list):
            raise BurnInError("the burn-in record's %s must be a list, got %r" % (key, doc.get(key)))
    return doc


def read_record(path):
    """None where no record is; the record; or {"error": why} where the file is there and cannot be used."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path) as handle:
            text = handle.read(1 << 20)
        return parse_record(text)
    except (IOError, OSError, BurnInError) as exc:
        return {"error": "%s: %s" % (path, exc)}


def reasons(record, level, driver):
    """Why the node must be burned in at ``level`` with the loaded ``driver`` (empty: the record covers it)."""
    want = level_of(level)
    if record is None:
        return ["no burn-in recorded on this node (level %s declared)" % level]
    if record.get("error"):
        return ["the burn-in record cannot be used (%s)" % record["error"]]
    out = []
    if record["verdict"] != "pass":
        out.append("the last burn-in (%s, driver %s) failed" % (record["level"], record["driver"]))
    if driver and record["driver"] != driver:
        out.append("burned in with driver %s, driver %s is loaded" % (record["driver"], driver))
    if LEVELS[record["level"]] < want:
        out.append("burned in at level %s, %s is declared" % (record["level"], level))
    return out


def new_record(parsed, level, driver, now, describe, failed, bandwidth=None):
    """The record of one run: ``parsed`` is _dcgm.run_diag's answer (``ran`` True), ``describe``/``failed`` _dcgm's
    functions for one result. A diagnostic that reported a runtime error fails the burn-in. ``bandwidth``: the
    GPU-to-GPU bandwidth check's part (_nvbandwidth; {"ran", "note", "version", "tests", "notes", "failures"}), whose
    failures (each naming its test and GPU pair) fail the burn-in too; None where it was not considered."""
    failures, warnings = [], []
    if parsed.get("runtime_error"):
        failures.append({"gpu": None, "test": None, "message": "dcgmi diag -r %d could not run its tests: %s"
                                                               % (level_of(level), parsed["runtime_error"])})
    for result in parsed.get("results") or []:
        how = failed(result)
        if how is None:
            continue
        entry = {"gpu": result["entity_id"] if result["entity_group"] == "GPU" else None, "test": result["test"],
                 "message": describe(result)}
        (failures if how == "failure" else warnings).append(entry)
    record = {"level": level, "diag_level": level_of(level), "time": now,
              "driver": driver or "", "dcgm_version": parsed.get("version"), "failures": failures,
              "warnings": warnings}
    if bandwidth is not None:
        failures.extend(bandwidth.get("failures") or [])
        record["bandwidth"] = dict((k, v) for k, v in bandwidth.items() if k != "failures")
    record["verdict"] = "fail" if failures else "pass"
    return record


def findings(record):
    """The health read's findings of the record: [(kind, GPU index or None, detail)]: each failure of a failed
    burn-in (``burn_in_failure``, blocks by default), each warning (``burn_in_warning``), or a record that cannot be
    used (``burn_in_unreadable``, a warning: the next burn-in writes it again)."""
    if not isinstance(record, dict):
        return []
    if record.get("error"):
        return [("burn_in_unreadable", None, record["error"])]
    out = []
    when = "burn-in %s at %s, driver %s" % (record["level"], record.get("time") or "an unknown time", record["driver"])
    for entry in record.get("failures") or []:
        if isinstance(entry, dict):
            out.append(("burn_in_failure", entry.get("gpu"), "%s: %s" % (when, entry.get("message"))))
    for entry in record.get("warnings") or []:
        if isinstance(entry, dict):
            out.append(("burn_in_warning", entry.get("gpu"), "%s: %s" % (when, entry.get("message"))))
    if record["verdict"] == "fail" and not [f for f in out if f[0] == "burn_in_failure"]:
        out.append(("burn_in_failure", None, "%s: failed" % when))
    return out


# The record in short as the Kubernetes Node carries it (the annotation _kube_nodes.BURN_IN_ANNOTATION, written by the
# health gate's node_health task): what a scheduler, an operator or a fleet report reads without a shell on the node.
SUMMARY_KEYS = ("level", "verdict", "time", "driver", "dcgm_version", "failed")
# (an annotation's value counts toward the Node's 256 KiB of annotations; a run of failures is cut, counted)
SUMMARY_FAILED_LIMIT = 16


def _failed_name(entry):
    test = entry.get("test") or "diagnostic"
    if entry.get("link"):
        return "%s (%s)" % (test, entry["link"])
    return "%s (GPU %s)" % (test, entry["gpu"]) if entry.get("gpu") is not None else str(test)


def summary(record):
    """The record's summary for the Node (``SUMMARY_KEYS``; ``failed``: the failed tests, each with its GPU), or None
    where there is no usable record (none yet, or one that cannot be read: its finding says so)."""
    if not isinstance(record, dict) or record.get("error"):
        return None
    failed = [_failed_name(e) for e in record.get("failures") or [] if isinstance(e, dict)]
    if len(failed) > SUMMARY_FAILED_LIMIT:
        failed = failed[:SUMMARY_FAILED_LIMIT] + ["... and %d more" % (len(failed) - SUMMARY_FAILED_LIMIT)]
    return {"level": record["level"], "verdict": record["verdict"], "time": record.get("time"),
            "driver": record["driver"], "dcgm_version": record.get("dcgm_version"), "failed": failed}


def summary_errors(value):
    """Every problem with a ``summary`` handed back (node_health's option), as sentences; [] when it is good."""
    if not isinstance(value, dict):
        return ["burn_in must be the health read's burn-in summary (a mapping with keys %s) or null, got %r"
                % (", ".join(SUMMARY_KEYS), value)]
    errors = []
    unknown = sorted(str(k) for k in value if k not in SUMMARY_KEYS)
    if unknown:
        errors.append("burn_in has unknown keys %s (valid: %s)" % (", ".join(unknown), ", ".join(SUMMARY_KEYS)))
    if value.get("level") not in LEVELS:
        errors.append("burn_in.level must be one of %s, got %r" % (", ".join(LEVELS), value.get("level")))
    if value.get("verdict") not in VERDICTS:
        errors.append("burn_in.verdict must be one of %s, got %r" % (", ".join(VERDICTS), value.get("verdict")))
    for key in ("driver",):
        if not isinstance(value.get(key), str):
            errors.append("burn_in.%s must be a string, got %r" % (key, value.get(key)))
    for key in ("time", "dcgm_version"):
        if value.get(key) is not None and not isinstance(value.get(key), str):
            errors.append("burn_in.%s must be a string or null, got %r" % (key, value.get(key)))
    failed = value.get("failed", [])
    if not (isinstance(failed, list) and all(isinstance(f, str) for f in failed)
            and len(failed) <= SUMMARY_FAILED_LIMIT + 1):
        errors.append("burn_in.failed must be a list of at most %d test names, got %r"
                      % (SUMMARY_FAILED_LIMIT + 1, failed))
    return errors


def annotation_value(value):
    """The annotation's value for a checked summary: compact JSON with sorted keys, so the same record reads the
    same on every run (a re-run writes nothing)."""
    return json.dumps(dict((k, value.get(k)) for k in SUMMARY_KEYS), sort_keys=True, separators=(",", ":"))
