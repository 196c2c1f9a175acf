"""_driver_services' rules (which daemons a node needs, what is work, which GPUs' fabric is not registered) and the
simulated Fabric Manager of _simulator_host (refused at another version and without NVSwitches, registered fabric only
while it runs at the loaded driver's version, back after a boot at the same version)."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host as host
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

FM, PD = ds.FABRIC_MANAGER_UNIT, ds.PERSISTENCED_UNIT


@pytest.mark.parametrize("setting, state, pci, wanted, words", [
    ("auto", {"nvswitch": True}, 0, True, "NVSwitch system (/proc/driver/nvidia-nvswitch"),
    ("auto", {"nvlink5": True}, 0, True, "NVLink5 system"),
    ("auto", {}, 4, True, "4 NVSwitch functions on the PCI bus"),
    ("auto", {}, 0, False, "no NVSwitch on this node"),
    ("false", {"nvswitch": True}, 0, False, "declared"),
    ("true", {}, 0, True, "declared"),
    (True, {}, 0, True, "declared"),
])
def test_which_nodes_run_the_fabric_manager(setting, state, pci, wanted, words):
    got, why = ds.fabric_manager_wanted(setting, state, pci)
    assert got is wanted and words in why


def test_bad_settings_are_refused():
    with pytest.raises(ds.DriverServicesError, match="fabric_manager 'yes' is not one of auto, true, false"):
        ds.fabric_manager_wanted("yes", {})
    for value in (-1, 3601, True, "5"):
        with pytest.raises(ds.DriverServicesError, match="must be 0 to 3600 seconds"):
            ds.check_timeout(value)


def test_units_not_enabled_or_not_running_are_work_in_start_order():
    states = {FM: {"unit": FM, "enabled": "disabled", "active": "failed"},
              PD: {"unit": PD, "enabled": "enabled", "active": "active"}}
    assert ds.plan_units(states) == [{"unit": FM, "enable": True, "start": True}]
    assert ds.unit_reasons(states) == [FM + " is not running (failed) and not enabled (disabled)"]
    states[PD]["active"] = "inactive"
    assert [a["unit"] for a in ds.plan_units(states)] == [PD, FM]
    states = dict((u, {"unit": u, "enabled": "enabled", "active": "active"}) for u in (FM, PD))
    assert ds.plan_units(states) == [] and ds.unit_reasons(states) == []


def test_nvlink5_prerequisites():
    assert ds.missing_modules(["mlx5_core"], True) == ["ib_umad"]
    assert ds.missing_modules([], False) == []


def test_fabric_pending_names_each_gpu_not_completed_with_success():
    gpus = [{"index": 0, "pci_bus_id": "00000000:18:00.0", "fabric": {"state": "completed", "status": "SUCCESS"}},
            {"index": 1, "pci_bus_id": "00000000:2A:00.0", "fabric": {"state": "in_progress", "status": "SUCCESS"}},
            {"index": 2, "pci_bus_id": "00000000:3A:00.0", "fabric": {"state": "completed", "status": "UNKNOWN"}},
            {"index": 3, "pci_bus_id": "00000000:5D:00.0", "fabric": "not supported"},
            {"index": 4, "pci_bus_id": "00000000:9A:00.0", "lost": True}]
    pending = ds.fabric_pending(gpus)
    assert [(p["index"], p["state"], p["status"]) for p in pending] == [
        (1, "in_progress", "SUCCESS"), (2, "completed", "UNKNOWN"), (4, "lost", "GPU_IS_LOST")]
    msg = ds.fabric_message(pending, 30.2, "580.95.05")
    assert msg.startswith("the NVLink fabric is not ready on 3 GPU(s) after 30 s: GPU 1 (00000000:2A:00.0): fabric "
                          "state in_progress, status SUCCESS; GPU 2 (00000000:3A:00.0)")
    assert "at the driver's version (580.95.05)" in msg and "journalctl -u nvidia-fabricmanager" in msg


def test_a_simulated_fabric_manager_runs_only_at_the_loaded_drivers_version(tmp_path):
    root = str(tmp_path / "root")
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="hgx-h200", root=root, host_options="driver=580.95.05")
    # the image brings its Fabric Manager: registered
    assert host.fabric_manager_version(root) == "580.95.05"
    assert set(g["fabric"]["state"] for g in sim.read_health()["gpus"]) == {"completed"}
    host.stop_fabric_manager(root)
    assert set(g["fabric"]["state"] for g in sim.read_health()["gpus"]) == {"not_started"}
    assert host.start_fabric_manager(root, "570.195.03") == (
        "fabric manager NVIDIA GPU driver interface version 570.195.03 don't match with driver version 580.95.05. "
        "Please update with matching NVIDIA driver package.")
    assert host.fabric_manager_version(root) is None
    assert host.start_fabric_manager(root, "580.95.05") is None
    assert set(g["fabric"]["state"] for g in sim.read_health()["gpus"]) == {"completed"}
    # a reboot: the enabled Fabric Manager comes back with the same driver
    sim.reboot()
    assert host.fabric_manager_version(root) == "580.95.05"


def test_no_fabric_manager_without_nvswitches(tmp_path):
    root = str(tmp_path / "root")
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="h200-x1", root=root, host_options="driver=580.95.05")
    assert host.fabric_manager_version(root) is None
    assert host.start_fabric_manager(root, "580.95.05").startswith("request to query NVSwitch device information")
    assert [g["fabric"] for g in sim.read_health()["gpus"]] == ["not supported"]


UBUNTU_UNIT = ("[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\nStopWhenUnneeded=true\n\n[Service]\n"
               "Type=forking\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode "
               "--verbose\nExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n")


@pytest.mark.parametrize("unit, command", [
    (UBUNTU_UNIT, "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose --persistence-mode"),
    # NVIDIA's sample unit (NVIDIA/nvidia-persistenced, init/systemd): the default is already on, said explicitly
    ("[Service]\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced\n",
     "/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode"),
    ("[Service]\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\n",
     "/usr/bin/nvidia-persistenced --persistence-mode"),
])
def test_the_persistenced_dropin_starts_the_packaged_command_with_persistence_mode(unit, command):
    text = ds.persistenced_dropin(unit)
    assert "[Service]\nExecStart=\nExecStart=%s\n" % command in text
    assert "StopWhenUnneeded=false" in text
    assert ds.dropin_reason(unit, text) is None
    assert "missing" in ds.dropin_reason(unit, None)
    assert "not as declared" in ds.dropin_reason(unit, text.replace("--persistence-mode", "--no-persistence-mode"))


def test_no_dropin_without_the_packaged_unit():
    assert ds.persistenced_dropin(None) is None and ds.persistenced_dropin("[Service]\nType=forking\n") is None
    assert ds.dropin_reason(None, None) is None


def test_a_static_unit_is_not_planned_for_enable():
    # Ubuntu's nvidia-persistenced.service has no [Install] section: is-enabled prints "static", enable cannot change it
    states = {PD: {"unit": PD, "enabled": "static", "active": "active"}}
    assert ds.plan_units(states) == [] and ds.unit_reasons(states) == []
    states[PD]["active"] = "inactive"
    assert ds.plan_units(states) == [{"unit": PD, "enable": False, "start": True}]


@pytest.mark.parametrize("installed, allow, work, refused", [
    ([], False, "the Fabric Manager is not installed: it is installed at the driver's version 580.95.05", None),
    ([{"name": "nvidia-fabricmanager", "version": "580.95.05-1"}], False, None, None),
    ([{"name": "nvidia-fabricmanager", "version": "3:580.95.05-1.el9"}], False, None, None),
    ([{"name": "nvidia-fabricmanager-570", "version": "570.195.03-1"}], False,
     "installed at another version (nvidia-fabricmanager-570 570.195.03-1) than the driver's 580.95.05", None),
    ([{"name": "nvidia-fabricmanager", "version": "580.105.08-1"}], False, None, "installing the pin would downgrade"),
    ([{"name": "nvidia-fabricmanager", "version": "580.105.08-1"}], True, "it is installed at 580.95.05", None),
])
def test_the_fabric_managers_package_against_the_pin(installed, allow, work, refused):
    reason, refusal = ds.fabric_manager_check(installed, "580.95.05", allow)
    assert (reason is None) is (work is None) and (work is None or work in reason), reason
    assert (refusal is None) is (refused is None) and (refused is None or refused in refusal), refusal
    assert ds.fabric_manager_check(installed, "", allow) == (None, None)      # a branch pin: no exact version
