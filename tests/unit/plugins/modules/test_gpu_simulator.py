"""gpu_simulator drives simulated GPUs from playbooks, and never acts on real ones. Check mode and a reboot run through
real ansible; the other actions and refusals run the module in this process (tests.support.modrun.run_here)."""
import json

from tests.support.ansible_run import run_module
from tests.support.modrun import run_here

MODULE = "gpuops.nvidia.gpu_simulator"


def _env(tmp_path, shape="hgx-h200"):
    return {"GPUOPS_SIMULATED_GPUS": str(tmp_path / "s.json"), "GPUOPS_SIMULATED_MACHINE": shape}


def _state(tmp_path):
    return json.load(open(str(tmp_path / "s.json")))


def test_refuses_without_simulated_gpus():
    result = run_here(MODULE, {"action": "reboot"})
    assert result["failed"] is True and "acts only on simulated GPUs" in result["msg"]


def test_reboot_in_check_mode_changes_nothing_then_reboots(tmp_path):
    env = _env(tmp_path)
    run_module(MODULE, {"action": "show"}, env=env)
    result = run_module(MODULE, {"action": "reboot"}, env=env, check=True)[0]
    assert result["changed"] is True and _state(tmp_path)["boot_id"] == 1
    result = run_module(MODULE, {"action": "reboot"}, env=env)[0]
    assert result["changed"] is True and result["boot_id"] == 2 and _state(tmp_path)["boot_id"] == 2


def test_processes_and_faults(tmp_path):
    env = _env(tmp_path, "a30-x4")
    run_here(MODULE, {"action": "add_process", "index": 1, "pid": 42, "name": "dcgm"}, env=env)
    run_here(MODULE, {"action": "inject_fault", "after_calls": 2, "error": "IN_USE"}, env=env)
    state = _state(tmp_path)
    assert state["processes"][0]["name"] == "dcgm" and state["faults"][0]["remaining"] == 2
    run_here(MODULE, {"action": "remove_process", "pid": 42}, env=env)
    assert _state(tmp_path)["processes"] == []


def test_bad_input_is_refused_and_changes_nothing(tmp_path):
    env = _env(tmp_path)
    run_here(MODULE, {"action": "show"}, env=env)
    before = _state(tmp_path)
    result = run_here(MODULE, {"action": "add_process", "pid": 1}, env=env)
    assert result["failed"] is True and "needs index" in result["msg"]
    result = run_here(MODULE, {"action": "inject_fault", "error": "SOMETIMES"}, env=env)
    assert result["failed"] is True and "unknown NVML error 'SOMETIMES'" in result["msg"]
    result = run_here(MODULE, {"action": "add_process", "index": 9, "pid": 1}, env=env)
    assert result["failed"] is True and "no GPU with index 9" in result["msg"]
    assert _state(tmp_path) == before


def test_health_faults_xid_lines_and_an_unreadable_log(tmp_path):
    env = _env(tmp_path)
    result = run_here(MODULE, {"action": "inject_health", "index": 1, "fault": "nvlink_down", "link": 4}, env=env)
    assert result["changed"] is True and _state(tmp_path)["gpus"][1]["health"]["nvlink_down"] == [4]
    result = run_here(MODULE, {"action": "add_xid", "index": 1, "code": 74, "xid_text": "NVLINK: fatal"}, env=env)
    assert result["line"] == "NVRM: Xid (PCI:0000:0f:00): 74, NVLINK: fatal"
    run_here(MODULE, {"action": "set_kernel_log_readable", "readable": False}, env=env)
    # (each line with its monotonic timestamp, the first Xid of a boot at the simulated log's 60 s)
    assert _state(tmp_path)["kernel_log"] == {"readable": False, "lines": [result["line"]], "ts": [60.0]}
    before = _state(tmp_path)
    refused = run_here(MODULE, {"action": "inject_health", "index": 1, "fault": "pcie_generation", "value": 9},
                       env=env)
    assert refused["failed"] is True and "from 1 to 5" in refused["msg"]
    refused = run_here(MODULE, {"action": "inject_health", "index": 1}, env=env)
    assert refused["failed"] is True and "needs fault" in refused["msg"]
    assert _state(tmp_path) == before
