"""The real backend without a GPU: its error paths, and its reading logic over a pynvml stand-in that
answers with the values of the real H200 reading (tests/fixtures/h200). The same backend ran on a real GPU:
tests/gpu/test_gpu_info_real.py."""
import json
import os
import re

import pynvml
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _nvml_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    GpuBackendError, NvmlError, NvmlInUse, NvmlNotSupported)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "h200", "nvml_reading.json")


def test_missing_pynvml_names_the_package(monkeypatch):
    monkeypatch.setattr(_nvml_backend, "pynvml", None)
    with pytest.raises(GpuBackendError, match="install the Python package nvidia-ml-py"):
        NvmlBackend()


def test_no_driver_is_a_clear_error():
    # This machine has no NVIDIA driver: the real pynvml fails to load libnvidia-ml.so.1.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a GPU host
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    with pytest.raises(GpuBackendError, match="no NVIDIA driver on this host.*GPUOPS_SIMULATED_GPUS"):
        NvmlBackend()


class FakeNvml(object):
    """Answers pynvml calls for one H200 from the real reading; everything it does not know raises
    NOT_SUPPORTED, as NVML does. Uses pynvml's own structs and error classes."""

    def __init__(self, reading):
        self.r = reading
        self.dev = reading["devices"][0]
        self.calls = []
        self.placements = {}
        for line in reading["cmds"]["nvidia-smi mig -lgipp"]["out"].splitlines():
            m = re.match(r"GPU\s+\d+\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)", line)
            self.placements[int(m.group(1))] = ([int(x) for x in m.group(2).split(",")], int(m.group(3)))

    def __getattr__(self, name):
        value = getattr(pynvml, name)
        if name.startswith("nvml") and callable(value):
            def refuse(*args):
                self.calls.append(name)
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return refuse
        return value

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlSystemGetDriverVersion(self):
        return self.r["driver"]

    def nvmlSystemGetCudaDriverVersion(self):
        return self.r["cuda_driver_version"]

    def nvmlSystemGetNVMLVersion(self):
        return self.r["nvml_version"]

    def nvmlDeviceGetHandleByIndex(self, index):
        return "h%d" % index

    def nvmlDeviceGetName(self, h):
        return self.dev["name"]

    def nvmlDeviceGetUUID(self, h):
        return self.dev["uuid"]

    def nvmlDeviceGetPciInfo(self, h):
        info = pynvml.nvmlPciInfo_t()
        info.busId = self.dev["pci"]["busId"].encode()
        info.pciDeviceId = self.dev["pci"]["pciDeviceId"]
        return info

    def nvmlDeviceGetMemoryInfo(self, h):
        info = pynvml.c_nvmlMemory_t()
        info.total = self.dev["memory"]["total"]
        return info

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self.dev["cuda_cc"])

    def nvmlDeviceGetMigMode(self, h):
        return list(self.dev["mig_mode"])

    def nvmlDeviceGetArchitecture(self, h):
        return self.dev["arch"]

    def nvmlDeviceGetComputeMode(self, h):
        return self.dev["compute_mode"]

    def nvmlDeviceGetPersistenceMode(self, h):
        return self.dev["persistence_mode"]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h, index):
        for name, answer in self.dev["gi_profiles"].items():
            if getattr(pynvml, name) != index:
                continue
            v = answer["v"]
            if "nvml_error" in v:
                raise pynvml.NVMLError(v["code"])
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            for field in ("id", "sliceCount", "instanceCount", "multiprocessorCount", "memorySizeMB"):
                setattr(info, field, v[field])
            info.name = v["name"].encode()
            return info
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h, profile_id, array, count_ref):
        starts, size = self.placements[profile_id]
        for i, s in enumerate(starts):
            array[i].start = s
            array[i].size = size
        count_ref._obj.value = len(starts)
        return 0


@pytest.fixture
def reading():
    with open(FIXTURE) as handle:
        return json.load(handle)


