"""site.yml's GPU health gate (issue 35) on live nodes under the standalone chart (the fake cluster of
test_site_chart_flow.py: the fake API server, the real helm with the fixture chart, the fake DaemonSet controller,
kubelet and device plugin holding the simulated GPUs).

One lab, one batch (gpuops_serial 100%), three runs, so that every node of the batch is seen next to the others:
the lab's HGX H200 (several findings on several GPUs, among them the two an NVSwitch shape alone has: an NVLink down and
an incomplete fabric), one small node (one H200, ``h200-x1``) per blocking finding kind, a healthy one and a
warning-only one, and a two-GPU node that allows the gate's reset (``gpu_node_health_reset``). The small nodes come from
a second inventory file written by the test (the lab's group_vars apply to them through their groups). The healthy and
the warning-only nodes also run DCGM's diagnostic (gpu_node_health_dcgm_diag, the lab's stand-in dcgmi); the healthy
one is burned in (gpu_node_burn_in quick), and its Node carries the record (gpuops.nvidia/burn-in). Faults are put
on the simulated GPUs with the simulator's own test hooks (SimulatedBackend.inject_health, add_xid, hold) before the
runs; nothing is timed.
"""
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.integration.site_helpers import HELM, Site
from tests.support.ansible_run import ROOT
from tests.support.fake_cluster import FakeCluster
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.lab_cluster import lab_nodes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

H200 = "lab-hgx-h200"
CORDONED_BY = "gpuops.nvidia/cordoned-by"
OURS = "gpuops.nvidia.gpu_node"
TAINT = "gpuops.nvidia/gpu-unhealthy"
CONDITION = "GpuopsNvidiaGpuHealthy"
BURN_IN = "gpuops.nvidia/burn-in"
ADMIN_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
FAIL_TASK = "GPU health - fail this node"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
# what changes a GPU (every call the simulator logs that is not a read)
MUTATING = ("set_mig_mode", "reset_gpu", "create_gpu_instance", "destroy_gpu_instance", "create_compute_instance",
            "destroy_compute_instance", "set_compute_mode", "set_persistence_mode", "reboot")

# The one-GPU nodes, each with ONE blocking finding: node -> (its fault, the finding kind, the condition's reason, what
# the finding's line says, words of its fix). Kinds that need NVLink or an NVSwitch fabric are on the H200 below.
PER_FINDING = {
    "health-remap-pending": ("row_remap_pending", "RowRemapPending", "remapped rows pending", "reset the GPU or reboot"),
    "health-remap-failure": ("row_remap_failure", "RowRemapFailure", "row remapping failed", "the GPU needs service"),
    "health-ecc": ("ecc_uncorrected_volatile", "EccUncorrectedVolatile", "uncorrected ECC errors since the last reset",
                   "reset the GPU or reboot, then check its remapped rows"),
    "health-lost": ("gpu_lost", "GpuLost", "NVML reports the GPU lost (GPU_IS_LOST)", "reboot / reseat the GPU"),
    "health-missing": ("gpu_missing", "GpuMissing", "on the PCI bus but not listed by NVML",
                       "look for its Xid 79 or an RmInitAdapter failure"),
    "health-xid": ("xid_fatal", "XidFatal", "a fatal Xid since boot (Xid 48", "the gate clears after a reboot"),
    "health-pcie": ("pcie_generation_degraded", "PcieGenerationDegraded", "PCIe link below its maximum generation "
                    "(Gen3, max Gen5)", "reseat the GPU or check its riser and slot"),
}
HEALTHY, WARNS, RESET = "health-ok", "health-warns", "health-reset"
# the small nodes' machines (the lab inventory gives the H200's)
SHAPES = dict([(n, "h200-x1") for n in PER_FINDING] + [(HEALTHY, "h200-x1"), (WARNS, "h200-x1"), (RESET, "h200-x2")])


def _inventory(path):
    """The small nodes as a second inventory: MPS nodes like the lab's H200 (its group_vars apply through the groups);
    the lab's paths that follow the inventory's directory are given as the lab's own. Only the reset node allows the
    gate's reset; the healthy and the warning-only nodes run DCGM's diagnostic (the lab's stand-in dcgmi)."""
    hosts = {}
    for node, shape in SHAPES.items():
        hosts[node] = {"gpuops_simulated_machine": shape, "gpuops_repo_dir": ROOT,
                       "gpu_node_containerd_initial_config": os.path.join(ROOT, "inventories", "lab-files",
                                                                          "containerd-config.toml")}
    hosts[RESET]["gpu_node_health_reset"] = True
    for node in (HEALTHY, WARNS):
        hosts[node]["gpu_node_health_dcgm_diag"] = True
    hosts[HEALTHY]["gpu_node_burn_in"] = "quick"
    with open(path, "w") as handle:
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {"mps_nodes": {"hosts": hosts}}}}}}, handle)
    return path


