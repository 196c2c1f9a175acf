"""resource.k8s.io/v1 (Dynamic Resource Allocation) for the fake API server: defaulting and validation.

The rules are those of Kubernetes v1.34 for the fields the collection and the fake DRA kubelet plugin write, from
kubernetes/kubernetes pkg/apis/resource/validation/validation.go (``ValidateDeviceClass``,
``ValidateResourceClaimTemplate(Update)``, ``ValidateResourceClaim(Update)``, ``ValidateResourceSlice(Update)``), with
the limits of k8s.io/api v0.34.0 resource/v1/types.go (as vendored by NVIDIA's dra-driver-nvidia-gpu v25.8.1) and the
defaults of pkg/apis/resource/v1/defaults.go (``allocationMode`` ExactCount, ``count`` 1). The validation.go read was
a later stored version (commit 009801d); only rules for fields that exist in v1.34 are kept, and the limits are
v1.34's. Errors are field errors as apimachinery's ``field.Error`` words them (Required value, Invalid value,
Duplicate value, Unsupported value, Too long, Too many), turned into one 422 Invalid Status by fake_kube_api.py.

Modelled:

- DeviceClass ``spec.selectors`` (<= 32, each ``cel.expression`` required, non-empty, <= 10 KiB) and ``spec.config``
  (<= 32, each ``opaque`` required: ``driver`` a DNS subdomain of <= 63 characters, ``parameters`` a JSON object of
  <= 10 KiB).
- ResourceClaimTemplate ``spec.spec`` and ResourceClaim ``spec``: ``devices.requests`` (<= 32, names DNS labels,
  unique), each with exactly one of ``exactly`` / ``firstAvailable``; ``exactly``: ``deviceClassName`` required (DNS
  subdomain), selectors as above, ``allocationMode`` ExactCount (``count`` > 0) or All (no ``count``);
  ``firstAvailable`` (<= 8 subrequests, names DNS labels, unique, each as ``exactly``); ``devices.constraints``
  (<= 32, ``requests`` naming requests of the claim, ``matchAttribute`` required, fully qualified);
  ``devices.config`` (<= 32, ``requests`` naming requests of the claim, ``opaque`` as above). On update the spec is
  immutable ("field is immutable"), the only rule checked then, as in v1.34.
- ResourceSlice: ``spec.driver`` (DNS subdomain <= 63), ``spec.pool`` (``name`` required, DNS subdomains between
  '/', <= 253; ``resourceSliceCount`` > 0; ``generation`` >= 0), exactly one of ``nodeName`` / ``nodeSelector`` /
  ``allNodes`` / ``perDeviceNodeSelection``, ``devices`` (<= 128, names DNS labels, unique; attributes and
  capacities <= 32 per device; attribute names qualified names (C identifier <= 32, optional domain <= 63);
  exactly one of ``bool`` / ``int`` / ``string`` / ``version`` per attribute, strings <= 64, versions semver). On
  update ``driver``, ``pool.name`` and ``nodeName`` are immutable.

Not modelled: CEL compilation and cost (an expression is only checked for presence and length), tolerations, admin
access, device taints, shared counters and counter consumption, binding conditions, the ResourceClaim status
(allocation, reservedFor), capacity quantities' syntax, metadata rules beyond the name, and unknown fields (a real
server drops or refuses them per the request's fieldValidation; here they are kept).
"""

import json
import re

GROUP = "resource.k8s.io"

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
                    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$")

# k8s.io/api v0.34.0 resource/v1/types.go
REQUESTS_MAX = 32                 # DeviceRequestsMaxSize (= AllocationResultsMaxSize)
CONSTRAINTS_MAX = 32              # DeviceConstraintsMaxSize
CONFIG_MAX = 32                   # DeviceConfigMaxSize
SELECTORS_MAX = 32                # DeviceSelectorsMaxSize
FIRST_AVAILABLE_MAX = 8           # FirstAvailableDeviceRequestMaxSize
CEL_MAX_LENGTH = 10 * 1024        # CELSelectorExpressionMaxLength
OPAQUE_MAX_LENGTH = 10 * 1024     # OpaqueParametersMaxLength
DRIVER_NAME_MAX = 63              # DriverNameMaxLength
POOL_NAME_MAX = 253               # PoolNameMaxLength
SLICE_DEVICES_MAX = 128           # ResourceSliceMaxDevices
ATTRIBUTES_AND_CAPACITIES_MAX = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
DOMAIN_MAX = 63                   # DeviceMaxDomainLength
ID_MAX = 32                       # DeviceMaxIDLength
ATTRIBUTE_VALUE_MAX = 64          # DeviceAttributeMaxValueLength

