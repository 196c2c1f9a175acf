"""Old against new: the same simulated fleets converged and re-run by two checkouts, side by side (issue 14).

`python bench/fleet.py --compare ada3a85 --out docs/readings` (fleet.py's --compare; the whole measurement of
issue 14 part a, about an hour on the 2-core machine):

- the base commit is exported with `git archive` into a temporary directory (no git state is touched) and set up to
  run like this checkout (its .venv, tools and collection link point at this checkout's); the working tree is the
  other side;
- per fleet (--nodes, default `1mig,1mps,10,25`: one 8 x H200 MIG node, one MPS node, fleets of 10 and 25 half MIG,
  half MPS), each side converges its own fresh fleet, then --repeat rounds (default 3) run, interleaved: base
  re-run, new re-run, base empty play, new empty play (the order of the two sides alternates each round), so both
  sides see the same machine and the same load;
- the empty play of each side mirrors that side's own re-run task by task (bench/fleet.py's empty_playbook): the
  ratio re-run / empty play says how close a re-run is to Ansible's own cost for the same plays;
- every run records CPU seconds of the ansible-playbook process tree, wall seconds and the 1-minute load average
  before it; the table gives the median and every run with its load. A re-run that changes anything is an error.

Writes fleet-compare.md and fleet-compare.json under --out.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import fleet_common
from fleet_common import BenchError, Run, batches, empty_playbook, task_counts

DEFAULT_FLEETS = "1mig,1mps,10,25"


def parse_fleets(text):
    """'1mig,1mps,10' -> [(1, 1.0, '1 MIG'), (1, 0.0, '1 MPS'), (10, 0.5, '10')]: nodes and share of MIG nodes."""
    out = []
    for item in [i.strip() for i in text.split(",") if i.strip()]:
        for suffix, share in (("mig", 1.0), ("mps", 0.0)):
            if item.endswith(suffix):
                out.append((int(item[:-len(suffix)]), share, "%s %s" % (item[:-len(suffix)], suffix.upper())))
                break
        else:
            out.append((int(item), 0.5, item))
    return out


def run_fleets(args, key, measure_one, save):
    """Every fleet of --nodes, in order: ``measure_one(nodes, share)`` is stored under ``key`` of the fleet's result;
    a BenchError is recorded as an error (and the next fleet measured), not raised; ``save(results, errors)`` runs
    after every fleet, so an interrupted run keeps what it measured. Returns (results, errors)."""
    results, errors = [], []
    for nodes, share, name in parse_fleets(args.nodes):
        print("# %s: %s node(s), %d rounds (load %.1f)" % (
            time.strftime("%H:%M:%S"), name, args.repeat, os.getloadavg()[0]), file=sys.stderr)
        try:
            results.append({"fleet": name, "nodes": nodes, key: measure_one(nodes, share)})
        except BenchError as exc:
            errors.append("ERROR (%s): %s" % (name, exc))
            print(errors[-1], file=sys.stderr)
        save(results, errors)
    return results, errors


def export(commit, dest):
    """`git archive` of ``commit`` in ``dest``, set up to run as this checkout does; returns its short hash."""
    full = subprocess.run(["git", "rev-parse", "--short", commit], cwd=fleet_common.ROOT, stdout=subprocess.PIPE,
                          universal_newlines=True, check=True).stdout.strip()
    archive = subprocess.Popen(["git", "archive", full], cwd=fleet_common.ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dest], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit("git archive %s failed" % commit)
    for name in (".venv", "tools"):
        os.symlink(os.path.realpath(os.path.join(fleet_common.ROOT, name)), os.path.join(dest, name))
    link = os.path.join(dest, ".collections", "ansible_collections", "gpuops")
    os.makedirs(link)
    os.symlink(dest, os.path.join(link, "nvidia"))
    return full


class Side(object):
    """One checkout: its site.yml, ansible.cfg and collection, and a fleet of its own."""

    def __init__(self, name, tree, commit):
        self.name, self.tree, self.commit = name, tree, commit

    def env(self, home):
        return {"HOME": home, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": "",
                "ANSIBLE_CONFIG": os.path.join(self.tree, "ansible.cfg"),
                "ANSIBLE_COLLECTIONS_PATH": os.path.join(self.tree, ".collections")}

    def run(self, playbook, inv, forks, home):
        return Run(playbook, inv, forks, self.env(home), cwd=self.tree)


def _figures(run):
    out = run.figures()
    return {"cpu": out["cpu"], "wall": out["wall"], "load": out["load"]}


def measure(sides, nodes, share, shape, forks, repeat):
    """One fleet size: each side converges a fresh fleet, then ``repeat`` interleaved rounds of re-runs and empty
    plays. Returns {side name: {...figures...}}."""
    fleets = {}
    try:
        for side in sides:
            tmp = tempfile.mkdtemp(prefix="gpuops-compare-")
            inv, mig = fleet_common.inventory(tmp, nodes, shape, share, repo=side.tree)
            first = side.run(os.path.join(side.tree, "site.yml"), inv, forks, tmp)
            fleets[side.name] = {"tmp": tmp, "inv": inv, "mig": mig, "first": _figures(first), "again": [],
                                 "empty": []}
        for r in range(repeat):
            order = sides if r % 2 == 0 else list(reversed(sides))
            for side in order:
                f = fleets[side.name]
                again = side.run(os.path.join(side.tree, "site.yml"), f["inv"], forks, f["tmp"])
                if again.changed_hosts():
                    raise BenchError("NOT IDEMPOTENT (%s): the re-run changed %s; tasks: %s" % (
                        side.name, again.changed_hosts()[:5], again.changed_tasks()[:10]))
                f["again"].append(_figures(again))
                if "empty_playbook" not in f:
                    shape_run = batches(again.data)
                    f["tasks"] = sorted(set(task_counts(shape_run, h) for h in again.stats))
                    f["empty_playbook"] = empty_playbook(f["tmp"], shape_run)
            for side in order:
                f = fleets[side.name]
                f["empty"].append(_figures(side.run(f["empty_playbook"], f["inv"], forks, f["tmp"])))
        return dict((name, dict((k, v) for k, v in f.items() if k not in ("tmp", "inv", "empty_playbook")))
                    for name, f in fleets.items())
    finally:
        for f in fleets.values():
            shutil.rmtree(f["tmp"], ignore_errors=True)


def _median(runs, key="cpu"):
    return statistics.median(r[key] for r in runs)


def _runs(runs, nodes):
    return ", ".join("%.2f (%.1f)" % (r["cpu"] / nodes, r["load"]) for r in runs)


def table(results, sides):
    header = ("fleet (MIG/MPS)", "checkout", "first converge: CPU s per node (load)",
              "re-run: CPU s per node, median", "each re-run (load)", "empty play: CPU s per node, median",
              "each empty play (load)", "re-run / empty play", "re-run wall s, median", "tasks per host (ran/skipped)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for res in results:
        nodes = res["nodes"]
        for side in sides:
            s = res["sides"][side.name]
            lines.append("| " + " | ".join([
                "%s (%d/%d)" % (res["fleet"], s["mig"], nodes - s["mig"]), "%s %s" % (side.name, side.commit),
                "%.2f (%.1f)" % (s["first"]["cpu"] / nodes, s["first"]["load"]),
                "%.2f" % (_median(s["again"]) / nodes), _runs(s["again"], nodes),
                "%.2f" % (_median(s["empty"]) / nodes), _runs(s["empty"], nodes),
                "%.2f" % (_median(s["again"]) / _median(s["empty"])), "%.1f" % _median(s["again"], "wall"),
                ", ".join("%d/%d" % t for t in s["tasks"])]) + " |")
        old, new = (res["sides"][side.name] for side in sides)
        notes.append("- %s: the new re-run costs %.0f%% of the old one's CPU seconds per node (medians); re-run / "
                     "empty play %.2f (old) and %.2f (new)." % (
                         res["fleet"], 100.0 * _median(new["again"]) / _median(old["again"]),
                         _median(old["again"]) / _median(old["empty"]), _median(new["again"]) / _median(new["empty"])))
    return "\n".join(lines), notes


def report(results, sides, args, errors):
    body, notes = table(results, sides)
    out = ["%s UTC, %d CPU(s), load average %s at the start; `%s`." % (
        args.started, os.cpu_count() or 0, args.load, args.command),
        "Old: %s (`git archive`); new: %s. Fleets of %s nodes (%d GPUs each), forks %d, site.yml's own serial (25%%); "
        "MIG nodes all-balanced, MPS nodes x4, lab group_vars, simulated GPUs, no cluster." % (
            sides[0].commit, sides[1].commit, args.shape, len(fleet_common.MACHINE_SHAPES[args.shape]), args.forks),
        "CPU s = user + system seconds of the ansible-playbook process tree, per node; in brackets the 1-minute load "
        "average before that run. Rounds interleaved: old and new re-run, then old and new empty play, the order of the"
        " two sides alternating each round.", "", body, ""] + notes
    if errors:
        out += [""] + errors
    return "\n".join(out) + "\n"


def main(args):
    sides_dir = tempfile.mkdtemp(prefix="gpuops-compare-base-")
    try:
        base = Side("old", sides_dir, export(args.compare, sides_dir))
        sides = [base, Side("new", fleet_common.ROOT, fleet_common.current_commit())]
        args.command = "python bench/fleet.py --compare %s --nodes %s --repeat %d" % (
            args.compare, args.nodes, args.repeat)

        def save(results, errors):
            if args.out:
                fleet_common.save_report(args.out, "fleet-compare", report(results, sides, args, errors), {
                    "started": args.started, "load": args.load, "command": args.command,
                    "sides": [[s.name, s.commit] for s in sides], "results": results, "errors": errors})

        results, errors = run_fleets(args, "sides", lambda nodes, share: measure(
            sides, nodes, share, args.shape, args.forks, args.repeat), save)
        print(report(results, sides, args, errors))
        return 1 if errors else 0
    finally:
        shutil.rmtree(sides_dir, ignore_errors=True)
