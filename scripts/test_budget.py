"""`make test`'s budget, as a reading beside every run (issue 49): so that a slow machine and a slow suite can be told
apart. A reading, not a check: nothing here fails a run, and no test fails on time.

    python scripts/test_budget.py probe
        the fixed CPU probe: a deterministic pure-Python loop of fixed work, its CPU seconds (the median of three).
        On an idle 2-core machine of this project it reads about 0.3 s; a slower or busier machine reads more.
    python scripts/test_budget.py report --logs build/test-logs --started EPOCH ...
        (scripts/test.sh, after pytest and the gates) the budget line(s): wall seconds, pytest's CPU seconds (its
        workers and the ansible runs they waited for), each gate's CPU seconds, the probe before and after; the same
        as JSON in build/test-logs/budget.json.
    python scripts/test_budget.py merge --dir build/test-costs --out build/test-logs/test-costs
        the per-file cost table from the workers' rows (tests/support/cost_table.py writes them, and merges them at
        the end of every pytest run itself): OUT.json and OUT.md.
    python scripts/test_budget.py trend --table build/test-logs/test-costs.json --reading docs/readings/test-costs.md
        [--budget build/test-logs/budget.json] [--label TEXT]
        the reading page's newest table replaced by this one, and a row for it appended to its trend (earlier rows
        kept), with the commit (git rev-parse --short HEAD).

Standard library only (Python 3.9+): scripts/test.sh runs it with the repository's .venv Python.
"""
import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE_ROUNDS = 3000000
PROBE_REPEATS = 3
PROBE_RESULT = 488037          # probe_work(PROBE_ROUNDS): the same work on every machine and Python
# fewer rounds for the tests of scripts/test.sh only: a figure then is no machine's speed (budget.json says the rounds)
ROUNDS_VARIABLE = "GPUOPS_TEST_BUDGET_PROBE_ROUNDS"
COUNTS = ("playbook_runs", "adhoc_runs", "module_runs")
TREND_START, TREND_END = "<!-- trend: start -->", "<!-- trend: end -->"
TABLE_START, TABLE_END = "<!-- table: start -->", "<!-- table: end -->"
TREND_HEADER = ("| date (UTC) | commit | run | tests | worker CPU s (tests) | worker wall s | playbook runs "
                "| ad-hoc runs | module runs | make test wall s | CPU probe s (before, after) |")


def probe_work(rounds=PROBE_ROUNDS):
    """The probe's fixed work: integer arithmetic in a Python loop, no allocation that grows, no I/O."""
    value = 0
    for i in range(rounds):
        value = (value * 31 + i) % 1000003
    return value


def probe_rounds():
    return int(os.environ.get(ROUNDS_VARIABLE) or PROBE_ROUNDS)


def probe(repeats=PROBE_REPEATS, rounds=None):
    """CPU seconds (this process's, time.process_time) of probe_work: {"seconds": the median, "samples": each}."""
    rounds = rounds or probe_rounds()
    samples = []
    for dummy in range(repeats):
        start = time.process_time()
        value = probe_work(rounds)
        samples.append(time.process_time() - start)
        if rounds == PROBE_ROUNDS and value != PROBE_RESULT:
            raise RuntimeError("the CPU probe computed %d, not %d: not the fixed work" % (value, PROBE_RESULT))
    return {"seconds": round(statistics.median(samples), 3), "samples": [round(s, 3) for s in samples],
            "rounds": rounds}


# --- bash's `times` (scripts/test.sh runs pytest and each gate in a subshell that ends with it) ---

_TIME = re.compile(r"(\d+)m(\d+)[.,](\d+)s")


