"""dra_driver with the REAL helm binary against the fake API server (tests/support/fake_kube_api.py) over real HTTP,
with the stand-in of NVIDIA's chart (tests/fixtures/charts/nvidia-dra-driver-gpu): what a cluster would hold after
each run, and what is refused before helm writes anything."""
import os
import shutil

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from ansible_collections.gpuops.nvidia.plugins.modules import dra_driver
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.modrun import run_main as run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
NS = "nvidia-dra-driver-gpu"
DS = "nvidia-dra-driver-gpu-kubelet-plugin"

pytestmark = pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")


def _cluster(tmp_path, monkeypatch, server_version):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var.startswith("HELM_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    api = FakeKubeApi(tokens=None, server_version=server_version).start()
    api.kubeconfig_path = str(tmp_path / "kubeconfig")
    with open(api.kubeconfig_path, "w") as handle:
        yaml.safe_dump(api.kubeconfig(), handle)
    api.chart = str(tmp_path / "nvidia-dra-driver-gpu")
    shutil.copytree(CHART, api.chart)
    api.add_node("gpu-1", labels={"nvidia.com/gpu.present": "true"}, allocatable={"cpu": "64"})
    return api


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    api = _cluster(tmp_path, monkeypatch, "v1.34.1")
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def old_cluster(tmp_path, monkeypatch):
    api = _cluster(tmp_path, monkeypatch, "v1.33.2")
    try:
        yield api
    finally:
        api.stop()


def args(cluster, **kw):
    base = dict(binary_path=HELM, chart_path=cluster.chart, kubeconfig=cluster.kubeconfig_path, nodes=["gpu-1"])
    base.update(kw)
    return base


def daemonset(cluster):
    return cluster.get("apps", "daemonsets", DS, NS)


def device_classes(cluster):
    return sorted(name for (g, plural, ns, name) in cluster.objects if plural == "deviceclasses")


def helm_writes(res):
    return [c[1] for c in res.get("commands", []) if c[1] in ("upgrade", "install", "uninstall", "rollback")]


def test_check_mode_reports_the_install_and_writes_nothing(cluster):
    res = run_module(dra_driver.main, args(cluster), check_mode=True, diff=True)
    assert res["changed"] is True, res.get("msg")
    assert res["changes"] == ["release nvidia-dra-driver-gpu is not installed in namespace %s" % NS]
    assert cluster.writes() == [] and helm_writes(res) == []
    assert res["diff"]["before"] == {}
    values = res["diff"]["after"]["values"]
    assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["featureGates"] == {"MPSSupport": True, "TimeSlicingSettings": True}
    assert res["resource_api"] == {"versions": ["v1"], "server_version": "v1.34.1"}


def test_install_idempotent_upgrade_and_uninstall(cluster):
    first = run_module(dra_driver.main, args(cluster))
    assert first["changed"] is True, first.get("msg")
    assert first["release"]["status"] == "deployed" and first["release"]["revision"] == "1"
    assert device_classes(cluster) == ["gpu.nvidia.com", "mig.nvidia.com"]
    gpu_class = cluster.get("resource.k8s.io", "deviceclasses", "gpu.nvidia.com")
    assert gpu_class["apiVersion"] == "resource.k8s.io/v1"
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in gpu_class["spec"]["selectors"][0]["cel"]["expression"]
    ds = daemonset(cluster)
    pod = ds["spec"]["template"]
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/name": "nvidia-dra-driver-gpu",
                                         "app.kubernetes.io/instance": "nvidia-dra-driver-gpu",
                                         "nvidia-dra-driver-gpu-component": "kubelet-plugin"}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["gpus"]     # compute_domains=false
    env = dict((e["name"], e.get("value")) for e in pod["spec"]["containers"][0]["env"])
    assert env["FEATURE_GATES"] == "MPSSupport=true,TimeSlicingSettings=true,"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert len(terms) == 3 and all(_gpu_pods.pause_expression() in t["matchExpressions"] for t in terms)
    assert cluster.get("apps", "deployments", "nvidia-dra-driver-gpu-controller", NS) is None
    assert first["kubelet_plugin"] == {"namespace": NS, "name": DS,
                                       "selector": "app.kubernetes.io/instance=nvidia-dra-driver-gpu"}

    writes = len(cluster.writes())
    second = run_module(dra_driver.main, args(cluster))
    assert second["changed"] is False, second["changes"]
    assert len(cluster.writes()) == writes and helm_writes(second) == []

    third = run_module(dra_driver.main, args(cluster, compute_domains=True,
                                             values={"kubeletPlugin": {"tolerations": [{"operator": "Exists"}]}}),
                       diff=True)
    assert third["changed"] is True and third["release"]["revision"] == "2", third.get("msg")
    assert "values differ at" in third["changes"][0]
    pod = daemonset(cluster)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["compute-domains", "gpus"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert cluster.get("apps", "deployments", "nvidia-dra-driver-gpu-controller", NS) is not None

    gone = run_module(dra_driver.main, args(cluster, state="absent"))
    assert gone["changed"] is True and helm_writes(gone) == ["uninstall"]
    assert daemonset(cluster) is None and device_classes(cluster) == []
    assert run_module(dra_driver.main, args(cluster, state="absent"))["changed"] is False


def test_a_users_affinity_keeps_its_terms_and_gains_the_pause_expression(cluster):
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "example.com/dra", "operator": "In", "values": ["yes"]}]}]}}}
    res = run_module(dra_driver.main, args(cluster, values={"kubeletPlugin": {"affinity": mine}}))
    assert res["changed"] is True, res.get("msg")
    terms = daemonset(cluster)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "example.com/dra", "operator": "In", "values": ["yes"]},
                                           _gpu_pods.pause_expression()]}]


