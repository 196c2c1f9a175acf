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


# ---- objects at resource.k8s.io/v1, through the real kubernetes client --------------------------------------------
@pytest.fixture
def dra(request, tmp_path):
    import kubernetes
    api = _serve(request, server_version="v1.34.1")
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu"}})
    cfg = kubernetes.client.Configuration()
    cfg.host = api.url
    return api, kubernetes.client.ApiClient(cfg)


def _call(client, method, path, body=None, content_type="application/json"):
    """A raw HTTP request to the fake server (``client`` is the kubernetes ApiClient, whose host it uses)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(client.configuration.host + path, data=data, method=method,
                                 headers={"Content-Type": content_type, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


RCT = "/apis/resource.k8s.io/v1/namespaces/gpu/resourceclaimtemplates"


def _template(name="one-gpu", **request):
    req = dict({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}, **request)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [req]}}}}


def test_claim_template_crud_defaults_and_immutable_spec(dra):
    api, client = dra
    code, body = _call(client, "POST", RCT, _template())
    assert code == 201
    assert body["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    code, got = _call(client, "GET", RCT + "/one-gpu")
    assert code == 200 and got["metadata"]["uid"] == body["metadata"]["uid"]
    # labels may change; the spec may not
    code, dummy = _call(client, "PATCH", RCT + "/one-gpu", {"metadata": {"labels": {"a": "b"}}},
                        "application/merge-patch+json")
    assert code == 200
    changed = _template(exactly={"deviceClassName": "mig.nvidia.com"})
    code, status = _call(client, "PUT", RCT + "/one-gpu", changed)
    assert code == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec",
                                            "message": status["details"]["causes"][0]["message"]}]
    assert status["message"].startswith('ResourceClaimTemplate.resource.k8s.io "one-gpu" is invalid: spec: Invalid '
                                        'value: ')
    assert status["message"].endswith(": field is immutable")
    assert api.get("resource.k8s.io", "resourceclaimtemplates", "one-gpu", "gpu")["spec"]["spec"]["devices"][
        "requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    code, dummy = _call(client, "DELETE", RCT + "/one-gpu")
    assert code == 200 and _call(client, "GET", RCT + "/one-gpu")[0] == 404


def test_claim_template_through_the_kubernetes_client(dra):
    import kubernetes
    from kubernetes.client.exceptions import ApiException
    api, client = dra
    resource = kubernetes.client.ResourceV1Api(client)
    out = resource.create_namespaced_resource_claim_template("gpu", _template(
        exactly={"deviceClassName": "gpu.nvidia.com", "selectors": [
            {"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}))
    assert out.spec.spec.devices.requests[0].exactly.count == 1
    listed = resource.list_namespaced_resource_claim_template("gpu")
    assert [t.metadata.name for t in listed.items] == ["one-gpu"]
    out.spec.spec.devices.requests[0].exactly.count = 2
    with pytest.raises(ApiException) as exc:
        resource.replace_namespaced_resource_claim_template("one-gpu", "gpu", out)
    assert exc.value.status == 422 and "field is immutable" in json.loads(exc.value.body)["message"]
    resource.delete_namespaced_resource_claim_template("one-gpu", "gpu")
    assert resource.list_namespaced_resource_claim_template("gpu").items == []


def _causes(status):
    return sorted((c["field"], c["reason"]) for c in status["details"]["causes"])


@pytest.mark.parametrize("spec, expected", [
    ({"devices": {"requests": []}}, []),
    ({"devices": {"requests": [{"name": "r%d" % i, "exactly": {"deviceClassName": "c"}} for i in range(33)]}},
     [("spec.spec.devices.requests", "FieldValueTooMany")]),
    ({"devices": {"requests": [{"name": "Bad_Name", "exactly": {"deviceClassName": "c"}}]}},
     [("spec.spec.devices.requests[0].name", "FieldValueInvalid")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c"}},
                               {"name": "a", "exactly": {"deviceClassName": "c"}}]}},
     [("spec.spec.devices.requests[1]", "FieldValueDuplicate")]),
    ({"devices": {"requests": [{"name": "a"}]}}, [("spec.spec.devices.requests[0]", "FieldValueRequired")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c"},
                                "firstAvailable": [{"name": "b", "deviceClassName": "c"}]}]}},
     [("spec.spec.devices.requests[0]", "FieldValueInvalid")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {}}]}},
     [("spec.spec.devices.requests[0].exactly.deviceClassName", "FieldValueRequired")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "Not.A.Subdomain"}}]}},
     [("spec.spec.devices.requests[0].exactly.deviceClassName", "FieldValueInvalid")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "count": -1}}]}},
     [("spec.spec.devices.requests[0].exactly.count", "FieldValueInvalid")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "allocationMode": "All",
                                                         "count": 2}}]}},
     [("spec.spec.devices.requests[0].exactly.count", "FieldValueInvalid")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}}]}},
     [("spec.spec.devices.requests[0].exactly.allocationMode", "FieldValueNotSupported")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "selectors": [
        {"cel": {"expression": ""}}, {"cel": {"expression": "x" * (10 * 1024 + 1)}}, {}]}}]}},
     [("spec.spec.devices.requests[0].exactly.selectors[0].cel.expression", "FieldValueRequired"),
      ("spec.spec.devices.requests[0].exactly.selectors[1].cel.expression", "FieldValueTooLong"),
      ("spec.spec.devices.requests[0].exactly.selectors[2].cel", "FieldValueRequired")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "selectors": [
        {"cel": {"expression": "true"}}] * 33}}]}},
     [("spec.spec.devices.requests[0].exactly.selectors", "FieldValueTooMany")]),
    ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c"}}],
                  "config": [{"requests": ["b"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {}}},
                             {"opaque": {"driver": "x" * 64, "parameters": {"k": "v" * 10240}}},
                             {"opaque": {"driver": "gpu.nvidia.com", "parameters": [1]}},
                             {}]}},
     [("spec.spec.devices.config[0].requests[0]", "FieldValueInvalid"),
      ("spec.spec.devices.config[1].opaque.driver", "FieldValueTooLong"),
      ("spec.spec.devices.config[1].opaque.parameters", "FieldValueTooLong"),
      ("spec.spec.devices.config[2].opaque.parameters", "FieldValueInvalid"),
      ("spec.spec.devices.config[3].opaque", "FieldValueRequired")]),
    ({"devices": {"requests": [{"name": "a", "firstAvailable": [
        {"name": "full", "deviceClassName": "gpu.nvidia.com"},
        {"name": "mig", "deviceClassName": "mig.nvidia.com", "count": 2}]}],
        "constraints": [{"requests": ["a/mig"], "matchAttribute": "gpu.nvidia.com/parentUUID"}],
        "config": [{"requests": ["a/full", "a"],
                    "opaque": {"driver": "gpu.nvidia.com", "parameters": {"kind": "GpuConfig"}}}]}}, []),
])
def test_claim_template_validation(dra, spec, expected):
    api, client = dra
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
            "spec": {"spec": spec}}
    code, status = _call(client, "POST", RCT, body)
    if not expected:
        assert code == 201, status
        return
    assert code == 422, status
    assert _causes(status) == sorted(expected), status["message"]
    assert api.get("resource.k8s.io", "resourceclaimtemplates", "t", "gpu") is None


def test_device_class_crud_and_validation(dra):
    api, client = dra
    path = "/apis/resource.k8s.io/v1/deviceclasses"
    good = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
                     "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"a": 1}}}]}}
    assert _call(client, "POST", path, good)[0] == 201
    assert [o["metadata"]["name"] for o in _call(client, "GET", path)[1]["items"]] == ["gpu.example.com"]
    bad = dict(good, metadata={"name": "Bad"}, spec={"selectors": [{"cel": {"expression": ""}}],
                                                     "config": [{"opaque": {"driver": "gpu.nvidia.com"}}]})
    code, status = _call(client, "POST", path, bad)
    assert code == 422
    assert _causes(status) == [("metadata.name", "FieldValueInvalid"),
                               ("spec.config[0].opaque.parameters", "FieldValueRequired"),
                               ("spec.selectors[0].cel.expression", "FieldValueRequired")]
    assert status["message"].startswith('DeviceClass.resource.k8s.io "Bad" is invalid: [')
    # a class's selectors may change (unlike a claim template's spec)
    changed = dict(good, spec={"selectors": [{"cel": {"expression": "true"}}]})
    assert _call(client, "PUT", path + "/gpu.example.com", changed)[0] == 200


def _slice(name, node, driver="gpu.nvidia.com", devices=None, **spec):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": dict({"driver": driver, "nodeName": node,
                          "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                          "devices": devices if devices is not None else [
                              {"name": "gpu-0", "attributes": {"type": {"string": "gpu"},
                                                               "driverVersion": {"version": "580.65.6"}},
                               "capacity": {"memory": {"value": "80Gi"}}}]}, **spec)}


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def test_resource_slice_field_selectors(dra):
    api, client = dra
    for name, node, driver in (("a-gpu", "a", "gpu.nvidia.com"), ("b-gpu", "b", "gpu.nvidia.com"),
                               ("a-cd", "a", "compute-domain.nvidia.com")):
        code, status = _call(client, "POST", SLICES, _slice(name, node, driver))
        assert code == 201, status

    def names(selector):
        return sorted(o["metadata"]["name"] for o in _call(client, "GET", SLICES + "?fieldSelector=" + selector)[1][
            "items"])
    assert names("spec.nodeName=a") == ["a-cd", "a-gpu"]
    assert names("spec.nodeName=a,spec.driver=gpu.nvidia.com") == ["a-gpu"]
    assert names("spec.driver!=gpu.nvidia.com") == ["a-cd"]
    assert names("spec.nodeName==c") == []


def test_resource_slice_generate_name(dra):
    api, client = dra
    body = _slice(None, "node-1")
    body["metadata"] = {"generateName": "node-1-gpu.nvidia.com-"}
    code, out = _call(client, "POST", SLICES, body)
    assert code == 201
    assert out["metadata"]["name"].startswith("node-1-gpu.nvidia.com-")
    assert len(out["metadata"]["name"]) == len("node-1-gpu.nvidia.com-") + 5


@pytest.mark.parametrize("spec, devices, expected", [
    ({"nodeName": None}, None, [("spec", "FieldValueRequired")]),
    ({"allNodes": True}, None, [("spec", "FieldValueInvalid")]),
    ({"driver": "", "pool": {"name": "", "resourceSliceCount": 0}}, None,
     [("spec.driver", "FieldValueRequired"), ("spec.pool.name", "FieldValueRequired"),
      ("spec.pool.resourceSliceCount", "FieldValueInvalid")]),
    ({}, [{"name": "gpu-%d" % i} for i in range(129)], [("spec.devices", "FieldValueTooMany")]),
    ({}, [{"name": "gpu-0"}, {"name": "gpu-0"}, {"name": "GPU_1"}],
     [("spec.devices[1]", "FieldValueDuplicate"), ("spec.devices[2].name", "FieldValueInvalid")]),
    ({}, [{"name": "gpu-0", "attributes": {"a%d" % i: {"int": i} for i in range(33)}}],
     [("spec.devices[0]", "FieldValueInvalid")]),
    ({}, [{"name": "gpu-0", "attributes": {"bad-name": {"int": 1}, "two": {"int": 1, "bool": True},
                                           "none": {}, "ver": {"version": "580.65"},
                                           "gpu.nvidia.com/ok": {"string": "x"}}}],
     [("spec.devices[0].attributes", "FieldValueInvalid"), ("spec.devices[0].attributes[none]", "FieldValueInvalid"),
      ("spec.devices[0].attributes[two]", "FieldValueInvalid"),
      ("spec.devices[0].attributes[ver].version", "FieldValueInvalid")]),
])
def test_resource_slice_validation(dra, spec, devices, expected):
    api, client = dra
    body = _slice("s", "node-1", devices=devices)
    for key, value in spec.items():
        if value is None:
            body["spec"].pop(key)
        else:
            body["spec"][key] = value
    code, status = _call(client, "POST", SLICES, body)
    assert code == 422, status
    assert _causes(status) == sorted(expected), status["message"]


def test_resource_slice_update_keeps_driver_pool_and_node(dra):
    api, client = dra
    assert _call(client, "POST", SLICES, _slice("s", "node-1"))[0] == 201
    moved = _slice("s", "node-2")
    code, status = _call(client, "PUT", SLICES + "/s", moved)
    assert code == 422
    assert _causes(status) == [("spec.nodeName", "FieldValueInvalid"), ("spec.pool.name", "FieldValueInvalid")]
    more = _slice("s", "node-1", devices=[{"name": "gpu-0"}, {"name": "gpu-1"}])
    more["spec"]["pool"]["generation"] = 2
    code, out = _call(client, "PUT", SLICES + "/s", more)
    assert code == 200 and len(out["spec"]["devices"]) == 2


def test_resource_objects_not_served_without_v1(request):
    api = _serve(request, server_version="v1.33.2", resource_api_versions=["v1beta2"])
    req = urllib.request.Request(api.url + SLICES, data=json.dumps(_slice("s", "n")).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req)
    assert exc.value.code == 404
    assert api.objects == {}
