"""The health read with a deadline (_health_deadline): a GPU whose read never answers is killed at the deadline and
reported (gpu_unresponsive) while the other GPUs are read; NVML's start that never answers is the node's finding
(nvml_unresponsive); a part that fails is an error, not a finding; the killed children are reaped. Both backends: the
simulator (fault ``hang``) and the NVML backend over a pynvml stand-in whose call blocks. No verdict depends on the
machine's speed but "ended before the deadline + 10 s"."""
import json
import os
import time

import pynvml
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health as health
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import HostReader
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_deadline import HealthReadError, read_health
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from test_health_backends import NO_SYSFS, HealthNvml
from test_nvml_backend import FIXTURE

DEADLINE = 1.0
SLACK = 10.0


def _block_forever():
    while True:          # as a driver call that never returns: only the deadline's SIGKILL ends it
        time.sleep(0.05)


def _timed(fn):
    started = time.monotonic()
    answer = fn()
    return answer, time.monotonic() - started


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def sim(tmp_path):
    backend = SimulatedBackend(str(tmp_path / "state.json"), shape="hgx-h200")
    backend.read_all()
    return backend


def _read_sim(sim, tmp_path, **kwargs):
    pids = str(tmp_path / "children")

    def opened():
        with open(pids, "a") as handle:        # each child's pid, to check that it was reaped
            handle.write("%d\n" % os.getpid())
        return SimulatedBackend(sim.path)
    answer, took = _timed(lambda: read_health(opened, opened, **kwargs))
    with open(pids) as handle:
        children = sorted(set(int(line) for line in handle.read().split()))
    return answer, took, children


def test_a_hung_gpu_is_unresponsive_and_the_other_gpus_are_read(sim, tmp_path):
    sim.inject_health(3, "hang")
    sim.inject_health(5, "row_remap_pending")
    sim.add_xid(1, 79, "GPU has fallen off the bus.")
    answer, took, children = _read_sim(sim, tmp_path, deadline=DEADLINE)
    assert took < DEADLINE + SLACK
    bus = sim.read_all()["gpus"][3]["pci_bus_id"]
    assert answer["unresponsive"] == [{"gpu": 3, "bus_id": bus, "bus_id_source": "nvml", "seconds": DEADLINE}]
    assert [g["index"] for g in answer["gpus"]] == [0, 1, 2, 4, 5, 6, 7]           # the GPUs after it too
    assert answer["nvml_unresponsive"] is None and answer["backend"] == "simulated"
    assert answer["kernel_log"]["readable"] and [line for dummy, line in answer["kernel_log"]["lines"]] == [
        sim.raw_state()["kernel_log"]["lines"][0]]
    assert len(children) == 2 and all(_gone(pid) for pid in children)              # killed, a new one, both reaped
    kinds = dict((f["kind"], f) for f in health.findings(dict(answer, kernel_log={"readable": True, "lines": []})))
    assert kinds["gpu_unresponsive"]["gpu"] == 3 and kinds["gpu_unresponsive"]["pci_bus_id"] == bus
    assert "within the deadline of 1 s" in kinds["gpu_unresponsive"]["summary"]
    assert "Xid 79, 119 or 120" in kinds["gpu_unresponsive"]["summary"]
    assert "row_remap_pending" in kinds and "gpu_missing" not in kinds


def test_without_a_hang_one_child_reads_everything(sim, tmp_path):
    answer, took, children = _read_sim(sim, tmp_path, deadline=30.0)
    assert answer["unresponsive"] == [] and len(answer["gpus"]) == 8 and len(children) == 1
    assert answer["kernel_log"]["boot_id"] == sim.read_kernel_log_timed()["boot_id"]


def test_two_hung_gpus_each_get_their_own_deadline(sim, tmp_path):
    sim.inject_health(0, "hang")
    sim.inject_health(7, "hang")
    answer, took, children = _read_sim(sim, tmp_path, deadline=DEADLINE)
    assert took < 2 * DEADLINE + SLACK
    assert [g["gpu"] for g in answer["unresponsive"]] == [0, 7] and len(answer["gpus"]) == 6
    # the first killed at GPU 0, the second at GPU 7, the third reads the kernel log and the bus
    assert len(children) == 3 and all(_gone(pid) for pid in children)


