"""Each role states what it writes once, in its `declared` entry point, and its own tasks write only that.

A static reading of the roles' task files: every task that writes a file, a directory or a unit (copy, template,
file, systemd_service enabled) or passes parameters to containerd_runtime takes them from the role's declaration
fact, so a path cannot be added to the apply without the node plan comparing it too. The run-time half (the role
writes exactly what it declares, and the node plan then finds no work) is tests/integration/test_role_declarations.py.
"""
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = os.path.join(ROOT, "roles")
WRITERS = {"ansible.builtin.copy": "dest", "ansible.builtin.template": "dest", "ansible.builtin.file": "path",
           "ansible.builtin.systemd_service": "name"}
# Writes that are not part of a role's declared state, each with the reason.
NOT_DECLARED = {
    # the reboot marker is declared absent; reboot.yml writes it just before a reboot so that the role never
    # reboots twice for the same change, and main.yml removes it (the declared absence) once the mode is active
    # (reboot_once.yml: the guard, shared by the mig role's reboot and gpu_node's driver step, makes the marker's
    # directory first)
    ("mig", "reboot_once.yml", "Write the reboot marker"),
    ("mig", "reboot_once.yml", "Create the reboot marker's directory"),
    # the driver step's reboot marker (the same guard): removed once the driver is up after its reboot. Not declared
    # absent yet: a marker left by a run killed between the boot and this task stays until the next driver reboot,
    # which the guard then refuses, naming the marker (docs/driver.md, known limits)
    ("gpu_node", "driver.yml", "Remove the reboot marker once the driver is loaded after the reboot"),
    # DCGM's air-gapped package files: the install's input, copied only where the dcgm step runs; the state the node
    # plan compares is the installed packages and the host engine's unit (dcgm_host_engine reads each file before it
    # installs, docs/dcgm.md), so a cache directory cleaned later is not work
    ("gpu_node", "dcgm.yml", "Create the directory of DCGM's package files"),
    ("gpu_node", "dcgm.yml", "Copy DCGM's package files"),
}


def tasks_of(role):
    """(file, task) for every task of the role's task files, blocks flattened."""
    folder = os.path.join(ROLES, role, "tasks")
    out = []

    def walk(name, tasks):
        for task in tasks or []:
            for key in ("block", "rescue", "always"):
                walk(name, task.get(key))
            if not any(key in task for key in ("block", "rescue", "always")):
                out.append((name, task))

    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as handle:
            walk(name, yaml.safe_load(handle))
    return out


def writes(task):
    """The module and the destination argument of a task that writes something, else None."""
    for module, arg in WRITERS.items():
        if module in task:
            args = task[module] or {}
            if module == "ansible.builtin.systemd_service" and not args.get("enabled"):
                return None         # daemon_reload, stop, start: no state of the node's own
            if module == "ansible.builtin.file" and args.get("state") not in ("directory", "absent", "touch", None):
                return None
            return module, str(args.get(arg, ""))
    return None


def from_declaration(task, value, fact):
    """Whether ``value`` is the declaration's own (the fact itself, or a loop item over the fact)."""
    if fact in value:
        return True
    return bool(re.search(r"\bitem\.(path|name)\b", value)) and fact in str(task.get("loop", ""))


@pytest.mark.parametrize("role,fact", [("mig", "__mig_declared"), ("compute_mode", "__compute_mode_declared"),
                                       ("containerd_runtime", "__containerd_runtime_declared"),
                                       ("container_toolkit", "__container_toolkit_declared"),
                                       ("gpu_node", "__gpu_node_containerd_seed")])
def test_every_write_of_the_role_comes_from_its_declaration(role, fact):
    loose = []
    for name, task in tasks_of(role):
        what = writes(task)
        if what is None or (role, name, task.get("name")) in NOT_DECLARED:
            continue
        if role == "gpu_node" and "force" in (task.get(what[0]) or {}):
            continue            # the initial containerd config, copied only where none exists (not compared)
        if not from_declaration(task, what[1], fact):
            loose.append("%s: %r writes %s" % (name, task.get("name"), what[1]))
    assert not loose, "writes that the node plan would not compare (declare them in %s):\n%s" % (fact, "\n".join(loose))


