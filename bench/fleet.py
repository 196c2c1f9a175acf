"""Benchmark: site.yml (or another playbook) over a fleet of simulated GPU nodes: first converge, idempotent re-run,
and how much of the re-run is Ansible's own overhead; how the cost grows with nodes and with GPUs per node.

The fleet is an inventory directory in a temporary directory, shaped like inventories/lab: group gpu_nodes with
children mig_nodes (MIG, all-balanced) and mps_nodes (MPS, 4 replicas per GPU), a copy of the lab's group_vars
(local connection, simulated GPUs, scratch files, the nvidia-ctk stand-in, the real containerd for validation, no
cluster), every node's state and files under the temporary directory. The first half of the nodes (rounded up)
are MIG nodes, the rest MPS nodes (--mig-share). Every node has the GPUs of --shape (default hgx-h200: 8 x H200).

Per fleet it runs, with --forks:
1. the playbook (first converge): no host may fail;
2. the playbook again (idempotent re-run): every host must report changed=0;
3. an "empty" playbook that mirrors the re-run task by task: the same plays and serial batches, each task replaced
   by ansible.builtin.ping where it ran a module and by ansible.builtin.debug where it ran only on the controller
   (set_fact, assert, include_*), run and skipped on the same hosts, with the same loops and run_once: Ansible's own
   cost for that run, with no work of ours in it.
A failed host or a change on the re-run is an error, not a figure: the bench reports it (naming the hosts and
tasks), goes on with the next fleet and exits 1. Each run records wall seconds, CPU seconds of the ansible-playbook
process tree (user + system, getrusage of the children around the run) and the 1-minute load average before it. On a shared machine the CPU seconds are the
figure to compare; wall seconds depend on what else runs.

--gpus-per-node 1,2,4,8 adds a series at --gpus-nodes nodes (default 10) with 1/2/4/8 x H200 per node
(shapes h200-x1, h200-x2, h200-x4, hgx-h200). --out DIR writes the report (markdown) there, and a plot of the
growth (SVG) when matplotlib imports. --issue8 is the whole measurement of issue 8.

Usage: python bench/fleet.py [--playbook PATH] [--nodes 1,10] [--forks 10] [--shape hgx-h200]
                             [--gpus-per-node 1,2,4,8 --gpus-nodes 10] [--empty-at 1,50] [--out DIR]
       python bench/fleet.py --issue8 --out docs/readings/fleet   # 1 and 50 nodes with the empty play,
                             # growth 10/25/50/100 nodes, 1/2/4/8 GPUs per node at 10 nodes
       python bench/fleet.py --quick                              # 2 single-GPU nodes (the test runs this)
       python bench/fleet.py --compare ada3a85 --out docs/readings  # old against new, side by side, interleaved
                             # (1 MIG node, 1 MPS node, 10 and 25 nodes; bench/fleet_compare.py)
       python bench/fleet.py --floor --nodes 1mig,1mps --repeat 5  # re-run, empty play, and the empty play with the
                             # node plan run for real: the floor under a re-run (bench/fleet_floor.py)
       python bench/fleet.py --slices 1,2,4 --nodes 50,200 --out docs/readings/fleet-slices
       python bench/fleet.py --slices-merge a/slices.json,b/slices.json --cpus 16 --out DIR  # runs made in parts
                             # site.yml as 1, 2 and 4 AWX job slices at once, with a cluster (bench/fleet_slices.py)
       python bench/fleet.py --sweep --nodes 10,50,200 --rerun-nodes 10 --sweep-faults 3 --out DIR
                             # the health sweep (health.yml) against a fake cluster, and a converged re-run: CPU s
                             # per node, median of --repeat (bench/sweep.py)
       python bench/fleet.py --sweep-merge a/sweep.json,b/sweep.json --out DIR  # sweep runs made in parts
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from fleet_common import (  # (bench/fleet_common.py, beside this file)
    MACHINE_SHAPES, ROOT, SITE, BenchError, Run, batches, current_commit, empty_playbook, inventory, markdown_table,
    pyplot, task_counts)

# GPUs per node -> the simulator's all-H200 shape (1: h200-x1, 2: h200-x2, 4: h200-x4, 8: hgx-h200)
H200_SHAPES = dict((len(models), shape) for shape, models in MACHINE_SHAPES.items() if set(models) == {"H200"})


def measure(playbook, nodes, shape, forks, empty, mig_share=0.5, extra=None, args=()):
    """First converge, re-run (must change nothing) and optionally the empty play, on a fresh fleet; `args`:
    more ansible-playbook arguments for the playbook's two runs."""
    tmp = tempfile.mkdtemp(prefix="gpuops-fleet-")
    env = {"HOME": tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}
    try:
        inv, mig = inventory(tmp, nodes, shape, mig_share, extra)
        row = {"nodes": nodes, "shape": shape, "gpus": len(MACHINE_SHAPES[shape]), "mig": mig, "forks": forks}
        row["first"] = Run(playbook, inv, forks, env, args).figures()
        again = Run(playbook, inv, forks, env, args)
        row["again"] = again.figures()
        if again.changed_hosts():
            raise BenchError("NOT IDEMPOTENT: the re-run of %s changed %d host(s) %s; tasks: %s" % (
                playbook, len(again.changed_hosts()), again.changed_hosts()[:5], again.changed_tasks()[:10]))
        shape_run = batches(again.data)
        counts = dict((h, task_counts(shape_run, h)) for h in again.stats)
        row["tasks"] = ", ".join("%d/%d" % c for c in sorted(set(counts.values())))
        if empty:
            empty_run = Run(empty_playbook(tmp, shape_run), inv, forks, env)
            row["empty"] = empty_run.figures()
            empty_counts = dict((h, task_counts(batches(empty_run.data), h)) for h in empty_run.stats)
            assert empty_counts == counts, (counts, empty_counts)
        return row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def converge_table(rows):
    header = ("nodes (MIG/MPS)", "GPUs per node", "first converge: wall s", "CPU s", "CPU s per node",
              "load before", "re-run: wall s", "CPU s", "CPU s per node", "load before", "changed on re-run",
              "tasks per host on re-run (ran/skipped)")
    lines = []
    for r in rows:
        f, a = r["first"], r["again"]
        n = r["nodes"]
        lines.append(["%d (%d/%d)" % (n, r["mig"], n - r["mig"]), str(r["gpus"]),
                      "%.1f" % f["wall"], "%.1f" % f["cpu"], "%.2f" % (f["cpu"] / n), "%.1f" % f["load"],
                      "%.1f" % a["wall"], "%.1f" % a["cpu"], "%.2f" % (a["cpu"] / n), "%.1f" % a["load"],
                      str(a["changed"]), r["tasks"]])
    return markdown_table(header, lines)


