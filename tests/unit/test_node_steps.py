"""The node steps are declared once, in plugins/module_utils/_node_steps.py (issue 38, part 1).

Adding a step is one registry entry plus its role's tasks: the node plan's options (its argument spec, its
documentation and what gpu_node passes it) and the role's gates (each step's task file included where its gate says
so) are read here from the registry and from the files, and a step missing in either fails. The gate rules themselves
(node_step_gates) are tested on plan results as gpu_node_plan returns them.
"""
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.node_steps import node_step_gates
from ansible_collections.gpuops.nvidia.plugins.module_utils import _node_steps
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_node_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = os.path.join(ROOT, "roles", "gpu_node", "tasks")
# the gates a step's include may test: the mapping, or (the container runtime's steps, which toolkit.yml's re-check
# still adds reasons to after an install) the plan's reasons
GATE = re.compile(r"__gpu_node_(?:gates|work)\.(\w+)")


def _tasks(name):
    with open(os.path.join(TASKS, name)) as handle:
        return yaml.safe_load(handle)


def _flat(tasks):
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _flat(task.get(key) or [])


def _when(task):
    when = task.get("when")
    return " ".join(when) if isinstance(when, list) else str(when or "")


def test_the_node_plans_options_are_the_registrys_steps():
    spec = _node_steps.argument_spec(lock_timeout=dict(type="int"))
    documented = yaml.safe_load(gpu_node_plan.DOCUMENTATION)["options"]
    # every option of every step is documented, and nothing else is (lock_timeout is the node lock's fragment)
    assert sorted(spec) == sorted(list(documented) + ["lock_timeout"])
    (plan_task,) = [t for t in _tasks("main.yml") if "gpuops.nvidia.gpu_node_plan" in t]
    passed = plan_task["gpuops.nvidia.gpu_node_plan"]
    # gpu_node passes the node plan every option of every step
    assert sorted(passed) == sorted(o for step in _node_steps.STEPS for o in step.options)
    # a step's `step` default (where its reasons go) is a node step of the registry
    defaults = [s["options"]["step"]["default"] for s in spec.values() if "step" in (s.get("options") or {})
                and "default" in s["options"]["step"]]
    assert defaults and set(defaults) <= set(_node_steps.node_steps())


def test_every_step_with_options_has_exactly_one_check():
    checks = _node_steps.checks(gpu_node_plan.LOCAL_CHECKS)
    with_options = [step.name for step in _node_steps.STEPS if step.options]
    assert [step.name for step, check in checks] == with_options and all(callable(c) for s, c in checks)
    with pytest.raises(ValueError, match="cdi needs exactly one check, has none"):
        _node_steps.checks({"containerd_runtime": gpu_node_plan.LOCAL_CHECKS["containerd_runtime"]})
    with pytest.raises(ValueError, match="mig needs exactly one check, has two"):
        _node_steps.checks(dict(gpu_node_plan.LOCAL_CHECKS, mig=gpu_node_plan.LOCAL_CHECKS["cdi"]))
    with pytest.raises(ValueError, match="registry does not have: driver"):
        _node_steps.checks(dict(gpu_node_plan.LOCAL_CHECKS, driver=gpu_node_plan.LOCAL_CHECKS["cdi"]))


def test_the_role_gates_every_registry_step_and_no_other():
    steps = _node_steps.node_steps()
    main = _tasks("main.yml")
    gated = {}
    for task in main:
        target = task.get("ansible.builtin.include_tasks")
        for name in GATE.findall(_when(task)):
            gated.setdefault(name, set()).add(target)
    for step in _node_steps.STEPS:
        if step.tasks is None:
            continue
        # the step's task file is included from main.yml under a gate that names the step
        assert step.tasks in gated.get(step.name, ()), (step.name, step.tasks, gated)
    # and every step a gate of main.yml names is a registry step (disruptive: the mapping's other answer)
    assert set(gated) - {"disruptive"} <= set(steps), set(gated) - set(steps)
    # the mapping is given whether each registry step, and no other, is managed on this node
    (gates_task,) = [t for t in main if "__gpu_node_gates" in (t.get("ansible.builtin.set_fact") or {})]
    call = gates_task["ansible.builtin.set_fact"]["__gpu_node_gates"]
    assert "gpuops.nvidia.node_step_gates" in call
    assert sorted(re.findall(r"'(\w+)':", call)) == sorted(steps)
    # the steps' own task files test the same gates (mig.yml applies MIG where its gate says so)
    inner = [t for t in _flat(_tasks("mig.yml")) if "__gpu_node_gates.mig" in _when(t)]
    assert [t["name"] for t in inner] == ["Apply MIG mode and layout"]


