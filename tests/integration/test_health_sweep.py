"""The fleet health sweep (health.yml, issue 50) on a fake cluster of 20 simulated one-GPU nodes: the fake API server,
the sweep's own modules (gpu_health_read on each node, health_quarantine and health_report on the controller), the
simulator's test hooks for the faults. Nothing is timed except the hung read's bound (its deadline plus 10 s)."""
import glob
import json
import os
import time

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.support.ansible_run import ROOT, run_playbook
from tests.support.fake_kube_api import FakeKubeApi

pytestmark = [pytest.mark.slow]

SWEEP = os.path.join(ROOT, "health.yml")
LAB = os.path.join(ROOT, "inventories", "lab")
NODES = ["sweep-%02d" % i for i in range(20)]
TAINT = "gpuops.nvidia/gpu-unhealthy"
CONDITION = "GpuopsNvidiaGpuHealthy"
RECORD = "gpuops.nvidia/health-quarantine"
LAST = "gpuops.nvidia/health-last-quarantined"
CORDONED_BY = "gpuops.nvidia/cordoned-by"
ADMIN_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
MUTATING = ("set_mig_mode", "reset_gpu", "create_gpu_instance", "destroy_gpu_instance", "create_compute_instance",
            "destroy_compute_instance", "set_compute_mode", "set_persistence_mode", "reboot")