def test_nvml_that_never_starts_is_the_nodes_finding_and_the_kernel_log_is_still_read(sim, tmp_path):
    sim.add_xid(2, 119, "Timeout after 6s of waiting for RPC response from GPU2 GSP!")

    def hung_start():
        _block_forever()
    answer, took = _timed(lambda: read_health(hung_start, lambda: SimulatedBackend(sim.path), deadline=DEADLINE))
    assert took < DEADLINE + SLACK
    assert answer["nvml_unresponsive"] == {"seconds": DEADLINE, "not_read": []} and answer["gpus"] == []
    assert answer["kernel_log"]["readable"] and len(answer["kernel_log"]["lines"]) == 1
    found = health.findings(dict(answer, kernel_log={"readable": True, "lines": []}))
    assert [f["kind"] for f in found] == ["nvml_unresponsive"] and found[0]["gpu"] is None
    assert "no GPU of this node could be read" in found[0]["summary"] and "reboot" in found[0]["fix"]


def test_a_new_nvml_start_that_hangs_after_a_gpu_did_names_the_gpus_not_read(sim, tmp_path):
    sim.inject_health(2, "hang")
    started = tmp_path / "started"

    def open_backend():                    # the first child starts NVML; the second's start never answers
        if started.exists():
            _block_forever()
        started.write_text("1")
        return SimulatedBackend(sim.path)
    answer = read_health(open_backend, lambda: SimulatedBackend(sim.path), deadline=DEADLINE)
    assert [g["gpu"] for g in answer["unresponsive"]] == [2]
    assert answer["nvml_unresponsive"] == {"seconds": DEADLINE, "not_read": [3, 4, 5, 6, 7]}
    assert [g["index"] for g in answer["gpus"]] == [0, 1]


def test_a_hung_kernel_log_read_is_an_unreadable_log(sim):
    class HungLog(SimulatedBackend):
        def read_kernel_log_timed(self):
            _block_forever()
    answer = read_health(lambda: SimulatedBackend(sim.path), lambda: HungLog(sim.path), deadline=DEADLINE)
    assert len(answer["gpus"]) == 8 and answer["kernel_log"]["readable"] is False
    assert "the kernel log read did not answer within the deadline of 1 s" in answer["kernel_log"]["reason"]


def test_a_part_that_fails_is_an_error_not_a_finding(sim):
    class Broken(SimulatedBackend):
        def read_gpu_health(self, index):
            if index == 4:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            return SimulatedBackend.read_gpu_health(self, index)
    with pytest.raises(HealthReadError, match="the health read failed at GPU 4: NVMLError"):
        read_health(lambda: Broken(sim.path), lambda: SimulatedBackend(sim.path), deadline=30.0)


def test_the_bus_id_comes_from_the_pci_bus_where_nvml_named_none():
    """_bus_from_pci: the one GPU on the bus NVML did not answer for; where two are left, none."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_deadline import _bus_from_pci
    pci = {"readable": True, "gpus": [{"bus_id": "0000:19:00.0"}, {"bus_id": "0000:47:00.0"}]}
    assert _bus_from_pci(pci, [{"pci_bus_id": "00000000:19:00.0"}], []) == "0000:47:00.0"
    assert _bus_from_pci(pci, [], []) is None
    assert _bus_from_pci({"readable": False}, [], []) is None


class TwoGpusOneHangs(HealthNvml):
    """The real reading's H200 twice; GPU 1's remapped rows never answer (a GPU whose driver stopped responding)."""

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetRemappedRows(self, h):
        if h == "h1":
            _block_forever()
        return HealthNvml.nvmlDeviceGetRemappedRows(self, h)


def test_the_nvml_backend_too(tmp_path):
    with open(FIXTURE) as handle:
        reading = json.load(handle)
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("0f1e2d3c-aaaa-4bbb-8ccc-111122223333\n")

    def dmesg(argv):
        if argv[0] == "journalctl":
            raise OSError(2, "No such file or directory")
        return 0, "[    0.000000] Linux version\n", ""
    answer, took = _timed(lambda: read_health(
        lambda: NvmlBackend(nvml=TwoGpusOneHangs(reading), sys_root=NO_SYSFS),
        lambda: HostReader(run_command=dmesg, root=str(tmp_path)), deadline=DEADLINE))
    assert took < DEADLINE + SLACK
    assert [g["index"] for g in answer["gpus"]] == [0] and answer["backend"] == "nvml"
    assert answer["unresponsive"] == [{"gpu": 1, "bus_id": reading["devices"][0]["pci"]["busId"],
                                       "bus_id_source": "nvml", "seconds": DEADLINE}]
    assert answer["kernel_log"]["source"] == "dmesg"
    assert answer["kernel_log"]["boot_id"] == "0f1e2d3c-aaaa-4bbb-8ccc-111122223333"
