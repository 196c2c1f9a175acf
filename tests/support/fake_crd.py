"""Custom resources for the fake API server, served from the schema of their published CustomResourceDefinition.

The fake API server (fake_kube_api.py) knows a custom resource through one entry of its RESOURCES table and calls
``admit()`` from its validation step. ``admit()`` does to a custom resource what the real API server does to one on
every create, update and patch (dry runs included), in the real order:

1. pruning: fields the structural schema does not declare are dropped (apiextensions.k8s.io/v1 CRDs always prune,
   KEP-2332; the root ``apiVersion``/``kind``/``metadata`` are never pruned; ``x-kubernetes-preserve-unknown-fields``
   keeps a subtree). A request without ``fieldValidation`` gets the ``Warn`` level, the default since Kubernetes
   1.25 (kubernetes/website api-concepts.md, "Validation for unrecognized or duplicate fields"): the unknown field is
   dropped and the request succeeds. The warning header itself is not sent (the client does not read it);
   ``fieldValidation=Strict`` is not modelled.
2. defaulting: ``default`` values of the schema are filled in where the parent object exists and the field is absent.
3. validation against the openAPIV3Schema (types, enums, required, patterns, lengths, minimum), by the
   ``jsonschema`` library; every violation becomes a cause of one 422 ``Invalid`` answer worded like the API
   server's (``spec.x: Unsupported value: "foo": supported values: "a", "b"``, ``spec.y: Required value``,
   ``... in body must be of type string: "integer"``).

Not modelled: CEL rules (``x-kubernetes-validations``; the ClusterPolicy CRDs used here have none; the ComputeDomain's
one, its spec immutable, is written out in IMMUTABLE_SPEC), the status
subresource's rule that writes to the main resource ignore ``status``, conversion between versions, list-type and
map-type merge semantics.

The schemas are data: tests/fixtures/gpu-operator/clusterpolicy-<tag>.json, made from NVIDIA's published CRD by
``python -m tests.support.fake_crd extract`` (see tests/fixtures/gpu-operator/README.md).
"""

import copy
import json
import os
import sys

import jsonschema

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "gpu-operator")

# The ClusterPolicy schema versions the fixtures hold (release tags of NVIDIA/gpu-operator).
CLUSTERPOLICY_VERSIONS = ("v1.10.0", "v24.9.2", "v25.3.4", "v25.10.1", "v26.7.0")
DEFAULT_CLUSTERPOLICY_VERSION = "v25.10.1"

# plural -> (group, kind, fixture file pattern). The fake server asks admit() about every write; other plurals pass.
CUSTOM_RESOURCES = {
    "clusterpolicies": ("nvidia.com", "ClusterPolicy", "clusterpolicy-%s.json"),
    # NVIDIA's DRA driver's ComputeDomain, from the CRD its chart ships (tests/fixtures/dra, the CRD itself as YAML)
    "computedomains": ("resource.nvidia.com", "ComputeDomain", "../dra/crd-computedomains-%s.yaml"),
}
DEFAULT_VERSIONS = {"computedomains": "v25.12.0"}
# CEL rules (x-kubernetes-validations) modelled per resource: the spec of a ComputeDomain is immutable
# (``self == oldSelf`` on spec, with NVIDIA's message)
IMMUTABLE_SPEC = {"computedomains": "A computeDomain.spec is immutable"}

_CACHE = {}


def load(plural, version):
    """The fixture document of one custom resource at one release: source, scope and openAPIV3Schema."""
    key = (plural, version)
    if key not in _CACHE:
        pattern = CUSTOM_RESOURCES[plural][2]
        with open(os.path.join(FIXTURES, pattern % version)) as handle:
            if pattern.endswith(".yaml"):
                import yaml
                crd = [d for d in yaml.safe_load_all(handle) if d][0]
                _CACHE[key] = extract(crd, "", version, "", pattern % version)
            else:
                _CACHE[key] = json.load(handle)
    return _CACHE[key]


def schema_version(api, plural):
    """Which release's schema a FakeKubeApi serves for ``plural`` (tests set ``api.crd_versions[plural]``)."""
    versions = getattr(api, "crd_versions", None) or {}
    return versions.get(plural, DEFAULT_VERSIONS.get(plural, DEFAULT_CLUSTERPOLICY_VERSION))


