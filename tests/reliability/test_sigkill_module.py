"""SIGKILL at seeded points of a mig_layout run, then a re-run converges (module level; the site.yml-level kill test is
tests/reliability/test_sigkill_site.py). The module runs as its own process (`python -m`, as ansible runs it on a
node) on a simulated 8 x A100 node. Each kill lands right after the N-th of the plan's NVML calls, N chosen by the
test (seeded, spread over the whole plan): the simulator's stop hook (SimulatedBackend.stop_after) makes the module
stop itself once that call is saved, and the test SIGKILLs it there, however loaded the machine is. The call log must
then show exactly N calls; the state file must still load, the node lock must be free (the kernel drops a killed
holder's flock), a re-run must reach the declared layout and a third run must change nothing."""
import json
import random
import shutil
import signal
import subprocess
import sys

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import named_layout_for
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import current_devices
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import module_process_env
from tests.support.stop_points import wait_child_stopped

KILLS = 20
# all-1g -> all-balanced on an A100-40GB: per GPU 5 CIs + 5 GIs destroyed, 2 GIs + 2 CIs created
FULL_PLAN_CALLS = 8 * 14


def _start(tmp_path, state, args):
    path = str(tmp_path / "args.json")
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    env = module_process_env(GPUOPS_SIMULATED_GPUS=state)
    env.pop("GPUOPS_NODE_LOCK", None)
    return subprocess.Popen([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules.mig_layout",
                             path], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def _run(tmp_path, state, args):
    out, err = _start(tmp_path, state, args).communicate(timeout=120)
    assert out.strip(), err
    return json.loads(out[out.index("{"):])


def kill_points(seed=20261122):
    """KILLS call numbers N, 0 < N < FULL_PLAN_CALLS: one drawn from each of KILLS equal spans of the plan, so the
    kills cover the destroys at its start, the creates at its end and everything between."""
    rng = random.Random(seed)
    span = (FULL_PLAN_CALLS - 1) / float(KILLS)
    return [1 + int(k * span) + rng.randrange(max(1, int(span))) for k in range(KILLS)]


def test_kill_points_cover_the_plan():
    points = kill_points()
    assert len(set(points)) == KILLS and all(0 < n < FULL_PLAN_CALLS for n in points)
    assert min(points) <= FULL_PLAN_CALLS // 10 and max(points) >= FULL_PLAN_CALLS * 9 // 10


def test_sigkill_at_chosen_calls_then_rerun_converges(tmp_path):
    args = {"config_name": "all-balanced", "lock_timeout": 5}
    # The start state, made once: MIG on, then a different layout (all-1g) so the run destroys as well as creates.
    # Every kill starts from a copy of this state file (a module run is most of this test's time).
    start = tmp_path / "start"
    start.mkdir()
    start_state = str(start / "state.json")
    sim = SimulatedBackend(start_state, shape="dgx-a100-40gb")
    for index in range(8):
        sim.set_mig_mode(index, True)
        sim.reset_gpu(index)
    first = _run(start, start_state, {"config_name": "all-1g"})
    assert not first.get("failed"), first
    sim.clear_call_log()
    for k, calls in enumerate(kill_points()):
        d = tmp_path / ("k%02d" % k)
        d.mkdir()
        state = str(d / "state.json")
        shutil.copyfile(start_state, state)
        sim = SimulatedBackend(state)
        assert sim.raw_state()["call_log"] == [] and all(
            dict(current_devices(gpu)) == named_layout_for(gpu, "all-1g")["mig_devices"]
            for gpu in sim.read_all()["gpus"]), k
        sim.stop_after(calls)
        proc = _start(d, state, args)
        stopped = wait_child_stopped(proc)
        if stopped:
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        assert stopped, ("kill %d: the run ended before NVML call %d" % (k, calls), proc.returncode, out, err)
        log = sim.raw_state()["call_log"]                # the state file still loads
        assert len(log) == calls and all(e["pid"] == proc.pid and "error" not in e for e in log), (k, calls, log)
        again = _run(d, state, args)
        assert not again.get("failed"), (k, calls, again.get("msg"))
        for gpu in sim.read_all()["gpus"]:
            want = named_layout_for(gpu, "all-balanced")["mig_devices"]
            assert dict(current_devices(gpu)) == want, (k, calls, gpu["index"])
        assert _run(d, state, args)["changed"] is False, (k, calls)
