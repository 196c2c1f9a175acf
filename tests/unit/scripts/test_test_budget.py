"""scripts/test_budget.py (issue 49): the fixed CPU probe, the CPU seconds a shell's `times` gives, the per-file cost
table merged from the workers' rows, the reading page's trend, and the budget lines of scripts/test.sh."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("test_budget", os.path.join(ROOT, "scripts", "test_budget.py"))
budget = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(budget)


def test_the_probe_does_its_fixed_work_and_reads_positive_cpu_seconds():
    full = budget.probe(repeats=1)              # raises unless the loop computed its fixed result
    assert full["rounds"] == budget.PROBE_ROUNDS and isinstance(full["seconds"], float) and full["seconds"] > 0
    small = budget.probe(repeats=3, rounds=20000)
    assert len(small["samples"]) == 3 and small["seconds"] == sorted(small["samples"])[1]
    assert budget.probe_work(20000) == budget.probe_work(20000) != budget.probe_work(20001)


def test_the_probe_reads_more_for_more_work():
    """CPU seconds, not a constant: ten times the loop reads several times as long."""
    assert budget.probe(repeats=3, rounds=300000)["seconds"] > 3 * budget.probe(repeats=3, rounds=30000)["seconds"]


def test_times_of_a_shell_give_its_waited_for_childrens_cpu():
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    out = subprocess.run(["bash", "-c", '"$0" -c "$1"; times', sys.executable, burn], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    measured = budget.parse_times(out)
    assert 0.25 <= measured["cpu_s"] <= 2.0, out
    assert measured["cpu_s"] == pytest.approx(measured["user_s"] + measured["sys_s"], abs=0.11)


@pytest.mark.parametrize("text, cpu", [
    ("0m0.004s 0m0.001s\n61m2.500s 0m10.250s\n", 3672.8),     # over an hour: minutes past 60
    ("0m0,004s 0m0,001s\n1m0,500s 0m0,250s\n", 60.8),          # a locale's decimal comma
    ("0m0.004s 0m0.001s\n", None),                            # no children's line: the shell was killed early
    ("", None),
])
def test_times_text_parsed(text, cpu):
    parsed = budget.parse_times(text)
    assert (parsed and parsed["cpu_s"]) == (cpu and pytest.approx(cpu, abs=0.06))


def _row(test, cpu, wall=1.0, playbook=0, adhoc=0, modules=0, outcome="passed"):
    return {"test": test, "file": test.split("::")[0], "cpu_s": cpu, "wall_s": wall, "playbook_runs": playbook,
            "adhoc_runs": adhoc, "module_runs": modules, "outcome": outcome}


WORKERS = [
    {"worker": "gw0", "run": "r1", "args": ["-n", "2"], "cpu_s": 30.0, "wall_s": 20.0, "outside": {"cpu_s": 2.5},
     "rows": [_row("tests/a.py::t1", 10.0, playbook=2, modules=40), _row("tests/b.py::t1", 1.0, adhoc=1, modules=1),
              _row("tests/a.py::t2", 5.5, playbook=1, modules=20, outcome="failed")]},
    {"worker": "gw1", "run": "r1", "args": ["-n", "2"], "cpu_s": 25.0, "wall_s": 20.0, "outside": {"cpu_s": 1.0},
     "rows": [_row("tests/c.py::t1", 12.0, wall=30.0), _row("tests/b.py::t2", 2.0, adhoc=2, modules=2),
              _row("tests/a.py::t3", 0.5, outcome="skipped")]},
]


def test_two_workers_rows_merge_into_one_row_per_file_the_costliest_first():
    table = budget.merge(WORKERS)
    files = [(e["file"], e["tests"], e["cpu_s"], e["playbook_runs"], e["adhoc_runs"], e["module_runs"])
             for e in table["files"]]
    assert files == [("tests/a.py", 3, 16.0, 3, 0, 60), ("tests/c.py", 1, 12.0, 0, 0, 0),
                     ("tests/b.py", 2, 3.0, 0, 3, 3)]
    assert table["files"][1]["wall_s"] == 30.0
    totals = table["totals"]
    assert (totals["files"], totals["tests"], totals["cpu_s"], totals["playbook_runs"], totals["adhoc_runs"],
            totals["module_runs"]) == (3, 6, 31.0, 3, 3, 63)
    assert totals["outcomes"] == {"passed": 4, "failed": 1, "skipped": 1}
    assert [(w["worker"], w["outside_cpu_s"]) for w in table["workers"]] == [("gw0", 2.5), ("gw1", 1.0)]
    assert [r["test"] for r in table["costliest_tests"][:3]] == ["tests/c.py::t1", "tests/a.py::t1", "tests/a.py::t2"]
    text = budget.render_table(table)
    lines = text.splitlines()
    assert lines[2] == "| tests/a.py | 3 | 16.0 | 51.6 % | 3.0 | 3 | 0 | 60 |"
    assert lines[3].startswith("| tests/c.py | 1 | 12.0 |") and lines[4].startswith("| tests/b.py | 2 | 3.0 |")
    assert lines[5] == "| **all 3 files** | 6 | 31.0 | 100 % | 35.0 | 3 | 3 | 63 |"


def test_only_this_runs_workers_are_read(tmp_path):
    for doc in WORKERS + [dict(WORKERS[0], worker="gw7", run="an earlier run")]:
        (tmp_path / ("%s.json" % doc["worker"])).write_text(json.dumps(doc))
    (tmp_path / "gw0.runs").write_text("start playbook\n")
    assert [d["worker"] for d in budget.read_workers(str(tmp_path), "r1")] == ["gw0", "gw1"]
    assert len(budget.read_workers(str(tmp_path))) == 3


PAGE = """# Test costs per file