_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
              "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
              "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                  "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                  "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_C_IDENTIFIER_MSG = ("a valid C identifier must start with alphabetic character or '_', followed by a string of "
                     "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
                     "validation is '[A-Za-z_][A-Za-z0-9_]*')")
_REQUEST_REF_MSG = ("must be the name of a request in the claim or the name of a request and a subrequest separated "
                    "by '/'")

# A field error: (reason, field, value, detail); reason as metav1.CauseType.
REQUIRED, INVALID, DUPLICATE = "FieldValueRequired", "FieldValueInvalid", "FieldValueDuplicate"
NOT_SUPPORTED, TOO_LONG, TOO_MANY = "FieldValueNotSupported", "FieldValueTooLong", "FieldValueTooMany"


def _go_value(value):
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, sort_keys=True)


def error_body(reason, value, detail):
    """The text of one field error after its path, as field.Error.ErrorBody writes it."""
    if reason == REQUIRED:
        return "Required value" + (": " + detail if detail else "")
    if reason == INVALID:
        return "Invalid value: %s: %s" % (_go_value(value), detail)
    if reason == DUPLICATE:
        return "Duplicate value: %s" % _go_value(value)
    if reason == NOT_SUPPORTED:
        return "Unsupported value: %s: supported values: %s" % (_go_value(value), detail)
    if reason == TOO_LONG:
        return "Too long: may not be more than %d bytes" % detail
    if reason == TOO_MANY:
        return "Too many: %d: must have at most %d items" % (value, detail)
    return "%s: %s" % (reason, detail)


# ---- defaulting (pkg/apis/resource/v1/defaults.go) ---------------------------------------------------------------
def _default_request(request):
    if not isinstance(request, dict):
        return
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1


def default(plural, obj):
    """Fill the defaults the API server sets before validation and storage (in place)."""
    if plural == "resourceclaimtemplates":
        spec = ((obj.get("spec") or {}).get("spec") or {})
    elif plural == "resourceclaims":
        spec = obj.get("spec") or {}
    else:
        return
    for request in ((spec.get("devices") or {}).get("requests") or []):
        if isinstance(request, dict):
            _default_request(request.get("exactly"))
            for sub in request.get("firstAvailable") or []:
                _default_request(sub)


# ---- shared rules -------------------------------------------------------------------------------------------------
def _dns_label(value, path):
    errs = []
    if not isinstance(value, str) or not value:
        return [(REQUIRED, path, value, "")]
    if len(value) > 63:
        errs.append((INVALID, path, value, "must be no more than 63 characters"))
    if not DNS1123_LABEL.match(value):
        errs.append((INVALID, path, value, _LABEL_MSG))
    return errs


def _dns_subdomain(value, path, max_len=253):
    errs = []
    if len(value) > max_len:
        errs.append((INVALID, path, value, "must be no more than %d characters" % max_len))
    if not DNS1123_SUBDOMAIN.match(value):
        errs.append((INVALID, path, value, _SUBDOMAIN_MSG))
    return errs


def _driver_name(value, path):
    """corevalidation.ValidateCSIDriverName: required, <= 63, a DNS subdomain (checked lower-cased)."""
    if not isinstance(value, str) or not value:
        return [(REQUIRED, path, value, "")]
    if len(value) > DRIVER_NAME_MAX:
        return [(TOO_LONG, path, value, DRIVER_NAME_MAX)]
    return [(INVALID, path, value, why) for dummy, dummy2, dummy3, why in _dns_subdomain(value.lower(), path)]


def _too_many(items, limit, path):
    if isinstance(items, list) and len(items) > limit:
        return [(TOO_MANY, path, len(items), limit)]
    return []


