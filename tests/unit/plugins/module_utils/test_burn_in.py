"""_burn_in: the record's reasons to burn in again, its findings for the health read, and a run's record."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _burn_in, _dcgm

RECORD = {"level": "medium", "diag_level": 2, "verdict": "pass", "time": "2026-11-29T10:00:00Z",
          "driver": "580.95.05", "dcgm_version": "4.6.0", "failures": [], "warnings": []}


@pytest.mark.parametrize("record, level, driver, expect", [
    (None, "quick", "580.95.05", ["no burn-in recorded on this node (level quick declared)"]),
    (RECORD, "quick", "580.95.05", []),
    (RECORD, "medium", "580.95.05", []),
    (RECORD, "long", "580.95.05", ["burned in at level medium, long is declared"]),
    (RECORD, "medium", "590.10.01", ["burned in with driver 580.95.05, driver 590.10.01 is loaded"]),
    (dict(RECORD, verdict="fail"), "quick", "580.95.05", ["the last burn-in (medium, driver 580.95.05) failed"]),
    ({"error": "x: not JSON"}, "quick", "580.95.05", ["the burn-in record cannot be used (x: not JSON)"]),
])
def test_reasons(record, level, driver, expect):
    assert _burn_in.reasons(record, level, driver) == expect


def test_levels_and_paths():
    assert [_burn_in.level_of(n) for n in ("quick", "medium", "long", "extended")] == [1, 2, 3, 4]
    with pytest.raises(_burn_in.BurnInError, match="quick, medium, long, extended"):
        _burn_in.level_of("forever")
    assert _burn_in.record_path({}) == "/var/lib/gpuops/burn-in.json"
    assert _burn_in.record_path({"GPUOPS_SIMULATED_ROOT": "/lab/n1"}) == "/lab/n1/var/lib/gpuops/burn-in.json"
    assert _burn_in.record_path({"GPUOPS_SIMULATED_GPUS": "/lab/n1.json"}) == "/lab/n1.json.burn-in.json"


def test_read_record(tmp_path):
    path = tmp_path / "burn-in.json"
    assert _burn_in.read_record(str(path)) is None
    path.write_text(json.dumps(RECORD))
    assert _burn_in.read_record(str(path)) == RECORD
    path.write_text("{not json")
    assert "not JSON" in _burn_in.read_record(str(path))["error"]
    path.write_text(json.dumps(dict(RECORD, level="forever")))
    assert "needs a level" in _burn_in.read_record(str(path))["error"]


def test_a_runs_record_and_its_findings():
    parsed = {"ran": True, "version": "4.6.0", "runtime_error": None, "results": [
        {"category": "Hardware", "test": "memory", "entity_group": "GPU", "entity_id": 3, "status": "Fail",
         "errors": [{"message": "bad row", "id": 83, "category": 2, "severity": 2}], "info": []},
        {"category": "Hardware", "test": "pcie", "entity_group": "GPU", "entity_id": 1, "status": "Fail",
         "errors": [{"message": "slow", "id": 9, "category": 1, "severity": 1}], "info": []},
        {"category": "Deployment", "test": "software", "entity_group": "GPU", "entity_id": 0, "status": "Pass",
         "errors": [], "info": []}]}
    record = _burn_in.new_record(parsed, "long", "580.95.05", "2026-11-29T10:00:00Z",
                                 lambda r: _dcgm.describe(r, 3), _dcgm.failed)
    assert record["verdict"] == "fail" and record["diag_level"] == 3
    assert [(f["gpu"], f["test"]) for f in record["failures"]] == [(3, "memory")]
    assert [(w["gpu"], w["test"]) for w in record["warnings"]] == [(1, "pcie")]
    assert record["failures"][0]["message"].startswith("dcgmi diag -r 3: memory test (Hardware) Fail - bad row")
    found = _burn_in.findings(record)
    assert [(k, g) for k, g, d in found] == [("burn_in_failure", 3), ("burn_in_warning", 1)]
    assert found[0][2].startswith("burn-in long at 2026-11-29T10:00:00Z, driver 580.95.05: dcgmi diag -r 3: memory")
    assert _burn_in.findings(dict(RECORD)) == [] and _burn_in.findings(None) == []
    assert _burn_in.findings({"error": "x"}) == [("burn_in_unreadable", None, "x")]
    crashed = _burn_in.new_record({"ran": True, "runtime_error": "no GPUs", "results": []}, "quick", "580", "t",
                                  _dcgm.describe, _dcgm.failed)
    assert crashed["verdict"] == "fail" and "could not run its tests: no GPUs" in crashed["failures"][0]["message"]
    assert [k for k, g, d in _burn_in.findings(crashed)] == ["burn_in_failure"]


def test_the_summary_the_node_carries_names_each_failed_test_and_reads_the_same_every_time():
    record = {"level": "medium", "diag_level": 2, "verdict": "fail", "time": "2026-11-29T10:00:00Z",
              "driver": "570.172.08", "dcgm_version": "4.2.3",
              "failures": [{"gpu": 3, "test": "memory_bandwidth", "message": "m"},
                           {"gpu": None, "test": None, "message": "could not run"}],
              "warnings": [{"gpu": 1, "test": "pcie", "message": "w"}]}
    got = _burn_in.summary(record)
    assert got == {"level": "medium", "verdict": "fail", "time": "2026-11-29T10:00:00Z", "driver": "570.172.08",
                   "dcgm_version": "4.2.3", "failed": ["memory_bandwidth (GPU 3)", "diagnostic"]}
    assert _burn_in.summary_errors(got) == []
    value = _burn_in.annotation_value(got)
    assert value == _burn_in.annotation_value(dict(reversed(list(got.items()))))
    assert json.loads(value) == got and " " not in value.replace("memory_bandwidth (GPU 3)", "")
    assert _burn_in.summary(None) is None and _burn_in.summary({"error": "unreadable"}) is None
    many = dict(record, failures=[{"gpu": i, "test": "t", "message": "m"} for i in range(40)])
    cut = _burn_in.summary(many)["failed"]
    assert len(cut) == _burn_in.SUMMARY_FAILED_LIMIT + 1 and cut[-1] == "... and 24 more"
    assert _burn_in.summary_errors(_burn_in.summary(many)) == []
