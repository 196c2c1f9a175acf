"""gpu_info end to end through real ansible, on simulated GPUs and on this GPU-less machine."""
import hashlib
import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.support.ansible_run import ROOT, run_module
from tests.support.modrun import run_here

MODULE = "gpuops.nvidia.gpu_info"


def _sim_env(tmp_path, shape="hgx-h200", name="state.json"):
    return {"GPUOPS_SIMULATED_GPUS": str(tmp_path / name), "GPUOPS_SIMULATED_MACHINE": shape}


def _digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_reads_every_field_the_issue_lists(tmp_path):
    result, proc = run_module(MODULE, env=_sim_env(tmp_path, "dgx-a100-40gb"))
    assert not result.get("failed"), proc.stdout
    assert result["changed"] is False
    assert result["backend"] == "simulated" and result["driver_version"] and result["cuda_driver_version"]
    gpu = result["gpus"][0]
    for key in ("index", "uuid", "name", "pci_bus_id", "pci_device_id", "memory_total_mib",
                "compute_capability", "compute_mode", "persistence_mode", "mig_supported", "mig_mode_current",
                "mig_mode_pending", "gi_profiles", "gpu_instances", "mig_devices", "processes"):
        assert key in gpu, key
    profile = gpu["gi_profiles"][0]
    for key in ("name", "id", "slices", "max_instances", "memory_mib", "sms", "placements", "ci_profiles"):
        assert key in profile, key
    assert result["ansible_facts"]["nvidia_gpus"]["gpus"] == result["gpus"]


def test_reports_instances_mig_devices_and_processes(tmp_path):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
    env = _sim_env(tmp_path, "hgx-h200")
    sim = SimulatedBackend(env["GPUOPS_SIMULATED_GPUS"], shape="hgx-h200")
    sim.set_mig_mode(1, True)
    gi = sim.create_gpu_instance(1, 9, 4)
    ci = sim.create_compute_instance(1, gi, 2)
    sim.add_process(1, 4321, "vllm", used_memory_mib=30000, gi_id=gi, ci_id=ci)
    sim.add_process(0, 1234, "python", used_memory_mib=100)
    result = run_here(MODULE, {"gpus": ["0", "1"]}, env=env)
    g0, g1 = result["gpus"]
    assert g0["processes"] == [{"pid": 1234, "name": "python", "used_memory_mib": 100, "gi_id": None, "ci_id": None}]
    assert g1["gpu_instances"][0]["profile"] == "3g.71gb"
    assert g1["gpu_instances"][0]["placement"] == {"start": 4, "size": 4}
    device = g1["mig_devices"][0]
    assert device["uuid"].startswith("MIG-") and device["processes"][0]["name"] == "vllm"


def test_check_mode_changes_nothing(tmp_path):
    env = _sim_env(tmp_path)
    run_module(MODULE, env=env)
    path = env["GPUOPS_SIMULATED_GPUS"]
    before = _digest(path)
    result = run_module(MODULE, env=env, check=True)[0]
    assert result["changed"] is False and len(result["gpus"]) == 8
    assert _digest(path) == before
    assert json.load(open(path))["call_log"] == []


@pytest.mark.parametrize("selector,expected", [
    (["all"], list(range(5))), (["3"], [3]), (["A100-SXM4-80GB"], [0, 1]),
    (["NVIDIA H100 80GB HBM3", "4"], [2, 3, 4]),
])
def test_selectors(tmp_path, selector, expected):
    result = run_here(MODULE, {"gpus": selector}, env=_sim_env(tmp_path, "mixed"))
    assert [g["index"] for g in result["gpus"]] == expected


def test_selector_matching_nothing_is_an_error(tmp_path):
    result = run_here(MODULE, {"gpus": ["B200"]}, env=_sim_env(tmp_path, "l40s-x2"))
    assert result["failed"] is True
    assert "matches no GPU" in result["msg"] and "NVIDIA L40S" in result["msg"]


def test_selecting_by_uuid(tmp_path):
    env = _sim_env(tmp_path, "a30-x4")
    uuid = run_here(MODULE, env=env)["gpus"][2]["uuid"]
    result = run_here(MODULE, {"gpus": [uuid]}, env=env)
    assert [g["index"] for g in result["gpus"]] == [2]


