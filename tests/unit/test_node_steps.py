"""The node steps are declared once, in plugins/module_utils/_node_steps.py (issue 38, part 1).

Adding a step is one registry entry plus its role's tasks: the node plan's options (its argument spec, its
documentation and the one input per step gpu_node gives it) and the role's gates (each step's task file included
under its own gate, in the registry's order, and told whether each step is managed) are read here from the registry
and from the files, and a step missing in either fails (shown on both sides). The gate rules themselves
(node_step_gates) are tested on plan results as gpu_node_plan returns them.
"""
import json
import os
import re
import subprocess

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.node_steps import node_plan_args, node_step_gates
from ansible_collections.gpuops.nvidia.plugins.module_utils import _node_steps
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_node_plan
from tests.support.ansible_run import BIN, ansible_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "gpu_node")
TASKS = os.path.join(ROLE, "tasks")
GATE = re.compile(r"__gpu_node_gates\.(\w+)")


def _load(*path):
    with open(os.path.join(*path)) as handle:
        return yaml.safe_load(handle)


def _tasks(name):
    return _load(TASKS, name)


def _flat(tasks):
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _flat(task.get(key) or [])


def _when(task):
    when = task.get("when")
    return " ".join(when) if isinstance(when, list) else str(when or "")


def _gates_call(main):
    (gates_task,) = [t for t in main if "__gpu_node_gates" in (t.get("ansible.builtin.set_fact") or {})]
    return gates_task["ansible.builtin.set_fact"]["__gpu_node_gates"]


def registry_vs_role(steps, main, plan_inputs, documented):
    """What keeps the step registry ``steps`` and the gpu_node role (its tasks/main.yml ``main``, the node plan's
    inputs ``plan_inputs`` of vars/main.yml, the module's ``documented`` options) from being one description of the
    node steps: each problem a sentence. Empty means adding a step was one registry entry plus its role's tasks."""
    problems = []
    node_steps = [step.name for step in steps if step.tasks is not None]
    with_options = [step.name for step in steps if step.option_names]
    options = [option for step in steps for option in step.option_names]
    # the plan: the module's options are the registry's (and documented), the role gives one input per step with
    # options, through node_plan_args alone
    if sorted(options + ["lock_timeout"]) != sorted(documented):
        problems.append("gpu_node_plan documents %s, the registry declares %s"
                        % (sorted(documented), sorted(options + ["lock_timeout"])))
    if sorted(plan_inputs) != sorted(with_options):
        problems.append("vars/main.yml's __gpu_node_plan_inputs names %s, the registry's steps with options are %s"
                        % (sorted(plan_inputs), sorted(with_options)))
    plan_tasks = [t for t in main if "gpuops.nvidia.gpu_node_plan" in t]
    if len(plan_tasks) != 1 or plan_tasks[0]["gpuops.nvidia.gpu_node_plan"] != {} or \
            "__gpu_node_plan_inputs | gpuops.nvidia.node_plan_args" not in \
            str((plan_tasks[0].get("module_defaults") or {}).get("gpuops.nvidia.gpu_node_plan")):
        problems.append("main.yml's plan task must take its arguments from __gpu_node_plan_inputs alone")
    # the gates: one mapping of whether each node step is managed, and each step's file included under its gate alone,
    # in the registry's order
    managed = re.findall(r"'(\w+)':", _gates_call(main))
    if sorted(managed) != sorted(node_steps):
        problems.append("the gates are told whether %s are managed, the registry's node steps are %s"
                        % (sorted(managed), node_steps))
    included = []
    for task in main:
        target = task.get("ansible.builtin.include_tasks")
        gates = GATE.findall(_when(task))
        # (a step's file, included; not another task under the same gate, like the driver's plan before the quiesce)
        if target and gates and gates[0] != "disruptive" \
                and _when(task).strip().startswith("__gpu_node_gates.%s" % gates[0]):
            included.append((gates[0], target))
    for step in steps:
        if step.tasks is not None and (step.name, step.tasks) not in included:
            problems.append("main.yml does not include %s under __gpu_node_gates.%s" % (step.tasks, step.name))
    for name, target in included:
        if name not in node_steps:
            problems.append("main.yml gates %s on a step the registry lacks: %s" % (target, name))
    order = [name for name, target in included if name in node_steps]
    if order != [name for name in node_steps if name in order]:
        problems.append("main.yml includes the steps in the order %s, the registry's is %s" % (order, node_steps))
    return problems


