"""The tests' tasks finished without a worker (tests/support/compile_cache/gpuops_controller_tasks.py): a task that its
``when`` skips is decided by ansible-playbook itself, a task of ansible-core's controller-side actions runs there,
and everything a play and its callbacks see is what a worker would have sent; every other task goes to a worker;
``skip`` finishes the skips only, ``off`` and other ansible-core versions leave the strategies alone."""
import contextlib
import json
import subprocess
import sys
import types

import pytest

from tests.support import ansible_run
from tests.support.compile_cache import gpuops_controller_tasks as controller_tasks

# Each kind of task the hook must finish as a worker would. Two probes say which process did the work: the first task
# (a module's, skipped) writes the id of the process that evaluates its conditional to skip.pids, the set_fact after it
# the id of the process that templates its value to here.pids (the pipe lookup's shell prints its parent's).
PLAYBOOK = """
- name: What tasks finished without a worker look like to the play
  hosts: all
  gather_facts: false
  tasks:
    - name: A module's task skipped, its conditional says which process evaluated it
      ansible.builtin.command: "false"
      changed_when: false
      when: (lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ probes ~ '/skip.pids') ~ 'x') == 'never'
      register: first_skip

    - name: A fact set, its value says which process templated it
      ansible.builtin.set_fact:
        probed: "{{ lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ probes ~ '/here.pids; echo probed') }}"
        cacheable_fact: "{{ inventory_hostname }}"
        cacheable: true

    - name: The registered skip and the fact as the next task reads them
      ansible.builtin.assert:
        that:
          - first_skip is skipped
          - first_skip.false_condition is search('never')
          - first_skip is not changed
          - probed == 'probed'
          - cacheable_fact == inventory_hostname

    - name: A true conditional runs
      ansible.builtin.debug:
        msg: ran
      when: first_skip is skipped

    - name: A module's loop, its conditional per item (a worker's)
      ansible.builtin.command: "echo {{ item }}"
      changed_when: false
      loop: [1, 2]
      when: item == 2

    - name: A loop of facts
      ansible.builtin.set_fact:
        collected: "{{ (collected | default([])) + [item * 10] }}"
      loop: [1, 2, 3]
      when: item != 2

    - name: Delegated and skipped
      ansible.builtin.command: "false"
      delegate_to: localhost
      when: inventory_hostname == 'no-such-host'

    - name: An include skipped
      ansible.builtin.include_tasks: no-such-file.yml
      when: false

    - name: An include that runs
      ansible.builtin.include_tasks: included.yml

    - name: A block's conditional, inherited by its task
      when: first_skip is not skipped
      block:
        - name: Skipped by its block
          ansible.builtin.command: "false"

    - name: Skipped without its log
      ansible.builtin.command: "echo a secret"
      no_log: true
      when: false

    - name: Shown without its log
      ansible.builtin.debug:
        msg: another secret
      no_log: true

    - name: A conditional that cannot be evaluated fails as a worker reports it
      ansible.builtin.command: "false"
      when: no_such_variable_anywhere
      ignore_errors: true

    - name: An argument check that fails
      ansible.builtin.validate_argument_spec:
        argument_spec:
          replicas:
            type: int
        provided_arguments:
          replicas: many
      ignore_errors: true

    - name: An assert that fails
      ansible.builtin.assert:
        that: collected == [10, 20, 30]
        fail_msg: "collected {{ collected }}"
      ignore_errors: true

    - name: Skipped by a host variable
      ansible.builtin.command: "false"
      when: run_me | default(false) | bool
      ignore_errors: true
"""
INCLUDED = """
- name: A task of the included file
  ansible.builtin.debug:
    msg: "included on {{ inventory_hostname }}: {{ collected }}"
"""


def _untimed(value):
    """``value`` without the wall-clock times in it: the callback's per-task ``times``, the command module's ``start``,
    ``end`` and ``delta``."""
    if isinstance(value, dict):
        for key in ("times", "start", "end", "delta"):
            value.pop(key, None)
        for item in value.values():
            _untimed(item)
    elif isinstance(value, list):
        for item in value:
            _untimed(item)