def parse_times(text):
    """CPU seconds of the children a shell waited for, from its `times` output (second line: children's user and
    system time, e.g. "1m2.500s 0m0.250s"); None when the text has no such line."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    found = _TIME.findall(lines[1])
    if len(found) != 2:
        return None
    user, system = (int(m) * 60 + float("%s.%s" % (s, f)) for m, s, f in found)
    return {"cpu_s": round(user + system, 1), "user_s": round(user, 1), "sys_s": round(system, 1)}


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _load_json(path):
    text = _read(path)
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def commit(root=ROOT):
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the per-file cost table ---

def merge(workers):
    """The per-file table of the workers' rows (tests/support/cost_table.py: one document per pytest process that ran
    tests): per file its tests, CPU and wall seconds and ansible runs, summed over the workers, the costliest first."""
    files = {}
    rows = []
    outcomes = {}
    for doc in workers:
        for row in doc.get("rows", []):
            rows.append(row)
            entry = files.setdefault(row["file"], dict({"file": row["file"], "tests": 0, "cpu_s": 0.0, "wall_s": 0.0},
                                                       **dict((k, 0) for k in COUNTS)))
            entry["tests"] += 1
            entry["cpu_s"] += row.get("cpu_s", 0.0)
            entry["wall_s"] += row.get("wall_s", 0.0)
            for key in COUNTS:
                entry[key] += row.get(key, 0)
            outcome = row.get("outcome") or "unknown"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    table = sorted(files.values(), key=lambda e: (-e["cpu_s"], e["file"]))
    for entry in table:
        entry["cpu_s"], entry["wall_s"] = round(entry["cpu_s"], 2), round(entry["wall_s"], 2)
    totals = dict({"files": len(table), "tests": len(rows), "outcomes": outcomes,
                   "cpu_s": round(sum(e["cpu_s"] for e in table), 1),
                   "wall_s": round(sum(e["wall_s"] for e in table), 1)},
                  **dict((k, sum(e[k] for e in table)) for k in COUNTS))
    outside = [dict(worker=doc.get("worker"), tests=len(doc.get("rows", [])), cpu_s=doc.get("cpu_s"),
                    wall_s=doc.get("wall_s"), outside_cpu_s=(doc.get("outside") or {}).get("cpu_s"))
               for doc in workers]
    costliest = sorted(rows, key=lambda r: -r.get("cpu_s", 0.0))[:10]
    args = next((doc.get("args") for doc in workers if doc.get("args") is not None), None)
    return {"generated": _now(), "args": args, "totals": totals, "workers": outside, "files": table,
            "costliest_tests": costliest}


def read_workers(directory, run=None):
    """The worker documents in ``directory`` (*.json), those of ``run`` only where it is given."""
    docs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        doc = _load_json(path)
        if isinstance(doc, dict) and (run is None or doc.get("run") == run):
            docs.append(doc)
    return docs


def _fmt(value, digits=1):
    if value is None:
        return "?"
    return "%.*f" % (digits, value) if isinstance(value, float) else str(value)


def _secs(value):
    """Seconds as the budget line prints them: whole ones from 100 on (and wall times, whole), tenths below."""
    if value is None:
        return "?"
    if isinstance(value, int):
        return str(value)
    return "%.0f" % value if value >= 100 else "%.1f" % value


def render_table(table):
    """The table as Markdown: one row per file, the costliest first, a total, and the ten costliest tests."""
    totals = table["totals"]
    cpu = totals["cpu_s"] or 1.0
    out = ["| file | tests | CPU s | share | wall s | playbook runs | ad-hoc runs | module runs |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for e in table["files"]:
        out.append("| %s | %d | %.1f | %.1f %% | %.1f | %d | %d | %d |" % (
            e["file"], e["tests"], e["cpu_s"], 100.0 * e["cpu_s"] / cpu, e["wall_s"], e["playbook_runs"],
            e["adhoc_runs"], e["module_runs"]))
    out.append("| **all %d files** | %d | %.1f | 100 %% | %.1f | %d | %d | %d |" % (
        totals["files"], totals["tests"], totals["cpu_s"], totals["wall_s"], totals["playbook_runs"],
        totals["adhoc_runs"], totals["module_runs"]))
    workers = ", ".join("%s %s CPU s (%s outside tests: collection, start-up)" % (
        w["worker"], _fmt(w["cpu_s"]), _fmt(w["outside_cpu_s"])) for w in table["workers"])
    out += ["", "Outcomes: %s. Workers: %s." % (
        ", ".join("%d %s" % (n, k) for k, n in sorted(totals["outcomes"].items())) or "none", workers or "none")]
    if table.get("costliest_tests"):
        out += ["", "The costliest tests:", "", "| test | CPU s | wall s | playbook runs | ad-hoc runs | module runs |",
                "|---|---:|---:|---:|---:|---:|"]
        for r in table["costliest_tests"]:
            out.append("| %s | %.1f | %.1f | %d | %d | %d |" % (
                r["test"].replace("|", "\\|"), r["cpu_s"], r["wall_s"], r["playbook_runs"], r["adhoc_runs"],
                r["module_runs"]))
    return "\n".join(out) + "\n"


def write_table(table, out):
    """OUT.json and OUT.md (the Markdown under a line saying what run it is)."""
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out + ".json", "w") as handle:
        json.dump(table, handle, indent=1, sort_keys=True)
        handle.write("\n")
    with open(out + ".md", "w") as handle:
        handle.write("# Test costs per file: %s, `pytest %s`\n\n%s" % (
            table["generated"], " ".join(table.get("args") or []), render_table(table)))


# --- the reading page: its trend and its newest table ---

def trend_row(table, commit_id, label=None, budget=None):
    t = table["totals"]
    wall = probe_text = "-"
    if budget:
        wall = _fmt(budget.get("wall_s"), 0)
        probe_text = "%s, %s" % (_fmt((budget.get("probe") or {}).get("before_s"), 2),
                                 _fmt((budget.get("probe") or {}).get("after_s"), 2))
    run = label or "pytest %s" % " ".join(table.get("args") or [])
    return "| %s | %s | %s | %d | %.1f | %.1f | %d | %d | %d | %s | %s |" % (
        table["generated"][:16].replace("T", " "), commit_id or "?", run.replace("|", "/").strip(), t["tests"],
        t["cpu_s"], t["wall_s"], t["playbook_runs"], t["adhoc_runs"], t["module_runs"], wall, probe_text)


def _section(text, start, end):
    """(before, inside, after) of the marked section; None when the markers are not both there, in order."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        return None
    return text[:i], text[i + len(start):j], text[j + len(end):]


