"""The node steps are declared once, in plugins/module_utils/node/_node_steps.py (issue 38, part 1).

Adding a step is one registry entry plus its role's tasks: the node plan's options (its argument spec, its
documentation and the one input per step gpu_node gives it) and the role's gates (each step's task file included
under its own gate, in the registry's order, and told whether each step is managed) are read here from the registry
and from the files, and a step missing in either fails (shown on both sides). The gate rules themselves
(node_step_gates) are tested on plan results as gpu_node_plan returns them.
"""
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.node_steps import node_plan_args, node_step_gates
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _burn_in
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_node_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "gpu_node")
TASKS = os.path.join(ROLE, "tasks")
VARS = os.path.join(ROLE, "vars", "main.yml")
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


def registry_vs_role(steps, plan, role_steps, documented, files):
    """What keeps the step registry ``steps`` and the gpu_node role (the tasks of plan.yml ``plan`` and steps.yml
    ``role_steps``, the module's ``documented`` options, the task files ``files`` of the role) from being one
    description of the node steps: each problem a sentence. Empty means adding a step is one registry entry and its
    task file. (The options' content - types, defaults, choices, suboptions - is checked against the documentation by
    ansible-test's validate-modules: the module's argument spec is the registry's.)"""
    problems = []
    node_steps = [step.name for step in steps if step.tasks is not None]
    options = [option for step in steps for option in step.option_names]
    if sorted(options + ["lock_timeout", "steps"]) != sorted(documented):
        problems.append("gpu_node_plan documents %s, the registry declares %s"
                        % (sorted(documented), sorted(options + ["lock_timeout", "steps"])))
    # the plan: its options come from the registry (gpu_node_plan's action), none from the task or module_defaults
    plan_tasks = [t for t in plan if "gpuops.nvidia.gpu_node_plan" in t]
    if len(plan_tasks) != 1 or plan_tasks[0]["gpuops.nvidia.gpu_node_plan"] != {} or "module_defaults" in plan_tasks[0]:
        problems.append("plan.yml's plan task must give the module nothing (its action builds the options)")
    # the gates: the role variable over the registered result (vars/main.yml), never a fact that could go stale
    if [t for t in plan if "__gpu_node_gates" in (t.get("ansible.builtin.set_fact") or {})]:
        problems.append("plan.yml must not set __gpu_node_gates (vars/main.yml reads it from the registered plan)")
    if _load(VARS).get("__gpu_node_gates") != "{{ __gpu_node_plan.gates }}":
        problems.append("vars/main.yml must give __gpu_node_gates as the plan's gates alone")
    # the disruptive steps included by name under their own gate, in order; every other one by the one loop after them
    by_name, loops = [], []
    for index, task in enumerate(role_steps):
        target = task.get("ansible.builtin.include_tasks")
        when = _when(task).strip()
        gate = GATE.match(when)
        if target and gate and when == "__gpu_node_gates.%s" % gate.group(1) and gate.group(1) != "disruptive":
            by_name.append((gate.group(1), target, index))
        if target == "{{ __gpu_node_step.tasks }}":
            loops.append((task, index))
    disruptive = [step.name for step in steps if step.tasks is not None and step.disruptive]
    for step in steps:
        if step.tasks is not None and step.tasks not in files:
            problems.append("the registry names %s for step %s, the role has no such task file" % (step.tasks, step.name))
        if step.tasks is not None and step.disruptive and (step.name, step.tasks) not in [b[:2] for b in by_name]:
            problems.append("steps.yml does not include %s under __gpu_node_gates.%s" % (step.tasks, step.name))
    for name, target, index in by_name:
        if name not in disruptive:
            problems.append("steps.yml includes %s by name under a gate of %s, which is %s" % (
                target, name, "not in the registry" if name not in node_steps else "not a disruptive step (the loop "
                "includes it)"))
    order = [name for name, target, index in by_name if name in disruptive]
    if order != [name for name in disruptive if name in order]:
        problems.append("steps.yml includes the disruptive steps in the order %s, the registry's is %s"
                        % (order, disruptive))
    if len(loops) != 1 or loops[0][0].get("loop") != "{{ __gpu_node_plan.runs }}" or loops[0][0].get("when"):
        problems.append("steps.yml must include every other step by one loop over __gpu_node_plan.runs, ungated")
    elif order and loops[0][1] < max(index for name, target, index in by_name if name in disruptive):
        problems.append("steps.yml's loop over the other steps must come after the disruptive steps")
    return problems


