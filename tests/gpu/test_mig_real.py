"""On a real GPU host (GPUOPS_REAL_GPU=1), read-only: mig_mode and mig_layout declaring the current state report
no change and make no mutating NVML call; check mode with a different declared state plans without touching.

The NVML backend's read-only guard (GPUOPS_NVML_READ_ONLY=1) refuses any mutating call and the call log
(GPUOPS_NVML_CALL_LOG) records every attempt, so a module that tried to change something fails loudly and the
log proves it did not. Writes a summary to $GPUOPS_REPORT_DIR when set. CI skips it (no GPU)."""
import json
import os

import pytest

from tests.support.ansible_run import run_module

pytestmark = pytest.mark.gpu


@pytest.fixture
def guarded(tmp_path):
    log = tmp_path / "nvml_calls.jsonl"
    env = {"GPUOPS_NVML_READ_ONLY": "1", "GPUOPS_NVML_CALL_LOG": str(log)}

    def calls():
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return env, calls


def _report(name, data):
    directory = os.environ.get("GPUOPS_REPORT_DIR")
    if directory:
        with open(os.path.join(directory, "mig_real_%s.json" % name), "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)


def _current(env):
    result = run_module("gpuops.nvidia.gpu_info", env=env, check=True)[0]
    assert not result.get("failed"), result.get("msg")
    return result["gpus"]


def test_declaring_current_state_changes_nothing(guarded):
    env, calls = guarded
    gpus = _current(env)
    mig_gpus = [g for g in gpus if g["mig_supported"]]
    if not mig_gpus:
        pytest.skip("no MIG-capable GPU here")
    enabled = mig_gpus[0]["mig_mode_current"] == "Enabled"
    sel = [str(mig_gpus[0]["index"])]
    mode = run_module("gpuops.nvidia.mig_mode", {"gpus": sel, "enabled": enabled}, env=env, diff=True)[0]
    assert not mode.get("failed"), mode.get("msg")
    assert mode["changed"] is False and mode["gpus"][0]["actions"] == []
    if enabled:
        devices = {}
        for dev in mig_gpus[0]["mig_devices"]:
            devices[dev["profile"]] = devices.get(dev["profile"], 0) + 1
        layout_args = {"gpus": sel, "layout": [{"devices": [mig_gpus[0]["index"]], "mig_devices": devices}]}
    else:
        layout_args = {"gpus": sel, "config_name": "all-disabled"}
    layout = run_module("gpuops.nvidia.mig_layout", layout_args, env=env, diff=True)[0]
    assert not layout.get("failed"), layout.get("msg")
    assert layout["changed"] is False
    assert calls() == []
    _report("declared_current", {"mig_mode": mode, "mig_layout": layout, "nvml_mutating_calls": calls()})


def test_check_mode_with_a_different_state_plans_without_touching(guarded):
    env, calls = guarded
    gpus = _current(env)
    mig_gpus = [g for g in gpus if g["mig_supported"]]
    if not mig_gpus:
        pytest.skip("no MIG-capable GPU here")
    gpu = mig_gpus[0]
    sel = [str(gpu["index"])]
    want = gpu["mig_mode_current"] != "Enabled"
    mode = run_module("gpuops.nvidia.mig_mode", {"gpus": sel, "enabled": want}, env=env, check=True, diff=True)[0]
    assert not mode.get("failed"), mode.get("msg")
    assert mode["changed"] is True and "set_mig_mode" in mode["gpus"][0]["actions"]
    if gpu["architecture"] != "ampere":
        assert "reset_gpu" not in mode["gpus"][0]["actions"]
    layout = run_module("gpuops.nvidia.mig_layout", {"gpus": sel, "config_name": "all-balanced"}, env=env,
                        check=True, diff=True)[0]
    assert not layout.get("failed"), layout.get("msg")
    plan = layout["gpus"][0]
    assert layout["changed"] is True and plan["operations"]
    created = sorted(c["profile"] for c in plan["created"] if c["kind"] == "gpu_instance")
    assert len(created) == 4 and all(c["profile"] in [p["name"] for p in gpu["gi_profiles"]]
                                     for c in plan["created"] if c["kind"] == "gpu_instance")
    assert calls() == []
    after = _current(env)
    assert [(g["mig_mode_current"], g["mig_mode_pending"], len(g["gpu_instances"])) for g in after] == \
        [(g["mig_mode_current"], g["mig_mode_pending"], len(g["gpu_instances"])) for g in gpus]
    _report("check_mode_plan", {"mig_mode": mode, "mig_layout": layout, "nvml_mutating_calls": calls()})
