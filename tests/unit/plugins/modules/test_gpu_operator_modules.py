"""gpu_operator, gpu_operator_mig and device_plugin_verify in-process: the real kubernetes client over real HTTP to the
fake API server, which serves the ClusterPolicy from NVIDIA's CRD schema; a fake GPU Operator (tests/support) acts on
simulated GPUs. Check mode first (reports, stores nothing), then apply (changed), then apply again (not changed)."""
import copy

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.modules import device_plugin_verify, gpu_operator, gpu_operator_mig
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.fake_gpu_operator import FakeGpuOperator
from tests.support.modrun import run_main

NS = "gpu-operator"
PROFILES = [{"name": "default"}, {"name": "mps-4", "sharing": "mps", "replicas": 4},
            {"name": "mig-mixed", "mig_strategy": "mixed"}]


# no K8S_AUTH_* / KUBECONFIG of the machine running the tests, HOME a scratch directory (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")


@pytest.fixture
def operator(kube_api, tmp_path):
    shapes = {"a100": "dgx-a100-40gb", "h200": "hgx-h200"}
    for node in shapes:
        kube_api.add_node(node)
    fake = FakeGpuOperator(kube_api, dict((n, (str(tmp_path / ("%s.json" % n)), s)) for n, s in shapes.items()),
                           mig_strategy=None).install()
    yield fake
    fake.stop()
    assert fake.errors == []


def cluster_args(kube_api, **kw):
    args = dict(kubeconfig=kube_api.kubeconfig_path, profiles=PROFILES,
                nodes=[{"name": "a100", "profile": "mig-mixed"}, {"name": "h200", "profile": "mps-4"}],
                mig_config_map="gpuops-mig-parted-config")
    args.update(kw)
    return args


def _policy(kube_api):
    return kube_api.get("nvidia.com", "clusterpolicies", "cluster-policy")


def test_cluster_check_then_apply_then_nothing(kube_api, operator):
    before = _policy(kube_api)
    res = run_main(gpu_operator.main, cluster_args(kube_api), check_mode=True, diff=True)
    assert res["changed"] is True, res
    assert kube_api.writes(dry_run=False) == [] and _policy(kube_api) == before
    assert len(kube_api.writes(dry_run=True)) == 3                  # the policy patch and two ConfigMap creates
    assert res["diff"]["before"]["clusterpolicy/cluster-policy"]["devicePlugin.config"] is None
    assert res["diff"]["after"]["configmaps"]["gpuops-device-plugin-configs"]["mps-4"].count("replicas: 4") == 1
    assert res["containerd_owners"] == {"a100": "gpu_operator", "h200": "gpu_operator"}

    res = run_main(gpu_operator.main, cluster_args(kube_api))
    assert res["changed"] is True and res["namespace"] == NS and res["operator_version"] == "v25.10.1", res
    after = _policy(kube_api)
    assert after["spec"]["devicePlugin"]["config"] == {"name": "gpuops-device-plugin-configs", "default": "default"}
    assert after["spec"]["migManager"]["config"] == {"name": "gpuops-mig-parted-config", "default": "all-disabled"}
    spec_before, spec_after = copy.deepcopy(before["spec"]), copy.deepcopy(after["spec"])
    for spec in (spec_before, spec_after):
        spec["devicePlugin"].pop("config", None)
        spec["migManager"]["config"].pop("name")
    assert spec_before == spec_after                               # nothing it does not own
    patch = [w for w in kube_api.writes(dry_run=False) if "clusterpolicies" in w["path"]][0]
    assert patch["method"] == "PATCH" and patch["content_type"] == "application/merge-patch+json"
    mig = yaml.safe_load(kube_api.get("", "configmaps", "gpuops-mig-parted-config", NS)["data"]["config.yaml"])
    assert "all-balanced" in mig["mig-configs"] and "all-disabled" in mig["mig-configs"]   # started from the operator's

    writes = len(kube_api.writes(dry_run=False))
    res = run_main(gpu_operator.main, cluster_args(kube_api))
    assert res["changed"] is False and res["changes"] == [], res
    assert len(kube_api.writes(dry_run=False)) == writes
    assert not any(w["method"] in ("POST", "DELETE") and "clusterpolicies" in w["path"] for w in kube_api.writes())


def test_a_changed_profile_is_one_configmap_patch(kube_api, operator):
    run_main(gpu_operator.main, cluster_args(kube_api))
    profiles = [p if p["name"] != "mps-4" else dict(p, replicas=8, name="mps-8") for p in PROFILES]
    nodes = [{"name": "h200", "profile": "mps-8"}]
    res = run_main(gpu_operator.main, cluster_args(kube_api, profiles=profiles, nodes=nodes))
    assert res["changed"] is True and len(res["changes"]) == 1, res
    data = kube_api.get("", "configmaps", "gpuops-device-plugin-configs", NS)["data"]
    assert sorted(data) == ["default", "mig-mixed", "mps-8"]