def _role():
    # plan.yml plans and sets the gates (converge.yml imports it; driver.yml and operator.yml include it again after a
    # change); steps.yml (included by converge.yml where something has work) includes each step's file
    # (the tasks inside blocks too: plan.yml's plan task sits in a block whose rescue marks an unhealthy node)
    plan = list(_flat(_tasks("plan.yml")))
    role_steps = list(_flat(_tasks("steps.yml")))
    documented = list(yaml.safe_load(gpu_node_plan.DOCUMENTATION)["options"]) + ["lock_timeout"]
    return plan, role_steps, documented, sorted(os.listdir(TASKS))


def test_adding_a_step_is_one_registry_entry_plus_its_task_file():
    plan, role_steps, documented, files = _role()
    assert registry_vs_role(_node_steps.STEPS, plan, role_steps, documented, files) == []
    # the module's argument spec is built from the registry, and every step's `step` default is a node step
    spec = gpu_node_plan.NodePlan.argument_spec
    assert sorted(spec) == sorted(documented)
    assert spec["steps"]["choices"] == [step.name for step in _node_steps.STEPS if step.option_names]
    assert yaml.safe_load(gpu_node_plan.DOCUMENTATION)["options"]["steps"]["choices"] == spec["steps"]["choices"]
    defaults = [s["options"]["step"]["default"] for s in spec.values() if "step" in (s.get("options") or {})
                and "default" in s["options"]["step"]]
    assert sorted(defaults) == ["cdi", "containerd_runtime", "dev_char", "runtime_mode"]


def test_a_step_missing_on_either_side_is_found():
    plan, role_steps, documented, files = _role()
    # a disruptive step the registry has and steps.yml lacks; a task file the role lacks
    no_mig = [t for t in role_steps if t.get("ansible.builtin.include_tasks") != "mig.yml"]
    assert registry_vs_role(_node_steps.STEPS, plan, no_mig, documented, files) == [
        "steps.yml does not include mig.yml under __gpu_node_gates.mig"]
    assert registry_vs_role(_node_steps.STEPS, plan, role_steps, documented, [f for f in files if f != "cdi.yml"]) == [
        "the registry names cdi.yml for step cdi, the role has no such task file"]
    # a step included by name outside the loop, or the loop gone or gated
    by_name = role_steps + [{"ansible.builtin.include_tasks": "cdi.yml", "when": "__gpu_node_gates.cdi"}]
    assert registry_vs_role(_node_steps.STEPS, plan, by_name, documented, files) == [
        "steps.yml includes cdi.yml by name under a gate of cdi, which is not a disruptive step (the loop includes it)"]
    no_loop = [t for t in role_steps if t.get("loop") != "{{ __gpu_node_plan.runs }}"]
    assert registry_vs_role(_node_steps.STEPS, plan, no_loop, documented, files) == [
        "steps.yml must include every other step by one loop over __gpu_node_plan.runs, ungated"]
    # the plan given options by the role again
    given = [dict(t, module_defaults={"gpuops.nvidia.gpu_node_plan": "{{ x }}"}) if "gpuops.nvidia.gpu_node_plan" in t
             else t for t in plan]
    assert registry_vs_role(_node_steps.STEPS, given, role_steps, documented, files) == [
        "plan.yml's plan task must give the module nothing (its action builds the options)"]
    # a step the role has and the registry lacks
    fewer = tuple(step for step in _node_steps.STEPS if step.name != "mig")
    found = registry_vs_role(fewer, plan, role_steps, documented, files)
    assert "steps.yml includes mig.yml by name under a gate of mig, which is not in the registry" in found, found
    # the disruptive steps out of the registry's order
    swapped = list(role_steps)
    a, b = [i for i, t in enumerate(role_steps) if t.get("ansible.builtin.include_tasks") in ("driver.yml", "mig.yml")]
    swapped[a], swapped[b] = swapped[b], swapped[a]
    assert [p for p in registry_vs_role(_node_steps.STEPS, plan, swapped, documented, files) if "order" in p]