def _role():
    # main.yml plans and gates (plan.yml, which it imports; driver.yml includes it again after a driver change);
    # steps.yml (included by main.yml where something has work) includes each step's file
    # (the tasks inside blocks too: plan.yml's plan task sits in a block whose rescue marks an unhealthy node)
    main = list(_flat(_tasks("main.yml") + _tasks("plan.yml") + _tasks("steps.yml")))
    inputs = _load(ROLE, "vars", "main.yml")["__gpu_node_plan_inputs"]
    documented = list(yaml.safe_load(gpu_node_plan.DOCUMENTATION)["options"]) + ["lock_timeout"]
    return main, inputs, documented


def test_adding_a_step_is_one_registry_entry_plus_its_role_tasks():
    main, inputs, documented = _role()
    assert registry_vs_role(_node_steps.STEPS, main, inputs, documented) == []
    # the module's argument spec is built from the registry, and every step's `step` default is a node step
    spec = _node_steps.argument_spec(lock_timeout=dict(type="int"))
    assert sorted(spec) == sorted(documented)
    defaults = [s["options"]["step"]["default"] for s in spec.values() if "step" in (s.get("options") or {})
                and "default" in s["options"]["step"]]
    assert sorted(defaults) == ["cdi", "containerd_runtime", "runtime_mode"]


def test_a_step_missing_on_either_side_is_found():
    main, inputs, documented = _role()
    # a step the registry has and the role lacks: its include, its gate's managed flag, its plan input
    no_cdi_include = [t for t in main if t.get("ansible.builtin.include_tasks") != "cdi.yml"]
    assert registry_vs_role(_node_steps.STEPS, no_cdi_include, inputs, documented) == [
        "main.yml does not include cdi.yml under __gpu_node_gates.cdi"]
    main_no_flag = [dict(t, **{"ansible.builtin.set_fact": dict(t["ansible.builtin.set_fact"], __gpu_node_gates=_gates_call(
        main).replace("'cdi': __gpu_node_cdi_on", ""))}) if t is _gates_task(main) else t for t in main]
    assert any("the gates are told whether" in p for p in registry_vs_role(_node_steps.STEPS, main_no_flag, inputs,
                                                                           documented))
    no_input = dict((k, v) for k, v in inputs.items() if k != "runtime_mode")
    assert any("__gpu_node_plan_inputs names" in p for p in registry_vs_role(_node_steps.STEPS, main, no_input,
                                                                             documented))
    # a step the role has and the registry lacks
    fewer = tuple(step for step in _node_steps.STEPS if step.name != "cdi")
    found = registry_vs_role(fewer, main, inputs, documented)
    assert "main.yml gates cdi.yml on a step the registry lacks: cdi" in found and len(found) == 4, found
    # the steps out of the registry's order
    swapped = list(main)
    a, b = [i for i, t in enumerate(main) if t.get("ansible.builtin.include_tasks") in ("runtime_mode.yml", "cdi.yml")]
    swapped[a], swapped[b] = swapped[b], swapped[a]
    assert [p for p in registry_vs_role(_node_steps.STEPS, swapped, inputs, documented) if "order" in p]


def _gates_task(main):
    (task,) = [t for t in main if "__gpu_node_gates" in (t.get("ansible.builtin.set_fact") or {})]
    return task


