"""bench/fleet.py --slices: site.yml as AWX job slicing runs it, and what slicing costs and saves on one machine.

N ansible-playbook processes at once over disjoint parts of one inventory - AWX's partition
(awx/main/models/inventory.py, Inventory.get_sliced_hosts: hosts sorted by name, slice k gets every N-th host from
the k-th), given here as --limit - with the same extra vars (a run id shared by the slices and the slice count,
as the role expects them: gpuops_run_id, gpuops_job_slices), against one Kubernetes cluster: the fake API server
(tests/support/fake_kube_api.py: real HTTP, a Node object per node) and the real helm (tools/bin/helm, through a
wrapper that logs every command) with the fixture chart. The fleet is bench/fleet.py's inventory (MIG and MPS
nodes of one simulated shape).

Per fleet size and slice count, on a fresh fleet: the first converge, then a re-run, each as N slices at once.
Figures: wall seconds until the last slice ended, the slowest and fastest slice, CPU seconds of all the
ansible-playbook process trees (user + system; the fake API server runs inside the bench and is not counted), the
1-minute load average before. Errors, not figures: a slice that failed, a device plugin release installed more than
once (helm upgrade commands, release revisions), a helm command refused ("another operation ... is in progress"),
a re-run that changed something.
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

import fleet_common
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._lease import proc_stat
from tests.support.ansible_run import BIN, ROOT, ansible_env, parse_output
from tests.support.fake_kube_api import FakeKubeApi

HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
RELEASE, RELEASE_NS = "nvdp", "nvidia-device-plugin"
CONTAINERD_ACTION = "gpuops.nvidia.containerd_runtime"
REFUSED = "another operation (install/upgrade/rollback) is in progress"
LEASE = ("coordination.k8s.io", "leases", "gpuops-nvidia-cluster", RELEASE_NS)


def awx_slices(hosts, count):
    """AWX's slices of an inventory: hosts sorted by name, slice k (1-based) gets hosts[k-1::count]; AWX runs no
    more slices than there are hosts (JobTemplate.get_effective_slice_ct)."""
    names = sorted(hosts)
    return [names[i::count] for i in range(min(count, len(names)))]


_HELM_WRAPPER = """#!/bin/sh
# bench/fleet_slices.py: log every helm command; hold an upgrade while %(hold)s exists (tests kill the holder there)
printf '%%s\\n' "$*" >> %(log)s
if [ "$1" = upgrade ]; then
    while [ -e %(hold)s ]; do sleep 0.2; done
