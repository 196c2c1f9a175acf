"""bench/driver_flow.py --nodes 1: one one-GPU H200 MIG node converged at driver 570 under the standalone chart, then
upgraded to 580 by site.yml through real ansible-playbook, real apt and dpkg; the report's figures are measured: every
phase present, positive and in the role's order, the node reloaded once at 580, no reboot. The pods and the verify are
read every 0.2 s (--poll: the role's gpu_node_quiesce_interval and gpu_node_operator_poll_interval, as the site tests set
them): the role's defaults, 2 and 5 s between two reads of a fake that answers in milliseconds and starts or ends a pod
in 0.2 s, are a wait this test does not prove."""
import json
import os
import re
import subprocess
import sys

import pytest

from tests.support import apt_rig, driver_rig
from tests.support.ansible_run import ROOT

HELM = os.path.join(ROOT, "tools", "bin", "helm")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup"),
              pytest.mark.skipif(bool(apt_rig.missing_tools()),
                                 reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

PHASES = ("quiesce", "install", "stop", "unload", "load", "restore", "verify")
# the marks in the order the role passes them (bench/driver_flow.py)
ORDER = ("cordon", "gone", "apt_start", "apt_end", "modules_start", "stopped", "unloaded", "loaded", "modules_end",
         "resume", "ready", "uncordon")


def test_one_node_driver_upgrade_reports_measured_ordered_phases_and_no_reboot(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "driver_flow.py"), "--nodes", "1",
                           "--poll", "0.2", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # the printed row: one node disrupted, a number in every phase, 1 reload, 0 resets, 0 reboots
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 1 | 1/1 |")]
    assert len(rows) == 2, proc.stdout                      # as measured, then in the report
    cells = [c.strip() for c in rows[-1].strip("|").split("|")]
    for cell in cells[2:9]:
        assert re.match(r"^\d+\.\d+$", cell) and float(cell) > 0, (cell, rows[-1])
    assert cells[12:15] == ["1", "0", "0"], rows[-1]

    saved = json.loads((out / ("driver-flow-%dcores.json" % os.cpu_count())).read_text())
    assert saved["errors"] == []
    (row,) = saved["rows"]
    assert (row["nodes"], row["disrupted"], row["from"], row["to"]) == (1, 1, driver_rig.OLD, driver_rig.NEW)
    assert row["loaded"] == {"node-000": driver_rig.NEW}
    assert (row["reloads"], row["reboots"]) == (1, 0)
    window, marks = row["windows"]["node-000"], row["marks"]["node-000"]
    for phase in PHASES:
        assert window[phase] > 0, (phase, window)
    assert abs(sum(window[p] for p in PHASES) - window["window"]) < 1e-6
    assert window["window"] == marks["uncordon"] - marks["cordon"]
    times = [marks[m] for m in ORDER]
    assert times == sorted(times), sorted(marks.items(), key=lambda i: i[1])
    assert 0 < window["apt"] < window["install"]
    # the reload the stand-ins recorded on the node: the old modules removed, then the new ones loaded
    commands = row["commands"]["node-000"]
    removed = [c for c in commands if c.startswith("rmmod ")]
    added = [c for c in commands if c.startswith("modprobe ")]
    assert "rmmod nvidia" in removed and "modprobe nvidia" in added
    assert commands.index(removed[-1]) < commands.index(added[0])
    assert (out / ("driver-flow-%dcores.md" % os.cpu_count())).read_text().split("\n\n", 1)[1] in proc.stdout