def test_molecules_gpu_verify_plans_with_the_roles_inputs():
    (play,) = _load(ROOT, "extensions", "molecule", "gpu", "verify.yml")
    (task,) = [t for t in play["tasks"] if "gpuops.nvidia.gpu_node_plan" in t]
    assert task["gpuops.nvidia.gpu_node_plan"] == {}
    assert "__gpu_node_plan_inputs | gpuops.nvidia.node_plan_args(" in task["module_defaults"]["gpuops.nvidia.gpu_node_plan"]
    assert [t["ansible.builtin.include_role"]["tasks_from"] for t in play["tasks"] if "ansible.builtin.include_role" in t] \
        == ["validate.yml", "resolve.yml", "declare.yml"]


def test_no_task_file_rewrites_a_variable_or_another_steps_facts():
    spec = _load(ROLE, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    set_by = {}
    for name in sorted(os.listdir(TASKS)):
        for task in _flat(_tasks(name) or []):
            for fact in (task.get("ansible.builtin.set_fact") or {}):
                set_by.setdefault(fact, []).append(name)
    assert set_by and not set(set_by) & set(spec), set(set_by) & set(spec)       # no user variable is set
    assert dict((f, n) for f, n in set_by.items() if len(n) > 1) == {}             # each fact is set in one place
    assert "__gpu_node_work" not in set_by


def test_the_registry_is_checked():
    assert _node_steps.registry_problems(_node_steps.STEPS) == []
    steps = list(_node_steps.STEPS)
    bad = [_node_steps.Step("orphan", {"orphan": dict(type="dict")}, tasks="orphan.yml")] + steps + \
          [_node_steps.Step("late", {}, tasks="late.yml", reruns=("mig",)),
           _node_steps.Step("reboot", {}, tasks="reboot.yml", disruptive=True)]
    assert _node_steps.registry_problems(bad) == [
        "step orphan has options but no check",
        "step late reruns mig, which is not a node step after it",
        "disruptive step reboot comes after compute_mode, cdi, health, which runs again after a disruptive change"]
    with pytest.raises(AnsibleFilterError, match="the step registry is wrong: step orphan has options but no check"):
        try:
            _node_steps.gates({"steps": {}}, {}, steps=bad)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc))


def test_the_driver_and_health_steps_fit_the_registry():
    """The driver step is one entry, first (disruptive; MIG, compute mode and the CDI spec run again after it), and
    health one more, last (a read, run again after any disruptive change, never disruptive)."""
    def check(module, facts, params):
        return None, {}
    driver = _node_steps.BY_NAME["driver"]
    assert _node_steps.STEPS[0] is driver and driver.disruptive and driver.tasks == "driver.yml"
    assert driver.reruns == ("mig", "compute_mode", "cdi") and not driver.needs_nvml
    assert [s.name for s in _node_steps.STEPS if s.needs_nvml] == ["mig", "compute_mode", "cdi", "health"]
    health = _node_steps.STEPS[-1]
    assert health.name == "health" and health.after_disruption and not health.disruptive
    steps = _node_steps.STEPS
    assert _node_steps.registry_problems(steps) == []
    managed = dict(MANAGED, driver=True, health=True)
    quiet = {"mig": [], "compute_mode": [], "containerd_runtime": [], "cdi": [], "runtime_mode": [], "health": []}
    # a converged node: nothing runs
    plan = _plan(dict(quiet, driver=[]), mig={"managed": True, "disruptive": []})
    plan["driver"] = {"disruptive": []}
    assert not any(_node_steps.gates(plan, managed, steps=steps).values())
    # a driver change: disruptive; MIG (its instances are lost), compute mode, the CDI spec and health run after it
    plan = _plan(dict(quiet, driver=["driver 570 -> 580"]), mig={"managed": True, "disruptive": []})
    plan["driver"] = {"disruptive": ["driver 570 -> 580"]}
    gates = _node_steps.gates(plan, managed, steps=steps)
    assert gates == {"driver": True, "mig": True, "compute_mode": True, "container_toolkit": False,
                     "containerd_runtime": False, "runtime_mode": False, "cdi": True, "health": True,
                     "disruptive": True}
    # an unhealthy node with nothing else to do: health alone, nothing disruptive
    plan = _plan(dict(quiet, driver=[], health=["GPU 3: XID 79"]), mig={"managed": True, "disruptive": []})
    gates = _node_steps.gates(plan, managed, steps=steps)
    assert [k for k, v in gates.items() if v] == ["health"]