class Fleet(object):
    """20 one-GPU H200 nodes (``h200-x1``) in a second inventory under the lab's groups, a fake API server listing
    them as GPU nodes, and the simulator's hooks on each node's state file."""

    def __init__(self, tmp_path, nodes=tuple(NODES)):
        self.tmp = tmp_path
        self.nodes = list(nodes)
        self.api = FakeKubeApi(tokens=None).start()
        self.kubeconfig = str(tmp_path / "kubeconfig")
        with open(self.kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        for i, node in enumerate(self.nodes):
            self.api.add_node(node, internal_ip="10.0.1.%d" % (10 + i), labels={"nvidia.com/gpu.present": "true"})
        self.state = tmp_path / "lab-state"
        self.state.mkdir()
        self.reports = tmp_path / "reports"
        self.inventory = str(tmp_path / "sweep-nodes.yml")
        hosts = dict((n, {"gpuops_simulated_machine": "h200-x1", "gpuops_repo_dir": ROOT}) for n in self.nodes)
        with open(self.inventory, "w") as handle:
            yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}, handle)
        self.sims = {}
        for node in self.nodes:
            # with the node's root, as the sweep's modules see it (GPUOPS_SIMULATED_ROOT): a reboot here is the boot id
            # the node's read finds there
            self.sims[node] = SimulatedBackend(str(self.state / ("%s.json" % node)), shape="h200-x1",
                                               root=str(self.state / node))
            self.sims[node].read_all()

    def stop(self):
        self.api.stop()

    def sweep(self, check=False, **extra):
        ev = dict(gpuops_lab_state_dir=str(self.state), gpuops_kubeconfig=self.kubeconfig,
                  gpuops_health_report_dir=str(self.reports))
        ev.update(extra)
        env = {"HOME": str(self.tmp), "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}
        data, proc = run_playbook(SWEEP, inventory=LAB, extra_vars=ev, env=env, check=check,
                                  args=("-i", self.inventory, "--limit", ",".join(self.nodes)))
        assert data is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
        return Sweep(data, proc)

    def node(self, name):
        return self.api.get("", "nodes", name)

    def quarantined(self):
        return sorted(n for n in self.nodes if any(t["key"] == TAINT for t in self.node(n)["spec"].get("taints") or []))

    def marks(self, name):
        node = self.node(name)
        ours = [c for c in node["status"].get("conditions") or [] if c["type"] == CONDITION]
        return {"unschedulable": bool(node["spec"].get("unschedulable")),
                "cordoned_by": (node["metadata"].get("annotations") or {}).get(CORDONED_BY),
                "taints": node["spec"].get("taints") or [], "condition": ours[0] if ours else None,
                "record": (node["metadata"].get("annotations") or {}).get(RECORD)}

    def mutations(self, name):
        return [c.get("call") for c in self.sims[name].raw_state()["call_log"] if c.get("call") in MUTATING]


class Sweep(object):
    def __init__(self, data, proc):
        self.data, self.proc, self.rc = data, proc, proc.returncode

    def task(self, name):
        """The results of the first task whose name contains ``name``, by host."""
        for play in self.data["plays"]:
            for task in play["tasks"]:
                if name in task["task"]["name"]:
                    return task["hosts"]
        return {}

    def one(self, name):
        hosts = self.task(name)
        assert len(hosts) == 1, (name, sorted(hosts))
        return list(hosts.values())[0]

    def report(self):
        return self.one("the fleet health report")["report"]

    def rows(self):
        return dict((r["node"], r) for r in self.report()["nodes"])

    def __str__(self):
        return "rc=%s\n%s\n%s" % (self.rc, self.proc.stdout[-4000:], self.proc.stderr[-2000:])


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.stop()


def test_three_faults_over_three_sweeps_each_released_after_two_healthy_sweeps(fleet):
    """Check mode first (a fault on one node: reported, nothing marked, no cursor or report written); then three
    faults, one per sweep, each cleared the sweep after it: exactly those three quarantined, each released by the
    second healthy sweep after its fault; an administrator's cordon and taint on one of them kept throughout; the GPUs
    never changed; a converged fleet's sweep writes nothing."""
    a, b, c = "sweep-03", "sweep-11", "sweep-17"
    admin = fleet.node(b)
    admin["spec"].update(unschedulable=True, taints=[ADMIN_TAINT])
    fleet.api.put(admin)
    fleet.sims[a].inject_health(0, "row_remap_pending")

    check = fleet.sweep(check=True)
    assert check.rc == 0, check
    assert check.rows()[a]["state"] == "quarantined" and check.report()["sweep"]["check_mode"] is True
    assert fleet.quarantined() == [] and fleet.api.writes(dry_run=False) == []
    assert not fleet.reports.exists() or os.listdir(str(fleet.reports)) == []
    assert not glob.glob(str(fleet.state / "*" / "var" / "lib" / "gpuops" / "health-cursor.json"))

    # sweep 1: a's fault
    limit = {"gpuops_health_breaker_percent": 15}          # three nodes in the window: 15 % of 20
    first = fleet.sweep(**limit)
    assert first.rc == 0, first
    assert fleet.quarantined() == [a]
    assert first.rows()[a]["actions"] == ["quarantined"]
    # sweep 2: a healthy again (1 of 2), b's fault (an Xid 48 arriving between sweeps)
    fleet.sims[a].inject_health(0, "row_remap_pending", False)
    fleet.sims[b].add_xid(0, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                                 "framebuffer at partition 0, subpartition 0.")
    second = fleet.sweep(**limit)
    assert second.rc == 0, second
    assert fleet.quarantined() == [a, b]
    assert second.rows()[a]["actions"] == ["healthy sweep 1 of 2"]
    assert json.loads(fleet.marks(a)["record"])["healthy_sweeps"] == 1
    # sweep 3: a released; b's Xid stays blocking for the rest of its boot (its GPU needs a reset or a reboot), c's
    # fault
    fleet.sims[c].inject_health(0, "ecc_volatile_uncorrected", 2)
    third = fleet.sweep(**limit)
    assert third.rc == 0, third
    assert fleet.quarantined() == [b, c]
    assert third.rows()[a]["state"] == "released" and third.rows()[a]["actions"] == ["released after 2 healthy sweeps"]
    marks = fleet.marks(a)
    assert not marks["unschedulable"] and marks["condition"] is None and marks["record"] is None
    # b's GPU rebooted: the Xid is gone with the boot; c's ECC count cleared by it own reset-equivalent
    fleet.sims[b].reboot()
    fleet.sims[c].inject_health(0, "healthy")
    fourth = fleet.sweep(**limit)
    fifth = fleet.sweep(**limit)
    assert fourth.rc == 0 and fifth.rc == 0, (fourth, fifth)
    assert fleet.quarantined() == []
    assert fifth.rows()[b]["state"] == "released" and fifth.rows()[c]["state"] == "released"
    # the administrator's cordon and taint on b stayed through its quarantine and its release
    marks = fleet.marks(b)
    assert marks["unschedulable"] and marks["taints"] == [ADMIN_TAINT] and marks["cordoned_by"] is None
    # the GPUs were only read (the test's reboot of b is an event of the simulator's log, not a call)
    assert [n for n in NODES if fleet.mutations(n)] == []
    # a converged fleet: the next sweep writes nothing
    writes = len(fleet.api.writes(accepted=True))
    again = fleet.sweep(**limit)
    assert again.rc == 0 and len([w for w in fleet.api.writes(accepted=True)
                                  if "/leases/" not in w["path"]]) == len([w for w in fleet.api.writes(
                                      accepted=True)[:writes] if "/leases/" not in w["path"]]), again
    # the reports: one per real sweep, with the history's plot
    reports = sorted(glob.glob(str(fleet.reports / "health-report-2*.json")))
    assert len(reports) >= 1
    with open(str(fleet.reports / "health-report-latest.html")) as handle:
        assert "<svg" in handle.read()


def test_the_breaker_quarantines_two_of_six_and_fails_naming_it_and_a_hung_read_is_unresponsive(fleet):
    """Six of twenty nodes fail at once at the default 10 %: two quarantined, the sweep fails naming the breaker, the
    four others left in service with their findings in the report; a second sweep inside the window quarantines no
    more. One more node's NVML read never returns: its finding is `gpu_unresponsive` within its deadline plus 10 s,
    and every other node's read finishes."""
    failing = NODES[:6]
    for node in failing:
        fleet.sims[node].inject_health(0, "row_remap_failure")
    hung = NODES[10]
    fleet.sims[hung].inject_health(0, "hang", True)
    deadline = 3
    started = time.monotonic()
    res = fleet.sweep(gpuops_health_breaker_max_nodes=10, gpu_node_health_deadline=deadline)
    assert res.rc != 0, res
    reads = res.task("read the GPUs' health")
    assert sorted(reads) == NODES and not [n for n, r in reads.items() if r.get("failed")], res
    hung_read = reads[hung]
    assert [u["gpu"] for u in hung_read["unresponsive"]] == [0]
    assert [f["kind"] for f in hung_read["health"]["gate"]["blocking"]] == ["gpu_unresponsive"]
    assert hung_read["unresponsive"][0]["seconds"] <= deadline + 10
    assert time.monotonic() - started < 600          # (the whole run: the hung read did not hang the job)
    failed = res.one("fail where the quarantine failed")
    assert failed["msg"].startswith("circuit breaker open: 7 unhealthy nodes were to be newly quarantined, and at "
                                    "most 2 may be in 24 h (10 % of 20 GPU nodes"), failed["msg"]
    assert fleet.quarantined() == NODES[:2]
    rows = res.rows()
    assert [n for n in NODES if rows[n]["state"] == "held_by_breaker"] == NODES[2:6] + [hung]
    assert rows[NODES[4]]["findings"][0]["kind"] == "row_remap_failure"
    assert res.report()["sweep"]["breaker"]["open"] is True

    again = fleet.sweep(gpu_node_health_deadline=deadline)
    assert again.rc != 0 and "2 already in this window" in again.one("fail where the quarantine failed")["msg"]
    assert fleet.quarantined() == NODES[:2]
