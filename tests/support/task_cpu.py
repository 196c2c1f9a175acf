"""The CPU seconds of a test's ansible runs per task and per module (issue 49), from the lines that
tests/support/compile_cache/gpuops_task_cpu.py writes where GPUOPS_TEST_TASK_CPU names a file:

    GPUOPS_TEST_TASK_CPU=/tmp/cpu.tsv .venv/bin/python -m pytest -q -n 2 tests/integration/test_health_sweep.py
    .venv/bin/python -m tests.support.task_cpu /tmp/cpu.tsv [--top 30]

Per task (every host and run together): how many workers ran it, their own CPU seconds (the controller's share:
templating, conditionals, the action plugin) and their children's (the module processes and what those waited
for). Per module: its runs and their own CPU seconds. Per program (ansible-playbook, stand-ins, wrappers): its runs
and own seconds. The sum of the workers' own seconds is the per-task price of the strategy's forks; a task whose
workers' own seconds are high next to the others (a template over every host's hostvars on every host) shows first.
"""
import argparse
import collections
import sys

FIELDS = ("kind", "name", "host", "own", "children", "pid", "extra")


def read(path):
    """The file's lines as dicts (FIELDS; own and children as floats); a line cut short is left out."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != len(FIELDS):
                continue
            row = dict(zip(FIELDS, parts))
            try:
                row["own"], row["children"] = float(row["own"]), float(row["children"])
            except ValueError:
                continue
            rows.append(row)
    return rows


def summarize(rows):
    """{"tasks": [(name, workers, own s, children s)], "modules": [(name, runs, own s)], "programs": [...]}, each the
    costliest first (a task by its own plus its children's seconds), and "totals"."""
    tasks = collections.OrderedDict()
    modules, programs = collections.OrderedDict(), collections.OrderedDict()
    for row in rows:
        if row["kind"] == "worker":
            entry = tasks.setdefault(row["name"], [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += row["own"]
            entry[2] += row["children"]
        else:
            table = modules if row["kind"] == "module" else programs
            entry = table.setdefault(row["name"], [0, 0.0])
            entry[0] += 1
            entry[1] += row["own"]
    return {
        "tasks": sorted(((n, c, o, k) for n, (c, o, k) in tasks.items()), key=lambda t: -(t[2] + t[3])),
        "modules": sorted(((n, c, o) for n, (c, o) in modules.items()), key=lambda t: -t[2]),
        "programs": sorted(((n, c, o) for n, (c, o) in programs.items()), key=lambda t: -t[2]),
        "totals": {"workers": sum(t[0] for t in tasks.values()), "workers_own": sum(t[1] for t in tasks.values()),
                   "modules": sum(m[0] for m in modules.values()), "modules_own": sum(m[1] for m in modules.values()),
                   "programs_own": sum(p[1] for p in programs.values())},
    }


def render(summary, top=30):
    totals = summary["totals"]
    out = ["workers: %d, own CPU s %.1f; module runs: %d, own CPU s %.1f; other programs' own CPU s %.1f" % (
        totals["workers"], totals["workers_own"], totals["modules"], totals["modules_own"], totals["programs_own"]),
        "", "| task | workers | workers' own CPU s | their children's CPU s |", "|---|---:|---:|---:|"]
    out += ["| %s | %d | %.2f | %.2f |" % row for row in summary["tasks"][:top]]
    out += ["", "| module | runs | own CPU s |", "|---|---:|---:|"]
    out += ["| %s | %d | %.2f |" % row for row in summary["modules"][:top]]
    out += ["", "| program | runs | own CPU s |", "|---|---:|---:|"]
    out += ["| %s | %d | %.2f |" % row for row in summary["programs"][:top]]
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("path", help="the file GPUOPS_TEST_TASK_CPU named")
    parser.add_argument("--top", type=int, default=30, help="rows per table (default 30)")
    args = parser.parse_args(argv)
    print(render(summarize(read(args.path)), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
