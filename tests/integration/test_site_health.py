"""site.yml's GPU health gate (issue 35) on live nodes under the standalone chart (the fake cluster of
test_site_chart_flow.py: the fake API server, the real helm with the fixture chart, the fake DaemonSet controller,
kubelet and device plugin holding the simulated GPUs).

Faults are put on the simulated GPUs with the simulator's own test hooks (SimulatedBackend.inject_health, add_xid)
between runs; nothing is timed. Both lab nodes run in one batch (gpuops_serial 100%), so that a healthy node of the
same batch as an unhealthy one is seen to be released.
"""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._simulator import SimulatedBackend

from tests.integration.site_helpers import HELM, Site
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.lab_cluster import lab_nodes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

A100, H200 = "lab-dgx-a100", "lab-hgx-h200"
CORDONED_BY = "gpuops.nvidia/cordoned-by"
TAINT = "gpuops.nvidia/gpu-unhealthy"
CONDITION = "GpuopsNvidiaGpuHealthy"
ADMIN_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
FAIL_TASK = "GPU health - fail this node"
# what changes a GPU (every call the simulator logs that is not a read)
MUTATING = ("set_mig_mode", "reset_gpu", "create_gpu_instance", "destroy_gpu_instance", "create_compute_instance",
            "destroy_compute_instance", "set_compute_mode", "set_persistence_mode", "reboot")


class Cluster(object):
    def __init__(self, tmp_path, nodes):
        self.api = FakeKubeApi(tokens=None).start()
        kubeconfig = str(tmp_path / "kubeconfig")
        import yaml
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        for i, node in enumerate(nodes):
            self.api.add_node(node, internal_ip="10.0.0.%d" % (11 + i), labels={"nvidia.com/gpu.present": "true"})
        self.site = Site(tmp_path, limit=nodes, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60, gpuops_serial="100%")
        self.site.extra["cluster_device_plugin_chart_path"] = self.site.chart()
        shapes = lab_nodes()
        self.paths = dict((n, str(self.site.state / ("%s.json" % n))) for n in nodes)
        self.site.state.mkdir(parents=True, exist_ok=True)
        self.sims = {}
        for n in nodes:
            self.sims[n] = SimulatedBackend(self.paths[n], shape=shapes[n])
            self.sims[n].read_all()
        self.fake = FakeDaemonSets(self.api, dict((n, (self.paths[n], shapes[n])) for n in nodes)).start()

    def stop(self):
        self.fake.stop()
        self.api.stop()
        assert self.fake.errors == [], self.fake.errors[0]

    def node(self, name):
        return self.api.get("", "nodes", name)

    def set_node(self, name, **spec):
        node = self.node(name)
        node["spec"].update(spec)
        self.api.put(node)

    def bus_id(self, name, index):
        return self.sims[name].read_all()["gpus"][index]["pci_bus_id"]

    def mutations(self, name):
        return [c.get("call") for c in self.sims[name].raw_state()["call_log"] if c.get("call") in MUTATING]


@pytest.fixture
def both(tmp_path):
    c = Cluster(tmp_path, (A100, H200))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def h200(tmp_path):
    c = Cluster(tmp_path, (H200,))
    try:
        yield c
    finally:
        c.stop()


def _marks(node):
    spec, meta = node.get("spec") or {}, node["metadata"]
    ours = [c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == CONDITION]
    return {"unschedulable": bool(spec.get("unschedulable")),
            "cordoned_by": (meta.get("annotations") or {}).get(CORDONED_BY),
            "taints": spec.get("taints") or [], "condition": ours[0] if ours else None}


def _released(node):
    marks = _marks(node)
    return not marks["unschedulable"] and marks["cordoned_by"] is None and marks["condition"] is None \
        and not [t for t in marks["taints"] if t["key"] == TAINT]


