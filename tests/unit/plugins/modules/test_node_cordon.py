"""node_cordon: the real kubernetes client over real HTTP against the fake API server (tests/support)."""

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, failure
from ansible_collections.gpuops.nvidia.plugins.modules import node_cordon
from tests.support.fake_clock import FakeClock
from tests.support.modrun import run_main as run_module


# no K8S_AUTH_* / KUBECONFIG of the machine running the tests, HOME a scratch directory (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")


def _pod(name, node, resources, owner=None, phase="Running"):
    meta = {"name": name, "namespace": "jobs"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "apiVersion": "apps/v1", "uid": "u"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": resources}]},
            "status": {"phase": phase}}


@pytest.fixture
def node(kube_api):
    kube_api.add_node("gpu-node-1", internal_ip="10.0.0.11", labels={"nvidia.com/mig.config": "all-1g"})
    kube_api.add_node("gpu-node-2", internal_ip="10.0.0.12")
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jobs"}})
    kube_api.put(_pod("train", "gpu-node-1", {"limits": {"nvidia.com/gpu": "1"}}))
    kube_api.put(_pod("mig", "gpu-node-1", {"requests": {"nvidia.com/mig-1g.10gb": "1"}}))
    kube_api.put(_pod("web", "gpu-node-1", {"requests": {"cpu": "1"}}))
    kube_api.put(_pod("plugin", "gpu-node-1", {"limits": {"nvidia.com/gpu": "1"}}, owner="DaemonSet"))
    kube_api.put(_pod("done", "gpu-node-1", {"limits": {"nvidia.com/gpu": "1"}}, phase="Succeeded"))
    kube_api.put(_pod("elsewhere", "gpu-node-2", {"limits": {"nvidia.com/gpu": "1"}}))
    return "gpu-node-1"


def args(kube_api, **kw):
    base = dict(kubeconfig=kube_api.kubeconfig_path, node_name="gpu-node-1", hostname=[], internal_ips=[])
    base.update(kw)
    return base


def _unschedulable(kube_api, name):
    return bool((kube_api.get("", "nodes", name).get("spec") or {}).get("unschedulable"))


def _pods(kube_api):
    return sorted(k[3] for k in kube_api.objects if k[1] == "pods")


def test_query_reads_labels_and_changes_nothing(kube_api, node):
    res = run_module(node_cordon.main, args(kube_api))
    assert res["changed"] is False and res["unschedulable"] is False
    assert res["labels"]["nvidia.com/mig.config"] == "all-1g"
    assert res["taints"] == [] and res["conditions"] == [{"type": "Ready", "status": "True", "reason": None}]
    assert kube_api.writes() == []


def test_query_reports_the_taints_and_conditions_the_health_gate_looks_for(kube_api, node):
    stored = kube_api.get("", "nodes", node)
    stored["spec"]["taints"] = [{"key": "gpuops.nvidia/gpu-unhealthy", "value": "xid_fatal", "effect": "NoSchedule"}]
    stored["status"]["conditions"].append({"type": "GpuopsNvidiaGpuHealthy", "status": "False", "reason": "XidFatal",
                                           "message": "1 GPU health finding blocks this node: ..."})
    kube_api.put(stored)
    res = run_module(node_cordon.main, args(kube_api))
    assert res["taints"] == stored["spec"]["taints"]
    assert res["conditions"][-1] == {"type": "GpuopsNvidiaGpuHealthy", "status": "False", "reason": "XidFatal"}


def test_check_mode_reports_cordon_and_pods_and_touches_nothing(kube_api, node):
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", drain=True), check_mode=True, diff=True)
    assert res["changed"] is True and res["unschedulable"] is True
    assert res["evicted"] == ["jobs/mig", "jobs/train"]
    mark = node_cordon.OWNER_ANNOTATION
    assert res["diff"] == {"before": {"unschedulable": False, mark: None}, "after": {"unschedulable": True, mark: None},
                           "before_header": "node/gpu-node-1", "after_header": "node/gpu-node-1"}
    assert kube_api.writes() == [] and not _unschedulable(kube_api, node)
    assert "train" in _pods(kube_api)


def test_cordon_drain_again_then_uncordon(kube_api, node):
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", drain=True))
    assert res["changed"] is True and res["evicted"] == ["jobs/mig", "jobs/train"]
    assert _unschedulable(kube_api, node)
    # only GPU pods of this node went; DaemonSet pods, finished pods, CPU pods and other nodes' pods stay
    assert _pods(kube_api) == ["done", "elsewhere", "plugin", "web"]
    evictions = [r for r in kube_api.requests if r["path"].endswith("/eviction")]
    assert [r["method"] for r in evictions] == ["POST", "POST"]

    res = run_module(node_cordon.main, args(kube_api, state="cordoned", drain=True))
    assert res["changed"] is False and res["evicted"] == [] and res["unschedulable_before"] is True

    res = run_module(node_cordon.main, args(kube_api, state="uncordoned"))
    assert res["changed"] is True and not _unschedulable(kube_api, node)
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned"))
    assert res["changed"] is False


