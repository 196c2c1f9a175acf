"""SIGKILL at 20 random points of a whole site.yml converge, then a re-run converges.

The small fleet of tests/reliability/site_env.py (two single-H200 nodes, the fake API server, real helm and
containerd) is converged from scratch by ansible-playbook, started in its own process group, and killed at a
random point: when the run starts its n-th task (n uniform over the task starts of a clean converge, counted by
the test-only callback tests/support/callback_plugins/task_progress.py, so the points do not depend on how loaded
the machine is), plus a random 0-1.5 s, so kills land inside tasks (a module, helm) as well as between them.
Seeded, so a failure can be replayed. Kills pick at random between two ways a controller dies:

- the whole process group (ansible-playbook, its workers and the modules they run, helm included) at once, as when
  the controller machine or its container goes away;
- ansible-playbook alone, as when AWX cancels a job or the OOM killer picks it: the worker that was running a
  module lets that module finish, then finds its parent gone. The re-run starts when they are gone.

After each kill: no file is corrupt (site_env.check_integrity: state files load, files whole, no cordon without our
mark), and a re-run must succeed and end exactly where a clean converge ends (GPUs, files, labels, no node
cordoned, the device plugin's objects, a deployed helm release). Each kill is its own test (pytest-xdist spreads
them over the cores); the kills must also land all over the converge: at least half of those that run after the
first mutating step and before the last. Each kill records where it landed in the session's shared directory, and
the test that records the last of them checks that (so the check runs only when all of them run). `make test` runs
every fourth kill of the series and the last (6 of 20); GPUOPS_RELIABILITY=full runs all 20.
"""
import json
import os
import random
import signal
import subprocess
import time

import pytest

from tests.integration.site_helpers import HELM
from tests.reliability.site_env import SmallSite, check_integrity, declared, differences, sampled, session_lock
from tests.support.ansible_run import ROOT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

KILLS = 20      # the seeded series; make test runs every fourth of them, GPUOPS_RELIABILITY=full all (site_env.sampled)
RUN_KILLS = [k for k in range(KILLS) if sampled(k, KILLS, first=0)]
INSIDE = len(RUN_KILLS) // 2    # of the kills that run, at least this many between the first and last mutating step
SEED = 20261122


def _alive_in_group(pgid):
    """PIDs of the live (not zombie) processes of a process group."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def _kill_at(site, task, delay, whole_group):
    cmd, env = site.command()
    with open(str(site.tmp / "killed-run.out"), "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while len(site.tasks_started()) < task and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(delay)
        if proc.poll() is not None:
            return "finished before the kill"
        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 120
        while _alive_in_group(proc.pid):
            assert time.monotonic() < deadline, "processes of the killed run still alive after 120 s"
            time.sleep(0.2)
    started = site.tasks_started()
    return "killed at task %d: %s" % (len(started), started[-1])


def _kill_points(tasks):
    rng = random.Random(SEED)
    return [(rng.randint(1, tasks), rng.uniform(0, 1.5), rng.random() < 0.5) for _k in range(KILLS)]


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


@pytest.mark.parametrize("k", RUN_KILLS)
def test_sigkill_at_a_random_point_then_rerun_converges(k, reference, session_dir, tmp_path):
    want = reference["state"]
    task_starts = reference["tasks"]
    task, delay, whole_group = _kill_points(task_starts)[k]
    site = SmallSite(tmp_path / "fleet")
    try:
        outcome = _kill_at(site, task, delay, whole_group)
        done = site.progress()
        check_integrity(site, want)
        again = site.run()
        assert again.rc == 0, (k, task, whole_group, done, again)
        assert not differences(declared(site), want), (k, task, whole_group, done, differences(declared(site), want))
    finally:
        site.close()
    inside = _inside(done, reference["steps"])
    print("kill %02d at task %d of %d + %.2f s (%s): %s; steps done %s; inside the converge: %s" % (
        k, task, task_starts, delay, "group" if whole_group else "parent", outcome, done, inside))
    everything = _record(session_dir, {"k": k, "inside": inside, "outcome": outcome})
    if everything is not None:
        landed = sum(1 for entry in everything if entry["inside"])
        assert landed >= INSIDE, ("only %d of %d kills landed between the first and the last mutating step"
                                  % (landed, len(RUN_KILLS)), sorted(everything, key=lambda e: e["k"]))
