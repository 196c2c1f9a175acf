"""The per-task CPU reading of the tests' ansible runs (tests/support/compile_cache/gpuops_task_cpu.py, summed by
tests/support/task_cpu.py): a real ansible-playbook run with GPUOPS_TEST_TASK_CPU set leaves one line per worker
(named by its task and host), per module process and per program, and the summary puts a module's seconds under the
task that ran it."""
import sys

from tests.support import task_cpu
from tests.support.ansible_run import run_playbook

PLAY = """---
- name: Two tasks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: A module run
      ansible.builtin.command: "true"
      changed_when: false
    - name: A fact the controller sets
      ansible.builtin.set_fact:
        answer: 42
"""


def test_a_run_records_its_workers_by_task_and_host_its_module_and_its_main_process(tmp_path):
    playbook, path = tmp_path / "play.yml", tmp_path / "cpu.tsv"
    playbook.write_text(PLAY)
    data, proc = run_playbook(str(playbook), inventory="localhost,",
                              extra_vars={"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                              env={"GPUOPS_TEST_TASK_CPU": str(path), "HOME": str(tmp_path)})
    assert proc.returncode == 0 and data is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = task_cpu.read(str(path))
    workers = dict(((r["name"], r["host"]), r) for r in rows if r["kind"] == "worker")
    assert sorted(workers) == [("A fact the controller sets", "localhost"), ("A module run", "localhost")], rows
    assert workers[("A module run", "localhost")]["extra"] == "ansible.builtin.command"
    modules = [r for r in rows if r["kind"] == "module"]
    assert [r["name"] for r in modules] == ["ansible.modules.command"], rows
    assert [r["name"] for r in rows if r["kind"] == "main"] == ["ansible-playbook"], rows
    # the module process is the worker's (its shell's) child: its seconds are in the worker's children's, not in the
    # other worker's
    ran = workers[("A module run", "localhost")]
    assert modules[0]["own"] > 0 and ran["children"] >= modules[0]["own"] - 0.001, (ran, modules)
    assert workers[("A fact the controller sets", "localhost")]["children"] < modules[0]["own"], rows

    summary = task_cpu.summarize(rows)
    assert sorted(t[0] for t in summary["tasks"]) == ["A fact the controller sets", "A module run"]
    assert summary["totals"]["workers"] == 2 and summary["totals"]["modules"] == 1
    assert "| A module run | 1 |" in task_cpu.render(summary)


def test_a_line_cut_short_is_left_out(tmp_path):
    path = tmp_path / "cpu.tsv"
    path.write_text("worker\tt\th\t0.5\t1.5\t7\tx\nmodule\tm\t\t0.25\t0.0\t8\t\nworker\tcut\th\t0.")
    rows = task_cpu.read(str(path))
    assert [(r["kind"], r["name"], r["own"], r["children"]) for r in rows] == [
        ("worker", "t", 0.5, 1.5), ("module", "m", 0.25, 0.0)]
    assert task_cpu.summarize(rows)["tasks"] == [("t", 1, 0.5, 1.5)]
