"""Playbook-level scenarios of the mig role on simulated nodes (real ansible-playbook, simulator state files)."""
import hashlib
import os
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import current_devices
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import ROOT, run_playbook

PLAYBOOK = os.path.join(ROOT, "tests", "integration", "playbooks", "mig_role.yml")
pytestmark = pytest.mark.slow


class Node(object):
    def __init__(self, tmp_path, shape):
        self.root = str(tmp_path / "root")
        self.state = str(tmp_path / "state.json")
        self.sim = SimulatedBackend(self.state, shape=shape)

    def converge(self, check=False, **role_vars):
        extra = {"gpuops_environment": {"GPUOPS_SIMULATED_GPUS": self.state},
                 "ansible_python_interpreter": sys.executable, "mig_root": self.root,
                 "mig_manage_systemd": False, "mig_manage_services": False, "mig_boot_python": sys.executable}
        extra.update(role_vars)
        data, proc = run_playbook(PLAYBOOK, inventory="localhost,", extra_vars=extra, check=check, diff=True,
                                  args=["-c", "local"])
        assert data is not None, proc.stdout + proc.stderr
        stats = data["stats"]["localhost"]
        tasks = {}
        for play in data["plays"]:
            for t in play["tasks"]:
                if "localhost" in t["hosts"]:
                    name = t["task"]["name"].split(" : ", 1)[-1]     # drop the "mig : " role prefix
                    tasks.setdefault(name, []).append(t["hosts"]["localhost"])
        return stats, tasks, data

    def reboots(self):
        return [e for e in self.sim.raw_state()["call_log"] if e.get("event") == "reboot"]

    def calls(self, name=None):
        return [e for e in self.sim.raw_state()["call_log"] if "call" in e and (name is None or e["call"] == name)]

    def digest(self):
        with open(self.state, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()

    def devices(self, index):
        return current_devices(self.sim.read_gpu(index))


def changed_tasks(tasks):
    return [name for name, rs in tasks.items() for r in rs if r.get("changed")]


def failed_msgs(tasks):
    return [r.get("msg") for rs in tasks.values() for r in rs if r.get("failed") and "msg" in r]


def test_a100_node_enabled_with_reset_all_balanced_then_idempotent(tmp_path):
    node = Node(tmp_path, "dgx-a100-40gb")
    before = node.digest()
    stats, tasks, _data = node.converge(check=True, mig_config_name="all-balanced")
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert node.digest() == before                                   # check mode touched no GPU
    stats, tasks, _data = node.converge(mig_config_name="all-balanced")
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert sorted(set(e["args"]["index"] for e in node.calls("reset_gpu"))) == list(range(8))
    for i in range(8):
        assert node.devices(i) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert node.reboots() == []
    assert os.path.exists(os.path.join(node.root, "etc/systemd/system/gpuops-mig.service"))
    n = len(node.calls())
    stats, tasks, _data = node.converge(mig_config_name="all-balanced")
    assert stats["failures"] == 0 and stats["changed"] == 0, changed_tasks(tasks)
    assert len(node.calls()) == n and node.reboots() == []          # second converge touches no GPU


@pytest.mark.parametrize("shape,profile", [("hgx-h100-80gb", "3g.40gb"), ("hgx-h200", "3g.71gb")])
def test_hopper_nodes_need_no_reset(tmp_path, shape, profile):
    node = Node(tmp_path, shape)
    stats, tasks, _data = node.converge(mig_config_name="all-3g", mig_gpus=["0", "1"])
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert node.calls("reset_gpu") == [] and node.reboots() == []
    assert node.devices(0) == {profile: 2} and node.devices(1) == {profile: 2}
    assert node.sim.read_gpu(2)["mig_mode_current"] == "Disabled"       # not selected, not touched


def test_busy_node_reset_refused_reboot_path_then_layout_and_no_second_reboot(tmp_path):
    node = Node(tmp_path, "dgx-a100-80gb")
    node.sim.add_process(3, 4242, "train")
    node.sim.add_process(5, 4343, "serve")
    # without permission to reboot: a clear failure, nothing rebooted
    stats, tasks, _data = node.converge(mig_config_name="all-balanced")
    msgs = failed_msgs(tasks)
    assert stats["failures"] == 1 and any("mig_allow_reboot" in m and "pid 4242 (train)" in m for m in msgs), msgs
    assert node.reboots() == []
    # check mode with the reboot allowed: says it would reboot, reboots nothing, touches no GPU
    before = node.digest()
    stats, tasks, _data = node.converge(check=True, mig_config_name="all-balanced", mig_allow_reboot=True)
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert any("Would reboot once" in r.get("msg", "") for r in tasks.get("Show the reboot a real run would do", []))
    assert node.reboots() == [] and node.digest() == before
    # allowed: one reboot, the boot unit re-applies, the role confirms the mode and lays out
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_allow_reboot=True)
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert len(node.reboots()) == 1
    for i in range(8):
        assert node.devices(i) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert not os.path.exists(os.path.join(node.root, "var/lib/gpuops/mig-reboot-attempted"))
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_allow_reboot=True)
    assert stats["changed"] == 0 and len(node.reboots()) == 1