def _duplicates(keys, path):
    seen, errs = set(), []
    for i, key in enumerate(keys):
        if key in seen:
            errs.append((DUPLICATE, "%s[%d]" % (path, i), key, ""))
        seen.add(key)
    return errs


def _selectors(selectors, path):
    if selectors is None:
        return []
    errs = _too_many(selectors, SELECTORS_MAX, path)
    if errs:
        return errs
    for i, selector in enumerate(selectors):
        here = "%s[%d]" % (path, i)
        cel = (selector or {}).get("cel")
        if cel is None:
            errs.append((REQUIRED, here + ".cel", None, ""))
            continue
        expression = cel.get("expression") or ""
        if len(expression) > CEL_MAX_LENGTH:
            errs.append((TOO_LONG, here + ".cel.expression", expression, CEL_MAX_LENGTH))
        elif not expression.strip():
            errs.append((REQUIRED, here + ".cel.expression", expression, "expression must not be empty"))
    return errs


def _opaque(config, path):
    """validateDeviceConfiguration: ``opaque`` required; its driver and parameters (validateRawExtension)."""
    opaque = (config or {}).get("opaque")
    if opaque is None:
        return [(REQUIRED, path + ".opaque", None, "")]
    errs = _driver_name(opaque.get("driver"), path + ".opaque.driver")
    params, where = opaque.get("parameters"), path + ".opaque.parameters"
    if params is None:
        errs.append((REQUIRED, where, None, ""))
    elif len(json.dumps(params, separators=(",", ":"))) > OPAQUE_MAX_LENGTH:
        errs.append((TOO_LONG, where, None, OPAQUE_MAX_LENGTH))
    elif not isinstance(params, dict):
        errs.append((INVALID, where, "<value omitted>", "must be a valid JSON object"))
    return errs


def _configs(configs, path, request_names=None):
    if configs is None:
        return []
    errs = _too_many(configs, CONFIG_MAX, path)
    if errs:
        return errs
    for i, config in enumerate(configs):
        here = "%s[%d]" % (path, i)
        if request_names is not None:
            errs += _request_refs((config or {}).get("requests"), here + ".requests", request_names)
        errs += _opaque(config, here)
    return errs


def _request_refs(refs, path, request_names):
    errs = _too_many(refs, REQUESTS_MAX, path)
    if errs or not refs:
        return errs
    for i, ref in enumerate(refs):
        here = "%s[%d]" % (path, i)
        parts = ref.split("/") if isinstance(ref, str) else [None]
        if len(parts) > 2:
            errs.append((INVALID, here, ref, _REQUEST_REF_MSG))
            continue
        for part in parts:
            errs += _dns_label(part, here)
        subs = request_names.get(parts[0], False)
        if subs is False or (len(parts) == 2 and parts[1] not in (subs or ())):
            errs.append((INVALID, here, ref, _REQUEST_REF_MSG))
    return errs + _duplicates(refs, path)


def _allocation(request, path):
    mode, count = request.get("allocationMode"), request.get("count") or 0
    if mode == "All":
        if count:
            return [(INVALID, path + ".count", count, "must not be specified when allocationMode is 'All'")]
    elif mode == "ExactCount":
        if not isinstance(count, int) or count <= 0:
            return [(INVALID, path + ".count", count, "must be greater than zero")]
    else:
        return [(NOT_SUPPORTED, path + ".allocationMode", mode, '"All", "ExactCount"')]
    return []


def _exact(request, path):
    errs = []
    name = request.get("deviceClassName")
    if not name:
        errs.append((REQUIRED, path + ".deviceClassName", name, ""))
    else:
        errs += _dns_subdomain(name, path + ".deviceClassName")
    return errs + _selectors(request.get("selectors"), path + ".selectors") + _allocation(request, path)