fi
exec %(real)s "$@"
"""


class SlicedFleet(object):
    """A fleet of simulated nodes (bench/fleet.py's inventory) with a cluster: the fake API server and the real helm.
    ``run(count, run_id)`` runs site.yml as ``count`` slices at once; ``start(hosts, ...)`` starts one slice for a
    test to kill. Use as a context manager (the API server stops, the directory goes).

    ``keep``: a directory that holds the fleet instead of a temporary one, kept when the fleet closes, with the API
    server's objects (api.json): a fleet made there earlier is taken up again, its objects served by a new server
    (one measurement split over two processes, where one may run for a limited time)."""

    def __init__(self, nodes, shape, mig_share=0.5, extra=None, forks=10, args=(), group_vars=None, keep=None):
        self.keep = keep
        self.tmp = keep or tempfile.mkdtemp(prefix="gpuops-slices-")
        self.hosts = ["node-%03d" % i for i in range(nodes)]
        self.forks, self.args = forks, list(args)
        saved = os.path.join(self.tmp, "fleet.json")
        self.api = FakeKubeApi(tokens=None).start()
        if keep and os.path.exists(saved):
            with open(saved) as handle:
                fleet_data = json.load(handle)
            if (fleet_data["nodes"], fleet_data["shape"]) != (nodes, shape):
                self.api.stop()
                raise fleet_common.BenchError("%s holds a fleet of %d x %s, not %d x %s" % (
                    keep, fleet_data["nodes"], fleet_data["shape"], nodes, shape))
            self.inv, self.mig = os.path.join(self.tmp, "inventory"), fleet_data["mig"]
            with open(os.path.join(self.tmp, "api.json")) as handle:
                self.api.restore(json.load(handle))
        else:
            if keep:
                os.makedirs(keep)
            self.inv, self.mig = fleet_common.inventory(self.tmp, nodes, shape, mig_share, group_vars)
            for host in self.hosts:
                self.api.add_node(host)
            shutil.copytree(CHART, os.path.join(self.tmp, "chart"))
            if keep:
                with open(saved, "w") as handle:
                    json.dump({"nodes": nodes, "shape": shape, "mig": self.mig}, handle)
        chart = os.path.join(self.tmp, "chart")
        kubeconfig = os.path.join(self.tmp, "kubeconfig")  # (written again when taken up: a new server, a new port)
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        self.helm_log, self.hold = os.path.join(self.tmp, "helm.log"), os.path.join(self.tmp, "hold-upgrade")
        wrapper = os.path.join(self.tmp, "helm")
        with open(wrapper, "w") as handle:
            handle.write(_HELM_WRAPPER % {"log": self.helm_log, "hold": self.hold, "real": HELM})
        os.chmod(wrapper, 0o755)
        # No device plugin pod runs in this fake cluster (bench/chart_flow.py runs the node flow with fake pods): a
        # node's verification would wait for an allocatable that nothing sets, so it is off here.
        self.extra = {"gpuops_kubeconfig": kubeconfig, "cluster_device_plugin_helm": wrapper,
                      "cluster_device_plugin_chart_path": chart, "cluster_slices_timeout": 900,
                      "gpu_node_verify": False}
        self.extra.update(extra or {})
        self.env = {"HOME": self.tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.keep:
            with open(os.path.join(self.tmp, "api.json"), "w") as handle:
                json.dump(self.api.snapshot(), handle)
        self.api.stop()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def command(self, hosts, run_id, slices, extra=None, args=()):
        ev = dict(self.extra, gpuops_run_id=run_id, gpuops_job_slices=slices)
        ev.update(extra or {})
        cmd = [os.path.join(BIN, "ansible-playbook"), fleet_common.SITE, "-i", self.inv, "-f", str(self.forks),
               "--limit", ",".join(hosts), "-e", json.dumps(ev)] + self.args + list(args)
        return cmd, ansible_env(self.env)

    def start(self, hosts, run_id, slices, out, extra=None):
        """One slice, started in its own session (a test kills its process group); stdout and stderr to ``out``."""
        cmd, env = self.command(hosts, run_id, slices, extra)
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def run(self, count, run_id, extra=None, args=()):
        """site.yml as ``count`` slices at once (AWX's partition); returns a SlicesRun (raises BenchError).
        ``args``: more ansible-playbook arguments (e.g. --check --diff)."""
        return SlicesRun(self, awx_slices(self.hosts, count), run_id, extra, args)

    def helm_commands(self):
        try:
            with open(self.helm_log) as handle:
                return [line.split() for line in handle.read().splitlines()]
        except FileNotFoundError:
            return []

    def upgrades(self):
        return sum(1 for argv in self.helm_commands() if argv[:1] == ["upgrade"])

    def revisions(self):
        """Revisions of the device plugin release, from helm's release Secrets in the fake API server."""
        prefix = "sh.helm.release.v1.%s.v" % RELEASE
        return sorted(int(name[len(prefix):]) for (group, plural, ns, name) in list(self.api.objects)
                      if plural == "secrets" and ns == RELEASE_NS and name.startswith(prefix))

    def lease(self):
        return self.api.get(LEASE[0], LEASE[1], LEASE[2], LEASE[3])


class SlicesRun(object):
    """The slices of one run, started together; wall until the last ends, CPU of all their process trees."""

    def __init__(self, sliced, parts, run_id, extra=None, args=()):
        self.parts = parts
        self.load = os.getloadavg()[0]
        upgrades, files, procs = sliced.upgrades(), [], []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        for i, hosts in enumerate(parts):
            # output to files, not pipes: a slice must never block on a full pipe while the bench waits for another
            out, err = (open(os.path.join(sliced.tmp, "%s-slice%d.%s" % (run_id, i + 1, kind)), "w+")
                        for kind in ("out", "err"))
            cmd, env = sliced.command(hosts, run_id, len(parts), extra, args)
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err))
            files.append((out, err))
        self.slice_walls = []
        pending = dict(enumerate(procs))
        while pending:                      # each slice's wall time, measured when it ends
            for i, proc in list(pending.items()):
                if proc.poll() is not None:
                    self.slice_walls.append(time.perf_counter() - t0)
                    del pending[i]
            time.sleep(0.05)
        rcs = [proc.returncode for proc in procs]
        self.wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.outputs, self.data = [], []
        for out, err in files:
            out.seek(0)
            err.seek(0)
            text = out.read()
            self.outputs.append(text + err.read())
            self.data.append(parse_output(text))
            out.close()
            err.close()
        self.refused = sum(text.count(REFUSED) for text in self.outputs)
        self.upgrades = sliced.upgrades() - upgrades
        self.revisions = sliced.revisions()
        failed = [(i + 1, rc) for i, (rc, data) in enumerate(zip(rcs, self.data)) if rc != 0 or data is None]
        if failed:
            msgs = []
            for i, rc in failed:
                data = self.data[i - 1]
                if data:
                    msgs += [(i, t["task"]["name"], r.get("msg")) for p in data["plays"] for t in p["tasks"]
                             for h, r in t["hosts"].items() if r.get("failed")]
                else:
                    msgs.append((i, "no JSON output", self.outputs[i - 1][-1500:]))
            raise fleet_common.BenchError("%d of %d slices failed (slice, rc) %s: %s" % (
                len(failed), len(parts), failed, msgs[:4]))

    def changed(self):
        return sum(s.get("changed", 0) for data in self.data for s in data["stats"].values())

    def task(self, slice_index, name):
        """The result of the first task whose name contains ``name`` in a slice (None when it has none)."""
        for play in self.data[slice_index]["plays"]:
            for task in play["tasks"]:
                if name in task["task"]["name"]:
                    return next(iter(task["hosts"].values()))
        return None

    def ran(self, action):
        """How many hosts ran a task of ``action`` (as the task names it) in any slice (fleet_common.batches' shape)."""
        return sum(len(task["ran"]) for data in self.data for batch in fleet_common.batches(data)
                   for task in batch["tasks"] if task["action"] == action)

    def figures(self):
        return {"wall": self.wall, "cpu": self.cpu, "load": self.load, "changed": self.changed(),
                # hosts whose containerd_runtime module ran: 0 on a re-run, where every node's plan finds the
                # verified-state stamp (measure refuses a re-run with any)
                "containerd_checked": self.ran(CONTAINERD_ACTION),
                # CPU s of the slices' ansible-playbook main processes alone (the rest: workers and modules)
                "main_cpu": round(sum(d.get("controller", {}).get("cpu", 0) for d in self.data), 1),
                "slice_walls": [round(w, 1) for w in self.slice_walls], "upgrades": self.upgrades,
                "revisions": self.revisions, "refused": self.refused}