What this page is (kept as it is).

<!-- trend: start -->
%s
|---|---|---|---|---|---|---|---|---|---|---|
| 2026-11-01 10:00 | abc1234 | make test | 2469 | 4500.0 | 5000.0 | 300 | 100 | 20000 | 2466 | 0.31, 0.33 |
<!-- trend: end -->

## The newest table

<!-- table: start -->
an old table
<!-- table: end -->

Notes after the table (kept).
""" % budget.TREND_HEADER


def test_the_trend_gets_a_row_and_keeps_the_earlier_ones(tmp_path):
    table = budget.merge(WORKERS)
    table["generated"] = "2026-11-28T16:00:00Z"
    text = budget.update_reading(PAGE, table, "def5678", label="partial: a, b, c",
                                 budget={"wall_s": 40, "probe": {"before_s": 0.3, "after_s": 0.35}})
    lines = text.splitlines()
    assert "What this page is (kept as it is)." in lines and "Notes after the table (kept)." in lines
    start = lines.index(budget.TREND_START)
    assert lines[start + 3] == ("| 2026-11-01 10:00 | abc1234 | make test | 2469 | 4500.0 | 5000.0 | 300 | 100 | 20000 "
                                "| 2466 | 0.31, 0.33 |")
    assert lines[start + 4] == ("| 2026-11-28 16:00 | def5678 | partial: a, b, c | 6 | 31.0 | 35.0 | 3 | 3 | 63 | 40 "
                                "| 0.30, 0.35 |")
    assert lines[start + 5] == budget.TREND_END
    assert "an old table" not in text and "| tests/a.py | 3 | 16.0 | 51.6 % |" in text
    assert text.count(budget.TREND_HEADER) == 1
    # again: a third row, the two before it kept
    again = budget.update_reading(text, table, "0000001")
    rows = again.split(budget.TREND_START)[1].split(budget.TREND_END)[0].strip().splitlines()[2:]
    assert [r.split(" | ")[1] for r in rows] == ["abc1234", "def5678", "0000001"]
    assert rows[-1].endswith("| pytest -n 2 | 6 | 31.0 | 35.0 | 3 | 3 | 63 | - | - |")


def test_the_trend_command_writes_the_page_from_the_table(tmp_path):
    table_path, reading = tmp_path / "test-costs.json", tmp_path / "test-costs.md"
    table_path.write_text(json.dumps(budget.merge(WORKERS)))
    reading.write_text("# Test costs per file\n\nIntro.\n")
    for commit in ("aaa1111", "bbb2222"):
        budget.main(["trend", "--table", str(table_path), "--reading", str(reading), "--commit", commit])
    text = reading.read_text()
    assert text.startswith("# Test costs per file\n\nIntro.\n\n## Trend\n")
    assert "| aaa1111 | pytest -n 2 | 6 |" in text and "| bbb2222 | pytest -n 2 | 6 |" in text
    assert text.count(budget.TABLE_START) == 1 and "| **all 3 files** |" in text


def test_the_trend_command_prints_the_row_it_wrote(tmp_path, capsys):
    """With --budget, the printed row is the written one: the run's wall time and CPU probe in it, not '-'."""
    table_path, reading, budget_path = (tmp_path / "test-costs.json", tmp_path / "test-costs.md",
                                        tmp_path / "budget.json")
    table_path.write_text(json.dumps(budget.merge(WORKERS)))
    budget_path.write_text(json.dumps({"wall_s": 1081, "probe": {"before_s": 0.184, "after_s": 0.207}}))
    budget.main(["trend", "--table", str(table_path), "--reading", str(reading), "--commit", "ccc3333",
                 "--budget", str(budget_path)])
    printed = capsys.readouterr().out.strip().split(": ", 2)[2]
    assert printed.endswith("| 1081 | 0.18, 0.21 |"), printed
    assert printed in reading.read_text().splitlines()


