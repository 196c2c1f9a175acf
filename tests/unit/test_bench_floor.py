"""bench/fleet.py's floor play (bench/fleet_floor.py): the empty play of a re-run, except that the node plan runs
for real, on the hosts it ran on, with the arguments it had on each of them."""
import os
import sys

import yaml

from tests.support.ansible_run import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import fleet  # noqa: E402  # pylint: disable=wrong-import-position

PLAN = "gpuops.nvidia.gpu_node_plan"


def _run_data():
    """A re-run as the json_results callback records it: one play, two hosts."""
    plan_args = {
        "node-000": {"mig": {"manage": "declared", "layout": None, "config_name": "all-balanced"},
                     "files": [{"path": "/a", "checksum": None}], "lock_timeout": None, "force": False},
        "node-001": {"mig": None, "files": [], "lock_timeout": None, "force": False},
    }
    tasks = [
        {"task": {"name": "Declare", "action": "ansible.builtin.set_fact"},
         "hosts": {"node-000": {"changed": False}, "node-001": {"changed": False}}},
        {"task": {"name": "Plan", "action": PLAN},
         "hosts": dict((h, {"changed": False, "invocation": {"module_args": a}}) for h, a in plan_args.items())},
        {"task": {"name": "Label", "action": "gpuops.nvidia.node_labels"},
         "hosts": {"node-000": {"changed": False, "invocation": {"module_args": {"node_name": "node-000"}}},
                   "node-001": {"skipped": True}}},
    ]
    return {"plays": [{"play": {"name": "GPU nodes"}, "tasks": tasks}], "stats": {}}


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def test_floor_play_runs_the_plan_for_real_and_mirrors_everything_else(tmp_path):
    shape = fleet.batches(_run_data())
    (play,) = _load(fleet.empty_playbook(str(tmp_path), shape, real=(PLAN,), name="floor.yml"))
    declare, plan, label = play["tasks"]
    assert play["hosts"] == "node-000,node-001"
    assert declare == {"name": "Task 0", "ansible.builtin.debug": {"msg": ""}}
    assert label["ansible.builtin.ping"] is None and label["when"] == "inventory_hostname in __on"
    assert label["vars"] == {"__on": ["node-000"]}

    # the real task: each argument from the host's own recorded arguments, None (not given) left out at every level
    # (a None counts as given for mutually_exclusive); the node's environment, as site.yml's node play sets it
    assert sorted(plan[PLAN]) == ["files", "force", "mig"]
    assert plan[PLAN]["mig"] == "{{ __args[inventory_hostname]['mig'] | default(omit) }}"
    assert plan["vars"]["__args"] == {
        "node-000": {"mig": {"manage": "declared", "config_name": "all-balanced"}, "files": [{"path": "/a"}],
                     "force": False},
        "node-001": {"files": [], "force": False},
    }
    assert plan["environment"] == "{{ gpuops_environment | default({}) }}"
    assert "when" not in plan and "ansible.builtin.ping" not in plan


def test_the_empty_play_is_unchanged_by_the_floor(tmp_path):
    shape = fleet.batches(_run_data())
    (play,) = _load(fleet.empty_playbook(str(tmp_path), shape))
    assert [sorted(k for k in t if k != "name") for t in play["tasks"]] == [
        ["ansible.builtin.debug"], ["ansible.builtin.ping"], ["ansible.builtin.ping", "vars", "when"]]
    assert os.path.basename(fleet.empty_playbook(str(tmp_path), shape)) == "empty.yml"


def test_only_module_tasks_without_a_loop_run_for_real():
    # the floor bench counts the tasks it keeps with the same test empty_playbook uses: a looped task of the action
    # would be mirrored by a ping, and the bench must then say it has no floor play instead of measuring one
    plan = {"module": True, "action": PLAN, "loop": 0}
    assert fleet.runs_real(plan, (PLAN,))
    assert not fleet.runs_real(dict(plan, loop=3), (PLAN,))
    assert not fleet.runs_real(dict(plan, module=False), (PLAN,))
    assert not fleet.runs_real(plan, ("gpuops.nvidia.node_labels",))