def measure(nodes, slices, shape, forks, mig_share=0.5, group_vars=None, args=(), extra=None, inspect=None,
            keep=None, phase=None):
    """First converge and re-run of a fresh fleet as ``slices`` slices at once; errors are BenchErrors.
    ``inspect(sliced, first, again)``, if given, looks at the fleet before it goes (tests). With ``keep`` (a
    directory) and ``phase``: "first" converges a fleet kept there and returns None (its figures so far in
    row.json), "again" re-runs that fleet and returns the whole row (SlicedFleet's ``keep``)."""
    if phase == "first" and os.path.exists(keep):
        raise fleet_common.BenchError("%s exists: --slices-phase first makes a new fleet there" % keep)
    if phase == "again" and not os.path.exists(os.path.join(keep, "row.json")):
        raise fleet_common.BenchError("%s holds no converged fleet: run --slices-phase first with --slices-keep %s "
                                      "first" % (keep, keep))
    with SlicedFleet(nodes, shape, mig_share, extra=extra, forks=forks, args=args, group_vars=group_vars,
                     keep=keep) as sliced:
        row = {"nodes": nodes, "slices": len(awx_slices(sliced.hosts, slices)), "shape": shape,
               "gpus": len(fleet_common.MACHINE_SHAPES[shape]), "mig": sliced.mig, "forks": forks}
        saved = os.path.join(keep, "row.json") if keep else None
        first = None  # (with phase "again", the converge ran in another process: inspect gets None)
        if phase == "again":
            with open(saved) as handle:
                first_row = json.load(handle)
            if dict((k, first_row[k]) for k in row) != row:
                raise fleet_common.BenchError("%s holds the converge of %s, not of %s" % (saved, first_row, row))
            row = first_row
        else:
            first = sliced.run(slices, "first")
            row["first"] = first.figures()
            if first.refused or first.upgrades != 1 or first.revisions != [1]:
                raise fleet_common.BenchError("the device plugin release was not installed exactly once: %d helm "
                                              "upgrade(s), revisions %s, %d refused helm command(s)"
                                              % (first.upgrades, first.revisions, first.refused))
            if phase == "first":
                with open(saved, "w") as handle:
                    json.dump(row, handle)
                return None
        again = sliced.run(slices, "again")
        row["again"] = again.figures()
        if again.changed() or again.upgrades or again.refused:
            raise fleet_common.BenchError("NOT IDEMPOTENT: the sliced re-run changed %d thing(s), ran %d helm "
                                          "upgrade(s), %d refused" % (again.changed(), again.upgrades, again.refused))
        if row["again"]["containerd_checked"]:
            raise fleet_common.BenchError(
                "not a steady-state re-run: %d node(s) checked containerd in full (nvidia-ctk and containerd run), "
                "where the node plan should have found containerd_runtime's verified-state stamp. The stamp misses "
                "when containerd or nvidia-ctk is another file than at the converge (a tree or tools/ copied or "
                "unpacked again between --slices-phase first and again: give the converge stable paths, "
                "-e containerd_runtime_containerd_path=... -e containerd_runtime_nvidia_ctk_path=...), or when "
                "the stamp is broken" % row["again"]["containerd_checked"])
        if inspect:
            inspect(sliced, first, again)
        return row


