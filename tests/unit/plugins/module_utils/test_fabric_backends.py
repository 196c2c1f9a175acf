"""The GPUs' NVLink fabric facts in both backends: the NVML backend over pynvml's own v2 (and v1) structs, the simulator's
NVL trays with their rack and fabric faults, and both giving the same facts for the same NVML values."""
import json
import uuid

import pynvml
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_fabric import health_entry
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import NOT_SUPPORTED
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from test_nvml_backend import FIXTURE, FakeNvml

CLUSTER = "6a130f54-faaa-4b8f-847f-be44ab70f917"


@pytest.fixture(scope="module")
def reading():
    with open(FIXTURE) as handle:
        return json.load(handle)


class FabricNvml(FakeNvml):
    """The H200 of the real reading, answering the fabric info as a tray of a rack would: (state, status, cluster UUID
    text, clique id, health mask); ``v1``: a driver without nvmlDeviceGetGpuFabricInfoV."""

    fabric = (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0, CLUSTER, 32766, 0xAA)
    v1 = False
    fail = None

    def _fill(self, info):
        state, status, cluster, clique, mask = self.fabric
        info.state, info.status, info.cliqueId = state, status, clique
        for i, byte in enumerate(bytearray(uuid.UUID(cluster).bytes)):
            info.clusterUuid[i] = byte
        if hasattr(info, "healthMask"):
            info.healthMask = mask

    def nvmlDeviceGetGpuFabricInfoV(self, h, ref):
        if self.fail is not None:
            raise pynvml.NVMLError(self.fail)
        if self.v1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        assert ref._obj.version == pynvml.nvmlGpuFabricInfo_v2
        self._fill(ref._obj)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfo(self, h, ref):
        assert self.v1
        self._fill(ref._obj)
        return pynvml.NVML_SUCCESS


def _nvml(reading, **attrs):
    fake = FabricNvml(reading)
    for key, value in attrs.items():
        setattr(fake, key, value)
    return NvmlBackend(nvml=fake), fake


def test_nvml_reads_the_v2_fabric_info_into_the_facts(reading):
    backend, fake = _nvml(reading)
    fabric = backend.read_gpu(0)["fabric"]
    assert fabric == {"state": "completed", "status": "SUCCESS", "cluster_uuid": CLUSTER, "clique_id": 32766,
                      "health_mask": "0x000000aa",
                      "health": {"degraded_bandwidth": False, "route_recovery_in_progress": False,
                                 "route_unhealthy": False, "access_timeout_recovery": False,
                                 "incorrect_configuration": NOT_SUPPORTED, "partition_assigned": NOT_SUPPORTED,
                                 "gfm_state": NOT_SUPPORTED}}
    assert "nvmlDeviceGetGpuFabricInfo" not in fake.calls


def test_nvml_falls_back_to_the_v1_struct_without_a_mask(reading):
    backend, dummy = _nvml(reading, v1=True, fabric=(pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, 10, CLUSTER, 3, 0))
    fabric = backend.read_gpu(0)["fabric"]
    assert (fabric["state"], fabric["status"], fabric["clique_id"]) == ("in_progress", "TIMEOUT", 3)
    assert fabric["health_mask"] == NOT_SUPPORTED and fabric["health"] == NOT_SUPPORTED


def test_nvml_without_a_fabric_and_with_a_failing_read(reading):
    backend, dummy = _nvml(reading, fail=pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert backend.read_gpu(0)["fabric"] == NOT_SUPPORTED
    backend, dummy = _nvml(reading, fabric=(pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, 0, CLUSTER, 0, 0))
    assert backend.read_gpu(0)["fabric"] == NOT_SUPPORTED
    backend, dummy = _nvml(reading, fail=pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(NvmlError) as err:
        backend.read_gpu(0)
    assert err.value.name == "UNKNOWN"


def test_both_backends_give_the_same_facts_for_the_same_fabric(reading, tmp_path):
    sim = SimulatedBackend(str(tmp_path / "t.json"), shape="gb200-nvl")
    sim.inject_health(0, "fabric_cluster_uuid", CLUSTER.upper())
    sim.inject_health(0, "fabric_clique_id", 4026)
    sim.inject_health(0, "fabric_route_unhealthy", True)
    backend, dummy = _nvml(reading, fabric=(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0, CLUSTER, 4026,
                                            0xAA ^ (3 << 4)))     # route unhealthy: TRUE (1) in place of FALSE (2)
    real, simulated = backend.read_gpu(0)["fabric"], sim.read_gpu(0)["fabric"]
    assert real == simulated and real["health"]["route_unhealthy"] is True


def test_the_health_read_judges_the_same_fabric_read(tmp_path):
    sim = SimulatedBackend(str(tmp_path / "t.json"), shape="gb200-nvl")
    sim.inject_health(1, "fabric_degraded", True)
    sim.inject_health(2, "fabric_state", "not_started")
    facts = [g["fabric"] for g in sim.read_all()["gpus"]]
    assert [g["fabric"] for g in sim.read_health()["gpus"]] == [health_entry(f) for f in facts]
    assert facts[1]["health_mask"] == "0x000000a9" and facts[1]["health"]["degraded_bandwidth"] is True
    # (until the probe completes the simulated GPU reports no cluster)
    assert (facts[2]["state"], facts[2]["cluster_uuid"], facts[2]["clique_id"]) == (
        "not_started", "00000000-0000-0000-0000-000000000000", 0)


def test_trays_created_with_one_rack_share_its_cluster_and_clique(tmp_path, monkeypatch):
    def tray(name, rack=None):
        monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(tmp_path / ("%s.json" % name)))
        monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "gb200-nvl")
        if rack:
            monkeypatch.setenv("GPUOPS_SIMULATED_RACK", rack)
        else:
            monkeypatch.delenv("GPUOPS_SIMULATED_RACK", raising=False)
        return set((g["fabric"]["cluster_uuid"], g["fabric"]["clique_id"])
                   for g in _gpu_backend.read_facts()["gpus"])
    a1, a2, b1, lone = tray("a1", "rack-a"), tray("a2", "rack-a"), tray("b1", "rack-b"), tray("lone")
    assert len(a1) == 1 and a1 == a2 and list(a1)[0][1] == 32766
    assert b1 != a1 and lone not in (a1, b1) and len(lone) == 1
    monkeypatch.setenv("GPUOPS_SIMULATED_RACK", "rack-b")
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(tmp_path / "a1.json"))
    assert set((g["fabric"]["cluster_uuid"], g["fabric"]["clique_id"])
               for g in _gpu_backend.read_facts()["gpus"]) == a1       # (the rack is the tray's from its creation)