def test_the_toolkit_makes_the_container_runtime_steps_run():
    plan = _plan({"mig": [], "compute_mode": [], "container_toolkit": ["nvidia-container-toolkit 1.17.8 -> 1.20.0-1"],
                  "containerd_runtime": [], "runtime_mode": [], "cdi": []}, mig={"managed": True, "disruptive": []})
    plan["installs"] = {}
    on = dict(MANAGED, container_toolkit=True)
    gates = node_step_gates(plan, on)
    assert [k for k, v in gates.items() if v] == ["container_toolkit", "containerd_runtime", "runtime_mode", "cdi"]
    # not where they are not managed (the GPU Operator's toolkit writes containerd's runtime)
    assert not node_step_gates(plan, dict(on, containerd_runtime=False))["containerd_runtime"]
    # check mode: the upgrade changes nothing, so they run only with work of their own
    plan["steps"]["cdi"] = ["no record"]
    assert [k for k, v in node_step_gates(plan, on, True).items() if v] == ["container_toolkit", "cdi"]
    # check mode, the toolkit not installed yet: what they run is not there, so they are not planned at all
    plan["installs"] = {"container_toolkit": ["nvidia-container-toolkit"]}
    assert [k for k, v in node_step_gates(plan, on, "true").items() if v] == ["container_toolkit"]
    # applying: they run
    assert node_step_gates(plan, on, False)["containerd_runtime"]


def test_the_plan_arguments_come_from_one_input_per_step():
    inputs = {"driver": None, "mig": {"manage": "declared", "config_name": "all-balanced", "allow_reset": True, "force": False},
              "compute_mode": None, "declared": {"files": [], "units": [], "packages": []},
              "containerd_runtime": None, "runtime_mode": {"mode": "cdi"}, "cdi": None, "health": None}
    assert node_plan_args(inputs) == {"mig": inputs["mig"], "files": [], "units": [], "packages": [],
                                      "runtime_mode": {"mode": "cdi"}}
    assert node_plan_args(inputs, ["mig"]) == {"mig": inputs["mig"]}
    # ansible-core 2.16 renders "{{ none }}" as "": such a step is not planned either (make compat found it)
    assert node_plan_args(dict(inputs, driver="", cdi=" ")) == node_plan_args(inputs)
    with pytest.raises(AnsibleFilterError, match=re.escape(
            "node_plan_args: expects, for each step of the node plan (driver, mig, compute_mode, declared, "
            "containerd_runtime, runtime_mode, cdi, health), its options or none; got cdi, compute_mode, "
            "containerd_runtime, declared, driver, health, mig")):
        node_plan_args(dict((k, v) for k, v in inputs.items() if k != "runtime_mode"))
    with pytest.raises(AnsibleFilterError, match="only must be a list of steps of the node plan"):
        node_plan_args(inputs, ["gpu_reset"])
    # a list or a dict among the steps: before, set() of it raised TypeError (unhashable type), a traceback
    for only in ([["mig"]], [{"mig": 1}]):
        with pytest.raises(AnsibleFilterError, match="only must be a list of steps of the node plan"):
            node_plan_args(inputs, only)
    with pytest.raises(AnsibleFilterError, match=re.escape("step declared: expects its options (files, packages, units)")):
        node_plan_args(dict(inputs, declared={"file": []}))


MANAGED = {"driver": False, "mig": True, "compute_mode": True, "container_toolkit": False, "containerd_runtime": True,
           "cdi": True, "runtime_mode": True, "health": True}


def _plan(steps, mig=None):
    plan = {"changed": False, "steps": steps, "files": {}}
    if mig is not None:
        plan["mig"] = mig
    return plan


