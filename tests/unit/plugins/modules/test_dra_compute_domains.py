"""dra_compute_domains: the real kubernetes client over HTTP against the fake API server, which serves ComputeDomains
from the CRD of NVIDIA's DRA driver chart v25.12.0 (pruned, defaulted, validated, the spec immutable;
tests/support/fake_crd.py): check, apply, apply again, change, remove; foreign objects, missing namespaces, claims in
use and bad declarations refused before any write."""

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
from ansible_collections.gpuops.nvidia.plugins.modules import dra_compute_domains
from tests.conftest import KUBE_TOKEN
from tests.support.modrun import run_main as run_module

pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")

TRAIN = {"name": "nvl72-train", "namespace": "ml-a", "num_nodes": 18}
ALL = {"name": "imex-all", "namespace": "ml-b", "num_nodes": 0, "channel_allocation_mode": "All",
       "claim_template": "imex-channels"}


def domains(api):
    return dict(("%s/%s" % (s, n), o) for (g, p, s, n), o in api.objects.items() if p == "computedomains")


def args(api, decls):
    return dict(kubeconfig=api.kubeconfig_path, compute_domains=decls)


def writes(api):
    return len(api.writes(dry_run=False, accepted=True))


def test_check_then_apply_then_unchanged_then_removed(api):
    res = run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]), check_mode=True, diff=True)
    assert res["changed"] and not res.get("failed") and domains(api) == {}
    assert res["changes"] == ["ml-a/nvl72-train created", "ml-b/imex-all created"]
    assert res["diff"]["before"]["ml-a/nvl72-train"] == {}
    assert res["diff"]["after"]["ml-b/imex-all"]["spec"] == {
        "numNodes": 0, "channel": {"allocationMode": "All", "resourceClaimTemplate": {"name": "imex-channels"}}}
    assert len(api.writes(dry_run=True, accepted=True)) == 2 and writes(api) == 0   # the API server's dry run only

    res = run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]))
    assert res["changed"] and res["compute_domains"] == {"ml-a/nvl72-train": "nvl72-train-channel",
                                                         "ml-b/imex-all": "imex-channels"}
    stored = domains(api)
    assert sorted(stored) == ["ml-a/nvl72-train", "ml-b/imex-all"]
    train = stored["ml-a/nvl72-train"]
    assert train["apiVersion"] == "resource.nvidia.com/v1beta1" and train["kind"] == "ComputeDomain"
    assert train["spec"] == {"numNodes": 18, "channel": {"allocationMode": "Single",
                                                         "resourceClaimTemplate": {"name": "nvl72-train-channel"}}}
    assert train["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuops.nvidia"}

    # a re-run writes nothing, in check mode neither
    before = writes(api)
    for check in (True, False):
        res = run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]), check_mode=check, diff=True)
        assert res["changed"] is False and res["changes"] == [] and "diff" not in res
    assert writes(api) == before and len(api.writes(dry_run=True, accepted=True)) == 2

    # ALL is no longer declared: the collection's one goes, a foreign one in the same namespace stays
    api.put({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
             "metadata": {"name": "theirs", "namespace": "ml-b"},
             "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "theirs-channel"}}}})
    res = run_module(dra_compute_domains.main, args(api, [TRAIN]), check_mode=True)
    assert res["changes"] == ["ml-b/imex-all deleted"] and "ml-b/imex-all" in domains(api)
    res = run_module(dra_compute_domains.main, args(api, [TRAIN]), diff=True)
    assert res["changes"] == ["ml-b/imex-all deleted"] and res["diff"]["after"]["ml-b/imex-all"] == {}
    assert sorted(domains(api)) == ["ml-a/nvl72-train", "ml-b/theirs"]
    assert res["compute_domains"] == {"ml-a/nvl72-train": "nvl72-train-channel"}
    # nothing declared: every one of the collection's goes, never the foreign one
    res = run_module(dra_compute_domains.main, args(api, []))
    assert res["changes"] == ["ml-a/nvl72-train deleted"] and sorted(domains(api)) == ["ml-b/theirs"]
    assert run_module(dra_compute_domains.main, args(api, []))["changed"] is False


def test_a_changed_declaration_replaces_the_immutable_computedomain(api):
    run_module(dra_compute_domains.main, args(api, [TRAIN]))
    old_uid = domains(api)["ml-a/nvl72-train"]["metadata"]["uid"]
    # the API refuses to change the spec in place (the CRD's rule): the module deletes and creates it again
    patched = api.handle("PATCH", "/apis/resource.nvidia.com/v1beta1/namespaces/ml-a/computedomains/nvl72-train",
                         {"Content-Type": "application/merge-patch+json", "Authorization": "Bearer " + KUBE_TOKEN},
                         b'{"spec": {"numNodes": 16}}')
    assert patched[0] == 422 and "A computeDomain.spec is immutable" in patched[1]["message"]
    res = run_module(dra_compute_domains.main, args(api, [dict(TRAIN, num_nodes=16)]), check_mode=True, diff=True)
    assert "ml-a/nvl72-train replaced" in res["changes"][0]
    assert domains(api)["ml-a/nvl72-train"]["spec"]["numNodes"] == 18
    assert res["diff"]["before"]["ml-a/nvl72-train"]["spec"]["numNodes"] == 18
    assert res["diff"]["after"]["ml-a/nvl72-train"]["spec"]["numNodes"] == 16
    res = run_module(dra_compute_domains.main, args(api, [dict(TRAIN, num_nodes=16)]))
    assert res["changed"] and not res.get("failed")
    stored = domains(api)["ml-a/nvl72-train"]
    assert stored["spec"]["numNodes"] == 16 and stored["metadata"]["uid"] != old_uid


def _claim(api, ns, name, domain_uid):
    api.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": name, "namespace": ns},
             "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
                 "deviceClassName": "compute-domain-default-channel.nvidia.com"}}],
                 "config": [{"requests": ["channel"], "opaque": {"driver": "compute-domain.nvidia.com", "parameters": {
                     "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
                     "domainID": domain_uid, "allocationMode": "Single"}}}]}}})