def test_old_operator_missing_policy_and_conflicts_change_nothing(kube_api, operator):
    kube_api.crd_versions = {"clusterpolicies": "v1.10.0"}
    policy = _policy(kube_api)
    policy["metadata"]["labels"]["app.kubernetes.io/version"] = "v1.10.0"
    kube_api.put(policy)
    res = run_main(gpu_operator.main, cluster_args(kube_api))
    assert res["failed"] and "has no field spec.devicePlugin.config.name" in res["msg"], res
    assert "operator v1.10.0" in res["msg"] and "GPU Operator >= v1.11.0" in res["msg"]
    assert kube_api.writes(dry_run=False) == []
    kube_api.crd_versions = {}

    policy = _policy(kube_api)
    policy["spec"]["mig"] = {"strategy": "mixed"}
    kube_api.put(policy)
    res = run_main(gpu_operator.main, cluster_args(kube_api))
    assert res["failed"] and "node h200 uses MPS" in res["msg"] and "nothing changed" in res["msg"], res

    policy["spec"]["mig"] = {}
    kube_api.put(policy)
    nodes = [{"name": "a100", "profile": "mig-mixed", "containerd_owner": "collection",
              "containerd_files": ["/etc/containerd/config.toml"]}]
    res = run_main(gpu_operator.main, cluster_args(kube_api, nodes=nodes))
    assert res["failed"] and "node a100: gpu_node_containerd_owner=collection" in res["msg"], res
    assert kube_api.writes(dry_run=False) == []

    with kube_api._lock:
        del kube_api.objects[("nvidia.com", "clusterpolicies", "", "cluster-policy")]
    res = run_main(gpu_operator.main, cluster_args(kube_api))
    assert res["failed"] and "no ClusterPolicy found" in res["msg"] and "never creates" in res["msg"], res
    assert kube_api.writes(dry_run=False) == []


def mig_args(kube_api, tmp_path, node="a100", **kw):
    args = dict(kubeconfig=kube_api.kubeconfig_path, node_name=node, interval=0.05, timeout=30,
                gpus=SimulatedBackend(str(tmp_path / ("%s.json" % node))).read_all(), config_name="all-balanced")
    args.update(kw)
    return args


def test_mig_check_then_apply_then_nothing(kube_api, operator, tmp_path):
    run_main(gpu_operator.main, cluster_args(kube_api))
    operator.start()
    res = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path), check_mode=True, diff=True)
    assert res["changed"] is True and res["published"] is True and res["gpus_differ"] == list(range(8)), res
    labels = kube_api.node_labels("a100")
    assert labels["nvidia.com/mig.config"] == "all-disabled"
    assert res["diff"]["after"]["node/a100 labels"]["nvidia.com/mig.config"] == res["config"]

    res = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path))
    assert res["changed"] is True and res["state"] == "success", res
    assert kube_api.node_labels("a100")["nvidia.com/mig.config"] == res["config"]
    assert operator.history[-2:] == [("a100", res["config"], "pending"), ("a100", res["config"], "success")]
    mig = yaml.safe_load(kube_api.get("", "configmaps", "gpuops-mig-parted-config", NS)["data"]["config.yaml"])
    assert mig["mig-configs"][res["config"]] == res["entries"]

    writes = len(kube_api.writes(dry_run=False))
    res = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path))       # GPU facts read afresh
    assert res["changed"] is False and res["gpus_differ"] == [] and res["waited"] == 0.0, res
    assert len(kube_api.writes(dry_run=False)) == writes


def test_mig_failed_state_and_no_mig_manager(kube_api, operator, tmp_path):
    run_main(gpu_operator.main, cluster_args(kube_api))
    SimulatedBackend(str(tmp_path / "a100.json")).add_process(0, 4242, "python")
    operator.start()
    res = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path))
    assert res["failed"] and res["state"] == "failed" and "does not retry by itself" in res["msg"], res
    again = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path))
    assert again["failed"] and "=failed" in again["msg"] and again["changed"] is False, again

    operator.stop()      # nobody writes the state: bounded wait, then a message saying what to check
    res = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path, node="h200", config_name="all-1g",
                                                   timeout=1))
    assert res["failed"] and "no nvidia.com/mig.config.state was written" in res["msg"], res
    assert "is the MIG manager running" in res["msg"]


def test_mig_bad_layout_is_refused_before_any_write(kube_api, operator, tmp_path):
    run_main(gpu_operator.main, cluster_args(kube_api))
    writes = len(kube_api.writes())
    args = mig_args(kube_api, tmp_path, layout=[{"devices": "all", "mig_devices": {"2g.10gb": 4}}])
    del args["config_name"]
    res = run_main(gpu_operator_mig.main, args)
    assert res["failed"] and "node a100" in res["msg"] and "nothing changed" in res["msg"], res
    assert len(kube_api.writes()) == writes
    res = run_main(gpu_operator_mig.main, mig_args(kube_api, tmp_path, config_map="default-mig-parted-config"))
    assert res["failed"] and "refused" in res["msg"]


def test_verify_waits_for_what_the_config_promises(kube_api, operator, tmp_path):
    run_main(gpu_operator.main, cluster_args(kube_api))
    node = kube_api.get("", "nodes", "h200")
    node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "mps-4"
    kube_api.put(node)
    profile = {"name": "mps-4", "sharing": "mps", "replicas": 4}
    args = dict(kubeconfig=kube_api.kubeconfig_path, node_name="h200", profile=profile,
                gpus=SimulatedBackend(str(tmp_path / "h200.json")).read_all(), namespace=NS, interval=0.05,
                timeout=1)
    res = run_main(device_plugin_verify.main, args)
    assert res["failed"] and "advertises nvidia.com/gpu=0, expected 32" in res["msg"], res
    operator.reconcile()
    res = run_main(device_plugin_verify.main, args, check_mode=True)
    assert not res.get("failed") and res["allocatable"] == {"nvidia.com/gpu": "32"}, res
    assert res["changed"] is False
