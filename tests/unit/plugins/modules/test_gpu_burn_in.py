"""gpu_burn_in on simulated GPUs with the dcgmi stand-in, in-process: check mode reports and runs nothing, apply runs
dcgmi diag at the level and records the verdict, apply again runs nothing; another driver or a higher level burns in
again, a failed diagnostic is recorded and becomes the health read's blocking finding (the gate keeps the node out);
a GPU with processes, a missing dcgmi and bad input run and write nothing."""
import json
import os
import shutil

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import summary
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_burn_in

from tests.support.modrun import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
DCGMI = os.path.join(ROOT, "tests", "support", "bin", "dcgmi")
FAILED = os.path.join(ROOT, "tests", "fixtures", "dcgm", "diag-r1-pending-row-remap.json")
SHAPE = "hgx-h200"


@pytest.fixture
def sim(tmp_path, monkeypatch):
    path = str(tmp_path / "state.json")
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", path)
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", SHAPE)
    monkeypatch.delenv("GPUOPS_SIMULATED_ROOT", raising=False)
    backend = SimulatedBackend(path, shape=SHAPE)
    backend.read_all()
    backend.path = path
    return backend


def _record(sim):
    with open(sim.path + ".burn-in.json") as handle:
        return json.load(handle)


def test_check_apply_again_then_a_new_driver_or_level_burns_in_again(sim):
    args = {"level": "quick", "dcgmi": DCGMI}
    check = run_main(gpu_burn_in.main, args, check_mode=True, diff=True)
    assert check["changed"] is True and not check.get("failed"), check
    assert check["reasons"] == ["no burn-in recorded on this node (level quick declared)"]
    assert check["burn_in"] is None and not os.path.exists(sim.path + ".burn-in.json")
    assert "dcgmi diag -r 1" in check["diff"]["after"]

    applied = run_main(gpu_burn_in.main, args, diff=True)
    assert applied["changed"] is True and not applied.get("failed"), applied
    record = _record(sim)
    assert record == applied["burn_in"]
    assert record["level"] == "quick" and record["diag_level"] == 1 and record["verdict"] == "pass"
    assert record["driver"] == sim.read_all()["driver_version"] and record["failures"] == []
    assert record["dcgm_version"].startswith("4.6.0")

    again = run_main(gpu_burn_in.main, args)
    assert again["changed"] is False and again["reasons"] == [] and again["burn_in"] == record
    # a lower level is covered; a higher one is not
    assert run_main(gpu_burn_in.main, dict(args, level="quick"), check_mode=True)["changed"] is False
    higher = run_main(gpu_burn_in.main, dict(args, level="long"), check_mode=True)
    assert higher["changed"] is True and higher["reasons"] == ["burned in at level quick, long is declared"]
    # the record of another driver: burned in again
    with open(sim.path + ".burn-in.json", "w") as handle:
        json.dump(dict(record, driver="570.195.03"), handle)
    other = run_main(gpu_burn_in.main, args)
    assert other["changed"] is True and other["reasons"] == [
        "burned in with driver 570.195.03, driver %s is loaded" % record["driver"]]
    assert _record(sim)["driver"] == record["driver"]


def test_a_failed_burn_in_is_recorded_and_blocks_the_health_read_until_one_passes(sim):
    shutil.copy(FAILED, sim.path + ".dcgmi.json")
    res = run_main(gpu_burn_in.main, {"level": "medium", "dcgmi": DCGMI})
    assert res["changed"] is True and not res.get("failed"), res
    record = _record(sim)
    assert record["verdict"] == "fail" and record["failures"], record
    assert all(f["message"].startswith("dcgmi diag -r 2: ") for f in record["failures"])
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in res.get("warnings") or []]
    assert any("burn-in failed" in w for w in warnings), res
    verdict = summary(sim.read_health())
    kinds = [f["kind"] for f in verdict["gate"]["blocking"]]
    assert "burn_in_failure" in kinds and not verdict["healthy"], verdict
    assert any(record["failures"][0]["test"] in b for b in verdict["blocking"])
    # a failed record is never enough: the next run burns in again, and a pass clears the finding
    os.unlink(sim.path + ".dcgmi.json")
    again = run_main(gpu_burn_in.main, {"level": "medium", "dcgmi": DCGMI})
    assert again["changed"] is True and again["reasons"][0].startswith("the last burn-in (medium, driver ")
    assert _record(sim)["verdict"] == "pass"
    assert "burn_in_failure" not in [f["kind"] for f in summary(sim.read_health())["gate"]["blocking"]]


