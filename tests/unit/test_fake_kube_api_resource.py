"""resource.k8s.io (Dynamic Resource Allocation) in the fake API server: discovery per Kubernetes version, the
objects at v1, and the validation a v1.34 API server applies to the fields the collection writes."""
import json
import urllib.error
import urllib.request

import pytest

from tests.support.fake_kube_api import FakeKubeApi


def _serve(request, **kwargs):
    api = FakeKubeApi(**kwargs).start()
    request.addfinalizer(api.stop)
    return api


def _get(api, path):
    try:
        with urllib.request.urlopen(api.url + path) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _group(api, name):
    code, body = _get(api, "/apis")
    assert code == 200
    return [g for g in body["groups"] if g["name"] == name]


def test_v1_34_serves_resource_v1_in_discovery(request):
    api = _serve(request, server_version="v1.34.1")
    group, = _group(api, "resource.k8s.io")
    assert [v["version"] for v in group["versions"]] == ["v1"]
    assert group["preferredVersion"] == {"groupVersion": "resource.k8s.io/v1", "version": "v1"}
    code, body = _get(api, "/apis/resource.k8s.io/v1")
    assert code == 200
    assert {r["name"]: (r["kind"], r["namespaced"]) for r in body["resources"]} == {
        "deviceclasses": ("DeviceClass", False), "resourceslices": ("ResourceSlice", False),
        "resourceclaims": ("ResourceClaim", True), "resourceclaimtemplates": ("ResourceClaimTemplate", True)}
    assert _get(api, "/apis/resource.k8s.io/v1beta1")[0] == 404


def test_v1_33_serves_no_resource_group_by_default(request):
    api = _serve(request, server_version="v1.33.2")
    assert api.resource_api_versions == []
    assert _group(api, "resource.k8s.io") == []
    assert _get(api, "/apis/resource.k8s.io/v1")[0] == 404
    assert _get(api, "/apis/resource.k8s.io/v1/resourceslices")[0] == 404


def test_v1_33_with_betas_enabled_lists_both_preferring_v1beta2(request):
    api = _serve(request, server_version="v1.33.2", resource_api_versions=["v1beta1", "v1beta2"])
    group, = _group(api, "resource.k8s.io")
    assert [v["groupVersion"] for v in group["versions"]] == ["resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"]
    assert group["preferredVersion"]["version"] == "v1beta2"
    code, body = _get(api, "/apis/resource.k8s.io/v1beta1")
    assert code == 200 and "resourceslices" in [r["name"] for r in body["resources"]]
    assert _get(api, "/apis/resource.k8s.io/v1")[0] == 404


def test_a_group_with_one_version_is_unchanged(request):
    api = _serve(request, server_version="v1.34.0")
    group, = _group(api, "apps")
    assert group["versions"] == [{"groupVersion": "apps/v1", "version": "v1"}]
    assert group["preferredVersion"]["version"] == "v1"


def test_unknown_resource_version_is_refused():
    with pytest.raises(ValueError):
        FakeKubeApi(resource_api_versions=["v2"])
