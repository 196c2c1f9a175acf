"""gpu_info end to end through real ansible, on simulated GPUs and on this GPU-less machine."""
import hashlib
import json
import os

import pytest

from tests.support.ansible_run import run_module, run_playbook

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
    from ansible_collections.gpuops.nvidia.plugins.module_utils._simulator import SimulatedBackend
    env = _sim_env(tmp_path, "hgx-h200")
    sim = SimulatedBackend(env["GPUOPS_SIMULATED_GPUS"], shape="hgx-h200")
    sim.set_mig_mode(1, True)
    gi = sim.create_gpu_instance(1, 9, 4)
    ci = sim.create_compute_instance(1, gi, 2)
    sim.add_process(1, 4321, "vllm", used_memory_mib=30000, gi_id=gi, ci_id=ci)
    sim.add_process(0, 1234, "python", used_memory_mib=100)
    result = run_module(MODULE, {"gpus": ["0", "1"]}, env=env)[0]
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
    result = run_module(MODULE, {"gpus": selector}, env=_sim_env(tmp_path, "mixed"))[0]
    assert [g["index"] for g in result["gpus"]] == expected


def test_selector_matching_nothing_is_an_error(tmp_path):
    result = run_module(MODULE, {"gpus": ["B200"]}, env=_sim_env(tmp_path, "l40s-x2"))[0]
    assert result["failed"] is True
    assert "matches no GPU" in result["msg"] and "NVIDIA L40S" in result["msg"]


def test_selecting_by_uuid(tmp_path):
    env = _sim_env(tmp_path, "a30-x4")
    uuid = run_module(MODULE, env=env)[0]["gpus"][2]["uuid"]
    result = run_module(MODULE, {"gpus": [uuid]}, env=env)[0]
    assert [g["index"] for g in result["gpus"]] == [2]


def test_unknown_shape_fails_clearly(tmp_path):
    result = run_module(MODULE, env=_sim_env(tmp_path, "dgx-z"))[0]
    assert result["failed"] is True
    assert "unknown simulated machine shape 'dgx-z'" in result["msg"] and "hgx-h200" in result["msg"]
    assert not os.path.exists(str(tmp_path / "state.json"))


def test_corrupt_state_fails_clearly_and_is_kept(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("not json")
    result = run_module(MODULE, env=_sim_env(tmp_path))[0]
    assert result["failed"] is True and "is not valid JSON" in result["msg"]
    assert path.read_text() == "not json"


def test_no_driver_on_a_real_host(tmp_path):
    result = run_module(MODULE)[0]
    assert result["failed"] is True
    assert "no NVIDIA driver on this host" in result["msg"]


def test_pynvml_missing_on_a_real_host(tmp_path):
    # A target Python without nvidia-ml-py: the module must say which package to install.
    bare = tmp_path / "bare"
    import venv
    venv.EnvBuilder(with_pip=False).create(str(bare))
    result = run_module(MODULE, python=str(bare / "bin" / "python"))[0]
    assert result["failed"] is True
    assert "install the Python package nvidia-ml-py" in result["msg"]


def test_lab_site_playbook_shows_every_node(tmp_path):
    # site.yml now converges the nodes (tests/integration/test_site_lab.py); in check mode it still reads and shows
    # each node's GPUs and writes nothing but the simulators' state files.
    nodes = ("lab-dgx-a100", "lab-hgx-b200", "lab-hgx-h200")
    data, proc = run_playbook("site.yml", inventory="inventories/lab",
                              extra_vars={"gpuops_lab_state_dir": str(tmp_path)}, check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = data["stats"]
    assert set(stats) == set(nodes)
    assert all(s["failures"] == 0 for s in stats.values())
    shown = {}  # nodes run in rolling batches: one play per batch
    for task in [t for p in data["plays"] for t in p["tasks"] if t["task"]["name"].endswith("Show the GPUs as they are now")]:
        shown.update(task["hosts"])
    assert "GPU7 H200 143771MiB" in "\n".join(shown["lab-hgx-h200"]["msg"])
    assert "GPU0 A100-SXM4-40GB" in "\n".join(shown["lab-dgx-a100"]["msg"])
    assert "GPU7 B200 183359MiB" in "\n".join(shown["lab-hgx-b200"]["msg"])
    # the state files, their lock files (the simulator's own and the node lock beside it), nothing else
    files = sorted(os.listdir(str(tmp_path)))
    assert [f for f in files if not f.endswith(".lock")] == ["%s.json" % n for n in nodes]
    assert set("%s.json.lock" % n for n in nodes) <= set(files)
    assert all(f.startswith(tuple("%s.json" % n for n in nodes)) for f in files)


# ---------------------------------------------------------------------------------------------------- health
SIM = "gpuops.nvidia.gpu_simulator"


def test_health_of_a_healthy_hgx_passes(tmp_path):
    result = run_module(MODULE, env=_sim_env(tmp_path, "hgx-h100-80gb"))[0]
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
                 {"action": "add_xid", "index": 1, "code": 13, "message": "Graphics SM Warp Exception"}):
        assert not run_module(SIM, args, env=env)[0].get("failed")
    path = env["GPUOPS_SIMULATED_GPUS"]
    before = _digest(path)
    result = run_module(MODULE, env=env, check=True)[0]
    health = result["health"]
    assert health["verdict"] == "block" and health["healthy"] is False
    assert health["blocking"] == [
        "GPU 2 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot; the gate clears when the next run "
        "finds it healthy",
        "GPU 5 (00000000:90:00.0): PCIe link narrower than its maximum width (x8, max x16) - reseat the GPU or check "
        "its riser and slot, then reboot; the gate clears when the next run finds it healthy"]
    assert health["warnings"][0].startswith("GPU 1 (00000000:0F:00.0): an application's Xid since boot (Xid 13")
    assert _digest(path) == before, "check mode reads only"
    loose = run_module(MODULE, {"health_policy": {"row_remap_pending": "warn", "pcie_width_degraded": "ignore"}},
                       env=env)[0]["health"]
    assert loose["verdict"] == "warn" and len(loose["warnings"]) == 2
    assert [f["action"] for f in loose["findings"]] == ["warn", "warn", "ignore"]


def test_a_bad_health_policy_is_refused(tmp_path):
    result = run_module(MODULE, {"health_policy": {"nvlink_dwn": "warn"}}, env=_sim_env(tmp_path))[0]
    assert result["failed"] is True
    assert "unknown health finding kind 'nvlink_dwn'" in result["msg"] and "nvlink_down" in result["msg"]
    result = run_module(MODULE, {"health_policy": {"nvlink_down": "maybe"}}, env=_sim_env(tmp_path))[0]
    assert result["failed"] is True and "'maybe' is not one of block, warn, ignore" in result["msg"]


def test_a_lost_gpu_fails_the_read_naming_it(tmp_path):
    env = _sim_env(tmp_path, "hgx-h200")
    run_module(SIM, {"action": "inject_health", "index": 3, "fault": "lost"}, env=env)
    result = run_module(MODULE, env=env)[0]
    assert result["failed"] is True and "GPU_IS_LOST" in result["msg"]
    assert "GPU 3 (00000000:4E:00.0): NVML reports the GPU lost" in result["msg"]
    assert result["health"]["findings"][0]["kind"] == "gpu_lost"


def test_health_can_be_left_out(tmp_path):
    result = run_module(MODULE, {"health": False}, env=_sim_env(tmp_path))[0]
    assert "health" not in result and len(result["gpus"]) == 8