def update_reading(text, table, commit_id, label=None, budget=None):
    """The reading page's text with a trend row for ``table`` appended (earlier rows kept) and its newest table
    replaced by ``table``; the marked sections are added at the end where the page has none."""
    text = text or "# Test costs per file\n"
    if _section(text, TREND_START, TREND_END) is None:
        text = text.rstrip("\n") + "\n\n## Trend\n\n%s\n%s\n" % (TREND_START, TREND_END)
    before, inside, after = _section(text, TREND_START, TREND_END)
    rows = [line for line in inside.splitlines()
            if line.startswith("|") and line != TREND_HEADER and not line.startswith("|---")]
    rows.append(trend_row(table, commit_id, label, budget))
    sep = "|" + "---|" * TREND_HEADER.count(" | ") + "---|"
    text = before + TREND_START + "\n" + "\n".join([TREND_HEADER, sep] + rows) + "\n" + TREND_END + after
    if _section(text, TABLE_START, TABLE_END) is None:
        text = text.rstrip("\n") + "\n\n## The newest table\n\n%s\n%s\n" % (TABLE_START, TABLE_END)
    before, dummy, after = _section(text, TABLE_START, TABLE_END)
    head = "%s, commit %s, %s.\n\n" % (
        table["generated"], commit_id or "?", label or "`pytest %s`" % " ".join(table.get("args") or []))
    return before + TABLE_START + "\n" + head + render_table(table) + TABLE_END + after


# --- the budget line of scripts/test.sh ---

