"""_dra ComputeDomains: a short declaration becomes a ComputeDomain that NVIDIA's own CRD schema (chart v25.12.0,
tests/fixtures/dra/crd-computedomains-v25.12.0.yaml) accepts with nothing pruned, and the workload's reference to the
claim template NVIDIA's controller creates; bad declarations are refused naming the key and what is valid."""

import os

import jsonschema
import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra

CRD = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dra", "crd-computedomains-v25.12.0.yaml")


def _crd():
    with open(CRD) as handle:
        return yaml.safe_load(handle)


def _schema():
    crd = _crd()
    (version,) = crd["spec"]["versions"]
    return crd, version


def _schema_errors(obj):
    dummy, version = _schema()
    return sorted(e.message for e in jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"]).iter_errors(obj))


def _pruned(obj, schema, path=""):
    """The fields of ``obj`` the API server would drop silently: not in the structural schema (metadata aside)."""
    out = []
    if isinstance(obj, dict) and schema.get("type") == "object" and "properties" in schema:
        for key, value in obj.items():
            if key not in schema["properties"]:
                out.append(path + key)
            elif path or key != "metadata":
                out.extend(_pruned(value, schema["properties"][key], path + key + "."))
    return out


GOOD = [
    {"name": "nvl72-train", "namespace": "ml", "num_nodes": 18},
    {"name": "imex-all", "namespace": "ml", "num_nodes": 0, "channel_allocation_mode": "All",
     "claim_template": "imex-channels"},
    {"name": "one", "namespace": "default", "num_nodes": 1, "channel_allocation_mode": "Single"},
]


def test_the_crd_is_nvidias_computedomain_at_v1beta1():
    crd, version = _schema()
    assert crd["metadata"]["name"] == "computedomains.resource.nvidia.com"
    assert "%s/%s" % (crd["spec"]["group"], version["name"]) == _dra.COMPUTE_DOMAIN_API_VERSION
    assert crd["spec"]["names"]["kind"] == _dra.COMPUTE_DOMAIN_KIND and crd["spec"]["scope"] == "Namespaced"
    assert version["served"] and version["storage"]
    mode = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["channel"]["properties"][
        "allocationMode"]
    assert sorted(mode["enum"]) == sorted(_dra.CHANNEL_ALLOCATION_MODES) and mode["default"] == "Single"


@pytest.mark.parametrize("decl", GOOD, ids=[d["name"] for d in GOOD])
def test_built_compute_domains_are_accepted_by_nvidias_schema(decl):
    obj = _dra.compute_domain_object(decl)
    assert _schema_errors(obj) == []
    dummy, version = _schema()
    assert _pruned(obj, version["schema"]["openAPIV3Schema"]) == []
    assert obj["metadata"]["namespace"] == decl["namespace"]
    assert obj["spec"]["numNodes"] == decl["num_nodes"]
    assert obj["spec"]["channel"]["allocationMode"] == decl.get("channel_allocation_mode", "Single")
    claims = _dra.compute_domain_pod_claims(decl)
    assert claims["resourceClaims"][0]["resourceClaimTemplateName"] == \
        obj["spec"]["channel"]["resourceClaimTemplate"]["name"] == decl.get("claim_template", decl["name"] + "-channel")
    assert claims["container_claims"] == [{"name": claims["resourceClaims"][0]["name"]}]


def test_the_schema_check_is_real():
    """What the planner refuses, NVIDIA's schema refuses too where it can (and the check above would see it)."""
    obj = _dra.compute_domain_object(GOOD[0])
    obj["spec"]["channel"]["allocationMode"] = "all"
    assert any("'all' is not one of" in e for e in _schema_errors(obj))
    del obj["spec"]["numNodes"]
    assert any("'numNodes' is a required property" in e for e in _schema_errors(obj))
    dummy, version = _schema()
    obj["spec"]["nodes"] = 3
    assert _pruned(obj, version["schema"]["openAPIV3Schema"]) == ["spec.nodes"]


@pytest.mark.parametrize("decl,expected", [
    ({"name": "x", "namespace": "ml", "num_nodes": 2, "channel_allocation_mode": "all"},
     "compute domain.channel_allocation_mode must be one of Single, All"),
    ({"name": "x", "namespace": "ml", "num_nodes": -1}, "compute domain.num_nodes must be a whole number of nodes, 0"),
    ({"name": "x", "namespace": "ml", "num_nodes": True}, "compute domain.num_nodes must be a whole number"),
    ({"name": "x", "namespace": "ml", "num_nodes": "4"}, "compute domain.num_nodes must be a whole number"),
    ({"name": "X_1", "namespace": "ml", "num_nodes": 1}, "compute domain.name 'X_1' is not a Kubernetes object name"),
    ({"name": "x", "namespace": "ML", "num_nodes": 1}, "compute domain.namespace 'ML' is not a namespace name"),
    ({"name": "x", "namespace": "ml"}, "compute domain.num_nodes is required"),
    ({"name": "x", "namespace": "ml", "num_nodes": 1, "nodes": 2}, "compute domain has unknown keys nodes (valid: name"),
    ({"name": "x", "namespace": "ml", "num_nodes": 1, "claim_template": "a b"},
     "compute domain.claim_template 'a b' is not a Kubernetes object name"),
    ({"name": "a" * 250, "namespace": "ml", "num_nodes": 1}, "is too long to derive the claim template's name"),
    (["x"], "compute domain must be a mapping with the keys name, namespace"),
])
def test_bad_declarations_are_refused_naming_what_is_wrong(decl, expected):
    errors = _dra.compute_domain_errors(decl)
    assert len(errors) == 1, errors
    assert expected in errors[0]
    with pytest.raises(_dra.DraError, match="compute domain"):
        _dra.compute_domain_object(decl)


def test_every_problem_is_named_at_once():
    errors = _dra.compute_domain_errors({"name": "", "num_nodes": -2, "channel_allocation_mode": "Many"})
    named = [e.split(" ", 2)[1] for e in errors]
    assert named == ["domain.namespace", "domain.name", "domain.num_nodes", "domain.channel_allocation_mode"]