def _play(tmp_path, name, **environ):
    """The playbook on two local hosts: (its json_results document without times, ansible-playbook's process id, the
    process ids each probe wrote)."""
    (tmp_path / "skips.yml").write_text(PLAYBOOK)
    (tmp_path / "included.yml").write_text(INCLUDED)
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(json.dumps({"all": {"hosts": {"node-a": local, "node-b": dict(local, run_me=True)}}}))
    probes = tmp_path / name
    probes.mkdir()
    cmd, env = ansible_run.playbook_command(str(tmp_path / "skips.yml"), inventory=str(inventory),
                                            extra_vars={"probes": str(probes)},
                                            env=dict(environ, GPUOPS_TEST_COMPILE_CACHE=str(tmp_path / "cache")))
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = ansible_run.parse_output(out)
    data.pop("controller", None)
    _untimed(data)
    pids = dict((kind, sorted(int(pid) for pid in (probes / ("%s.pids" % kind)).read_text().split()))
                for kind in ("skip", "here"))
    return data, proc.pid, pids


def test_tasks_finished_by_ansible_playbook_look_to_the_play_as_a_workers(tmp_path):
    runs = dict((mode, _play(tmp_path, mode or "all", GPUOPS_TEST_CONTROLLER_TASKS=mode)) for mode in ("", "skip", "off"))
    every, every_pid, every_probes = runs[""]
    # where the work was done: in ansible-playbook itself, or in a worker per host
    assert every_probes == {"skip": [every_pid] * 2, "here": [every_pid] * 2}
    _data, skip_pid, skip_probes = runs["skip"]
    assert skip_probes["skip"] == [skip_pid] * 2
    assert len(set(skip_probes["here"])) == 2 and skip_pid not in skip_probes["here"]
    _data, off_pid, off_probes = runs["off"]
    assert len(set(off_probes["skip"] + off_probes["here"])) == 4 and off_pid not in off_probes["skip"] + off_probes["here"]
    # every result, every task and the stats are the same
    assert every == runs["skip"][0] == runs["off"][0]
    tasks = dict((t["task"]["name"], t["hosts"]) for t in every["plays"][0]["tasks"])
    skipped = tasks["A module's task skipped, its conditional says which process evaluated it"]["node-a"]
    assert skipped == {"changed": False, "false_condition": skipped["false_condition"],
                       "skip_reason": "Conditional result was False"}
    assert "never" in skipped["false_condition"]
    assert tasks["A fact set, its value says which process templated it"]["node-a"]["ansible_facts"]["probed"] == "probed"
    assert tasks["A true conditional runs"]["node-a"]["msg"] == "ran"
    assert [r.get("skipped", False) for r in tasks["A module's loop, its conditional per item (a worker's)"]["node-a"]
            ["results"]] == [True, False]
    assert tasks["A task of the included file"]["node-b"]["msg"] == "included on node-b: [10, 30]"
    assert tasks["A conditional that cannot be evaluated fails as a worker reports it"]["node-a"]["failed"]
    assert "no_such_variable_anywhere" in tasks["A conditional that cannot be evaluated fails as a worker reports "
                                                "it"]["node-a"]["msg"]
    assert tasks["An argument check that fails"]["node-a"]["failed"]
    assert "replicas" in tasks["An argument check that fails"]["node-a"]["msg"]
    assert tasks["An assert that fails"]["node-a"]["msg"] == "collected [10, 30]"
    assert "secret" not in json.dumps(every)
    by_host = tasks["Skipped by a host variable"]
    assert "skip_reason" in by_host["node-a"] and by_host["node-b"]["failed"]
    assert every["stats"]["node-a"]["skipped"] == 6 and every["stats"]["node-a"]["ignored"] == 3


class _Strategy(object):
    def _queue_task(self, host, task, task_vars, play_context):   # pylint: disable=unused-argument
        return "queued"


def test_only_the_ansible_core_it_follows_gets_the_hook_and_only_once(monkeypatch):
    import ansible.release   # pylint: disable=import-outside-toplevel
    module = types.SimpleNamespace(StrategyBase=type("StrategyBase", (_Strategy,), {}))
    monkeypatch.setattr(ansible.release, "__version__", "2.16.19")
    assert controller_tasks.install(module) is None
    assert "__wrapped__" not in vars(module.StrategyBase._queue_task)
    monkeypatch.setattr(ansible.release, "__version__", "2.19.14")
    assert controller_tasks.install(module, "off") is None and "__wrapped__" not in vars(module.StrategyBase._queue_task)
    hooked = controller_tasks.install(module)
    assert isinstance(hooked, controller_tasks.ControllerTasks)
    assert controller_tasks.install(module) is None
    # a task without a conditional goes to the real queue, untouched
    task = types.SimpleNamespace(action="ansible.builtin.command", async_val=0, timeout=0, until=[], when=[], loop=None,
                                 loop_with=None)
    assert module.StrategyBase()._queue_task(None, task, {}, None) == "queued" and hooked.skipped == hooked.ran == 0