class Cluster(FakeCluster):
    def __init__(self, tmp_path, shapes):
        self.api = FakeKubeApi(tokens=None).start()
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        nodes = sorted(shapes)
        for i, node in enumerate(nodes):
            self.api.add_node(node, internal_ip="10.0.0.%d" % (11 + i), labels={"nvidia.com/gpu.present": "true"})
        self.site = Site(tmp_path, limit=nodes, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60, gpuops_serial="100%")
        self.site.extra["cluster_device_plugin_chart_path"] = self.site.chart()
        self.inventory = _inventory(str(tmp_path / "health-nodes.yml"))
        self.paths = dict((n, str(self.site.state / ("%s.json" % n))) for n in nodes)
        self.site.state.mkdir(parents=True, exist_ok=True)
        self.sims = {}
        for n in nodes:
            # the node whose GPU goes missing has its host tree (PCI sysfs) rendered under its lab root, where the
            # health read compares the bus with NVML (GPUOPS_SIMULATED_ROOT); the others need none
            root = str(self.site.state / n) if n == "health-missing" else None
            self.sims[n] = SimulatedBackend(self.paths[n], shape=shapes[n], root=root)
            self.sims[n].read_all()
        self.fake = FakeDaemonSets(self.api, dict((n, (self.paths[n], shapes[n])) for n in nodes)).start()

    def run(self, nodes, check=False, **extra):
        self.site.limit = tuple(nodes)
        return self.site.run(check=check, args=("-i", self.inventory), **extra)

    def set_node(self, name, **spec):
        node = self.node(name)
        node["spec"].update(spec)
        self.api.put(node)

    def bus_id(self, name, index):
        """The GPU's bus id as NVML writes it (from the state: a lost GPU answers no read)."""
        return [g for g in self.sims[name].raw_state()["gpus"] if g["index"] == index][0]["pci_bus_id"]

    def mutations(self, name):
        return [c.get("call") for c in self.sims[name].raw_state()["call_log"] if c.get("call") in MUTATING]

    def resets(self, name):
        return [c["args"]["index"] for c in self.sims[name].raw_state()["call_log"] if c.get("call") == "reset_gpu"]


@pytest.fixture
def lab(tmp_path):
    shapes = dict(SHAPES)
    shapes[H200] = lab_nodes()[H200]
    c = Cluster(tmp_path, shapes)
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


def _inject(lab):
    """Every node's faults, before the first run."""
    faults = {"health-remap-pending": ("row_remap_pending", True), "health-remap-failure": ("row_remap_failure", True),
              "health-ecc": ("ecc_volatile_uncorrected", 2), "health-lost": ("lost", True),
              "health-missing": ("missing", True), "health-pcie": ("pcie_generation", 3)}
    for node, (fault, value) in faults.items():
        lab.sims[node].inject_health(0, fault, value)
    lab.sims["health-missing"].add_xid(0, 79, "GPU has fallen off the bus.")     # the missing GPU's own Xid
    lab.sims["health-xid"].add_xid(0, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                                          "framebuffer at partition 0, subpartition 0.")
    lab.sims[WARNS].inject_health(0, "ecc_volatile_corrected", 3)
    # DCGM's diagnostic on the warning-only node: a result of severity MONITOR (GPU 0's volatile SBEs), a warning
    with open(os.path.join(ROOT, "tests", "fixtures", "dcgm", "diag-r1-volatile-sbe.json")) as src, \
            open(lab.paths[WARNS] + ".dcgmi.json", "w") as dst:
        dst.write(src.read())
    h200 = lab.sims[H200]
    h200.inject_health(3, "row_remap_pending")
    h200.add_xid(1, 79, "GPU has fallen off the bus.")
    h200.inject_health(2, "nvlink_down", True, link=4)
    h200.inject_health(5, "pcie_width", 8)
    h200.inject_health(6, "fabric_state", "in_progress")
    reset = lab.sims[RESET]
    reset.inject_health(0, "row_remap_pending")
    reset.inject_health(1, "row_remap_pending")
    reset.hold("dcgm", indices=[1], pid=4242, command="nv-hostengine")
    # an administrator's cordon and taint on the H200
    lab.set_node(H200, unschedulable=True, taints=[ADMIN_TAINT])