def test_molecules_gpu_verify_plans_with_the_roles_inputs():
    (play,) = _load(ROOT, "extensions", "molecule", "gpu", "verify.yml")
    (task,) = [t for t in play["tasks"] if "gpuops.nvidia.gpu_node_plan" in t]
    assert task["gpuops.nvidia.gpu_node_plan"] == {"steps": ["mig", "compute_mode", "runtime_mode", "cdi"]}
    assert "module_defaults" not in task
    assert [t["ansible.builtin.include_role"]["tasks_from"] for t in play["tasks"] if "ansible.builtin.include_role" in t] \
        == ["validate.yml", "declare.yml"]
    (decide,) = [t for t in play["tasks"] if "__gpu_node" in (t.get("ansible.builtin.set_fact") or {})]
    assert decide["ansible.builtin.set_fact"]["__gpu_node"] == "{{ lookup('gpuops.nvidia.node_steps') }}"


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
    assert driver.reruns == ("mig", "compute_mode", "cdi", "dev_char") and not driver.needs_nvml
    assert [s.name for s in _node_steps.STEPS if s.needs_nvml] == ["mig", "compute_mode", "cdi", "dev_char", "host_imex",
                                                                   "burn_in", "health"]
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
                     "containerd_runtime": False, "runtime_mode": False, "cdi": True, "dev_char": False, "dcgm": False, "host_imex": False,
                     "burn_in": False, "health": True, "disruptive": True}
    # where the /dev/char links are managed, a driver change makes them run again (nvidia-uvm's major may change)
    assert _node_steps.gates(plan, dict(managed, dev_char=True), steps=steps)["dev_char"]
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
    # (and the health gate, which reads the GPUs again after any change of a real run)
    assert [k for k, v in gates.items() if v] == [
        "container_toolkit", "containerd_runtime", "runtime_mode", "cdi", "health"]
    # not where they are not managed (the GPU Operator's toolkit writes containerd's runtime)
    assert not node_step_gates(plan, dict(on, containerd_runtime=False))["containerd_runtime"]
    # check mode: the upgrade changes nothing, so they run only with work of their own
    plan["steps"]["cdi"] = ["no record"]
    assert [k for k, v in node_step_gates(plan, on, True).items() if v] == ["container_toolkit", "cdi"]
    # check mode, the toolkit not installed yet: what they run is not there, so they are not planned at all
    plan["installs"] = {"container_toolkit": ["nvidia-container-toolkit"]}
    assert [k for k, v in node_step_gates(plan, on, "true").items() if v] == ["container_toolkit"]
    # applying: they run (the /dev/char links too, where managed: the new nvidia-ctk makes them)
    assert node_step_gates(plan, on, False)["containerd_runtime"]
    assert node_step_gates(plan, dict(on, dev_char=True), False)["dev_char"]


def test_check_mode_plans_k3s_containerd_before_the_toolkit_is_installed():
    """On k3s/RKE2 containerd_runtime runs no nvidia-ctk (the node plan's report says needs_installs False): check mode
    shows its work (default-runtime, the template) although the toolkit is not installed yet; the steps that run
    nvidia-ctk stay held."""
    plan = _plan({"mig": [], "compute_mode": [], "container_toolkit": ["package nvidia-container-toolkit is not installed"],
                  "containerd_runtime": ["/etc/rancher/k3s/config.yaml update"], "runtime_mode": ["mode"], "cdi": []},
                 mig={"managed": True, "disruptive": []})
    plan["installs"] = {"container_toolkit": ["nvidia-container-toolkit"]}
    on = dict(MANAGED, container_toolkit=True)
    assert [k for k, v in node_step_gates(plan, on, True).items() if v] == ["container_toolkit"]
    plan["containerd_runtime"] = {"needs_installs": False}
    assert [k for k, v in node_step_gates(plan, on, True).items() if v] == ["container_toolkit", "containerd_runtime"]
    # without work of its own it still does not run in check mode (the toolkit's install changes nothing there)
    plan["steps"]["containerd_runtime"] = []
    assert [k for k, v in node_step_gates(plan, on, True).items() if v] == ["container_toolkit"]