def test_a_baseboard_has_a_fabric_without_a_cluster_and_a_pcie_node_none(tmp_path):
    hgx = SimulatedBackend(str(tmp_path / "h.json"), shape="hgx-h200").read_gpu(0)["fabric"]
    assert (hgx["state"], hgx["cluster_uuid"], hgx["clique_id"], hgx["health_mask"]) == (
        "completed", "00000000-0000-0000-0000-000000000000", 0, "0x00000000")
    assert SimulatedBackend(str(tmp_path / "l.json"), shape="l40s-x2").read_gpu(0)["fabric"] == NOT_SUPPORTED


@pytest.mark.parametrize("fault,value,words", [
    ("fabric_clique_id", -1, "whole number from 0 to 4294967295"),
    ("fabric_clique_id", 2 ** 32, "whole number from 0 to 4294967295"),
    ("fabric_clique_id", True, "whole number"),
    ("fabric_cluster_uuid", "rack-a", "32 hex digits"),
    ("fabric_incorrect_configuration", "loose", "needs one of gpu_state_invalid, incompatible_gpu_fw"),
    ("fabric_route_unhealthy", "yes", "true or false"),
])
def test_bad_fabric_faults_are_refused_and_change_nothing(tmp_path, fault, value, words):
    sim = SimulatedBackend(str(tmp_path / "t.json"), shape="gb200-nvl")
    before = sim.raw_state()
    with pytest.raises(GpuBackendError, match=words):
        sim.inject_health(0, fault, value)
    assert sim.raw_state() == before


def test_fabric_health_faults_set_and_clear_their_field(tmp_path):
    sim = SimulatedBackend(str(tmp_path / "t.json"), shape="gb200-nvl")
    sim.inject_health(3, "fabric_access_timeout_recovery", True)
    sim.inject_health(3, "fabric_incorrect_configuration", "insufficient_nvlinks")
    fabric = sim.read_gpu(3)["fabric"]
    assert fabric["health"]["access_timeout_recovery"] is True
    assert fabric["health"]["incorrect_configuration"] == "insufficient_nvlinks"
    assert fabric["health_mask"] == "0x%08x" % ((0xAA ^ (3 << 6)) | (5 << 8))
    sim.inject_health(3, "fabric_access_timeout_recovery", False)
    assert sim.read_gpu(3)["fabric"]["health_mask"] == "0x%08x" % (0xAA | (5 << 8))
    sim.inject_health(3, "healthy", True)
    assert sim.read_gpu(3)["fabric"]["health_mask"] == "0x000000aa"


def test_gb300_trays_are_rack_trays_too(tmp_path):
    a = SimulatedBackend(str(tmp_path / "a.json"), shape="gb300-nvl", rack="rack-c")
    b = SimulatedBackend(str(tmp_path / "b.json"), shape="gb300-nvl", rack="rack-c")
    gpus = a.read_all()["gpus"] + b.read_all()["gpus"]
    assert len(gpus) == 8 and set(g["name"] for g in gpus) == {"NVIDIA GB300"}
    assert len(set((g["fabric"]["cluster_uuid"], g["fabric"]["clique_id"], g["fabric"]["health_mask"])
                   for g in gpus)) == 1
    assert gpus[0]["fabric"]["cluster_uuid"] != "00000000-0000-0000-0000-000000000000"
    assert len(a.read_health()["gpus"][0]["nvlink"]) == 18


def test_a_tray_state_written_before_racks_reads_a_rack_of_its_own(tmp_path):
    path = tmp_path / "old.json"
    SimulatedBackend(str(path), shape="gb200-nvl", rack="rack-a").read_all()
    state = json.loads(path.read_text())
    del state["fabric"]
    path.write_text(json.dumps(state))
    gpus = SimulatedBackend(str(path)).read_all()["gpus"]
    pairs = set((g["fabric"]["cluster_uuid"], g["fabric"]["clique_id"]) for g in gpus)
    assert len(pairs) == 1 and list(pairs)[0][0] != "00000000-0000-0000-0000-000000000000"
    assert SimulatedBackend(str(path)).read_all()["gpus"][0]["fabric"] == gpus[0]["fabric"]
