"""site.yml with gpuops_device_plugin_provider=gpu_operator, end to end: the real kubernetes client over real HTTP to
the fake API server (which serves the ClusterPolicy from NVIDIA's CRD schema), a fake GPU Operator beside it (its MIG
manager applies layouts to the nodes' simulated GPUs and reports nvidia.com/mig.config.state; its device plugin
advertises what the configs give), and the lab inventory (A100 node: MIG all-balanced owned by the operator; H200
node: MPS x4).

One test walks a cluster from its first look (check mode) to converged and re-run; one shows a MIG manager that
fails on one node of a batch while the other node of the batch completes."""
import copy

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.integration.site_helpers import NODES, Site
from tests.support.fake_gpu_operator import FakeGpuOperator
from tests.support.fake_kube_api import FakeKubeApi

pytestmark = pytest.mark.slow

SHAPES = {"lab-dgx-a100": "dgx-a100-40gb", "lab-hgx-h200": "hgx-h200"}
NS = "gpu-operator"
OWNED = ("devicePlugin", "migManager")


@pytest.fixture
def cluster(tmp_path):
    api = FakeKubeApi(tokens=None).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
    for i, node in enumerate(NODES):
        api.add_node(node, internal_ip="10.0.0.%d" % (11 + i))
    site = Site(tmp_path, gpuops_kubeconfig=str(kubeconfig), gpuops_device_plugin_provider="gpu_operator",
                gpu_node_drain=True)
    operator = FakeGpuOperator(api, dict((n, (str(site.state / ("%s.json" % n)), SHAPES[n])) for n in NODES),
                               namespace=NS).install().start()
    try:
        yield api, operator, site
    finally:
        operator.stop()
        api.stop()
    assert operator.errors == []


def _cordons(api, node):
    return [r["body"]["spec"]["unschedulable"] for r in api.writes(dry_run=False)
            if r["path"] == "/api/v1/nodes/%s" % node and "unschedulable" in ((r["body"] or {}).get("spec") or {})]


def _policy(api):
    return api.get("nvidia.com", "clusterpolicies", "cluster-policy")


def _not_owned(spec):
    spec = copy.deepcopy(spec)
    spec["devicePlugin"].pop("config", None)
    spec["migManager"]["config"].pop("name", None)
    return spec


