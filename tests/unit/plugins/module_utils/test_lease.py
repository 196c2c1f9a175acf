"""The cluster lock (plugins/module_utils/kube/_lease.py): the pure rules, then the protocol against the fake API server
(real HTTP, the real kubernetes client's configuration) with an injected clock, then the /proc owner helpers on
real processes."""
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _lease as L

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def test_times_round_trip_as_microtime():
    text = L.format_time(1767323045.123456)
    assert text == "2026-01-02T03:04:05.123456Z"
    assert abs(L.parse_time(text) - 1767323045.123456) < 1e-6
    assert L.parse_time("2026-01-02T04:04:05+01:00") == 1767323045
    assert L.parse_time("yesterday") is None and L.parse_time(None) is None


def _view(holder="a", renew=1000.0, duration=10, transitions=0):
    return {"holder": holder, "lease_duration": duration, "acquire_time": L.format_time(renew),
            "renew_time": L.format_time(renew), "transitions": transitions, "converged": None, "arrivals": []}


def test_expiry_is_measured_on_the_waiters_clock_unless_the_renewal_is_long_past():
    lease = _view(renew=1000.0, duration=10)
    # the holder's clock may be off: 9 s after first seeing the record it is still held, 10 s after it is not
    assert not L.expired(lease, observed_since=50.0, mono=59.0, wall=1005.0)
    assert L.expired(lease, observed_since=50.0, mono=60.0, wall=1005.0)
    # a record renewed more than two durations ago (a run that died long before) is free at first sight
    assert L.expired(lease, observed_since=50.0, mono=50.0, wall=1020.5)
    assert not L.expired(lease, observed_since=50.0, mono=50.0, wall=1019.0)


def test_observer_restarts_when_the_holder_renews():
    obs = L.Observer()
    lease = _view(renew=1000.0)
    assert obs.seen(lease, 5.0) == 5.0 and obs.seen(lease, 9.0) == 5.0
    assert obs.seen(_view(renew=1003.0), 9.0) == 9.0


@pytest.mark.parametrize("lease,expired,plan", [
    (None, False, "create"),
    (_view(holder="me"), False, "hold"),
    (_view(holder=""), False, "take"),
    (_view(holder="other"), True, "take"),
    (_view(holder="other"), False, "wait"),
])
def test_plan_acquire(lease, expired, plan):
    assert L.plan_acquire(lease, "me", expired) == plan


def test_held_spec_counts_transitions_when_the_holder_changes():
    assert L.held_spec(None, "me", 15, 1000.0)["leaseTransitions"] == 0
    taken = L.held_spec(_view(holder="other", transitions=3), "me", 15, 2000.0)
    assert taken["leaseTransitions"] == 4 and taken["acquireTime"] == L.format_time(2000.0)
    kept = L.held_spec(_view(holder="me", renew=1000.0, transitions=3), "me", 15, 2000.0)
    assert kept["leaseTransitions"] == 3 and kept["acquireTime"] == L.format_time(1000.0)
    assert kept["renewTime"] == L.format_time(2000.0) and kept["leaseDurationSeconds"] == 15


def test_arrivals_keep_the_newest_runs():
    arrivals = []
    for run in range(10):
        arrivals = L.add_arrival(arrivals, "r%d" % run, "s1")
    arrivals = L.add_arrival(L.add_arrival(arrivals, "r9", "s2"), "r9", "s2")
    assert len(arrivals) == L.KEEP_RUNS and arrivals[0][0] == "r2"
    assert L.arrived(arrivals, "r9") == ["s1", "s2"] and L.arrived(arrivals, "r0") == []


# ---- the protocol against the fake API server ----------------------------------------------------------------
class Clock(object):
    """Wall and monotonic time that move only when a run sleeps; ``on_sleep`` lets a test act meanwhile."""

    def __init__(self):
        self.wall, self.mono, self.on_sleep = 1767323045.0, 100.0, None

    def sleep(self, seconds):
        self.wall += seconds
        self.mono += seconds
        if self.on_sleep:
            self.on_sleep()


@pytest.fixture
def lease_env(kube_api):
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    clock = Clock()
    kube = _kube.Kube.from_params(dict(kubeconfig=kube_api.kubeconfig_path))

    def make():
        return L.ClusterLease(kube, "ns", "lock", clock=lambda: clock.wall, monotonic=lambda: clock.mono,
                              sleep=clock.sleep)
    return kube_api, clock, make


def _stored(kube_api):
    return kube_api.get("coordination.k8s.io", "leases", "lock", "ns")