def test_the_check_catches_a_write_outside_the_declaration():
    task = {"name": "x", "ansible.builtin.copy": {"content": "y", "dest": "{{ mig_etc_dir }}/extra.conf"}}
    assert not from_declaration(task, writes(task)[1], "__mig_declared")
    looped = {"name": "x", "ansible.builtin.copy": {"dest": "{{ item.path }}"}, "loop": "{{ other_list }}"}
    assert not from_declaration(looped, writes(looped)[1], "__mig_declared")
    ok = {"name": "x", "ansible.builtin.copy": {"dest": "{{ item.path }}"},
          "loop": "{{ __mig_declared.files | selectattr('state', 'equalto', 'file') | list }}"}
    assert from_declaration(ok, writes(ok)[1], "__mig_declared")


def test_containerd_runtime_passes_exactly_its_declared_parameters():
    with open(os.path.join(ROLES, "containerd_runtime", "tasks", "declared.yml")) as handle:
        declared = yaml.safe_load(handle)[0]["ansible.builtin.set_fact"]["__containerd_runtime_declared"]
    calls = [task["gpuops.nvidia.containerd_runtime"] for _name, task in tasks_of("containerd_runtime")
             if "gpuops.nvidia.containerd_runtime" in task]
    assert len(calls) == 1
    passed = dict(calls[0])
    assert passed.pop("backup") == "{{ containerd_runtime_backup }}"     # how to write, not what: not compared
    assert sorted(passed) == sorted(declared), "main.yml and declared.yml pass different parameters"
    for key, value in passed.items():
        assert value == "{{ __containerd_runtime_declared.%s }}" % key, (key, value)


@pytest.mark.parametrize("module, fact, step", [("gpuops.nvidia.cdi_spec", "__gpu_node_cdi", "cdi"),
                                                ("gpuops.nvidia.runtime_mode", "__gpu_node_runtime", "runtime_mode")])
def test_gpu_node_runs_cdi_spec_and_runtime_mode_with_exactly_what_the_node_plan_compares(module, fact, step):
    with open(os.path.join(ROLES, "gpu_node", "vars", "main.yml")) as handle:
        declared = yaml.safe_load(handle)[fact]
    calls = [task[module] for _name, task in tasks_of("gpu_node") if module in task]
    assert len(calls) == 1
    assert sorted(calls[0]) == sorted(declared), "the task and vars/main.yml pass different parameters"
    for key, value in calls[0].items():
        assert value == "{{ %s.%s }}" % (fact, key), (key, value)
    # the node plan is given the same fact (the step registry's inputs of the step, read by gpu_node_plan's action)
    asked = []

    def get(name):
        asked.append(name)
        return {"the": "fact"}
    inputs = _node_steps.BY_NAME[step].inputs(_node_steps.RoleVars(get))
    assert asked == [fact] and inputs == {_node_steps.BY_NAME[step].option_names[0]: {"the": "fact"}}


def test_gpu_node_runs_dcgm_host_engine_with_the_variables_the_node_plan_compares():
    """Every option of the step dcgm is passed to dcgm_host_engine by tasks/dcgm.yml from the same role variable the
    registry's inputs read (the systemctl the driver step's), so the plan and the apply cannot disagree."""
    read = []
    values = {"gpu_node_dcgm": "present", "gpu_node_dcgm_version": "1:4.5.2-1", "gpu_node_dcgm_cuda": 12,
              "gpu_node_dcgm_proprietary": False, "gpu_node_dcgm_package_manager": "auto",
              "gpu_node_dcgm_allow_downgrade": False, "gpu_node_dcgm_service": "nvidia-dcgm.service",
              "gpu_node_dcgm_hold": True,
              "gpu_node_driver_systemctl": []}

    def get(name):
        read.append(name)
        return values[name]
    options = _node_steps.BY_NAME["dcgm"].inputs(_node_steps.RoleVars(get))["dcgm"]
    (call,) = [task["gpuops.nvidia.dcgm_host_engine"] for _name, task in tasks_of("gpu_node")
               if "gpuops.nvidia.dcgm_host_engine" in task]
    by_option = {"state": "gpu_node_dcgm", "systemctl": "gpu_node_driver_systemctl"}
    for option in options:
        variable = by_option.get(option, "gpu_node_dcgm_" + option)
        assert variable in read, (option, read)
        assert variable in str(call[option]), (option, call[option])
