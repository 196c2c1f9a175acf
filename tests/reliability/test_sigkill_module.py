"""SIGKILL at random points of a mig_layout run, then a re-run converges (module level; the site.yml-level kill test
is still to do). The module runs as its own process (`python -m`, as ansible runs it on a node) on a simulated
8 x A100 node and is killed after a random delay within its ~1 s of work; then the state file must still load,
the node lock must be free (the kernel drops a killed holder's flock), a re-run must reach the declared layout and
a third run must change nothing."""
import json
import os
import random
import signal
import subprocess
import sys
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_layouts import named_layout_for
from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_plan import current_devices
from ansible_collections.gpuops.nvidia.plugins.module_utils._simulator import SimulatedBackend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = 20
# all-1g -> all-balanced on an A100-40GB: per GPU 5 CIs + 5 GIs destroyed, 2 GIs + 2 CIs created
FULL_PLAN_CALLS = 8 * 14


def _start(tmp_path, state, args):
    path = str(tmp_path / "args.json")
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections"), GPUOPS_SIMULATED_GPUS=state)
    env.pop("GPUOPS_NODE_LOCK", None)
    return subprocess.Popen([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules.mig_layout",
                             path], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def _run(tmp_path, state, args):
    out, err = _start(tmp_path, state, args).communicate(timeout=120)
    assert out.strip(), err
    return json.loads(out[out.index("{"):])


def test_sigkill_at_random_points_then_rerun_converges(tmp_path):
    rng = random.Random(20261122)
    args = {"config_name": "all-balanced", "lock_timeout": 5}
    killed_mid_plan = 0
    for k in range(KILLS):
        d = tmp_path / ("k%02d" % k)
        d.mkdir()
        state = str(d / "state.json")
        sim = SimulatedBackend(state, shape="dgx-a100-40gb")
        for index in range(8):
            sim.set_mig_mode(index, True)
            sim.reset_gpu(index)
        # start from a different layout so the run destroys as well as creates
        first = _run(d, state, {"config_name": "all-1g"})
        assert not first.get("failed"), first
        sim.clear_call_log()
        proc = _start(d, state, args)
        time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        calls = [e for e in sim.raw_state()["call_log"] if "call" in e]       # the state file still loads
        killed_mid_plan += 0 < len(calls) < FULL_PLAN_CALLS
        again = _run(d, state, args)
        assert not again.get("failed"), (k, again.get("msg"))
        for gpu in sim.read_all()["gpus"]:
            want = named_layout_for(gpu, "all-balanced")["mig_devices"]
            assert dict(current_devices(gpu)) == want, (k, gpu["index"])
        assert _run(d, state, args)["changed"] is False
    assert killed_mid_plan >= 5, "too few kills landed inside the plan: %d" % killed_mid_plan
