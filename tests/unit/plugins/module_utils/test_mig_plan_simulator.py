"""The planner against the collection's own simulator (the same calls the modules make)."""
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import execute_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import (
    MigBusyError,
    current_devices,
    layout_view,
    plan_gpu,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

SHAPES = {"A100-SXM4-40GB": "dgx-a100-40gb", "A100-SXM4-80GB": "dgx-a100-80gb", "A30": "a30-x4",
          "H100-80GB": "hgx-h100-80gb", "H200": "hgx-h200", "B200": "hgx-b200", "B300": "hgx-b300",
          "GB200": "gb200-nvl", "GH200": "gh200", "H100-NVL": "h100-nvl-x2", "RTX-PRO-6000": "rtx-pro-6000-x8"}
EXAMPLES = int(os.environ.get("GPUOPS_PBT_EXAMPLES", "100"))
# the simulators' folder, made by the first simulator a test of this process makes, removed after this file's tests:
# made at import, every pytest-xdist worker that collects the file made one and only the one that ran it removed it
_BASE = []


def teardown_module(module):
    while _BASE:
        shutil.rmtree(_BASE.pop(), ignore_errors=True)


def fresh_sim(shape):
    if not _BASE:
        _BASE.append(tempfile.mkdtemp(prefix="gpuops-migsim-"))
    d = tempfile.mkdtemp(dir=_BASE[0])
    sim = SimulatedBackend(os.path.join(d, "state.json"), shape=shape)
    sim.set_mig_mode(0, True)
    if sim.read_gpu(0)["mig_mode_current"] != "Enabled":
        sim.reset_gpu(0)
    assert sim.read_gpu(0)["mig_mode_current"] == "Enabled"
    return sim


@st.composite
def sim_scenario(draw):
    model = draw(st.sampled_from(sorted(SHAPES)))
    sim = fresh_sim(SHAPES[model])
    gpu = sim.read_gpu(0)
    profs = sorted(gpu["gi_profiles"], key=lambda p: p["id"])
    pid = 100
    for _attempt in range(draw(st.integers(0, 6))):
        prof = draw(st.sampled_from(profs))
        pl = draw(st.sampled_from(prof["placements"]))
        try:
            gi_id = sim.create_gpu_instance(0, prof["id"], pl["start"])
        except NvmlError:
            continue
        for _attempt in range(draw(st.integers(0, 3))):
            ci = draw(st.sampled_from(prof["ci_profiles"]))
            try:
                ci_id = sim.create_compute_instance(0, gi_id, ci["id"])
            except NvmlError:
                continue
            if draw(st.integers(0, 4)) == 0:
                pid += 1
                sim.add_process(0, pid, "train", gi_id=gi_id, ci_id=ci_id)
    # target: another random reachable layout on the same model (built on a scratch simulator)
    scratch = fresh_sim(SHAPES[model])
    for _attempt in range(draw(st.integers(0, 6))):
        prof = draw(st.sampled_from(profs))
        pl = draw(st.sampled_from(prof["placements"]))
        try:
            gi_id = scratch.create_gpu_instance(0, prof["id"], pl["start"])
            scratch.create_compute_instance(0, gi_id, draw(st.sampled_from(prof["ci_profiles"]))["id"])
        except NvmlError:
            continue
    target = current_devices(scratch.read_gpu(0))
    sim.clear_call_log()
    return model, sim, target


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sim_scenario())
def test_plan_applied_to_simulator_reaches_target(sc):
    model, sim, target = sc
    gpu = sim.read_gpu(0)
    spec = {"mig_enabled": True, "mig_devices": target}
    busy_before = {(p["gi_id"], p["ci_id"]) for p in gpu["processes"]}
    try:
        plan = plan_gpu(gpu, spec)
    except MigBusyError:
        assert sim.raw_state()["call_log"] == []      # refusing touched nothing
        return
    execute_plan(sim, 0, plan["operations"])
    log = sim.raw_state()["call_log"]
    assert not [e for e in log if e.get("error")], log
    assert len(log) == len(plan["operations"])
    after = sim.read_gpu(0)
    assert current_devices(after) == target
    assert all(gi["compute_instances"] for gi in after["gpu_instances"])
    for gi_id, ci_id in busy_before:
        assert any(m["gi_id"] == gi_id and m["ci_id"] == ci_id for m in after["mig_devices"])
    kept_uuids = {c["mig_uuid"] for k in plan["kept"] for c in k["compute_instances"]}
    assert kept_uuids <= {m["uuid"] for m in after["mig_devices"]}
    assert plan["after"]["gpu_instances"] == layout_view(after)["gpu_instances"]
    assert plan_gpu(after, spec)["operations"] == []
