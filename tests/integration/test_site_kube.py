"""site.yml's Kubernetes part against the fake API server (tests/support/fake_kube_api.py, real HTTP, the real
kubernetes client) with the real helm binary: the device plugin release carries every group's config, each node is
labelled with its own, a node that needs a MIG change is cordoned (its GPU pods drained when enabled) and uncordoned,
a node already in its declared state is never cordoned, and the GPU Operator's mig-manager is not fought. The
release's DaemonSet pods run on the nodes (tests/support/fake_daemonsets.py), so the node flow's pause, verify and
uncordon run as on a live cluster (tests/integration/test_site_chart_flow.py tests that flow itself)."""
import os

import pytest
import yaml

from tests.integration.site_helpers import HELM, Site
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.lab_cluster import lab_nodes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

CONFIG_LABEL = "nvidia.com/device-plugin.config"


def _pod(name, node, gpu):
    resources = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {"requests": {"cpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": resources}]},
            "status": {"phase": "Running"}}


def _cordon_patches(api, node):
    out = []
    for req in api.requests:
        if req["method"] == "PATCH" and req["path"] == "/api/v1/nodes/%s" % node and not req["query"].get("dryRun"):
            spec = (req["body"] or {}).get("spec") or {}
            if "unschedulable" in spec:
                out.append(spec["unschedulable"])
    return out


@pytest.fixture
def kube(tmp_path):
    """The fake API server without tokens (the kubernetes client sends bearer tokens only over https)."""
    api = FakeKubeApi(tokens=None).start()
    api.kubeconfig_path = str(tmp_path / "kubeconfig")
    with open(api.kubeconfig_path, "w") as handle:
        yaml.safe_dump(api.kubeconfig(), handle)
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def cluster(kube, tmp_path):
    kube_api = kube
    kube_api.add_node("lab-dgx-a100", internal_ip="10.0.0.11")
    kube_api.add_node("lab-hgx-h200", internal_ip="10.0.0.12")
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    site = Site(tmp_path, gpuops_kubeconfig=kube_api.kubeconfig_path, cluster_device_plugin_helm=HELM)
    site.extra["cluster_device_plugin_chart_path"] = site.chart()
    # the device plugin release's pods, on the nodes its affinity admits (tests/support/fake_daemonsets.py)
    shapes = lab_nodes()
    fake = FakeDaemonSets(kube_api, dict((n, (str(site.state / ("%s.json" % n)), shapes[n]))
                                         for n in ("lab-dgx-a100", "lab-hgx-h200"))).start()
    try:
        yield kube_api, site
    finally:
        fake.stop()
        assert fake.errors == [], fake.errors[0]


