"""mig_mode on simulated nodes: check mode through real ansible, the other cases in this process (run_here, or the
``inproc`` fixture)."""
import hashlib

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import mig_mode
from tests.support.ansible_run import run_module
from tests.support.modrun import run_here, run_main

MODULE = "gpuops.nvidia.mig_mode"


@pytest.fixture
def inproc(monkeypatch):
    """Run mig_mode in this process against a simulated node (faster than ansible for the many cases)."""
    def _run(env, args, check=False, diff=False):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return run_main(mig_mode.main, args, check_mode=check, diff=diff)
    return _run


def _node(tmp_path, shape):
    path = str(tmp_path / "state.json")
    sim = SimulatedBackend(path, shape=shape)
    return sim, {"GPUOPS_SIMULATED_GPUS": path}


def _digest(sim):
    with open(sim.path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _calls(sim):
    return [(e["call"], e["args"].get("index")) for e in sim.raw_state()["call_log"] if "call" in e]


def test_check_mode_reports_and_touches_nothing(tmp_path):
    sim, env = _node(tmp_path, "dgx-a100-40gb")
    before = _digest(sim)
    result, proc = run_module(MODULE, {"enabled": True, "allow_reset": True}, env=env, check=True, diff=True)
    assert result["changed"] is True, proc.stdout
    assert [g["actions"] for g in result["gpus"]] == [["set_mig_mode", "reset_gpu"]] * 8
    assert all(g["after"] == {"current": "Enabled", "pending": "Enabled"} for g in result["gpus"])
    assert result["diff"]["before"]["gpu 0"] == {"current": "Disabled", "pending": "Disabled"}
    assert _digest(sim) == before


def test_ampere_without_allow_reset_stays_pending_and_says_why(tmp_path):
    sim, env = _node(tmp_path, "a30-x4")
    result = run_here(MODULE, {"enabled": True, "gpus": ["0"]}, env=env)
    gpu = result["gpus"][0]
    assert result["changed"] is True and result["pending"] == [0] and result["reset_required"] == [0]
    assert gpu["after"] == {"current": "Disabled", "pending": "Enabled"}
    assert "allow_reset is false" in gpu["reason"]
    assert _calls(sim) == [("set_mig_mode", 0)]
    # the second run with the reset allowed activates it, resetting only GPU 0
    result = run_here(MODULE, {"enabled": True, "gpus": ["0"], "allow_reset": True}, env=env)
    assert result["gpus"][0]["actions"] == ["reset_gpu"] and result["pending"] == []
    assert _calls(sim)[-1] == ("reset_gpu", 0)


def test_mixed_node_resets_only_ampere_and_is_idempotent(tmp_path):
    sim, env = _node(tmp_path, "mixed")
    result = run_here(MODULE, {"enabled": True, "allow_reset": True}, env=env)
    assert result["changed"] is True and result["pending"] == []
    assert result["skipped_gpus"] == [{"index": 4, "reason": "GPU does not support MIG"}]
    resets = sorted(i for c, i in _calls(sim) if c == "reset_gpu")
    assert resets == [0, 1]     # the two A100s; the H100s need no reset
    by_index = {g["index"]: g for g in result["gpus"]}
    assert by_index[2]["actions"] == ["set_mig_mode"] and by_index[2]["architecture"] == "hopper"
    sim.clear_call_log()
    again = run_here(MODULE, {"enabled": True, "allow_reset": True}, env=env)
    assert again["changed"] is False and _calls(sim) == []


def test_busy_ampere_gpu_not_reset_and_processes_named(tmp_path, inproc):
    sim, env = _node(tmp_path, "dgx-a100-80gb")
    sim.add_process(1, 777, "pytorch")
    result = inproc(env, {"enabled": True, "gpus": ["0", "1"], "allow_reset": True})
    g0, g1 = result["gpus"]
    assert g0["pending"] is False
    assert g1["pending"] is True and g1["reset_required"] and g1["reboot_required"]
    assert "pid 777 (pytorch)" in g1["reason"] and g1["activation_status"] == "IN_USE"
    assert ("reset_gpu", 1) not in _calls(sim)


def test_passthrough_gpu_needs_reboot(tmp_path, inproc):
    sim, env = _node(tmp_path, "dgx-a100-80gb")
    sim.set_reset_supported(0, False)
    result = inproc(env, {"enabled": True, "gpus": ["0"], "allow_reset": True})
    gpu = result["gpus"][0]
    assert gpu["reboot_required"] and not gpu["reset_required"] and result["reboot_required"] == [0]
    assert "reboot" in gpu["reason"]
    assert ("reset_gpu", 0) not in _calls(sim)


def test_hopper_busy_gpu_waits_and_hopper_idle_applies_without_reset(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h200")
    sim.add_process(0, 55, "vllm")
    result = inproc(env, {"enabled": True, "gpus": ["0", "1"]})
    g0, g1 = result["gpus"]
    assert g0["pending"] and g0["reboot_required"] and "pid 55 (vllm)" in g0["reason"]
    assert not g1["pending"] and g1["actions"] == ["set_mig_mode"]
    assert "reset_gpu" not in [call[0] for call in _calls(sim)]


def test_bad_input_changes_nothing(tmp_path):
    sim, env = _node(tmp_path, "mixed")
    before = _digest(sim)
    result = run_here(MODULE, {"enabled": True, "gpus": ["9"]}, env=env)
    assert result["failed"] and "matches no GPU" in result["msg"] and "0 (NVIDIA A100-SXM4-80GB" in result["msg"]
    result = run_here(MODULE, {"enabled": True, "gpus": ["4"]}, env=env)
    assert result["failed"] and "does not support MIG" in result["msg"]
    result = run_here(MODULE, {"config_name": "all-nonsense"}, env=env)
    assert result["failed"] and "all-balanced" in result["msg"]
    assert _digest(sim) == before


def test_disable_destroys_idle_instances_but_refuses_busy_ones(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h100-80gb")
    for index in (0, 1):
        sim.set_mig_mode(index, True)
        gi = sim.create_gpu_instance(index, 9, 0)
        ci = sim.create_compute_instance(index, gi, 2)
    sim.add_process(1, 4242, "train", gi_id=gi, ci_id=ci)
    before = _digest(sim)
    result = inproc(env, {"config_name": "all-disabled", "gpus": ["0", "1"]})
    assert result["failed"] and "pid 4242 (train)" in result["msg"] and "nothing changed" in result["msg"]
    assert _digest(sim) == before
    result = inproc(env, {"config_name": "all-disabled", "gpus": ["0"]}, diff=True)
    gpu = result["gpus"][0]
    assert gpu["actions"] == ["destroy_instances", "set_mig_mode"] and gpu["after"]["current"] == "Disabled"
    assert result["diff"]["after"]["gpu 0"] == {"current": "Disabled", "pending": "Disabled"}


def test_mode_from_migparted_file(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h200")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nmig-configs:\n  half:\n    - devices: [0, 1]\n      mig-enabled: true\n"
                   "      mig-devices: {}\n    - devices: [2]\n      mig-enabled: false\n")
    result = inproc(env, {"config_file": str(cfg), "config_name": "half"})
    assert [(g["index"], g["desired"], g["changed"]) for g in result["gpus"]] == [
        (0, "Enabled", True), (1, "Enabled", True), (2, "Disabled", False)]


@pytest.mark.parametrize("args,msg", [
    ({"enabled": True, "config_name": "all-balanced"}, "mutually exclusive"),
    ({}, "one of the following is required"),
])
def test_argument_errors(tmp_path, inproc, args, msg):
    sim, env = _node(tmp_path, "hgx-h200")
    result = inproc(env, args)
    assert result["failed"] and msg in result["msg"]


@pytest.mark.parametrize("shape,setup,args,check", [
    # disabling: destroy CIs, destroy GIs, then SetMigMode (Hopper applies at once)
    ("hgx-h100-80gb", "instances", {"config_name": "all-disabled", "gpus": ["0"]},
     lambda g: g["mig_mode_current"] == "Disabled" and not g["gpu_instances"]),
    # enabling on Ampere: SetMigMode, then a reset of that GPU
    ("dgx-a100-40gb", None, {"enabled": True, "gpus": ["0"], "allow_reset": True},
     lambda g: g["mig_mode_current"] == "Enabled" and g["mig_mode_pending"] == "Enabled"),
])
def test_fault_at_each_mutating_call_then_rerun_converges(tmp_path, inproc, shape, setup, args, check):
    def fresh(name):
        d = tmp_path / name
        d.mkdir()
        sim, env = _node(d, shape)
        if setup == "instances":
            sim.set_mig_mode(0, True)
            for start in (0, 4):
                gi = sim.create_gpu_instance(0, 9, start)
                sim.create_compute_instance(0, gi, 1)     # 2c first: CIs are placed aligned
                sim.create_compute_instance(0, gi, 0)
            sim.clear_call_log()
        return sim, env
    sim, env = fresh("probe")
    assert not inproc(env, args).get("failed")
    n = len(_calls(sim))
    assert n >= 2 and check(sim.read_gpu(0))
    for k in range(1, n + 1):
        sim, env = fresh("k%d" % k)
        sim.inject_fault(k, "UNKNOWN")
        assert inproc(env, args)["failed"]
        rerun = inproc(env, args)
        assert not rerun.get("failed"), rerun.get("msg")
        assert check(sim.read_gpu(0)), k
        assert inproc(env, args)["changed"] is False


def test_a_fault_fails_in_the_base_with_what_was_carried_out(tmp_path, inproc):
    """An NVML error while setting the mode is a Failure raised to the module's base (issue 48): its message, the
    GPUs' results so far, and ``changed`` false when the first call failed."""
    sim, env = _node(tmp_path, "dgx-a100-40gb")
    sim.inject_fault(1, "UNKNOWN")
    failed = inproc(env, {"enabled": True, "gpus": ["0"], "allow_reset": True})
    assert failed["failed"] and failed["msg"].startswith("NVML error ")
    assert failed["msg"].endswith(". Re-run to continue from the current state.")
    assert failed["changed"] is False and failed["gpus"] == []