def _device_claim(devices, path):
    devices = devices or {}
    requests = devices.get("requests") or []
    names = {}
    for request in requests:
        request = request or {}
        subs = [s.get("name") for s in request.get("firstAvailable") or [] if isinstance(s, dict)]
        names[request.get("name")] = set(subs) if request.get("firstAvailable") else None
    errs = _too_many(requests, REQUESTS_MAX, path + ".requests")
    if not errs:
        for i, request in enumerate(requests):
            here = "%s.requests[%d]" % (path, i)
            request = request or {}
            errs += _dns_label(request.get("name"), here + ".name")
            exactly, first = request.get("exactly"), request.get("firstAvailable") or []
            if exactly is None and not first:
                errs.append((REQUIRED, here, None, "exactly one of `exactly` or `firstAvailable` is required"))
            elif exactly is not None and first:
                errs.append((INVALID, here, None, "exactly one of `exactly` or `firstAvailable` is required, but "
                             "multiple fields are set"))
            elif exactly is not None:
                errs += _exact(exactly, here + ".exactly")
            else:
                many = _too_many(first, FIRST_AVAILABLE_MAX, here + ".firstAvailable")
                errs += many
                for j, sub in enumerate([] if many else first):
                    sub_path = "%s.firstAvailable[%d]" % (here, j)
                    errs += _dns_label((sub or {}).get("name"), sub_path + ".name") + _exact(sub or {}, sub_path)
                if not many:
                    errs += _duplicates([(s or {}).get("name") for s in first], here + ".firstAvailable")
        errs += _duplicates([(r or {}).get("name") for r in requests], path + ".requests")
    constraints = devices.get("constraints") or []
    many = _too_many(constraints, CONSTRAINTS_MAX, path + ".constraints")
    errs += many
    for i, constraint in enumerate([] if many else constraints):
        here = "%s.constraints[%d]" % (path, i)
        errs += _request_refs((constraint or {}).get("requests"), here + ".requests", names)
        attribute = (constraint or {}).get("matchAttribute")
        if attribute is None:
            errs.append((REQUIRED, here + ".matchAttribute", None, ""))
        else:
            errs += _qualified_name(attribute, here + ".matchAttribute")
            if "/" not in attribute:
                errs.append((INVALID, here + ".matchAttribute", attribute, "a fully qualified name must be a domain "
                             "and a name separated by a slash"))
    return errs + _configs(devices.get("config"), path + ".config", names)


def _qualified_name(name, path):
    parts = name.split("/")
    if len(parts) > 2:
        return [(INVALID, path, name, "must not contain more than one slash")]
    errs = []
    if len(parts) == 2:
        if not parts[0]:
            errs.append((INVALID, path, "", "the domain must not be empty"))
        else:
            errs += _driver_name(parts[0], path)
    ident = parts[-1]
    if len(parts) == 2 and not ident:
        return errs + [(INVALID, path, "", "the name must not be empty")]
    if len(ident) > ID_MAX:
        errs.append((TOO_LONG, path, ident, ID_MAX))
    if not C_IDENTIFIER.match(ident):
        errs.append((INVALID, path, ident, _C_IDENTIFIER_MSG))
    return errs


def _attribute(value, path):
    errs, kinds = [], [k for k in ("bool", "int", "string", "version") if (value or {}).get(k) is not None]
    if len(kinds) != 1:
        return [(INVALID, path, "" if not kinds else value, "exactly one value must be specified")]
    kind = kinds[0]
    text = value[kind]
    if kind in ("string", "version") and len(text) > ATTRIBUTE_VALUE_MAX:
        errs.append((TOO_LONG, path + "." + kind, text, ATTRIBUTE_VALUE_MAX))
    if kind == "version" and not SEMVER.match(text):
        errs.append((INVALID, path + ".version", text, "must be a string compatible with semver.org spec 2.0.0"))
    return errs


