# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cluster-wide lock on a Kubernetes Lease (coordination.k8s.io/v1), for work that must run once per cluster
while several ansible-playbook runs (AWX job slices) run at once on different machines (PRIVATE).

The protocol is client-go's leader election (k8s.io/client-go/tools/leaderelection, LeaseLock) reduced to one
acquisition:

- the holder writes ``spec.holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` and counts
  ``leaseTransitions`` when the holder changes; every write is a PUT carrying the ``resourceVersion`` it read, so
  of two runs that saw the same free lease exactly one wins and the other gets a conflict and looks again (the
  protocol's normal answer, not an error: every write here goes through _kube_service.retry_on_conflict);
- a lease is free when it has no holder (released), or when it expired: its record (holder, renewTime) has not
  changed for ``leaseDurationSeconds`` as measured on the waiting run's own monotonic clock since it first saw
  that record (client-go's ``observedTime``: immune to clock skew between controllers), or its renewTime is more
  than twice the duration in the past by the waiting run's wall clock (a lease left by a run that died long
  before: tolerates a skew up to one duration);
- while the work runs, a renewer process (forked by the module, in its own session) renews the lease every third
  of its duration for as long as the run that took it is alive: its ansible-playbook process, or any process that
  carries the run's marker in its environment (``GPUOPS_CLUSTER_RUN``: the run's cluster tasks and the helm they
  run, which outlive a killed ansible-playbook until their module ends). When they are all gone, e.g. the job
  was killed, it stops, and the lease expires;
- release clears the holder (the renewer sees that and stops) and may record what the holder converged (an
  annotation), so that a later holder in the same run can find the work done.

Also here: an arrival barrier for the job slices of one run (each slice adds itself to an annotation, then waits
until the expected number arrived or a timeout passed) and the /proc helpers that find and watch the owner.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import errno
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import tempfile
import time

from urllib.parse import quote

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError, Kube, read_or_none
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import retry_on_conflict
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _rfc3339
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS, wait

API_VERSION = "coordination.k8s.io/v1"
FIELD_MANAGER = "gpuops.nvidia"
# The renewer's writes carry this field manager, so that they can be told apart from the run's own steps.
RENEWER_FIELD_MANAGER = "gpuops.nvidia-lease-renewer"
CONVERGED_ANNOTATION = "gpuops.nvidia/converged"
ARRIVALS_ANNOTATION = "gpuops.nvidia/arrivals"
KEEP_RUNS = 8           # runs whose arrivals the lease remembers
POLL_S = WAITS["lease_free"].interval     # how often a waiting run looks at the lease (jittered by +-50 %)
CONFLICT_RETRIES = 50   # conflicts in a row before giving up (each one means another run just wrote)
TAKE_RETRIES = 100000   # the same for taking the lease: every conflict there is another run's acquisition
MARKER_ENV = "GPUOPS_CLUSTER_RUN"   # carried by the run's cluster tasks (site.yml sets it); see marker_alive


class LeaseBusy(Exception):
    """The lease stayed held by another run for the whole wait."""


class LeaseError(Exception):
    """Anything else that stops the lease from being taken or released (already worded for the user)."""


def lease_path(namespace, name=None):
    path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % quote(namespace, safe="")
    return path + ("/%s" % quote(name, safe="") if name else "")


# ---- time ------------------------------------------------------------------------------------------------------
def format_time(seconds):
    """A metav1.MicroTime (RFC 3339 with microseconds, UTC), as the API stores acquireTime/renewTime."""
    whole = int(seconds)
    micro = int(round((seconds - whole) * 1000000))
    if micro >= 1000000:
        whole, micro = whole + 1, micro - 1000000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + ".%06dZ" % micro


def parse_time(text):
    """Seconds since the epoch of an RFC 3339 time, or None when absent or unreadable (common/_rfc3339, the
    collection's one parser)."""
    return _rfc3339.seconds_or_none(text)


def _when(seconds):
    return "?" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


# ---- the lease as data -----------------------------------------------------------------------------------------
def view(obj):
    """The parts of a Lease object the lock uses (None when there is no object)."""
    if not obj:
        return None
    spec = obj.get("spec") or {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {
        "holder": spec.get("holderIdentity") or "",
        "lease_duration": spec.get("leaseDurationSeconds"),
        "acquire_time": spec.get("acquireTime"),
        "renew_time": spec.get("renewTime"),
        "transitions": spec.get("leaseTransitions") or 0,
        "converged": _json_annotation(annotations, CONVERGED_ANNOTATION),
        "arrivals": _json_annotation(annotations, ARRIVALS_ANNOTATION) or [],
        "resource_version": (obj.get("metadata") or {}).get("resourceVersion"),
    }


def _json_annotation(annotations, key):
    try:
        return json.loads(annotations[key])
    except (KeyError, TypeError, ValueError):
        return None


def describe(lease, now=None):
    """'held by X since T, last renewed R, expires E unless renewed' for a view()."""
    if not lease or not lease["holder"]:
        return "free"
    now = time.time() if now is None else now
    renewed = parse_time(lease["renew_time"])
    duration = lease["lease_duration"] or 0
    expires = None if renewed is None else renewed + duration
    left = "" if expires is None else (" (in %d s)" % (expires - now) if expires > now else " (already passed)")
    return "held by %r since %s, last renewed %s, expires %s%s unless renewed (leaseDurationSeconds=%s)" % (
        lease["holder"], _when(parse_time(lease["acquire_time"])), _when(renewed), _when(expires), left, duration)


class Observer(object):
    """client-go's observedTime: when this run first saw the lease's current record, on its own monotonic clock."""

    def __init__(self):
        self.record = None
        self.since = None

    def seen(self, lease, mono):
        record = (lease["holder"], lease["renew_time"], lease["lease_duration"])
        if record != self.record:
            self.record, self.since = record, mono
        return self.since


def expired(lease, observed_since, mono, wall):
    """Whether a held lease may be taken over (see the module docstring for the two rules)."""
    duration = lease["lease_duration"] or 0
    if mono - observed_since >= duration:
        return True
    renewed = parse_time(lease["renew_time"])
    return renewed is not None and wall > renewed + 2 * duration


def plan_acquire(lease, identity, expired_now):
    """What acquiring means for a view() of the lease (None: no object yet): create, hold (already ours), take
    (free, released or expired), or wait."""
    if lease is None:
        return "create"
    if lease["holder"] == identity:
        return "hold"
    if not lease["holder"] or expired_now:
        return "take"
    return "wait"


def held_spec(lease, identity, duration, wall):
    """The spec that makes ``identity`` the holder, from a view() of the lease as it is (None when absent)."""
    spec = {"holderIdentity": identity, "leaseDurationSeconds": duration, "renewTime": format_time(wall)}
    if lease is not None and lease["holder"] == identity:
        spec["acquireTime"] = lease["acquire_time"] or format_time(wall)
        spec["leaseTransitions"] = lease["transitions"]
    else:
        spec["acquireTime"] = format_time(wall)
        # client-go counts a transition whenever the holder changes on an existing lease
        spec["leaseTransitions"] = (lease["transitions"] + 1) if lease is not None else 0
    return spec


def add_arrival(arrivals, run_id, slice_id):
    """The arrivals annotation ([[run, [slice, ...]], ...], newest run last, KEEP_RUNS runs) with ``slice_id``
    added under ``run_id``; the input is not modified."""
    out = [[run, list(slices)] for run, slices in (arrivals or []) if run != run_id]
    slices = next((list(s) for run, s in (arrivals or []) if run == run_id), [])
    if slice_id not in slices:
        slices.append(slice_id)
    out.append([run_id, slices])
    return out[-KEEP_RUNS:]


def arrived(arrivals, run_id):
    return next((list(s) for run, s in (arrivals or []) if run == run_id), [])


# ---- processes (Linux /proc; elsewhere only the owner PID is watched) ---------------------------------------------
def proc_stat(pid):
    """(state, ppid, pgid, start time in clock ticks since boot) of a process, or None when it does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (IOError, OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def proc_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return [a.decode("utf-8", "replace") for a in handle.read().split(b"\0") if a]
    except (IOError, OSError):
        return []


def _is_playbook(argv):
    return any(os.path.basename(arg).startswith("ansible-playbook") for arg in argv[:3])


def find_owner(pid=None):
    """The ansible-playbook process this module runs under: the topmost ancestor whose command is
    ansible-playbook (its forked workers are ansible-playbook too). None when there is none (or no /proc)."""
    pid = os.getpid() if pid is None else pid
    owner = None
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        stat = proc_stat(pid)
        if stat is None:
            break
        if _is_playbook(proc_cmdline(pid)):
            owner = pid
        pid = stat[1]
    return owner


def owner_info(pid):
    """{pid, start} of the owner (start: clock ticks since boot, to tell a reused PID; None without /proc)."""
    stat = proc_stat(pid)
    if stat is None:
        try:
            os.kill(pid, 0)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                raise LeaseError("owner_pid %d: no such process" % pid)
        return {"pid": pid, "start": None}
    return {"pid": pid, "start": stat[3]}


def owner_alive(owner):
    """Whether the owner process still runs (not a zombie, and not another process that got its PID)."""
    if owner.get("start") is None:
        try:
            os.kill(owner["pid"], 0)
            return True
        except OSError as exc:
            return exc.errno != errno.ESRCH
    stat = proc_stat(owner["pid"])
    return bool(stat) and stat[0] not in ("Z", "X") and stat[3] == owner["start"]


def marker_alive(marker, exclude=()):
    """Whether a live process carries ``MARKER_ENV=marker`` in its environment: the run's tasks and the helm they
    run. ansible-core's workers each start a session of their own (WorkerProcess._detach), so they are not in
    ansible-playbook's process group, and a worker whose ansible-playbook was killed finishes the module it runs
    (helm included) before it exits: the lease must stay with the run while any of them lives."""
    if not marker:
        return False
    needle = ("%s=%s" % (MARKER_ENV, marker)).encode("utf-8")
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    for entry in entries:
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    stat = proc_stat(int(entry))
                    if stat and stat[0] not in ("Z", "X"):
                        return True
        except (IOError, OSError):
            continue
    return False


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return ""


def identity_for(holder, owner, host=None):
    """holderIdentity: who (``holder``, e.g. "AWX job 4711"), where and which process, and a short token of
    (host, pid, start time, boot) so that two processes never share an identity. Stable for one owner process,
    so a second acquisition by the same run finds the lease already its own."""
    host = host or socket.gethostname()
    token = hashlib.sha256(("%s|%s|%s|%s" % (host, owner["pid"], owner.get("start"), boot_id())).encode(
        "utf-8")).hexdigest()[:8]
    return "%s on %s pid %d #%s" % (holder, host, owner["pid"], token)


# ---- the lock --------------------------------------------------------------------------------------------------
class ClusterLease(object):
    """Acquire, renew and release one Lease through a _kube.Kube. Clock and sleep are injectable for tests."""

    def __init__(self, kube, namespace, name, clock=time.time, monotonic=time.monotonic, sleep=time.sleep):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.clock, self.monotonic, self.sleep = clock, monotonic, sleep
        self.path = lease_path(namespace, name)
        self.what = "Lease %s/%s" % (namespace, name)

    # -- requests
    def read(self):
        return read_or_none(self.kube, "read " + self.what, self.path)

    def _body(self, obj, spec, annotations=None):
        meta = {"name": self.name, "namespace": self.namespace}
        old_meta = (obj or {}).get("metadata") or {}
        if old_meta.get("resourceVersion"):
            meta["resourceVersion"] = old_meta["resourceVersion"]
        merged = dict(old_meta.get("annotations") or {})
        for key, value in (annotations or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        if merged:
            meta["annotations"] = merged
        if old_meta.get("labels"):
            meta["labels"] = old_meta["labels"]
        return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": meta, "spec": spec}

    def write(self, obj, spec, annotations=None, dry_run=False, field_manager=FIELD_MANAGER):
        """The compare-and-swap: create (obj None) or replace at obj's resourceVersion. Returns the stored object;
        where another run wrote since ``obj`` was read, the API's conflict (a KubeError) is raised, and the caller's
        retry_on_conflict reads the lease again."""
        body = self._body(obj, spec, annotations)
        if obj is None:
            return self.kube.create("create " + self.what, lease_path(self.namespace), body, dry_run=dry_run)
        return self.kube.replace("update " + self.what, self.path, body, dry_run=dry_run, field_manager=field_manager)

    def _gave_up(self, doing, tries):
        """retry_on_conflict's ``exhausted``: every one of ``tries`` writes met another run's."""
        def gave_up(dummy_conflict):
            raise LeaseError("could not %s %s: %d conflicting writes in a row" % (doing, self.what, tries))
        return gave_up

    @staticmethod
    def _interval():
        """A waiting run's interval between two reads, its own (jittered), so that runs do not read in step."""
        return POLL_S * random.uniform(0.5, 1.5)

    # -- the barrier
    def arrive(self, run_id, slice_id, expected, timeout, duration):
        """Add this slice to the run's arrivals, then wait until ``expected`` slices of the run arrived or
        ``timeout`` seconds passed. Returns {run, slices, expected, complete, waited}."""
        start = self.monotonic()

        def add():
            obj = self.read()
            lease = view(obj)
            arrivals = add_arrival(lease["arrivals"] if lease else [], run_id, slice_id)
            spec = (obj or {}).get("spec") or {"leaseDurationSeconds": duration}
            return self.write(obj, spec, {ARRIVALS_ANNOTATION: json.dumps(arrivals, separators=(",", ":"))})
        retry_on_conflict(add, tries=CONFLICT_RETRIES,
                          exhausted=self._gave_up("record this slice's arrival on", CONFLICT_RETRIES))
        # the table's lease_arrivals; each slice reads at its own jittered interval, so slices do not read in step
        polled = wait("lease_arrivals", lambda: (arrived((view(self.read()) or {}).get("arrivals"), run_id), expected),
                      max(0.0, timeout - (self.monotonic() - start)), self._interval(), clock=self.monotonic,
                      sleep=self.sleep)
        return {"run": run_id, "slices": polled.seen[0], "expected": expected, "complete": polled.done,
                "waited": round(self.monotonic() - start, 1)}

    # -- acquire / release / renew
    def acquire(self, identity, duration, wait_timeout, check=False):
        """Take the lease for ``identity``, waiting up to ``wait_timeout`` s while another run holds it. Returns
        {changed, how (created|taken|free|held), previous (holder), waited, lease (view), before}. In check mode
        nothing is stored or awaited: the write it would make is sent as a dry run (RBAC and validation)."""
        start = self.monotonic()
        observer = Observer()

        def take():
            obj, lease, plan, gone, wall = self._until_free(identity, start, wait_timeout, observer, check)
            if plan == "wait":
                return {"changed": True, "how": "would wait", "previous": lease["holder"], "waited": 0,
                        "lease": lease, "before": lease}
            stored = self.write(obj, held_spec(lease, identity, duration, wall), dry_run=check)
            how = {"create": "created", "hold": "held", "take": "taken" if gone else "free"}[plan]
            return {"changed": plan != "hold", "how": how,
                    "previous": lease["holder"] if lease and plan == "take" else "",
                    "waited": round(self.monotonic() - start, 1), "lease": view(stored), "before": lease}
        # a conflict: another run wrote first; look again (and wait again, where it took the lease)
        return retry_on_conflict(take, tries=TAKE_RETRIES, exhausted=self._gave_up("take", TAKE_RETRIES))

    def _until_free(self, identity, start, wait_timeout, observer, check):
        """Read the lease until ``identity`` may write it (its plan is not "wait": the table's ``lease_free``, at this
        run's jittered interval); in check mode the first read answers. Returns (object, view, plan, expired, wall
        clock of the read); LeaseBusy when another run held it for ``wait_timeout`` s since ``start``."""
        def look():
            obj = self.read()
            lease = view(obj)
            mono, wall = self.monotonic(), self.clock()
            gone = lease is not None and lease["holder"] and expired(lease, observer.seen(lease, mono), mono, wall)
            return obj, lease, plan_acquire(lease, identity, gone), gone, wall

        left = 0 if check else max(0.0, wait_timeout - (self.monotonic() - start))
        polled = wait("lease_free", look, left, self._interval(), clock=self.monotonic, sleep=self.sleep)
        if polled.done or check:
            return polled.seen
        dummy, lease, dummy_plan, dummy_gone, wall = polled.seen
        raise LeaseBusy("the cluster lock (%s) is %s; waited %d s (wait_timeout). Another run (an AWX job slice, "
                        "another controller) is doing the once-per-cluster work; nothing changed in this run's "
                        "cluster part. If that run died, its lease expires %d s after its last renewal and the next "
                        "run takes over; raise wait_timeout if its work legitimately takes longer."
                        % (self.what, describe(lease, wall), wait_timeout, lease["lease_duration"] or 0))

    def release(self, identity, converged=None, check=False):
        """Clear the holder if it is ``identity``, recording ``converged`` (a dict with digest and run; an older record
        of the same digest and run is kept as it is) or, without it, removing an older record.
        Returns {changed, released, holder (who holds it now), lease, before}."""
        def clear():
            nonlocal converged
            obj = self.read()
            lease = view(obj)
            if lease is None or lease["holder"] != identity:
                return {"changed": False, "released": False, "holder": (lease or {}).get("holder", ""),
                        "lease": lease, "before": lease}
            spec = dict(obj.get("spec") or {})
            spec.pop("holderIdentity", None)
            spec["renewTime"] = format_time(self.clock())
            old = lease["converged"] or {}
            if converged and (old.get("digest"), old.get("run")) == (converged.get("digest"), converged.get("run")):
                converged = old         # the same work, found done: keep who converged it and when
            note = json.dumps(converged, sort_keys=True, separators=(",", ":")) if converged else None
            stored = self.write(obj, spec, {CONVERGED_ANNOTATION: note}, dry_run=check)
            return {"changed": True, "released": True, "holder": "", "lease": view(stored), "before": lease}
        return retry_on_conflict(clear, tries=CONFLICT_RETRIES, exhausted=self._gave_up("release", CONFLICT_RETRIES))

    def renew(self, identity):
        """One renewal: "renewed", "lost" when the lease is no longer held by ``identity``, or "conflict" when three
        writes in a row met another writer's (the renewer tries again soon)."""
        def renewal():
            obj = self.read()
            lease = view(obj)
            if lease is None or lease["holder"] != identity:
                return "lost"
            self.write(obj, dict(obj["spec"], renewTime=format_time(self.clock())),
                       field_manager=RENEWER_FIELD_MANAGER)
            return "renewed"
        return retry_on_conflict(renewal, tries=3, exhausted=lambda dummy_conflict: "conflict")


def renew_loop(lease, identity, duration, interval, alive, poll=1.0):
    """Renew every ``interval`` s while ``alive()``; stop when the lease is lost (released or taken), or when no
    renewal succeeded for ``duration`` s (the lease has expired anyway). Returns why it stopped."""
    last_ok = lease.monotonic()
    due = last_ok + interval
    while True:
        if not alive():
            return "owner gone"
        now = lease.monotonic()
        if now >= due:
            try:
                outcome = lease.renew(identity)
            except KubeError:
                outcome = "error"
            if outcome == "lost":
                return "lost"
            if outcome == "renewed":
                last_ok, due = now, now + interval
            else:
                due = now + min(interval, 2.0)
            if now - last_ok > duration:
                return "expired"
        lease.sleep(poll)


def private_tls_files(configuration):
    """A copy of a kubernetes client Configuration whose CA, client certificate and key files are copies in a new
    private directory, and that directory. The client writes certificate data from a kubeconfig to temporary
    files that it deletes when the process that wrote them exits (an atexit handler in kubernetes.config): the
    module's, long before the renewer's last renewal."""
    directory = tempfile.mkdtemp(prefix="gpuops-lease-")
    copied = copy.copy(configuration)
    for attr in ("ssl_ca_cert", "cert_file", "key_file"):
        path = getattr(configuration, attr, None)
        if path and os.path.isfile(path):
            dest = os.path.join(directory, attr)
            shutil.copyfile(path, dest)
            os.chmod(dest, 0o600)
            setattr(copied, attr, dest)
    return copied, directory


def spawn_renewer(kube, namespace, name, identity, duration, interval, owner, marker=None):
    """Fork a detached renewer (double fork, own session, stdio on /dev/null, every inherited descriptor closed,
    so the module's output ends when the module does). Returns its PID."""
    configuration, directory = private_tls_files(kube.configuration)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child:
        os.close(write_end)
        # (the renewer owns ``directory`` now; if it never started, nothing removes it: a few hundred bytes in /tmp)
        with os.fdopen(read_end) as handle:
            pid = handle.read().strip()
        os.waitpid(child, 0)
        return int(pid) if pid.isdigit() else None
    # first child: new session, fork the renewer, tell the module its PID, exit
    try:
        os.close(read_end)
        os.setsid()
        grandchild = os.fork()
        if grandchild:
            os.write(write_end, str(grandchild).encode("ascii"))
            os._exit(0)
    except BaseException:  # pragma: no cover - fork failure in the child
        os._exit(1)
    # the renewer
    code = 0
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, 65536)
        lease = ClusterLease(Kube(configuration, timeout=kube.timeout), namespace, name)
        me = (os.getpid(),)        # the renewer inherited the marker: it does not count
        renew_loop(lease, identity, duration, interval, lambda: owner_alive(owner) or marker_alive(marker, me))
    except BaseException:  # never return into the module's code
        code = 1
    shutil.rmtree(directory, ignore_errors=True)
    os._exit(code)