def overhead_table(rows):
    header = ("nodes", "GPUs per node", "re-run: wall s", "CPU s", "empty play: wall s", "CPU s", "load before",
              "Ansible's own share of the re-run (CPU)", "(wall)")
    lines = []
    for r in rows:
        a, e = r["again"], r["empty"]
        lines.append([str(r["nodes"]), str(r["gpus"]), "%.1f" % a["wall"], "%.1f" % a["cpu"], "%.1f" % e["wall"],
                      "%.1f" % e["cpu"], "%.1f" % e["load"], "%.0f%%" % (100.0 * e["cpu"] / a["cpu"]),
                      "%.0f%%" % (100.0 * e["wall"] / a["wall"])])
    return markdown_table(header, lines)


def plot(rows, path):
    """Total CPU and wall seconds against nodes and against GPUs per node; returns a note on what was written."""
    plt, skipped = pyplot()
    if plt is None:
        return skipped
    by_nodes = sorted((r for r in rows if r["gpus"] == 8), key=lambda r: r["nodes"])
    series_n, by_gpus = _gpu_series(rows)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, series, key, label in ((axes[0], by_nodes, "nodes", "nodes (8 x H200 each)"),
                                   (axes[1], by_gpus, "gpus", "H200 GPUs per node (%d nodes)" % series_n)):
        xs = [r[key] for r in series]
        for run, marker, color, name in (("first", "o", "C0", "first converge"), ("again", "s", "C2", "re-run")):
            ax.plot(xs, [r[run]["cpu"] for r in series], marker + "-", color=color, label=name + ", CPU s")
            ax.plot(xs, [r[run]["wall"] for r in series], marker + "--", color=color, alpha=0.5,
                    label=name + ", wall s")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds (whole fleet)")
        ax.set_xticks(xs)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("site.yml: growth with nodes")
    axes[1].set_title("site.yml: growth with GPUs per node")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return "plot: %s" % path