def table(rows):
    header = ("nodes (MIG/MPS)", "slices", "first converge: wall s", "slices' wall s (slowest/fastest)", "CPU s",
              "load before", "re-run: wall s", "slices' wall s", "CPU s", "load before", "helm upgrades",
              "release revisions", "refused", "changed on re-run")
    lines = []
    for r in rows:
        f, a = r["first"], r["again"]
        lines.append(["%d (%d/%d)" % (r["nodes"], r["mig"], r["nodes"] - r["mig"]), str(r["slices"]),
                      "%.1f" % f["wall"], "%.1f/%.1f" % (max(f["slice_walls"]), min(f["slice_walls"])),
                      "%.1f" % f["cpu"], "%.1f" % f["load"], "%.1f" % a["wall"],
                      "%.1f/%.1f" % (max(a["slice_walls"]), min(a["slice_walls"])), "%.1f" % a["cpu"],
                      "%.1f" % a["load"], "%d/%d" % (f["upgrades"], a["upgrades"]),
                      ",".join(str(v) for v in a["revisions"]), str(f["refused"] + a["refused"]), str(a["changed"])])
    if any("commit" in r for r in rows):  # a merged report (--slices-merge): the rows of several runs
        header += ("commit",)
        lines = [line + [r.get("commit", "")] for line, r in zip(lines, rows)]
    return fleet_common.markdown_table(header, lines)


