"""bench/fleet.py --sweep: the fleet health sweep (health.yml, issue 50) over simulated fleets, against a converged
site.yml re-run measured in the same session: CPU seconds of the ansible-playbook process tree per node.

Per --nodes size: a fresh fleet (bench/fleet_common.py's inventory: the lab's group_vars, every node of --shape), each
node's simulated GPUs created as the test of the sweep creates them (tests/integration/test_health_sweep.py), and a
fake Kubernetes API server (tests/support/fake_kube_api.py) listing every node labelled nvidia.com/gpu.present=true,
so the quarantine runs for real under its Lease. A first sweep (the nodes' cursors written: a new boot seen), then
--repeat sweeps of the now steady fleet: the median is the figure. With --sweep-faults K, a second fleet of each size
has K nodes with a fault on one GPU before its first sweep (at most what the circuit breaker allows at its defaults,
so that the sweep does not fail): they are quarantined by the first sweep and kept by the others.

The re-run: at --rerun-nodes (default 10) nodes of --shape, a first converge of site.yml, then --repeat re-runs, each
with changed=0 on every host (no cluster: the lab's default, as docs/readings/fleet-site-2cores.md measured it).
"""
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

import yaml

from fleet_common import (  # (bench/fleet_common.py, beside this file)
    ROOT, SITE, BenchError, Run, batches, inventory, markdown_table, pyplot, save_report, task_counts)

sys.path.insert(0, ROOT)
# pylint: disable=wrong-import-position
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend  # noqa: E402
from tests.support.fake_kube_api import FakeKubeApi  # noqa: E402
# pylint: enable=wrong-import-position

SWEEP = os.path.join(ROOT, "health.yml")
TAINT = "gpuops.nvidia/gpu-unhealthy"  # the quarantine's mark
# the faults of a faulty fleet, one per faulty node in turn: each blocking in the default policy
FAULTS = (("row_remap_pending", True), ("ecc_volatile_uncorrected", 2), ("row_remap_failure", True))


def breaker_limit(nodes, percent=10, max_nodes=10):
    """Nodes the circuit breaker lets one window quarantine at its defaults (docs/health.md, "The sweep")."""
    return min(int(math.ceil(nodes * percent / 100.0)), max_nodes)


def fault_plan(names, faults):
    """[(node, fault, value)]: `faults` nodes (at most the breaker's limit) spread over the sorted `names`."""
    names = sorted(names)
    count = min(faults, breaker_limit(len(names)))
    step = len(names) // count if count else 1
    return [(names[i * step], FAULTS[i % len(FAULTS)][0], FAULTS[i % len(FAULTS)][1]) for i in range(count)]


def median(runs):
    """One figure per key (wall, cpu, load, ...): the median over the runs' figures."""
    return dict((k, statistics.median(r[k] for r in runs)) for k in runs[0])


def _env(tmp):
    return {"HOME": tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}