def _shown(path):
    """A path relative to the repository when it is inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def _gpu_series(rows):
    """The rows of the GPUs-per-node series: the fleet size with the most GPU counts."""
    by_nodes = {}
    for r in rows:
        by_nodes.setdefault(r["nodes"], []).append(r)
    if not by_nodes:
        return 0, []
    nodes = max(by_nodes, key=lambda n: (len(set(r["gpus"] for r in by_nodes[n])), n))
    return nodes, sorted(by_nodes[nodes], key=lambda r: r["gpus"])


def growth(rows):
    """Least-squares lines through the fleet's total CPU seconds: against nodes (8-GPU fleets of 2 nodes or more,
    half MIG, half MPS) and against GPUs per node."""
    out = []
    fleets = sorted((r for r in rows if r["gpus"] == 8 and r["nodes"] > 1), key=lambda r: r["nodes"])
    nodes, by_gpus = _gpu_series(rows)
    for series, key, unit in ((fleets, "nodes", "node"), (by_gpus, "gpus", "GPU per node (%d nodes)" % nodes)):
        if len(set(r[key] for r in series)) < 3:
            continue
        for run, name in (("first", "first converge"), ("again", "re-run")):
            fit = statistics.linear_regression([r[key] for r in series], [r[run]["cpu"] for r in series])
            out.append("- %s: total CPU s = %.1f %s %.2f per %s (least squares over %s = %s)" % (
                name, fit.intercept, "-" if fit.slope < 0 else "+", abs(fit.slope), unit, key,
                ", ".join(str(r[key]) for r in series)))
    return out


def report(rows, args, note=""):
    out = ["%s UTC, commit %s, %d CPU(s) on this machine, load average %s at the start." % (
           args.started, args.commit, os.cpu_count() or 0, args.load),
           "playbook: %s; forks %d; serial %s; nodes: the first half (rounded up) MIG all-balanced "
           "(group mig_nodes), the rest MPS x4 (mps_nodes), lab group_vars; simulated GPUs." % (
               _shown(args.playbook), args.forks, args.serial or "site.yml's own (25%)"),
           "CPU s = user + system seconds of the ansible-playbook process tree (comparable on a shared machine); "
           "wall s depends on the load.", "",
           "### First converge and idempotent re-run (totals for the fleet)", "",
           converge_table(sorted(rows, key=lambda r: (r["gpus"], r["nodes"])))]
    with_empty = [r for r in rows if "empty" in r]
    if with_empty:
        out += ["", "### Ansible's own overhead: an empty play with the same plays, batches and tasks per host",
                "", overhead_table(sorted(with_empty, key=lambda r: (r["gpus"], r["nodes"])))]
    lines = growth(rows)
    if lines:
        out += ["", "### Growth", ""] + lines
    if note:
        out += ["", note]
    return "\n".join(out) + "\n"


def plan(args):
    """The (nodes, shape, empty play?) runs to make, in order, without repeats."""
    if args.shape not in MACHINE_SHAPES:
        raise SystemExit("--shape %s: unknown; valid: %s" % (args.shape, ", ".join(sorted(MACHINE_SHAPES))))
    empty_at = None if args.empty_at is None else set(int(n) for n in args.empty_at.split(",") if n)
    runs = []
    for n in [int(n) for n in args.nodes.split(",") if n]:
        runs.append((n, args.shape, empty_at is None or n in empty_at))
    for g in [int(g) for g in (args.gpus_per_node or "").split(",") if g]:
        if g not in H200_SHAPES:
            raise SystemExit("--gpus-per-node: %d has no H200 shape; valid: %s" % (g, sorted(H200_SHAPES)))
        runs.append((args.gpus_nodes, H200_SHAPES[g], empty_at is not None and args.gpus_nodes in empty_at
                     and H200_SHAPES[g] == args.shape))
    seen, out = set(), []
    for run in runs:
        if run[:2] not in seen:
            seen.add(run[:2])
            out.append(run)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--playbook", default=SITE, help="default: site.yml")
    parser.add_argument("--nodes", default="1,10", help="comma-separated fleet sizes, run in this order (default 1,10)")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--shape", default="hgx-h200", help="simulated machine of every node (default hgx-h200)")
    parser.add_argument("--gpus-per-node", default="", help="e.g. 1,2,4,8: a series of 1/2/4/8 x H200 nodes")
    parser.add_argument("--gpus-nodes", type=int, default=10, help="nodes in the --gpus-per-node series (10)")
    parser.add_argument("--empty-at", default=None, help="fleet sizes that also get the empty play (default: all)")
    parser.add_argument("--mig-share", type=float, default=0.5, help="share of MIG nodes, rounded up (default 0.5)")
    parser.add_argument("--serial", help="batch size for site.yml (-e gpuops_serial=...; default: its own 25%%)")
    parser.add_argument("--out", help="directory for the report (fleet.md) and the growth plot (fleet.svg)")
    parser.add_argument("--issue8", action="store_true",
                        help="nodes 1,50,10,25,100 (empty play at 1 and 50), 1/2/4/8 GPUs per node at 10 nodes")
    parser.add_argument("--quick", action="store_true",
                        help="2 single-GPU nodes (one MIG, one MPS), forks 2, one batch (the test runs this)")
    parser.add_argument("--replot", metavar="FLEET_JSON", help="the report and plot again from a run's fleet.json")
    parser.add_argument("-e", "--extra", action="append", default=[], help="KEY=VALUE group var for every node")
    parser.add_argument("--compare", metavar="COMMIT", help="old against new: this commit (git archive) and the working "
                        "tree, the same fleets interleaved; --nodes default 1mig,1mps,10,25 (bench/fleet_compare.py)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of re-run and empty play per side (--compare), or of re-run, empty and floor play")
    parser.add_argument("--floor", action="store_true", help="the floor under a re-run: its empty play with the node "
                        "plan run for real; --nodes default 1mig,1mps (bench/fleet_floor.py)")
    parser.add_argument("--real", help="with --floor: the actions that run for real (default gpuops.nvidia.gpu_node_plan)")
    parser.add_argument("--slices", help="e.g. 1,2,4: site.yml as that many AWX job slices at once against the fake "
                        "API server and the real helm, for every --nodes size (bench/fleet_slices.py)")
    parser.add_argument("--slices-merge", metavar="A.json,B.json",
                        help="one --slices report and plot from several runs' slices.json (bench/fleet_slices.py)")
    parser.add_argument("--slices-phase", choices=["first", "again"],
                        help="with --slices-keep: only the first converge (the fleet kept there), or only the re-run "
                        "of the fleet kept there (one row over two commands). Keep containerd and nvidia-ctk the same "
                        "files in between (-e containerd_runtime_containerd_path=... and ..._nvidia_ctk_path=...): "
                        "replaced, they make every node check containerd in full, and the bench refuses that re-run")
    parser.add_argument("--slices-keep", metavar="DIR", help="with --slices-phase: where the fleet is kept")
    parser.add_argument("--cpus", type=int, help="with --slices-merge: the CPUs of the machine the runs ran on")
    parser.add_argument("--machine", help="with --slices-merge: that machine, in words")
    parser.add_argument("--sweep", action="store_true", help="the health sweep (health.yml) at every --nodes size "
                        "(default 10,50,200) against a fake cluster, and a converged site.yml re-run at --rerun-nodes: "
                        "CPU s per node, median of --repeat (bench/sweep.py)")
    parser.add_argument("--sweep-faults", type=int, default=0,
                        help="with --sweep: also a fleet of each size with this many faulty nodes (within the breaker)")
    parser.add_argument("--sweep-merge", metavar="A.json,B.json",
                        help="one --sweep report and plot from several runs' sweep.json (bench/sweep.py)")
    parser.add_argument("--rerun-nodes", default="10", help="with --sweep: the re-run's fleet sizes (default 10; "
                        "empty: none)")
    args = parser.parse_known_args(argv)[0]
    if args.slices_merge:
        import fleet_slices  # (bench/fleet_slices.py, beside this file)
        return fleet_slices.merge(args)
    if args.issue8:
        args.nodes, args.empty_at, args.gpus_per_node, args.gpus_nodes = "1,50,10,25", "1,50", "1,2,4,8", 10
    if args.quick:
        args.nodes, args.shape, args.forks, args.gpus_per_node, args.serial = "2", "h200-x1", 2, "", "2"
    extra = dict(kv.split("=", 1) for kv in args.extra)
    if args.compare:
        import fleet_compare  # (bench/fleet_compare.py, beside this file)
        if args.nodes == parser.get_default("nodes"):
            args.nodes = fleet_compare.DEFAULT_FLEETS
        args.started, args.load = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "%.1f/%.1f/%.1f" % os.getloadavg()
        return fleet_compare.main(args)
    if args.sweep_merge:
        import sweep  # (bench/sweep.py, beside this file)
        return sweep.merge(args)
    if args.sweep:
        import sweep  # (bench/sweep.py, beside this file)
        if args.nodes == parser.get_default("nodes"):
            args.nodes = "10,50,200"
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        args.started, args.load = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "%.1f/%.1f/%.1f" % os.getloadavg()
        args.commit = current_commit()
        return sweep.main(args)
    if args.floor:
        import fleet_floor  # (bench/fleet_floor.py, beside this file)
        if args.nodes == parser.get_default("nodes"):
            args.nodes = "1mig,1mps"
        args.started, args.load = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "%.1f/%.1f/%.1f" % os.getloadavg()
        args.commit = current_commit()
        return fleet_floor.main(args)
    runs = plan(args)
    if args.issue8:
        runs.append((100, args.shape, False))  # last: the longest, after everything else is in the report
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    args.started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    args.load = "%.1f/%.1f/%.1f" % os.getloadavg()
    args.commit = current_commit()
    if args.slices:
        import fleet_slices  # (bench/fleet_slices.py, beside this file)
        return fleet_slices.main(args)
    rows, errors = [], []
    if args.replot:
        with open(args.replot) as handle:
            saved = json.load(handle)
        for key in ("started", "load", "commit", "playbook", "forks", "serial"):
            setattr(args, key, saved.get(key))
        args.playbook = os.path.join(ROOT, args.playbook)  # (an absolute path stays as it is)
        rows, errors, runs = saved["rows"], saved["errors"], []
    for nodes, shape, empty in runs:
        print("# %s: %d node(s) of %s, forks %d%s (load %.1f)" % (
            time.strftime("%H:%M:%S"), nodes, shape, args.forks, ", with the empty play" if empty else "",
            os.getloadavg()[0]), file=sys.stderr)
        sys.stderr.flush()
        try:
            rows.append(measure(args.playbook, nodes, shape, args.forks, empty, args.mig_share, extra,
                                ["-e", "gpuops_serial=%s" % args.serial] if args.serial else []))
        except BenchError as exc:  # an error, not a figure: say so, and go on with the other fleets
            errors.append("ERROR (%d nodes of %s): %s" % (nodes, shape, exc))
            print(errors[-1], file=sys.stderr)
        if args.out:  # after every fleet, so an interrupted run keeps what it measured
            with open(os.path.join(args.out, "fleet.md"), "w") as handle:
                handle.write(report(rows, args, "\n\n".join(errors)))
            with open(os.path.join(args.out, "fleet.json"), "w") as handle:
                json.dump({"started": args.started, "load": args.load, "commit": args.commit, "forks": args.forks,
                           "serial": args.serial, "playbook": _shown(args.playbook), "rows": rows, "errors": errors},
                          handle, indent=1)
    notes = list(errors)
    if args.out and len(rows) > 1:
        notes.append(plot(rows, os.path.join(args.out, "fleet.svg")))
    text = report(rows, args, "\n\n".join(notes))
    if args.out:
        with open(os.path.join(args.out, "fleet.md"), "w") as handle:
            handle.write(text)
    print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