def test_hopper_reboot_loses_mode_boot_unit_reapplies(tmp_path):
    node = Node(tmp_path, "hgx-h200")
    node.sim.add_process(0, 77, "vllm")
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_gpus=["0"], mig_allow_reboot=True)
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert len(node.reboots()) == 1
    assert node.devices(0) == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    # a later reboot loses everything; the boot unit alone brings it back and the role then changes nothing
    node.sim.reboot()
    assert node.sim.read_gpu(0)["mig_mode_current"] == "Disabled"
    from subprocess import run
    env = dict(os.environ, GPUOPS_SIMULATED_GPUS=node.state)
    boot = run([sys.executable, os.path.join(node.root, "usr/local/lib/gpuops/gpuops-mig-apply.py"),
                "--config", os.path.join(node.root, "etc/gpuops/mig.json")], env=env, capture_output=True, text=True, check=False)
    assert boot.returncode == 0, boot.stderr
    assert node.devices(0) == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_gpus=["0"], mig_allow_reboot=True)
    assert stats["changed"] == 0 and len(node.reboots()) == 2


def test_reboot_that_does_not_activate_fails_clearly_and_never_reboots_twice(tmp_path):
    node = Node(tmp_path, "hgx-h200")
    node.sim.add_process(0, 77, "vllm")
    # the role's own SetMigMode is call 1; the boot unit's and the post-reboot check's are 2 and 3: make both
    # fail. (The simulator stops counting down further faults on the call where one fires, so both say 2.)
    node.sim.inject_fault(2, "UNKNOWN", call="set_mig_mode")
    node.sim.inject_fault(2, "UNKNOWN", call="set_mig_mode")
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_gpus=["0"], mig_allow_reboot=True)
    msgs = failed_msgs(tasks)
    assert stats["failures"] == 1 and any("did not activate MIG mode" in m for m in msgs), msgs
    assert len(node.reboots()) == 1
    marker = os.path.join(node.root, "var/lib/gpuops/mig-reboot-attempted")
    assert os.path.exists(marker)
    # a new workload makes the mode pending again: the role refuses a second reboot
    node.sim.add_process(0, 78, "vllm2")
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_gpus=["0"], mig_allow_reboot=True)
    msgs = failed_msgs(tasks)
    assert any("Not rebooting again" in m for m in msgs), msgs
    assert len(node.reboots()) == 1


def test_layout_change_keeps_in_use_instance_and_force_needed_to_remove_it(tmp_path):
    node = Node(tmp_path, "dgx-a100-80gb")
    stats, tasks, _data = node.converge(mig_config_name="all-balanced", mig_gpus=["0"])
    assert stats["failures"] == 0, failed_msgs(tasks)
    three = [m for m in node.sim.read_gpu(0)["mig_devices"] if m["profile"] == "3g.40gb"][0]
    node.sim.add_process(0, 900, "train", gi_id=three["gi_id"], ci_id=three["ci_id"])
    layout = [{"devices": [0], "mig_devices": {"3g.40gb": 1, "1g.10gb": 4}}]
    stats, tasks, _data = node.converge(mig_layout=layout)
    assert stats["failures"] == 0, failed_msgs(tasks)
    assert three["uuid"] in [m["uuid"] for m in node.sim.read_gpu(0)["mig_devices"]]
    assert node.devices(0) == {"3g.40gb": 1, "1g.10gb": 4}
    before = node.digest()
    stats, tasks, _data = node.converge(mig_layout=[{"devices": [0], "mig_devices": {"7g.80gb": 1}}])
    msgs = failed_msgs(tasks)
    assert stats["failures"] == 1 and any("pid 900 (train)" in m and "force" in m for m in msgs), msgs
    assert node.digest() == before
    stats, tasks, _data = node.converge(mig_layout=[{"devices": [0], "mig_devices": {"7g.80gb": 1}}], mig_force=True)
    assert stats["failures"] == 0, failed_msgs(tasks)
    layout_result = tasks["Lay out GPU and compute instances"][0]
    assert layout_result["gpus"][0]["busy_destroyed"][0]["processes"] == [{"pid": 900, "name": "train"}]
    assert node.devices(0) == {"7g.80gb": 1}


def test_bad_layout_fails_before_any_change(tmp_path):
    node = Node(tmp_path, "dgx-a100-40gb")
    before = node.digest()
    stats, tasks, _data = node.converge(mig_layout=[{"mig_devices": {"4g.20gb": 2}}])
    msgs = failed_msgs(tasks)
    assert stats["failures"] == 1 and any("at most 1 fits" in m for m in msgs), msgs
    assert node.digest() == before and node.calls() == []
