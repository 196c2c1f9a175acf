"""The fake API server's ClusterPolicy (served from NVIDIA's CRD schemas) and the fake GPU Operator beside it: what the
operator-path tests rely on. Requests go over real HTTP through the collection's own REST layer (_kube)."""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support import fake_crd
from tests.support.ansible_run import ROOT
from tests.support.fake_gpu_operator import POLICY_FIXTURE, FakeGpuOperator

CP = "/apis/nvidia.com/v1/clusterpolicies"


@pytest.fixture
def kube(kube_api):
    return _kube.Kube(_kube.build_configuration({"host": kube_api.url, "api_key": kube_api.token}))


def _policy():
    with open(POLICY_FIXTURE) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("version", fake_crd.CLUSTERPOLICY_VERSIONS)
def test_each_fixture_is_the_published_crd_schema(version):
    doc = fake_crd.load("clusterpolicies", version)
    assert doc["source"]["repo"] == "NVIDIA/gpu-operator" and doc["source"]["tag"] == version
    assert len(doc["source"]["commit"]) == 40 and doc["source"]["path"].endswith(".yaml")
    assert doc["scope"] == "Cluster" and doc["group"] == "nvidia.com" and doc["version"] == "v1"
    assert doc["names"]["plural"] == "clusterpolicies"
    spec = doc["openAPIV3Schema"]["properties"]["spec"]
    assert "description" not in json.dumps(doc["openAPIV3Schema"])
    has_dp_config = "config" in spec["properties"]["devicePlugin"]["properties"]
    assert has_dp_config is (version != "v1.10.0")       # devicePlugin.config first appears in v1.11.0


def test_create_defaults_and_rejects_what_the_crd_rejects(kube_api, kube):
    created = kube.create("create", CP, _policy())
    # the chart renders migManager.config.name empty (null): dropped, then the schema default fills it in
    assert created["spec"]["migManager"]["config"] == {"name": "default-mig-parted-config", "default": "all-disabled"}
    assert created["spec"]["operator"]["runtimeClass"] == "nvidia"
    bad = {"spec": {"migManager": {"config": {"default": "all-balanced"}}, "devicePlugin": {"config": {"name": 5}},
                    "mig": {"strategy": "both"}}}
    with pytest.raises(_kube.KubeError) as exc:
        kube.patch("patch", CP + "/cluster-policy", bad)
    assert exc.value.status == 422
    causes = dict((c["field"], c["message"]) for c in exc.value.body["details"]["causes"])
    assert causes["spec.migManager.config.default"] == \
        'Unsupported value: "all-balanced": supported values: "all-disabled", ""'
    assert causes["spec.mig.strategy"].startswith('Unsupported value: "both"')
    assert "in body must be of type string" in causes["spec.devicePlugin.config.name"]
    assert exc.value.body["message"].startswith('ClusterPolicy.nvidia.com "cluster-policy" is invalid: [')
    stored = kube_api.get("nvidia.com", "clusterpolicies", "cluster-policy")
    assert stored["spec"]["mig"] == {"strategy": "single"}          # nothing of the rejected patch was kept
    missing = _policy()
    missing["metadata"]["name"] = "other"
    del missing["spec"]["toolkit"]
    with pytest.raises(_kube.KubeError) as exc:
        kube.create("create", CP, missing)
    assert "spec.toolkit: Required value" in exc.value.msg


def test_unknown_fields_are_pruned_and_dry_runs_store_nothing(kube_api, kube):
    kube.create("create", CP, _policy())
    before = kube_api.get("nvidia.com", "clusterpolicies", "cluster-policy")
    answer = kube.patch("patch", CP + "/cluster-policy",
                        {"spec": {"devicePlugin": {"config": {"name": "x", "sharing": "mps"}}, "bogus": 1}},
                        dry_run=True)
    assert answer["spec"]["devicePlugin"]["config"] == {"name": "x"} and "bogus" not in answer["spec"]
    assert kube_api.get("nvidia.com", "clusterpolicies", "cluster-policy") == before
    kube_api.crd_versions = {"clusterpolicies": "v1.10.0"}      # an operator whose CRD predates devicePlugin.config
    answer = kube.patch("patch", CP + "/cluster-policy", {"spec": {"devicePlugin": {"config": {"name": "x"}}}})
    assert "config" not in answer["spec"]["devicePlugin"]


def _operator(kube_api, tmp_path, shapes, **kw):
    for node in shapes:
        kube_api.add_node(node)
    nodes = dict((n, (str(tmp_path / ("%s.json" % n)), s)) for n, s in shapes.items())
    return FakeGpuOperator(kube_api, nodes, **kw).install(), nodes


