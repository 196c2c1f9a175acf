"""bench/fleet.py --slices-merge: one report from the slices.json of runs made in parts (a 200-node fleet, one slice
count per run, on a machine that limits one command's time). Synthetic rows: this checks the merging, not figures."""
import json
import os
import subprocess
import sys

from tests.support.ansible_run import ROOT


def _run(nodes, slices, load):
    walls = [100.0 + i for i in range(slices)]
    return {"wall": max(walls), "cpu": 50.0 * slices, "load": load, "changed": 0, "slice_walls": walls,
            "upgrades": 1, "revisions": [1], "refused": 0}


def _saved(path, started, commit, rows, cpus=None):
    data = {"started": started, "load": "1.0/1.0/1.0", "commit": commit, "forks": 10, "serial": None,
            "shape": "h200-x1", "rows": rows, "errors": []}
    if cpus:
        data["cpus"] = cpus
    path.write_text(json.dumps(data))
    return str(path)


def _row(nodes, slices, load):
    again = dict(_run(nodes, slices, load), upgrades=0)
    return {"nodes": nodes, "slices": slices, "shape": "h200-x1", "gpus": 1, "mig": nodes // 2, "forks": 10,
            "first": _run(nodes, slices, load), "again": again}


def test_rows_of_several_runs_in_one_report(tmp_path):
    a = _saved(tmp_path / "a.json", "2026-11-24 02:10", "abc1234", [_row(50, 1, 0.5), _row(50, 2, 1.5)])
    b = _saved(tmp_path / "b.json", "2026-11-24 02:20", "def5678", [_row(200, 4, 3.5)])
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fleet.py"), "--slices-merge", a + "," + b,
                           "--cpus", "16", "--machine", "the lent machine", "--out", str(out)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = (out / "slices.md").read_text()
    assert "16 CPU(s) on the lent machine" in text and "commit abc1234, def5678" in text
    rows = [line for line in text.splitlines() if line.startswith("| 50 (25/25) |") or line.startswith("| 200 ")]
    assert [r.split("|")[2].strip() for r in rows] == ["1", "2", "4"], text
    assert "| 3.5 |" in rows[2]  # each row keeps the load before it
    assert [r.rstrip(" |").rsplit("| ", 1)[1] for r in rows] == ["abc1234", "abc1234", "def5678"]  # and its commit
    assert "Merged from 2 runs: 2026-11-24 02:10 (commit abc1234" in text
    merged = json.loads((out / "slices.json").read_text())
    assert merged["cpus"] == 16 and len(merged["rows"]) == 3
