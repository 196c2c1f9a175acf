# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM's quick diagnostic (``dcgmi diag -r 1 -j``), optional in the health read: run where the user turns it on and
``dcgmi`` is installed, its JSON parsed into results per GPU. A node without DCGM is not an error: the read says so and
gives no finding. ``parse_diag`` and ``diag_results`` are pure; ``run_diag`` runs the one command through the caller's
runner (argv -> (rc, stdout, stderr); OSError when it cannot start).

The JSON is dcgmi's own (NVIDIA/DCGM at v4.6.0: dcgmi/Diag.cpp ``HelperJsonBuildOutput``, ``HelperJsonAddResult``,
``HelperDisplayFailureMessage``; the key names in nvvs/include/NvvsJsonStrings.h; the schema its tests validate against,
testing/python3/dcgm_diag_schema.json):

    {"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "...",
        "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"|"Fail"|"Skip",
                     "warnings": [{"warning": text, "error_id": n, "error_category": n, "error_severity": n}],
                     "info": [text]}],
        "test_summary": {"status": ..., "warnings": [...]}}]}]},
     "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [{"entity_id", "device_id",
                        "serial_num"}]}],
     "metadata": {"version": DCGM's version, "Driver Version Detected": ...}}

or, where the diagnostic could not run, {"DCGM Diagnostic": {"version": ..., "runtime_error": text}}. A test that
did not run for an entity has no result entry. The status of a result is "Pass", "Skip" or "Fail": a result DCGM rates
WARN is written "Fail" too (``HelperDisplayDiagResult``'s default, DDR_NO_DISPLAY_WARN), so what it asks of the
operator is read from its errors' ``error_severity`` (dcgmlib/dcgm_errors.h ``dcgmErrorSeverity_t``: 0 NONE, 1
MONITOR "can perform workload, but needs to be monitored", 2 ISOLATE "cannot perform workload", 3 UNKNOWN, 4 TRIAGE,
5 CONFIG, 6 RESET "drain and reset GPU"): a failed result whose every error is NONE or MONITOR is a warning, any other
failed result a failure. dcgmi exits non-zero when a test failed, so its output is parsed whatever its exit status.

A GPU entity's ``entity_id`` is DCGM's GPU id: DCGM numbers the GPUs it first finds in NVML's order (0, 1, ... -
dcgmlib/src/DcgmCacheManager.cpp, the detection loop, ``gpuId = i``), so on a host engine started for the run (dcgmi
diag without nv-hostengine) it is the NVML index. A long-running nv-hostengine that saw GPUs come and go keeps its
first ids (matched by UUID), which can differ.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

ARGV = ("diag", "-r", "1", "-j")
ROOT_KEY = "DCGM Diagnostic"
WARNING_SEVERITIES = (0, 1)         # NONE, MONITOR
SEVERITY_NAMES = {0: "NONE", 1: "MONITOR", 2: "ISOLATE", 3: "UNKNOWN", 4: "TRIAGE", 5: "CONFIG", 6: "RESET"}


class DcgmDiagError(ValueError):
    """dcgmi's output is not the diagnostic's JSON."""