def test_a_computedomain_a_claim_uses_is_neither_deleted_nor_replaced(api):
    run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]))
    uid = domains(api)["ml-a/nvl72-train"]["metadata"]["uid"]
    _claim(api, "ml-a", "worker-0-channel-x7k2p", uid)
    _claim(api, "ml-a", "unrelated", "another-uid")
    before = writes(api)
    for decls in ([ALL], [dict(TRAIN, channel_allocation_mode="All"), ALL]):
        res = run_module(dra_compute_domains.main, args(api, decls))
        assert res["failed"] and res["changed"] is False and "nothing changed" in res["msg"]
        assert "ComputeDomain ml-a/nvl72-train would be" in res["msg"]
        assert "ResourceClaim(s) worker-0-channel-x7k2p use its IMEX channel" in res["msg"]
        assert "unrelated" not in res["msg"]
    assert writes(api) == before and domains(api)["ml-a/nvl72-train"]["metadata"]["uid"] == uid
    # the other, unused one is still managed: declared unchanged, nothing to do for it
    assert run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]))["changed"] is False


def test_a_foreign_computedomain_and_a_missing_namespace_are_refused_before_any_write(api):
    api.put({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
             "metadata": {"name": "nvl72-train", "namespace": "ml-a", "labels": {"team": "a"}},
             "spec": {"numNodes": 4, "channel": {"resourceClaimTemplate": {"name": "x"}}}})
    res = run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]))
    assert res["failed"] and "ComputeDomain ml-a/nvl72-train exists and is not this collection's" in res["msg"]
    assert writes(api) == 0 and sorted(domains(api)) == ["ml-a/nvl72-train"]
    assert domains(api)["ml-a/nvl72-train"]["spec"]["numNodes"] == 4
    res = run_module(dra_compute_domains.main, args(api, [ALL, dict(TRAIN, namespace="nowhere")]))
    assert res["failed"] and "namespace nowhere does not exist" in res["msg"] and writes(api) == 0


