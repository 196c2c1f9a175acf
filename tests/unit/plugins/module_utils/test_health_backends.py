"""The health read in both backends: the NVML backend over a pynvml stand-in (the real H200/H100 readings' values,
pynvml's own structs and constants), the simulator with every fault injected and read back, and both agreeing."""
import json
import os

import pynvml
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health as health
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError, NvmlNotSupported
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import NOT_SUPPORTED
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from test_nvml_backend import FIXTURE, FakeNvml
from test_pci import _function as pci_function

XID_LINE = "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus."
# (no sys/ tree here: the tests that are not about the PCI bus do not read this machine's sysfs)
NO_SYSFS = os.path.dirname(os.path.abspath(__file__))
READ_CALLS = ("Get", "Init", "Shutdown")


@pytest.fixture
def reading():
    with open(FIXTURE) as handle:
        return json.load(handle)


class HealthNvml(FakeNvml):
    """The H200 of the real reading, answering the health calls as the real H100/H200 VMs did (reference/driver.md
    "Health fields"): ECC on with zero counts, remapped rows (0, 0, 0, 0), PCIe Gen5 x16 of Gen5 x16, clock event
    reasons 1 (GPU idle), 29 C; NVLink, page retirement and fabric answer NOT_SUPPORTED (the stand-in's default)."""

    lost = False
    links = 0
    remap = (0, 0, 0, 0)
    current_width = 16
    fabric = None           # (state, status, healthMask) or None for NOT_SUPPORTED
    down = ()

    def _alive(self):
        if self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._alive()
        return "h%d" % index

    def nvmlDeviceGetEccMode(self, h):
        return [pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED]

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        assert error_type in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        assert counter_type in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)
        return 0

    def nvmlDeviceGetRemappedRows(self, h):
        return self.remap

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self.current_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return pynvml.nvmlClocksEventReasonGpuIdle

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 29

    def nvmlDeviceGetNvLinkState(self, h, link):
        if not self.links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= self.links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 0 if link in self.down else 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        return 3 if (link, counter) == (1, pynvml.NVML_NVLINK_ERROR_DL_REPLAY) else 0

    def nvmlDeviceGetGpuFabricInfoV(self, h, ref):
        if self.fabric is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = ref._obj
        assert info.version == pynvml.nvmlGpuFabricInfo_v2
        info.state, info.status, info.healthMask = self.fabric  # pylint: disable=unpacking-non-sequence
        return pynvml.NVML_SUCCESS


def _backend(reading, sys_root=NO_SYSFS, **attrs):
    fake = HealthNvml(reading)
    for key, value in attrs.items():
        setattr(fake, key, value)
    return NvmlBackend(nvml=fake, run_command=lambda argv: (0, "Linux version\n%s\n" % XID_LINE, ""),
                       sys_root=sys_root), fake


def test_nvml_reads_the_h200_like_the_simulator_models_it(reading, tmp_path):
    backend, fake = _backend(reading)
    real = backend.read_health()
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="h200-x1").read_health()
    r, s = real["gpus"][0], sim["gpus"][0]
    assert r["pci_bus_id"] == "00000000:00:06.0" and r["architecture"] == "hopper" and r["lost"] is False
    assert r["ecc"] == {"mode_current": "Enabled", "mode_pending": "Enabled",
                        "volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {"corrected": 0, "uncorrected": 0}}
    assert r["remapped_rows"] == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}
    assert r["pcie"] == {"generation": {"current": 5, "max": 5, "gpu_max": 5}, "width": {"current": 16, "max": 16}}
    assert r["clock_events"] == {"mask": "0x0000000000000001", "reasons": ["gpu_idle"]}
    assert (r["retired_pages"], r["nvlink"], r["fabric"], r["temperature_c"]) == (
        NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, 29)
    for key in set(r) - {"uuid", "pci_bus_id"}:
        assert r[key] == s[key], key
    assert set(r) == set(s)
    assert real["kernel_log"] == {"readable": True, "source": "journalctl", "lines": [XID_LINE]}
    assert not [c for c in fake.calls if not c.startswith(("nvmlDeviceGet", "nvmlSystemGet"))], "reads only"


