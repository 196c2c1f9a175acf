"""The fake API server itself, driven by the real kubernetes client: what the module tests rely on."""
import json
import threading

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException


@pytest.fixture
def client(kube_api):
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kube_api.kubeconfig_path, client_configuration=cfg)
    api_client = kubernetes.client.ApiClient(cfg)
    return (kubernetes.client.CoreV1Api(api_client), kubernetes.client.AppsV1Api(api_client),
            kubernetes.client.NodeV1Api(api_client))


def status_of(exc):
    return json.loads(exc.value.body)


def test_node_list_get_and_label_selector(kube_api, client):
    core = client[0]
    kube_api.add_node("a", labels={"pool": "gpu"})
    kube_api.add_node("b", labels={"pool": "cpu"})
    assert [n.metadata.name for n in core.list_node().items] == ["a", "b"]
    assert [n.metadata.name for n in core.list_node(label_selector="pool=gpu").items] == ["a"]
    assert [n.metadata.name for n in core.list_node(label_selector="pool!=gpu").items] == ["b"]
    assert [n.metadata.name for n in core.list_node(label_selector="pool in (cpu,x)").items] == ["b"]
    assert core.read_node("a").status.addresses[-1].type == "Hostname"


@pytest.mark.parametrize("ctype", ["application/merge-patch+json", "application/strategic-merge-patch+json"])
def test_label_patch_types_merge_and_null_deletes(kube_api, client, ctype):
    core = client[0]
    kube_api.add_node("a", labels={"x.io/keep": "1", "x.io/drop": "2"})
    out = core.patch_node("a", {"metadata": {"labels": {"x.io/new": "3", "x.io/drop": None}}}, _content_type=ctype)
    assert out.metadata.labels == {"kubernetes.io/hostname": "a", "x.io/keep": "1", "x.io/new": "3"}
    assert kube_api.node_labels("a") == out.metadata.labels


def test_json_patch(kube_api, client):
    core = client[0]
    kube_api.add_node("a")
    core.patch_node("a", [{"op": "add", "path": "/metadata/labels/x.io~1j", "value": "p"}],
                    _content_type="application/json-patch+json")
    assert kube_api.node_labels("a")["x.io/j"] == "p"
    with pytest.raises(ApiException) as exc:
        core.patch_node("a", [{"op": "test", "path": "/metadata/labels/x.io~1j", "value": "other"}],
                        _content_type="application/json-patch+json")
    assert exc.value.status == 422


def test_dry_run_validates_answers_and_stores_nothing(kube_api, client):
    core = client[0]
    kube_api.add_node("a")
    rv = kube_api.get("", "nodes", "a")["metadata"]["resourceVersion"]
    out = core.patch_node("a", {"metadata": {"labels": {"x.io/d": "1"}}}, dry_run="All",
                          _content_type="application/merge-patch+json")
    assert out.metadata.labels["x.io/d"] == "1"
    assert "x.io/d" not in kube_api.node_labels("a")
    assert kube_api.get("", "nodes", "a")["metadata"]["resourceVersion"] == rv
    core.create_namespace({"metadata": {"name": "ns1"}}, dry_run="All")
    assert kube_api.get("", "namespaces", "ns1") is None
    with pytest.raises(ApiException) as exc:
        core.patch_node("a", {"metadata": {"labels": {"x.io/d": "bad value"}}}, dry_run="All",
                        _content_type="application/merge-patch+json")
    assert exc.value.status == 422 and status_of(exc)["reason"] == "Invalid"
    assert status_of(exc)["details"]["causes"][0]["field"] == "metadata.labels"


