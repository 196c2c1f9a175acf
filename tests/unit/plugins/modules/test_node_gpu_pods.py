"""node_gpu_pods: the real kubernetes client over real HTTP against the fake API server. Here a timer stands in for
the DaemonSet controller (removes or adds the node's pod); the site tests run the fake controller itself."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from ansible_collections.gpuops.nvidia.plugins.modules import node_gpu_pods
from tests.support.modrun import run_main

NS = "nvidia-device-plugin"
PAUSE = _gpu_pods.pause_expression()


# no K8S_AUTH_* / KUBECONFIG of the machine running the tests, HOME a scratch directory (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")


def daemonset(name, terms):
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NS, "labels": {"app.kubernetes.io/instance": "nvdp"}},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def pod(name, owner, node="gpu-node-1", ready=True):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner, "uid": "u"}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.fixture
def cluster(kube_api):
    kube_api.add_node("gpu-node-1")
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube_api.put(daemonset("nvdp-nvidia-device-plugin", [{"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}, PAUSE]}]))
    kube_api.put(pod("nvdp-plugin-abc", "nvdp-nvidia-device-plugin"))
    return kube_api


def args(kube_api, **kw):
    base = dict(kubeconfig=kube_api.kubeconfig_path, node_name="gpu-node-1", interval=0.05, timeout=5,
                daemonsets=[{"namespace": NS, "selector": "app.kubernetes.io/instance=nvdp"}])
    base.update(kw)
    return base


def at_listing_after_write(kube_api, listings, action):
    """Run ``action`` as the module lists pods for the ``listings``-th time after the first write (not a dry run) the
    fake API server receives, before that listing is answered: the module has then seen the old pods
    ``listings - 1`` times, however long each poll took. Returns the listings seen after the write."""
    seen = []

    def hook(record):
        if record["method"] != "GET" or not record["path"].endswith("/pods"):
            return
        if [r for r in list(kube_api.requests) if r["method"] != "GET" and not r["query"].get("dryRun")]:
            seen.append(record)
            if len(seen) == listings:
                action()
    kube_api.on_request = hook
    return seen


def node_meta(kube_api):
    meta = kube_api.get("", "nodes", "gpu-node-1")["metadata"]
    return meta.get("labels") or {}, meta.get("annotations") or {}


def test_excludes_paused_needs_the_expression_in_every_term():
    assert _gpu_pods.excludes_paused({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [PAUSE]}, {"matchExpressions": [
            {"key": _gpu_pods.PAUSE_LABEL, "operator": "DoesNotExist"}]}]}}}})
    assert not _gpu_pods.excludes_paused({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [PAUSE]}, {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}}})
    assert not _gpu_pods.excludes_paused({})
    assert not _gpu_pods.excludes_paused({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            dict(PAUSE, values=["false"])]}]}}}})


def test_pause_waits_until_the_pods_left_then_a_second_pause_changes_nothing(cluster):
    # the DaemonSet controller removes the pod as the module lists the pods for the third time after labelling
    listings = at_listing_after_write(cluster, 3, lambda: cluster.objects.pop(("", "pods", NS, "nvdp-plugin-abc")))
    res = run_main(node_gpu_pods.main, args(cluster, state="paused", timeout=120), diff=True)
    cluster.on_request = None
    assert res["changed"] is True and res["paused"] is True and not res.get("failed"), res
    # it kept polling while the pod stayed, and stopped at the listing that no longer had it
    assert res["holding"] == [NS + "/nvdp-nvidia-device-plugin"] and len(listings) == 3 and res["waited"] > 0
    labels, annotations = node_meta(cluster)
    assert labels[_gpu_pods.PAUSE_LABEL] == "true"
    assert annotations[_gpu_pods.PAUSED_BY] == "gpuops.nvidia.gpu_node"
    assert json.loads(annotations[_gpu_pods.PAUSED_DAEMONSETS]) == [NS + "/nvdp-nvidia-device-plugin"]
    assert res["diff"]["after"][_gpu_pods.PAUSE_LABEL] == "true" and res["diff"]["before"][_gpu_pods.PAUSE_LABEL] is None
    writes = len(cluster.writes())
    again = run_main(node_gpu_pods.main, args(cluster, state="paused"))
    assert again["changed"] is False and again["paused"] is True and len(cluster.writes()) == writes


def test_check_mode_reports_the_pause_and_writes_nothing(cluster):
    res = run_main(node_gpu_pods.main, args(cluster, state="paused"), check_mode=True, diff=True)
    assert res["changed"] is True and res["holding"] == [NS + "/nvdp-nvidia-device-plugin"]
    assert cluster.writes() == [] and _gpu_pods.PAUSE_LABEL not in node_meta(cluster)[0]


def test_a_daemonset_that_would_stay_is_named_and_nothing_changes(cluster):
    cluster.put(daemonset("dcgm-exporter", None))
    res = run_main(node_gpu_pods.main, args(cluster, state="paused", daemonsets=[
        {"namespace": NS, "selector": "app.kubernetes.io/instance=nvdp"}, {"namespace": NS, "name": "dcgm-exporter"}]))
    assert res["failed"] and "DaemonSet %s/dcgm-exporter does not keep its pods off a paused node" % NS in res["msg"]
    assert "NotIn" in res["msg"] and "nothing changed" in res["msg"]
    assert cluster.writes() == []


def test_pods_that_do_not_leave_fail_the_task_and_leave_the_node_paused(cluster):
    res = run_main(node_gpu_pods.main, args(cluster, state="paused", timeout=0))
    assert res["failed"] and res["pending"] == [NS + "/nvdp-plugin-abc"] and "stays paused" in res["msg"]
    assert node_meta(cluster)[0][_gpu_pods.PAUSE_LABEL] == "true"


def test_resume_releases_our_pause_and_waits_for_a_ready_pod(cluster):
    cluster.objects.pop(("", "pods", NS, "nvdp-plugin-abc"))
    cluster.put({"apiVersion": "v1", "kind": "Node", "metadata": dict(
        cluster.get("", "nodes", "gpu-node-1")["metadata"], labels={_gpu_pods.PAUSE_LABEL: "true"},
        annotations={_gpu_pods.PAUSED_BY: "gpuops.nvidia.gpu_node",
                     _gpu_pods.PAUSED_DAEMONSETS: json.dumps([NS + "/nvdp-nvidia-device-plugin"])})})
    cluster.put(pod("nvdp-plugin-new", "nvdp-nvidia-device-plugin", ready=False))
    # the pod becomes Ready as the module lists the pods for the third time after it lifted the pause
    ready = pod("nvdp-plugin-new", "nvdp-nvidia-device-plugin", ready=True)
    listings = at_listing_after_write(cluster, 3, lambda: cluster.put(ready))
    res = run_main(node_gpu_pods.main, args(cluster, state="running", timeout=120))
    cluster.on_request = None
    assert res["changed"] is True and res["paused"] is False and len(listings) == 3 and res["waited"] > 0, res
    labels, annotations = node_meta(cluster)
    assert _gpu_pods.PAUSE_LABEL not in labels and _gpu_pods.PAUSED_BY not in annotations
    again = run_main(node_gpu_pods.main, args(cluster, state="running"))
    assert again["changed"] is False


def test_a_pause_someone_else_set_is_never_released(cluster):
    cluster.put({"apiVersion": "v1", "kind": "Node", "metadata": dict(
        cluster.get("", "nodes", "gpu-node-1")["metadata"], labels={_gpu_pods.PAUSE_LABEL: "true"})})
    res = run_main(node_gpu_pods.main, args(cluster, state="running"))
    assert res["changed"] is False and res["paused"] is True and res["paused_by"] is None
    assert node_meta(cluster)[0][_gpu_pods.PAUSE_LABEL] == "true" and cluster.writes() == []


def test_bad_input_is_refused_before_any_request(cluster):
    res = run_main(node_gpu_pods.main, args(cluster, state="paused", timeout=-1, daemonsets=[
        {"namespace": NS, "selector": "a=b", "name": "x"}]))
    assert res["failed"] and "timeout" in res["msg"] and "not both" in res["msg"] and "nothing changed" in res["msg"]
    assert cluster.writes() == []
