"""DCGM's diagnostic in the health read: dcgmi diag -r 1 -j's JSON (tests/fixtures/dcgm, built from dcgmi 4.6.0's writer)
parsed into results, judged by severity into findings on the right GPU, and a node without dcgmi a note, not an
error."""
import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _dcgm
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health as health

from tests.support.ansible_run import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "dcgm")
BUS = ("00000000:07:00.0", "00000000:0F:00.0")


def _text(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def _read(diag):
    """A healthy two-GPU health read with the diagnostic's answer."""
    gpus = [{"index": i, "uuid": "GPU-%d" % i, "name": "NVIDIA H200", "pci_bus_id": BUS[i], "architecture": "hopper",
             "lost": False} for i in range(2)]
    return {"backend": "nvml", "gpus": gpus, "kernel_log": {"readable": True, "source": "journalctl", "lines": []},
            "dcgm": diag}


def _runner(rc, name):
    calls = []

    def run(argv):
        calls.append(argv)
        return rc, _text(name), ""
    return run, calls


def test_a_passing_run_has_no_finding():
    run, calls = _runner(0, "diag-r1-pass.json")
    diag = _dcgm.run_diag(run, "/usr/bin/dcgmi")
    assert calls == [["/usr/bin/dcgmi", "diag", "-r", "1", "-j"]]
    assert diag["ran"] is True and diag["version"] == "4.6.0" and diag["runtime_error"] is None
    assert [(r["test"], r["entity_id"], r["status"]) for r in diag["results"]] == [
        ("software", 0, "Pass"), ("software", 1, "Pass")]
    assert health.findings(_read(diag)) == []
    assert health.summary(_read(diag))["dcgm"] == {"ran": True, "version": "4.6.0", "note": None, "error": None,
                                                   "runtime_error": None, "results": 2}


def test_a_failed_test_blocks_on_its_gpu_naming_dcgms_error():
    """dcgmi exits non-zero after a failed test: the output is parsed all the same. Error 85 (pending row remap) is
    severity 6, RESET: a failure, on GPU 1 (DCGM's GPU id 1 is NVML's index 1)."""
    run, dummy = _runner(1, "diag-r1-pending-row-remap.json")
    result = health.verdict(health.findings(_read(_dcgm.run_diag(run, "dcgmi"))))
    assert [(f["kind"], f["gpu"], f["pci_bus_id"], f["action"]) for f in result["findings"]] == [
        ("dcgm_diag_failure", 1, BUS[1], "block")]
    assert result["blocking"][0].startswith(
        "GPU 1 (00000000:0F:00.0): DCGM's diagnostic failed a test (dcgmi diag -r 1: software test (Deployment) Fail - "
        "GPU 1 had memory errors and row remappings are pending (DCGM error 85, severity RESET)) - act on DCGM's "
        "error"), result["blocking"]


def test_a_monitor_severity_result_warns():
    """A WARN result is written "Fail" by dcgmi's JSON: its errors' severity (1, MONITOR) makes it a warning."""
    diag = _dcgm.run_diag(_runner(1, "diag-r1-volatile-sbe.json")[0], "dcgmi")
    result = health.verdict(health.findings(_read(diag)))
    assert [(f["kind"], f["gpu"], f["action"]) for f in result["findings"]] == [("dcgm_diag_warning", 0, "warn")]
    assert result["healthy"] and "severity MONITOR" in result["warnings"][0]


def test_a_diagnostic_that_could_not_run_warns_with_dcgms_words():
    diag = _dcgm.run_diag(_runner(1, "diag-r1-runtime-error.json")[0], "dcgmi")
    (found,) = health.verdict(health.findings(_read(diag)))["findings"]
    assert (found["kind"], found["gpu"], found["action"]) == ("dcgm_diag_error", None, "warn")
    assert "Unable to complete diagnostic" in found["summary"]


@pytest.mark.parametrize("dcgmi,runner,words", [
    (None, None, "dcgmi is not installed"),
    ("dcgmi", lambda argv: (127, "", "dcgmi: command not found"), "dcgmi is not installed (dcgmi: command not found)"),
])
def test_no_dcgm_is_a_note_not_a_finding(dcgmi, runner, words):
    diag = _dcgm.run_diag(runner, dcgmi)
    assert diag["ran"] is False and words in diag["note"]
    assert health.findings(_read(diag)) == [] and health.summary(_read(diag))["dcgm"]["note"] == diag["note"]


def test_a_dcgmi_that_cannot_start_is_a_note():
    def run(argv):
        raise OSError(2, "No such file or directory")
    assert "could not be started" in _dcgm.run_diag(run, "/opt/dcgm/dcgmi")["note"]


@pytest.mark.parametrize("out,words", [
    ("Error: unable to connect\n", "did not print JSON"),
    ('{"something": 1}', "without a 'DCGM Diagnostic' object"),
])
def test_output_that_is_not_the_diagnostics_json_is_an_error_finding(out, words):
    diag = _dcgm.run_diag(lambda argv: (255, out, "boom"), "dcgmi")
    assert diag["ran"] is False and words in diag["error"] and "rc 255, boom" in diag["error"]
    assert [f["kind"] for f in health.findings(_read(diag))] == ["dcgm_diag_error"]


def test_a_failure_of_no_entity_or_an_unknown_gpu_is_a_node_finding():
    doc = json.loads(_text("diag-r1-pending-row-remap.json"))
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    test["results"][1]["entity_id"] = 7                 # a GPU id NVML does not list here
    parsed = _dcgm.parse_diag(json.dumps(doc))
    (found,) = health.findings(_read(dict(parsed, ran=True)))
    assert found["gpu"] is None and found["summary"].startswith("node: DCGM's diagnostic failed a test")
    assert "(DCGM entity GPU 7)" in found["summary"]
    test["results"] = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}]
    parsed = _dcgm.parse_diag(json.dumps(doc))          # the summary failed, no entry did: a result of no entity
    assert [(r["entity_group"], r["status"]) for r in parsed["results"]] == [("GPU", "Pass"), (None, "Fail")]
    assert [f["kind"] for f in health.findings(_read(dict(parsed, ran=True)))] == ["dcgm_diag_failure"]


def test_the_policy_can_loosen_a_dcgm_failure():
    diag = _dcgm.run_diag(_runner(1, "diag-r1-pending-row-remap.json")[0], "dcgmi")
    assert health.verdict(health.findings(_read(diag)), {"dcgm_diag_failure": "warn"})["verdict"] == "warn"


@pytest.mark.parametrize("dcgmi", ["", "  ", "dcgmi\x00", "gpuops-no-such-dir/dcgmi", "gpuops-no-such-dcgmi"])
def test_a_dcgmi_that_names_no_executable_is_not_installed(dcgmi):
    class Module(object):
        def get_bin_path(self, name):
            return None

        def run_command(self, argv, check_rc=False):
            raise AssertionError("nothing is run")
    diag = _dcgm.run_for_module(Module(), dcgmi)
    assert diag["ran"] is False and "not installed" in diag["note"]