def budget(logs, started, pytest_started, pytest_ended, pytest_exit, probe_before, gates, interrupted, now=None,
           probe_after=None):
    """The budget of one `make test` run, from what scripts/test.sh left in ``logs``."""
    now = time.time() if now is None else now
    doc = {"finished": _now(), "commit": commit(), "interrupted": interrupted, "cpus": os.cpu_count(),
           "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None}
    doc["wall_s"] = round(now - started) if started is not None else None
    pytest_wall = None
    if pytest_started is not None:
        pytest_wall = round((pytest_ended if pytest_ended is not None else now) - pytest_started)
    doc["pytest"] = dict({"wall_s": pytest_wall, "exit": pytest_exit, "cpu_s": None},
                         **(parse_times(_read(os.path.join(logs, "pytest.times"))) or {}))
    doc["gates"] = {}
    for gate in gates:
        status = (_read(os.path.join(logs, "%s.status" % gate)) or "").split()
        doc["gates"][gate] = dict({"exit": int(status[0]) if status[:1] and status[0].isdigit() else None,
                                   "wall_s": int(status[1]) if status[1:2] and status[1].isdigit() else None,
                                   "cpu_s": None},
                                  **(parse_times(_read(os.path.join(logs, "%s.times" % gate))) or {}))
    doc["probe"] = {"before_s": probe_before, "after_s": probe_after["seconds"] if probe_after else None,
                    "after_samples": probe_after["samples"] if probe_after else None, "rounds": probe_rounds()}
    costs = _load_json(os.path.join(logs, "test-costs.json"))
    doc["tests"] = costs["totals"] if costs else None
    return doc


def budget_lines(doc, logs="build/test-logs"):
    p = doc["pytest"]
    gates = ", ".join("%s %s s" % (g, _secs(v["cpu_s"])) for g, v in doc["gates"].items())
    what = "test: budget%s:" % (" (interrupted)" if doc["interrupted"] else "")
    first = "%s wall %s s (pytest %s s), CPU: pytest %s s (workers and their ansible runs)%s" % (
        what, _secs(doc["wall_s"]), _secs(p["wall_s"]), _secs(p["cpu_s"]),
        ", gates %s (beside pytest)" % gates if gates else "")
    probe_doc = doc["probe"]
    after = _fmt(probe_doc["after_s"], 2) + " s after" if probe_doc["after_s"] is not None else "none after"
    second = "%s CPU probe %s s before, %s (this machine's speed: the same fixed loop, higher = slower)" % (
        what, _fmt(probe_doc["before_s"], 2), after)
    tests = doc.get("tests")
    if tests:
        second += "; tests %s worker-s CPU in %d tests, per file: %s/test-costs.md" % (
            _secs(tests["cpu_s"]), tests["tests"], logs)
    return [first, second + "; JSON: %s/budget.json" % logs]


def _report(args):
    doc = budget(args.logs, _float(args.started), _float(args.pytest_started), _float(args.pytest_ended),
                 int(args.pytest_exit) if (args.pytest_exit or "").lstrip("-").isdigit() else None,
                 _float(args.probe_before), args.gates, args.state == "interrupted",
                 probe_after=None if args.state == "interrupted" else probe())
    for line in budget_lines(doc, args.logs):
        print(line)
    os.makedirs(args.logs, exist_ok=True)
    with open(os.path.join(args.logs, "budget.json"), "w") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")


def _trend(args):
    table = _load_json(args.table)
    if not table:
        sys.exit("trend: no cost table in %s (run pytest first: tests/support/cost_table.py writes it)" % args.table)
    with open(args.reading, "a+") as handle:
        handle.seek(0)
        text = handle.read()
    budget, commit_id = (_load_json(args.budget) if args.budget else None), args.commit or commit()
    updated = update_reading(text, table, commit_id, args.label, budget)
    with open(args.reading, "w") as handle:
        handle.write(updated)
    # the row as written, its wall time and probe included
    print("trend: %s: %s" % (args.reading, trend_row(table, commit_id, args.label, budget)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("probe", help="the fixed CPU probe's CPU seconds")
    rep = sub.add_parser("report", help="scripts/test.sh's budget lines and budget.json")
    rep.add_argument("--logs", default="build/test-logs")
    for name in ("started", "pytest-started", "pytest-ended", "pytest-exit", "probe-before"):
        rep.add_argument("--" + name, default="")
    rep.add_argument("--gates", nargs="*", default=[])
    rep.add_argument("--state", choices=("finished", "interrupted"), default="finished",
                     help="interrupted (Ctrl-C): what was measured so far, no probe after")
    mer = sub.add_parser("merge", help="the per-file table from the workers' rows")
    mer.add_argument("--dir", default=os.path.join("build", "test-costs"))
    mer.add_argument("--out", default=os.path.join("build", "test-logs", "test-costs"))
    tre = sub.add_parser("trend", help="update the reading page with the newest table and its trend row")
    tre.add_argument("--table", default=os.path.join("build", "test-logs", "test-costs.json"))
    tre.add_argument("--reading", default=os.path.join("docs", "readings", "test-costs.md"))
    tre.add_argument("--budget", help="budget.json of the same make test run (its wall and CPU probe)")
    tre.add_argument("--label", help="what the run was (default: pytest and its arguments)")
    tre.add_argument("--commit", help="default: git rev-parse --short HEAD")
    args = parser.parse_args(argv)
    if args.command == "probe":
        print("%.3f" % probe()["seconds"])
    elif args.command == "report":
        _report(args)
    elif args.command == "merge":
        docs = read_workers(args.dir)
        if not docs:
            sys.exit("merge: no worker rows in %s" % args.dir)
        write_table(merge(docs), args.out)
        print("merge: %s.md and %s.json" % (args.out, args.out))
    else:
        _trend(args)


if __name__ == "__main__":
    main()