def test_each_blocking_finding_keeps_its_node_out_while_the_batch_goes_on_and_a_healthy_run_releases_it(lab):
    """Check mode first (the administrator-cordoned H200 and the reset node): the findings and what a real run does, the
    reset it would make and the one it would not (the holder named), nothing written. The real run of the whole batch:
    every blocking node fails last, stays cordoned (the administrator's cordon left unmarked) with the taint and
    condition of its finding and a message naming the GPU, its bus id and the fix, unlabelled and with no GPU changed
    by the gate; the reset node's idle GPU is reset, the held one named; the healthy and the warning-only nodes are
    released, the warnings shown (DCGM's among them). Then the faults cleared (the H200's Xid, in this boot's log, made
    a warning by the policy) and the holder gone: the next run removes only the collection's marks from the H200 (the
    administrator's cordon and taint stay) and releases the reset node after resetting its other GPU, without a
    reboot."""
    _inject(lab)
    reset_boot = lab.sims[RESET].raw_state()["boot_id"]
    first = (H200, RESET)
    versions = dict((n, lab.node(n)["metadata"]["resourceVersion"]) for n in first)

    # ---- check mode: reports, writes nothing
    res = lab.run(first, check=True)
    assert res.rc == 0, res
    (said,) = res.task("GPU health - what a real run does", H200)
    assert "GPU 3 (%s): remapped rows pending" % lab.bus_id(H200, 3) in said["msg"], said
    assert "GPU 2 (%s): an NVLink is down (link 4 inactive)" % lab.bus_id(H200, 2) in said["msg"], said
    assert "fails this node" in said["msg"], said
    (marked,) = res.task("GPU health - mark the node", H200)
    assert any("add taint %s=xid_fatal:NoSchedule" % TAINT in c for c in marked["changes"]), marked
    (said,) = res.task("GPU health - what a real run does", RESET)
    assert "A real run first resets GPU 0" in said["msg"], said
    assert "GPU 1 (%s) not reset - in use: PID 4242 nv-hostengine" % lab.bus_id(RESET, 1) in said["msg"], said
    (sequence,) = res.task("The sequence a real run takes on this node (check mode)", RESET)
    assert "reset GPU 0, 1 where idle" in sequence["msg"], sequence
    assert dict((n, lab.node(n)["metadata"]["resourceVersion"]) for n in first) == versions
    assert lab.resets(RESET) == []

    # ---- the real run of the whole batch
    res = lab.run(sorted(lab.sims))
    assert res.rc != 0, res
    failures = dict((f[0], f[2]) for f in res.failures())
    assert sorted(failures) == sorted(list(PER_FINDING) + [H200, RESET]), res
    assert [f for f in res.failures() if FAIL_TASK not in f[1]] == [], res
    for node, (kind, reason, words, fix) in PER_FINDING.items():
        message = failures[node]
        who = "GPU (PCI 0000:07:00.0)" if kind == "gpu_missing" else "GPU 0 (%s)" % lab.bus_id(node, 0)
        assert "%s: %s" % (who, words) in message and fix in message, (node, message)
        assert "stays cordoned" in message and "\n" not in message, (node, message)
        marks = _marks(lab.node(node))
        assert marks["unschedulable"] and marks["cordoned_by"] == OURS, (node, marks)
        assert marks["taints"] == [{"key": TAINT, "value": kind, "effect": "NoSchedule"}], (node, marks)
        condition = marks["condition"]
        assert condition["status"] == "False" and condition["reason"] == reason, (node, condition)
        head = "2 GPU health findings block" if kind == "gpu_missing" else "1 GPU health finding blocks"
        assert condition["message"].startswith("%s this node: [1] %s: %s" % (head, who, words)), (node, condition)
        assert CONFIG_LABEL not in lab.node(node)["metadata"]["labels"], node          # not labelled
        assert lab.mutations(node) == [], (node, lab.mutations(node))                  # the gate only read the GPUs
    # the missing GPU's Xid 79 is that GPU's, right after its gpu_missing, in the run's message as in the condition
    message, condition = failures["health-missing"], _marks(lab.node("health-missing"))["condition"]
    fell_off = "GPU (PCI 0000:07:00.0): a fatal Xid since boot (Xid 79 "
    assert "(the GPU at that bus, which NVML no longer lists)" in message and "no GPU of this node" not in message
    assert message.index("GPU (PCI 0000:07:00.0): on the PCI bus") < message.index(fell_off), message
    assert "; [2] %s" % fell_off in condition["message"], condition
    # the H200: every finding, per GPU, with its bus id; the administrator's cordon (left unmarked) and taint kept
    message = failures[H200]
    for index, words in ((3, "remapped rows pending"), (1, "a fatal Xid since boot (Xid 79"),
                         (2, "an NVLink is down (link 4 inactive)"), (5, "PCIe link narrower"),
                         (6, "NVLink fabric registration not completed")):
        assert "GPU %d (%s): %s" % (index, lab.bus_id(H200, index), words) in message, message
    marks = _marks(lab.node(H200))
    assert marks["unschedulable"] and marks["cordoned_by"] is None
    assert ADMIN_TAINT in marks["taints"] and {"key": TAINT, "value": "xid_fatal", "effect": "NoSchedule"} in \
        marks["taints"]
    assert marks["condition"]["reason"] == "XidFatal"
    assert marks["condition"]["message"].startswith("5 GPU health findings block this node: [1] GPU 1 (%s)"
                                                    % lab.bus_id(H200, 1)), marks["condition"]
    assert CONFIG_LABEL not in lab.node(H200)["metadata"]["labels"]
    assert lab.mutations(H200) == []
    # the reset node: GPU 0 (idle) reset, GPU 1 (held) not, named with its holder; still cordoned
    message = failures[RESET]
    assert "GPU 1 (%s): remapped rows pending" % lab.bus_id(RESET, 1) in message
    assert "GPU 1 (%s) not reset - in use: PID 4242 nv-hostengine" % lab.bus_id(RESET, 1) in message
    assert "GPU 0 (" not in message
    assert lab.resets(RESET) == [0] and lab.sims[RESET].read_health()["gpus"][0]["remapped_rows"]["pending"] is False
    marks = _marks(lab.node(RESET))
    assert marks["unschedulable"] and marks["cordoned_by"] == OURS and marks["condition"]["reason"] == "RowRemapPending"
    # the healthy and the warning-only nodes of the same batch: released and labelled, the warning shown
    for node in (HEALTHY, WARNS):
        assert _released(lab.node(node)), (node, _marks(lab.node(node)))
        assert lab.node(node)["metadata"]["labels"][CONFIG_LABEL] == "mps-4", node
    (shown,) = res.task("Show the GPUs as they are now", WARNS)
    for words in ("corrected ECC errors", "DCGM's diagnostic warns (dcgmi diag -r 1: software test (Deployment) Fail"):
        assert [line for line in shown["msg"]
                if line.startswith("health, warns: GPU 0 (%s): %s" % (lab.bus_id(WARNS, 0), words))], (words, shown)
    (shown,) = res.task("Show the GPUs as they are now", HEALTHY)
    assert not [line for line in shown["msg"] if line.startswith("health, ")], shown
    # the healthy node was burned in (the stand-in dcgmi passes): the Node carries the record the node keeps. (Its
    # loop of steps is [burn_in, health] after nodes whose loop is [health]: ansible-core merges equal includes across
    # hosts, and without each item naming the steps before it the gate read the GPUs before the burn-in ran.)
    assert BURN_IN in (lab.node(HEALTHY)["metadata"].get("annotations") or {}), (
        res.task("Burn the node in (DCGM's diagnostic, once per driver version and level)", HEALTHY),
        res.task("GPU health - mark the node", HEALTHY), res.task("Read the GPUs and plan every step", HEALTHY))
    burned = json.loads(lab.node(HEALTHY)["metadata"]["annotations"][BURN_IN])
    assert burned["level"] == "quick" and burned["verdict"] == "pass" and burned["failed"] == [], burned
    assert burned["driver"] and burned["time"], burned
    assert BURN_IN not in (lab.node(WARNS)["metadata"].get("annotations") or {})      # never burned in
    for node in (HEALTHY, WARNS):       # DCGM's diagnostic ran (the stand-in), in the plan's one read
        (plan,) = res.task("Read the GPUs and plan every step", node)
        assert plan["health"]["dcgm"]["ran"] is True, (node, plan["health"]["dcgm"])
    (plan,) = res.task("Read the GPUs and plan every step", "health-ecc")
    assert plan["health"]["dcgm"] is None                               # off by default

    # ---- fixed: the faults cleared, the holder gone, the H200's Xid (in this boot's log until a reboot) made a warning
    for index in (2, 3, 5, 6):
        lab.sims[H200].inject_health(index, "healthy")
    lab.sims[RESET].release("dcgm")
    res = lab.run(first, gpu_node_health_policy={"xid_fatal": "warn"})
    assert res.rc == 0, res
    # the gate's taint and condition are gone; the administrator's cordon and taint stay
    marks = _marks(lab.node(H200))
    assert marks == {"unschedulable": True, "cordoned_by": None, "taints": [ADMIN_TAINT], "condition": None}, marks
    (shown,) = res.task("Show the GPUs as they are now", H200)
    assert [line for line in shown["msg"] if line.startswith("health, warns: GPU 1 (") and "Xid 79" in line], shown
    assert lab.node(H200)["metadata"]["labels"][CONFIG_LABEL] == "mps-4"
    # the reset node: GPU 1 reset now, released in the same boot, no reboot
    assert lab.resets(RESET) == [0, 1]
    assert _released(lab.node(RESET)), _marks(lab.node(RESET))
    assert lab.node(RESET)["metadata"]["labels"][CONFIG_LABEL] == "mps-4"
    assert lab.sims[RESET].raw_state()["boot_id"] == reset_boot
    assert [c for c in lab.sims[RESET].raw_state()["call_log"] if c.get("event") == "reboot"] == []