# ---- pruning and defaulting (apiextensions-apiserver pkg/apiserver/schema/pruning, defaulting) -------------------
def prune(obj, schema, path="", root=False):
    """Drop the fields ``schema`` does not declare; returns the paths dropped."""
    dropped = []
    if isinstance(obj, dict) and isinstance(schema, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            props = schema.get("properties") or {}
            for key, sub in props.items():
                if key in obj:
                    dropped += prune(obj[key], sub, _join(path, key))
            return dropped
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(obj):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                dropped += prune(obj[key], props[key], _join(path, key))
            elif isinstance(extra, dict):
                dropped += prune(obj[key], extra, _join(path, key))
            elif extra is True:
                continue
            else:
                del obj[key]
                dropped.append(_join(path, key))
    elif isinstance(obj, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += prune(item, schema["items"], "%s[%d]" % (path, i))
    return dropped


def apply_defaults(obj, schema):
    """Fill in schema defaults. A null in a field that is not ``nullable`` is dropped first, and then defaulted
    when the schema has a default (apiextensions-apiserver's structural defaulting does the same)."""
    if isinstance(obj, dict) and isinstance(schema, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in obj and obj[key] is None and isinstance(sub, dict) and not sub.get("nullable"):
                del obj[key]
            if key not in obj and isinstance(sub, dict) and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                apply_defaults(obj[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in obj:
                if key not in (schema.get("properties") or {}):
                    apply_defaults(obj[key], extra)
    elif isinstance(obj, list) and isinstance(schema, dict):
        for item in obj:
            apply_defaults(item, schema.get("items") or {})


def _join(path, key):
    return "%s.%s" % (path, key) if path else key


# ---- validation ------------------------------------------------------------------------------------------------
def _field(error):
    parts = []
    for item in error.absolute_path:
        if isinstance(item, int):
            parts[-1:] = ["%s[%d]" % (parts[-1] if parts else "", item)]
        else:
            parts.append(item)
    return ".".join(parts)


def _go_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def causes_of(obj, schema):
    """Every schema violation of ``obj`` as (reason, field, message) with the API server's wording."""
    out = []
    validator = jsonschema.Draft4Validator(schema)
    for error in sorted(validator.iter_errors(obj), key=lambda e: (list(map(str, e.absolute_path)), e.validator)):
        field = _field(error)
        value = error.instance
        kind = error.validator
        if kind == "required":
            missing = error.message.split("'")[1] if "'" in error.message else "?"
            out.append(("FieldValueRequired", _join(field, missing), "%s: Required value" % _join(field, missing)))
        elif kind == "enum":
            allowed = ", ".join(json.dumps(v) for v in error.validator_value)
            out.append(("FieldValueNotSupported", field, "%s: Unsupported value: %s: supported values: %s"
                        % (field, json.dumps(value), allowed)))
        elif kind in ("type", "anyOf"):
            want = error.validator_value if kind == "type" else "/".join(
                s.get("type", "?") for s in error.validator_value)
            out.append(("FieldValueTypeInvalid", field, "%s: Invalid value: \"%s\": %s in body must be of type %s: "
                        "\"%s\"" % (field, _go_type(value), field, want, _go_type(value))))
        elif kind == "pattern":
            out.append(("FieldValueInvalid", field, "%s: Invalid value: %s: %s in body should match '%s'"
                        % (field, json.dumps(value), field, error.validator_value)))
        elif kind in ("minLength", "maxLength"):
            out.append(("FieldValueInvalid", field, "%s: Invalid value: %s: %s in body should be %s %d chars long"
                        % (field, json.dumps(value), field, "at least" if kind == "minLength" else "at most",
                           error.validator_value)))
        elif kind == "minimum":
            out.append(("FieldValueInvalid", field, "%s: Invalid value: %s: %s in body should be greater than or "
                        "equal to %s" % (field, json.dumps(value), field, error.validator_value)))
        else:
            out.append(("FieldValueInvalid", field, "%s: Invalid value: %s: %s" % (field, json.dumps(value),
                                                                                   error.message)))
    return out


def admit(api, plural, kind, obj, name, old=None):
    """Prune, default and validate a custom resource about to be stored (in place); ``old``: the stored object on an
    update. Returns None when valid, else the (code, Status body) of the 422 answer. Plurals that are not custom
    resources pass untouched."""
    if plural not in CUSTOM_RESOURCES:
        return None
    doc = load(plural, schema_version(api, plural))
    schema = doc["openAPIV3Schema"]
    prune(obj, schema, root=True)
    apply_defaults(obj, {"properties": {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}})
    causes = causes_of({k: v for k, v in obj.items() if k != "metadata"},
                       dict(schema, properties={k: v for k, v in schema.get("properties", {}).items()
                                                if k != "metadata"}))
    if old is not None and plural in IMMUTABLE_SPEC and obj.get("spec") != old.get("spec"):
        causes.append(("FieldValueInvalid", "spec", "spec: Invalid value: \"object\": %s" % IMMUTABLE_SPEC[plural]))
    if not causes:
        return None
    group = CUSTOM_RESOURCES[plural][0]
    messages = [msg for dummy, dummy2, msg in causes]
    text = messages[0] if len(messages) == 1 else "[%s]" % ", ".join(messages)
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Invalid",
            "code": 422, "message": "%s.%s \"%s\" is invalid: %s" % (kind, group, name, text),
            "details": {"name": name, "group": group, "kind": kind,
                        "causes": [{"reason": reason, "field": field, "message": msg.split(": ", 1)[1]}
                                   for reason, field, msg in causes]}}
    return 422, body


# ---- making the fixtures from NVIDIA's CRD -----------------------------------------------------------------------
def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def extract(crd, repo, tag, commit, path):
    """The fixture document for one CRD (a dict loaded from its YAML): its served storage version's
    openAPIV3Schema without descriptions (they are most of its size and change nothing the server does)."""
    version = [v for v in crd["spec"]["versions"] if v.get("storage")][0]
    return {"source": {"repo": repo, "tag": tag, "commit": commit, "path": path},
            "group": crd["spec"]["group"], "names": crd["spec"]["names"], "scope": crd["spec"]["scope"],
            "version": version["name"], "subresources": version.get("subresources") or {},
            "openAPIV3Schema": _strip(version["schema"]["openAPIV3Schema"])}


def main(argv):
    """python -m tests.support.fake_crd extract REPO TAG COMMIT PATH < crd.yaml > fixture.json"""
    import yaml
    if len(argv) != 6 or argv[1] != "extract":
        sys.stderr.write(main.__doc__ + "\n")
        return 2
    doc = extract(yaml.safe_load(sys.stdin), *argv[2:6])
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