def test_unknown_shape_fails_clearly(tmp_path):
    result = run_here(MODULE, env=_sim_env(tmp_path, "dgx-z"))
    assert result["failed"] is True
    assert "unknown simulated machine shape 'dgx-z'" in result["msg"] and "hgx-h200" in result["msg"]
    assert not os.path.exists(str(tmp_path / "state.json"))


def test_corrupt_state_fails_clearly_and_is_kept(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("not json")
    result = run_here(MODULE, env=_sim_env(tmp_path))
    assert result["failed"] is True and "is not valid JSON" in result["msg"]
    assert path.read_text() == "not json"


def test_no_driver_on_a_real_host_answers_from_below_nvml(tmp_path):
    # This machine has no NVIDIA driver: NVML cannot start, and gpu_info says why and what PCI and the kernel show
    # (here: no NVIDIA function at all), instead of failing.
    result, proc = run_module(MODULE)
    assert not result.get("failed"), proc.stdout
    assert result["gpus"] == [] and result["driver_version"] is None
    driver = result["driver"]
    assert driver["root"] == "/" and driver["nvml_driver_version"] is None
    assert driver["nvml_error"]["name"] in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED")
    assert "no NVIDIA driver on this host" in driver["nvml_error"]["message"]
    with open("/proc/sys/kernel/osrelease") as handle:
        assert driver["kernel"] == handle.read().strip()
    assert driver["loaded_version"] is None and driver["read_error"] is None
    assert driver["pci"]["gpus"] == [] and driver["pci"]["flavours"]["open"] is True


def test_pynvml_missing_on_a_real_host(tmp_path):
    # A target Python without nvidia-ml-py: the module must say which package to install.
    bare = tmp_path / "bare"
    import venv
    venv.EnvBuilder(with_pip=False).create(str(bare))
    result = run_module(MODULE, python=str(bare / "bin" / "python"))[0]
    assert result["failed"] is True
    assert "install the Python package nvidia-ml-py" in result["msg"]


def _host_env(tmp_path, shape="hgx-h200", options=""):
    env = _sim_env(tmp_path, shape)
    env.update({"GPUOPS_SIMULATED_ROOT": str(tmp_path / "root"), "GPUOPS_SIMULATED_HOST": options})
    return env


def test_driver_section_of_a_node_whose_image_brings_the_driver(tmp_path):
    result = run_here(MODULE, env=_host_env(tmp_path))
    assert not result.get("failed"), result
    driver = result["driver"]
    assert driver["nvml_driver_version"] == driver["loaded_version"] == result["driver_version"] == "580.159.04"
    assert (driver["flavour"], driver["nvml_error"], driver["read_error"]) == ("open", None, None)
    assert driver["modules"] == {"nvidia": 1, "nvidia_uvm": 0} and driver["in_use"] is False
    assert (driver["nouveau_loaded"], driver["secure_boot"], driver["nvswitch"], driver["nvlink5"]) == (
        False, False, True, False)
    assert "pci" not in driver and len(result["gpus"]) == 8
    assert result["ansible_facts"]["nvidia_gpus"]["driver"] == driver


def test_the_fabric_manager_and_each_gpus_fabric_are_reported(tmp_path):
    # the package database of the node: the Fabric Manager installed at the driver's version (dpkg's own status file)
    admindir = tmp_path / "dpkg"
    admindir.mkdir()
    (admindir / "status").write_text("Package: nvidia-fabricmanager\nStatus: hold ok installed\nPriority: optional\n"
                                     "Section: libs\nMaintainer: tests <t@gpuops-test.invalid>\nArchitecture: amd64\n"
                                     "Version: 580.159.04-1\nDescription: TEST STAND-IN\n\n")
    env = dict(_host_env(tmp_path), DPKG_ADMINDIR=str(admindir))
    backend = SimulatedBackend(env["GPUOPS_SIMULATED_GPUS"], shape="hgx-h200", root=env["GPUOPS_SIMULATED_ROOT"],
                               host_options="")
    backend.inject_health(3, "fabric_state", "in_progress")
    result = run_here(MODULE, env=env)
    assert not result.get("failed"), result
    fm = result["driver"]["fabric_manager"]
    assert fm["installed"] == [{"name": "nvidia-fabricmanager", "version": "580.159.04-1"}], fm
    assert fm["running"] is True and fm["running_version"] == "580.159.04", fm     # the image's, at its driver
    fabric = result["driver"]["fabric"]
    assert [(f["index"], f["state"], f["status"]) for f in fabric][2:4] == [
        (2, "completed", "SUCCESS"), (3, "in_progress", "SUCCESS")], fabric
    assert fabric[3]["pci_bus_id"] == result["gpus"][3]["pci_bus_id"]

    _simulator_host.stop_fabric_manager(env["GPUOPS_SIMULATED_ROOT"])
    (admindir / "status").write_text("")
    result = run_here(MODULE, {"health": False}, env=env)
    fm = result["driver"]["fabric_manager"]
    assert fm["installed"] == [] and fm["running"] is False and fm["running_version"] is None, fm
    assert "fabric" not in result["driver"]


def test_a_node_before_its_driver_answers_with_the_pci_view(tmp_path):
    env = _host_env(tmp_path, "hgx-b200", "driver=none,nouveau,secure-boot=on")
    result = run_here(MODULE, env=env, check=True)
    assert not result.get("failed") and result["changed"] is False, result
    assert result["gpus"] == []
    driver = result["driver"]
    assert driver["nvml_error"]["name"] == "LIBRARY_NOT_FOUND"
    assert (driver["loaded_version"], driver["nouveau_loaded"], driver["secure_boot"], driver["nvlink5"]) == (
        None, True, True, True)
    gpus = driver["pci"]["gpus"]
    assert len(gpus) == 8 and set(g["name"] for g in gpus) == {"NVIDIA B200"}
    assert gpus[0]["device"] == "0x2901" and gpus[0]["class"] == "0x030200" and gpus[0]["bound_driver"] == "nouveau"
    assert driver["pci"]["nvswitches"] == []
    flavours = driver["pci"]["flavours"]
    assert flavours["open"] is True and flavours["proprietary"] is False
    (reason,) = flavours["reasons"]["proprietary"]          # one sentence for the eight GPUs
    assert reason.startswith("8 x NVIDIA B200 at %s are Blackwell" % ", ".join(g["bus_id"] for g in gpus)), reason


def test_a_version_mismatch_is_reported_not_failed(tmp_path):
    env = _host_env(tmp_path, "h200-x1", "driver=570.172.08")
    assert run_here(MODULE, env=env)["driver_version"] == "570.172.08"
    _simulator_host.install_nvml_library(env["GPUOPS_SIMULATED_ROOT"], "580.95.05")
    result = run_here(MODULE, env=env)
    driver = result["driver"]
    assert not result.get("failed") and result["gpus"] == []
    assert driver["nvml_error"]["name"] == "LIB_RM_VERSION_MISMATCH"
    assert "Driver/library version mismatch" in driver["nvml_error"]["message"]
    assert driver["loaded_version"] == "570.172.08" and driver["pci"]["gpus"][0]["name"] == "NVIDIA H200"


def test_a_broken_host_tree_without_nvml_fails_naming_both(tmp_path):
    env = _host_env(tmp_path, "h200-x1", "driver=none")
    SimulatedBackend(env["GPUOPS_SIMULATED_GPUS"], shape="h200-x1", root=env["GPUOPS_SIMULATED_ROOT"],
                     host_options="driver=none")
    os.unlink(os.path.join(env["GPUOPS_SIMULATED_ROOT"], "proc/sys/kernel/osrelease"))
    result = run_here(MODULE, env=env)
    assert result["failed"] is True
    assert "NVML could not start" in result["msg"] and "osrelease" in result["msg"]


def test_simulated_gpus_without_a_root_read_nothing_below_nvml(tmp_path):
    result = run_here(MODULE, env=_sim_env(tmp_path, "h200-x1"))
    assert result["driver"]["root"] is None and result["driver"]["nvml_driver_version"] == result["driver_version"]
    assert result["driver"]["kernel"] is None and result["driver"]["loaded_version"] is None


# ---------------------------------------------------------------------------------------------------- health
SIM = "gpuops.nvidia.gpu_simulator"


def test_health_of_a_healthy_hgx_passes(tmp_path):
    result = run_here(MODULE, env=_sim_env(tmp_path, "hgx-h100-80gb"))
    health = result["health"]
    assert health["verdict"] == "pass" and health["healthy"] is True and health["findings"] == []
    assert health["kernel_log"] == {"readable": True, "source": "simulated", "reason": None, "xid_lines": 0}
    assert len(health["gpus"]) == 8 and len(health["gpus"][0]["nvlink"]) == 18
    assert health["gpus"][0]["retired_pages"] == "not supported"
    assert "health" not in result["ansible_facts"]["nvidia_gpus"]


def test_injected_faults_block_with_gpu_bus_id_and_fix_and_the_policy_loosens_them(tmp_path):
    env = _sim_env(tmp_path, "hgx-h200")
    for args in ({"action": "inject_health", "index": 2, "fault": "row_remap_pending"},
                 {"action": "inject_health", "index": 5, "fault": "pcie_width", "value": "8"},
                 {"action": "add_xid", "index": 1, "code": 13, "xid_text": "Graphics SM Warp Exception"}):
        assert not run_here(SIM, args, env=env).get("failed")
    path = env["GPUOPS_SIMULATED_GPUS"]
    before = _digest(path)
    result = run_here(MODULE, env=env, check=True)
    health = result["health"]
    assert health["verdict"] == "block" and health["healthy"] is False
    assert health["blocking"] == [
        "GPU 2 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot; the gate clears when the next run "
        "finds it healthy",
        "GPU 5 (00000000:90:00.0): PCIe link narrower than its maximum width (x8, max x16) - reseat the GPU or check "
        "its riser and slot, then reboot; the gate clears when the next run finds it healthy"]
    assert health["warnings"][0].startswith("GPU 1 (00000000:0F:00.0): an application's Xid since boot (Xid 13")
    assert _digest(path) == before, "check mode reads only"
    loose = run_here(MODULE, {"health_policy": {"row_remap_pending": "warn", "pcie_width_degraded": "ignore"}},
                     env=env)["health"]
    assert loose["verdict"] == "warn" and len(loose["warnings"]) == 2
    assert [f["action"] for f in loose["findings"]] == ["warn", "warn", "ignore"]


def test_a_bad_health_policy_is_refused(tmp_path):
    result = run_here(MODULE, {"health_policy": {"nvlink_dwn": "warn"}}, env=_sim_env(tmp_path))
    assert result["failed"] is True
    assert "unknown health finding kind 'nvlink_dwn'" in result["msg"] and "nvlink_down" in result["msg"]
    result = run_here(MODULE, {"health_policy": {"nvlink_down": "maybe"}}, env=_sim_env(tmp_path))
    assert result["failed"] is True and "'maybe' is not one of block, warn, ignore" in result["msg"]


def test_a_lost_gpu_fails_the_read_naming_it(tmp_path):
    env = _sim_env(tmp_path, "hgx-h200")
    run_here(SIM, {"action": "inject_health", "index": 3, "fault": "lost"}, env=env)
    result = run_here(MODULE, env=env)
    assert result["failed"] is True and "GPU_IS_LOST" in result["msg"]
    assert "GPU 3 (00000000:4E:00.0): NVML reports the GPU lost" in result["msg"]
    assert result["health"]["findings"][0]["kind"] == "gpu_lost"


def test_health_can_be_left_out(tmp_path):
    result = run_here(MODULE, {"health": False}, env=_sim_env(tmp_path))
    assert "health" not in result and len(result["gpus"]) == 8


def test_a_node_whose_only_gpu_is_missing_from_nvml_answers_with_the_finding(tmp_path):
    """The host's PCI bus (GPUOPS_SIMULATED_ROOT) shows the one H200, NVML lists none: gpus=all answers with no GPU and
    the blocking finding gpu_missing naming its bus id (the gate's read after a change uses this); a selector that
    names a GPU still matches nothing and fails; without the health read there is nothing to say why, and it fails."""
    env = _sim_env(tmp_path, "h200-x1")
    env["GPUOPS_SIMULATED_ROOT"] = str(tmp_path / "root")
    SimulatedBackend(env["GPUOPS_SIMULATED_GPUS"], shape="h200-x1", root=env["GPUOPS_SIMULATED_ROOT"]).inject_health(
        0, "missing")
    result = run_here(MODULE, env=env)
    assert not result.get("failed"), result
    assert result["gpus"] == [] and result["health"]["verdict"] == "block"
    assert result["health"]["pci"] == {"readable": True, "reason": None, "gpus": ["0000:07:00.0"]}
    (finding,) = result["health"]["gate"]["blocking"]
    assert finding["kind"] == "gpu_missing" and finding["bus_id"] == "0000:07:00.0"
    for args in ({"gpus": ["0"]}, {"health": False}):
        result = run_here(MODULE, args, env=env)
        assert result["failed"] is True and "matches no GPU" in result["msg"], (args, result)


DCGMI = os.path.join(ROOT, "tests", "support", "bin", "dcgmi")
DCGM_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "dcgm")