@pytest.mark.parametrize("task", [types.SimpleNamespace(when=["false"], loop=[1], loop_with=None),
                                  types.SimpleNamespace(when=["false"], loop=None, loop_with="items")],
                         ids=["loop", "with_items"])
def test_a_loop_goes_to_a_worker(task):
    hooked = object.__new__(controller_tasks.ControllerTasks)
    assert hooked.skip_result(None, None, task, {}, None) is None


def test_a_hook_that_cannot_decide_leaves_the_task_to_a_worker():
    hooked = object.__new__(controller_tasks.ControllerTasks)
    hooked.skipped = hooked.ran = 0
    hooked.run_here = True
    broken = types.SimpleNamespace(when=["false"], loop=None, loop_with=None)   # no action, no copy(): the hook's own error
    assert hooked.finish(types.SimpleNamespace(), types.SimpleNamespace(name="h"), broken, {}, None) is False
    assert hooked.skipped == hooked.ran == 0


@pytest.mark.parametrize("fields", [{"async_val": 30}, {"timeout": 5}, {"until": ["x"]}, {"action": "set_fact"},
                                    {"action": "ansible.legacy.set_fact"}, {"action": "ansible.builtin.command"}],
                         ids=["async", "timeout", "until", "short-name", "legacy", "module"])
def test_only_ansible_builtin_controller_actions_without_async_timeout_or_until_run_here(fields):
    hooked = object.__new__(controller_tasks.ControllerTasks)
    hooked.run_here = True
    plain = dict(action="ansible.builtin.set_fact", async_val=0, timeout=0, until=[])
    assert hooked.runs_here(types.SimpleNamespace(**plain))
    assert not hooked.runs_here(types.SimpleNamespace(**dict(plain, **fields)))
    hooked.run_here = False   # GPUOPS_TEST_CONTROLLER_TASKS=skip
    assert not hooked.runs_here(types.SimpleNamespace(**plain))


def test_a_result_that_cannot_be_sent_is_reported_as_the_worker_reports_it():
    """WorkerProcess._run: a result the queue refuses is replaced by a failure that says so, and the strategy still
    gets one result for the task (else it would wait for it forever)."""
    from ansible.errors import AnsibleError   # pylint: disable=import-outside-toplevel
    sent, events = [], []

    class _Queue(object):
        def send_task_result(self, result):
            if not sent:
                sent.append(None)
                raise TypeError("cannot pickle")
            sent.append(result)

    hooked = object.__new__(controller_tasks.ControllerTasks)
    hooked.skipped = hooked.ran = 0
    hooked.run_here = True
    hooked.error = AnsibleError
    hooked.error_result = lambda ex: {"failed": True, "msg": str(ex), "cause": str(ex.__cause__)}
    hooked.raw_result = lambda **kwargs: kwargs
    hooked.loaders = lambda: None
    hooked.task_context = lambda task: contextlib.nullcontext()
    hooked.executor = lambda *args: types.SimpleNamespace(run=lambda: {"changed": False, "ansible_facts": {"x": 1}})
    task = types.SimpleNamespace(action="ansible.builtin.set_fact", async_val=0, timeout=0, until=[], _uuid="u1",
                                 dump_attrs=lambda: {"name": "t"})
    task.copy = lambda exclude_tasks: task
    strategy = types.SimpleNamespace(_queued_task_cache={}, _final_q=_Queue(), _pending_results=0, _loader=None,
                                     _variable_manager=None,
                                     _tqm=types.SimpleNamespace(send_callback=lambda *args: events.append(args[0])))
    host = types.SimpleNamespace(name="node-a")
    assert hooked.finish(strategy, host, task, {}, None) is True
    assert events == ["v2_runner_on_start"] and strategy._pending_results == 1 and hooked.ran == 1
    assert len(sent) == 2 and sent[1]["task_fields"] == {}
    failure = sent[1]["return_data"]
    assert failure["failed"] and failure["cause"] == "cannot pickle"
    assert failure["msg"].startswith("Task result omitted due to queue send failure")
