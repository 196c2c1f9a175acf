"""Adding a node step is one registry entry and one task file (issue 48): a throwaway step is added to a temporary
copy of the collection - a ``Step`` in plugins/module_utils/node/_node_steps.py and roles/gpu_node/tasks/throwaway.yml,
no other file touched - and site.yml converges a lab node from that copy. The step's tasks run where its check finds
work (its marker file is missing), and a converged re-run skips them (nothing changed, the step's task not run). Its
daemon holds the GPUs (``holds_gpus``): the units gpu_node hands the mig role to stop before a GPU reset name it. The copy is
compared with the collection file by file afterwards: a step that needed a second file edited would show here as a
difference (and without that edit the converge fails)."""
import hashlib
import os
import shutil
import subprocess

import pytest

from tests.integration.site_helpers import Site
from tests.support.ansible_run import ROOT, parse_output, playbook_command

pytestmark = pytest.mark.slow

NODE = "lab-hgx-h200"
STEP = '''    # a throwaway step (tests/integration/test_adding_a_step.py)
    Step("throwaway", {"throwaway": dict(type="dict", options=dict(marker=dict(type="path", required=True)))},
         check=lambda module, facts, params: (None, {"throwaway": [] if os.path.exists(params["throwaway"]["marker"])
                                                      else ["%s is missing" % params["throwaway"]["marker"]]}),
         tasks="throwaway.yml", inputs=lambda v: {"throwaway": {"marker": v("gpuops_lab_root") + "/throwaway"}},
         holds_gpus=(Holder("throwaway", "Throwaway daemon", ("gpuops-throwaway.service",)),)),
'''
ANCHOR = "    # last: the gate before the node's release"
TASKS = '''---
- name: Throwaway step - write its marker
  ansible.builtin.copy:
    content: "added by the throwaway step\\n"
    dest: "{{ gpuops_lab_root }}/throwaway"
    mode: "0644"
'''


def _files(root):
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root,
                         stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    return sorted(path for path in out if path and os.path.isfile(os.path.join(root, path)))


def _digests(root, paths):
    out = {}
    for path in paths:
        full = os.path.join(root, path)
        if os.path.isfile(full):
            with open(full, "rb") as handle:
                out[path] = hashlib.sha1(handle.read()).hexdigest()
    return out


def test_a_new_step_is_one_registry_entry_and_one_task_file(tmp_path):
    copy = tmp_path / "collections" / "ansible_collections" / "gpuops" / "nvidia"
    paths = _files(ROOT)
    for path in paths:
        target = copy / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, path), str(target))
    # (the lab's tools, built by make setup: containerd, helm)
    if os.path.isdir(os.path.join(ROOT, "tools")):
        os.symlink(os.path.join(ROOT, "tools"), str(copy / "tools"))
    # the two edits a new step takes
    registry = copy / "plugins" / "module_utils" / "node" / "_node_steps.py"
    text = registry.read_text()
    assert text.count(ANCHOR) == 1
    registry.write_text(text.replace(ANCHOR, STEP + ANCHOR))
    (copy / "roles" / "gpu_node" / "tasks" / "throwaway.yml").write_text(TASKS)

    site = Site(tmp_path, limit=(NODE,))
    call = site._call(False, False, (), {})

    def run():
        args = dict(call)
        args.update(playbook=str(copy / "site.yml"), inventory=str(copy / "inventories" / "lab"))
        cmd, env = playbook_command(**args)
        env.update(ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"), ANSIBLE_CONFIG=str(copy / "ansible.cfg"))
        proc = subprocess.run(cmd, cwd=str(copy), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=900, check=False)
        data = parse_output(proc.stdout)
        assert data is not None and proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return data

    def step_results(data):
        return [task["hosts"][NODE] for play in data["plays"] for task in play["tasks"]
                if "Throwaway step - write its marker" in task["task"]["name"] and NODE in task["hosts"]]

    marker = site.state / NODE / "throwaway"
    first = run()
    ran = step_results(first)
    plans = [task["hosts"][NODE] for play in first["plays"] for task in play["tasks"]  # (a first converge: one plan)
             if "Read the GPUs and plan every step" in task["task"]["name"] and NODE in task["hosts"]]
    assert [r.get("changed") for r in ran] == [True], [(p.get("steps"), p.get("runs"), p.get("gates")) for p in plans]
    assert marker.read_text() == "added by the throwaway step\n"
    # the plan found the work, and gave the step's task file to the loop
    assert plans[0]["steps"]["throwaway"] == ["%s is missing" % marker], plans[0]["steps"]
    assert [(r["name"], r["tasks"]) for r in plans[0]["runs"]].count(("throwaway", "throwaway.yml")) == 1, plans[0]["runs"]
    # its daemon is among what gpu_node hands the mig role to stop before a reset (a client of the driver: before the
    # fabric manager)
    decided = [task["hosts"][NODE]["ansible_facts"]["__gpu_node"] for play in first["plays"] for task in play["tasks"]
               if "Decide which steps this node's declaration manages" in task["task"]["name"] and NODE in task["hosts"]]
    blockers = decided[0]["mig"]["blockers"]
    assert blockers.index("gpuops-mps-control") < blockers.index("gpuops-throwaway") < \
        blockers.index("nvidia-fabricmanager"), blockers

    second = run()
    assert step_results(second) == []
    assert second["stats"][NODE]["changed"] == 0, second["stats"]
    plans = [task["hosts"][NODE] for play in second["plays"] for task in play["tasks"]
             if "Read the GPUs and plan every step" in task["task"]["name"] and NODE in task["hosts"]]
    assert plans[0]["steps"]["throwaway"] == [] and plans[0]["gates"]["throwaway"] is False

    # nothing but the registry and the new task file differs from the collection
    before, after = _digests(ROOT, paths), _digests(str(copy), _files_in(copy))
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert changed == ["plugins/module_utils/node/_node_steps.py", "roles/gpu_node/tasks/throwaway.yml"], changed


def _files_in(root):
    out = []
    for folder, dirs, files in os.walk(str(root)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out.extend(os.path.relpath(os.path.join(folder, f), str(root)) for f in files)
    return sorted(out)