@pytest.mark.parametrize("values, words", [
    ({"resources": {"gpus": {"enabled": False}}}, ["values.resources.gpus.enabled is set by the module"]),
    ({"gpuResourcesEnabledOverride": False}, ["values.gpuResourcesEnabledOverride", "templates/validation.yaml"]),
    ({"resources": {"computeDomains": {"enabled": True}}}, ["resources.computeDomains.enabled",
                                                            "option compute_domains"]),
    ({"featureGates": {"MPSSupport": False}}, ["values.featureGates.MPSSupport", "alpha gate"]),
    ({"featureGates": {"TimeSlicingSettings": False}}, ["values.featureGates.TimeSlicingSettings"]),
    ({"namespace": "elsewhere"}, ["values.namespace is refused", "namespace option"]),
    ({"nvidiaCtkPath": "/usr/bin/nvidia-ctk"}, ["values.nvidiaCtkPath is refused", "no longer supported"]),
    ({"resources": 3}, ["values.resources must be a mapping"]),
])
def test_owned_and_refused_values_change_nothing(cluster, values, words):
    res = run_module(dra_driver.main, args(cluster, values=values))
    assert res["failed"] and res["msg"].startswith("invalid input, nothing changed"), res
    for word in words:
        assert word in res["msg"]
    assert cluster.writes() == [] and "commands" not in res


def test_other_feature_gates_are_kept(cluster):
    res = run_module(dra_driver.main, args(cluster, values={"featureGates": {"IMEXDaemonsWithDNSNames": True}}),
                     check_mode=True)
    assert res["chart_values"]["featureGates"] == {"IMEXDaemonsWithDNSNames": True, "MPSSupport": True,
                                                   "TimeSlicingSettings": True}


def test_a_cluster_without_resource_v1_is_refused(old_cluster):
    for check_mode in (True, False):
        res = run_module(dra_driver.main, args(old_cluster), check_mode=check_mode)
        assert res["failed"], res
        assert "gitVersion v1.33.2" in res["msg"] and "no resource.k8s.io version" in res["msg"]
        assert "resource.k8s.io/v1" in res["msg"] and "1.34" in res["msg"]
        assert helm_writes(res) == [] and old_cluster.writes() == []