def test_the_plan_arguments_come_from_one_input_per_step():
    inputs = {"driver": None, "mig": {"manage": "declared", "config_name": "all-balanced", "allow_reset": True, "force": False},
              "compute_mode": None, "declared": {"files": [], "units": [], "packages": []},
              "containerd_runtime": None, "runtime_mode": {"mode": "cdi"}, "cdi": None, "dev_char": None, "dcgm": None, "host_imex": None,
              "burn_in": None, "health": None}
    assert node_plan_args(inputs) == {"mig": inputs["mig"], "files": [], "units": [], "packages": [],
                                      "runtime_mode": {"mode": "cdi"}}
    assert node_plan_args(inputs, ["mig"]) == {"mig": inputs["mig"]}
    # ansible-core 2.16 renders "{{ none }}" as "": such a step is not planned either (make compat found it)
    assert node_plan_args(dict(inputs, driver="", cdi=" ")) == node_plan_args(inputs)
    with pytest.raises(AnsibleFilterError, match=re.escape(
            "node_plan_args: expects, for each step of the node plan (driver, mig, compute_mode, declared, "
            "containerd_runtime, runtime_mode, cdi, dev_char, dcgm, host_imex, burn_in, health), its options or none; got "
            "burn_in, cdi, compute_mode, containerd_runtime, dcgm, declared, dev_char, driver, health, host_imex, mig")):
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
           "cdi": True, "runtime_mode": True, "dev_char": False, "dcgm": False, "host_imex": False, "burn_in": False, "health": True}


def _plan(steps, mig=None, health=None):
    plan = {"changed": False, "steps": steps, "files": {}}
    if mig is not None:
        plan["mig"] = mig
    if health is not None:
        plan["health"] = health
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
                     "containerd_runtime": False, "cdi": True, "runtime_mode": False, "dev_char": False, "dcgm": False, "host_imex": False,
                     "burn_in": False, "health": True, "disruptive": True}
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
     "got burn_in, compute_mode, container_toolkit, containerd_runtime, dcgm, dev_char, driver, health, host_imex, "
     "mig, runtime_mode"),
    ({"steps": {}}, dict(MANAGED, cdi="maybe"), "whether step cdi is managed must be a boolean, got 'maybe'"),
    ("plan", MANAGED, "expects gpu_node_plan's result (a dict with steps), got str"),
    ({"steps": {"cdi": "stale"}}, MANAGED, "steps.cdi must be the list of reasons the plan found, got str"),
    ({"steps": {}, "mig": {"managed": True, "disruptive": 1}}, MANAGED,
     "mig.disruptive must be a list of reasons"),
])
def test_bad_input_says_what_is_wrong(plan, managed, words):
    with pytest.raises(AnsibleFilterError, match=re.escape("node_step_gates: ") + ".*" + re.escape(words)):
        node_step_gates(plan, managed)


def _role_vars(values, asked):
    def get(name):
        asked.append(name)
        return values[name]
    return _node_steps.RoleVars(get)


ROLE_VALUES = {
    "gpu_node_kubernetes": False, "gpu_node_device_plugin_provider": "chart", "gpu_node_sharing": "mps",
    "gpu_node_disable_mig": True, "gpu_node_mig_owner": "collection", "gpu_node_mig_layout": [],
    "gpu_node_mig_config_name": "all-balanced", "gpu_node_cdi": False, "gpu_node_manage_containerd": True,
    "gpu_node_install_container_toolkit": False, "gpu_node_runtime_mode": "auto", "gpu_node_health_gate": True,
    "gpu_node_device_plugin_managed": True, "gpu_node_health_policy": {}, "gpu_node_health_dcgm_diag": False,
    "gpu_node_burn_in": "none", "gpu_node_dcgm": "unmanaged",
    "gpu_node_health_dcgmi": "dcgmi", "__compute_mode_declared": {
        "settings": [{"gpus": ["all"], "mode": "Default"}], "persistence_mode": True, "boot_unit": None},
    "__containerd_runtime_declared": {"config_path": "/etc/containerd/config.toml"},
    "__gpu_node_containerd_seed": {"files": []}, "__mig_declared": {"files": [], "units": []},
    "gpu_node_driver_fabric_timeout": 300, "gpu_node_driver_systemctl": "",
}