def test_acquire_create_then_a_second_run_waits_and_fails_naming_the_holder(lease_env):
    api, clock, make = lease_env
    first = make().acquire("run-a", 10, 60)
    assert first["how"] == "created" and first["changed"] and first["waited"] == 0
    assert _stored(api)["spec"]["holderIdentity"] == "run-a" and _stored(api)["spec"]["leaseTransitions"] == 0
    holder = make()
    clock.on_sleep = lambda: holder.renew("run-a")       # the holder renews while the other waits
    with pytest.raises(L.LeaseBusy) as exc:
        make().acquire("run-b", 10, 30)
    msg = str(exc.value)
    assert "held by 'run-a' since 2026-01-02 03:04:05 UTC" in msg and "waited 30 s (wait_timeout)" in msg
    assert "expires" in msg and "leaseDurationSeconds=10" in msg
    assert _stored(api)["spec"]["holderIdentity"] == "run-a"


def test_a_holder_that_stops_renewing_is_taken_over_after_the_duration(lease_env):
    api, clock, make = lease_env
    make().acquire("run-a", 10, 60)
    start = clock.mono
    taken = make().acquire("run-b", 10, 60)
    assert taken["how"] == "taken" and taken["previous"] == "run-a"
    assert 10 <= clock.mono - start <= 12                 # one duration after first seeing the record (+ a poll)
    spec = _stored(api)["spec"]
    assert spec["holderIdentity"] == "run-b" and spec["leaseTransitions"] == 1


def test_the_run_that_writes_second_gets_409_and_waits(lease_env):
    api, clock, make = lease_env
    loser = make()
    reads = []
    real_read = loser.read

    def read():                                        # the winner writes between the loser's read and write
        obj = real_read()
        if not reads:
            make().acquire("winner", 10, 0)
        reads.append(obj)
        return obj
    loser.read = read
    with pytest.raises(L.LeaseBusy):
        loser.acquire("loser", 10, 0)
    assert [r["code"] for r in _answers(api)] == [201, 409]
    # and on an existing, released lease the stale PUT is a 409 Conflict, then the loser waits
    L.ClusterLease(loser.kube, "ns", "lock").release("winner")
    reads[:] = []
    seen = len(_answers(api))
    with pytest.raises(L.LeaseBusy):
        loser.acquire("loser", 10, 0)
    assert [r["code"] for r in _answers(api)[seen:]] == [200, 409]     # the winner's PUT, then the loser's
    assert _stored(api)["spec"]["holderIdentity"] == "winner"


def _answers(api):
    """Status codes of the Lease writes the server answered."""
    return [r for r in api.requests if r["method"] in ("POST", "PUT") and "/leases" in r["path"]]


def test_conflicts_in_a_row_are_a_renewals_answer_and_a_releases_error(lease_env):
    api, clock, make = lease_env
    lock = make()
    lock.acquire("run-a", 10, 0)
    # another writer wins each of the renewer's three tries: "conflict" (it tries again soon), not an error
    api.inject_failure("PUT", "/leases/lock$", code=409, reason="Conflict", times=3)
    seen = len(_answers(api))
    assert lock.renew("run-a") == "conflict"
    assert [r["code"] for r in _answers(api)[seen:]] == [409, 409, 409]
    assert lock.renew("run-a") == "renewed"                        # the fourth write goes through
    api.inject_failure("PUT", "/leases/lock$", code=409, reason="Conflict", times=L.CONFLICT_RETRIES)
    with pytest.raises(L.LeaseError) as exc:
        lock.release("run-a")
    assert str(exc.value) == "could not release Lease ns/lock: %d conflicting writes in a row" % L.CONFLICT_RETRIES
    assert _stored(api)["spec"]["holderIdentity"] == "run-a"
    # any other answer is an error at once
    api.inject_failure("PUT", "/leases/lock$", code=500)
    seen = len(_answers(api))
    with pytest.raises(_kube.KubeError) as exc:
        lock.release("run-a")
    assert exc.value.status == 500 and len(_answers(api)[seen:]) == 1


def test_release_records_what_was_converged_and_a_failed_holder_clears_it(lease_env):
    api, clock, make = lease_env
    lock = make()
    lock.acquire("run-a", 10, 0)
    assert lock.release("run-b")["changed"] is False         # not the holder: nothing happens
    assert lock.release("run-a", {"digest": "d1", "run": "r1"})["released"] is True
    stored = _stored(api)
    assert "holderIdentity" not in stored["spec"]
    assert json.loads(stored["metadata"]["annotations"][L.CONVERGED_ANNOTATION]) == {"digest": "d1", "run": "r1"}
    again = make().acquire("run-b", 10, 0)
    assert again["how"] == "free" and again["lease"]["converged"] == {"digest": "d1", "run": "r1"}
    # run-b found the same work done: releasing with the same digest and run keeps run-a's record
    make().release("run-b", {"digest": "d1", "run": "r1", "by": "run-b"})
    assert json.loads(_stored(api)["metadata"]["annotations"][L.CONVERGED_ANNOTATION])["digest"] == "d1"
    assert "by" not in json.loads(_stored(api)["metadata"]["annotations"][L.CONVERGED_ANNOTATION])
    make().acquire("run-b", 10, 0)
    make().release("run-b")                                  # released without a record: the old one goes
    assert L.CONVERGED_ANNOTATION not in (_stored(api)["metadata"].get("annotations") or {})
    assert make().release("run-b")["changed"] is False


