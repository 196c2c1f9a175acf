"""dra_claim_templates and dra_node_verify: the real kubernetes client over HTTP against the fake API server, serving
resource.k8s.io/v1 as Kubernetes 1.34 does (tests/support/fake_kube_api.py validates what is written)."""

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
from ansible_collections.gpuops.nvidia.plugins.modules import dra_claim_templates, dra_node_verify
from tests.support.modrun import run_main as run_module

pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")

PROFILES = [{"name": "default"}, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4}]
H200 = {"index": 0, "uuid": "GPU-h0", "name": "NVIDIA H200", "memory_total_bytes": 150754820096,
        "mig_mode_current": "Disabled", "mig_devices": []}


def templates_in(api, ns):
    return dict((n, o) for (g, p, s, n), o in api.objects.items() if p == "resourceclaimtemplates" and s == ns)


def args(api, templates, **kw):
    out = dict(kubeconfig=api.kubeconfig_path, template_set="fleet", namespaces=["ml-a", "ml-b"], templates=templates)
    out.update(kw)
    return out


def test_check_then_apply_then_unchanged(api):
    fleet = _dra.fleet_templates(PROFILES)
    res = run_module(dra_claim_templates.main, args(api, fleet), check_mode=True, diff=True)
    assert res["changed"] and templates_in(api, "ml-a") == {}
    assert sorted(res["changes"]) == ["ml-a/gpu created", "ml-a/gpu-ts-4 created", "ml-b/gpu created",
                                      "ml-b/gpu-ts-4 created"]
    assert res["diff"]["after"]["ml-a/gpu-ts-4"]["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"][
        "sharing"]["strategy"] == "TimeSlicing"
    res = run_module(dra_claim_templates.main, args(api, fleet))
    assert res["changed"] and res["templates"] == {"ml-a": ["gpu", "gpu-ts-4"], "ml-b": ["gpu", "gpu-ts-4"]}
    stored = templates_in(api, "ml-b")["gpu-ts-4"]
    assert stored["metadata"]["labels"][_dra.SET_LABEL] == "fleet"
    writes = len(api.writes(dry_run=False, accepted=True))
    res = run_module(dra_claim_templates.main, args(api, fleet))
    assert res["changed"] is False and len(api.writes(dry_run=False, accepted=True)) == writes


