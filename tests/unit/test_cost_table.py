"""The suite's per-file cost table (tests/support/cost_table.py, issue 49): the ansible runs counted by the test-only
callback (tests/support/callback_plugins/ansible_runs.py), and a pytest run of its own (two xdist workers) whose
tests run a playbook, an ad-hoc module and a CPU-burning child: each test's row and the merged table say so."""
import importlib.util
import json
import os
import subprocess
import sys

from tests.support import cost_table
from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "ansible_runs", os.path.join(ROOT, "tests", "support", "callback_plugins", "ansible_runs.py"))
ansible_runs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ansible_runs)


def test_the_callbacks_lines_counted():
    text = "start playbook\nmodules 12\nstart adhoc\nmodules 1\nstart playbook\nnoise\nmodules x\n"
    assert cost_table.parse_runs(text) == {"playbook_runs": 2, "adhoc_runs": 1, "module_runs": 13}


def test_each_take_counts_the_lines_written_since_the_last(tmp_path):
    path = tmp_path / "gw0.runs"
    runs = cost_table.RunsFile(str(path))
    assert runs.take() == {"playbook_runs": 0, "adhoc_runs": 0, "module_runs": 0}        # no file yet
    path.write_text("start playbook\nmodules 5\nstart adh")                                 # the last line unfinished
    assert runs.take() == {"playbook_runs": 1, "adhoc_runs": 0, "module_runs": 5}
    with open(str(path), "a") as handle:
        handle.write("oc\nmodules 1\n")
    assert runs.take() == {"playbook_runs": 0, "adhoc_runs": 1, "module_runs": 1}
    assert runs.take() == {"playbook_runs": 0, "adhoc_runs": 0, "module_runs": 0}


def test_controller_side_actions_run_no_module():
    for action in ("set_fact", "ansible.builtin.debug", "ansible.legacy.assert", "include_tasks", "meta"):
        assert not ansible_runs.runs_a_module(action), action
    for action in ("command", "ansible.builtin.copy", "gpuops.nvidia.gpu_node_plan", "setup"):
        assert ansible_runs.runs_a_module(action), action


PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.command: "true"
      changed_when: false
    - ansible.builtin.set_fact:
        answer: 42
    - ansible.builtin.command: "echo {{ item }}"
      loop: [1, 2]
      changed_when: false
    - ansible.builtin.command: "false"
      when: answer != 42
"""
TESTS_A = """import sys
from tests.support.ansible_run import run_playbook


def test_playbook():
    data, proc = run_playbook(%r, inventory="localhost,", args=("-c", "local"),
                              extra_vars={"ansible_python_interpreter": sys.executable})
    assert proc.returncode == 0, proc.stdout + proc.stderr
"""
TESTS_B = """import subprocess
import sys

import pytest

from tests.support.ansible_run import run_module


def test_adhoc():
    assert run_module("ping")[0]["ping"] == "pong"


def test_burn():
    burn = "import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass\\n"
    subprocess.run([sys.executable, "-c", burn], check=True)


def test_skipped():
    pytest.skip("nothing to do")


def test_failed():
    assert False
"""


def test_a_pytest_run_writes_each_workers_rows_and_the_merged_table(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "test_a.py").write_text(TESTS_A % str(tmp_path / "play.yml"))
    (tmp_path / "test_b.py").write_text(TESTS_B)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
               GPUOPS_TEST_COSTS_DIR=str(out))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "tests.support.cost_table",
                           "-p", "no:cacheprovider", "-q", "test_a.py", "test_b.py"], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300,
                          check=False)
    # the plugin changes no outcome: the failing test fails, the run's status is pytest's
    assert proc.returncode == 1 and "1 failed, 3 passed, 1 skipped" in proc.stdout, proc.stdout
    assert ("test costs: 5 tests in 2 files," in proc.stdout and "1 playbook, 1 ad-hoc and 4 module runs; per file: "
            in proc.stdout), proc.stdout
    workers = [json.loads((out / "test-costs" / name).read_text())
               for name in sorted(os.listdir(str(out / "test-costs"))) if name.endswith(".json")]
    assert sorted(w["worker"] for w in workers) == ["gw0", "gw1"] and len({w["run"] for w in workers}) == 1
    rows = dict((row["test"], row) for w in workers for row in w["rows"])
    assert sorted(rows) == ["test_a.py::test_playbook", "test_b.py::test_adhoc", "test_b.py::test_burn",
                            "test_b.py::test_failed", "test_b.py::test_skipped"]
    # the playbook: one run; its module runs: the command, the loop's two items (not set_fact, not the skipped task)
    play = rows["test_a.py::test_playbook"]
    assert (play["playbook_runs"], play["adhoc_runs"], play["module_runs"], play["outcome"]) == (1, 0, 3, "passed")
    adhoc = rows["test_b.py::test_adhoc"]
    assert (adhoc["playbook_runs"], adhoc["adhoc_runs"], adhoc["module_runs"]) == (0, 1, 1)
    assert play["cpu_s"] > 0.3 and adhoc["cpu_s"] > 0.2           # ansible's own start-up, in the children waited for
    assert 0.45 <= rows["test_b.py::test_burn"]["cpu_s"] < 3.0 and rows["test_b.py::test_burn"]["wall_s"] >= 0.45
    assert rows["test_b.py::test_skipped"]["outcome"] == "skipped" and rows["test_b.py::test_failed"]["outcome"] == "failed"
    table = json.loads((out / "test-logs" / "test-costs.json").read_text())
    assert [(e["file"], e["tests"], e["playbook_runs"], e["adhoc_runs"], e["module_runs"]) for e in table["files"]] \
        == sorted([("test_a.py", 1, 1, 0, 3), ("test_b.py", 4, 0, 1, 1)], key=lambda e: -sum(
            rows[t]["cpu_s"] for t in rows if t.startswith(e[0])))
    assert table["totals"]["outcomes"] == {"passed": 3, "failed": 1, "skipped": 1}
    assert (out / "test-logs" / "test-costs.md").read_text().startswith("# Test costs per file: ")
