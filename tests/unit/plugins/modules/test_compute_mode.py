"""compute_mode on simulated GPUs: every rule, and proof from the simulator's call_log that check mode and a
declared-equal state make no mutating call. Check, apply and again, and the busy GPU's warning, run through real
ansible; the other rules run the module in this process (tests.support.modrun.run_here)."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import run_module
from tests.support.modrun import run_here

MODULE = "gpuops.nvidia.compute_mode"
pytestmark = pytest.mark.slow


def sim(tmp_path, shape="mixed"):
    path = str(tmp_path / "state.json")
    backend = SimulatedBackend(path, shape=shape)
    backend.read_all()  # create it
    return backend, {"GPUOPS_SIMULATED_GPUS": path, "GPUOPS_SIMULATED_MACHINE": shape}


def calls(env):
    with open(env["GPUOPS_SIMULATED_GPUS"]) as f:
        return [c for c in json.load(f)["call_log"] if "call" in c]


def modes(backend):
    return [g["compute_mode"] for g in backend.read_all()["gpus"]]


def test_check_apply_again(tmp_path):
    backend, env = sim(tmp_path)
    args = {"gpus": ["NVIDIA H100 80GB HBM3"], "mode": "Exclusive_Process"}
    r, _proc = run_module(MODULE, args, env=env, check=True, diff=True)
    assert r["changed"] is True and [c["index"] for c in r["changes"]] == [2, 3]
    assert r["diff"]["before"]["2"]["compute_mode"] == "Default"
    assert r["diff"]["after"]["2"]["compute_mode"] == "Exclusive_Process"
    assert [g["compute_mode"] for g in r["gpus"]] == ["Exclusive_Process"] * 2  # as it would be
    assert calls(env) == [] and modes(backend) == ["Default"] * 5
    assert r["calls"] == []

    r, _proc = run_module(MODULE, args, env=env, diff=True)
    assert r["changed"] is True
    assert r["calls"] == ["set_compute_mode(2, Exclusive_Process)", "set_compute_mode(3, Exclusive_Process)"]
    assert modes(backend) == ["Default", "Default", "Exclusive_Process", "Exclusive_Process", "Default"]
    assert [(c["call"], c["args"]["index"]) for c in calls(env)] == [("set_compute_mode", 2), ("set_compute_mode", 3)]

    r, _proc = run_module(MODULE, args, env=env, diff=True)
    assert r["changed"] is False and r["changes"] == [] and r["calls"] == []
    assert len(calls(env)) == 2  # no new mutating call


@pytest.mark.parametrize("check", [False, True])
def test_declared_equal_state_makes_no_call(tmp_path, check):
    backend, env = sim(tmp_path, "hgx-h200")
    r = run_here(MODULE, {"mode": "default", "persistence_mode": True}, env=env, check=check)
    assert r["changed"] is False and r["mode"] == "Default" and len(r["gpus"]) == 8
    assert calls(env) == []


def test_exclusive_process_on_mig_is_refused_before_any_change(tmp_path):
    backend, env = sim(tmp_path)
    backend.set_mig_mode(0, True)  # A100: pending until reset
    backend.reset_gpu(0)
    backend.clear_call_log()
    assert backend.read_gpu(0)["mig_mode_current"] == "Enabled"
    r = run_here(MODULE, {"mode": "Exclusive_Process"}, env=env)
    assert r["failed"] is True
    assert "not supported on a MIG-enabled GPU" in r["msg"] and "nothing changed" in r["msg"]
    assert calls(env) == []  # not even the GPUs without MIG were touched
    assert modes(backend) == ["Default"] * 5
    # Default and Prohibited are fine there
    r = run_here(MODULE, {"gpus": ["0"], "mode": "Prohibited"}, env=env)
    assert r["changed"] is True and modes(backend)[0] == "Prohibited"


@pytest.mark.parametrize("mode,fragment", [("Exclusive", "unknown compute mode 'Exclusive'"),
                                           ("Exclusive_Thread", "removed"),
                                           ("3", "not nvidia-smi's number")])
def test_unknown_mode_names_are_refused(tmp_path, mode, fragment):
    backend, env = sim(tmp_path, "l40s-x2")
    r = run_here(MODULE, {"mode": mode}, env=env)
    assert r["failed"] is True and fragment in r["msg"]
    assert "valid: Default, Exclusive_Process, Prohibited" in r["msg"]
    assert calls(env) == []


@pytest.mark.parametrize("selector,expected", [(["1"], [1]), (["L40S"], [4]), (["all"], [0, 1, 2, 3, 4]),
                                               (["A100-SXM4-80GB", "4"], [0, 1, 4])])
def test_selectors(tmp_path, selector, expected):
    backend, env = sim(tmp_path)
    r = run_here(MODULE, {"gpus": selector, "mode": "Prohibited"}, env=env)
    assert [g["index"] for g in r["gpus"]] == expected
    assert [c["args"]["index"] for c in calls(env)] == expected


def test_selecting_by_uuid_and_no_match(tmp_path):
    backend, env = sim(tmp_path)
    uuid = backend.read_gpu(3)["uuid"]
    r = run_here(MODULE, {"gpus": [uuid], "mode": "Exclusive_Process"}, env=env)
    assert [g["index"] for g in r["gpus"]] == [3] and r["changed"]
    r = run_here(MODULE, {"gpus": ["B200"], "mode": "Default"}, env=env)
    assert r["failed"] and "matches no GPU" in r["msg"]


def test_reboot_resets_and_the_next_run_reapplies_with_persistence(tmp_path):
    backend, env = sim(tmp_path, "hgx-h100-80gb")
    args = {"mode": "Exclusive_Process", "persistence_mode": True}
    run_here(MODULE, args, env=env)
    backend.reboot()
    gpus = backend.read_all()["gpus"]
    assert {g["compute_mode"] for g in gpus} == {"Default"} and {g["persistence_mode"] for g in gpus} == {False}
    before = len(calls(env))
    r = run_here(MODULE, args, env=env)
    assert r["changed"] is True
    assert r["changes"][0]["persistence_mode"] == [False, True]
    new = [c["call"] for c in calls(env)[before:]]
    assert new == ["set_persistence_mode", "set_compute_mode"] * 8  # persistence first, per GPU
    assert all(g["persistence_mode"] and g["nvidia_smi_mode"] == "EXCLUSIVE_PROCESS" for g in r["gpus"])


def test_failure_midway_rolls_back_what_was_changed(tmp_path):
    backend, env = sim(tmp_path, "a30-x4")
    backend.inject_fault(3, "NO_PERMISSION", call="set_compute_mode")
    r = run_here(MODULE, {"mode": "Exclusive_Process"}, env=env)
    assert r["failed"] is True
    assert "NO_PERMISSION" in r["msg"] and "Rolled back: GPU 1 compute_mode back to Default" in r["msg"]
    assert modes(backend) == ["Default"] * 4  # not half-configured


def test_busy_gpu_gives_a_warning(tmp_path):
    backend, env = sim(tmp_path, "l40s-x2")
    backend.add_process(0, 4242, "python", used_memory_mib=100)
    r, proc = run_module(MODULE, {"gpus": ["0"], "mode": "Prohibited"}, env=env)
    assert r["changed"] is True
    assert "PIDs 4242" in json.dumps(r.get("warnings", [])) + proc.stdout + proc.stderr


def test_settings_resolve_overlaps_in_one_declaration(tmp_path):
    backend, env = sim(tmp_path)
    args = {"settings": [{"gpus": ["all"], "mode": "Default"}, {"gpus": ["2", "3"], "mode": "Exclusive_Process"}]}
    r = run_here(MODULE, args, env=env)
    assert r["changed"] and r["mode"] is None and r["modes"]["2"] == "Exclusive_Process"
    r = run_here(MODULE, args, env=env)
    assert r["changed"] is False
    assert [c["args"] for c in calls(env)] == [{"index": 2, "mode": "Exclusive_Process"},
                                               {"index": 3, "mode": "Exclusive_Process"}]


def test_settings_and_mode_are_exclusive(tmp_path):
    backend, env = sim(tmp_path, "l40s-x2")
    r = run_here(MODULE, {"settings": [{"mode": "Default"}], "mode": "Default"}, env=env)
    assert r["failed"] and "mutually exclusive" in r["msg"]
    r = run_here(MODULE, {"gpus": ["0"]}, env=env)
    assert r["failed"] and "one of the following is required: settings, mode" in r["msg"]
    assert calls(env) == []


def test_where_nvidia_persistenced_owns_persistence_mode_no_persistence_call_is_made(tmp_path):
    backend, env = sim(tmp_path, "h200-x1")
    backend.set_persistence_mode(0, False)
    backend.clear_call_log()
    args = {"mode": "Prohibited", "persistence_owner": "nvidia-persistenced"}
    r = run_here(MODULE, args, env=env)
    assert r["changed"] is True and r["calls"] == ["set_compute_mode(0, Prohibited)"], r
    assert r["persistence"]["owner"] == "nvidia-persistenced" and "no NVML persistence call" in r["persistence"]["note"]
    assert [c["call"] for c in calls(env)] == ["set_compute_mode"]
    assert [g["persistence_mode"] for g in backend.read_all()["gpus"]] == [False]      # left alone

    # the two owners at once: refused before any change
    r = run_here(MODULE, dict(args, mode="Default", persistence_mode=True), env=env)
    assert r["failed"] and "persistence_mode is owned by nvidia-persistenced" in r["msg"], r
    assert "nothing changed" in r["msg"] and [c["call"] for c in calls(env)] == ["set_compute_mode"]