def test_a_changed_profile_replaces_the_template_and_prunes_the_old_one(api):
    run_module(dra_claim_templates.main, args(api, _dra.fleet_templates(PROFILES)))
    old_uid = templates_in(api, "ml-a")["gpu"]["metadata"]["uid"]
    changed = _dra.fleet_templates([{"name": "ts-2", "sharing": "time-slicing", "replicas": 2}], interval="Long")
    res = run_module(dra_claim_templates.main, args(api, changed), diff=True)
    assert res["changed"]
    assert sorted(templates_in(api, "ml-a")) == ["gpu", "gpu-ts-2"]
    assert templates_in(api, "ml-a")["gpu"]["metadata"]["uid"] == old_uid          # unchanged: not rewritten
    assert "ml-a/gpu-ts-4 deleted" in res["changes"]
    res = run_module(dra_claim_templates.main, args(api, changed[:1] + [dict(changed[1], config=_dra.gpu_config(
        "time-slicing", interval="Short"))]))
    assert "ml-a/gpu-ts-2 replaced" in res["changes"][0]
    params = templates_in(api, "ml-a")["gpu-ts-2"]["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["sharing"]["timeSlicingConfig"]["interval"] == "Short"


def test_a_shared_set_counts_its_users_and_deletes_a_template_with_the_last(api):
    shared = _dra.node_templates({"name": "mps-4", "sharing": "mps", "replicas": 4}, [H200])
    a = args(api, shared, template_set="gpus", user="node-a")
    b = args(api, shared, template_set="gpus", user="node-b")
    assert run_module(dra_claim_templates.main, a)["changed"]
    assert run_module(dra_claim_templates.main, b)["changed"]           # adopts it: adds its name
    users = templates_in(api, "ml-a")["gpu-mps-4-h200"]["metadata"]["annotations"]["gpuops.nvidia/users"]
    assert users == "node-a,node-b"
    assert run_module(dra_claim_templates.main, b)["changed"] is False
    # node-a goes to MPS with 2 replicas: it leaves gpu-mps-4-h200 (node-b still uses it) and publishes its own
    two = _dra.node_templates({"name": "mps-2", "sharing": "mps", "replicas": 2}, [H200])
    res = run_module(dra_claim_templates.main, args(api, two, template_set="gpus", user="node-a"))
    assert "ml-a/gpu-mps-4-h200 no longer used by node-a (still by others)" in res["changes"]
    assert sorted(templates_in(api, "ml-a")) == ["gpu-mps-2-h200", "gpu-mps-4-h200"]
    # node-b leaves too: the last user gone, the template goes
    res = run_module(dra_claim_templates.main, args(api, [], template_set="gpus", user="node-b"))
    assert "ml-a/gpu-mps-4-h200 deleted" in res["changes"] and sorted(templates_in(api, "ml-a")) == ["gpu-mps-2-h200"]


def test_a_shared_template_with_another_spec_than_its_other_users_is_refused(api):
    shared = _dra.node_templates({"name": "mps-4", "sharing": "mps", "replicas": 4}, [H200])
    run_module(dra_claim_templates.main, args(api, shared, template_set="gpus", user="node-a"))
    other = [dict(shared[0], config=_dra.gpu_config("mps", active_thread_percentage=10))]
    res = run_module(dra_claim_templates.main, args(api, other, template_set="gpus", user="node-b"))
    assert res["failed"] and "is published by node-a with another spec" in res["msg"]


def test_a_concurrent_writer_makes_the_run_read_again(api):
    shared = _dra.node_templates({"name": "mps-4", "sharing": "mps", "replicas": 4}, [H200])
    run_module(dra_claim_templates.main, args(api, shared, template_set="gpus", user="node-a"))
    # the first write of node-b's run finds the template changed since it read it (409), the second try succeeds
    api.inject_failure("PATCH", r"resourceclaimtemplates/gpu-mps-4-h200$", code=409, reason="Conflict")
    res = run_module(dra_claim_templates.main, args(api, shared, template_set="gpus", user="node-b"))
    assert res["changed"] and not res.get("failed")
    assert templates_in(api, "ml-b")["gpu-mps-4-h200"]["metadata"]["annotations"]["gpuops.nvidia/users"] == \
        "node-a,node-b"


def test_foreign_templates_and_missing_namespaces_are_refused_before_any_write(api):
    api.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "gpu", "namespace": "ml-b"},
             "spec": {"spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    before = len(api.writes(dry_run=False, accepted=True))
    res = run_module(dra_claim_templates.main, args(api, _dra.fleet_templates(PROFILES),
                                                    namespaces=["ml-a", "ml-b", "nope"]))
    assert res["failed"] and "nothing changed" in res["msg"]
    assert "ResourceClaimTemplate ml-b/gpu exists and is not this collection's" in res["msg"]
    assert "namespace nope does not exist" in res["msg"]
    assert len(api.writes(dry_run=False, accepted=True)) == before and templates_in(api, "ml-a") == {}
    # and pruning never deletes it
    res = run_module(dra_claim_templates.main, args(api, [], namespaces=["ml-b"], state="absent"))
    assert res["changed"] is False and "gpu" in templates_in(api, "ml-b")


@pytest.mark.parametrize("kw, words", [
    (dict(templates=[{"name": "Bad"}]), "not a Kubernetes object name"),
    (dict(templates=[{"name": "a", "config": {"kind": "MpsConfig"}}]), "must be a GpuConfig"),
    # a GpuConfig built by hand: its limits are Kubernetes quantities, not CUDA's notation
    (dict(templates=[{"name": "a", "config": _dra.gpu_config("mps", pinned_memory_limit="8GB")}]),
     "templates[0].config.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit '8GB' is not a Kubernetes quantity"),
    (dict(templates=[{"name": "a", "config": _dra.gpu_config("mps", per_device_pinned_memory_limit={"0": "1Ki"})}]),
     "templates[0].config.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[0] '1Ki' is 1024 bytes, below 1Mi"),
    (dict(templates=[{"name": "a", "count": 0}]), "count must be from 1 to 16"),
    (dict(templates=[{"name": "a"}, {"name": "a"}]), "declared twice"),
    (dict(namespaces=["Bad Ns"]), "namespaces"),
    (dict(template_set="a b"), "template_set"),
])
def test_bad_input_changes_nothing(api, kw, words):
    res = run_module(dra_claim_templates.main, args(api, kw.pop("templates", []), **kw))
    assert res["failed"] and words in res["msg"] and "nothing changed" in res["msg"]
    assert api.requests == []


def _slice(node, devices):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": node + "-gpu.nvidia.com-x"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def test_node_verify_passes_on_exact_slices_and_fails_listing_the_difference(api):
    api.add_node("h200-1")
    attributes = {"type": {"string": "gpu"}, "uuid": {"string": "GPU-h0"}}
    api.put(_slice("h200-1", [{"name": "gpu-0", "attributes": attributes}]))
    ok = run_module(dra_node_verify.main, dict(kubeconfig=api.kubeconfig_path, node_name="h200-1", gpus=[H200],
                                               timeout=1, interval=0.05))
    assert ok["changed"] is False and ok["published"] == {"GPU-h0": {"name": "gpu-0", "type": "gpu"}}
    other = dict(H200, uuid="GPU-h1", index=1)
    bad = run_module(dra_node_verify.main, dict(kubeconfig=api.kubeconfig_path, node_name="h200-1",
                                                gpus=[H200, other], timeout=1, interval=0.2))
    assert bad["failed"] and "GPU GPU-h1 is not published" in bad["msg"] and "stays cordoned" in bad["msg"]


def test_node_verify_refuses_bad_facts_and_unknown_nodes(api):
    res = run_module(dra_node_verify.main, dict(kubeconfig=api.kubeconfig_path, node_name="x", gpus="nope"))
    assert res["failed"] and "gpus must be the GPU facts" in res["msg"]
    res = run_module(dra_node_verify.main, dict(kubeconfig=api.kubeconfig_path, node_name="x", gpus=[H200],
                                                timeout=1))
    assert res["failed"] and "x" in res["msg"]


def test_node_verify_checks_in_check_mode_too_and_writes_nothing(api):
    api.add_node("h200-2")
    attributes = {"type": {"string": "gpu"}, "uuid": {"string": "GPU-h0"}}
    api.put(_slice("h200-2", [{"name": "gpu-0", "attributes": attributes}]))
    seen = len(api.requests)
    for gpus, failed in (([H200], False), ([dict(H200, uuid="GPU-other")], True)):
        res = run_module(dra_node_verify.main, dict(kubeconfig=api.kubeconfig_path, node_name="h200-2", gpus=gpus,
                                                    timeout=1, interval=0.2), check_mode=True, diff=True)
        assert bool(res.get("failed")) is failed and not res.get("changed"), res
    assert [r for r in api.requests[seen:] if r["method"] != "GET"] == []