def test_blocking_findings_keep_the_node_out_while_the_batch_goes_on_and_a_healthy_run_releases_it(both):
    """Converged, then four blocking findings on four GPUs of the H200 (a pending row remap, a fatal Xid, a PCIe link
    trained at x8, an incomplete fabric) and a warning on the A100: the H200 is kept cordoned, tainted and with the
    condition (every finding, per GPU, with its bus id and fix), not labelled, and fails last; the A100 of the same
    batch is released, its warning shown; no GPU of the H200 is changed. Then the findings cleared (the Xid, which stays
    in this boot's log, made a warning by the policy): the next run releases the H200 and removes only the
    collection's marks, an administrator's taint stays."""
    res = both.site.run()
    assert res.rc == 0, res
    assert _released(both.node(A100)) and _released(both.node(H200))

    h200 = both.sims[H200]
    h200.inject_health(3, "row_remap_pending")
    h200.add_xid(1, 79, "GPU has fallen off the bus.")
    h200.inject_health(5, "pcie_width", 8)
    h200.inject_health(6, "fabric_state", "in_progress")
    both.sims[A100].inject_health(2, "ecc_volatile_corrected", 3)
    both.set_node(H200, taints=[ADMIN_TAINT])
    h200.clear_call_log()
    labels_before = dict(both.node(H200)["metadata"]["labels"])
    res = both.site.run()
    assert res.rc != 0, res
    (failure,) = res.failures()
    assert failure[0] == H200 and FAIL_TASK in failure[1], res
    message = failure[2]
    for index, words in ((3, "remapped rows pending"), (1, "a fatal Xid since boot (Xid 79"), (5, "PCIe link narrower"),
                         (6, "NVLink fabric registration not completed")):
        assert "GPU %d (%s): %s" % (index, both.bus_id(H200, index), words) in message, message
    assert "reset the GPU or reboot" in message and "stays cordoned" in message and "\n" not in message
    marks = _marks(both.node(H200))
    assert marks["unschedulable"] and marks["cordoned_by"] == "gpuops.nvidia.gpu_node"
    assert ADMIN_TAINT in marks["taints"]
    assert {"key": TAINT, "value": "xid_fatal", "effect": "NoSchedule"} in marks["taints"]
    condition = marks["condition"]
    assert condition["status"] == "False" and condition["reason"] == "XidFatal"
    assert condition["message"].startswith("4 GPU health findings block this node: [1] GPU 1 (%s)"
                                           % both.bus_id(H200, 1)), condition
    assert "GPU 3 (%s): remapped rows pending" % both.bus_id(H200, 3) in condition["message"]
    assert both.node(H200)["metadata"]["labels"] == labels_before       # not labelled
    assert both.mutations(H200) == []                                    # the gate only read the GPUs
    # the healthy A100 of the same batch: released, its warning shown
    assert _released(both.node(A100))
    (shown,) = res.task("Show the GPUs as they are now", A100)
    assert [line for line in shown["msg"]
            if line.startswith("health, warns: GPU 2 (%s): corrected ECC errors" % both.bus_id(A100, 2))], shown

    # fixed: the hardware faults cleared, the Xid (in this boot's log until a reboot) made a warning for this run
    for index in (3, 5, 6):
        h200.inject_health(index, "healthy")
    res = both.site.run(gpu_node_health_policy={"xid_fatal": "warn"})
    assert res.rc == 0, res
    marks = _marks(both.node(H200))
    assert _released(both.node(H200)) and marks["taints"] == [ADMIN_TAINT], marks
    (shown,) = res.task("Show the GPUs as they are now", H200)
    assert [line for line in shown["msg"] if line.startswith("health, warns: GPU 1 (") and "Xid 79" in line], shown
    assert both.node(H200)["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "mps-4"


def test_an_administrators_cordon_stays_and_check_mode_reports_without_writing(h200):
    """A node an administrator cordoned, with a pending row remap from the start: check mode reports the finding and
    what a real run does, and writes nothing; the real run adds the taint and the condition and leaves the cordon
    unmarked; once healthy, the next run removes them and the node stays cordoned (the administrator's)."""
    h200.sims[H200].inject_health(0, "row_remap_pending")
    h200.set_node(H200, unschedulable=True)
    before = h200.node(H200)
    res = h200.site.run(check=True)
    assert res.rc == 0, res
    (said,) = res.task("GPU health - what a real run does", H200)
    assert "GPU 0 (%s): remapped rows pending" % h200.bus_id(H200, 0) in said["msg"] and "fails this node" in said["msg"]
    (marked,) = res.task("GPU health - mark the node", H200)
    assert any("add taint %s=row_remap_pending:NoSchedule" % TAINT in c for c in marked["changes"]), marked
    assert h200.node(H200)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    res = h200.site.run()
    assert res.rc != 0 and [(f[0], FAIL_TASK in f[1]) for f in res.failures()] == [(H200, True)], res
    marks = _marks(h200.node(H200))
    assert marks["unschedulable"] and marks["cordoned_by"] is None and marks["condition"]["reason"] == "RowRemapPending"
    assert marks["taints"] == [{"key": TAINT, "value": "row_remap_pending", "effect": "NoSchedule"}]

    h200.sims[H200].inject_health(0, "healthy")
    res = h200.site.run()
    assert res.rc == 0, res
    marks = _marks(h200.node(H200))
    assert marks == {"unschedulable": True, "cordoned_by": None, "taints": [], "condition": None}, marks


def _resets(cluster, name):
    return [c["args"]["index"] for c in cluster.sims[name].raw_state()["call_log"] if c.get("call") == "reset_gpu"]


def test_the_allowed_reset_clears_a_pending_remap_on_an_idle_gpu_and_releases_the_node_without_a_reboot(h200):
    """Pending row remaps on GPU 0 (idle) and GPU 1 (held by a process outside the node's GPU DaemonSets), with the
    user's consent (gpu_node_health_reset): check mode says what a real run would do and changes nothing; the real run
    cordons the node, pauses its GPU pods, resets GPU 0 only (no reboot), and fails the node naming GPU 1's holder, the
    node kept cordoned with the taint and condition. Once the holder is gone, the next run resets GPU 1 and releases
    the node: labelled, uncordoned, the gate's marks gone, the same boot."""
    sim = h200.sims[H200]
    sim.inject_health(0, "row_remap_pending")
    sim.inject_health(1, "row_remap_pending")
    sim.hold("dcgm", indices=[1], pid=4242, command="nv-hostengine")
    boot = sim.raw_state()["boot_id"]
    consent = {"gpu_node_health_reset": True}

    res = h200.site.run(check=True, **consent)
    assert res.rc == 0, res
    (said,) = res.task("GPU health - what a real run does", H200)
    assert "A real run first resets GPU 0" in said["msg"], said
    assert "GPU 1 (%s) not reset - in use: PID 4242 nv-hostengine" % h200.bus_id(H200, 1) in said["msg"], said
    (sequence,) = res.task("The sequence a real run takes on this node (check mode)", H200)
    assert "reset GPU 0, 1 where idle" in sequence["msg"], sequence
    assert _resets(h200, H200) == []

    res = h200.site.run(**consent)
    assert res.rc != 0, res
    (failure,) = res.failures()
    assert failure[0] == H200 and FAIL_TASK in failure[1], res
    assert "GPU 1 (%s): remapped rows pending" % h200.bus_id(H200, 1) in failure[2]
    assert "GPU 1 (%s) not reset - in use: PID 4242 nv-hostengine" % h200.bus_id(H200, 1) in failure[2]
    assert "GPU 0 (" not in failure[2]
    assert _resets(h200, H200) == [0] and sim.read_health()["gpus"][0]["remapped_rows"]["pending"] is False
    marks = _marks(h200.node(H200))
    assert marks["unschedulable"] and marks["cordoned_by"] == "gpuops.nvidia.gpu_node"
    assert marks["condition"]["reason"] == "RowRemapPending"

    sim.release("dcgm")
    res = h200.site.run(**consent)
    assert res.rc == 0, res
    assert _resets(h200, H200) == [0, 1]
    assert _released(h200.node(H200)), _marks(h200.node(H200))
    assert h200.node(H200)["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "mps-4"
    assert sim.raw_state()["boot_id"] == boot
    assert [c for c in sim.raw_state()["call_log"] if c.get("event") == "reboot"] == []
