"""bench/fleet.py --sweep's pure pieces (bench/sweep.py): the faulty nodes within the circuit breaker, the median of
repeats, the target's verdict and the report's table. Nothing here runs a playbook."""
import argparse
import json
import os
import sys

from tests.support.ansible_run import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import sweep  # noqa: E402  # pylint: disable=wrong-import-position

NAMES = ["node-%03d" % i for i in range(200)]


def test_breaker_limit_is_ten_percent_rounded_up_and_at_most_ten():
    assert [sweep.breaker_limit(n) for n in (1, 10, 11, 50, 200)] == [1, 1, 2, 5, 10]


def test_faulty_nodes_are_spread_cycle_the_faults_and_stay_within_the_breaker():
    plan = sweep.fault_plan(NAMES, 3)
    assert [p[0] for p in plan] == ["node-000", "node-066", "node-132"]
    assert [p[1] for p in plan] == [f[0] for f in sweep.FAULTS]
    assert len(sweep.fault_plan(NAMES[:10], 3)) == 1          # 10 % of 10 nodes: one may be quarantined
    assert sweep.fault_plan(NAMES[:10], 0) == []


def test_median_is_per_figure():
    runs = [{"cpu": 3.0, "wall": 9.0}, {"cpu": 1.0, "wall": 2.0}, {"cpu": 2.0, "wall": 30.0}]
    assert sweep.median(runs) == {"cpu": 2.0, "wall": 9.0}


def _row(series, nodes, cpu, faults=()):
    figures = {"cpu": cpu, "wall": cpu, "load": 1.0}
    return {"series": series, "nodes": nodes, "shape": "hgx-h200", "faults": list(faults), "first": figures,
            "runs": [figures], "median": figures}


def test_verdict_compares_the_worst_sweep_per_node_with_the_rerun_per_node():
    rerun = _row("rerun", 10, 120.0)                            # 12 CPU s per node
    met, line = sweep.verdict([rerun, _row("sweep", 10, 8.0), _row("sweep", 200, 100.0)])
    assert met is True and line.startswith("target MET: the sweep's highest median CPU s per node, 0.800 (10 nodes)")
    met, line = sweep.verdict([rerun, _row("sweep", 10, 130.0, [["node-000", "row_remap_pending", True]])])
    assert met is False and "NOT MET" in line and "(10 nodes, 1 faulty)" in line
    assert sweep.verdict([_row("sweep", 10, 8.0)])[0] is None


def test_table_has_a_row_per_fleet_with_per_node_figures():
    text = sweep.table([_row("rerun", 10, 120.0), _row("sweep", 200, 100.0)])
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| converged re-run (site.yml) | 10 | - | 120.0 |") and "| 12.000 |" in lines[2]
    assert lines[3].startswith("| sweep (health.yml) | 200 | 0 |") and "| 0.500 |" in lines[3]


def test_merge_reports_the_rows_of_several_runs_in_order(tmp_path, capsys):
    paths = []
    for i, row in enumerate((_row("rerun", 50, 60.0), _row("sweep", 200, 100.0))):
        path = tmp_path / ("run%d.json" % i)
        path.write_text(json.dumps({"started": "2026-11-29 0%d:00" % i, "load": "1.0/1.0/1.0", "load_end": "%d" % i,
                                    "commit": "abc123", "forks": 10, "shape": "hgx-h200", "repeat": 3,
                                    "rows": [row], "errors": []}))
        paths.append(str(path))
    args = argparse.Namespace(sweep_merge=",".join(paths), out=None)
    assert sweep.merge(args) == 0
    text = capsys.readouterr().out
    assert "at the end: 1." not in text and "load average 1.0/1.0/1.0 at the start, 1 at the end" in text
    assert text.index("| converged re-run (site.yml) | 50 |") < text.index("| sweep (health.yml) | 200 |")
    assert "target MET" in text and "Merged from 2 runs started 2026-11-29 00:00, 2026-11-29 01:00." in text