def test_the_budget_of_a_run_from_what_test_sh_left(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "pytest.times").write_text("0m0.010s 0m0.005s\n77m40.500s 0m12.500s\n")
    (logs / "check.status").write_text("0 1500\n")
    (logs / "check.times").write_text("0m0.001s 0m0.001s\n20m0.000s 0m5.000s\n")
    (logs / "compat.status").write_text("2 900\n")          # failed, and its times never written (killed)
    (logs / "test-costs.json").write_text(json.dumps(budget.merge(WORKERS)))
    doc = budget.budget(str(logs), 1000.0, 1010.0, 3410.0, 1, 0.31, ["check", "compat"], False, now=3466.0,
                        probe_after={"seconds": 0.33, "samples": [0.33, 0.32, 0.34]})
    assert doc["wall_s"] == 2466 and doc["pytest"] == {"wall_s": 2400, "exit": 1, "cpu_s": 4673.0, "user_s": 4660.5,
                                                       "sys_s": 12.5}
    assert doc["gates"]["check"]["cpu_s"] == 1205.0 and doc["gates"]["check"]["wall_s"] == 1500
    assert doc["gates"]["compat"] == {"exit": 2, "wall_s": 900, "cpu_s": None}
    first, second = budget.budget_lines(doc)
    assert first == ("test: budget: wall 2466 s (pytest 2400 s), CPU: pytest 4673 s (workers and their ansible runs), "
                     "gates check 1205 s, compat ? s (beside pytest)")
    assert second.startswith("test: budget: CPU probe 0.31 s before, 0.33 s after (this machine's speed")
    assert "tests 31.0 worker-s CPU in 6 tests, per file: build/test-logs/test-costs.md" in second


def test_an_interrupted_run_has_the_budget_measured_so_far(tmp_path):
    doc = budget.budget(str(tmp_path), 1000.0, 1010.0, None, None, None, ["check"], True, now=1100.0)
    assert doc["wall_s"] == 100 and doc["pytest"]["wall_s"] == 90 and doc["pytest"]["cpu_s"] is None
    first, second = budget.budget_lines(doc)
    assert first.startswith("test: budget (interrupted): wall 100 s (pytest 90 s), CPU: pytest ? s")
    assert "CPU probe ? s before, none after" in second