def _wait(predicate, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _set_mig_config(kube_api, node, doc, value):
    cm = kube_api.get("", "configmaps", "default-mig-parted-config", "gpu-operator")
    cm["data"]["config.yaml"] = yaml.safe_dump(doc)
    kube_api.put(cm)
    obj = kube_api.get("", "nodes", node)
    obj["metadata"]["labels"]["nvidia.com/mig.config"] = value
    kube_api.put(obj)


def test_mig_manager_pending_then_success_or_failed_and_no_retry(kube_api, tmp_path):
    operator, nodes = _operator(kube_api, tmp_path, {"a100": "dgx-a100-40gb"})
    labels = kube_api.node_labels("a100")
    assert labels["nvidia.com/mig.config"] == "all-disabled" and labels["nvidia.com/gpu.deploy.mig-manager"] == "true"
    operator.start()
    try:
        assert _wait(lambda: kube_api.node_labels("a100").get("nvidia.com/mig.config.state") == "success")
        assert operator.history == [("a100", "all-disabled", "success")]     # nothing to change: no pending
        doc = {"version": "v1", "mig-configs": {
            "two-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}],
            "too-many": [{"devices": [0], "mig-enabled": True, "mig-devices": {"2g.10gb": 4}}]}}
        _set_mig_config(kube_api, "a100", doc, "two-3g")
        assert _wait(lambda: operator.history[-1] == ("a100", "two-3g", "success"))
        assert operator.history[-2] == ("a100", "two-3g", "pending")
        gpus = SimulatedBackend(nodes["a100"][0]).read_all()["gpus"]
        assert all(g["mig_mode_current"] == "Enabled" and len(g["mig_devices"]) == 2 for g in gpus)
        _set_mig_config(kube_api, "a100", doc, "too-many")      # four 2g.10gb do not fit a 7-slice A100
        assert _wait(lambda: operator.history[-1] == ("a100", "too-many", "failed"))
        assert kube_api.node_labels("a100")["nvidia.com/mig.config.state"] == "failed"
        time.sleep(0.5)
        assert operator.history[-1] == ("a100", "too-many", "failed")           # not retried by itself
    finally:
        operator.stop()
    assert operator.errors == []


def test_device_plugin_advertises_from_the_configs(kube_api, tmp_path):
    operator, nodes = _operator(kube_api, tmp_path, {"h200": "hgx-h200"})
    policy = kube_api.get("nvidia.com", "clusterpolicies", "cluster-policy")
    policy["spec"]["devicePlugin"]["config"] = {"name": "dp", "default": "default"}
    kube_api.put(policy)
    kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp", "namespace": "gpu-operator"},
                  "data": {"default": "version: v1\n",
                           "ts-3": "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                                   "    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n",
                           "mps-2": "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
                                    "      replicas: 2\n"}})
    operator.reconcile()
    alloc = kube_api.get("", "nodes", "h200")["status"]["allocatable"]
    assert alloc["nvidia.com/gpu"] == "8" and alloc["cpu"] == "64"
    for value, want in (("ts-3", {"nvidia.com/gpu.shared": "24"}), ("mps-2", {"nvidia.com/gpu": "16"})):
        node = kube_api.get("", "nodes", "h200")
        node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = value
        kube_api.put(node)
        operator.reconcile()
        alloc = kube_api.get("", "nodes", "h200")["status"]["allocatable"]
        assert dict((k, v) for k, v in alloc.items() if k.startswith("nvidia.com/")) == want
    assert kube_api.node_labels("h200")["nvidia.com/mps.capable"] == "true"
    pod = kube_api.get("", "pods", "nvidia-device-plugin-mps-control-daemon-h200", "gpu-operator")
    assert pod["spec"]["nodeName"] == "h200" and pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"


def lab_hosts():
    """Every host of inventories/lab, sorted (read from the inventory, so a new lab node needs no edit here)."""
    with open(os.path.join(ROOT, "inventories", "lab", "hosts.yml")) as handle:
        inventory = yaml.safe_load(handle)
    hosts, groups = set(), [inventory["all"]]
    while groups:
        group = groups.pop()
        hosts.update((group.get("hosts") or {}).keys())
        groups.extend((group.get("children") or {}).values())
    return sorted(hosts)


def test_lab_cluster_runs_a_command_against_the_fake_and_keeps_its_objects(tmp_path):
    probe = ("import os, yaml, sys; sys.path.insert(0, '.collections');"
             "from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube;"
             "kc = [a.split('=', 1)[1] for a in sys.argv if a.startswith('gpuops_kubeconfig=')][0];"
             "k = _kube.Kube(_kube.build_configuration({'kubeconfig': kc}));"
             "print('POLICIES', [p['metadata']['name'] for p in k.get('x', '%s')['items']]);"
             "print('NODES', sorted(n['metadata']['name'] for n in k.get('x', '/api/v1/nodes')['items']))" % CP)
    env = dict(os.environ, GPUOPS_LAB_STATE_DIR=str(tmp_path))
    for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST"):
        env.pop(var, None)
    out = subprocess.run([sys.executable, "-m", "tests.support.lab_cluster", "--", sys.executable, "-c", probe,
                          "-e", "gpuops_device_plugin_provider=gpu_operator"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FAKE CLUSTER" in out.stdout and "NOT" not in out.stdout.split("FAKE CLUSTER")[0]
    assert "POLICIES ['cluster-policy']" in out.stdout
    assert "NODES %s" % lab_hosts() in out.stdout      # one Node per host of the lab inventory
    with open(str(tmp_path / "fake-cluster" / "objects.json")) as handle:
        kinds = sorted(set(o["kind"] for key, o in json.load(handle)["objects"]))
    assert kinds == ["ClusterPolicy", "ConfigMap", "Namespace", "Node"]
    env["K8S_AUTH_HOST"] = "https://example.invalid"
    out = subprocess.run([sys.executable, "-m", "tests.support.lab_cluster", "--", sys.executable, "-c", "print(1)"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and "no fake cluster started" in out.stdout
