"""SIGKILL at 20 seeded points of a whole site.yml converge, then a re-run converges.

The small fleet of tests/reliability/site_env.py (two single-H200 nodes, the fake API server, real helm and
containerd) is converged from scratch by ansible-playbook and killed at a point the test chooses (seeded, so a
failure can be replayed), of one of three kinds in turn, each counted in a clean converge:

- the start of the run's n-th task: ansible-playbook stops itself there (the test-only callback
  tests/support/callback_plugins/task_progress.py), between two tasks;
- right after a node's n-th NVML call: the module making it stops itself once the call is saved (the simulator's
  stop hook, SimulatedBackend.stop_after), inside mig_mode, mig_layout or compute_mode;
- the n-th write to the Kubernetes API (lease renewals not counted): the fake API server applies it and holds its
  answer, so the kill lands inside a Kubernetes module or inside helm, after the write and before its client knows.

The run stops or waits at the point however loaded the machine is, and the test kills it there; each kill must land
exactly where chosen (task starts, the node's call log, the held write's place among the writes). Kills pick at
random between two ways a controller dies:

- the whole run at once: ansible-playbook, its workers (each in a session of its own: ansible calls setsid()) and
  the modules and helm they run, as when the controller machine or its container goes away;
- ansible-playbook alone, as when AWX cancels a job or the OOM killer picks it: the worker that was running a
  module lets that module finish (a stopped one is resumed, a held write answered), then finds its parent gone. The
  re-run starts when they are gone.

After each kill: no file is corrupt (site_env.check_integrity: state files load, files whole, no cordon without our
mark), and a re-run must succeed and end exactly where a clean converge ends (GPUs, files, labels, no node
cordoned, the device plugin's objects, a deployed helm release). Each kill is its own test (pytest-xdist spreads
them over the cores); the kills must also land all over the converge: at least half of those that run after the
first mutating step and before the last. Each kill records where it landed in the session's shared directory, and
the test that records the last of them checks that (so the check runs only when all of them run). `make test` runs
every eighth kill of the series and the last (4 of 20: 0, 8, 16, 19, all three kinds);
GPUOPS_RELIABILITY=full runs all 20.
"""
import json
import os
import random
import signal
import subprocess

import pytest

from tests.integration.site_helpers import HELM
from tests.reliability.site_env import (NODES, SmallSite, check_integrity, declared, differences, sampled,
                                        session_lock)
from tests.support.ansible_run import ROOT
from tests.support.stop_points import BOUND_S, descendants, wait_child_stopped, wait_gone, wait_stopped

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

KILLS = 20      # the seeded series; make test runs every eighth and the last, GPUOPS_RELIABILITY=full all (site_env.sampled)
RUN_KILLS = [k for k in range(KILLS) if sampled(k, KILLS, first=0)]
INSIDE = len(RUN_KILLS) // 2    # of the kills that run, at least this many between the first and last mutating step
SEED = 20261122
KINDS = ("task", "nvml", "api")     # kill k stops at a point of kind KINDS[k % 3]


def _arm(site, env, kind, where):
    """Make the run stop (or wait) at the chosen point."""
    if kind == "task":
        env["GPUOPS_TEST_STOP_AT_TASK"] = str(where)
    elif kind == "nvml":
        site.backend(where[0]).stop_after(where[1])
    else:
        site.api.hold_nth_write(where)


def _reach(site, proc, kind, where):
    """Wait (bounded) until the run is at its point: True; False when it ended first."""
    def running():
        return proc.poll() is None
    if kind == "task":
        return wait_child_stopped(proc)
    if kind == "nvml":
        backend = site.backend(where[0])

        def stopped_caller():
            log = backend.raw_state()["call_log"]
            return log[where[1] - 1]["pid"] if len(log) >= where[1] else None
        return wait_stopped(stopped_caller, running) is not None
    return site.api.wait_held(BOUND_S, running)


def _landed(site, kind, where):
    """Where the run is, in the point's own count: task starts, the node's NVML calls, the held write's number."""
    if kind == "task":
        return len(site.tasks_started())
    if kind == "nvml":
        return len(site.backend(where[0]).raw_state()["call_log"])
    held = [i + 1 for i, r in enumerate(site.api.writes(dry_run=False, counted=True)) if r.get("held")]
    return held[0] if len(held) == 1 else held