@pytest.mark.parametrize("driver_on", [False, True])
def test_the_driver_options_are_read_only_where_the_driver_step_is_planned(driver_on):
    """A node that declares no driver (the default) reads none of the driver's variables when the node plan's
    arguments are built (each would be templated: issue 36 item 7); where the step is planned, the options are what
    the node plan is given."""
    values = dict(ROLE_VALUES, driver_version="580.95.05", __driver_declared={"files": [], "packages": []})
    if not driver_on:
        del values["driver_version"]
    asked = []
    v = _role_vars(values, asked)
    decided = _node_steps.resolve(v)
    assert decided["planned"]["driver"] is driver_on and decided["managed"]["driver"] is driver_on
    inputs = _node_steps.role_inputs(v, decided["planned"])
    driver_vars = set(n for n in asked if n.startswith("driver_") or n.startswith("gpu_node_driver_")
                      or n == "__driver_declared") - {"driver_version", "driver_branch"}
    if driver_on:
        assert inputs["driver"] == {"version": "580.95.05", "branch": "", "flavour": "open", "root": None,
                                    "fabric_manager": "auto", "persistenced": True, "systemctl": None,
                                    "fabric_timeout": 300, "fabric_manager_version": "", "allow_downgrade": False,
                                    "modinfo": None, "dkms": None, "module_parameters": {}}
        assert ["driver", {"files": [], "packages": []}] in inputs["declared"]
    else:
        assert inputs["driver"] is None and driver_vars == set(), driver_vars
        assert [step for step, declaration in inputs["declared"]] == ["mig", "compute_mode", "containerd_runtime"]
    # every step with options has an input; a single option's value alone (plan_args takes it so)
    assert sorted(inputs) == sorted(step.name for step in _node_steps.STEPS if step.option_names)
    assert _node_steps.plan_args(dict(inputs, declared={"files": [], "units": [], "packages": []}))["health"] == {
        "policy": {}, "dcgm_diag": False, "dcgmi": "dcgmi"}


