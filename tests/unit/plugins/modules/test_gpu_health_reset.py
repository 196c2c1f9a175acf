"""gpu_health_reset on simulated GPUs, in-process: check mode reports and calls nothing, apply resets only the idle GPU
whose pending row remap blocks and reads the health again, apply again changes nothing; a busy GPU is not reset and
the reason names its holder; bad input changes nothing."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_health_reset

from tests.support.modrun import run_main

SHAPE = "hgx-h200"


@pytest.fixture
def sim(tmp_path, monkeypatch):
    path = str(tmp_path / "state.json")
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", path)
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", SHAPE)
    backend = SimulatedBackend(path, shape=SHAPE)
    backend.read_all()
    return backend


def _calls(sim):
    return [(c["call"], c["args"].get("index")) for c in sim.raw_state()["call_log"]]


def test_check_apply_again(sim):
    sim.inject_health(3, "row_remap_pending")
    sim.inject_health(4, "row_remap_failure")          # blocks, but no reset clears it
    bus = sim.read_all()["gpus"][3]["pci_bus_id"]

    check = run_main(gpu_health_reset.main, {}, check_mode=True, diff=True)
    assert check["changed"] is True and not check.get("failed"), check
    assert check["resets"] == [{"index": 3, "pci_bus_id": bus, "clears": ["row_remap_pending"], "cleared": None}]
    assert check["diff"]["before"]["GPU 3"] == ["row_remap_pending"] and "GPU 3" not in check["diff"]["after"]
    assert check["diff"]["after"]["GPU 4"] == ["row_remap_failure"]
    assert _calls(sim) == []                              # check mode: reads only

    applied = run_main(gpu_health_reset.main, {})
    assert applied["changed"] is True and applied["resets"][0]["cleared"] is True, applied
    assert _calls(sim) == [("reset_gpu", 3)]              # that GPU, and no other
    assert "GPU 3 (%s): remapped rows pending" % bus not in " ".join(applied["health"]["blocking"])
    assert [f["kind"] for f in applied["health"]["gate"]["blocking"]] == ["row_remap_failure"]
    assert sim.read_health()["gpus"][3]["remapped_rows"]["pending"] is False

    again = run_main(gpu_health_reset.main, {})
    assert again["changed"] is False and again["resets"] == [] and _calls(sim) == [("reset_gpu", 3)]


def test_a_gpu_in_use_is_not_reset_and_the_reason_names_its_holders(sim):
    sim.inject_health(2, "row_remap_pending")
    sim.inject_health(5, "row_remap_pending")
    sim.hold("dcgm", indices=[2], pid=4242, command="nv-hostengine")
    sim.add_process(5, 777, "python")
    res = run_main(gpu_health_reset.main, {})
    assert res["changed"] is False and res["resets"] == [] and _calls(sim) == [], res
    reasons = dict((e["index"], e["reason"]) for e in res["not_reset"])
    assert "PID 4242 nv-hostengine" in reasons[2] and "not reset - in use" in reasons[2]
    assert "PID 777 python" in reasons[5]
    assert not res["health"]["healthy"]


def test_only_the_gpus_named_may_be_reset(sim):
    sim.inject_health(1, "row_remap_pending")
    sim.inject_health(6, "row_remap_pending")
    res = run_main(gpu_health_reset.main, {"gpus": [6]})
    assert [e["index"] for e in res["resets"]] == [6] and _calls(sim) == [("reset_gpu", 6)]


@pytest.mark.parametrize("args,words", [
    ({"health_policy": {"row_remap_pendin": "block"}}, "unknown health finding kind 'row_remap_pendin'"),
    ({"health_policy": {"row_remap_pending": "reset"}}, "is not one of block, warn, ignore"),
    ({"gpus": [-1, 4096]}, "gpus: -1, 4096 are not GPU indexes (0 to 1023)"),
])
def test_bad_input_changes_nothing(sim, args, words):
    sim.inject_health(3, "row_remap_pending")
    before = json.dumps(sim.raw_state(), sort_keys=True)
    res = run_main(gpu_health_reset.main, args)
    assert res["failed"] and words in res["msg"] and "nothing changed" in res["msg"], res
    assert json.dumps(sim.raw_state(), sort_keys=True) == before