def sweep_fleet(nodes, shape, forks, repeat, faults=0):
    """A first sweep and `repeat` more of one fresh fleet; the row of its figures."""
    tmp = tempfile.mkdtemp(prefix="gpuops-sweep-")
    api = FakeKubeApi(tokens=None).start()
    try:
        inv, mig = inventory(tmp, nodes, shape)
        names = ["node-%03d" % i for i in range(nodes)]
        state = os.path.join(tmp, "state")
        os.makedirs(state)
        sims = {}
        for i, name in enumerate(names):
            api.add_node(name, internal_ip="10.0.%d.%d" % (i // 200, 10 + i % 200),
                         labels={"nvidia.com/gpu.present": "true"})
            sims[name] = SimulatedBackend(os.path.join(state, name + ".json"), shape=shape,
                                          root=os.path.join(state, name))
            sims[name].read_all()
        plan = fault_plan(names, faults)
        for name, fault, value in plan:
            sims[name].inject_health(0, fault, value)
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(api.kubeconfig(), handle)
        args = ["-e", "gpuops_kubeconfig=%s" % kubeconfig]
        row = {"series": "sweep", "nodes": nodes, "shape": shape, "mig": mig, "forks": forks,
               "faults": [list(f) for f in plan], "runs": []}
        for i in range(repeat + 1):
            writes = len(api.writes(accepted=True))
            self_before = resource.getrusage(resource.RUSAGE_SELF)
            run = Run(SWEEP, inv, forks, _env(tmp), args)
            self_after = resource.getrusage(resource.RUSAGE_SELF)
            figures = run.figures()
            # the bench's own process: the fake API server's threads and the parse of the run's output
            figures["bench_cpu"] = (self_after.ru_utime - self_before.ru_utime) + (
                self_after.ru_stime - self_before.ru_stime)
            figures["api_writes"] = len([w for w in api.writes(accepted=True)[writes:] if "/leases/" not in w["path"]])
            figures["quarantined"] = len([n for n in names if any(
                t["key"] == TAINT for t in api.get("", "nodes", n)["spec"].get("taints") or [])])
            if i == 0:
                row["first"] = figures
                counts = set(task_counts(batches(run.data), h) for h in run.stats)
                row["tasks"] = ", ".join("%d/%d" % c for c in sorted(counts))
            else:
                row["runs"].append(figures)
            if figures["quarantined"] != len(plan):
                raise BenchError("sweep %d of %d nodes: %d quarantined, %d faults injected" % (
                    i, nodes, figures["quarantined"], len(plan)))
        row["median"] = median(row["runs"])
        return row
    finally:
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def rerun_fleet(nodes, shape, forks, repeat):
    """A first converge of site.yml and `repeat` re-runs (each changing nothing) of one fresh fleet."""
    tmp = tempfile.mkdtemp(prefix="gpuops-rerun-")
    try:
        inv, mig = inventory(tmp, nodes, shape)
        row = {"series": "rerun", "nodes": nodes, "shape": shape, "mig": mig, "forks": forks, "runs": []}
        row["first"] = Run(SITE, inv, forks, _env(tmp)).figures()
        for dummy in range(repeat):
            again = Run(SITE, inv, forks, _env(tmp))
            if again.changed_hosts():
                raise BenchError("NOT IDEMPOTENT: the re-run changed %s; tasks: %s" % (
                    again.changed_hosts()[:5], again.changed_tasks()[:10]))
            row["runs"].append(again.figures())
        row["median"] = median(row["runs"])
        return row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verdict(rows):
    """Whether every sweep's median CPU s per node is at most the re-run's (the lowest re-run fleet's); a line."""
    reruns = [r for r in rows if r["series"] == "rerun"]
    sweeps = [r for r in rows if r["series"] == "sweep"]
    if not reruns or not sweeps:
        return None, "target not evaluated: no %s measured" % ("re-run" if not reruns else "sweep")
    bound = min(r["median"]["cpu"] / r["nodes"] for r in reruns)
    worst = max(sweeps, key=lambda r: r["median"]["cpu"] / r["nodes"])
    per_node = worst["median"]["cpu"] / worst["nodes"]
    met = per_node <= bound
    return met, "target %s: the sweep's highest median CPU s per node, %.3f (%d nodes%s), is %s the converged " \
        "re-run's %.3f (%.0f %%)" % ("MET" if met else "NOT MET", per_node, worst["nodes"],
                                     ", %d faulty" % len(worst["faults"]) if worst.get("faults") else "",
                                     "at most" if met else "above", bound, 100.0 * per_node / bound)


def table(rows):
    header = ("run", "nodes", "faulty nodes", "first: CPU s", "wall s", "median of repeats: CPU s", "CPU s per node",
              "wall s", "wall s per node", "load before", "repeats: CPU s", "quarantined", "API writes: first, last sweep",
              "fake API + bench CPU s")
    lines = []
    for r in rows:
        m, f = r["median"], r["first"]
        lines.append(["sweep (health.yml)" if r["series"] == "sweep" else "converged re-run (site.yml)",
                      str(r["nodes"]), str(len(r.get("faults", []))) if r["series"] == "sweep" else "-",
                      "%.1f" % f["cpu"], "%.1f" % f["wall"], "%.1f" % m["cpu"], "%.3f" % (m["cpu"] / r["nodes"]),
                      "%.1f" % m["wall"], "%.3f" % (m["wall"] / r["nodes"]), "%.1f" % m["load"],
                      ", ".join("%.1f" % x["cpu"] for x in r["runs"]),
                      str(r["runs"][-1].get("quarantined", "-")),
                      "%s, %s" % (f["api_writes"], r["runs"][-1]["api_writes"]) if "api_writes" in f else "-",
                      "%.2f" % m["bench_cpu"] if "bench_cpu" in m else "-"])
    return markdown_table(header, lines)


def plot(rows, path):
    """CPU s per node (median) against nodes: the sweep (healthy, faulty) and the re-run; a note on what was written."""
    plt, skipped = pyplot()
    if plt is None:
        return skipped
    fig, ax = plt.subplots(figsize=(7, 4.2))
    series = (("sweep", False, "o-", "C0", "health sweep, healthy fleet"),
              ("sweep", True, "^-", "C3", "health sweep, faulty nodes"),
              ("rerun", False, "s-", "C2", "converged site.yml re-run"))
    for kind, faulty, style, color, name in series:
        pts = sorted((r["nodes"], r["median"]["cpu"] / r["nodes"]) for r in rows
                     if r["series"] == kind and bool(r.get("faults")) == faulty)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=name)
    reruns = [r for r in rows if r["series"] == "rerun"]
    if reruns:  # the target: the lowest re-run's CPU s per node
        low = min(reruns, key=lambda r: r["median"]["cpu"] / r["nodes"])
        ax.axhline(low["median"]["cpu"] / low["nodes"], color="C2", linestyle=":", alpha=0.7,
                   label="target: the re-run's CPU s per node at %d nodes" % low["nodes"])
    ax.set_xscale("log")
    ax.set_xticks(sorted(set(r["nodes"] for r in rows)))
    from matplotlib.ticker import NullFormatter, ScalarFormatter  # pylint: disable=import-outside-toplevel
    ax.get_xaxis().set_major_formatter(ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(NullFormatter())
    ax.set_xlabel("nodes (%s each)" % rows[0]["shape"])
    ax.set_ylabel("CPU s per node (median of repeats)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("health.yml sweep against a converged re-run")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return "plot: %s" % os.path.basename(path)


def report(rows, args, notes=()):
    met, line = verdict(rows)
    out = ["%s UTC, commit %s, %d CPU(s) on this machine, load average %s at the start, %s at the end." % (
           args.started, args.commit, os.cpu_count() or 0, args.load, getattr(args, "load_end", "-")),
           "forks %d; every node %s; repeats %d (the median is the figure; the first run of a fleet is shown apart)."
           % (args.forks, args.shape, args.repeat),
           "CPU s = user + system seconds of the ansible-playbook process tree (getrusage of the children); the fake "
           "API server runs in the bench's own process and is not in it (its column).", "",
           table(rows), "", line]
    return "\n".join(out + [""] + list(notes)) + "\n"


def merge(args):
    """One report and plot from several --sweep runs' sweep.json (--sweep-merge A.json,B.json): their rows in order,
    the first one's start, the last one's end."""
    saved = []
    for path in args.sweep_merge.split(","):
        with open(path) as handle:
            saved.append(json.load(handle))
    for key in ("started", "load", "commit", "forks", "shape", "repeat"):
        setattr(args, key, saved[0][key])
    args.load_end = saved[-1]["load_end"]
    commits = sorted(set(s["commit"] for s in saved))
    args.commit = ", ".join(commits)
    rows = [r for s in saved for r in s["rows"]]
    errors = [e for s in saved for e in s["errors"]]
    notes = errors + ["Merged from %d runs started %s." % (len(saved), ", ".join(s["started"] for s in saved))]
    if args.out:
        save_report(args.out, "sweep", "", {"runs": saved, "rows": rows, "errors": errors})
    return finish(rows, args, notes, errors)


def finish(rows, args, notes, errors):
    """The plot (under --out, where there are rows), the report printed and written as sweep.md; 1 on an error."""
    if args.out and rows:
        notes.append(plot(rows, os.path.join(args.out, "sweep.svg")))
    text = report(rows, args, notes)
    if args.out:
        with open(os.path.join(args.out, "sweep.md"), "w") as handle:
            handle.write(text)
    print(text)
    return 1 if errors else 0


def main(args):
    """The --sweep runs of fleet.py's arguments; the report (and sweep.json, sweep.svg under --out); 1 on an error."""
    sizes = [int(n) for n in args.nodes.split(",") if n]
    todo = [("rerun", n, 0) for n in [int(n) for n in args.rerun_nodes.split(",") if n]]
    todo += [("sweep", n, 0) for n in sizes] + [("sweep", n, args.sweep_faults) for n in sizes if args.sweep_faults]
    rows, errors = [], []
    for kind, nodes, faults in todo:
        print("# %s: %s, %d node(s)%s (load %.1f)" % (time.strftime("%H:%M:%S"), kind, nodes,
                                                      ", %d faulty" % faults if faults else "", os.getloadavg()[0]),
              file=sys.stderr)
        try:
            if kind == "rerun":
                rows.append(rerun_fleet(nodes, args.shape, args.forks, args.repeat))
            else:
                rows.append(sweep_fleet(nodes, args.shape, args.forks, args.repeat, faults))
        except BenchError as exc:
            errors.append("ERROR (%s, %d nodes): %s" % (kind, nodes, exc))
            print(errors[-1], file=sys.stderr)
        args.load_end = "%.1f/%.1f/%.1f" % os.getloadavg()
        if args.out:
            save_report(args.out, "sweep", report(rows, args, errors), {
                "started": args.started, "load": args.load, "load_end": args.load_end, "commit": args.commit,
                "forks": args.forks, "shape": args.shape, "repeat": args.repeat, "rows": rows, "errors": errors})
    return finish(rows, args, list(errors), errors)