def test_dcgm_diag_is_off_by_default_a_note_without_dcgmi_and_judged_when_it_runs(tmp_path):
    """Off by default (no dcgmi run, health.dcgm null). On: where dcgmi is not installed a note, no finding; with the
    lab's stand-in dcgmi replaying a failed run (GPU 1's pending row remap, DCGM error 85), the finding blocks on GPU 1;
    the stand-in's own run passes every GPU."""
    env = _sim_env(tmp_path, "h200-x2")
    result = run_here(MODULE, env=env)
    assert result["health"]["dcgm"] is None and result["health"]["verdict"] == "pass"
    result = run_here(MODULE, {"health_dcgm_diag": True, "health_dcgmi": "gpuops-no-such-dcgmi"}, env=env)
    assert not result.get("failed") and result["health"]["verdict"] == "pass", result
    assert result["health"]["dcgm"]["ran"] is False and "not installed" in result["health"]["dcgm"]["note"]
    result = run_here(MODULE, {"health_dcgm_diag": True, "health_dcgmi": DCGMI}, env=env)
    assert result["health"]["dcgm"]["ran"] is True and result["health"]["verdict"] == "pass", result["health"]
    with open(os.path.join(DCGM_FIXTURES, "diag-r1-pending-row-remap.json")) as src, \
            open(env["GPUOPS_SIMULATED_GPUS"] + ".dcgmi.json", "w") as dst:
        dst.write(src.read())
    result = run_here(MODULE, {"health_dcgm_diag": True, "health_dcgmi": DCGMI}, env=env)
    (finding,) = result["health"]["gate"]["blocking"]
    assert finding["kind"] == "dcgm_diag_failure" and finding["gpu"] == 1, finding
    assert "DCGM error 85, severity RESET" in finding["message"]


