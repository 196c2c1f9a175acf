"""The recorded answers of NVIDIA's DRA driver (v25.8.1) about GpuConfig stay consistent.

tests/fixtures/dra/gpuconfig-verdicts-v25.8.1.json was written in a development session by
scripts/nvidia_facts/gpuconfig_check.go built against the driver's own types (never in CI).
These checks keep it well-formed and in step with the corpus script that produced its inputs:
if the corpus changes, the fixture must be recorded again.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "dra", "gpuconfig-verdicts-v25.8.1.json")
CORPUS = os.path.join(ROOT, "scripts", "nvidia_facts", "gpuconfig_corpus.py")
COMMIT = "fc69d98528027bfe06efff81e6fd99c98ede8ff7"
STAGES = {"decode", "type", "normalize", "validate", "sharing", "mps-limits"}


@pytest.fixture(scope="module")
def recorded():
    with open(FIXTURE) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def corpus():
    out = subprocess.run([sys.executable, CORPUS], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_source_is_pinned(recorded):
    source = recorded["source"]
    assert source["tag"] == "v25.8.1"
    assert source["commit"] == COMMIT
    assert source["go_version"].startswith("go version go")
    assert recorded["feature_gates"]["TimeSlicingSettings"] is True
    assert recorded["feature_gates"]["MPSSupport"] is True


def test_verdicts_are_well_formed(recorded):
    for verdict in recorded["verdicts"]:
        assert verdict["expect"] in ("good", "bad", "edge"), verdict["name"]
        assert isinstance(verdict["accepted"], bool) and isinstance(verdict["admitted"], bool)
        assert not (verdict["accepted"] and not verdict["admitted"]), verdict["name"]
        if verdict["accepted"]:
            assert verdict["error"] is None and "stage" not in verdict, verdict["name"]
            assert verdict["normalized"]["kind"] == "GpuConfig", verdict["name"]
        else:
            assert verdict["error"], verdict["name"]
            assert verdict["stage"] in STAGES, verdict["name"]
        if verdict.get("stage") == "decode":
            assert verdict["normalized"] is None, verdict["name"]


def test_recorded_inputs_are_the_corpus_in_order(recorded, corpus):
    assert [v["name"] for v in recorded["verdicts"]] == [c["name"] for c in corpus]
    for verdict, case in zip(recorded["verdicts"], corpus):
        assert verdict["expect"] == case["expect"], case["name"]
        assert verdict["devices"] == case["devices"], case["name"]
        assert verdict["input"] == case["document"], case["name"]


def test_every_good_shape_was_accepted(recorded):
    good = [v for v in recorded["verdicts"] if v["expect"] == "good"]
    assert good
    assert [v["name"] for v in good if not v["accepted"]] == []


def test_every_bad_shape_was_rejected(recorded):
    bad = [v for v in recorded["verdicts"] if v["expect"] == "bad"]
    assert bad
    assert [v["name"] for v in bad if v["accepted"]] == []


def test_exclusive_normalizes_to_default_timeslicing(recorded):
    """With TimeSlicingSettings on, a GpuConfig without sharing becomes TimeSlicing/Default."""
    exclusive = next(v for v in recorded["verdicts"] if v["name"] == "exclusive")
    assert exclusive["normalized"]["sharing"] == {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}


def test_mps_limits_are_whole_megabytes_per_uuid(recorded):
    for verdict in recorded["verdicts"]:
        if verdict["expect"] == "good" and "mps_limits" in verdict:
            limits = verdict["mps_limits"][str(verdict["devices"])]
            assert limits["error"] is None, verdict["name"]
            for value in (limits.get("limits") or {}).values():
                assert value.endswith("M") and int(value[:-1]) > 0, verdict["name"]
