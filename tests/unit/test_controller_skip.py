"""The tests' controller-side skip (tests/support/compile_cache/gpuops_controller_skip.py): a task that its ``when``
skips is decided by ansible-playbook itself, without a worker, and everything a play and its callbacks see is what a
worker would have sent; every other task goes to a worker; ``off`` and other ansible-core versions leave the
strategies alone."""
import json
import subprocess
import types

import pytest

from tests.support import ansible_run
from tests.support.compile_cache import gpuops_controller_skip as controller_skip

# Each kind of task the hook must decide as a worker would: the first task's conditional writes the process id of the
# process that evaluates it (the pipe lookup's shell prints its parent's) to the probe file.
PLAYBOOK = """
- name: What a skipped task looks like to the play, decided where the hook says
  hosts: all
  gather_facts: false
  tasks:
    - name: Skipped, its conditional says which process evaluated it
      ansible.builtin.debug:
        msg: never shown
      when: (lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ probe_file) ~ 'x') == 'never'
      register: first_skip

    - name: The registered skip as the next task reads it
      ansible.builtin.assert:
        that:
          - first_skip is skipped
          - first_skip.false_condition is search('never')
          - first_skip is not changed

    - name: A true conditional runs
      ansible.builtin.debug:
        msg: ran
      when: first_skip is skipped

    - name: A loop's conditional is per item (a worker's)
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: [1, 2]
      when: item == 2

    - name: Delegated and skipped
      ansible.builtin.debug:
        msg: never shown
      delegate_to: localhost
      when: inventory_hostname == 'no-such-host'

    - name: An include skipped
      ansible.builtin.include_tasks: no-such-file.yml
      when: false

    - name: A block's conditional, inherited by its task
      when: first_skip is not skipped
      block:
        - name: Skipped by its block
          ansible.builtin.debug:
            msg: never shown

    - name: Skipped without its log
      ansible.builtin.debug:
        msg: a secret
      no_log: true
      when: false

    - name: A conditional that cannot be evaluated fails as a worker reports it
      ansible.builtin.debug:
        msg: never shown
      when: no_such_variable_anywhere
      ignore_errors: true

    - name: Skipped by a host variable
      ansible.builtin.debug:
        msg: never shown
      when: run_me | default(false) | bool
"""


def _play(tmp_path, name, **environ):
    playbook = tmp_path / "skips.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"node-a": {"ansible_connection": "local"},
                                                       "node-b": {"ansible_connection": "local", "run_me": True}}}}))
    probe = tmp_path / ("%s.pids" % name)
    cmd, env = ansible_run.playbook_command(str(playbook), inventory=str(inventory),
                                            extra_vars={"probe_file": str(probe)},
                                            env=dict(environ, GPUOPS_TEST_COMPILE_CACHE=str(tmp_path / "cache")))
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = ansible_run.parse_output(out)
    for play in data["plays"]:
        for task in play["tasks"]:
            task.pop("times", None)
    data.pop("controller", None)
    return data, proc.pid, sorted(int(pid) for pid in probe.read_text().split())


def test_a_skipped_task_is_decided_by_ansible_playbook_and_the_play_sees_what_a_worker_sends(tmp_path):
    on, on_pid, on_probes = _play(tmp_path, "on")
    off, off_pid, off_probes = _play(tmp_path, "off", GPUOPS_TEST_CONTROLLER_SKIP="off")
    # the first task's conditional ran once per host: in ansible-playbook itself with the hook, in two workers without
    assert on_probes == [on_pid, on_pid]
    assert len(off_probes) == 2 and off_pid not in off_probes
    # every result, every task and the stats are the same
    assert on == off
    tasks = dict((t["task"]["name"], t["hosts"]) for t in on["plays"][0]["tasks"])
    skipped = tasks["Skipped, its conditional says which process evaluated it"]["node-a"]
    assert skipped == {"changed": False, "false_condition": skipped["false_condition"],
                       "skip_reason": "Conditional result was False"}
    assert "never" in skipped["false_condition"]
    assert tasks["A true conditional runs"]["node-a"]["msg"] == "ran"
    assert [r.get("skipped", False) for r in tasks["A loop's conditional is per item (a worker's)"]["node-a"]["results"]] \
        == [True, False]
    assert tasks["A conditional that cannot be evaluated fails as a worker reports it"]["node-a"]["failed"]
    assert "no_such_variable_anywhere" in tasks["A conditional that cannot be evaluated fails as a worker reports "
                                                "it"]["node-a"]["msg"]
    assert "a secret" not in json.dumps(on)
    by_host = tasks["Skipped by a host variable"]
    assert "skip_reason" in by_host["node-a"] and "msg" in by_host["node-b"]
    assert on["stats"]["node-a"]["skipped"] == off["stats"]["node-a"]["skipped"] == 6


class _Strategy(object):
    def _queue_task(self, host, task, task_vars, play_context):   # pylint: disable=unused-argument
        return "queued"


def test_only_the_ansible_core_it_follows_gets_the_hook_and_only_once(monkeypatch):
    import ansible.release   # pylint: disable=import-outside-toplevel
    module = types.SimpleNamespace(StrategyBase=type("StrategyBase", (_Strategy,), {}))
    monkeypatch.setattr(ansible.release, "__version__", "2.16.19")
    assert controller_skip.install(module) is None
    assert "__wrapped__" not in vars(module.StrategyBase._queue_task)
    monkeypatch.setattr(ansible.release, "__version__", "2.19.14")
    hooked = controller_skip.install(module)
    assert isinstance(hooked, controller_skip.ControllerSkip)
    assert controller_skip.install(module) is None
    # a task without a conditional goes to the real queue, untouched
    task = types.SimpleNamespace(when=[], loop=None, loop_with=None)
    assert module.StrategyBase()._queue_task(None, task, {}, None) == "queued" and hooked.skipped == 0


@pytest.mark.parametrize("task", [types.SimpleNamespace(when=["false"], loop=[1], loop_with=None),
                                  types.SimpleNamespace(when=["false"], loop=None, loop_with="items")],
                         ids=["loop", "with_items"])
def test_a_loop_goes_to_a_worker(task):
    hooked = object.__new__(controller_skip.ControllerSkip)
    assert hooked.skip_result(None, None, task, {}, None) is None


def test_a_hook_that_cannot_decide_leaves_the_task_to_a_worker():
    hooked = object.__new__(controller_skip.ControllerSkip)
    hooked.skipped = 0
    broken = types.SimpleNamespace(when=["false"], loop=None, loop_with=None)   # no copy(): the hook's own error
    assert hooked.skip(types.SimpleNamespace(), types.SimpleNamespace(name="h"), broken, {}, None) is False
    assert hooked.skipped == 0