def test_not_found_conflict_already_exists_shapes(kube_api, client):
    core = client[0]
    with pytest.raises(ApiException) as exc:
        core.read_node("ghost")
    assert exc.value.status == 404
    assert status_of(exc) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": 'nodes "ghost" not found', "reason": "NotFound", "code": 404,
                              "details": {"name": "ghost", "group": "", "kind": "nodes"}}
    core.create_namespace({"metadata": {"name": "ns1"}})
    with pytest.raises(ApiException) as exc:
        core.create_namespace({"metadata": {"name": "ns1"}})
    assert exc.value.status == 409 and status_of(exc)["reason"] == "AlreadyExists"
    cm = core.create_namespaced_config_map("ns1", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    stale = cm.metadata.resource_version
    core.replace_namespaced_config_map("c", "ns1", {"metadata": {"name": "c", "resourceVersion": stale},
                                                    "data": {"k": "2"}})
    with pytest.raises(ApiException) as exc:   # stale resourceVersion
        core.replace_namespaced_config_map("c", "ns1", {"metadata": {"name": "c", "resourceVersion": stale},
                                                        "data": {}})
    assert exc.value.status == 409 and status_of(exc)["reason"] == "Conflict"
    with pytest.raises(ApiException) as exc:   # namespace must exist
        core.create_namespaced_config_map("nope", {"metadata": {"name": "c"}})
    assert exc.value.status == 404


def test_daemonset_with_status_and_runtimeclass(kube_api, client):
    core, apps, node = client
    core.create_namespace({"metadata": {"name": "gpu"}})
    apps.create_namespaced_daemon_set("gpu", {"metadata": {"name": "dp"}, "spec": {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    apps.replace_namespaced_daemon_set_status("dp", "gpu", {"metadata": {"name": "dp"}, "spec": {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"desiredNumberScheduled": 2, "numberReady": 1, "currentNumberScheduled": 2,
                   "numberMisscheduled": 0}})
    ds = apps.read_namespaced_daemon_set("dp", "gpu")
    assert ds.status.number_ready == 1 and ds.metadata.generation == 1
    node.create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    assert node.read_runtime_class("nvidia").handler == "nvidia"
    with pytest.raises(ApiException) as exc:
        node.create_runtime_class({"metadata": {"name": "bad"}, "handler": "Not_A_Label"})
    assert exc.value.status == 422


def test_auth_401_403_and_injected_500(kube_api):
    cfg = kubernetes.client.Configuration(host=kube_api.url)
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 401 and status_of(exc)["reason"] == "Unauthorized"
    cfg.api_key = {"authorization": "Bearer " + kube_api.ro_token}
    kube_api.add_node("a")
    assert core.list_node().items[0].metadata.name == "a"
    with pytest.raises(ApiException) as exc:
        core.patch_node("a", {"metadata": {"labels": {"x.io/a": "b"}}}, _content_type="application/merge-patch+json")
    assert exc.value.status == 403 and "cannot patch resource" in status_of(exc)["message"]
    cfg.api_key = {"authorization": "Bearer " + kube_api.token}
    kube_api.inject_failure("GET", "^/api/v1/nodes$", code=500, times=1)
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 500
    assert core.list_node().items                # only once


def test_server_side_apply_prunes_fields_the_manager_stopped_applying(kube_api, client):
    core = client[0]
    core.create_namespace({"metadata": {"name": "ns"}})
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"},
            "data": {"a": "1", "b": "2"}}
    core.patch_namespaced_config_map("c", "ns", body, field_manager="helm",
                                     _content_type="application/apply-patch+yaml")
    body["data"] = {"a": "1"}
    out = core.patch_namespaced_config_map("c", "ns", body, field_manager="helm",
                                           _content_type="application/apply-patch+yaml")
    assert out.data == {"a": "1"}


def test_server_side_apply_merges_containers_and_env_by_name_and_keeps_another_managers_items(kube_api, client):
    # a DaemonSet's containers and env are associative lists (keyed by name): an applier prunes the items it applied
    # before and no longer applies, and leaves the items a strategic merge patch of another manager added
    core, apps = client[0], client[1]
    core.create_namespace({"metadata": {"name": "ns"}})

    def ds(env, containers=("main", "side")):
        return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d", "namespace": "ns"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
                    "containers": [{"name": n, "image": "i", "env": list(env) if n == "main" else []}
                                   for n in containers]}}}}

    apps.patch_namespaced_daemon_set("d", "ns", ds([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
                                     field_manager="helm", _content_type="application/apply-patch+yaml")
    apps.patch_namespaced_daemon_set("d", "ns", {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "env": [{"name": "X", "value": "ours"}]}]}}}},
        _content_type="application/strategic-merge-patch+json")
    apps.patch_namespaced_daemon_set("d", "ns", ds([{"name": "A", "value": "3"}], containers=("main",)),
                                     field_manager="helm", _content_type="application/apply-patch+yaml")
    containers = kube_api.get("apps", "daemonsets", "d", "ns")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main"]          # the container helm stopped applying is gone
    assert containers[0]["env"] == [{"name": "A", "value": "3"}, {"name": "X", "value": "ours"}]
    apps.patch_namespaced_daemon_set("d", "ns", {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "env": [{"name": "X", "$patch": "delete"}]}]}}}},
        _content_type="application/strategic-merge-patch+json")
    assert kube_api.get("apps", "daemonsets", "d", "ns")["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "3"}]


def test_snapshot_restores_objects_applied_configs_and_versions_in_another_server(kube_api, client):
    # the sliced-fleet bench splits one measurement over two processes: the second server must serve the same
    # objects, keep server-side apply's managers, and go on with resource versions after the first's
    from tests.support.fake_kube_api import FakeKubeApi

    core = client[0]
    kube_api.add_node("a", labels={"pool": "gpu"})
    core.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
    before = kube_api.get("", "nodes", "a")
    data = json.loads(json.dumps(kube_api.snapshot()))  # what the bench writes to a file and reads back
    other = FakeKubeApi(tokens=None)
    other.restore(data)
    assert other.get("", "nodes", "a") == before
    assert other.objects == kube_api.objects and other.applied == kube_api.applied
    other.add_node("b")
    assert int(other.get("", "nodes", "b")["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])


def test_hold_nth_write_applies_it_and_holds_the_answer_until_released(kube_api, client):
    core = client[0]
    kube_api.add_node("a")
    kube_api.hold_nth_write(2)
    core.patch_node("a", {"metadata": {"labels": {"x.io/one": "1"}}}, dry_run="All")    # dry runs do not count
    core.patch_node("a", {"metadata": {"labels": {"x.io/one": "1"}}})                    # write 1: answered
    answered = []
    writer = threading.Thread(target=lambda: answered.append(
        core.patch_node("a", {"metadata": {"labels": {"x.io/two": "2"}}})), daemon=True)
    writer.start()
    assert kube_api.wait_held(60)
    assert kube_api.node_labels("a")["x.io/two"] == "2"       # applied ...
    writer.join(0.2)
    assert answered == [] and writer.is_alive()               # ... and its client still waits for the answer
    held = [r for r in kube_api.writes(dry_run=False) if r.get("held")]
    assert len(held) == 1 and held[0] is kube_api.writes(dry_run=False)[1]
    kube_api.release_held()
    writer.join(60)
    assert len(answered) == 1
    core.patch_node("a", {"metadata": {"labels": {"x.io/three": "3"}}})                  # only one write is held


def test_on_request_sees_each_request_before_it_is_answered(kube_api, client):
    core = client[0]
    kube_api.add_node("a", labels={"early": "1"})
    seen = []

    def hook(record):
        seen.append(record["path"])
        kube_api.objects[("", "nodes", "", "a")]["metadata"]["labels"]["late"] = "1"
    kube_api.on_request = hook
    assert core.read_node("a").metadata.labels["late"] == "1"
    assert seen == ["/api/v1/nodes/a"]


# ---- Nodes: status subresource, conditions merged by type, taints (what node_health relies on) ----------------------
SMP = "application/strategic-merge-patch+json"


def _conditions(kube_api, name):
    return {c["type"]: c for c in kube_api.get("", "nodes", name)["status"]["conditions"]}


def test_status_patch_merges_conditions_by_type_and_deletes_one_with_patch_delete(kube_api, client):
    """Strategic merge on NodeStatus.conditions (patchMergeKey=type, kubernetes/api v0.33.0 core/v1/types.go): an
    element with a new type is added, one with a known type merges into it (its other fields kept: the kubelet's
    Ready condition is not touched), ``$patch: delete`` removes one type only."""
    core = client[0]
    kube_api.add_node("a")
    mine = {"type": "ExampleGpu", "status": "False", "reason": "Bad", "message": "m1",
            "lastTransitionTime": "2025-01-01T00:00:00Z"}
    core.patch_node_status("a", {"status": {"conditions": [mine]}}, _content_type=SMP)
    assert _conditions(kube_api, "a") == {"Ready": {"type": "Ready", "status": "True"}, "ExampleGpu": mine}
    # a later patch without lastTransitionTime keeps the stored one; null deletes a field
    core.patch_node_status("a", {"status": {"conditions": [{"type": "ExampleGpu", "message": "m2", "reason": None}]}},
                           _content_type=SMP)
    assert _conditions(kube_api, "a")["ExampleGpu"] == {"type": "ExampleGpu", "status": "False", "message": "m2",
                                                        "lastTransitionTime": "2025-01-01T00:00:00Z"}
    core.patch_node_status("a", {"status": {"conditions": [{"type": "ExampleGpu", "$patch": "delete"}]}},
                           _content_type=SMP)
    assert _conditions(kube_api, "a") == {"Ready": {"type": "Ready", "status": "True"}}
    # deleting a type that is not there is no error and changes nothing
    core.patch_node_status("a", {"status": {"conditions": [{"type": "ExampleGpu", "$patch": "delete"}]}},
                           _content_type=SMP)
    assert _conditions(kube_api, "a") == {"Ready": {"type": "Ready", "status": "True"}}
    # an element without the merge key is refused, as apimachinery's strategicpatch refuses it
    with pytest.raises(ApiException) as exc:
        core.patch_node_status("a", {"status": {"conditions": [{"status": "True"}]}}, _content_type=SMP)
    assert exc.value.status == 422 and "merge key" in status_of(exc)["message"]


def test_merge_patch_replaces_the_conditions_list(kube_api, client):
    """A JSON merge patch (RFC 7386) has no merge keys: the list is replaced, the kubelet's Ready condition lost -
    why a condition is written with a strategic merge patch."""
    core = client[0]
    kube_api.add_node("a")
    core.patch_node_status("a", {"status": {"conditions": [{"type": "ExampleGpu", "status": "False"}]}},
                           _content_type="application/merge-patch+json")
    assert list(_conditions(kube_api, "a")) == ["ExampleGpu"]


def test_node_write_keeps_status_and_status_write_keeps_spec(kube_api, client):
    """nodeStrategy / nodeStatusStrategy PrepareForUpdate (kubernetes pkg/registry/core/node/strategy.go): status in
    a write to the node is dropped, spec in a write to node/status is dropped."""
    core = client[0]
    kube_api.add_node("a")
    core.patch_node("a", {"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "X", "status": "True"}]}},
                    _content_type=SMP)
    stored = kube_api.get("", "nodes", "a")
    assert stored["spec"] == {"unschedulable": True} and list(_conditions(kube_api, "a")) == ["Ready"]
    core.patch_node_status("a", {"spec": {"unschedulable": False},
                                 "status": {"conditions": [{"type": "X", "status": "True"}]}}, _content_type=SMP)
    assert kube_api.get("", "nodes", "a")["spec"] == {"unschedulable": True}
    assert list(_conditions(kube_api, "a")) == ["Ready", "X"]


def test_taints_are_validated_and_replaced_whole(kube_api, client):
    """NodeSpec.Taints is +listType=atomic (a patch replaces the list); ValidateNode refuses a bad key, value or
    effect and a second taint with the same key and effect (422)."""
    core = client[0]
    kube_api.add_node("a")
    admin = {"key": "example.com/maintenance", "value": "disk", "effect": "NoExecute"}
    core.patch_node("a", {"spec": {"taints": [admin]}}, _content_type=SMP)
    ours = {"key": "example.com/gpu", "value": "x", "effect": "NoSchedule"}
    core.patch_node("a", {"spec": {"taints": [ours]}}, _content_type=SMP)
    assert kube_api.get("", "nodes", "a")["spec"]["taints"] == [ours]
    for bad, field in [({"key": "a b", "value": "x", "effect": "NoSchedule"}, "spec.taints[0].key"),
                       ({"key": "k", "value": "not ok", "effect": "NoSchedule"}, "spec.taints[0].value"),
                       ({"key": "k", "value": "x" * 64, "effect": "NoSchedule"}, "spec.taints[0].value"),
                       ({"key": "k", "value": "x", "effect": "Sometimes"}, "spec.taints[0].effect")]:
        with pytest.raises(ApiException) as exc:
            core.patch_node("a", {"spec": {"taints": [bad]}}, _content_type=SMP)
        assert exc.value.status == 422 and field in status_of(exc)["message"], bad
    with pytest.raises(ApiException) as exc:
        core.patch_node("a", {"spec": {"taints": [ours, dict(ours, value="y")]}}, _content_type=SMP)
    assert exc.value.status == 422 and "unique by key and effect" in status_of(exc)["message"]
    # the same key with another effect is another taint
    core.patch_node("a", {"spec": {"taints": [ours, dict(ours, effect="NoExecute")]}}, _content_type=SMP)
    assert kube_api.get("", "nodes", "a")["spec"]["taints"] == [ours, dict(ours, effect="NoExecute")]