def test_reads_the_h200_like_the_simulator_models_it(reading, tmp_path):
    fake = FakeNvml(reading)
    real = NvmlBackend(nvml=fake).read_all()
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="h200-x1").read_all()
    assert real["driver_version"] == "580.159.04" and real["cuda_driver_version"] == "13.0"
    r, s = real["gpus"][0], sim["gpus"][0]
    for key in ("name", "pci_device_id", "memory_total_mib", "memory_total_bytes", "compute_capability",
                "architecture", "compute_mode", "persistence_mode", "mig_supported", "mig_mode_current",
                "mig_mode_pending", "gpu_instances", "mig_devices", "processes"):
        assert r[key] == s[key], key
    assert r["uuid"] == reading["devices"][0]["uuid"]
    assert r["pci_bus_id"] == "00000000:00:06.0"
    assert r["gi_profiles"] == s["gi_profiles"]
    assert set(r) == set(s), "both backends return the same fields"


def test_reads_make_no_mutating_call(reading):
    fake = FakeNvml(reading)
    NvmlBackend(nvml=fake).read_all()
    assert not [c for c in fake.calls if "Set" in c or "Create" in c or "Destroy" in c]


def test_nvml_errors_become_the_collections_error_classes(reading):
    backend = NvmlBackend(nvml=FakeNvml(reading))
    with pytest.raises(NvmlNotSupported):
        backend.set_compute_mode(0, "Prohibited")   # the stand-in refuses every setter


@pytest.mark.parametrize("call,args", [
    ("set_mig_mode", (0, True)), ("reset_gpu", (0,)), ("create_gpu_instance", (0, 9, 0)),
    ("destroy_gpu_instance", (0, 1)), ("create_compute_instance", (0, 1, 0)),
    ("destroy_compute_instance", (0, 1, 0)), ("set_compute_mode", (0, "Default")),
    ("set_persistence_mode", (0, True)),
])
def test_read_only_guard_refuses_and_logs_every_mutating_call(reading, tmp_path, monkeypatch, call, args):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("GPUOPS_NVML_READ_ONLY", "1")
    monkeypatch.setenv("GPUOPS_NVML_CALL_LOG", str(log))
    fake = FakeNvml(reading)
    backend = NvmlBackend(nvml=fake)
    with pytest.raises(GpuBackendError, match="refusing the mutating NVML call %s" % call):
        getattr(backend, call)(*args)
    assert [json.loads(line)["call"] for line in log.read_text().splitlines()] == [call]
    assert not [c for c in fake.calls if "Set" in c or "Create" in c or "Destroy" in c], "nothing reached NVML"


def test_reset_runs_nvidia_smi_through_the_runner_it_was_given(reading):
    """A GPU reset is nvidia-smi's (NVML has no public call), run by the caller's runner (mig_mode: the module's
    run_command; the boot script: its own), never by the backend itself; what nvidia-smi says picks the error."""
    bus = NvmlBackend(nvml=FakeNvml(reading)).read_gpu(0)["pci_bus_id"]
    calls = []

    def runner(answer):
        def run(argv):
            calls.append(argv)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return run

    NvmlBackend(nvml=FakeNvml(reading), run_command=runner((0, "GPU reset\n", ""))).reset_gpu(0)
    assert calls == [["nvidia-smi", "--gpu-reset", "-i", bus]]
    for answer, error, words in [
            ((255, "", "Unable to reset this GPU because it's being used by some other process (in use)"),
             NvmlInUse, "GPU 0 reset refused"),
            ((3, "The operation is not supported on GPU 0\n", ""), NvmlNotSupported, "GPU 0 reset not supported"),
            ((1, "out", "err"), NvmlError, r"GPU 0 reset failed \(rc 1\): out\nerr"),
            (FileNotFoundError(2, "No such file or directory: 'nvidia-smi'"), GpuBackendError,
             "cannot run nvidia-smi to reset GPU 0")]:
        with pytest.raises(error, match=words):
            NvmlBackend(nvml=FakeNvml(reading), run_command=runner(answer)).reset_gpu(0)
    with pytest.raises(GpuBackendError, match="no command runner"):
        NvmlBackend(nvml=FakeNvml(reading)).reset_gpu(0)


# What nvidia-smi prints when a reset is refused because a client holds the GPU (as published for an 8-GPU node; the
# line per GPU is NVML's IN_USE string): it names no process.
NVSMI_IN_USE = ("The following GPUs could not be reset:\n  GPU 00000000:00:06.0: In use by another client\n\n"
                "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                "application, graphics application such as an X server, or a monitoring application such as another "
                "instance of nvidia-smi). Please first kill all processes using this device and all compute "
                "applications running in the system.\n")