def test_a_cluster_with_only_beta_dra_is_refused_naming_its_versions(tmp_path, monkeypatch):
    api = _cluster(tmp_path, monkeypatch, "v1.33.2")
    api.resource_api_versions = ["v1beta2", "v1beta1"]
    try:
        res = run_module(dra_driver.main, args(api))
        assert res["failed"] and "serves resource.k8s.io/v1beta2, resource.k8s.io/v1beta1" in res["msg"], res
        assert api.writes() == []
    finally:
        api.stop()


def _device_plugin_pod(cluster, node, ds, labels, namespace="nvidia-device-plugin"):
    cluster.put({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": ds, "namespace": namespace},
                 "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}}}})
    cluster.put({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "%s-x1" % ds, "namespace": namespace, "labels": labels,
                              "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds,
                                                   "uid": "u"}]},
                 "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
                 "status": {"phase": "Running"}})


CHART_LABELS = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": "nvdp"}


def test_a_node_running_the_device_plugin_chart_is_refused(cluster):
    _device_plugin_pod(cluster, "gpu-1", "nvdp-nvidia-device-plugin",
                       dict(CHART_LABELS, **{"app.kubernetes.io/component": "device-plugin"}))
    before = len(cluster.writes())
    for check_mode in (True, False):
        res = run_module(dra_driver.main, args(cluster), check_mode=check_mode)
        assert res["failed"], res
        assert "node gpu-1" in res["msg"] and "NVIDIA's device plugin chart" in res["msg"]
        assert "nvidia-device-plugin/nvdp-nvidia-device-plugin-x1" in res["msg"]
        assert list(res["conflicts"]) == ["gpu-1"]
        assert helm_writes(res) == [] and len(cluster.writes()) == before


def test_gpu_feature_discovery_alone_is_no_conflict(cluster):
    _device_plugin_pod(cluster, "gpu-1", "nvdp-nvidia-device-plugin-gpu-feature-discovery",
                       dict(CHART_LABELS, **{"app.kubernetes.io/component": "gfd"}))
    res = run_module(dra_driver.main, args(cluster), check_mode=True)
    assert not res.get("failed") and res["changed"] is True, res.get("msg")


def test_the_gpu_operators_device_plugin_is_refused(cluster):
    _device_plugin_pod(cluster, "gpu-1", "nvidia-device-plugin-daemonset", {"app": "nvidia-device-plugin-daemonset"},
                       namespace="gpu-operator")
    res = run_module(dra_driver.main, args(cluster), check_mode=True)
    assert res["failed"] and "the GPU Operator's device plugin" in res["msg"], res
    # conflict_check=false: the administrator's call
    assert run_module(dra_driver.main, args(cluster, conflict_check=False), check_mode=True)["changed"] is True


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb", "nvidia.com/gpu.shared"])
def test_a_node_advertising_device_plugin_resources_is_refused(cluster, resource):
    cluster.add_node("gpu-2", allocatable={"cpu": "64", resource: "8"})
    res = run_module(dra_driver.main, args(cluster, nodes=["gpu-1", "gpu-2"]))
    assert res["failed"], res
    assert "node gpu-2: it advertises %s=8" % resource in res["msg"] and "node gpu-1" not in res["msg"]
    assert helm_writes(res) == [] and cluster.writes() == []


def test_zero_device_plugin_resources_and_unknown_nodes(cluster):
    cluster.add_node("gpu-2", allocatable={"cpu": "64", "nvidia.com/gpu": "0"})
    assert run_module(dra_driver.main, args(cluster, nodes=["gpu-2"]), check_mode=True)["changed"] is True
    res = run_module(dra_driver.main, args(cluster, nodes=["gpu-9"]), check_mode=True)
    assert res["failed"] and "node gpu-9: the node is not in the cluster" in res["msg"], res


def test_missing_device_classes_fail_after_the_install(cluster):
    # A chart that is not NVIDIA's (no DeviceClasses): the release installs, then the module says what is missing.
    os.remove(os.path.join(cluster.chart, "templates", "deviceclasses.yaml.gotmpl"))
    res = run_module(dra_driver.main, args(cluster))
    assert res["failed"] and "DeviceClass gpu.nvidia.com, mig.nvidia.com does not exist" in res["msg"], res