def test_busy_gpus_a_missing_dcgmi_and_bad_input_run_and_write_nothing(sim, tmp_path):
    sim.add_process(5, 777, "python")
    busy = run_main(gpu_burn_in.main, {"level": "quick", "dcgmi": DCGMI})
    assert busy["failed"] and busy["changed"] is False and "GPU 5 (pid 777 python)" in busy["msg"], busy
    assert not os.path.exists(sim.path + ".burn-in.json")
    # check mode refuses the same way (it reports what the real run does)
    assert run_main(gpu_burn_in.main, {"level": "quick", "dcgmi": DCGMI}, check_mode=True)["msg"] == busy["msg"]
    sim.remove_process(777)
    bad = run_main(gpu_burn_in.main, {"level": "forever", "dcgmi": DCGMI})
    assert bad["failed"] and "quick, medium, long, extended" in bad["msg"] and "forever" in bad["msg"], bad
    assert not os.path.exists(sim.path + ".burn-in.json")


def test_no_dcgmi_is_refused_before_anything_runs(sim, tmp_path):
    res = run_main(gpu_burn_in.main, {"level": "quick", "dcgmi": str(tmp_path / "no-dcgmi")})
    assert res["failed"] and res["changed"] is False, res
    assert "dcgmi" in res["msg"] and "datacenter-gpu-manager" in res["msg"] and "gpu_node_burn_in: none" in res["msg"]
    assert not os.path.exists(sim.path + ".burn-in.json")


NVBANDWIDTH = os.path.join(ROOT, "tests", "support", "bin", "nvbandwidth")


def test_a_slow_gpu_pair_fails_a_medium_burn_in_named_and_blocks_the_health_read(sim):
    with open(sim.path + ".nvbandwidth.json", "w") as handle:
        json.dump({"links": [{"from": 0, "to": 3, "gbps": 180.0, "tests": ["device_to_device_memcpy_read_ce"]}]},
                  handle)
    args = {"level": "medium", "dcgmi": DCGMI, "nvbandwidth": NVBANDWIDTH}
    check = run_main(gpu_burn_in.main, args, check_mode=True, diff=True)
    assert check["bandwidth"] == {"would_run": True, "note": None} and "and nvbandwidth" in check["diff"]["after"]
    res = run_main(gpu_burn_in.main, args)
    assert res["changed"] is True and not res.get("failed"), res
    record = _record(sim)
    assert record["verdict"] == "fail" and record["bandwidth"]["ran"] is True, record
    assert [f["message"] for f in record["failures"]] == [
        "nvbandwidth device_to_device_memcpy_read_ce: GPU 0 -> GPU 3 180 GB/s below floor 315"]
    assert record["bandwidth"]["tests"]["device_to_device_memcpy_write_sm"] == {
        "status": "Passed", "checked": 56, "lowest_gbps": 396.0}
    assert record["bandwidth"]["floors"] == {"NVIDIA H200": 315.0}
    verdict = summary(sim.read_health())
    assert not verdict["healthy"] and any("GPU 0 -> GPU 3 180 GB/s below floor 315" in b for b in verdict["blocking"])
    assert verdict["burn_in"]["failed"] == ["nvbandwidth device_to_device_memcpy_read_ce (GPU 0 -> GPU 3)"], verdict
    # the link mended: burned in again, passed on both, and once is enough
    os.unlink(sim.path + ".nvbandwidth.json")
    healed = run_main(gpu_burn_in.main, args)
    assert healed["changed"] is True and _record(sim)["verdict"] == "pass"
    assert healed["bandwidth"]["ran"] is True and healed["bandwidth"]["tests"]["device_to_device_memcpy_read_ce"][
        "lowest_gbps"] == 396.0
    assert run_main(gpu_burn_in.main, args)["changed"] is False


def test_without_nvbandwidth_or_at_quick_the_burn_in_passes_on_dcgmi_with_a_note(sim, tmp_path):
    res = run_main(gpu_burn_in.main, {"level": "medium", "dcgmi": DCGMI, "nvbandwidth": str(tmp_path / "none")})
    assert res["changed"] is True and not res.get("failed"), res
    record = _record(sim)
    assert record["verdict"] == "pass" and record["bandwidth"]["ran"] is False
    assert "is not installed on this node: the GPU-to-GPU bandwidth check was not run" in record["bandwidth"]["note"]
    os.unlink(sim.path + ".burn-in.json")
    quick = run_main(gpu_burn_in.main, {"level": "quick", "dcgmi": DCGMI, "nvbandwidth": NVBANDWIDTH})
    assert _record(sim)["verdict"] == "pass" and "medium level and above" in quick["bandwidth"]["note"]


def test_a_bad_nvbandwidth_command_is_refused_and_nothing_runs(sim):
    res = run_main(gpu_burn_in.main, {"level": "medium", "dcgmi": DCGMI, "nvbandwidth": " "})
    assert res["failed"] and res["changed"] is False and "nvbandwidth must be a command name" in res["msg"], res
    assert not os.path.exists(sim.path + ".burn-in.json")