def parse_diag(text):
    """dcgmi diag -j's stdout -> {"version", "runtime_error" (None when it ran), "results": [{"category", "test",
    "entity_group", "entity_id", "status", "errors": [{"message", "id", "category", "severity"}], "info"}]}: every
    result entry, test summaries left out (their errors are the entries' own, plus those of no entity, kept as a result
    of entity_group None where the summary failed and no entry did). DcgmDiagError when it is not that JSON."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DcgmDiagError("dcgmi diag -j did not print JSON (%s): %r" % (exc, (text or "")[:200]))
    if not isinstance(doc, dict) or not isinstance(doc.get(ROOT_KEY), dict):
        raise DcgmDiagError("dcgmi diag -j printed JSON without a %r object: %r" % (ROOT_KEY, (text or "")[:200]))
    diag = doc[ROOT_KEY]
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    out = {"version": metadata.get("version") or diag.get("version"), "runtime_error": diag.get("runtime_error"),
           "results": []}
    for category in _list(diag.get("test_categories")):
        for test in _list(category.get("tests")):
            entries = [_result(category, test, entry) for entry in _list(test.get("results"))]
            out["results"].extend(entries)
            summary = test.get("test_summary")
            if isinstance(summary, dict) and summary.get("status") == "Fail" and \
                    not [e for e in entries if e["status"] == "Fail"]:
                out["results"].append(_result(category, test, dict(summary, entity_group=None, entity_id=None)))
    return out


def _list(value):
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _result(category, test, entry):
    return {"category": category.get("category"), "test": test.get("name"), "entity_group": entry.get("entity_group"),
            "entity_id": _int(entry.get("entity_id")), "status": entry.get("status"),
            "errors": [{"message": e.get("warning"), "id": _int(e.get("error_id")),
                        "category": _int(e.get("error_category")), "severity": _int(e.get("error_severity"))}
                       for e in _list(entry.get("warnings"))],
            "info": [i for i in entry.get("info") or [] if isinstance(i, str)] if isinstance(entry.get("info"), list)
            else []}


def failed(result):
    """None for a result that passed or was skipped, else "warning" (every error NONE or MONITOR) or "failure"."""
    if result["status"] != "Fail":
        return None
    severities = [e["severity"] for e in result["errors"]]
    if severities and all(s in WARNING_SEVERITIES for s in severities):
        return "warning"
    return "failure"


def describe(result, level=1):
    """One line: the test, its category, and each error with DCGM's error id and severity (``level``: the run level)."""
    errors = "; ".join("%s (DCGM error %s, severity %s)" % (
        (e["message"] or "").strip(), e["id"], SEVERITY_NAMES.get(e["severity"], e["severity"]))
        for e in result["errors"]) or "no error given"
    return "dcgmi diag -r %d: %s test (%s) %s - %s" % (
        level, result["test"], result["category"], result["status"], errors)


def run_diag(run_command, dcgmi, level=1):
    """Run ``dcgmi diag -r <level> -j`` (``dcgmi``: the command, a name looked up on PATH or a path; None: not
    installed; ``level``: the run level, 1 to 4, _burn_in.LEVELS).
    {"ran": True, "version", "runtime_error", "results"}; {"ran": False, "note"} where dcgmi is not installed (no
    finding); {"ran": False, "error"} where it is and its output is not the diagnostic's JSON."""
    if not dcgmi:
        return {"ran": False, "note": "dcgmi is not installed: the DCGM diagnostic was not run"}
    if run_command is None:
        return {"ran": False, "error": "no command runner was given, so dcgmi could not be run"}
    argv = [dcgmi, "diag", "-r", str(int(level)), "-j"]
    try:
        rc, out, err = run_command(argv)
    except OSError as exc:
        return {"ran": False, "note": "dcgmi could not be started (%s): the DCGM diagnostic was not run" % exc}
    if rc == 127 and not (out or "").strip():
        return {"ran": False, "note": "dcgmi is not installed (%s): the DCGM diagnostic was not run" % (
            (err or "").strip() or "rc 127")}
    try:
        parsed = parse_diag(out)
    except DcgmDiagError as exc:
        said = (err or "").strip()[:200]
        return {"ran": False, "error": "%s (rc %s%s)" % (exc, rc, ", " + said if said else "")}
    parsed["ran"] = True
    return parsed


def find_dcgmi(module, dcgmi="dcgmi"):
    """``dcgmi`` as the module finds it: a path (an executable file) or a name on PATH; None where it is not there."""
    if not isinstance(dcgmi, str) or not dcgmi.strip() or "\x00" in dcgmi:
        return None
    if "/" in dcgmi:
        return dcgmi if os.path.isfile(dcgmi) and os.access(dcgmi, os.X_OK) else None
    return module.get_bin_path(dcgmi)


def run_for_module(module, dcgmi="dcgmi", level=1):
    """``run_diag`` through an AnsibleModule: ``dcgmi`` is a command name looked up on PATH (module.get_bin_path) or a
    path; one that is not there is "not installed" (a note, no finding)."""
    return run_diag(lambda argv: module.run_command(argv, check_rc=False), find_dcgmi(module, dcgmi), level)