def test_who_owns_each_step_is_decided_by_the_registry():
    base = _node_steps.resolve(_role_vars(ROLE_VALUES, []))
    assert base["managed"] == {"driver": False, "mig": True, "compute_mode": True, "container_toolkit": False,
                               "containerd_runtime": True, "runtime_mode": False, "cdi": False, "dev_char": True,
                               "dcgm": False, "host_imex": False, "burn_in": False, "health": True}
    # the /dev/char links: auto by default (the role's argument_specs), managed where the runtime is not in CDI mode and
    # containerd's runtime is the collection's
    spec = _load(ROLE, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert spec["gpu_node_dev_char_symlinks"]["default"] == _load(ROLE, "defaults", "main.yml")[
        "gpu_node_dev_char_symlinks"] == "auto"
    for changed, on in (({"gpu_node_runtime_mode": "cdi"}, False), ({"gpu_node_device_list_strategy": "cdi-cri"}, False),
                        ({"gpu_node_manage_containerd": False}, False), ({"gpu_node_dev_char_symlinks": "unmanaged"}, False),
                        ({"gpu_node_manage_containerd": False, "gpu_node_dev_char_symlinks": "always"}, True),
                        ({"gpu_node_device_plugin_provider": "gpu_operator", "gpu_node_dev_char_symlinks": "always"},
                         False)):
        assert _node_steps.resolve(_role_vars(dict(ROLE_VALUES, **changed), []))["managed"]["dev_char"] is on, changed
    # MIG planned (to disable it where it is on) though another sharing strategy is declared
    assert base["planned"]["mig"] and base["mig"] == {"manage": "disable", "layout": [], "config_name": "all-disabled",
                                                      "cdi": {}, "blockers": _node_steps.reset_blockers()}
    assert not base["kube"] and not base["standalone"]
    assert not _node_steps.resolve(_role_vars(dict(ROLE_VALUES, gpu_node_disable_mig=False), []))["planned"]["mig"]
    # DRA's driver sets the compute mode per claim; CDI and the runtime's mode where CDI is declared
    dra = _node_steps.resolve(_role_vars(dict(ROLE_VALUES, gpu_node_device_plugin_provider="dra", gpu_node_cdi=True,
                                              gpu_node_kubernetes=True, __gpu_node_cdi={
                                                  "state": "present", "spec_path": "/etc/cdi/nvidia.yaml"}), []))
    assert not dra["managed"]["compute_mode"] and dra["managed"]["cdi"] and dra["managed"]["runtime_mode"]
    assert dra["standalone"] and dra["mig"]["cdi"] == {"spec_path": "/etc/cdi/nvidia.yaml"}
    # under the GPU Operator: its MIG manager where it owns MIG, its toolkit where the cluster step says it writes
    # containerd's runtime on this node
    operator = dict(ROLE_VALUES, gpu_node_kubernetes=True, gpu_node_device_plugin_provider="gpu_operator",
                    gpu_node_mig_owner="gpu_operator", gpu_node_kube_node_name="n1", gpu_node_cdi=True,
                    gpu_node_install_container_toolkit=True,
                    cluster_gpu_operator={"containerd_owners": {"n1": "gpu_operator"}})
    got = _node_steps.resolve(_role_vars(operator, []))
    assert not any(got["managed"][s] for s in ("mig", "containerd_runtime", "container_toolkit", "cdi", "runtime_mode"))
    assert got["planned"]["mig"] and not got["standalone"]
    other = _node_steps.resolve(_role_vars(dict(operator, gpu_node_kube_node_name="n2"), []))
    assert other["managed"]["containerd_runtime"] and other["managed"]["container_toolkit"]
    # a declared MIG layout
    mig = _node_steps.resolve(_role_vars(dict(ROLE_VALUES, gpu_node_sharing="mig",
                                              gpu_node_mig_layout=[{"gpus": ["all"]}]), []))
    assert mig["mig"]["manage"] == "declared" and mig["mig"]["config_name"] == "" and mig["planned"]["mig"]


def test_the_health_gate_runs_after_a_change_and_where_the_node_carries_its_marks():
    plan = _plan({"mig": [], "compute_mode": ["GPU 0: compute mode Prohibited -> Default"], "containerd_runtime": [],
                  "runtime_mode": [], "cdi": [], "health": []}, mig={"managed": True, "disruptive": []})
    on = dict(MANAGED, compute_mode=True, health=True)
    assert _node_steps.gates(plan, on)["health"]                       # a real run changes the compute mode
    assert not _node_steps.gates(plan, on, check_mode=True)["health"]  # check mode changes nothing
    quiet = _plan(dict((name, []) for name in MANAGED), mig={"managed": True, "disruptive": []})
    assert not any(_node_steps.gates(quiet, on).values())
    marked = {"taints": [{"key": "gpuops.nvidia/gpu-unhealthy", "effect": "NoSchedule"}], "conditions": []}
    assert _node_steps.gates(quiet, on, node=marked)["health"]
    assert _node_steps.gates(quiet, on, check_mode=True, node={"taints": [], "conditions": [
        {"type": "GpuopsNvidiaGpuHealthy", "status": "True"}]})["health"]
    assert not _node_steps.gates(quiet, dict(on, health=False), node=marked)["health"]
    assert not _node_steps.gates(quiet, on, node={"taints": [{"key": "other"}], "conditions": []})["health"]
    # a plan made after a change of this run (the driver's, the GPU Operator's MIG change): the steps that run after a
    # disruption run, the health gate too
    after = _node_steps.gates(quiet, on, after_change=True)
    assert after["disruptive"] and after["compute_mode"] and after["health"] and not after["mig"]
    assert [r["name"] for r in _node_steps.runs(after)] == ["compute_mode", "cdi", "health"]
    assert _node_steps.runs(after)[0] == {"name": "compute_mode", "tasks": "compute_mode.yml", "after": []}
    # each item names the steps before it: ansible-core merges equal includes across a batch's hosts, and a host would
    # otherwise run them in the order another host's loop listed them (runs' docstring)
    assert _node_steps.runs(after)[2] == {"name": "health", "tasks": "health.yml", "after": ["compute_mode", "cdi"]}
    with pytest.raises(ValueError, match="node must be the Kubernetes node as read"):
        _node_steps.gates(quiet, on, node=["not", "a", "node"])


def test_the_health_gate_runs_where_the_node_lacks_the_burn_in_record_the_plan_read():
    summary = {"level": "medium", "verdict": "pass", "time": "2026-11-29T10:00:00Z", "driver": "570.172.08",
               "dcgm_version": "4.2.3", "failed": []}
    on = dict(MANAGED, health=True)
    quiet = _plan(dict((name, []) for name in MANAGED), mig={"managed": True, "disruptive": []},
                  health={"health": {"burn_in": summary}})
    unmarked = {"taints": [], "conditions": []}
    # burned in before the Node carried the record (or someone changed it): the gate runs to write it
    assert _node_steps.gates(quiet, on, node=unmarked)["health"]
    assert _node_steps.gates(quiet, on, node=dict(unmarked, burn_in='{"verdict":"fail"}'))["health"]
    # the Node carries exactly this record: nothing to do
    carried = dict(unmarked, burn_in=_burn_in.annotation_value(summary))
    assert not _node_steps.gates(quiet, on, node=carried)["health"]
    # no record on the node: the annotation is left alone, the gate does not run for it
    none = _plan(dict((name, []) for name in MANAGED), mig={"managed": True, "disruptive": []},
                 health={"health": {"burn_in": None}})
    assert not _node_steps.gates(none, on, node=dict(unmarked, burn_in='{"verdict":"pass"}'))["health"]
    # off a cluster there is no Node to carry it
    assert not _node_steps.gates(quiet, on)["health"]


def test_dcgm_is_the_collections_where_declared_and_never_under_the_gpu_operator():
    """DCGM's step (issue 50 item 4): managed where the node declares it present or absent, off by default, never on a
    GPU Operator cluster (the operator runs its own DCGM); before the burn-in and the gate, whose dcgmi uses its
    engine; its inputs are the role's variables."""
    names = [s.name for s in _node_steps.STEPS]
    assert names.index("dcgm") < names.index("burn_in") < names.index("health")
    dcgm = _node_steps.BY_NAME["dcgm"]
    assert dcgm.tasks == "dcgm.yml" and not dcgm.disruptive and not dcgm.needs_nvml
    values = dict(ROLE_VALUES, gpu_node_dcgm="present", gpu_node_dcgm_version="1:4.5.2-1", gpu_node_dcgm_cuda=13,
                  gpu_node_dcgm_proprietary=False, gpu_node_dcgm_package_manager="apt",
                  gpu_node_dcgm_allow_downgrade=False, gpu_node_dcgm_service="nvidia-dcgm.service",
                  gpu_node_dcgm_hold=False, gpu_node_driver_systemctl=["/x/systemctl"])
    assert not _node_steps.resolve(_role_vars(ROLE_VALUES, []))["managed"]["dcgm"]
    resolved = _node_steps.resolve(_role_vars(values, []))
    assert resolved["managed"]["dcgm"] and resolved["planned"]["dcgm"]
    assert dcgm.inputs(_role_vars(values, [])) == {"dcgm": {
        "state": "present", "version": "1:4.5.2-1", "cuda": 13, "proprietary": False, "package_manager": "apt",
        "allow_downgrade": False, "hold": False, "service": "nvidia-dcgm.service",
        "systemctl": ["/x/systemctl"]}}
    operator = dict(values, gpu_node_kubernetes=True, gpu_node_device_plugin_provider="gpu_operator")
    assert not _node_steps.resolve(_role_vars(operator, []))["managed"]["dcgm"]
    chart = dict(values, gpu_node_kubernetes=True, gpu_node_device_plugin_provider="chart")
    assert _node_steps.resolve(_role_vars(chart, []))["managed"]["dcgm"]