def test_reports_each_gpus_fabric_and_a_tray_in_another_clique(tmp_path):
    """Two trays of one simulated GB200 rack (GPUOPS_SIMULATED_RACK): gpu_info gives every GPU the rack's cluster UUID
    and clique id, completed with SUCCESS and the health mask decoded; a tray moved to another clique reads so."""
    env = dict(_sim_env(tmp_path, "gb200-nvl", "a.json"), GPUOPS_SIMULATED_RACK="rack-a")
    other = dict(_sim_env(tmp_path, "gb200-nvl", "b.json"), GPUOPS_SIMULATED_RACK="rack-a")
    moved = SimulatedBackend(other["GPUOPS_SIMULATED_GPUS"], shape="gb200-nvl", rack="rack-a")
    for index in range(4):
        moved.inject_health(index, "fabric_clique_id", 7)
    first = run_here(MODULE, {"health": False}, env=env)
    second = run_here(MODULE, {"health": False}, env=other)
    fabrics = [g["fabric"] for g in first["gpus"]]
    assert len(fabrics) == 4 and len(set(json.dumps(f, sort_keys=True) for f in fabrics)) == 1
    fabric = fabrics[0]
    assert (fabric["state"], fabric["status"], fabric["clique_id"], fabric["health_mask"]) == (
        "completed", "SUCCESS", 32766, "0x000000aa")
    assert fabric["health"]["degraded_bandwidth"] is False
    assert [g["fabric"]["cluster_uuid"] for g in second["gpus"]] == [fabric["cluster_uuid"]] * 4
    assert [g["fabric"]["clique_id"] for g in second["gpus"]] == [7] * 4
    assert first["ansible_facts"]["nvidia_gpus"]["gpus"][0]["fabric"] == fabric