def plot(rows, path):
    """Wall and CPU seconds against the slice count, one colour per fleet size; first converge and re-run."""
    plt, skipped = fleet_common.pyplot()
    if plt is None:
        return skipped
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = sorted(set(r["nodes"] for r in rows))
    for ax, run, title in ((axes[0], "first", "first converge"), (axes[1], "again", "re-run")):
        for i, nodes in enumerate(sizes):
            series = sorted((r for r in rows if r["nodes"] == nodes), key=lambda r: r["slices"])
            xs = [r["slices"] for r in series]
            ax.plot(xs, [r[run]["wall"] for r in series], "o-", color="C%d" % i, label="%d nodes, wall s" % nodes)
            ax.plot(xs, [r[run]["cpu"] for r in series], "s--", color="C%d" % i, alpha=0.6,
                    label="%d nodes, CPU s" % nodes)
            ax.set_xticks(sorted(set(r["slices"] for r in rows)))
        ax.set_xlabel("job slices (ansible-playbook runs at once)")
        ax.set_ylabel("seconds (whole fleet)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title("site.yml in slices: %s" % title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return "plot: %s" % path


def report(rows, args, note=""):
    out = ["%s UTC, commit %s, %d CPU(s) on %s, load average %s at the start." % (
           args.started, args.commit, getattr(args, "cpus", None) or os.cpu_count() or 0,
           getattr(args, "machine", None) or "this machine", args.load),
           "site.yml as AWX job slices: N ansible-playbook runs at once, each with --limit to AWX's slice of one "
           "inventory (hosts sorted by name, every N-th), forks %d each, serial %s; the first half of the nodes "
           "(rounded up) MIG all-balanced, the rest MPS x4; simulated GPUs (%s); against the fake Kubernetes API "
           "server (in the bench process) with the real helm and the fixture chart. The slices share a run id and "
           "the slice count (gpuops_run_id, gpuops_job_slices)." % (
               args.forks, args.serial or "site.yml's own (25%)", args.shape),
           "CPU s = user + system seconds of every slice's ansible-playbook process tree; wall s = until the last "
           "slice ended. helm upgrades: first converge / re-run (1/0: the release installed once, then untouched).",
           "", table(sorted(rows, key=lambda r: (r["nodes"], r["slices"])))]
    if note:
        out += ["", note]
    return "\n".join(out) + "\n"


def main(args):
    """The --slices measurement: every --nodes size with every --slices count, report and plot under --out."""
    counts = [int(n) for n in args.slices.split(",") if n]
    sizes = [int(n) for n in args.nodes.split(",") if n]
    if bool(args.slices_phase) != bool(args.slices_keep) or (args.slices_phase and len(counts) * len(sizes) != 1):
        raise SystemExit("--slices-phase (first or again) and --slices-keep DIR go together, with one --slices count "
                         "and one --nodes size")
    rows, errors = [], []
    extra_args = ["-e", "gpuops_serial=%s" % args.serial] if args.serial else []
    group_vars = dict(kv.split("=", 1) for kv in args.extra)
    for nodes in sizes:
        for count in counts:
            print("# %s: %d node(s) of %s as %d slice(s), forks %d (load %.1f)" % (
                time.strftime("%H:%M:%S"), nodes, args.shape, count, args.forks, os.getloadavg()[0]),
                file=sys.stderr)
            sys.stderr.flush()
            try:
                row = measure(nodes, count, args.shape, args.forks, args.mig_share, group_vars, extra_args,
                              keep=args.slices_keep, phase=args.slices_phase)
                if row is None:
                    print("# converged; the fleet is kept in %s for --slices-phase again" % args.slices_keep,
                          file=sys.stderr)
                else:
                    rows.append(row)
            except fleet_common.BenchError as exc:
                errors.append("ERROR (%d nodes, %d slices): %s" % (nodes, count, exc))
                print(errors[-1], file=sys.stderr)
            if args.out:
                _save(args, rows, errors)
    notes = list(errors)
    if args.out and len(rows) > 1:
        notes.append(plot(rows, os.path.join(args.out, "slices.svg")))
    text = report(rows, args, "\n\n".join(notes))
    if args.out:
        _save(args, rows, errors, text)
    print(text)
    return 1 if errors else 0


def merge(args):
    """--slices-merge A.json,B.json: one report and plot from the slices.json of several runs (a fleet measured in
    parts, e.g. one run per slice count where a whole run would not fit a time limit). Rows keep their own load;
    the header gives the first run's start and each run's commit; --cpus and --machine say where it ran when the
    JSON does not (runs before it recorded its CPU count)."""
    rows, errors, runs = [], [], []
    for path in args.slices_merge.split(","):
        with open(path) as handle:
            saved = json.load(handle)
        rows.extend(dict(row, commit=row.get("commit", saved["commit"])) for row in saved["rows"])
        errors.extend(saved.get("errors", []))
        runs.append(saved)
    first = runs[0]
    for key in ("started", "load", "forks", "serial", "shape"):
        setattr(args, key, first.get(key))
    args.commit = ", ".join(sorted(set(r["commit"] for r in runs)))
    args.cpus = args.cpus or first.get("cpus")
    notes = list(errors) + ["Merged from %d runs: %s." % (len(runs), "; ".join(
        "%s (commit %s, load %s at its start)" % (r["started"], r["commit"], r["load"]) for r in runs))]
    if args.out and len(rows) > 1:
        os.makedirs(args.out, exist_ok=True)
        notes.append(plot(rows, os.path.join(args.out, "slices.svg")))
    text = report(rows, args, "\n\n".join(notes))
    if args.out:
        with open(os.path.join(args.out, "slices.md"), "w") as handle:
            handle.write(text)
        with open(os.path.join(args.out, "slices.json"), "w") as handle:
            json.dump({"started": args.started, "load": args.load, "commit": args.commit, "forks": args.forks,
                       "cpus": args.cpus, "machine": args.machine, "serial": args.serial, "shape": args.shape,
                       "rows": rows, "errors": errors, "merged": args.slices_merge.split(",")},
                      handle, indent=1)
    print(text)
    return 1 if errors else 0


def _save(args, rows, errors, text=None):
    with open(os.path.join(args.out, "slices.md"), "w") as handle:
        handle.write(text or report(rows, args, "\n\n".join(errors)))
    with open(os.path.join(args.out, "slices.json"), "w") as handle:
        json.dump({"started": args.started, "load": args.load, "commit": args.commit, "forks": args.forks,
                   "cpus": os.cpu_count(),
                   "serial": args.serial, "shape": args.shape, "rows": rows, "errors": errors}, handle, indent=1)


def kill_run(proc):
    """SIGKILL a slice's ansible-playbook and every process it started, as when its controller is lost: ansible-core's
    workers run in sessions of their own, so its process group alone is not enough. Everything is stopped first
    (nothing new starts), then killed; returns when none of it is left."""
    victims = set()
    while True:
        tree = _tree(proc.pid) - victims
        if not tree:
            break
        for pid in tree:
            _signal(pid, signal.SIGSTOP)
        victims |= tree
    for pid in victims:
        _signal(pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 120
    while any(_live(pid) for pid in victims if pid != proc.pid):
        if time.monotonic() > deadline:
            raise fleet_common.BenchError("processes of the killed slice still alive after 120 s")
        time.sleep(0.2)


def _tree(root):
    """``root`` and its live descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _live(int(entry)):
            children.setdefault(proc_stat(int(entry))[1], []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def _live(pid):
    stat = proc_stat(pid)
    return bool(stat) and stat[0] not in ("Z", "X")


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
