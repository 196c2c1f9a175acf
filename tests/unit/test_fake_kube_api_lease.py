"""The fake API server's Lease (coordination.k8s.io/v1) and resourceVersion preconditions, driven by the real
kubernetes client: what the cluster lock's tests rely on."""
import json

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube

CONFLICT = ('Operation cannot be fulfilled on leases.coordination.k8s.io "lock": the object has been modified; '
            'please apply your changes to the latest version and try again')


@pytest.fixture
def coordination(kube_api):
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kube_api.kubeconfig_path, client_configuration=cfg)
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    return kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient(cfg))


def _lease(**spec):
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "lock"}, "spec": spec}


def _status(exc):
    return json.loads(exc.value.body)


def test_lease_create_read_and_precondition_conflicts(kube_api, coordination):
    made = coordination.create_namespaced_lease("ns", _lease(holderIdentity="a", leaseDurationSeconds=15,
                                                             renewTime="2026-01-02T03:04:05.123456Z"))
    assert made.spec.holder_identity == "a" and made.spec.renew_time.microsecond == 123456
    with pytest.raises(ApiException) as exc:
        coordination.create_namespaced_lease("ns", _lease(holderIdentity="b"))
    assert exc.value.status == 409 and _status(exc)["reason"] == "AlreadyExists"
    assert _status(exc)["message"] == 'leases.coordination.k8s.io "lock" already exists'

    stale = made.metadata.resource_version
    body = _lease(holderIdentity="b", leaseDurationSeconds=15)
    body["metadata"]["resourceVersion"] = stale
    coordination.replace_namespaced_lease("lock", "ns", body)                  # at the current version: applied
    with pytest.raises(ApiException) as exc:                                   # the same version again: stale
        coordination.replace_namespaced_lease("lock", "ns", body)
    assert exc.value.status == 409
    assert _status(exc) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": CONFLICT, "reason": "Conflict", "code": 409,
                            "details": {"name": "lock", "group": "coordination.k8s.io", "kind": "leases"}}
    with pytest.raises(ApiException) as exc:                                   # a merge patch with a stale version
        patch = {"metadata": {"resourceVersion": stale}, "spec": {"holderIdentity": "c"}}
        coordination.patch_namespaced_lease("lock", "ns", patch)
    assert exc.value.status == 409 and _status(exc)["message"] == CONFLICT
    assert kube_api.get("coordination.k8s.io", "leases", "lock", "ns")["spec"]["holderIdentity"] == "b"

    # without a resourceVersion a PUT is unconditional, as on a real API server
    coordination.replace_namespaced_lease("lock", "ns", _lease(holderIdentity="d", leaseDurationSeconds=15))
    assert kube_api.get("coordination.k8s.io", "leases", "lock", "ns")["spec"]["holderIdentity"] == "d"


@pytest.mark.parametrize("spec,code,fragment", [
    (dict(leaseDurationSeconds=0), 422, "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
    (dict(leaseTransitions=-1), 422, "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"),
    (dict(renewTime="yesterday"), 400, 'parsing time "yesterday"'),
])
def test_lease_validation(kube_api, coordination, spec, code, fragment):
    # plain REST (the typed client refuses a bad time itself, before sending)
    kube = _kube.Kube.from_params(dict(kubeconfig=kube_api.kubeconfig_path))
    with pytest.raises(_kube.KubeError) as exc:
        kube.create("create lease", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", _lease(**spec))
    assert exc.value.status == code and fragment in exc.value.body["message"], exc.value.body
    assert kube_api.get("coordination.k8s.io", "leases", "lock", "ns") is None


def test_uncounted_writes_are_neither_counted_nor_failed(kube_api, coordination):
    kube_api.uncounted = lambda r: "renewer" in (r["query"].get("fieldManager") or [""])[0]
    coordination.create_namespaced_lease("ns", _lease(holderIdentity="a"))
    kube_api.fail_nth_write(2)
    coordination.replace_namespaced_lease("lock", "ns", _lease(holderIdentity="a"), field_manager="renewer")
    coordination.replace_namespaced_lease("lock", "ns", _lease(holderIdentity="a"))   # 1st counted
    with pytest.raises(ApiException) as exc:                                           # 2nd counted: injected
        coordination.replace_namespaced_lease("lock", "ns", _lease(holderIdentity="b"))
    assert exc.value.status == 500
    assert len(kube_api.writes()) == 4 and len(kube_api.writes(counted=True)) == 3