MANAGED = {"mig": True, "compute_mode": True, "container_toolkit": False, "containerd_runtime": True, "cdi": True,
           "runtime_mode": True}


def _plan(steps, mig=None):
    plan = {"changed": False, "steps": steps, "files": {}}
    if mig is not None:
        plan["mig"] = mig
    return plan


def test_a_converged_node_runs_no_step():
    plan = _plan({"mig": [], "compute_mode": [], "containerd_runtime": [], "cdi": [], "runtime_mode": []},
                 mig={"managed": True, "disruptive": []})
    assert node_step_gates(plan, MANAGED) == dict((name, False) for name in list(MANAGED) + ["disruptive"])


def test_a_mig_change_quiesces_and_runs_compute_mode_and_cdi_again():
    plan = _plan({"mig": ["MIG layout changes on GPU(s) 0"], "compute_mode": [], "containerd_runtime": [],
                  "cdi": [], "runtime_mode": []},
                 mig={"managed": True, "disruptive": ["MIG layout changes on GPU(s) 0"]})
    gates = node_step_gates(plan, MANAGED)
    assert gates == {"mig": True, "compute_mode": True, "container_toolkit": False, "containerd_runtime": False,
                     "cdi": True, "runtime_mode": False, "disruptive": True}
    # MIG left to the GPU Operator (not managed here): nothing of it runs, nothing is disruptive
    gates = node_step_gates(plan, dict(MANAGED, mig=False))
    assert not gates["mig"] and not gates["disruptive"] and not gates["compute_mode"] and not gates["cdi"]
    # with compute mode not managed (DRA) it stays off whatever MIG does
    assert not node_step_gates(plan, dict(MANAGED, compute_mode=False))["compute_mode"]


def test_a_step_runs_only_where_managed_and_with_work():
    plan = _plan({"mig": [], "container_toolkit": ["nvidia-container-toolkit not installed"],
                  "containerd_runtime": ["no verified state"]}, mig={"managed": False, "disruptive": []})
    gates = node_step_gates(plan, dict(MANAGED, container_toolkit="true", containerd_runtime="false"))
    assert gates["container_toolkit"] and not gates["containerd_runtime"] and not gates["mig"]
    # a plan that found MIG's files wrong where MIG is not managed (the plan says so): no MIG step
    plan = _plan({"mig": ["/etc/gpuops/mig.json differs"]}, mig={"managed": False, "disruptive": []})
    assert not node_step_gates(plan, MANAGED)["mig"]


@pytest.mark.parametrize("plan, managed, words", [
    ({"steps": {}}, dict(MANAGED, driver=True), "for each node step (mig, compute_mode, container_toolkit, "),
    ({"steps": {}}, dict((k, v) for k, v in MANAGED.items() if k != "cdi"),
     "got compute_mode, container_toolkit, containerd_runtime, mig, runtime_mode"),
    ({"steps": {}}, dict(MANAGED, cdi="maybe"), "whether step cdi is managed must be a boolean, got 'maybe'"),
    ("plan", MANAGED, "expects gpu_node_plan's result (a dict with steps), got str"),
    ({"steps": {"cdi": "stale"}}, MANAGED, "steps.cdi must be the list of reasons the plan found, got str"),
    ({"steps": {}, "mig": {"managed": True, "disruptive": 1}}, MANAGED,
     "mig.disruptive must be a list of reasons"),
])
def test_bad_input_says_what_is_wrong(plan, managed, words):
    with pytest.raises(AnsibleFilterError, match=re.escape("node_step_gates: ") + ".*" + re.escape(words)):
        node_step_gates(plan, managed)