def test_bad_input_changes_nothing(kube_api, node):
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned", drain=True))
    assert res["failed"] and "drain=true needs state=cordoned" in res["msg"]
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", node_name="nope"))
    assert res["failed"] and "nope" in res["msg"]
    assert kube_api.writes() == []


def _mark(kube_api, name):
    return (kube_api.get("", "nodes", name)["metadata"].get("annotations") or {}).get(node_cordon.OWNER_ANNOTATION)


def test_owner_marks_its_cordon_and_releases_only_its_own(kube_api, node):
    mine = dict(owner="gpuops.nvidia.gpu_node")
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", **mine), diff=True)
    assert res["changed"] is True and res["cordoned_by"] is None
    assert res["diff"]["after"] == {"unschedulable": True, node_cordon.OWNER_ANNOTATION: "gpuops.nvidia.gpu_node"}
    # one PATCH sets both, so no kill can leave an unmarked cordon of ours
    patches = [r["body"] for r in kube_api.writes() if r["method"] == "PATCH"]
    assert patches == [{"spec": {"unschedulable": True},
                        "metadata": {"annotations": {node_cordon.OWNER_ANNOTATION: "gpuops.nvidia.gpu_node"}}}]
    assert _unschedulable(kube_api, node) and _mark(kube_api, node) == "gpuops.nvidia.gpu_node"

    # a later run (the first one was killed before it uncordoned) finds the mark: cordon is a no-op...
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", **mine))
    assert res["changed"] is False and res["cordoned_by"] == "gpuops.nvidia.gpu_node"
    # ...another owner's release leaves it alone...
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned", owner="someone-else"))
    assert res["changed"] is False and _unschedulable(kube_api, node)
    # ...and ours releases it, mark and all, once (check mode first: nothing touched)
    seen = len(kube_api.writes())
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned", **mine), check_mode=True)
    assert res["changed"] is True and res["unschedulable"] is False and len(kube_api.writes()) == seen
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned", **mine))
    assert res["changed"] is True and not _unschedulable(kube_api, node) and _mark(kube_api, node) is None
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned", **mine))
    assert res["changed"] is False


def test_owner_never_releases_an_administrators_cordon(kube_api, node):
    run_module(node_cordon.main, args(kube_api, state="cordoned"))          # the admin's, unmarked
    mine = dict(owner="gpuops.nvidia.gpu_node")
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", **mine))
    assert res["changed"] is False and res["unschedulable_before"] is True and _mark(kube_api, node) is None
    res = run_module(node_cordon.main, args(kube_api, state="uncordoned", **mine))
    assert res["changed"] is False and res["unschedulable"] is True and _unschedulable(kube_api, node)


def test_owner_must_fit_an_annotation_value(kube_api, node):
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", owner=""))
    assert res["failed"] and "owner must be 1 to 253 characters" in res["msg"]
    assert kube_api.writes() == []


def test_drain_asks_each_pod_once_retries_a_refused_one_and_gives_up_at_its_deadline(monkeypatch):
    """The drain's wait (the shared _poll): a fake clock places the deadline, nothing sleeps. A pod a
    PodDisruptionBudget refuses (429) is asked again on each read; one evicted is not asked twice; at the deadline the
    run fails naming the pod still there, with the node left cordoned (changed)."""
    clock = FakeClock(100.0)
    listings = iter([["jobs/a", "jobs/b"], ["jobs/a", "jobs/b"], ["jobs/b"]])
    monkeypatch.setattr(node_cordon, "gpu_pods", lambda kube, node, prefix: next(listings, ["jobs/b"]))
    asked = []

    def evict(kube, pod):
        asked.append(pod)
        if pod == "jobs/b":
            raise node_cordon.KubeError("Cannot evict pod as it would violate the pod's disruption budget.", status=429)
    monkeypatch.setattr(node_cordon, "evict", evict)
    with pytest.raises(Failure) as failed:     # raised to the base, which fails the module with it (issue 48)
        node_cordon.drain(None, "gpu-node-1", "nvidia.com/", 3, clock=clock, sleep=clock.sleep)
    got = failure(failed.value)     # what the base passes to fail_json
    assert got["pending"] == ["jobs/b"] and got["changed"] is True and "after 3s: jobs/b" in got["msg"]
    assert asked.count("jobs/a") == 1 and asked.count("jobs/b") == 4     # one ask per read, up to the deadline
    assert sum(clock.sleeps) == 3 and clock.now == 103.0
