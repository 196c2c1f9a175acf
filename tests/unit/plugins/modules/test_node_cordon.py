"""node_cordon: the real kubernetes client over real HTTP against the fake API server (tests/support)."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import node_cordon
from tests.support.modrun import run_main as run_module


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch, tmp_path):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))


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
    assert kube_api.writes() == []


def test_check_mode_reports_cordon_and_pods_and_touches_nothing(kube_api, node):
    res = run_module(node_cordon.main, args(kube_api, state="cordoned", drain=True), check_mode=True, diff=True)
    assert res["changed"] is True and res["unschedulable"] is True
    assert res["evicted"] == ["jobs/mig", "jobs/train"]
    assert res["diff"] == {"before": {"unschedulable": False}, "after": {"unschedulable": True},
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