def test_arrival_barrier_waits_for_every_slice_or_the_timeout(lease_env):
    api, clock, make = lease_env
    lock = make()
    others = iter(["s2", "s3"])
    clock.on_sleep = lambda: make().arrive("r1", next(others, "s3"), 1, 0, 10)
    res = lock.arrive("r1", "s1", 3, 120, 10)
    assert res["complete"] and res["slices"] == ["s1", "s2", "s3"] and res["waited"] < 5
    clock.on_sleep = None
    res = lock.arrive("r2", "s1", 2, 20, 10)
    assert not res["complete"] and res["slices"] == ["s1"] and 20 <= res["waited"] < 22
    assert "holderIdentity" not in _stored(api)["spec"]         # arriving takes nothing


def test_renew_loop_stops_when_the_owner_is_gone_or_the_lease_is_lost(lease_env):
    api, clock, make = lease_env
    lock = make()
    lock.acquire("run-a", 9, 0)
    first = _stored(api)["spec"]["renewTime"]
    ticks = []

    def alive():
        ticks.append(clock.mono)
        return len(ticks) < 8
    assert L.renew_loop(lock, "run-a", 9, 3, alive) == "owner gone"
    renewals = [r for r in api.requests if r["method"] == "PUT"
                and r["query"].get("fieldManager") == [L.RENEWER_FIELD_MANAGER]]
    assert len(renewals) == 2 and _stored(api)["spec"]["renewTime"] > first
    lock.release("run-a")
    assert L.renew_loop(lock, "run-a", 9, 3, lambda: True) == "lost"


# ---- the owner process (/proc) -----------------------------------------------------------------------------------
def test_find_owner_is_the_topmost_ansible_playbook_and_the_liveness_checks(tmp_path):
    code_child = ("import sys; sys.path.insert(0, %r); "
                  "from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _lease as L; "
                  "print(L.find_owner())" % os.path.join(ROOT, ".collections"))
    # an "ansible-playbook" (argv[0]) whose forked worker is "ansible-playbook" too, which runs a module
    code_parent = ("import os, subprocess, sys\n"
                   "print(os.getpid(), flush=True)\n"
                   "pid = os.fork()\n"
                   "if pid == 0:\n"
                   "    subprocess.run([%r, '-c', %r]); os._exit(0)\n"
                   "os.waitpid(pid, 0)\n" % (sys.executable, code_child))
    # (beside the interpreter, so that it still finds its prefix; not the real ansible-playbook script)
    fake_argv0 = os.path.join(os.path.dirname(sys.executable), "ansible-playbook-under-test")
    proc = subprocess.run([fake_argv0, "-c", code_parent], executable=sys.executable,
                          stdout=subprocess.PIPE, universal_newlines=True, timeout=60, check=True)
    outer, found = proc.stdout.split()
    assert found == outer          # the outer process, not the forked worker nor the module
    sleeper = subprocess.Popen(["sleep", "30"], env=dict(os.environ, **{L.MARKER_ENV: "run-7f3a"}))
    try:
        owner = L.owner_info(sleeper.pid)
        # the child's environment is the marker's only after its exec: until then /proc shows the parent's (seen
        # on the loaded 2-core machine), so wait for it, bounded
        deadline = time.monotonic() + 10
        while not L.marker_alive("run-7f3a") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert L.owner_alive(owner) and L.marker_alive("run-7f3a")
        assert not L.marker_alive("run-other") and not L.marker_alive("run-7f3a", exclude=(sleeper.pid,))
        assert not L.owner_alive(dict(owner, start=owner["start"] + 1))      # a reused PID is not the owner
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not L.owner_alive(owner) and not L.marker_alive("run-7f3a")
    with pytest.raises(L.LeaseError):
        L.owner_info(sleeper.pid)


def test_identity_is_stable_for_one_owner_and_unique_across_owners():
    me = L.owner_info(os.getpid())
    parent = L.owner_info(os.getppid())
    assert L.identity_for("AWX job 7", me) == L.identity_for("AWX job 7", me)
    assert L.identity_for("AWX job 7", me) != L.identity_for("AWX job 7", parent)
    assert L.identity_for("AWX job 7", me, host="ee-1").startswith("AWX job 7 on ee-1 pid %d #" % os.getpid())