@pytest.mark.parametrize("decl, words", [
    (dict(TRAIN, channel_allocation_mode="all"),
     "compute_domains[0].channel_allocation_mode must be one of Single, All"),
    (dict(TRAIN, num_nodes=-1), "compute_domains[0].num_nodes must be a whole number of nodes, 0 or more"),
    (dict(TRAIN, num_nodes="4"), "compute_domains[0].num_nodes must be a whole number of nodes"),
    (dict(TRAIN, nodes=2), "compute_domains[0] has unknown keys nodes (valid: name, namespace, num_nodes"),
    (dict(TRAIN, namespace="ML"), "compute_domains[0].namespace 'ML' is not a namespace name"),
    ({"name": "x", "namespace": "ml-a"}, "compute_domains[0].num_nodes is required"),
], ids=["mode", "negative", "string", "unknown-key", "namespace", "missing"])
def test_bad_declarations_are_refused_naming_the_field_and_the_valid_values(api, decl, words):
    res = run_module(dra_compute_domains.main, args(api, [decl]))
    assert res["failed"] and "invalid input" in res["msg"] and words in res["msg"], res["msg"]
    assert api.requests == [] and domains(api) == {}


def test_a_computedomain_declared_twice_is_refused(api):
    res = run_module(dra_compute_domains.main, args(api, [TRAIN, dict(TRAIN, num_nodes=2)]))
    assert res["failed"] and "compute_domains[1]: ComputeDomain ml-a/nvl72-train is declared twice" in res["msg"]
    assert api.requests == []


def test_what_is_written_is_what_nvidias_crd_keeps():
    """The object the module creates is the planner's, whole: the CRD's pruning (fake_crd) drops none of it."""
    from tests.support import fake_crd
    obj = _dra.compute_domain_object(ALL)
    kept = dict(obj)
    assert fake_crd.prune(kept, fake_crd.load("computedomains", "v25.12.0")["openAPIV3Schema"], root=True) == []


def test_without_the_crd_check_mode_plans_and_a_real_run_says_to_install_the_chart(api, monkeypatch):
    """Before NVIDIA's chart is installed the API serves no ComputeDomains: a check run over a fresh cluster still
    reports what it would create; a real run fails naming what to install, writing nothing."""
    from tests.support import fake_kube_api
    monkeypatch.setattr(fake_kube_api, "_BY_PATH", dict((k, v) for k, v in fake_kube_api._BY_PATH.items()
                                                        if k[2] != "computedomains"))
    res = run_module(dra_compute_domains.main, args(api, [TRAIN]), check_mode=True)
    assert res["changed"] and not res.get("failed") and res["changes"] == ["ml-a/nvl72-train created"]
    res = run_module(dra_compute_domains.main, args(api, [TRAIN]))
    assert res["failed"] and "the cluster serves no ComputeDomains" in res["msg"] and "nothing changed" in res["msg"]
    assert "DRA driver chart" in res["msg"] and writes(api) == 0
    # nothing declared, nothing there to remove: nothing to do
    assert run_module(dra_compute_domains.main, args(api, []))["changed"] is False


def test_a_concurrent_writer_makes_the_run_read_again(api):
    run_module(dra_compute_domains.main, args(api, [TRAIN, ALL]))
    # the delete of the first try finds imex-all changed since the run read it (409); the second try reads it again
    api.inject_failure("DELETE", r"computedomains/imex-all$", code=409, reason="Conflict")
    res = run_module(dra_compute_domains.main, args(api, [TRAIN]))
    assert res["changed"] and not res.get("failed") and res["changes"] == ["ml-b/imex-all deleted"]
    assert sorted(domains(api)) == ["ml-a/nvl72-train"]
    assert [r["code"] for r in api.requests if r["method"] == "DELETE"] == [409, 200]
