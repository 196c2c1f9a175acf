"""FakeDaemonSets.snapshot/restore (tests/support/fake_daemonsets.py), with FakeKubeApi.snapshot/restore: a settled
cluster handed to a new server and controller (a converged lab's copy, tests/support/converged_lab.py) goes on as
if nothing happened: no plugin registers or publishes again, no pod restarts, and new pods do not take the names of
the old ones. The controller is driven by calling reconcile() (no thread), so nothing here depends on timing."""
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.fake_daemonsets import FakeDaemonSets, dra_slices
from tests.support.fake_kube_api import FakeKubeApi

NODE_DP, NODE_DRA = "node-dp", "node-dra"
SHAPE = "h200-x2"


def _daemonset(name, app, selector):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "gpu", "labels": {"app.kubernetes.io/name": app}},
            "spec": {"template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": selector, "containers": [{"name": name}]}}}}


def _settle(fake):
    for dummy in range(20):
        if fake.settled():
            return
        fake.reconcile()
    raise AssertionError("not settled after 20 reconciles: %s" % fake.events)


def _cluster(tmp_path):
    api = FakeKubeApi(server_version="v1.34.1")
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu"}})
    nodes = {}
    for node in (NODE_DP, NODE_DRA):
        api.add_node(node, labels={"role": node})
        nodes[node] = (str(tmp_path / ("%s.json" % node)), SHAPE)
        SimulatedBackend(nodes[node][0], shape=SHAPE).read_all()
    api.put(_daemonset("nvdp-nvidia-device-plugin", "nvidia-device-plugin", {"role": NODE_DP}))
    api.put(_daemonset("dra-kubelet-plugin", "nvidia-dra-driver-gpu", {"role": NODE_DRA}))
    fake = FakeDaemonSets(api, nodes, start_seconds=0, terminate_seconds=0)
    _settle(fake)
    return api, fake, nodes


def _handed_over(api, fake, nodes, restore=True):
    assert fake.settled()
    new_api = FakeKubeApi(server_version="v1.34.1")
    new_api.restore(api.snapshot())
    new_fake = FakeDaemonSets(new_api, nodes, start_seconds=0, terminate_seconds=0)
    if restore:
        new_fake.restore(fake.snapshot())
    return new_api, new_fake


def test_a_settled_cluster_goes_on_unchanged_after_the_handover(tmp_path):
    api, fake, nodes = _cluster(tmp_path)
    assert [e for e in fake.events if "registered" in e[2]] and [e for e in fake.events if "published" in e[2]]
    allocatable = api.get("", "nodes", NODE_DP)["status"]["allocatable"]
    slices = dra_slices(api, NODE_DRA)
    pods = sorted(p["metadata"]["name"] for n in nodes for p in fake.pods_on(n))

    new_api, new_fake = _handed_over(api, fake, nodes)
    for dummy in range(3):
        new_fake.reconcile()
    assert new_fake.events == []                                      # nothing registered, published or restarted
    assert new_api.get("", "nodes", NODE_DP)["status"]["allocatable"] == allocatable
    assert dra_slices(new_api, NODE_DRA) == slices
    assert sorted(p["metadata"]["name"] for n in nodes for p in new_fake.pods_on(n)) == pods

    # a new DaemonSet's pods are numbered after the old ones, as the first controller would have numbered them
    new_api.put(_daemonset("exporter", "exporter", {"role": NODE_DP}))
    _settle(new_fake)
    created = [p["metadata"]["name"] for p in new_fake.pods_on(NODE_DP) if p["metadata"]["name"].startswith("exporter")]
    assert created == ["exporter-%s-%d" % (NODE_DP, fake.snapshot()["serial"] + 1)]


def test_without_the_controllers_state_the_plugins_would_register_again(tmp_path):
    # what restore() prevents: a controller that does not know its plugins registered makes them do it again
    api, fake, nodes = _cluster(tmp_path)
    dummy, new_fake = _handed_over(api, fake, nodes, restore=False)
    new_fake.reconcile()
    assert [e for e in new_fake.events if "registered" in e[2]] and [e for e in new_fake.events if "updated slice" in e[2]]


def test_a_cluster_with_a_pod_still_starting_is_not_settled(tmp_path):
    api, fake, dummy = _cluster(tmp_path)
    api.put(_daemonset("exporter", "exporter", {"role": NODE_DP}))
    assert not fake.settled()                       # its pod is not even created yet
    fake.reconcile()
    assert not fake.settled()                       # created, Pending
    _settle(fake)
    assert fake.settled()
