"""The floor under a re-run's cost (issue 14): how close to its empty play a re-run of site.yml can come at all,
given the one module run it cannot do without.

`python bench/fleet.py --floor --nodes 1mig,1mps --repeat 5 --out docs/readings` (fleet.py's --floor):

- per fleet (--nodes as for --compare: 1mig, 1mps, 10, ...), a fresh fleet is converged and re-run once (that re-run
  must change nothing); from that re-run come two playbooks with the same plays, batches and tasks:
  - the empty play (fleet.empty_playbook): every task replaced by ansible.builtin.ping where it ran a module and by
    ansible.builtin.debug where it ran only on the controller;
  - the floor play: the empty play, except that every task of --real (default gpuops.nvidia.gpu_node_plan, the
    node plan: it reads the GPUs and plans every step) runs that module again, on each host with the very
    arguments it had there in the re-run and the node's gpuops_environment;
- then --repeat rounds, each a re-run, an empty play and a floor play, recording CPU seconds of the
  ansible-playbook process tree, wall seconds and the 1-minute load average before each run. A re-run or floor
  play that changes anything, or fails, is an error.

floor / empty is what that module run costs above a ping, as a share of Ansible's own cost for the run. A playbook
that runs the module cannot cost less than the floor play, whatever else is restructured: a re-run / empty target
below floor / empty is out of reach of the playbook and roles, and only the module's own cost can move it.

Writes fleet-floor.md and fleet-floor.json under --out.
"""
import os
import shutil
import statistics
import tempfile

import fleet
from fleet import BenchError, Run, batches, empty_playbook, runs_real, task_counts
from fleet_compare import run_fleets

DEFAULT_REAL = "gpuops.nvidia.gpu_node_plan"


def measure(nodes, share, shape, forks, repeat, real):
    """One fleet: converge, one re-run to shape the two playbooks, then `repeat` rounds of re-run, empty and floor
    play. Returns the figures of every run."""
    tmp = tempfile.mkdtemp(prefix="gpuops-floor-")
    env = {"HOME": tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}
    try:
        inv, mig = fleet.inventory(tmp, nodes, shape, share)
        out = {"mig": mig, "first": Run(fleet.SITE, inv, forks, env).figures(), "again": [], "empty": [],
               "floor": []}
        shaping = Run(fleet.SITE, inv, forks, env)
        if shaping.changed_hosts():
            raise BenchError("NOT IDEMPOTENT: the re-run changed %s; tasks: %s" % (
                shaping.changed_hosts()[:5], shaping.changed_tasks()[:10]))
        shape_run = batches(shaping.data)
        kept = [t["name"] for b in shape_run for t in b["tasks"] if runs_real(t, real)]
        if not kept:
            raise BenchError("the re-run ran none of %s (as a module task without a loop): no floor play"
                             % ", ".join(real))
        out["real"] = sorted(set(kept))
        out["tasks"] = sorted(set(task_counts(shape_run, h) for h in shaping.stats))
        empty = empty_playbook(tmp, shape_run)
        floor = empty_playbook(tmp, shape_run, real=real, name="floor.yml")
        for dummy in range(repeat):
            for key, playbook in (("again", fleet.SITE), ("empty", empty), ("floor", floor)):
                run = Run(playbook, inv, forks, env)
                if run.changed_hosts():
                    raise BenchError("%s changed %s: %s" % (key, run.changed_hosts()[:5], run.changed_tasks()[:10]))
                if key != "again" and _ran(batches(run.data)) != _ran(shape_run):
                    raise BenchError("the %s play did not run and skip the re-run's tasks on the same hosts" % key)
                figures = run.figures()
                out[key].append({"cpu": figures["cpu"], "wall": figures["wall"], "load": figures["load"]})
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ran(shape):
    """Per task, in order: whether it ran a module, and the hosts it ran on and skipped."""
    return [(t["module"], t["ran"], t["skipped"]) for b in shape for t in b["tasks"]]


def _median(runs):
    return statistics.median(r["cpu"] for r in runs)


def table(results):
    header = ("fleet (MIG/MPS)", "re-run: CPU s, median", "empty play", "floor play", "re-run / empty",
              "floor / empty", "each run: re-run, empty, floor (load)", "tasks per host (ran/skipped)", "real task")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for res in results:
        s = res["figures"]
        again, empty, floor = _median(s["again"]), _median(s["empty"]), _median(s["floor"])
        rounds = "; ".join("%.2f, %.2f, %.2f (%.1f)" % (a["cpu"], e["cpu"], f["cpu"], a["load"])
                           for a, e, f in zip(s["again"], s["empty"], s["floor"]))
        lines.append("| " + " | ".join([
            "%s (%d/%d)" % (res["fleet"], s["mig"], res["nodes"] - s["mig"]), "%.2f" % again, "%.2f" % empty,
            "%.2f" % floor, "%.2f" % (again / empty), "%.2f" % (floor / empty), rounds,
            ", ".join("%d/%d" % t for t in s["tasks"]), "; ".join(s["real"])]) + " |")
    return "\n".join(lines)


def report(results, args, errors):
    out = ["%s UTC, %d CPU(s), load average %s at the start; commit %s; `%s`." % (
        args.started, os.cpu_count() or 0, args.load, args.commit, args.command),
        "Fleets of %s nodes (%d GPUs each), forks %d, site.yml's own serial (25%%); MIG nodes all-balanced, MPS nodes "
        "x4, lab group_vars, simulated GPUs, no cluster. CPU s = user + system seconds of the ansible-playbook process "
        "tree for the whole fleet; in brackets the 1-minute load average before the round's re-run. Each round: "
        "re-run, empty play, floor play." % (args.shape, len(fleet.MACHINE_SHAPES[args.shape]), args.forks),
        "", table(results), ""]
    if errors:
        out += errors
    return "\n".join(out) + "\n"


def main(args):
    real = tuple(a.strip() for a in (args.real or DEFAULT_REAL).split(",") if a.strip())
    args.command = "python bench/fleet.py --floor --nodes %s --repeat %d%s" % (
        args.nodes, args.repeat, " --real %s" % args.real if args.real else "")

    def save(results, errors):
        if args.out:
            fleet.save_report(args.out, "fleet-floor", report(results, args, errors), {
                "started": args.started, "load": args.load, "commit": args.commit, "command": args.command,
                "results": results, "errors": errors})

    results, errors = run_fleets(args, "figures", lambda nodes, share: measure(
        nodes, share, args.shape, args.forks, args.repeat, real), save)
    print(report(results, args, errors))
    return 1 if errors else 0
