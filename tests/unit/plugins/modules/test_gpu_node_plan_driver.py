"""gpu_node_plan's driver step (registry step `driver`): the loaded driver against the pin, read below NVML, and the
plan still answering when NVML cannot start (the GPU steps then wait for the driver). On simulated nodes whose host
tree (_simulator_host) says what a user's node would: no driver, nouveau, another version, a version mismatch."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver._driver_step import plan_driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_node_plan
from tests.support.modrun import run_main

PIN = {"version": "580.95.05", "branch": "", "flavour": "open"}
GPU_STEPS = {"mig": {"manage": "declared", "config_name": "all-balanced"},
             "compute_mode": {"settings": [{"gpus": ["all"], "mode": "Default"}]}}


@pytest.fixture
def host(tmp_path, monkeypatch):
    """``host(options)``: a simulated H200 node with the host options of GPUOPS_SIMULATED_HOST; returns its root."""
    def _make(options):
        path, root = str(tmp_path / "state.json"), str(tmp_path / "root")
        monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", path)
        monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "h200-x1")
        monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", root)
        monkeypatch.setenv("GPUOPS_SIMULATED_HOST", options)
        sim = SimulatedBackend(path, shape="h200-x1", root=root, host_options=options)
        try:
            sim.read_all()
        except Exception:       # NVML may not start on this host; the host tree is rendered all the same
            pass
        return root
    return _make


def _plan(args, check=True):
    return run_main(gpu_node_plan.main, args, check_mode=check)


def test_a_node_that_declares_no_driver_reads_none():
    state = {"kernel": "6.8.0-87-generic", "loaded": None, "nouveau_loaded": False, "secure_boot": False}
    report, reasons = plan_driver(state, None, PIN)
    assert report["action"] == "load" and report["disruptive"] == [] and len(reasons) == 1


@pytest.mark.parametrize("options, action, disruptive, words", [
    ("driver=580.95.05", "none", False, None),
    ("driver=none", "load", False, "no NVIDIA driver is loaded: driver 580.95.05 (open modules) will be loaded"),
    ("driver=none,nouveau", "reboot", True, "nouveau is loaded: it holds the GPUs until the node boots with it"),
    ("driver=570.195.03", "reload", True, "driver 570.195.03 is loaded, 580.95.05 is declared"),
    ("driver=580.95.05,flavour=proprietary", "reload", True, "the loaded modules are proprietary, open are declared"),
])
def test_the_loaded_driver_against_the_pin(host, options, action, disruptive, words):
    host(options)
    out = _plan(dict(GPU_STEPS, driver=PIN))
    assert not out.get("failed"), out
    assert out["driver"]["action"] == action
    assert bool(out["driver"]["disruptive"]) is disruptive
    assert out["driver"]["reboot_needed"] is (action == "reboot")
    if words is None:
        assert out["steps"]["driver"] == []
    else:
        assert any(words in reason for reason in out["steps"]["driver"]), out["steps"]["driver"]


def test_no_nvml_the_gpu_steps_wait_for_the_driver(host):
    host("driver=none")
    out = _plan(dict(GPU_STEPS, driver=PIN))
    assert out["driver"]["nvml_error"]["name"] == "LIBRARY_NOT_FOUND"
    assert out["ansible_facts"]["nvidia_gpus"]["gpus"] == []
    for step in ("mig", "compute_mode"):
        assert out[step]["waiting"] == "driver" and out[step]["managed"] is False, out[step]
    assert out["steps"]["compute_mode"][0].startswith("waits for the driver (NVML: ")
    # without the driver step NVML must start, as before
    out = _plan(dict(GPU_STEPS))
    assert out["failed"] and "NVML could not start" in out["msg"]


def test_a_version_mismatch_is_repaired_by_a_reload(host):
    root = host("driver=570.195.03")
    # the packages of 580 were installed under the loaded 570 module: NVML's library is 580
    _simulator_host.install_nvml_library(root, "580.95.05")
    out = _plan(dict(GPU_STEPS, driver=PIN))
    assert out["driver"]["nvml_error"]["name"] == "LIB_RM_VERSION_MISMATCH"
    assert out["driver"]["action"] == "reload"
    assert any("version mismatch" in r for r in out["driver"]["disruptive"]), out["driver"]
    # pinned at the loaded version, the mismatch alone is the work
    out = _plan(dict(GPU_STEPS, driver=dict(PIN, version="570.195.03")))
    assert out["driver"]["action"] == "reload" and len(out["driver"]["disruptive"]) == 1


@pytest.mark.parametrize("pin, words", [
    ({"version": "", "branch": ""}, "declare version (like 580.95.05) or branch (like 580)"),
    ({"version": "580"}, "version '580' is not a driver version"),
    ({"version": "580.95.05", "branch": "570"}, "version 580.95.05 is not of branch 570"),
    ({"branch": "r580"}, "branch 'r580' is not a driver branch"),
])
def test_a_bad_pin_is_refused_before_anything_is_read(host, pin, words):
    root = host("driver=580.95.05")
    before = sorted(os.listdir(root))
    out = _plan({"driver": pin})
    assert out["failed"] and words in out["msg"], out
    assert sorted(os.listdir(root)) == before


def test_a_branch_pin_accepts_any_version_of_the_branch(host):
    host("driver=580.95.05")
    assert _plan({"driver": {"branch": "580"}})["steps"]["driver"] == []
    assert _plan({"driver": {"branch": "570"}})["driver"]["action"] == "reload"


SYSTEMCTL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))), "tests", "support", "bin", "systemctl")


def _dpkg_status(directory, packages):
    directory.mkdir(exist_ok=True)
    (directory / "status").write_text("".join(
        "Package: %s\nStatus: install ok installed\nPriority: optional\nSection: libs\n"
        "Maintainer: tests <t@gpuops-test.invalid>\nArchitecture: amd64\nVersion: %s\nDescription: TEST STAND-IN\n\n"
        % (name, version) for name, version in packages))


@pytest.mark.parametrize("loaded, packages, words, refused", [
    ("580.95.05", [("nvidia-fabricmanager", "580.95.05-1")], None, False),
    ("580.95.05", [], "the Fabric Manager is not installed", False),
    ("570.195.03", [("nvidia-fabricmanager-570", "570.195.03-1")], "installed at another version", False),
    ("580.95.05", [("nvidia-fabricmanager", "580.105.08-1")], "installing the pin would downgrade it", True),
])
def test_the_fabric_managers_installed_version_against_the_pin(tmp_path, monkeypatch, loaded, packages, words,
                                                               refused):
    path, root = str(tmp_path / "state.json"), str(tmp_path / "root")
    for var, value in (("GPUOPS_SIMULATED_GPUS", path), ("GPUOPS_SIMULATED_MACHINE", "hgx-h200"),
                       ("GPUOPS_SIMULATED_ROOT", root), ("GPUOPS_SIMULATED_HOST", "driver=%s" % loaded),
                       ("DPKG_ADMINDIR", str(tmp_path / "dpkg"))):
        monkeypatch.setenv(var, value)
    for var in ("FAKE_SYSTEMD_STATE", "FAKE_SYSTEMD_UNIT_DIR"):
        monkeypatch.delenv(var, raising=False)
    SimulatedBackend(path, shape="hgx-h200", root=root, host_options="driver=%s" % loaded).read_all()
    _dpkg_status(tmp_path / "dpkg", packages)
    out = _plan({"driver": dict(PIN, systemctl=[SYSTEMCTL])})
    if refused:
        assert out["failed"] and words in out["msg"] and "nothing changed" in out["msg"], out
        return
    assert not out.get("failed"), out
    assert out["driver"]["fabric_manager"]["installed"] == [{"name": n, "version": v} for n, v in packages]
    assert out["driver"]["fabric_manager"]["pinned"] == PIN["version"]
    fm_reasons = [r for r in out["steps"]["driver"] if "Fabric Manager" in r and "nvidia-fabricmanager.service" not in r]
    if words is None:
        assert fm_reasons == [], out["steps"]["driver"]
    else:
        assert len(fm_reasons) == 1 and words in fm_reasons[0], out["steps"]["driver"]


def test_a_fabric_manager_pinned_at_another_version_is_refused_before_anything_is_read(host):
    root = host("driver=580.95.05")
    before = sorted(os.listdir(root))
    out = _plan({"driver": dict(PIN, fabric_manager_version="580.82.07")})
    assert out["failed"] and "the Fabric Manager is pinned at 580.82.07 and the driver at 580.95.05" in out["msg"], out
    assert sorted(os.listdir(root)) == before


def _fabric_lost_hgx(tmp_path, monkeypatch, fm_version):
    """An HGX H200 at 580.95.05 whose Fabric Manager package is ``fm_version`` and whose fabric is lost (every GPU's
    fabric state not_started: the Fabric Manager is down)."""
    path, root = str(tmp_path / "state.json"), str(tmp_path / "root")
    for var, value in (("GPUOPS_SIMULATED_GPUS", path), ("GPUOPS_SIMULATED_MACHINE", "hgx-h200"),
                       ("GPUOPS_SIMULATED_ROOT", root), ("GPUOPS_SIMULATED_HOST", "driver=580.95.05"),
                       ("DPKG_ADMINDIR", str(tmp_path / "dpkg"))):
        monkeypatch.setenv(var, value)
    for var in ("FAKE_SYSTEMD_STATE", "FAKE_SYSTEMD_UNIT_DIR"):
        monkeypatch.delenv(var, raising=False)
    sim = SimulatedBackend(path, shape="hgx-h200", root=root, host_options="driver=580.95.05")
    for index in range(len(sim.read_all()["gpus"])):
        sim.inject_health(index, "fabric_state", "not_started")
    _dpkg_status(tmp_path / "dpkg", [("nvidia-fabricmanager", fm_version)])


def test_a_refused_plan_still_reads_the_health_that_blocks_the_node(tmp_path, monkeypatch):
    # issue 47: the driver step refuses (the Fabric Manager installed newer than the pin, no downgrade allowed), and
    # the node's fabric is lost: the failure carries the refusal and the health verdict, which blocks
    _fabric_lost_hgx(tmp_path, monkeypatch, "580.105.08-1")
    out = _plan({"driver": dict(PIN, systemctl=[SYSTEMCTL]), "health": {"policy": {}}})
    assert out["failed"] and "installing the pin would downgrade it" in out["msg"], out
    assert out["refused_step"] == "driver"
    gate = out["health"]["gate"]
    assert gate["healthy"] is False and len(gate["blocking"]) == 8, gate
    assert all("fabric" in finding["message"] for finding in gate["blocking"]), gate
    # nothing but the health step was checked after the refusal
    assert set(out["steps"]) <= {"health"}, out["steps"]


def test_a_refused_input_check_still_reads_the_health_where_it_is_asked_for(tmp_path, monkeypatch):
    _fabric_lost_hgx(tmp_path, monkeypatch, "580.95.05-1")
    out = _plan({"driver": dict(PIN, fabric_manager_version="580.82.07"), "health": {"policy": {}}})
    assert out["failed"] and "Pin both at one version" in out["msg"] and out["refused_step"] == "driver", out
    assert out["health"]["gate"]["healthy"] is False, out["health"]
    # without the health step, nothing is read
    out = _plan({"driver": dict(PIN, fabric_manager_version="580.82.07")})
    assert out["failed"] and "health" not in out and "ansible_facts" not in out, out


def test_the_node_plan_reads_the_next_kernel_and_its_modules(host):
    # a newer kernel is the boot loader's default and has no NVIDIA modules: read and reported (not work of the step);
    # the simulated reboot then boots that kernel, and its modules are read where DKMS built them
    from tests.support import driver_files as df
    root = host("driver=580.95.05")
    modinfo = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
                            "support", "bin", "modinfo")]
    df.write(root, "boot/grub/grub.cfg", "set default=\"0\"\nmenuentry 'Ubuntu' {\n linux /boot/vmlinuz-6.8.0-90-generic"
                                         " ro\n}\nmenuentry 'old' {\n linux /boot/vmlinuz-%s ro\n}\n"
             % _simulator_host.DEFAULT_KERNEL)
    out = _plan(dict(GPU_STEPS, driver=dict(PIN, modinfo=modinfo)))
    assert not out.get("failed"), out
    nk = out["driver"]["next_kernel"]
    assert (nk["running"], nk["next"], nk["next_differs"]) == (_simulator_host.DEFAULT_KERNEL, "6.8.0-90-generic", True)
    assert nk["next_modules"]["present"] is False and "Module nvidia not found" in nk["next_modules"]["detail"]
    assert out["driver"]["action"] == "none" and out["steps"]["driver"] == [], out["steps"]
    df.install_module_files(root, "580.95.05", signed=False, kernel="6.8.0-90-generic", subdir="updates/dkms")
    nk = _plan(dict(GPU_STEPS, driver=dict(PIN, modinfo=modinfo)))["driver"]["next_kernel"]
    assert nk["next_modules"]["present"] and nk["next_modules"]["flavour"] == "open", nk
    # the boot loader's kernel is the one a simulated reboot runs, with the modules built for it
    SimulatedBackend(os.environ["GPUOPS_SIMULATED_GPUS"], root=root).reboot()
    assert df.running_kernel(root) == "6.8.0-90-generic"
    assert _simulator_host.loaded_module_version(root) == "580.95.05"
