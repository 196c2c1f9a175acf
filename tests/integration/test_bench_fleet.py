"""bench/fleet.py --quick: site.yml over 2 single-GPU simulated nodes (one MIG, one MPS) through real
ansible-playbook; the report has measured figures, the re-run changed nothing, the empty play ran."""
import json
import os
import re
import subprocess
import sys

import pytest

from tests.support.ansible_run import ROOT

pytestmark = pytest.mark.slow


def _bench(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fleet.py")] + list(args), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600,
                          check=False)


def test_quick_fleet_bench_reports_real_figures(tmp_path):
    out = tmp_path / "out"
    proc = _bench("--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # the printed table: one fleet of 2 nodes (1 MIG, 1 MPS), 1 GPU each, numbers in every timing cell
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 2 (1/1) |")]
    assert len(rows) == 1, proc.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "1"
    for cell in cells[2:10]:
        assert re.match(r"^\d+\.\d+$", cell), (cell, rows[0])
    assert cells[10] == "0", rows[0]  # changed on the re-run
    assert re.match(r"^\d+/\d+, \d+/\d+$", cells[11]), cells[11]  # tasks of the MPS node, of the MIG node
    assert "Ansible's own share of the re-run" in proc.stdout

    saved = json.loads((out / "fleet.json").read_text())
    assert saved["errors"] == []
    (row,) = saved["rows"]
    assert (row["nodes"], row["mig"], row["gpus"], row["shape"]) == (2, 1, 1, "h200-x1")
    assert row["first"]["changed"] > 0 and row["again"]["changed"] == 0
    # measured, not made up: every figure a positive time, and the runs in the order of the work they do (a first
    # converge, then a re-run, then the empty play); no bound in seconds, which would depend on the machine's speed
    # (the empty play took 0.99 CPU s on a machine whose CPU probe read 0.13 s, and failed a "> 1" here)
    for run in ("first", "again", "empty"):
        assert row[run]["wall"] > 0 and row[run]["cpu"] > 0, row
    assert row["first"]["cpu"] > row["again"]["cpu"] > row["empty"]["cpu"], row
    assert (out / "fleet.md").read_text() in proc.stdout

    # the report again from the saved figures, without running anything
    again = _bench("--replot", str(out / "fleet.json"))
    assert again.returncode == 0 and again.stdout == proc.stdout, again.stderr


def test_an_error_is_not_a_figure(tmp_path):
    # a declaration site.yml refuses: the bench reports the error and exits 1, no row is written
    out = tmp_path / "out"
    proc = _bench("--nodes", "1", "--shape", "h200-x1", "--empty-at", "", "--out", str(out),
                  "-e", "gpu_node_compute_mode=Sometimes")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ERROR (1 nodes of h200-x1)" in proc.stdout
    saved = json.loads((out / "fleet.json").read_text())
    assert saved["rows"] == [] and len(saved["errors"]) == 1
    assert "failed" in saved["errors"][0] and "Sometimes" in saved["errors"][0], saved["errors"]


def test_floor_bench_runs_the_node_plan_for_real(tmp_path):
    # one single-GPU MPS node, one round: re-run, empty play, floor play, the last two reduced to the node plan
    # alone, and the imports play; the bench itself refuses a play that does not run and skip the tasks it mirrors on the
    # same hosts
    out = tmp_path / "out"
    proc = _bench("--floor", "--nodes", "1mps", "--shape", "h200-x1", "--repeat", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = json.loads((out / "fleet-floor.json").read_text())
    assert saved["errors"] == []
    (res,) = saved["results"]
    figures = res["figures"]
    assert (res["nodes"], figures["mig"]) == (1, 0)
    assert figures["real"] == ["gpuops.nvidia.gpu_node : Read the GPUs and plan every step (one module run; changes "
                               "nothing)"]
    for run in ("again", "empty", "floor", "bare_empty", "bare_floor", "bare_imports"):
        assert len(figures[run]) == 1 and figures[run][0]["cpu"] > 0.5, figures
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 1 MPS (0/1) |")]
    assert len(rows) == 1 and (out / "fleet-floor.md").read_text() in proc.stdout