def _device(device, path):
    device = device or {}
    errs = _dns_label(device.get("name"), path + ".name")
    attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > ATTRIBUTES_AND_CAPACITIES_MAX:
        errs.append((INVALID, path, total, "the total number of attributes and capacities must not exceed %d"
                     % ATTRIBUTES_AND_CAPACITIES_MAX))
    for name in sorted(attributes):
        errs += _qualified_name(name, path + ".attributes")
        errs += _attribute(attributes[name], "%s.attributes[%s]" % (path, name))
    for name in sorted(capacity):
        errs += _qualified_name(name, path + ".capacity")
        if (capacity[name] or {}).get("value") is None:
            errs.append((REQUIRED, "%s.capacity[%s].value" % (path, name), None, ""))
    if any(device.get(k) is not None for k in ("nodeName", "nodeSelector", "allNodes")):
        errs.append((INVALID, path, None, "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                     "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
    return errs


def _slice_spec(spec, path="spec"):
    errs = _driver_name(spec.get("driver"), path + ".driver")
    pool = spec.get("pool") or {}
    name = pool.get("name")
    if not name:
        errs.append((REQUIRED, path + ".pool.name", name, ""))
    else:
        if len(name) > POOL_NAME_MAX:
            errs.append((TOO_LONG, path + ".pool.name", name, POOL_NAME_MAX))
        for part in name.split("/"):
            errs += _dns_subdomain(part, path + ".pool.name")
    count = pool.get("resourceSliceCount") or 0
    if count <= 0:
        errs.append((INVALID, path + ".pool.resourceSliceCount", count, "must be greater than zero"))
    if (pool.get("generation") or 0) < 0:
        errs.append((INVALID, path + ".pool.generation", pool.get("generation"),
                     "must be greater than or equal to zero"))
    chosen = []
    node = spec.get("nodeName")
    if node is not None:
        if node:
            chosen.append("`nodeName`")
            errs += _dns_subdomain(node, path + ".nodeName")
        else:
            errs.append((INVALID, path + ".nodeName", node, "must be either unset or set to a non-empty string"))
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        if len(spec["nodeSelector"].get("nodeSelectorTerms") or []) != 1:
            errs.append((INVALID, path + ".nodeSelector.nodeSelectorTerms", spec["nodeSelector"].get(
                "nodeSelectorTerms"), "must have exactly one node selector term"))
    for key in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(key) is not None:
            if spec[key] is True:
                chosen.append("`%s`" % key)
            else:
                errs.append((INVALID, "%s.%s" % (path, key), spec[key], "must be either unset or set to true"))
    one_of = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not chosen:
        errs.append((REQUIRED, path, None, one_of))
    elif len(chosen) > 1:
        errs.append((INVALID, path, "{%s}" % ", ".join(chosen), one_of + ", but multiple fields are set"))
    devices = spec.get("devices") or []
    many = _too_many(devices, SLICE_DEVICES_MAX, path + ".devices")
    errs += many
    if not many:
        for i, device in enumerate(devices):
            if spec.get("perDeviceNodeSelection") is True:
                device = dict(device or {}, nodeName=None, nodeSelector=None, allNodes=None)   # not modelled
            errs += _device(device, "%s.devices[%d]" % (path, i))
        errs += _duplicates([(d or {}).get("name") for d in devices], path + ".devices")
    return errs


def _immutable(new, old, path):
    return [] if new == old else [(INVALID, path, new, "field is immutable")]


def errors(plural, obj, old=None):
    """The field errors a v1.34 API server finds in ``obj`` (a create when ``old`` is None, else an update)."""
    spec = obj.get("spec") or {}
    if plural == "deviceclasses":
        return _selectors(spec.get("selectors"), "spec.selectors") + _configs(spec.get("config"), "spec.config")
    if plural == "resourceclaimtemplates":
        if old is not None:
            return _immutable(obj.get("spec"), old.get("spec"), "spec")
        return _device_claim((spec.get("spec") or {}).get("devices"), "spec.spec.devices")
    if plural == "resourceclaims":
        if old is not None:
            return _immutable(obj.get("spec"), old.get("spec"), "spec")
        return _device_claim(spec.get("devices"), "spec.devices")
    if plural == "resourceslices":
        errs = _slice_spec(spec)
        if old is not None:
            old_spec = old.get("spec") or {}
            errs += _immutable((spec.get("pool") or {}).get("name"), (old_spec.get("pool") or {}).get("name"),
                               "spec.pool.name")
            errs += _immutable(spec.get("driver"), old_spec.get("driver"), "spec.driver")
            errs += _immutable(spec.get("nodeName"), old_spec.get("nodeName"), "spec.nodeName")
        return errs
    return []
