"""driver_services on a simulated HGX H200 node (four NVSwitches, driver 580.95.05 loaded): the systemctl stand-in
keeps the node's units under its root and runs the units its packages installed (here the files of the lab's fake
nvidia-compute-utils and Fabric Manager packages, tests/support/driver_rig.py, written into the root); the Fabric
Manager is the simulated node's (tests/support/fabricmanager_standin.py, _simulator_host.start_fabric_manager), and
the simulator answers each GPU's fabric state not_started until it runs at the driver's version."""
import json
import os
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host as host
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import driver_services
from tests.support import driver_rig
from tests.support.modrun import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
SYSTEMCTL = os.path.join(ROOT, "tests", "support", "bin", "systemctl")
NEW, OLD = driver_rig.NEW, driver_rig.OLD
FM = ds.FABRIC_MANAGER_UNIT
PD = ds.PERSISTENCED_UNIT


class Node(object):
    def __init__(self, tmp, monkeypatch, shape="hgx-h200", fm_version=NEW):
        self.root = str(tmp / "root")
        self.state = str(tmp / "state.json")
        for var, value in (("GPUOPS_SIMULATED_GPUS", self.state), ("GPUOPS_SIMULATED_MACHINE", shape),
                           ("GPUOPS_SIMULATED_ROOT", self.root), ("GPUOPS_SIMULATED_HOST", "driver=%s" % NEW),
                           ("GPUOPS_NODE_LOCK", str(tmp / "node.lock"))):
            monkeypatch.setenv(var, value)
        for var in ("FAKE_SYSTEMD_STATE", "FAKE_SYSTEMD_UNIT_DIR"):
            monkeypatch.delenv(var, raising=False)
        self.sim = SimulatedBackend(self.state, shape=shape, root=self.root, host_options="driver=%s" % NEW)
        host.stop_fabric_manager(self.root)     # the image's FM is not running: the packages' one is to be started
        packages = driver_rig.cuda_packages(fm_version)
        branch = fm_version.split(".")[0]
        fm = "nvidia-fabricmanager" if int(branch) >= 580 else "nvidia-fabricmanager-%s" % branch
        for name in (fm, "nvidia-compute-utils-%s" % branch):
            for rel, text in packages[name][2].items():
                path = os.path.join(self.root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as handle:
                    handle.write(text)
                os.chmod(path, 0o755 if "/bin/" in rel else 0o644)

    def run(self, check=False, **args):
        args.setdefault("root", self.root)
        args.setdefault("systemctl", [SYSTEMCTL])
        args.setdefault("fabric_timeout", 0)
        return run_main(driver_services.main, args, check_mode=check, diff=True)

    def dropin(self):
        return os.path.join(self.root, ds.PERSISTENCED_DROPIN)

    def units(self):
        path = os.path.join(self.root, ".standin-systemd.json")
        if not os.path.exists(path):
            return {}
        with open(path) as handle:
            data = json.load(handle)
        return dict((u, (s["enabled"], s["active"])) for u, s in data["units"].items())

    def fabric(self):
        return [(g["index"], g["fabric"]["state"], g["fabric"]["status"]) for g in self.sim.read_health()["gpus"]]


@pytest.fixture
def node(tmp_path, monkeypatch):
    return Node(tmp_path, monkeypatch)


def test_check_mode_plans_the_start_and_touches_nothing(node):
    out = node.run(check=True)
    assert not out.get("failed"), out
    assert out["changed"] is True
    assert out["actions"] == ["write %s" % node.dropin(), "systemctl daemon-reload", "systemctl enable %s" % PD,
                              "systemctl start %s" % PD, "systemctl enable %s" % FM, "systemctl start %s" % FM]
    assert "--persistence-mode" in out["diff"]["after"]["/" + ds.PERSISTENCED_DROPIN]
    assert out["diff"]["before"]["/" + ds.PERSISTENCED_DROPIN] is None
    assert not os.path.exists(node.dropin())
    assert out["fabric_manager"]["wanted"] is True and "NVSwitch" in out["fabric_manager"]["reason"]
    assert out["diff"]["before"][FM]["active"] == "inactive" and out["diff"]["after"][FM]["active"] == "active"
    assert all(enabled is False and active is False for enabled, active in node.units().values())
    assert host.fabric_manager_version(node.root) is None
    assert set(state for _i, state, _s in node.fabric()) == {"not_started"}


def test_start_then_the_fabric_completes_and_a_rerun_changes_nothing(node):
    assert set(state for _i, state, _s in node.fabric()) == {"not_started"}
    out = node.run(fabric_timeout=30)
    assert not out.get("failed"), out
    assert out["changed"] is True
    assert node.units() == {PD: (True, True), FM: (True, True)}
    assert host.fabric_manager_version(node.root) == NEW
    assert out["fabric"]["pending"] == []
    assert node.fabric() == [(i, "completed", "SUCCESS") for i in range(8)]
    again = node.run(fabric_timeout=30)
    assert not again.get("failed") and again["changed"] is False and again["actions"] == [], again


def test_the_wait_reads_until_every_gpu_is_registered(node, monkeypatch):
    node.sim.inject_health(3, "fabric_state", "in_progress")
    clock = {"now": 0.0, "sleeps": 0}

    def sleep(seconds):
        clock["now"] += seconds
        clock["sleeps"] += 1
        if clock["sleeps"] == 2:      # the registration of GPU 3 completes at the test's chosen point
            node.sim.inject_health(3, "fabric_state", "completed")
    monkeypatch.setattr(driver_services.DriverServices, "clock", lambda self: clock["now"])
    monkeypatch.setattr(driver_services.DriverServices, "sleep", lambda self, s: sleep(s))
    out = node.run(fabric_timeout=60, fabric_interval=5)
    assert not out.get("failed"), out
    assert clock["sleeps"] == 2 and out["fabric"] == {"pending": [], "waited": 10.0}


@pytest.mark.parametrize("fault, value, words", [
    ("fabric_state", "in_progress", "fabric state in_progress, status SUCCESS"),
    ("fabric_status", "UNKNOWN", "fabric state completed, status UNKNOWN"),
])
def test_a_fabric_that_does_not_complete_fails_naming_each_gpu(node, fault, value, words):
    for index in (2, 5):
        node.sim.inject_health(index, fault, value)
    out = node.run(fabric_timeout=0)
    assert out["failed"], out
    bus = dict((g["index"], g["pci_bus_id"]) for g in node.sim.read_all()["gpus"])
    for index in (2, 5):
        assert "GPU %d (%s): %s" % (index, bus[index], words) in out["msg"], out["msg"]
    assert "GPU 0 " not in out["msg"]
    assert "journalctl -u nvidia-fabricmanager" in out["msg"] and "not ready on 2 GPU(s)" in out["msg"]
    assert [p["index"] for p in out["fabric"]["pending"]] == [2, 5]


def test_a_fabric_manager_of_another_version_refuses_to_start(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, fm_version=OLD)
    out = node.run(fabric_timeout=0)
    assert out["failed"], out
    assert ("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s"
            % (OLD, NEW)) in out["msg"], out["msg"]
    assert "exactly the driver's version (loaded: %s)" % NEW in out["msg"]
    assert host.fabric_manager_version(node.root) is None
    assert node.units()[FM][1] is False
    assert set(state for _i, state, _s in node.fabric()) == {"not_started"}


def test_without_a_driver_loaded_the_units_are_enabled_and_not_started(node):
    host.unload_driver(node.root)
    out = node.run(fabric_timeout=0)
    assert not out.get("failed"), out
    assert out["deferred"] == [PD, FM]
    assert out["actions"] == ["write %s" % node.dropin(), "systemctl daemon-reload", "systemctl enable %s" % PD,
                              "systemctl enable %s" % FM]
    assert host.persistenced_mode(node.root) is None       # never started before the driver is loaded
    assert node.units() == {PD: (True, False), FM: (True, False)}
    assert "fabric" not in out


def test_a_node_without_nvswitch_runs_no_fabric_manager(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, shape="h200-x1")
    out = node.run(fabric_timeout=0)
    assert not out.get("failed"), out
    assert out["fabric_manager"] == {"wanted": False, "reason": "no NVSwitch on this node"}
    assert out["actions"] == ["write %s" % node.dropin(), "systemctl daemon-reload", "systemctl enable %s" % PD,
                              "systemctl start %s" % PD]
    assert node.units().get(FM, (False, False)) == (False, False)      # (daemon-reload read its file)


def test_persistenced_owns_persistence_mode_and_a_running_one_is_restarted_with_it(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, shape="h200-x1")
    # the packaged unit (--no-persistence-mode, as Ubuntu's) already running, the legacy per-GPU setting off
    for verb in ("enable", "start"):
        assert subprocess.run([SYSTEMCTL, verb, PD], check=False).returncode == 0
    node.sim.set_persistence_mode(0, False)
    node.sim.clear_call_log()
    assert host.persistenced_mode(node.root) is False
    assert [g["persistence_mode"] for g in node.sim.read_all()["gpus"]] == [False]

    out = node.run()
    assert not out.get("failed"), out
    assert out["actions"] == ["write %s" % node.dropin(), "systemctl daemon-reload", "systemctl restart %s" % PD]
    assert out["persistence_mode"]["owner"] == "nvidia-persistenced"
    with open(node.dropin()) as handle:
        text = handle.read()
    assert ("ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose "
            "--persistence-mode\n") in text
    assert host.persistenced_mode(node.root) is True
    assert [g["persistence_mode"] for g in node.sim.read_all()["gpus"]] == [True]
    assert not [c for c in node.sim.raw_state()["call_log"] if c.get("call") == "set_persistence_mode"]
    again = node.run()
    assert not again.get("failed") and again["changed"] is False and again["actions"] == [], again


@pytest.mark.parametrize("args, words", [
    ({"fabric_timeout": 5000}, "fabric_timeout must be 0 to 3600 seconds, got 5000"),
    ({"fabric_timeout": -1}, "fabric_timeout must be 0 to 3600 seconds, got -1"),
    ({"fabric_interval": 0}, "fabric_interval must be 0.1 to 60 seconds"),
    ({"systemctl": ["/nonexistent/systemctl"]}, "systemctl: '/nonexistent/systemctl' is not an executable program"),
])
def test_bad_input_changes_nothing(node, args, words):
    out = node.run(**args)
    assert out["failed"] and words in out["msg"] and "nothing changed" in out["msg"], out
    assert node.units() == {}