def test_a_converged_node_runs_no_step():
    plan = _plan({"mig": [], "compute_mode": [], "containerd_runtime": [], "cdi": [], "runtime_mode": []},
                 mig={"managed": True, "disruptive": []})
    assert node_step_gates(plan, MANAGED) == dict((name, False) for name in list(MANAGED) + ["disruptive"])
    # a node that declares its driver, converged: nothing runs either
    plan["steps"]["driver"], plan["driver"] = [], {"action": "none", "disruptive": []}
    assert not any(node_step_gates(plan, dict(MANAGED, driver=True)).values())


def test_a_mig_change_quiesces_and_runs_compute_mode_and_cdi_again():
    plan = _plan({"mig": ["MIG layout changes on GPU(s) 0"], "compute_mode": [], "containerd_runtime": [],
                  "cdi": [], "runtime_mode": []},
                 mig={"managed": True, "disruptive": ["MIG layout changes on GPU(s) 0"]})
    gates = node_step_gates(plan, MANAGED)
    assert gates == {"driver": False, "mig": True, "compute_mode": True, "container_toolkit": False,
                     "containerd_runtime": False, "cdi": True, "runtime_mode": False, "health": True,
                     "disruptive": True}
    # MIG left to the GPU Operator (not managed here): nothing of it runs, nothing is disruptive
    gates = node_step_gates(plan, dict(MANAGED, mig=False))
    assert not gates["mig"] and not gates["disruptive"] and not gates["compute_mode"] and not gates["cdi"] \
        and not gates["health"]
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
    ({"steps": {}}, dict(MANAGED, gpu_reset=True), "for each node step (driver, mig, compute_mode, container_toolkit, "),
    ({"steps": {}}, dict((k, v) for k, v in MANAGED.items() if k != "cdi"),
     "got compute_mode, container_toolkit, containerd_runtime, driver, health, mig, runtime_mode"),
    ({"steps": {}}, dict(MANAGED, cdi="maybe"), "whether step cdi is managed must be a boolean, got 'maybe'"),
    ("plan", MANAGED, "expects gpu_node_plan's result (a dict with steps), got str"),
    ({"steps": {"cdi": "stale"}}, MANAGED, "steps.cdi must be the list of reasons the plan found, got str"),
    ({"steps": {}, "mig": {"managed": True, "disruptive": 1}}, MANAGED,
     "mig.disruptive must be a list of reasons"),
])
def test_bad_input_says_what_is_wrong(plan, managed, words):
    with pytest.raises(AnsibleFilterError, match=re.escape("node_step_gates: ") + ".*" + re.escape(words)):
        node_step_gates(plan, managed)


@pytest.mark.parametrize("driver_on", [False, True])
def test_the_driver_options_are_templated_only_where_the_driver_step_is_planned(tmp_path, driver_on):
    """A node that declares no driver (the default) does not template the driver's options when the node plan's
    arguments are built: Jinja templates every variable a template names, taken branch or not (issue 36 item 7). A
    driver variable whose template leaves a mark shows whether it was templated; where the step is planned, the
    options are what the node plan is given."""
    # (one ansible-playbook run on localhost over gpu_node's vars/main.yml)
    mark = tmp_path / "templated"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "vars_files": [os.path.join(ROLE, "vars", "main.yml")],
        "vars": {"__gpu_node_driver_on": driver_on, "driver_version": "580.95.05",
                 "gpu_node_driver_fabric_timeout": 300,
                 "gpu_node_driver_systemctl": "{{ lookup('ansible.builtin.pipe', 'touch %s') or 'systemctl' }}" % mark},
        "tasks": [{"ansible.builtin.debug": {"msg": "{{ __gpu_node_plan_inputs.driver }}"}}]}]))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), str(playbook), "-i", "localhost,", "-c", "local"],
                          env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    msg = data["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    if driver_on:
        assert msg == {"version": "580.95.05", "branch": "", "flavour": "open", "root": None, "fabric_manager": "auto",
                       "persistenced": True, "systemctl": "systemctl", "fabric_timeout": 300,
                       "fabric_manager_version": "", "allow_downgrade": False}
        assert mark.exists()
    else:
        assert msg is None
        assert not mark.exists(), "the driver's options were templated on a node that plans no driver"
