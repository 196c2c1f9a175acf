"""Each role writes exactly what its `declared` entry point names, and the node plan compares that same data.

For the mig, compute_mode and container_toolkit roles with a scratch root (simulated GPUs; for container_toolkit a
throwaway root that the real apt and dpkg install into, from a repository the test builds): the role is applied, then
the play prints
the role's declaration fact and runs gpuops.nvidia.gpu_node_plan on it. Every path under the scratch root must be
a declared path (or a parent directory of one), every declared path must be there as declared (and every declared
absence absent), and the node plan must find no work for the step. A path added to the apply but not to the
declaration, or the reverse, fails here. (The static half, for every role: tests/unit/test_role_declarations.py.)
"""
import os
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_plan import observe
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support import apt_rig
from tests.support.ansible_run import run_playbook

pytestmark = pytest.mark.slow

PLAY = """
- name: Apply the role, then show its declaration and what the node plan makes of it
  hosts: localhost
  connection: local
  gather_facts: false
  environment: "{{ gpuops_environment }}"
  tasks:
    - name: Apply the role
      ansible.builtin.include_role:
        name: gpuops.nvidia.%(role)s
    - name: Show the declaration
      ansible.builtin.debug:
        var: %(fact)s
    - name: Plan the node from the declaration
      gpuops.nvidia.gpu_node_plan:
        compute_mode: "{{ omit if '%(role)s' != 'compute_mode' else {'settings': __compute_mode_declared.settings,
                          'persistence_mode': __compute_mode_declared.persistence_mode,
                          'boot_unit': __compute_mode_declared.boot_unit} }}"
        files: "{{ (checks).files }}"
        units: "{{ (checks).units }}"
        packages: "{{ (checks).packages }}"
      vars:
        checks: "{{ [['%(role)s', %(fact)s]] | gpuops.nvidia.node_plan_checks }}"
"""


def apply(tmp_path, role, fact, shape, role_vars, environment=None):
    state = str(tmp_path / "state.json")
    SimulatedBackend(state, shape=shape)
    play = tmp_path / "play.yml"
    play.write_text(PLAY % {"role": role, "fact": fact})
    extra = {"gpuops_environment": dict(environment or {}, GPUOPS_SIMULATED_GPUS=state),
             "ansible_python_interpreter": sys.executable}
    extra.update(role_vars)
    data, proc = run_playbook(str(play), inventory="localhost,", extra_vars=extra)
    assert data is not None and proc.returncode == 0, proc.stdout + proc.stderr
    results = {}
    for play_data in data["plays"]:
        for task in play_data["tasks"]:
            results[task["task"]["name"]] = task["hosts"].get("localhost")
    return results["Show the declaration"][fact], results["Plan the node from the declaration"]


def tree(root):
    out = set()
    for folder, dirs, files in os.walk(root):
        out.update(os.path.join(folder, name) for name in dirs + files)
    return out


def check(root, declared, plan, step, extra_paths=()):
    entries = list(declared.get("inputs") or []) + list(declared["files"])
    present = [e for e in entries if e["state"] != "absent"]
    assert present, "the declaration names nothing: the test would prove nothing"
    wanted = set()
    for path in [e["path"] for e in present] + list(extra_paths):
        while path.startswith(root + os.sep):       # a declared path and the parents created with it
            wanted.add(path)
            path = os.path.dirname(path)
    undeclared = sorted(p for p in tree(root) if p not in wanted)
    assert not undeclared, "the role wrote paths its declaration does not name: %s" % undeclared
    for entry in entries:
        seen = observe(entry["path"])
        assert seen["state"] == entry["state"], (entry["path"], seen)
        if entry["state"] == "file":
            assert seen["checksum"] == entry["checksum"] and seen["mode"] == entry["mode"], (entry["path"], seen)
    assert plan["steps"][step] == [], plan["steps"]


def test_mig_role_writes_exactly_its_declaration(tmp_path):
    root = str(tmp_path / "root")
    os.mkdir(root)          # the role copies the layout file into an existing directory, as on a real node
    layout = tmp_path / "layout.yaml"
    layout.write_text(yaml.safe_dump({"version": "v1", "mig-configs": {"two": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]}}))
    declared, plan = apply(tmp_path, "mig", "__mig_declared", "dgx-a100-40gb", {
        "mig_root": root, "mig_manage_systemd": False, "mig_manage_services": False,
        "mig_boot_python": sys.executable, "mig_config_src": str(layout),
        "mig_config_file": root + "/layouts.yaml", "mig_config_name": "two"})
    assert [e["path"] for e in declared["inputs"]] == [root + "/layouts.yaml"]
    assert any(e["state"] == "absent" for e in declared["files"])
    check(root, declared, plan, "mig")


def test_compute_mode_role_writes_exactly_its_declaration(tmp_path):
    root = str(tmp_path / "root")
    declared, plan = apply(tmp_path, "compute_mode", "__compute_mode_declared", "dgx-a100-40gb", {
        "compute_mode_unit_directory": root + "/etc/systemd/system", "compute_mode_manage_systemd": False,
        "compute_mode_settings": [{"gpus": ["all"], "mode": "Exclusive_Process"}]})
    unit = declared["boot_unit"]["path"]
    assert observe(unit)["state"] == "file"
    check(root, declared, plan, "compute_mode", extra_paths=[unit])


@pytest.mark.skipif(bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))
def test_container_toolkit_role_writes_exactly_its_declaration(tmp_path):
    """Besides what apt and dpkg keep (their lists, cache, database, logs) and the packages' own files, the role writes
    only its declaration: the repository's key and list and the apt pin; the four packages are installed at the
    pinned version and held, and the node plan (files and packages) finds no work."""
    rig = apt_rig.Rig(tmp_path / "rig", ("1.18.1-1",))
    try:
        root = apt_rig.Root(tmp_path / "root")
        scaffold = tree(root.path)
        declared, plan = apply(tmp_path, "container_toolkit", "__container_toolkit_declared", "hgx-h200", {
            "container_toolkit_package_manager": "apt", "container_toolkit_version": "1.18.1-1",
            "container_toolkit_repo_url": rig.repo.url, "container_toolkit_repo_key": rig.key,
            "container_toolkit_root": root.path}, environment=root.env)
        kept = [p for p in tree(root.path)
                if p.startswith(tuple(os.path.join(root.path, d) for d in (
                    "var/lib/dpkg/", "var/lib/apt/", "var/cache/apt/", "var/log/")))]
        owned = rig.package_files(root)
        assert os.path.join(root.path, "usr/bin/nvidia-ctk") in owned
        written = ("etc/apt/preferences.d/nvidia-container-toolkit", "etc/apt/sources.list.d/nvidia-container-toolkit.list",
                   "usr/share/keyrings/nvidia-container-toolkit-keyring.asc")
        assert sorted(e["path"] for e in declared["inputs"] + declared["files"]) == sorted(
            os.path.join(root.path, p) for p in written)
        assert declared["packages"] == [{"manager": "apt", "names": list(apt_rig.PACKAGES), "version": "1.18.1-1",
                                         "hold": True}]
        check(root.path, declared, plan, "container_toolkit", extra_paths=sorted(scaffold) + kept + owned)
        assert root.installed() == dict((n, ("1.18.1-1", "hold ok installed")) for n in apt_rig.PACKAGES)
        assert all(plan["packages"][n]["version"] == "1.18.1-1" for n in apt_rig.PACKAGES), plan["packages"]
    finally:
        rig.close()
