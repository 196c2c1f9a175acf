"""The fake DRA kubelet plugin of FakeDaemonSets (tests/support/fake_daemonsets.py): the ResourceSlice it
publishes from the simulated GPUs, once per pod, and the kubelet's wipe when the pod ends."""
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.fake_daemonsets import FakeDaemonSets, dra_slices
from tests.support.fake_kube_api import FakeKubeApi
from tests.support import fake_resource_api

PLAIN, MIG = "node-plain", "node-mig"
SHAPES = {PLAIN: "hgx-h200", MIG: "h200-x2"}


def _plugin_daemonset(name="nvidia-dra-driver-gpu-kubelet-plugin"):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "nvidia-dra-driver-gpu",
                         "labels": {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"}},
            "spec": {"template": {"metadata": {"labels": {"app": "kubelet-plugin"}},
                                  "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"}}}}}


def wait_for(predicate, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in %ss" % timeout)


@pytest.fixture
def cluster(tmp_path):
    api = FakeKubeApi(server_version="v1.34.1").start()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nvidia-dra-driver-gpu"}})
    paths = {}
    for node, shape in SHAPES.items():
        api.add_node(node, labels={"nvidia.com/gpu.present": "true"})
        paths[node] = str(tmp_path / ("%s.json" % node))
        SimulatedBackend(paths[node], shape=shape).read_all()
    fake = FakeDaemonSets(api, dict((n, (paths[n], SHAPES[n])) for n in SHAPES), dra_wipe_seconds=0.3)
    fake.paths = paths
    fake.start()
    try:
        yield api, fake
    finally:
        fake.stop()
        api.stop()
        assert fake.errors == [], fake.errors[0]


def _enable_mig(path, profile_name="1g.18gb", count=2):
    sim = SimulatedBackend(path, shape=SHAPES[MIG])
    sim.set_mig_mode(0, True)
    gpu = sim.read_gpu(0)
    assert gpu["mig_mode_current"] == "Enabled"
    profile = [p for p in gpu["gi_profiles"] if p["name"] == profile_name][0]
    for placement in profile["placements"][:count]:
        sim.create_gpu_instance(0, profile["id"], placement["start"])
    for gi in sim.read_gpu(0)["gpu_instances"]:
        sim.create_compute_instance(0, gi["id"], profile["ci_profiles"][0]["id"])
    return profile


def _one_slice(api, node):
    found = wait_for(lambda: dra_slices(api, node))
    assert len(found) == 1
    return found[0]


def test_a_plain_node_publishes_one_gpu_device_per_gpu(cluster):
    api, fake = cluster
    api.put(_plugin_daemonset())
    facts = SimulatedBackend(fake.paths[PLAIN], shape=SHAPES[PLAIN]).read_all()
    got = _one_slice(api, PLAIN)
    assert got["spec"]["driver"] == "gpu.nvidia.com" and got["spec"]["nodeName"] == PLAIN
    assert got["spec"]["pool"] == {"name": PLAIN, "generation": 1, "resourceSliceCount": 1}
    assert got["metadata"]["name"].startswith("%s-gpu.nvidia.com-" % PLAIN)
    node_uid = api.get("", "nodes", PLAIN)["metadata"]["uid"]
    assert got["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": PLAIN,
                                                   "uid": node_uid, "controller": True}]
    devices = got["spec"]["devices"]
    assert [d["name"] for d in devices] == ["gpu-%d" % i for i in range(8)]
    assert [d["attributes"]["uuid"]["string"] for d in devices] == [g["uuid"] for g in facts["gpus"]]
    first = devices[0]
    assert first["attributes"]["type"] == {"string": "gpu"}
    assert first["attributes"]["productName"] == {"string": facts["gpus"][0]["name"]}
    assert first["attributes"]["pcieBusID"] == {"string": facts["gpus"][0]["pci_bus_id"]}
    assert first["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert first["capacity"]["memory"]["value"].endswith("Mi") or first["capacity"]["memory"]["value"].endswith("Gi")
    assert fake_resource_api.errors("resourceslices", got) == []
    # the MIG node's GPUs (MIG disabled) are plain GPUs too, in their own slice
    assert [d["name"] for d in _one_slice(api, MIG)["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert any("published slice %s: 8 devices" % got["metadata"]["name"] in e for dummy, n, e in fake.events)


def test_a_mig_gpu_publishes_its_mig_devices_not_itself(cluster):
    api, fake = cluster
    profile = _enable_mig(fake.paths[MIG])
    facts = SimulatedBackend(fake.paths[MIG], shape=SHAPES[MIG]).read_all()
    api.put(_plugin_daemonset())
    devices = _one_slice(api, MIG)["spec"]["devices"]
    names = [d["name"] for d in devices]
    starts = [p["start"] for p in profile["placements"][:2]]
    assert names == ["gpu-0-mig-%d-%d-1" % (profile["id"], s) for s in starts] + ["gpu-1"]
    mig = [d for d in devices if d["attributes"]["type"]["string"] == "mig"]
    assert [d["attributes"]["uuid"]["string"] for d in mig] == [m["uuid"] for m in facts["gpus"][0]["mig_devices"]]
    assert {d["attributes"]["parentUUID"]["string"] for d in mig} == {facts["gpus"][0]["uuid"]}
    assert {d["attributes"]["profile"]["string"] for d in mig} == {"1g.18gb"}
    assert mig[0]["capacity"]["multiprocessors"] == {"value": str(profile["sms"])}
    assert "memorySlice%d" % starts[0] in mig[0]["capacity"]
    assert "uuid" in devices[-1]["attributes"] and "parentUUID" not in devices[-1]["attributes"]


def _restart_plugin(api, fake, node):
    pod = [p for p in fake.pods_on(node) if p["metadata"]["name"].startswith("nvidia-dra-driver-gpu-kubelet")][0]
    with api._lock:
        api.objects.pop(("", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]))
    return pod["metadata"]["name"]


def test_a_running_plugin_does_not_see_a_mig_change_until_its_pod_restarts(cluster):
    api, fake = cluster
    api.put(_plugin_daemonset())
    before = _one_slice(api, MIG)
    assert [d["name"] for d in before["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    _enable_mig(fake.paths[MIG])
    time.sleep(0.5)
    assert _one_slice(api, MIG)["spec"]["devices"] == before["spec"]["devices"]     # stale
    old_pod = _restart_plugin(api, fake, MIG)     # the pod is deleted; the DaemonSet makes a new one

    def republished():
        found = dra_slices(api, MIG)
        return found if found and found[0]["spec"]["devices"][0]["attributes"]["type"]["string"] == "mig" else None
    after = wait_for(republished)
    assert len(after) == 1
    assert [d["attributes"]["type"]["string"] for d in after[0]["spec"]["devices"]] == ["mig", "mig", "gpu"]
    assert old_pod not in [p["metadata"]["name"] for p in fake.pods_on(MIG)]


def test_pod_end_wipes_the_slice_after_the_delay(cluster):
    api, fake = cluster
    api.put(_plugin_daemonset())
    _one_slice(api, PLAIN)
    assert SimulatedBackend(fake.paths[PLAIN], shape=SHAPES[PLAIN]).raw_state()["holders"]    # the pod holds the GPUs
    # the node stops matching the DaemonSet: its pod ends, the kubelet wipes the node's slices
    node = api.get("", "nodes", PLAIN)
    node["metadata"]["labels"]["nvidia.com/gpu.present"] = "false"
    api.put(node)
    wait_for(lambda: not dra_slices(api, PLAIN))
    assert not list(fake.pods_on(PLAIN))
    assert len(dra_slices(api, MIG)) == 1      # the other node keeps its slice
    assert any("wiped slices" in e for dummy, n, e in fake.events if n == PLAIN)
    # held GPUs are released with the pod
    assert not SimulatedBackend(fake.paths[PLAIN], shape=SHAPES[PLAIN]).raw_state().get("holders")


def test_uninstalling_the_driver_wipes_every_node(cluster):
    api, fake = cluster
    api.put(_plugin_daemonset())
    _one_slice(api, PLAIN), _one_slice(api, MIG)
    with api._lock:
        api.objects.pop(("apps", "daemonsets", "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"))
    wait_for(lambda: not dra_slices(api, PLAIN) and not dra_slices(api, MIG))


def test_other_daemonsets_of_the_chart_publish_nothing(cluster):
    api, fake = cluster
    api.put(_plugin_daemonset("nvidia-dra-driver-gpu-controller"))
    wait_for(lambda: fake.pods_on(PLAIN))
    time.sleep(0.5)
    assert dra_slices(api, PLAIN) == []
