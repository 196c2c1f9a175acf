"""mig_layout on simulated nodes: through real ansible for the main paths, in-process for the many cases."""
import hashlib

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import current_devices
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import MUTATING_CALLS, SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import mig_layout
from tests.support.ansible_run import run_module
from tests.support.modrun import run_main

MODULE = "gpuops.nvidia.mig_layout"
INSTANCE_CALLS = ("create_gpu_instance", "destroy_gpu_instance", "create_compute_instance", "destroy_compute_instance")


def _node(tmp_path, shape, enable=()):
    path = str(tmp_path / "state.json")
    sim = SimulatedBackend(path, shape=shape)
    for index in enable:
        sim.set_mig_mode(index, True)
        if sim.read_gpu(index)["mig_mode_current"] != "Enabled":
            sim.reset_gpu(index)
    sim.clear_call_log()
    return sim, {"GPUOPS_SIMULATED_GPUS": path}


def _digest(sim):
    with open(sim.path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _calls(sim):
    return [e for e in sim.raw_state()["call_log"] if "call" in e]


@pytest.fixture
def inproc(monkeypatch):
    def _run(env, args, check=False, diff=False):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return run_main(mig_layout.main, args, check_mode=check, diff=diff)
    return _run


# ------------------------------------------------------------------------------- through ansible

def test_check_apply_idempotent_diff(tmp_path):
    sim, env = _node(tmp_path, "dgx-a100-40gb", enable=(0, 1))
    args = {"config_name": "all-balanced", "gpus": ["0", "1"]}
    before = _digest(sim)
    check, proc = run_module(MODULE, args, env=env, check=True, diff=True)
    assert check["changed"] is True, proc.stdout
    assert _digest(sim) == before and _calls(sim) == []
    applied = run_module(MODULE, args, env=env, diff=True)[0]
    assert applied["changed"] is True
    for c, a in zip(check["gpus"], applied["gpus"]):
        assert c["operations"] == a["operations"]          # check mode showed exactly what ran
    gpu = applied["gpus"][0]
    assert sorted(d["profile"] for d in gpu["mig_devices"]) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    assert all(d["uuid"].startswith("MIG-") for d in gpu["mig_devices"])
    assert applied["diff"]["before"]["gpu 0"]["mig_devices"] == {}
    assert applied["diff"]["after"]["gpu 0"]["mig_devices"] == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert any(s.startswith("3g.20gb@") for s in applied["diff"]["after"]["gpu 0"]["gpu_instances"])
    n = len(_calls(sim))
    again = run_module(MODULE, args, env=env, diff=True)[0]
    assert again["changed"] is False and len(_calls(sim)) == n
    assert again["diff"] == {"before": {}, "after": {}}


def test_bad_profile_lists_valid_names_and_changes_nothing(tmp_path):
    sim, env = _node(tmp_path, "hgx-h200", enable=(0,))
    before = _digest(sim)
    result = run_module(MODULE, {"layout": [{"devices": [0], "mig_devices": {"1g.10gb": 2}}]}, env=env)[0]
    assert result["failed"] and "unknown MIG profile '1g.10gb'" in result["msg"]
    assert "1g.18gb" in result["msg"] and "1c.3g.71gb" in result["msg"]
    assert _digest(sim) == before


# ------------------------------------------------------------------------------- in-process

def test_two_4g_rejected_with_reason(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h100-80gb", enable=(0,))
    result = inproc(env, {"layout": [{"devices": [0], "mig_devices": {"4g.40gb": 2}}]})
    assert result["failed"] and "at most 1 fits" in result["msg"] and "start 0" in result["msg"]
    assert _calls(sim) == []


def test_mig_mode_off_is_an_error_but_check_mode_plans(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h200")
    result = inproc(env, {"config_name": "all-balanced", "gpus": ["0"]})
    assert result["failed"] and "MIG mode is Disabled" in result["msg"] and "mig_mode" in result["msg"]
    result = inproc(env, {"config_name": "all-balanced", "gpus": ["0"]}, check=True)
    assert not result.get("failed") and result["changed"] and result["gpus"][0]["planned_as_enabled"]
    assert result["gpus"][0]["before"]["mig_mode"] == "Disabled"
    assert _calls(sim) == []


def test_selector_matching_nothing(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h200", enable=(0,))
    result = inproc(env, {"layout": [{"models": ["A100"], "mig_devices": {"1g.18gb": 1}}]})
    assert result["failed"] and "selects no GPU" in result["msg"]
    result = inproc(env, {"config_name": "all-1g", "gpus": ["GPU-nope"]})
    assert result["failed"] and "matches no GPU" in result["msg"]


def test_busy_instance_refused_then_forced(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h200", enable=(0,))
    gi = sim.create_gpu_instance(0, 19, 6)
    ci = sim.create_compute_instance(0, gi, 0)
    sim.add_process(0, 31337, "inference", gi_id=gi, ci_id=ci)
    sim.clear_call_log()
    before = _digest(sim)
    result = inproc(env, {"config_name": "all-7g", "gpus": ["0"]})
    assert result["failed"] and "pid 31337 (inference)" in result["msg"] and "force: true" in result["msg"]
    assert result["busy"][0]["processes"] == [{"pid": 31337, "name": "inference"}]
    assert _digest(sim) == before
    result = inproc(env, {"config_name": "all-7g", "gpus": ["0"], "force": True})
    gpu = result["gpus"][0]
    assert result["changed"] and gpu["busy_destroyed"][0]["processes"][0]["pid"] == 31337
    assert [d["profile"] for d in gpu["mig_devices"]] == ["7g.141gb"]
    assert sim.read_gpu(0)["processes"] == []


def test_layout_change_keeps_in_use_instance(tmp_path, inproc):
    sim, env = _node(tmp_path, "dgx-a100-80gb", enable=(0,))
    inproc(env, {"config_name": "all-balanced", "gpus": ["0"]})
    gpu = sim.read_gpu(0)
    three = [m for m in gpu["mig_devices"] if m["profile"] == "3g.40gb"][0]
    sim.add_process(0, 9, "train", gi_id=three["gi_id"], ci_id=three["ci_id"])
    result = inproc(env, {"layout": [{"devices": [0], "mig_devices": {"3g.40gb": 1, "1g.10gb": 4}}]}, diff=True)
    out = result["gpus"][0]
    assert result["changed"]
    assert three["uuid"] in [d["uuid"] for d in out["mig_devices"]]
    kept_uuids = [c["mig_uuid"] for k in out["kept"] for c in k["compute_instances"]]
    assert three["uuid"] in kept_uuids and len(kept_uuids) == 3     # the 3g and both 1g kept
    assert [d["profile"] for d in out["destroyed"]] == ["2g.20gb", "2g.20gb"]   # only the 2g goes (CI, GI)
    assert current_devices(sim.read_gpu(0)) == {"3g.40gb": 1, "1g.10gb": 4}


def test_migparted_file_unchanged(tmp_path, inproc):
    sim, env = _node(tmp_path, "mixed", enable=(0, 1, 2, 3))
    cfg = tmp_path / "config.yaml"
    cfg.write_text("""version: v1
mig-configs:
  all-1g.10gb:
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4
    - device-filter: ["0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  custom:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1c.3g.40gb": 3
        "4g.40gb": 1
""")
    result = inproc(env, {"config_file": str(cfg), "config_name": "all-1g.10gb"})
    assert result["changed"] and [g["desired"] for g in result["gpus"]] == [{"1g.10gb": 7}] * 4
    result = inproc(env, {"config_file": str(cfg), "config_name": "custom"})
    assert current_devices(sim.read_gpu(0)) == {"1c.3g.40gb": 3, "4g.40gb": 1}
    result = inproc(env, {"config_file": str(cfg)})
    assert result["failed"] and "config_name is required" in result["msg"]
    cfg.write_text("version: v2\nmig-configs: {}\n")
    result = inproc(env, {"config_file": str(cfg), "config_name": "x"})
    assert result["failed"] and "unknown version" in result["msg"]


# ------------------------------------------------------------------------------- faults

TRANSITIONS = [
    ("hgx-h200", None, {"config_name": "all-balanced"}),
    ("dgx-a100-40gb", "all-1g", {"layout": [{"mig_devices": {"1c.3g.20gb": 1, "2c.3g.20gb": 1, "4g.20gb": 1}}]}),
    ("a30-x4", "all-balanced", {"config_name": "all-4g"}),
]


@pytest.mark.parametrize("shape,start,target", TRANSITIONS)
def test_fault_at_each_mutating_call_then_rerun_converges(tmp_path, inproc, shape, start, target):
    """Inject a fault into the 1st, 2nd, ... mutating call of an apply; the re-run always ends in the layout."""
    target = dict(target, gpus=["0"])
    # how many mutating calls a clean apply makes
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    sim, env = _node(probe_dir, shape, enable=(0,))
    if start:
        inproc(env, {"config_name": start, "gpus": ["0"]})
    sim.clear_call_log()
    clean = inproc(env, target)
    assert not clean.get("failed"), clean.get("msg")
    assert clean["changed"]
    want = current_devices(sim.read_gpu(0))
    n_calls = len(_calls(sim))
    assert n_calls >= 2
    for k in range(1, n_calls + 1):
        d = tmp_path / ("k%d" % k)
        d.mkdir()
        sim, env = _node(d, shape, enable=(0,))
        if start:
            inproc(env, {"config_name": start, "gpus": ["0"]})
        sim.inject_fault(k, "UNKNOWN")
        failed = inproc(env, target)
        assert failed["failed"] and "re-run" in failed["msg"]
        rerun = inproc(env, target)
        assert not rerun.get("failed"), rerun.get("msg")
        assert current_devices(sim.read_gpu(0)) == want, k
        third = inproc(env, target)
        assert third["changed"] is False
    assert set(e["call"] for e in _calls(sim)) <= set(INSTANCE_CALLS) <= set(MUTATING_CALLS)


def test_gpus_narrows_the_layout(tmp_path, inproc):
    sim, env = _node(tmp_path, "hgx-h200", enable=(0, 1))
    layout = [{"devices": [0], "mig_devices": {"7g.141gb": 1}}, {"devices": [1], "mig_devices": {"3g.71gb": 2}}]
    result = inproc(env, {"layout": layout, "gpus": ["1"]})
    assert [g["index"] for g in result["gpus"]] == [1]
    assert current_devices(sim.read_gpu(1)) == {"3g.71gb": 2}
    assert current_devices(sim.read_gpu(0)) == {}


def test_a_fault_part_way_fails_in_the_base_with_what_was_carried_out(tmp_path, inproc):
    """A fault is a Failure raised to the module's base (issue 48): its message, the GPUs' results so far and
    ``changed`` as what was carried out before it (nothing at the first call, something at the second)."""
    for k, changed in ((1, False), (2, True)):
        d = tmp_path / ("k%d" % k)
        d.mkdir()
        sim, env = _node(d, "hgx-h200", enable=(0,))
        sim.inject_fault(k, "UNKNOWN")
        failed = inproc(env, {"config_name": "all-balanced", "gpus": ["0"]})
        assert failed["failed"] and failed["msg"].startswith("NVML error ")
        assert failed["msg"].endswith(". Nothing was rolled back; re-run to reconcile from the current state.")
        assert failed["changed"] is changed and isinstance(failed["gpus"], list)