def test_a_refused_reset_on_real_gpus_names_the_processes_holding_the_device_files(reading, tmp_path, holders):
    """On a real node nvidia-smi and NVML name nobody; the collection finds the holders in /proc (here: real
    processes holding files of a temporary dev directory) and names them by PID and command."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text("")
    exporter = holders("fake-dcgm-exporter", dev / "nvidia0", dev / "nvidiactl")
    other_gpu = holders("fake-other-gpu", dev / "nvidia1")

    class MinorNvml(FakeNvml):
        def nvmlDeviceGetMinorNumber(self, handle):
            return 0

    backend = NvmlBackend(nvml=MinorNvml(reading), run_command=lambda argv: (255, NVSMI_IN_USE, ""))
    backend.dev_dir = str(dev)
    with pytest.raises(NvmlInUse) as refused:
        backend.reset_gpu(0)
    text = str(refused.value)
    assert "GPU 0 reset refused" in text and "In use by another client" in text
    assert "PID %d fake-dcgm-exporter holds %s, %s" % (exporter, dev / "nvidia0", dev / "nvidiactl") in text
    assert "PID %d " % other_gpu not in text            # it holds GPU 1 only


# A published `nvidia-smi mig -lgip` of an RTX PRO 6000 Blackwell (driver 580.105.08): NVML index, id, name,
# instances, MiB, SMs. Placements are not published; the 4-slice geometry's are used.
RTX_PRO_LISTING = [
    ("1_SLICE", 14, "1g.24gb", 4, 24192, 46), ("1_SLICE_REV1", 21, "1g.24gb+me", 1, 24192, 46),
    ("1_SLICE_GFX", 47, "1g.24gb+gfx", 4, 24192, 46), ("1_SLICE_ALL_ME", 65, "1g.24gb+me.all", 1, 24192, 46),
    ("1_SLICE_NO_ME", 67, "1g.24gb-me", 4, 24192, 46), ("2_SLICE", 5, "2g.48gb", 2, 48512, 94),
    ("2_SLICE_GFX", 35, "2g.48gb+gfx", 2, 48512, 94), ("2_SLICE_ALL_ME", 64, "2g.48gb+me.all", 1, 48512, 94),
    ("2_SLICE_NO_ME", 66, "2g.48gb-me", 2, 48512, 94), ("4_SLICE", 0, "4g.96gb", 1, 97280, 188),
    ("4_SLICE_GFX", 32, "4g.96gb+gfx", 1, 97280, 188),
]


class FakeRtxPro(FakeNvml):
    """An RTX PRO 6000 Blackwell Server Edition with MIG enabled and no instance, answering from the listing."""

    def __init__(self, reading):
        super(FakeRtxPro, self).__init__(reading)
        self.dev = dict(self.dev, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", cuda_cc=[12, 0], arch=10,
                        memory={"total": 97887 * 1024 * 1024}, mig_mode=[1, 1],
                        pci=dict(self.dev["pci"], pciDeviceId=0x2BB510DE))
        self.placements = {}
        for dummy, pid, name, dummy2, dummy3, dummy4 in RTX_PRO_LISTING:
            size = int(name[0])
            self.placements[pid] = (list(range(0, 4, size)), size)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h, index):
        for index_name, pid, name, count, mem, sms in RTX_PRO_LISTING:
            if getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_" + index_name) == index:
                info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                info.id, info.sliceCount, info.instanceCount = pid, int(name[0]), count
                info.memorySizeMB, info.multiprocessorCount = mem, sms
                info.name = ("MIG " + name).encode()
                return info
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def test_reads_the_blackwell_suffix_profiles_like_the_simulator_models_them(reading, tmp_path):
    # +gfx, -me and +me.all live at NVML indexes 0xA-0x10, which a reader stopping at 1_SLICE_REV2 never sees
    real = NvmlBackend(nvml=FakeRtxPro(reading)).read_all()["gpus"][0]
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="rtx-pro-6000-x8").read_all()["gpus"][0]
    assert [p["name"] for p in real["gi_profiles"]] == [
        "1g.24gb", "1g.24gb+me", "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb", "2g.48gb+gfx",
        "2g.48gb+me.all", "2g.48gb-me", "4g.96gb", "4g.96gb+gfx"]          # the order nvidia-smi printed
    assert real["gi_profiles"] == sim["gi_profiles"]
    assert (real["architecture"], real["pci_device_id"], real["memory_total_mib"]) == (
        sim["architecture"], sim["pci_device_id"], sim["memory_total_mib"])