def test_converge_cordons_only_the_node_that_changes_then_nothing(cluster):
    api, site = cluster
    api.put(_pod("trainer", "lab-dgx-a100", gpu=True))
    api.put(_pod("web", "lab-dgx-a100", gpu=False))
    res = site.run(gpu_node_drain=True)
    assert res.rc == 0, res

    # The A100 needed MIG mode and layout changes: cordoned, its GPU pod evicted, uncordoned.
    assert _cordon_patches(api, "lab-dgx-a100") == [True, False]
    assert not (api.get("", "nodes", "lab-dgx-a100").get("spec") or {}).get("unschedulable")
    assert api.get("", "pods", "trainer", "default") is None
    assert api.get("", "pods", "web", "default") is not None
    cordon = res.task("Cordon the node", "lab-dgx-a100")[0]
    assert cordon["evicted"] == ["default/trainer"] and cordon["unschedulable"] is True
    # The H200 (MIG already off) went from the default config to MPS, which restarts its GPU pods: cordoned too.
    assert _cordon_patches(api, "lab-hgx-h200") == [True, False]

    # Labels: each node selects its own config, which the device plugin's config map holds.
    assert api.node_labels("lab-dgx-a100")[CONFIG_LABEL] == "mig-mixed"
    assert api.node_labels("lab-dgx-a100")["nvidia.com/gpu.deploy.mig-manager"] == "false"
    assert api.node_labels("lab-hgx-h200")[CONFIG_LABEL] == "mps-4"
    cm = api.get("", "configmaps", "nvdp-nvidia-device-plugin-configs", "nvidia-device-plugin")
    assert sorted(cm["data"]) == ["default", "mig-mixed", "mps-4"], cm["data"]
    assert "migStrategy: mixed" in cm["data"]["mig-mixed"] and "replicas: 4" in cm["data"]["mps-4"]
    assert api.get("node.k8s.io", "runtimeclasses", "nvidia")["handler"] == "nvidia"

    # Second run: nothing changes, nobody is cordoned.
    seen = len(api.requests)
    res = site.run(gpu_node_drain=True)
    assert res.rc == 0, res
    assert res.changed("lab-dgx-a100") == 0 and res.changed("lab-hgx-h200") == 0, res
    assert [r for r in api.requests[seen:] if r["method"] != "GET" and not r["query"].get("dryRun")
            and r["path"].startswith("/api/v1/nodes")] == []

    # A run killed between cordon and uncordon left the A100 cordoned with our mark; an administrator cordoned the
    # H200 by hand. The next run releases our cordon (MIG needs nothing now) and leaves the administrator's.
    mark = "gpuops.nvidia/cordoned-by"
    for name, annotations in (("lab-dgx-a100", {mark: "gpuops.nvidia.gpu_node"}), ("lab-hgx-h200", {})):
        node = api.get("", "nodes", name)
        api.put(dict(node, spec=dict(node.get("spec") or {}, unschedulable=True),
                     metadata=dict(node["metadata"], annotations=annotations)))
    res = site.run(gpu_node_drain=True)
    assert res.rc == 0, res
    a100 = api.get("", "nodes", "lab-dgx-a100")
    assert not a100["spec"].get("unschedulable") and mark not in (a100["metadata"].get("annotations") or {})
    assert api.get("", "nodes", "lab-hgx-h200")["spec"]["unschedulable"] is True
    # On the standalone chart our leftover cordon means an interrupted sequence: the A100's GPU pods are paused and let
    # back (so its device plugin enumerates the GPUs afresh), it is verified, then uncordoned: three changes.
    changed = [name for name in ("Pause the node's GPU DaemonSet pods", "Let the node's GPU DaemonSet pods back",
                                 "Uncordon the node if this collection cordoned it")
               if [t for t in res.task(name, "lab-dgx-a100") if t.get("changed")]]
    assert len(changed) == 3 and res.changed("lab-dgx-a100") == 3 and res.changed("lab-hgx-h200") == 0, (changed, res)


def test_gpu_operator_mig_manager_is_not_fought(cluster):
    api, site = cluster
    # Only the A100 (the node the GPU Operator's mig-manager label is put on, and the only node asserted on): the
    # H200's converge under these settings proves nothing here, and cost about a third of the test's CPU seconds.
    site.limit = ("lab-dgx-a100",)
    api.put(dict(api.get("", "nodes", "lab-dgx-a100"), metadata=dict(
        api.get("", "nodes", "lab-dgx-a100")["metadata"],
        labels={"nvidia.com/mig.config": "all-disabled", "kubernetes.io/hostname": "lab-dgx-a100"})))
    quick = dict(cluster_device_plugin=False, cluster_runtime_class=False)
    res = site.run(**quick)
    assert res.rc != 0
    failed = [f for f in res.failures() if f[0] == "lab-dgx-a100"]
    assert failed and "mig-manager manages MIG here" in failed[0][2] and "gpu_node_mig_owner=collection" in failed[0][2]
    assert site.gpus("lab-dgx-a100")["call_log"] == []          # MIG not touched
    assert _cordon_patches(api, "lab-dgx-a100") == []

    # Told who owns MIG: gpu_operator leaves MIG alone; collection takes it (and labels the node so).
    res = site.run(gpu_node_mig_owner="gpu_operator", **quick)
    assert res.rc == 0, res
    assert not [c for c in site.gpus("lab-dgx-a100")["call_log"] if "mig" in c["call"] or "instance" in c["call"]]
    res = site.run(gpu_node_mig_owner="collection", **quick)
    assert res.rc == 0, res
    assert all(g["mig_current"] is True for g in site.gpus("lab-dgx-a100")["gpus"])
    assert api.node_labels("lab-dgx-a100")["nvidia.com/gpu.deploy.mig-manager"] == "false"
