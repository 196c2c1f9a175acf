"""Two converges on one node never interleave GPU changes: the node lock (plugins/module_utils/node/_node_lock.py).

The runs are real processes started together (the modules run as `python -m ...` with an args file, as ansible
runs them on a node), against one simulated node; the simulator's call_log records the PID of every mutating call.
"""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import module_process_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = "ansible_collections.gpuops.nvidia.plugins.modules."


def _env(state):
    env = module_process_env(GPUOPS_SIMULATED_GPUS=state)
    env.pop("GPUOPS_NODE_LOCK", None)
    env.pop("GPUOPS_NODE_LOCK_TIMEOUT", None)
    return env


def _start(tmp_path, name, module, args, state):
    path = str(tmp_path / ("%s.json" % name))
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    return subprocess.Popen([sys.executable, "-m", PKG + module, path], cwd=str(tmp_path), env=_env(state),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def _result(proc):
    out, err = proc.communicate(timeout=300)
    assert out.strip(), err
    return json.loads(out[out.index("{"):])


def _runs_in_log(sim):
    """The PIDs of the mutating calls in log order, collapsed into runs: [pid_a, pid_b] when not interleaved."""
    runs = []
    for entry in sim.raw_state()["call_log"]:
        if "call" in entry and (not runs or runs[-1] != entry["pid"]):
            runs.append(entry["pid"])
    return runs


def test_two_mig_layout_runs_at_once_do_not_interleave(tmp_path):
    state = str(tmp_path / "node.json")
    sim = SimulatedBackend(state, shape="hgx-h200")          # Hopper: MIG mode applies at once
    for i in range(8):
        sim.set_mig_mode(i, True)
    sim.clear_call_log()
    a = _start(tmp_path, "a", "mig_layout", {"config_name": "all-1g.18gb"}, state)
    b = _start(tmp_path, "b", "mig_layout", {"config_name": "all-balanced"}, state)
    ra, rb = _result(a), _result(b)
    assert not ra.get("failed") and not rb.get("failed"), (ra, rb)
    runs = _runs_in_log(sim)
    assert sorted(runs) == sorted([a.pid, b.pid]), runs         # each run's calls in one block
    # the final state is the layout of whichever ran second, on every GPU, and valid
    last = rb if runs[-1] == b.pid else ra
    want = sorted(d["profile"] for d in last["gpus"][0]["mig_devices"])
    assert want in (["1g.18gb"] * 7, sorted(["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]))
    for gpu in sim.read_all()["gpus"]:
        assert sorted(d["profile"] for d in gpu["mig_devices"]) == want
    # the run that went second planned from what the first left: it reports what it destroyed
    second = rb if runs[-1] == b.pid else ra
    assert second["changed"] is True


def test_mig_mode_and_mig_layout_at_once_do_not_interleave(tmp_path):
    state = str(tmp_path / "node.json")
    sim = SimulatedBackend(state, shape="dgx-a100-40gb")
    sim.clear_call_log()
    a = _start(tmp_path, "a", "mig_mode", {"enabled": True, "allow_reset": True}, state)
    b = _start(tmp_path, "b", "mig_mode", {"config_name": "all-balanced", "allow_reset": True}, state)
    ra, rb = _result(a), _result(b)
    assert not ra.get("failed") and not rb.get("failed"), (ra, rb)
    runs = _runs_in_log(sim)
    assert len(runs) <= 2 and set(runs) <= {a.pid, b.pid}, runs
    assert all(g["mig_mode_current"] == "Enabled" for g in sim.read_all()["gpus"])
    # exactly one run changed the mode (8 SetMigMode + 8 resets); the other found it done
    calls = [e["call"] for e in sim.raw_state()["call_log"] if "call" in e]
    assert calls.count("set_mig_mode") == 8 and calls.count("reset_gpu") == 8
    assert [ra["changed"], rb["changed"]].count(True) == 1


def test_second_run_fails_clearly_after_the_timeout_naming_the_holder(tmp_path):
    state = str(tmp_path / "node.json")
    sim = SimulatedBackend(state, shape="hgx-h200")
    sim.clear_call_log()
    before = open(state, "rb").read()
    holder = _node_lock.NodeLock(path=state + ".node.lock", timeout=0, owner="test-holder").acquire()
    try:
        started = time.time()
        proc = _start(tmp_path, "b", "mig_mode", {"enabled": True, "lock_timeout": 1}, state)
        res = _result(proc)
        elapsed = time.time() - started
    finally:
        holder.release()
    assert res["failed"] and res["changed"] is False
    assert "another gpuops run holds the node lock" in res["msg"] and state + ".node.lock" in res["msg"]
    assert "PID %d" % os.getpid() in res["msg"] and "test-holder" in res["msg"]
    assert "waited 1 s" in res["msg"] and "Nothing was read or changed" in res["msg"]
    assert elapsed >= 1
    assert open(state, "rb").read() == before                  # not even a read-modify-write


def test_waiting_run_proceeds_when_the_holder_releases(tmp_path):
    state = str(tmp_path / "node.json")
    sim = SimulatedBackend(state, shape="hgx-h200")
    sim.clear_call_log()
    holder = _node_lock.NodeLock(path=state + ".node.lock", timeout=0, owner="test-holder").acquire()
    timer = threading.Timer(1.0, holder.release)
    timer.start()
    try:
        res = _result(_start(tmp_path, "b", "compute_mode", {"mode": "Prohibited", "gpus": ["0"]}, state))
    finally:
        timer.cancel()
        holder.release()
    assert res["changed"] is True, res
    assert sim.read_gpu(0)["compute_mode"] == "Prohibited"


def test_env_timeout_and_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_NODE_LOCK", str(tmp_path / "sub" / "x.lock"))
    monkeypatch.setenv("GPUOPS_NODE_LOCK_TIMEOUT", "0")
    with _node_lock.NodeLock(owner="one") as first:
        assert first.path == str(tmp_path / "sub" / "x.lock")
        with pytest.raises(_node_lock.NodeLockError, match="holds the node lock .*one"):
            _node_lock.NodeLock(owner="two").acquire()
    with _node_lock.NodeLock(owner="three"):              # released: free again
        pass
    monkeypatch.setenv("GPUOPS_NODE_LOCK_TIMEOUT", "soon")
    with pytest.raises(_node_lock.NodeLockError, match="not a whole number"):
        _node_lock.NodeLock()
    monkeypatch.delenv("GPUOPS_NODE_LOCK")
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", "/x/state.json")
    assert _node_lock.lock_path() == "/x/state.json.node.lock"
    monkeypatch.delenv("GPUOPS_SIMULATED_GPUS")
    assert _node_lock.lock_path() == "/run/gpuops/node.lock"
    with pytest.raises(_node_lock.NodeLockError,
                       match="lock_timeout must be a whole number of seconds from 0 to 86400"):
        _node_lock.NodeLock(timeout=-1, path=str(tmp_path / "y.lock"))


def test_killed_holder_leaves_no_stale_lock(tmp_path):
    path = str(tmp_path / "k.lock")
    code = ("import sys,time; sys.path.insert(0, %r); from ansible_collections.gpuops.nvidia.plugins.module_utils.node "
            "import _node_lock; _node_lock.NodeLock(path=%r, timeout=0, owner='victim').acquire(); print('held', "
            "flush=True); time.sleep(60)" % (os.path.join(ROOT, ".collections"), path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, universal_newlines=True)
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(_node_lock.NodeLockError, match="victim"):
        _node_lock.NodeLock(path=path, timeout=0).acquire()
    proc.kill()
    proc.wait()
    with _node_lock.NodeLock(path=path, timeout=5) as lock:
        assert lock.fd is not None


def test_lock_directory_made_by_another_run_at_the_same_moment(tmp_path, monkeypatch):
    # two nodes' modules sharing a state directory start at once: both see no directory, one creates it first;
    # the other must take the lock, not fail with "File exists" (seen in a 10-node simulated fleet's converge)
    directory = tmp_path / "state"
    directory.mkdir()
    real_isdir, seen = os.path.isdir, []

    def isdir(path):  # the lock's own look finds no directory; it is there by the time makedirs looks
        if path == str(directory) and not seen:
            seen.append(path)
            return False
        return real_isdir(path)

    monkeypatch.setattr(_node_lock.os.path, "isdir", isdir)
    with _node_lock.NodeLock(path=str(directory / "node-000.json.node.lock"), timeout=0, owner="late") as lock:
        assert lock.fd is not None and lock.waited < 1
    assert seen == [str(directory)]
