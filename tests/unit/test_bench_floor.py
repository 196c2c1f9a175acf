"""bench/fleet.py's floor play (bench/fleet_floor.py): the empty play of a re-run, except that the node plan runs
for real, on the hosts it ran on, with the arguments it had on each of them."""
import os
import sys

import pytest
import yaml

from tests.support.ansible_run import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import fleet_common  # noqa: E402  # pylint: disable=wrong-import-position
import fleet_floor  # noqa: E402  # pylint: disable=wrong-import-position

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
    shape = fleet_common.batches(_run_data())
    (play,) = _load(fleet_common.empty_playbook(str(tmp_path), shape, real=(PLAN,), name="floor.yml"))
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
    shape = fleet_common.batches(_run_data())
    (play,) = _load(fleet_common.empty_playbook(str(tmp_path), shape))
    assert [sorted(k for k in t if k != "name") for t in play["tasks"]] == [
        ["ansible.builtin.debug"], ["ansible.builtin.ping"], ["ansible.builtin.ping", "vars", "when"]]
    assert os.path.basename(fleet_common.empty_playbook(str(tmp_path), shape)) == "empty.yml"


def test_only_module_tasks_without_a_loop_run_for_real():
    # the floor bench counts the tasks it keeps with the same test empty_playbook uses: a looped task of the action
    # would be mirrored by a ping, and the bench must then say it has no floor play instead of measuring one
    plan = {"module": True, "action": PLAN, "loop": 0}
    assert fleet_common.runs_real(plan, (PLAN,))
    assert not fleet_common.runs_real(dict(plan, loop=3), (PLAN,))
    assert not fleet_common.runs_real(dict(plan, module=False), (PLAN,))
    assert not fleet_common.runs_real(plan, ("gpuops.nvidia.node_labels",))


def test_the_bare_plays_keep_only_the_node_plan(tmp_path):
    data = _run_data()
    validate = {"play": {"name": "Validate"}, "tasks": [
        {"task": {"name": "Check", "action": "ansible.builtin.assert"},
         "hosts": {"node-000": {"changed": False}, "node-001": {"changed": False}}}]}
    data["plays"].insert(0, validate)
    shape = fleet_common.batches(data)
    bare = fleet_floor.bare_shape(shape, (PLAN,))
    # a play without the node plan keeps one debug on all its hosts; the node play keeps the plan alone, with the
    # arguments each host had
    assert [[t["name"] for t in b["tasks"]] for b in bare] == [["Only task"], ["Plan"]]
    assert bare[0]["tasks"][0]["ran"] == ["node-000", "node-001"] and not bare[0]["tasks"][0]["module"]
    assert bare[1]["tasks"][0] is shape[1]["tasks"][1]
    empty = _load(fleet_common.empty_playbook(str(tmp_path), bare, name="bare-empty.yml"))
    floor = _load(fleet_common.empty_playbook(str(tmp_path), bare, real=(PLAN,), name="bare-floor.yml"))
    assert [[sorted(k for k in t if k != "name") for t in p["tasks"]] for p in empty] == [
        [["ansible.builtin.debug"]], [["ansible.builtin.ping"]]]
    assert [[sorted(k for k in t if k != "name") for t in p["tasks"]] for p in floor] == [
        [["ansible.builtin.debug"]], [["environment", PLAN, "vars"]]]
    # the bench's full plays are unchanged by the reduction
    assert [t["name"] for t in shape[1]["tasks"]] == ["Declare", "Plan", "Label"]


def test_the_imports_play_runs_a_module_with_the_node_plans_imports_and_no_work(tmp_path):
    data = _run_data()
    bare = fleet_floor.bare_shape(fleet_common.batches(data), (PLAN,))
    (play,) = _load(fleet_floor.imports_playbook(str(tmp_path), bare, (PLAN,)))
    # the plan's place in the bare empty play, on the same hosts; the module beside the playbook
    (task,) = play["tasks"]
    assert sorted(task) == ["gpuops_floor_imports_of_gpu_node_plan", "name"] and task["gpuops_floor_imports_of_gpu_node_plan"] is None
    source = (tmp_path / "library" / "gpuops_floor_imports_of_gpu_node_plan.py").read_text()
    compile(source, "imports_only", "exec")
    # every import of the module's file, the ones inside its functions too (ansible-core bundles those as well)
    # (the steps' checks, with their imports of the planners, are in _node_steps since issue 38's step registry)
    for line in ("from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps",
                 "from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock"):
        assert line in source.splitlines()
    assert "from __future__" not in source and "def main" not in source
    assert source.count("from ansible.module_utils.basic import AnsibleModule") == 1
    with pytest.raises(fleet_common.BenchError, match="not a gpuops.nvidia module"):
        fleet_floor.module_source("ansible.builtin.ping")


def test_a_play_that_every_node_left_in_a_meta_task_is_not_mirrored(tmp_path):
    # site.yml's DCGM scrape play ends each node with nothing to scrape in a meta task (end_host), which the callback
    # records with no host result: the empty play leaves that play out (a play of no hosts is refused by
    # ansible-playbook: "Hosts list cannot be empty") and mirrors the others
    data = _run_data()
    data["plays"].append({"play": {"name": "Scrape"}, "tasks": [
        {"task": {"name": "Nothing to scrape", "action": "ansible.builtin.meta"}, "hosts": {}}]})
    shape = fleet_common.batches(data)
    assert [b["hosts"] for b in shape] == [["node-000", "node-001"], []]
    plays = _load(fleet_common.empty_playbook(str(tmp_path), shape))
    assert [p["name"] for p in plays] == ["Empty: GPU nodes"] and plays[0]["hosts"] == "node-000,node-001"