def test_first_look_converge_and_rerun(cluster):
    api, operator, site = cluster
    policy_before = _policy(api)

    # --check --diff: the ClusterPolicy and ConfigMap changes are shown (server-side dry run); nothing is written.
    res = site.run(check=True, diff=True)
    assert res.rc == 0, res
    assert api.writes(dry_run=False) == []
    assert _policy(api) == policy_before
    assert api.get("", "configmaps", "gpuops-device-plugin-configs", NS) is None
    for node in NODES:
        assert site.gpus(node)["call_log"] == [], node
    cluster_step = res.task("GPU Operator - device plugin configs and MIG manager config", "lab-dgx-a100")[0]
    assert cluster_step["changed"] is True
    after = cluster_step["diff"]["after"]
    assert after["clusterpolicy/cluster-policy"]["devicePlugin.config"] == {
        "name": "gpuops-device-plugin-configs", "default": "default"}
    assert sorted(after["configmaps"]["gpuops-device-plugin-configs"]) == ["default", "mig-mixed", "mps-4"]
    plan = res.task("GPU Operator - the GPUs its MIG manager will change", "lab-dgx-a100")[0]["msg"]
    assert "nvidia.com/mig.config=gpuops-all-balanced-" in plan and "0, 1, 2, 3, 4, 5, 6, 7" in plan, plan

    # Converge.
    res = site.run()
    assert res.rc == 0, res
    policy = _policy(api)
    assert policy["spec"]["devicePlugin"]["config"] == {"name": "gpuops-device-plugin-configs", "default": "default"}
    assert policy["spec"]["migManager"]["config"]["name"] == "gpuops-mig-parted-config"
    assert _not_owned(policy["spec"]) == _not_owned(policy_before["spec"])       # no other field touched
    patches = [r for r in api.writes(dry_run=False) if "clusterpolicies" in r["path"]]
    assert [r["content_type"] for r in patches] == ["application/merge-patch+json"]
    assert set(patches[0]["body"]["spec"]) == set(OWNED)
    configs = api.get("", "configmaps", "gpuops-device-plugin-configs", NS)["data"]
    assert "migStrategy: mixed" in configs["mig-mixed"] and "replicas: 4" in configs["mps-4"]

    # The operator's MIG manager applied all-balanced on the A100 node, between a cordon and an uncordon.
    a100 = api.node_labels("lab-dgx-a100")
    assert a100["nvidia.com/mig.config"].startswith("gpuops-all-balanced-")
    assert a100["nvidia.com/mig.config.state"] == "success"
    assert a100["nvidia.com/device-plugin.config"] == "mig-mixed"
    assert [s for n, c, s in operator.history if n == "lab-dgx-a100"][-2:] == ["pending", "success"]
    for gpu in site.gpus("lab-dgx-a100")["gpus"]:
        assert gpu["mig_current"] is True and sorted(gi["start"] for gi in gpu["gpu_instances"]) == [0, 2, 3, 4]
    assert _cordons(api, "lab-dgx-a100") == [True, False]
    assert _cordons(api, "lab-hgx-h200") == []
    published = yaml.safe_load(api.get("", "configmaps", "gpuops-mig-parted-config", NS)["data"]["config.yaml"])
    assert published["mig-configs"][a100["nvidia.com/mig.config"]] == [{
        "device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True,
        "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}]
    assert "all-1g.5gb" in published["mig-configs"]        # the operator's own configs were kept

    # The H200 node: MPS x4; verified as advertised (8 x 4) with a ready MPS daemon; MIG stays off.
    assert api.node_labels("lab-hgx-h200")["nvidia.com/device-plugin.config"] == "mps-4"
    verified = res.task("The node advertises what its device plugin config promises", "lab-hgx-h200")[0]
    assert verified["allocatable"] == {"nvidia.com/gpu": "32"}, verified
    assert res.task("The node advertises what its device plugin config promises", "lab-dgx-a100")[0]["allocatable"] == {
        "nvidia.com/mig-1g.5gb": "16", "nvidia.com/mig-2g.10gb": "8", "nvidia.com/mig-3g.20gb": "8"}

    # containerd: the operator's toolkit owns it on both nodes; skipped, and said so.
    for node in NODES:
        said = res.task("GPU Operator - say that containerd_runtime is skipped", node)[0]["msg"]
        assert "containerd_runtime SKIPPED" in said and "/etc/containerd/config.toml" in said
        assert not any(path.startswith("etc/containerd") for path in site.files(node)), site.files(node)
    assert api.get("node.k8s.io", "runtimeclasses", "nvidia") is None    # the operator creates its own

    # Re-run: nothing changes, nothing is written, nobody is cordoned, no GPU call.
    writes = len(api.writes(dry_run=False))
    calls = dict((n, len(site.gpus(n)["call_log"])) for n in NODES)
    res = site.run()
    assert res.rc == 0, res
    assert [res.changed(n) for n in NODES] == [0, 0], res
    # The only writes: the cluster lock taken and released (a Lease in the operator's namespace), nothing else.
    assert [(r["method"], r["path"]) for r in api.writes(dry_run=False)[writes:]] == [
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/%s/leases/gpuops-nvidia-cluster" % NS)] * 2
    assert dict((n, len(site.gpus(n)["call_log"])) for n in NODES) == calls


def test_failed_mig_state_fails_the_node_and_its_batch_goes_on(cluster):
    api, operator, site = cluster
    # A process holds GPU 0 of the A100 node: the MIG manager cannot change its MIG mode (reset refused).
    SimulatedBackend(str(site.state / "lab-dgx-a100.json"), shape=SHAPES["lab-dgx-a100"]).add_process(0, 4242, "python")
    res = site.run(gpuops_serial=2)      # both nodes in one batch
    assert res.rc != 0
    failed = [f for f in res.failures() if f[0] == "lab-dgx-a100"]
    assert len(failed) == 1, res.failures()
    msg = failed[0][2]
    assert "node lab-dgx-a100" in msg and "nvidia.com/mig.config.state=failed" in msg, msg
    assert "kubectl -n gpu-operator logs -l app=nvidia-mig-manager --field-selector spec.nodeName=lab-dgx-a100" in msg
    assert api.node_labels("lab-dgx-a100")["nvidia.com/mig.config.state"] == "failed"
    assert _cordons(api, "lab-dgx-a100") == [True, False]          # uncordoned after the failure
    # The other node of the batch went on to the end.
    assert res.stats["lab-hgx-h200"]["failures"] == 0 and res.stats["lab-hgx-h200"]["ok"] > 0, res
    assert res.task("The node advertises what its device plugin config promises", "lab-hgx-h200")[0]["allocatable"] == {"nvidia.com/gpu": "32"}
