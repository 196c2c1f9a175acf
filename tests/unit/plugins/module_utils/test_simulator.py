"""Each rule of the simulator, asserted as NVML would show it (through the facts the backend reads)."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    NVML_ERROR_CODES,
    GpuBackendError,
    NvmlError,
    NvmlInsufficientResources,
    NvmlInUse,
    NvmlInvalidArgument,
    NvmlNotSupported,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import ROOT
from tests.support.stop_points import wait_child_stopped


def _enable(sim, index):
    sim.set_mig_mode(index, True)
    if sim.read_gpu(index)["mig_mode_current"] != "Enabled":
        sim.reset_gpu(index)
    assert sim.read_gpu(index)["mig_mode_current"] == "Enabled"


def _layout(gpu):
    return sorted((gi["profile"], gi["placement"]["start"]) for gi in gpu["gpu_instances"])


# ---------------------------------------------------------------- shapes and state file
@pytest.mark.parametrize("shape,count,name", [
    ("dgx-a100-40gb", 8, "NVIDIA A100-SXM4-40GB"), ("dgx-a100-80gb", 8, "NVIDIA A100-SXM4-80GB"),
    ("hgx-h100-80gb", 8, "NVIDIA H100 80GB HBM3"), ("hgx-h200", 8, "NVIDIA H200"),
    ("a30-x4", 4, "NVIDIA A30"), ("l40s-x2", 2, "NVIDIA L40S"),
    ("h200-x1", 1, "NVIDIA H200"), ("h200-x2", 2, "NVIDIA H200"), ("h200-x4", 4, "NVIDIA H200"),
])
def test_shapes_create_the_named_machine(make_sim, shape, count, name):
    facts = make_sim(shape).read_all()
    assert facts["backend"] == "simulated"
    assert [g["name"] for g in facts["gpus"]] == [name] * count
    assert [g["index"] for g in facts["gpus"]] == list(range(count))
    assert len(set(g["uuid"] for g in facts["gpus"])) == count


def test_mixed_node_has_mig_and_non_mig_gpus(make_sim):
    gpus = make_sim("mixed").read_all()["gpus"]
    assert {g["architecture"] for g in gpus} == {"ampere", "hopper", "ada"}
    assert [g["mig_supported"] for g in gpus].count(False) == 1


def test_state_survives_a_new_backend_instance(tmp_path):
    path = str(tmp_path / "s.json")
    SimulatedBackend(path, shape="hgx-h200").set_compute_mode(3, "Prohibited")
    again = SimulatedBackend(path)  # a later module run: no shape needed once the file exists
    assert again.read_gpu(3)["compute_mode"] == "Prohibited"


def test_unknown_shape_is_a_clear_error(tmp_path):
    with pytest.raises(GpuBackendError, match="unknown simulated machine shape 'dgx-b300'.*valid shapes: .*hgx-h200"):
        SimulatedBackend(str(tmp_path / "s.json"), shape="dgx-b300")
    assert not os.path.exists(str(tmp_path / "s.json"))


def test_missing_state_without_shape_says_what_to_set(tmp_path):
    with pytest.raises(GpuBackendError, match="GPUOPS_SIMULATED_MACHINE is not set"):
        SimulatedBackend(str(tmp_path / "none.json"))


def test_corrupt_state_file_is_a_clear_error_and_is_left_alone(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"format": 1, "gpus": [')
    with pytest.raises(GpuBackendError, match="not valid JSON.*delete it to recreate"):
        SimulatedBackend(str(path), shape="hgx-h200").read_all()
    assert path.read_text() == '{"format": 1, "gpus": ['


def test_state_of_the_wrong_form_is_refused(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"format": 1, "gpus": [{"index": 0, "model": "Z9000"}],
                                "processes": [], "faults": [], "call_log": []}))
    with pytest.raises(GpuBackendError, match="unknown model 'Z9000'"):
        SimulatedBackend(str(path)).read_all()


def test_state_path_that_is_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(GpuBackendError, match="cannot read simulated GPU state file"):
        SimulatedBackend(str(tmp_path), shape="a30-x4").read_all()


def test_env_selects_the_simulator(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(tmp_path / "env.json"))
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "l40s-x2")
    backend = get_backend()
    assert backend.kind == "simulated" and len(backend.read_all()["gpus"]) == 2


def _add_processes(path, start):
    sim = SimulatedBackend(path)
    for i in range(start, start + 25):
        sim.add_process(0, i, "worker")


def test_concurrent_writers_do_not_lose_updates(tmp_path):
    path = str(tmp_path / "s.json")
    SimulatedBackend(path, shape="l40s-x2")
    procs = [multiprocessing.Process(target=_add_processes, args=(path, n * 100)) for n in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert len(SimulatedBackend(path).read_gpu(0)["processes"]) == 50


# ---------------------------------------------------------------- MIG mode per generation
def test_ampere_mode_change_stays_pending_until_reset(make_sim):
    sim = make_sim("dgx-a100-40gb")
    assert sim.set_mig_mode(2, True) == 0
    gpu = sim.read_gpu(2)
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == ("Disabled", "Enabled")
    sim.reset_gpu(2)
    gpu = sim.read_gpu(2)
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == ("Enabled", "Enabled")
    assert sim.read_gpu(3)["mig_mode_current"] == "Disabled", "a reset touches only its GPU"


def test_ampere_reset_fails_while_a_process_holds_the_gpu(make_sim):
    sim = make_sim("dgx-a100-80gb")
    sim.add_process(1, 4242, "dcgm")
    assert sim.set_mig_mode(1, True) == NVML_ERROR_CODES["IN_USE"]
    with pytest.raises(NvmlInUse, match="dcgm"):
        sim.reset_gpu(1)
    assert sim.read_gpu(1)["mig_mode_current"] == "Disabled"
    assert sim.read_gpu(1)["mig_mode_pending"] == "Enabled"


POD_UID = "5c1f8a2e-3b4d-4e6f-9a0b-1c2d3e4f5a6b"
CGROUP = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope\n"
          % (POD_UID.replace("-", "_"), "ab" * 32))


def test_a_refused_reset_says_what_nvml_says_and_the_collection_names_the_holders(make_sim):
    # NVML's own error names nobody; GpuBackend.reset_gpu adds who holds the device files, in the same words as on
    # real GPUs (_device_holders.describe over the records the real backend reads in /proc)
    sim = make_sim("dgx-a100-40gb")
    sim.hold("pod nvidia-device-plugin/nvdp-x", pid=4321, command="nvidia-device-plugin", cgroup=CGROUP)
    sim.add_process(1, 4242, "dcgm")
    with pytest.raises(NvmlInUse) as raw:
        sim._reset_gpu(0)
    assert str(raw.value) == "GPU 0: In use by another client"
    with pytest.raises(NvmlInUse) as named:
        sim.reset_gpu(0)
    assert str(named.value) == (
        "GPU 0: In use by another client; GPU 0: 1 process(es) hold the device files open: PID 4321 "
        "nvidia-device-plugin (pod UID %s, container %s) holds /dev/nvidia0, /dev/nvidia1, /dev/nvidia2, "
        "/dev/nvidia3, /dev/nvidia4, /dev/nvidia5, /dev/nvidia6, /dev/nvidia7, /dev/nvidiactl" % (POD_UID, "ab" * 6))
    gpu1 = sim.device_holders(1)["holders"]
    assert [(h["pid"], h["command"], h["paths"]) for h in gpu1] == [
        (4242, "dcgm", ["/dev/nvidia-uvm", "/dev/nvidia1", "/dev/nvidiactl"]),
        (4321, "nvidia-device-plugin", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3",
                                        "/dev/nvidia4", "/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7",
                                        "/dev/nvidiactl"])]
    assert sim.device_holders(2)["holders"][0]["pid"] == 4321        # the pod holds every GPU, dcgm only GPU 1


def test_a_holder_without_a_process_makes_the_reset_fail_until_released_or_rebooted(make_sim):
    # a device plugin pod keeps /dev/nvidia* open: no process in NVML, yet the reset fails "in use"
    sim = make_sim("dgx-a100-40gb")
    sim.hold("pod nvidia-device-plugin/nvdp-x")
    assert sim.read_gpu(0)["processes"] == []
    sim.set_mig_mode(0, True)
    with pytest.raises(NvmlInUse, match="In use by another client.*pod nvidia-device-plugin/nvdp-x"):
        sim.reset_gpu(0)
    assert sim.read_gpu(0)["mig_mode_current"] == "Disabled"
    sim.release("pod nvidia-device-plugin/nvdp-x")
    sim.reset_gpu(0)
    assert sim.read_gpu(0)["mig_mode_current"] == "Enabled"
    sim.hold("dcgm-exporter", [3])
    with pytest.raises(NvmlInUse):
        sim.reset_gpu(3)
    sim.reset_gpu(2)                                    # held GPUs only
    sim.reboot()
    assert sim.raw_state()["holders"] == []             # a reboot ends every holder


def test_ampere_mode_survives_reboot_and_pending_is_applied(make_sim):
    sim = make_sim("dgx-a100-40gb")
    _enable(sim, 0)
    sim.set_mig_mode(1, True)            # pending only
    sim.reboot()
    assert sim.read_gpu(0)["mig_mode_current"] == "Enabled"
    assert sim.read_gpu(1)["mig_mode_current"] == "Enabled"


def test_hopper_applies_at_once_when_idle_and_loses_mode_on_reboot(make_sim):
    sim = make_sim("hgx-h200")
    assert sim.set_mig_mode(0, True) == 0
    assert sim.read_gpu(0)["mig_mode_current"] == "Enabled"
    sim.reboot()
    gpu = sim.read_gpu(0)
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == ("Disabled", "Disabled")


def test_hopper_busy_gpu_stays_pending_with_in_use_status(make_sim):
    sim = make_sim("hgx-h100-80gb")
    sim.add_process(0, 77, "python")
    assert sim.set_mig_mode(0, True) == NVML_ERROR_CODES["IN_USE"]
    gpu = sim.read_gpu(0)
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == ("Disabled", "Enabled")


def test_passthrough_reports_reset_required_and_cannot_reset(make_sim):
    sim = make_sim("dgx-a100-40gb")
    sim.set_reset_supported(0, False)
    assert sim.set_mig_mode(0, True) == NVML_ERROR_CODES["RESET_REQUIRED"]
    with pytest.raises(NvmlNotSupported, match="reboot"):
        sim.reset_gpu(0)
    assert sim.read_gpu(0)["reset_supported"] is False


def test_disabling_mig_with_instances_is_refused(make_sim):
    sim = make_sim("hgx-h200")
    _enable(sim, 0)
    sim.create_gpu_instance(0, 19, 0)
    with pytest.raises(NvmlInUse):
        sim.set_mig_mode(0, False)
    assert sim.read_gpu(0)["mig_mode_current"] == "Enabled"


def test_non_mig_gpu_answers_not_supported_everywhere(make_sim):
    sim = make_sim("l40s-x2")
    gpu = sim.read_gpu(0)
    assert gpu["mig_supported"] is False and gpu["mig_mode_current"] is None and gpu["gi_profiles"] == []
    for call in (lambda: sim.set_mig_mode(0, True), lambda: sim.create_gpu_instance(0, 19, 0),
                 lambda: sim.destroy_gpu_instance(0, 1), lambda: sim.create_compute_instance(0, 1, 0)):
        with pytest.raises(NvmlNotSupported):
            call()


# ---------------------------------------------------------------- instances and placements
def test_instances_need_mig_enabled(make_sim):
    sim = make_sim("hgx-h200")
    with pytest.raises(NvmlNotSupported, match="MIG mode is not enabled"):
        sim.create_gpu_instance(0, 9, 0)


def test_create_with_placement_and_read_back(make_sim):
    sim = make_sim("hgx-h200")
    _enable(sim, 0)
    gi3 = sim.create_gpu_instance(0, 9, 4)        # 3g.71gb at 4
    gi4 = sim.create_gpu_instance(0, 5, 0)        # 4g.71gb at 0
    sim.create_compute_instance(0, gi3, 2)         # full 3g CI
    sim.create_compute_instance(0, gi4, 0)         # 1c.4g.71gb
    sim.create_compute_instance(0, gi4, 0)
    gpu = sim.read_gpu(0)
    assert _layout(gpu) == [("3g.71gb", 4), ("4g.71gb", 0)]
    assert sorted(d["profile"] for d in gpu["mig_devices"]) == ["1c.4g.71gb", "1c.4g.71gb", "3g.71gb"]
    assert all(d["uuid"].startswith("MIG-") for d in gpu["mig_devices"])
    assert len({d["uuid"] for d in gpu["mig_devices"]}) == 3


def test_occupied_slices_fail_insufficient_resources(make_sim):
    sim = make_sim("dgx-a100-40gb")
    _enable(sim, 0)
    sim.create_gpu_instance(0, 9, 0)               # 3g at 0 takes memory slices 0-3
    with pytest.raises(NvmlInsufficientResources):
        sim.create_gpu_instance(0, 5, 0)           # 4g needs 0-3 as well
    with pytest.raises(NvmlInsufficientResources):
        sim.create_gpu_instance(0, 14, 2)          # 2g at 2 overlaps
    assert _layout(sim.read_gpu(0)) == [("3g.20gb", 0)]


def test_two_4g_instances_cannot_exist(make_sim):
    sim = make_sim("hgx-h100-80gb")
    _enable(sim, 0)
    sim.create_gpu_instance(0, 5, 0)
    with pytest.raises((NvmlInsufficientResources, NvmlInvalidArgument)):
        sim.create_gpu_instance(0, 5, 4)


def test_invalid_placement_fails_invalid_argument(make_sim):
    sim = make_sim("hgx-h200")
    _enable(sim, 0)
    with pytest.raises(NvmlInvalidArgument, match="possible starts: \\[0, 2, 4\\]"):
        sim.create_gpu_instance(0, 14, 6)          # 2g cannot start at 6
    with pytest.raises(NvmlInvalidArgument):
        sim.create_gpu_instance(0, 9, 2)           # 3g only at 0 or 4
    with pytest.raises(NvmlInvalidArgument, match="does not exist"):
        sim.create_gpu_instance(0, 77, 0)


def test_max_instances_is_enforced(make_sim):
    sim = make_sim("hgx-h200")
    _enable(sim, 0)
    sim.create_gpu_instance(0, 20, 0)              # 1g.18gb+me: at most one
    with pytest.raises(NvmlInsufficientResources, match="at most 1"):
        sim.create_gpu_instance(0, 20, 1)


def test_seven_1g_fill_the_gpu(make_sim):
    sim = make_sim("dgx-a100-80gb")
    _enable(sim, 0)
    for start in range(7):
        gi = sim.create_gpu_instance(0, 19, start)
        sim.create_compute_instance(0, gi, 0)
    assert len(sim.read_gpu(0)["mig_devices"]) == 7
    with pytest.raises((NvmlInsufficientResources, NvmlInvalidArgument)):
        sim.create_gpu_instance(0, 15, 6)


def test_destroying_a_gi_with_compute_instances_or_processes_fails_in_use(make_sim):
    sim = make_sim("hgx-h200")
    _enable(sim, 0)
    gi = sim.create_gpu_instance(0, 14, 0)
    ci = sim.create_compute_instance(0, gi, 1)
    with pytest.raises(NvmlInUse, match="compute instance"):
        sim.destroy_gpu_instance(0, gi)
    sim.add_process(0, 999, "trainer", used_memory_mib=2048, gi_id=gi, ci_id=ci)
    with pytest.raises(NvmlInUse):
        sim.destroy_compute_instance(0, gi, ci)
    gpu = sim.read_gpu(0)
    assert gpu["mig_devices"][0]["processes"][0]["name"] == "trainer"
    assert gpu["processes"][0]["gi_id"] == gi
    sim.remove_process(999)
    sim.destroy_compute_instance(0, gi, ci)
    sim.destroy_gpu_instance(0, gi)
    assert sim.read_gpu(0)["gpu_instances"] == []


def test_compute_instance_profiles_are_limited_by_the_gi(make_sim):
    sim = make_sim("dgx-a100-40gb")
    _enable(sim, 0)
    gi = sim.create_gpu_instance(0, 9, 0)          # 3g.20gb
    for _slot in range(3):
        sim.create_compute_instance(0, gi, 0)      # 1c.3g.20gb x3
    with pytest.raises(NvmlInsufficientResources):
        sim.create_compute_instance(0, gi, 0)
    with pytest.raises(NvmlNotSupported):
        sim.create_compute_instance(0, gi, 4)      # no 7-slice CI inside a 3g GI


def test_instances_never_survive_reset_or_reboot(make_sim):
    sim = make_sim("dgx-a100-40gb")
    for i in (0, 1):
        _enable(sim, i)
        gi = sim.create_gpu_instance(i, 0, 0)
        sim.create_compute_instance(i, gi, 4)
    sim.reset_gpu(0)
    assert sim.read_gpu(0)["gpu_instances"] == []
    assert sim.read_gpu(1)["gpu_instances"] != []
    sim.reboot()
    assert sim.read_gpu(1)["gpu_instances"] == []
    assert sim.read_gpu(1)["mig_mode_current"] == "Enabled"


def test_process_on_a_mig_gpu_must_name_its_mig_device(make_sim):
    sim = make_sim("hgx-h200")
    _enable(sim, 0)
    with pytest.raises(GpuBackendError, match="gi_id and ci_id"):
        sim.add_process(0, 5, "x")


# ---------------------------------------------------------------- compute and persistence mode
def test_compute_mode_rules(make_sim):
    sim = make_sim("mixed")
    sim.set_compute_mode(4, "Exclusive_Process")   # L40S, no MIG
    assert sim.read_gpu(4)["compute_mode"] == "Exclusive_Process"
    _enable(sim, 2)
    with pytest.raises(NvmlNotSupported, match="EXCLUSIVE_PROCESS is not supported on a MIG-enabled device"):
        sim.set_compute_mode(2, "Exclusive_Process")
    sim.set_compute_mode(2, "Prohibited")
    with pytest.raises(NvmlInvalidArgument, match="unknown compute mode 'Exclusive_Thread'"):
        sim.set_compute_mode(0, "Exclusive_Thread")
    sim.reboot()
    assert [g["compute_mode"] for g in sim.read_all()["gpus"]] == ["Default"] * 5


def test_persistence_mode_is_lost_on_reboot(make_sim):
    sim = make_sim("a30-x4")
    assert sim.read_gpu(0)["persistence_mode"] is True
    sim.reboot()
    assert sim.read_gpu(0)["persistence_mode"] is False
    sim.set_persistence_mode(0, True)
    assert sim.read_gpu(0)["persistence_mode"] is True


# ---------------------------------------------------------------- fault injection and the call log
def test_fault_fires_on_the_nth_mutating_call_and_changes_nothing(make_sim):
    sim = make_sim("hgx-h200")
    sim.inject_fault(2, "INSUFFICIENT_RESOURCES")
    sim.set_mig_mode(0, True)                      # call 1: fine
    before = sim.read_gpu(0)
    with pytest.raises(NvmlInsufficientResources, match="injected"):
        sim.create_gpu_instance(0, 9, 0)           # call 2: fails
    assert sim.read_gpu(0) == before
    sim.create_gpu_instance(0, 9, 0)               # the fault is spent
    log = sim.raw_state()["call_log"]
    assert [e["call"] for e in log] == ["set_mig_mode", "create_gpu_instance", "create_gpu_instance"]
    assert log[1]["injected"] is True and log[1]["error"] == "INSUFFICIENT_RESOURCES"


def test_fault_can_target_one_call_name(make_sim):
    sim = make_sim("hgx-h200")
    sim.inject_fault(1, "IN_USE", call="destroy_gpu_instance")
    _enable(sim, 0)
    gi = sim.create_gpu_instance(0, 19, 0)
    with pytest.raises(NvmlInUse):
        sim.destroy_gpu_instance(0, gi)
    sim.destroy_gpu_instance(0, gi)


def test_real_failures_are_logged_too(make_sim):
    sim = make_sim("hgx-h200")
    with pytest.raises(NvmlNotSupported):
        sim.create_gpu_instance(0, 9, 0)
    entry = sim.raw_state()["call_log"][-1]
    assert entry["error"] == "NOT_SUPPORTED" and "injected" not in entry


@pytest.mark.parametrize("args,fragment", [
    ((1, "NOPE"), "unknown NVML error 'NOPE'"),
    ((1, "IN_USE", "frobnicate"), "unknown mutating call 'frobnicate'"),
    ((0, "IN_USE"), "after_calls must be 1 or more"),
])
def test_bad_fault_requests_are_refused(make_sim, args, fragment):
    with pytest.raises(GpuBackendError, match=fragment):
        make_sim("hgx-h200").inject_fault(*args)


def test_errors_carry_nvml_codes():
    assert NvmlError.for_name("IN_USE").code == 19
    assert isinstance(NvmlError.for_code(23), NvmlInsufficientResources)
    assert NvmlError.for_code(4242).name == "UNKNOWN"


# ---------------------------------------------------------------- the stop hook (kills at a chosen call)
_CALLER = ("import sys\n"
           "from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend\n"
           "sim = SimulatedBackend(sys.argv[1])\n"
           "for n in range(5):\n"
           "    try:\n"
           "        sim.set_persistence_mode(0, n % 2 == 0) if n != 1 else sim.create_gpu_instance(0, 9, 0)\n"
           "    except Exception:\n"
           "        pass\n")


def _caller(path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections"))
    return subprocess.Popen([sys.executable, "-c", _CALLER, path], env=env)


@pytest.mark.parametrize("calls", [1, 2, 3, 5])
def test_stop_after_stops_the_caller_once_its_nth_call_is_saved(make_sim, calls):
    sim = make_sim("hgx-h200")
    sim.stop_after(calls)
    proc = _caller(sim.path)
    try:
        assert wait_child_stopped(proc), "the caller ran to its end without stopping"
        log = sim.raw_state()["call_log"]           # the lock is free while it is stopped
        assert len(log) == calls and all(e["pid"] == proc.pid for e in log)
        assert "stop_after" not in sim.raw_state()
        if calls >= 2:
            assert log[1]["error"] == "NOT_SUPPORTED"   # a failed call counts and stops too
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(sim.raw_state()["call_log"]) == 5     # resumed: the other calls went on, no second stop


def test_without_stop_after_nothing_stops(make_sim):
    sim = make_sim("hgx-h200")
    proc = _caller(sim.path)
    assert not wait_child_stopped(proc) and proc.returncode == 0
    assert len(sim.raw_state()["call_log"]) == 5


@pytest.mark.parametrize("calls", [0, -1, 1.5, "3", True, None])
def test_bad_stop_after_is_refused_and_changes_nothing(make_sim, calls):
    sim = make_sim("hgx-h200")
    with open(sim.path, "rb") as handle:
        before = handle.read()
    with pytest.raises(GpuBackendError, match="stop_after needs a whole number of calls, 1 or more; got"):
        sim.stop_after(calls)
    with open(sim.path, "rb") as handle:
        assert handle.read() == before