def _kill_at(site, kind, where, whole_group):
    """Run site.yml, kill it at its point; returns how many of the point's kind it had made when killed (None: the
    run ended first)."""
    cmd, env = site.command()
    env = dict(env)
    _arm(site, env, kind, where)
    with open(str(site.tmp / "killed-run.out"), "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if not _reach(site, proc, kind, where):
                return None
            landed = _landed(site, kind, where)
            if kind != "task":
                # ansible-playbook starts nothing more while the test takes the list of its processes
                os.kill(proc.pid, signal.SIGSTOP)
                assert wait_child_stopped(proc)
            tree = descendants(proc.pid)
            if whole_group:
                for group in {proc.pid} | set(tree.values()):
                    try:
                        os.killpg(group, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            else:
                proc.send_signal(signal.SIGKILL)
                for pid in tree:
                    os.kill(pid, signal.SIGCONT)        # the stopped module goes on, as an unstopped one would
        finally:
            site.api.release_held()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        wait_gone(tree)
    return landed


def _kill_points(reference):
    """(kind, where, whole_group) for each of the KILLS: where is a task number, (node, NVML call number) or an API
    write number of a clean converge; the kills of one kind take one point each from equal spans of its range, so
    they spread over the whole converge."""
    rng = random.Random(SEED)
    steps = reference["steps"]
    ranges = {"task": list(range(1, reference["tasks"] + 1)),
              "nvml": [(node, n) for node in NODES for n in range(1, steps[node] + 1)],
              "api": list(range(1, steps["api"] + 1))}
    out = []
    for k in range(KILLS):
        kind = KINDS[k % len(KINDS)]
        points = ranges[kind]
        of_kind = len(range(k % len(KINDS), KILLS, len(KINDS)))
        span = len(points) / float(of_kind)
        index = int((k // len(KINDS) + rng.random()) * span)
        out.append((kind, points[min(index, len(points) - 1)], rng.random() < 0.5))
    return out


def _inside(done, total):
    """The run had made some mutating steps, but not all of them."""
    made = sum(done.values())
    return 0 < made < sum(total.values())


def _record(session_dir, entry):
    """Add this kill's outcome to the session's list; returns the list when this one completed it, else None."""
    with session_lock(session_dir, "site-kills"):
        path = session_dir / "site-kills.json"
        seen = json.loads(path.read_text()) if path.exists() else []
        seen.append(entry)
        path.write_text(json.dumps(seen))
        return seen if len(seen) == len(RUN_KILLS) else None


def test_kill_points_spread_over_each_kind():
    reference = {"tasks": 107, "steps": {"api": 23, NODES[0]: 9, NODES[1]: 1}}
    points = _kill_points(reference)
    ranges = {"task": list(range(1, 108)), "api": list(range(1, 24)),
              "nvml": [(NODES[0], n) for n in range(1, 10)] + [(NODES[1], 1)]}
    for kind, values in ranges.items():
        mine = [values.index(where) for k, where, dummy in points if k == kind]
        assert mine == sorted(set(mine)), (kind, mine)                   # distinct, in order over the converge
        assert mine[0] < len(values) // 5 and mine[-1] >= len(values) * 4 // 5, (kind, mine)     # start to end
    assert (NODES[1], 1) in [where for dummy, where, dummy2 in points]     # the MPS node's NVML call too
    assert {points[k][0] for k in RUN_KILLS} == set(KINDS)                 # make test's sample: every kind
    assert {whole for dummy, dummy2, whole in points} == {True, False}


@pytest.mark.parametrize("k", RUN_KILLS)
def test_sigkill_at_a_chosen_point_then_rerun_converges(k, reference, session_dir, tmp_path, module_server_env):
    want = reference["state"]
    kind, where, whole_group = _kill_points(reference)[k]
    site = SmallSite(tmp_path / "fleet")
    try:
        landed = _kill_at(site, kind, where, whole_group)
        assert landed is not None, (k, kind, where, "the run ended before its kill point")
        assert landed == (where[1] if kind == "nvml" else where), (k, kind, where, "the kill landed at", landed)
        done = site.progress()
        check_integrity(site, want)
        # the re-run's module processes are not what this test asserts about: from the session's warm interpreter
        # (tests/conftest.py), as the other site tests' runs; the killed run above started each in its own
        site.use_module_server(module_server_env)
        again = site.run()
        assert again.rc == 0, (k, kind, where, whole_group, done, again)
        assert not differences(declared(site), want), (k, kind, where, whole_group, done,
                                                       differences(declared(site), want))
    finally:
        site.close()
    inside = _inside(done, reference["steps"])
    print("kill %02d at %s %s (%s): steps done %s; inside the converge: %s" % (
        k, kind, where, "whole run" if whole_group else "parent", done, inside))
    everything = _record(session_dir, {"k": k, "inside": inside, "kind": kind, "where": where})
    if everything is not None:
        landed = sum(1 for entry in everything if entry["inside"])
        assert landed >= INSIDE, ("only %d of %d kills landed between the first and the last mutating step"
                                  % (landed, len(RUN_KILLS)), sorted(everything, key=lambda e: e["k"]))