def test_nvml_reads_nvlinks_their_counters_and_the_fabric(reading):
    mask = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW
    backend, dummy = _backend(reading, links=18, down=(4,), fabric=(pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, 0, mask))
    gpu = backend.read_health()["gpus"][0]
    assert len(gpu["nvlink"]) == 18 and [link["link"] for link in gpu["nvlink"] if not link["active"]] == [4]
    assert gpu["nvlink"][1]["errors"] == {"replay": 3, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    assert gpu["fabric"] == {"state": "in_progress", "status": "SUCCESS", "degraded_bandwidth": True}
    kinds = [f["kind"] for f in health.findings({"gpus": [gpu], "kernel_log": {"readable": True, "lines": []}})]
    assert kinds == ["nvlink_down", "nvlink_errors", "fabric_incomplete", "fabric_degraded"]


def test_nvml_a_lost_gpu_is_a_finding_not_a_crash(reading):
    backend, dummy = _backend(reading, lost=True)
    result = backend.read_health()
    assert result["gpus"] == [{"index": 0, "lost": True, "error": str(pynvml.NVMLError(15))}]
    found = health.verdict(health.findings(result))
    assert found["verdict"] == "block" and found["findings"][0]["kind"] == "gpu_lost"


def test_nvml_read_all_leaves_a_lost_gpu_out_only_when_asked(reading):
    backend, dummy = _backend(reading, lost=True)
    with pytest.raises(NvmlError) as raised:
        backend.read_all()
    assert raised.value.name == "GPU_IS_LOST"
    facts = backend.read_all(skip_lost=True)
    assert facts["gpus"] == [] and [g["index"] for g in facts["lost_gpus"]] == [0] and facts["driver_version"]


def test_nvml_other_errors_are_errors(reading):
    class Denied(HealthNvml):
        def nvmlDeviceGetRemappedRows(self, h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(NvmlError, match="Insufficient Permissions"):
        NvmlBackend(nvml=Denied(reading)).read_health()


def test_nvml_pending_remap_and_narrow_link(reading):
    backend, dummy = _backend(reading, remap=(0, 1, 1, 0), current_width=8)
    found = health.verdict(health.findings(backend.read_health()))
    assert [f["kind"] for f in found["findings"]] == [
        "row_remap_pending", "remapped_rows", "pcie_width_degraded", "xid_fatal"]
    assert found["blocking"][0] == ("GPU 0 (00000000:00:06.0): remapped rows pending - reset the GPU or reboot; the "
                                    "gate clears when the next run finds it healthy")


def test_nvml_compares_the_gpus_sysfs_shows_with_those_nvml_lists(reading, tmp_path):
    """The reading's H200 is 00000000:00:06.0 to NVML and 0000:00:06.0 in sysfs: not missing. A second H200 function
    NVML does not list (unbound), its audio function and an NVSwitch: the GPU alone is a gpu_missing finding. Only
    sysfs is read for it (no NVML call beyond the reads)."""
    pci_function(tmp_path, "0000:00:06.0", device=0x2335, sub=(0x10DE, 0x18BF), driver="nvidia")
    backend, fake = _backend(reading, sys_root=str(tmp_path))
    result = backend.read_health()
    assert result["pci"]["readable"] is True and [g["bus_id"] for g in result["pci"]["gpus"]] == ["0000:00:06.0"]
    assert "gpu_missing" not in [f["kind"] for f in health.findings(result)]
    pci_function(tmp_path, "0000:00:07.0", device=0x2335, sub=(0x10DE, 0x18BF))
    pci_function(tmp_path, "0000:00:07.1", device=0x22BA, pci_class=0x040300)
    pci_function(tmp_path, "0000:05:00.0", device=0x22A3, pci_class=0x068000, sub=(0x10DE, 0))
    found = health.verdict(health.findings(backend.read_health()))
    missing = [f for f in found["findings"] if f["kind"] == "gpu_missing"]
    assert [(f["gpu"], f["pci_bus_id"], f["action"]) for f in missing] == [(None, "0000:00:07.0", "block")]
    assert "GPU (PCI 0000:00:07.0): on the PCI bus but not listed by NVML (NVIDIA H200, no driver bound)" in \
        missing[0]["summary"]
    assert not [c for c in fake.calls if not c.startswith(("nvmlDeviceGet", "nvmlSystemGet"))], "reads only"


def test_nvml_an_unreadable_sysfs_is_no_finding(reading, tmp_path):
    backend, dummy = _backend(reading, sys_root=str(tmp_path / "nowhere"))
    result = backend.read_health()
    assert result["pci"]["readable"] is False and "cannot list the PCI devices" in result["pci"]["reason"]
    assert "gpu_missing" not in [f["kind"] for f in health.findings(result)]
    assert health.summary(result)["pci"]["readable"] is False


def test_nvml_without_a_runner_says_the_log_is_unreadable(reading):
    result = NvmlBackend(nvml=HealthNvml(reading)).read_health()
    assert result["kernel_log"]["readable"] is False and "no command runner" in result["kernel_log"]["reason"]


# ---------------------------------------------------------------------------------------------------- simulator
@pytest.fixture
def hgx(tmp_path):
    return SimulatedBackend(str(tmp_path / "hgx.json"), shape="hgx-h100-80gb")


def _kinds(sim, index=None):
    found = health.findings(sim.read_health())
    return [f["kind"] for f in found if index is None or f["gpu"] == index]


def test_simulated_hgx_is_healthy_with_nvlinks_and_fabric(hgx):
    result = hgx.read_health()
    gpu = result["gpus"][2]
    # (an HGX baseboard reports no fabric health field: nvidia-smi -q's Bandwidth N/A on an HGX H100 node)
    assert len(gpu["nvlink"]) == 18 and gpu["fabric"] == {"state": "completed", "status": "SUCCESS",
                                                          "degraded_bandwidth": NOT_SUPPORTED}
    assert gpu["retired_pages"] == NOT_SUPPORTED and gpu["remapped_rows"]["pending"] is False
    assert health.verdict(health.findings(result))["verdict"] == "pass"


@pytest.mark.parametrize("shape,nvlink,fabric", [
    ("dgx-a100-80gb", 12, NOT_SUPPORTED), ("hgx-b200", 18, "completed"), ("h200-x1", NOT_SUPPORTED, NOT_SUPPORTED),
    ("l40s-x2", NOT_SUPPORTED, NOT_SUPPORTED), ("a30-x4", NOT_SUPPORTED, NOT_SUPPORTED),
])
def test_simulated_not_supported_per_generation_and_shape(tmp_path, shape, nvlink, fabric):
    gpu = SimulatedBackend(str(tmp_path / "s.json"), shape=shape).read_health()["gpus"][0]
    assert (len(gpu["nvlink"]) if isinstance(gpu["nvlink"], list) else gpu["nvlink"]) == nvlink
    assert (gpu["fabric"]["state"] if isinstance(gpu["fabric"], dict) else gpu["fabric"]) == fabric
    assert gpu["retired_pages"] == NOT_SUPPORTED and isinstance(gpu["remapped_rows"], dict)


# (fault, value, link, the finding kind it gives)
FAULTS = [
    ("row_remap_pending", True, None, "row_remap_pending"), ("row_remap_failure", True, None, "row_remap_failure"),
    ("remapped_rows_uncorrected", 2, None, "remapped_rows"),
    ("ecc_volatile_uncorrected", 1, None, "ecc_uncorrected_volatile"),
    ("ecc_aggregate_uncorrected", 1, None, "ecc_uncorrected_aggregate"),
    ("ecc_volatile_corrected", 5, None, "ecc_corrected"), ("ecc_mode", False, None, "ecc_disabled"),
    ("nvlink_down", True, 7, "nvlink_down"), ("nvlink_crc_flit", 4, 3, "nvlink_errors"),
    ("pcie_generation", 3, None, "pcie_generation_degraded"), ("pcie_width", 8, None, "pcie_width_degraded"),
    ("clock_events", ["hw_power_brake_slowdown"], None, "hw_slowdown"),
    ("clock_events", ["sw_thermal_slowdown"], None, "thermal_slowdown"),
    ("fabric_state", "not_started", None, "fabric_incomplete"),
    ("fabric_status", "NOT_FOUND", None, "fabric_incomplete"), ("fabric_degraded", True, None, "fabric_degraded"),
    ("lost", True, None, "gpu_lost"),
]


@pytest.mark.parametrize("fault,value,link,kind", FAULTS, ids=["%s-%s" % (f[0], f[3]) for f in FAULTS])
def test_simulated_faults_read_back(hgx, fault, value, link, kind):
    hgx.inject_health(5, fault, value, link)
    assert _kinds(hgx) == [kind]
    assert _kinds(hgx, 5) == [kind]
    hgx.inject_health(5, "healthy")
    assert _kinds(hgx) == []


def test_simulated_xid_lines_map_to_the_gpu(hgx):
    line = hgx.add_xid(2, 79, "GPU has fallen off the bus.")
    assert line == "NVRM: Xid (PCI:0000:47:00): 79, GPU has fallen off the bus."
    hgx.add_xid(2, 13, "Graphics SM Warp Exception", pid=4242)
    found = health.verdict(health.findings(hgx.read_health()))
    assert [(f["gpu"], f["kind"]) for f in found["findings"]] == [(2, "xid_fatal"), (2, "xid_application")]
    assert found["blocking"][0].startswith("GPU 2 (00000000:47:00.0): a fatal Xid since boot (Xid 79")


def test_simulated_unreadable_kernel_log(hgx):
    hgx.set_kernel_log_readable(False)
    log = hgx.read_health()["kernel_log"]
    assert log["readable"] is False and log["reason"].startswith("kernel log not readable")


def test_a_reset_applies_a_pending_remap_and_a_reboot_clears_lost_and_the_log(hgx):
    hgx.inject_health(1, "row_remap_pending", True)
    hgx.inject_health(1, "ecc_volatile_uncorrected", 1)
    hgx.inject_health(1, "remapped_rows_uncorrected", 1)
    hgx.reset_gpu(1)
    assert _kinds(hgx, 1) == ["remapped_rows"]
    hgx.inject_health(3, "lost", True)
    hgx.inject_health(4, "pcie_width", 8)
    hgx.add_xid(3, 79, "GPU has fallen off the bus.")
    with pytest.raises(NvmlError, match="GPU is lost") as lost:
        hgx.read_all()
    assert lost.value.name == "GPU_IS_LOST"
    with pytest.raises(NvmlError) as refused:
        hgx.reset_gpu(3)
    assert refused.value.name == "GPU_IS_LOST"
    hgx.reboot()
    assert _kinds(hgx) == ["remapped_rows", "pcie_width_degraded"]      # hardware faults stay
    assert len(hgx.read_all()["gpus"]) == 8


@pytest.mark.parametrize("fault,value,link,error,words", [
    ("retired_pages_pending", True, None, NvmlNotSupported, "no page retirement"),
    ("nvlink_down", True, 18, GpuBackendError, "link number from 0 to 17"),
    ("pcie_generation", 6, None, GpuBackendError, "from 1 to 5"),
    ("clock_events", ["slow"], None, GpuBackendError, "list of reasons from"),
    ("fabric_state", "broken", None, GpuBackendError, "one of completed, in_progress, not_started"),
    ("ecc_volatile_corrected", -1, None, GpuBackendError, "whole number"),
    ("row_remap_pending", "yes", None, GpuBackendError, "true or false"),
    ("melted", True, None, GpuBackendError, "unknown health fault 'melted'; valid: clock_events"),
])
def test_simulated_bad_faults_are_refused_and_change_nothing(hgx, fault, value, link, error, words):
    before = hgx.raw_state()
    with pytest.raises(error, match=words):
        hgx.inject_health(0, fault, value, link)
    assert hgx.raw_state() == before


def test_simulated_nvlink_and_fabric_faults_need_the_hardware(tmp_path):
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="h200-x1")
    with pytest.raises(NvmlNotSupported, match="no NVLink on this machine shape"):
        sim.inject_health(0, "nvlink_down", True, 0)
    with pytest.raises(NvmlNotSupported, match="no NVSwitch fabric"):
        sim.inject_health(0, "fabric_state", "in_progress")


def test_simulated_missing_gpu_stays_on_the_bus_and_is_a_finding(tmp_path, monkeypatch):
    """With the host modelled (GPUOPS_SIMULATED_ROOT), a GPU made missing leaves NVML's list (read_all, read_health; a
    read of its index answers INVALID_ARGUMENT) while its PCI function stays in the host tree: the health read names it
    by its sysfs bus id and the driver bound to it. The plan's read names it in "missing_gpus". A reboot brings it
    back."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_backend
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="h200-x2", root=str(tmp_path / "root"))
    assert health.findings(sim.read_health()) == []
    sim.inject_health(1, "missing")
    assert [g["index"] for g in sim.read_all()["gpus"]] == [0]
    result = sim.read_health()
    assert [g["index"] for g in result["gpus"]] == [0]
    assert [g["bus_id"] for g in result["pci"]["gpus"]] == ["0000:07:00.0", "0000:0f:00.0"]
    (found,) = health.verdict(health.findings(result))["findings"]
    assert (found["kind"], found["pci_bus_id"], found["action"]) == ("gpu_missing", "0000:0f:00.0", "block")
    assert "(NVIDIA H200, driver nvidia)" in found["summary"]
    with pytest.raises(NvmlError) as refused:
        sim.read_gpu(1)
    assert refused.value.name == "INVALID_ARGUMENT"
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", sim.path)
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", str(tmp_path / "root"))
    facts, dummy = _gpu_backend.read_facts(health=True)
    assert [g["bus_id"] for g in facts["missing_gpus"]] == ["0000:0f:00.0"] and len(facts["gpus"]) == 1
    sim.reboot()
    assert len(sim.read_all()["gpus"]) == 2 and health.findings(sim.read_health()) == []


def test_simulated_missing_gpu_without_a_modelled_host_is_only_absent(hgx):
    """Without a host tree there is no bus to compare with: the GPU is only absent from NVML's list."""
    hgx.inject_health(3, "missing")
    result = hgx.read_health()
    assert result["pci"] is None and len(result["gpus"]) == 7 and health.findings(result) == []
    hgx.inject_health(3, "missing", False)
    assert len(hgx.read_all()["gpus"]) == 8
