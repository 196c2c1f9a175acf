"""A stateful fake Kubernetes API server for tests.

No real API server can be installed on the development machines, so tests run the real ``kubernetes`` Python
client (and the real ``helm`` binary) over real HTTP against this server. It keeps objects in memory and answers
in the API's own shapes:

- discovery (``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``); a group may be served at
  several versions (``/apis`` lists them, the preferred first). resource.k8s.io (DRA) is served at the versions in
  ``resource_api_versions``: by default those a real server of ``server_version`` enables, v1 from 1.34 (DRA GA),
  none before (v1beta1 in 1.32 and v1beta2 in 1.33 exist but are off unless --runtime-config enables them); a test
  may name the betas to model such a cluster: they appear in discovery, but objects are served at v1 only;
- resource.k8s.io/v1 DeviceClass, ResourceSlice (cluster-scoped), ResourceClaim and ResourceClaimTemplate
  (namespaced), defaulted and validated as Kubernetes v1.34 does for the fields we write (fake_resource_api.py says
  which rules, from where, and what is not modelled), e.g. a ResourceClaimTemplate's spec is immutable; lists take
  ``fieldSelector`` terms ``path=value`` / ``path!=value`` on the object's fields (``spec.nodeName``, ``spec.driver``);
  ``metadata.generateName`` on create (prefix and 5 random characters);
- list / get / create / replace / patch / delete for the resources in ``RESOURCES`` (nodes, namespaces,
  configmaps, secrets, pods, services, serviceaccounts, daemonsets, runtimeclasses, RBAC objects, leases), label
  selectors on lists, ``resourceVersion``, ``uid``, ``generation``;
- the custom resource ClusterPolicy (``nvidia.com/v1``, cluster-scoped), pruned, defaulted and validated against the
  schema of NVIDIA's published CRD at a chosen release (``crd_versions``; fake_crd.py, tests/fixtures/gpu-operator);
- the custom resource ComputeDomain (``resource.nvidia.com/v1beta1``, namespaced) likewise, from the CRD of NVIDIA's DRA
  driver chart v25.12.0 (tests/fixtures/dra), its spec immutable as the CRD's CEL rule says;
- Nodes as kube-apiserver's node strategies (pkg/registry/core/node/strategy.go): a write to the node keeps the
  stored ``status`` and a write to its ``status`` subresource keeps the stored ``spec``; taints validated as
  ValidateNode does (key a label name, value a label value, effect NoSchedule/PreferNoSchedule/NoExecute, unique by
  key and effect);
- ``resourceVersion`` preconditions as a real API server: a PUT or a patch whose body carries a resourceVersion
  other than the stored one is refused with 409 Conflict ("Operation cannot be fulfilled on
  leases.coordination.k8s.io ..."), without it the write is unconditional; Lease specs validated as
  coordination/v1 does (leaseDurationSeconds > 0, leaseTransitions >= 0, RFC 3339 times);
- patch types: ``application/merge-patch+json`` (RFC 7386), ``application/strategic-merge-patch+json`` (maps merge
  and ``null`` deletes as in merge patch, which is exact for ``metadata.labels``/``annotations``; a list with a
  patch merge key in ``STRATEGIC_MERGE_KEYS`` (a Node's ``status.conditions``, by ``type``) is merged element by
  element, an element with ``$patch: delete`` removed; other lists are replaced, as the atomic ones are (a Node's
  ``spec.taints``); ``$patch: delete/replace`` on maps is honoured), ``application/json-patch+json`` (RFC 6902
  add/remove/replace/test), ``application/apply-patch+yaml``
  (server-side apply modelled per field manager: create or merge, and fields the same manager applied before but
  no longer applies are removed; a pod spec's containers and a container's env merge by name, so another manager's
  items stay; no managedFields, no conflicts between managers); a DaemonSet's containers and their env merge by name
  under strategic merge patch;
- protobuf request bodies for Secret and ConfigMap (what helm's release storage sends; tests/support/k8s_protobuf.py)
  and a minimal OpenAPI v2 document (protobuf) / v3 index, so the real helm binary can install, upgrade, roll back
  and uninstall releases here;
- ``dryRun=All`` on every write: validated and answered exactly like a real write, never stored;
- errors as ``Status`` objects: 401 Unauthorized, 403 Forbidden, 404 NotFound, 409 AlreadyExists / Conflict,
  422 Invalid (label syntax, missing name, RuntimeClass handler), 500 (injected).

Tests drive it through ``FakeKubeApi``: ``add_node()``, ``put()``, ``get()``, ``inject_failure()``, ``requests``
(every request seen, with the status ``code`` it was answered), and the ``tokens`` table for bearer-token auth
(token -> "rw" or "ro").
"""

import copy
import json
import random
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import fake_crd, fake_resource_api, k8s_protobuf

# (group, version, plural, kind, namespaced, verbs)
_ALL = ["create", "delete", "get", "list", "patch", "update", "watch"]
RESOURCES = [
    ("", "v1", "nodes", "Node", False),
    ("", "v1", "namespaces", "Namespace", False),
    ("", "v1", "configmaps", "ConfigMap", True),
    ("", "v1", "secrets", "Secret", True),
    ("", "v1", "pods", "Pod", True),
    ("", "v1", "services", "Service", True),
    ("", "v1", "serviceaccounts", "ServiceAccount", True),
    ("apps", "v1", "daemonsets", "DaemonSet", True),
    ("apps", "v1", "deployments", "Deployment", True),
    ("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    # A custom resource: served from its CRD's schema (tests/support/fake_crd.py, tests/fixtures/gpu-operator).
    ("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False),
    # NVIDIA's DRA driver's ComputeDomain (namespaced), from the CRD of its chart (fake_crd.py, tests/fixtures/dra).
    ("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", True),
    ("coordination.k8s.io", "v1", "leases", "Lease", True),
    # Dynamic Resource Allocation: served only at the versions in FakeKubeApi.resource_api_versions.
    ("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    ("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    ("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
    ("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
]
# resource.k8s.io's beta versions (Kubernetes 1.32: v1beta1, 1.33: v1beta2; off by default): named in discovery when a
# test serves them, with the same kinds as v1; objects are not served at them (requests answered 404).
RESOURCE_BETA = [("resource.k8s.io", v, p, k, n) for v in ("v1beta2", "v1beta1")
                 for g, dummy, p, k, n in RESOURCES if g == "resource.k8s.io"]
# The order a real server prefers resource.k8s.io's versions in (GA over beta, newer beta first).
RESOURCE_VERSION_ORDER = ("v1", "v1beta2", "v1beta1")
_BY_PATH = {(g, v, p): (k, ns) for g, v, p, k, ns in RESOURCES}


def default_resource_api_versions(server_version):
    """The resource.k8s.io versions a real API server of this version serves with its default flags: v1 from
    Kubernetes 1.34 (DRA GA); before, only beta versions, which are off by default (new beta APIs are disabled
    unless --runtime-config enables them), so none."""
    major, minor = [int(re.match(r"\d+", x).group(0)) for x in server_version.lstrip("v").split(".")[:2]]
    return ["v1"] if (major, minor) >= (1, 34) else []


# Kubernetes' own label rules (apimachinery/pkg/util/validation), kept independent of the collection's code so
# the fake server checks the module rather than agreeing with it by construction.
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _label_errors(labels, field="metadata.labels"):
    causes = []
    for key, value in (labels or {}).items():
        name = key
        if "/" in key:
            prefix, name = key.split("/", 1)
            if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
                causes.append((field, key, "prefix part a lowercase RFC 1123 subdomain must consist of lower "
                               "case alphanumeric characters, '-' or '.'"))
        if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
            causes.append((field, key, "name part must consist of alphanumeric characters, '-', '_' or '.', "
                           "and must start and end with an alphanumeric character"))
        if not isinstance(value, str):
            causes.append((field + "." + key, value, "label values must be strings"))
        elif value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
            causes.append((field, value, "a valid label must be an empty string or consist of alphanumeric "
                           "characters, '-', '_' or '.', and must start and end with an alphanumeric character"))
    return causes


def status(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if details:
        body["details"] = details
    return code, body


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# Lists that strategic merge patch merges by a key (the Go types' patchStrategy=merge, patchMergeKey), per kind, by
# field path; every other list is replaced whole. From kubernetes/api at v0.33.0 core/v1/types.go: NodeStatus.Conditions
# (patchMergeKey=type); NodeSpec.Taints is +listType=atomic (replaced).
# A DaemonSet's pod template: PodSpec.Containers and InitContainers (patchMergeKey=name), Container.Env
# (patchMergeKey=name).
_POD_TEMPLATE = ("spec", "template", "spec")
STRATEGIC_MERGE_KEYS = {
    "Node": {("status", "conditions"): "type"},
    "DaemonSet": {_POD_TEMPLATE + ("containers",): "name", _POD_TEMPLATE + ("initContainers",): "name",
                  _POD_TEMPLATE + ("containers", "env"): "name", _POD_TEMPLATE + ("initContainers", "env"): "name"},
}
# Server-side apply's associative lists (+listType=map) that the fake merges by key, by field name wherever they are: a
# pod spec's containers and initContainers and a container's env, all keyed by name (kubernetes/api core/v1
# types.go). An applier's config then leaves alone the items it does not name (another manager's, as a variable set
# by a strategic merge patch), and the items it applied before and no longer applies are removed (_prune).
APPLY_LIST_KEYS = {"containers": "name", "initContainers": "name", "env": "name"}


def _keyed(items, key):
    return isinstance(items, list) and all(isinstance(item, dict) and key in item for item in items)


def apply_merge(target, patch, field=None):
    """Server-side apply's merge of an applied config into the object: maps merge, an associative list
    (APPLY_LIST_KEYS) merges item by item, any other list or value replaces."""
    key = APPLY_LIST_KEYS.get(field)
    if key and _keyed(patch, key) and _keyed(target, key):
        out = [copy.deepcopy(item) for item in target]
        for item in patch:
            index = next((i for i, have in enumerate(out) if have[key] == item[key]), None)
            if index is None:
                out.append(copy.deepcopy(item))
            else:
                out[index] = apply_merge(out[index], item)
        # an applied config that names every item: the list takes its order (the chart's new order after an upgrade)
        return _in_order_of(out, [item[key] for item in patch], key)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = apply_merge(out.get(name), value, name)
    return out


def strategic_merge_patch(target, patch, merge_keys=None, path=()):
    """Strategic merge patch: maps merge, null deletes, $patch: replace|delete on a map; a list whose ``path`` has a
    key in ``merge_keys`` ({path tuple: key}) is merged by it (_merge_list); other lists are replaced."""
    if isinstance(patch, list) and (merge_keys or {}).get(path) and isinstance(target, list):
        return _merge_list(target, patch, merge_keys[path], merge_keys, path)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):        # $setElementOrder/..., $retainKeys: ordering hints, not modelled
            continue
        if value is None:
            out.pop(key, None)
        else:
            merged = strategic_merge_patch(out.get(key), value, merge_keys, path + (key,))
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
    return out


def _merge_list(target, patch, key, merge_keys, path):
    """apimachinery strategicpatch's mergeSlice for a list of maps with merge key ``key``: an element of the patch
    merges into the stored element with the same key (its other fields kept), ``{key: K, "$patch": "delete"}``
    removes that element (nothing when there is none), an element with a new key is appended; ``[{"$patch":
    "replace"}, ...]`` replaces the list."""
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(item) for item in patch if not (isinstance(item, dict) and item.get("$patch"))]
    out = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ValueError("map in %s does not contain declared merge key: %s" % (".".join(path), key))
        index = next((i for i, have in enumerate(out) if isinstance(have, dict) and have.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
            continue
        if index is None:
            out.append(strategic_merge_patch({}, item, merge_keys, path))
        else:
            out[index] = strategic_merge_patch(out[index], item, merge_keys, path)
    # A client's patch of the whole list (helm's three-way merge patch, kubectl apply) carries
    # ``$setElementOrder/<list>``: the merged list takes the patch's order. A patch naming only some elements keeps the
    # stored order.
    return _in_order_of(out, [item.get(key) for item in patch
                              if isinstance(item, dict) and item.get("$patch") != "delete"], key)


def _in_order_of(items, order, key):
    """``items`` (maps with merge key ``key``) in ``order`` where ``order`` names every one of them (what
    ``$setElementOrder`` or a whole applied list asks for), else as they are."""
    if sorted(order) == sorted(item.get(key) for item in items):
        items.sort(key=lambda item: order.index(item.get(key)))
    return items


def _pointer(doc, path):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def json_patch(target, ops):
    doc = copy.deepcopy(target)
    for op in ops:
        parent, key = _pointer(doc, op["path"])
        kind = op["op"]
        if kind in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if key == "-" else int(key)
                if kind == "add":
                    parent.insert(idx, op["value"])
                else:
                    parent[idx] = op["value"]
            else:
                if kind == "replace" and key not in parent:
                    raise KeyError(op["path"])
                parent[key] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(key)]
            else:
                del parent[key]
        elif kind == "test":
            value = parent[int(key)] if isinstance(parent, list) else parent.get(key)
            if value != op["value"]:
                raise ValueError("test failed at %s" % op["path"])
        else:
            raise ValueError("unsupported op %s" % kind)
    return doc


def _prune(obj, last, new):
    """Drop from ``obj`` the fields present in ``last`` (a previous apply) but absent from ``new``; in an associative
    list (APPLY_LIST_KEYS) the items ``last`` named and ``new`` does not (the others are another manager's)."""
    if not isinstance(obj, dict) or not isinstance(last, dict):
        return obj
    for key, value in last.items():
        if not isinstance(new, dict) or key not in new:
            obj.pop(key, None)
        elif isinstance(value, dict) and isinstance(new.get(key), dict):
            obj[key] = _prune(obj.get(key), value, new[key])
        elif APPLY_LIST_KEYS.get(key) and _keyed(value, APPLY_LIST_KEYS[key]) \
                and _keyed(new.get(key), APPLY_LIST_KEYS[key]) and _keyed(obj.get(key), APPLY_LIST_KEYS[key]):
            item_key = APPLY_LIST_KEYS[key]
            before = dict((item[item_key], item) for item in value)
            now = dict((item[item_key], item) for item in new[key])
            kept = [item for item in obj[key] if item[item_key] not in before or item[item_key] in now]
            obj[key] = [_prune(item, before[item[item_key]], now[item[item_key]]) if item[item_key] in before
                        else item for item in kept]
    return obj


def _match_selector(labels, selector):
    labels = labels or {}
    for term in [t.strip() for t in re.split(r",(?![^(]*\))", selector or "") if t.strip()]:
        if " in " in term or " notin " in term:
            m = re.match(r"(\S+)\s+(in|notin)\s+\((.*)\)", term)
            vals = {x.strip() for x in m.group(3).split(",")}
            if (labels.get(m.group(1)) in vals) != (m.group(2) == "in"):
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "==" in term or "=" in term:
            k, v = re.split("==|=", term, maxsplit=1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _match_fields(obj, selector):
    """A fieldSelector (``path=value``, ``path==value``, ``path!=value``, ANDed) against the object's dotted field
    paths (metadata.name, spec.nodeName, spec.driver, ...); which fields a real server accepts per kind is not
    checked."""
    for term in [t.strip() for t in (selector or "").split(",") if t.strip()]:
        negate = "!=" in term
        k, v = re.split("!=|==|=", term, maxsplit=1)
        cur = obj
        for part in k.strip().split("."):
            cur = (cur or {}).get(part) if isinstance(cur, dict) or cur is None else None
        if (cur == v.strip()) == negate:
            return False
    return True


def _pb_string(field, text):
    data = text.encode("utf-8") if isinstance(text, str) else text
    return bytes([(field << 3) | 2, len(data)]) + data


def _openapi_v2_document(version):
    info = _pb_string(1, "Kubernetes") + _pb_string(2, version)
    return _pb_string(1, "2.0") + _pb_string(2, info)


def _conflict(plural, group, name):
    """409 Conflict for a write whose resourceVersion precondition failed, worded as apimachinery's NewConflict
    (group-qualified resource, e.g. leases.coordination.k8s.io)."""
    return status(409, "Conflict", "Operation cannot be fulfilled on %s \"%s\": the object has been modified; please "
                  "apply your changes to the latest version and try again"
                  % (plural if not group else "%s.%s" % (plural, group), name),
                  {"name": name, "group": group, "kind": plural})


# metav1.MicroTime / Time as RFC 3339 (fraction optional)
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _lease_errors(spec):
    """coordination/v1 ValidateLeaseSpec (pkg/apis/coordination/validation): the two rules it has for these
    fields, with its messages."""
    causes = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        causes.append(("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        causes.append(("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
    return causes


_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _taint_errors(taints):
    """ValidateNode's taint rules (kubernetes pkg/apis/core/validation validateNodeTaints): key a label name, value
    a label value, effect one of three, unique by key and effect."""
    causes = []
    seen = set()
    for i, taint in enumerate(taints if isinstance(taints, list) else []):
        field = "spec.taints[%d]" % i
        key, value, effect = taint.get("key") or "", taint.get("value") or "", taint.get("effect") or ""
        # the key's and the value's rules are the labels' (ValidateLabelName, IsValidLabelValue)
        causes += [(field + ".key", bad, why) for dummy, bad, why in _label_errors({key: ""})]
        causes += [(field + ".value", bad, why) for dummy, bad, why in _label_errors({"key": value})]
        if effect not in _TAINT_EFFECTS:
            causes.append((field + ".effect", effect, "supported values: \"NoSchedule\", \"PreferNoSchedule\", "
                           "\"NoExecute\""))
        if (key, effect) in seen:
            causes.append((field, key, "taints must be unique by key and effect pair"))
        seen.add((key, effect))
    return causes


def _bad_times(obj):
    """A Lease time that is not RFC 3339: the API server cannot decode the body (400 BadRequest)."""
    for key in ("acquireTime", "renewTime"):
        value = (obj.get("spec") or {}).get(key)
        if value is not None and not (isinstance(value, str) and _RFC3339.match(value)):
            return status(400, "BadRequest", "error decoding request body: parsing time %s as "
                          "\"2006-01-02T15:04:05.000000Z07:00\": cannot parse" % json.dumps(value))
    return None


class ProxiedText(str):
    """What a pod served through the API server's proxy: sent as text, not JSON."""


class _Failure(object):
    def __init__(self, method, path_re, code, reason, message, times):
        self.method, self.path_re, self.code = method, re.compile(path_re), code
        self.reason, self.message, self.times = reason, message, times


class FakeKubeApi(object):
    """The server's state and controls; ``start()`` serves it on 127.0.0.1 at a free port."""

    def __init__(self, tokens=None, server_version="v1.33.2", resource_api_versions=None):
        self.objects = {}          # (group, plural, namespace or "", name) -> object
        self.applied = {}          # ((group, plural, namespace, name), field manager) -> last applied config
        self.tokens = tokens       # None: no auth check; else {token: "rw"|"ro"}
        self.server_version = server_version
        # resource.k8s.io versions served (a cluster may enable the betas with --runtime-config): default as a real
        # server of server_version; kept in the order a server prefers them (the first is preferredVersion).
        versions = default_resource_api_versions(server_version) if resource_api_versions is None \
            else list(resource_api_versions)
        unknown = [v for v in versions if v not in RESOURCE_VERSION_ORDER]
        if unknown:
            raise ValueError("resource.k8s.io versions %s: known are %s" % (unknown, list(RESOURCE_VERSION_ORDER)))
        self.resource_api_versions = [v for v in RESOURCE_VERSION_ORDER if v in versions]
        self.requests = []         # dicts: method, path, query, content_type, body, user
        self.failures = []
        self._write_fault = None   # [writes still to let through, code] for fail_nth_write
        self.uncounted = None      # predicate(request record): writes fail_nth_write neither counts nor fails
        self._write_hold = None    # [writes still to let through, reached Event, release Event] for hold_nth_write
        self.on_request = None     # callable(request record), run as each request comes, before it is answered
        # The API server's proxy to a pod's port (GET pods/<name>:<port>/proxy/<path>): callable(pod object, port,
        # path) -> (status code, text) of what the pod serves there, or None; None: no pod serves anything.
        self.pod_proxy = None
        self._rv = 1000
        self._lock = threading.RLock()
        self._local = threading.local()   # the request record of the request this thread serves (answer code)
        self._httpd = None
        self._thread = None
        self.url = None
        self.ca_data = None

    # ---- test controls ------------------------------------------------------------------------------
    def start(self, tls_dir=None):
        """Serve on 127.0.0.1 at a free port; with tls_dir, over HTTPS with a self-signed certificate made there
        by openssl (client-go, hence helm, sends bearer tokens only over TLS)."""
        api = self

        class Handler(_Handler):
            server_api = api

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        scheme = "http"
        self.ca_data = None
        if tls_dir:
            import base64
            import os
            import ssl
            import subprocess
            cert, key = os.path.join(tls_dir, "apiserver.crt"), os.path.join(tls_dir, "apiserver.key")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                            "-days", "1", "-subj", "/CN=fake-kube-api", "-addext", "subjectAltName=IP:127.0.0.1"],
                           check=True, capture_output=True)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            with open(cert, "rb") as handle:
                self.ca_data = base64.b64encode(handle.read()).decode("ascii")
            self.ca_file = cert
            scheme = "https"
        self.url = "%s://127.0.0.1:%d" % (scheme, self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def inject_failure(self, method, path_re, code=500, reason="InternalError", message=None, times=1):
        """Answer the next ``times`` matching requests (method or "*", regex on the path) with an error Status."""
        self.failures.append(_Failure(method, path_re, code, reason,
                                      message or "Internal error occurred: injected by test", times))

    def fail_nth_write(self, n, code=500):
        """Answer the ``n``-th mutating request from now (1 = the next one; dry runs not counted) with an error
        Status, as an API server that falls over in the middle of a run. The failed request is recorded with
        ``injected: True`` and changes nothing."""
        if n < 1:
            raise ValueError("n must be 1 or more")
        self._write_fault = [n, code]

    def hold_nth_write(self, n):
        """Apply the ``n``-th mutating request from now (counted as fail_nth_write counts) but hold its answer until
        ``release_held()``: the client waits there, so a test can kill it at exactly that write however loaded the
        machine is. ``wait_held(bound_s)`` returns once the write is applied and held (False: not reached)."""
        if n < 1:
            raise ValueError("n must be 1 or more")
        self._write_hold = [n, threading.Event(), threading.Event()]

    def wait_held(self, bound_s, running=None):
        """Wait (bounded) until the held write is reached; ``running()`` false ends the wait early (False)."""
        hold = self._write_hold
        deadline = time.monotonic() + bound_s
        while not hold[1].wait(0.05):
            if (running is not None and not running()) or time.monotonic() > deadline:
                return hold[1].is_set()
        return True

    def release_held(self):
        if self._write_hold:
            self._write_hold[2].set()

    def writes(self, dry_run=None, counted=False, accepted=False):
        """Mutating requests seen so far; dry_run=True/False filters on dryRun=All; counted=True leaves out those
        the ``uncounted`` predicate names; accepted=True: only those answered 2xx (a write the server refused
        changed nothing)."""
        out = [r for r in self.requests if r["method"] in ("POST", "PUT", "PATCH", "DELETE")
               and (not accepted or 200 <= (r.get("code") or 0) < 300)]
        if counted and self.uncounted:
            out = [r for r in out if not self.uncounted(r)]
        if dry_run is not None:
            out = [r for r in out if ("All" in r["query"].get("dryRun", [])) == dry_run]
        return out

    def _next_rv(self):
        self._rv += 1
        return str(self._rv)

    def put(self, obj):
        """Store an object directly (test setup), filling metadata like the API server would."""
        group, version = obj["apiVersion"].rpartition("/")[::2]
        plural = [p for g, v, p, k, n in RESOURCES if g == group and k == obj["kind"]][0]
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta.setdefault("generation", 1)
        with self._lock:
            meta["resourceVersion"] = self._next_rv()
            self.objects[(group, plural, meta.get("namespace", ""), meta["name"])] = copy.deepcopy(obj)
        return obj

    def snapshot(self):
        """The stored objects, last-applied configurations and resource version counter, as JSON-able data
        (``restore`` loads them into another server: a bench run split over two processes)."""
        with self._lock:
            return {"objects": [[list(key), obj] for key, obj in self.objects.items()],
                    "applied": [[list(key), manager, config] for (key, manager), config in self.applied.items()],
                    "rv": self._rv}

    def restore(self, data):
        """Load what ``snapshot`` returned, replacing everything stored."""
        with self._lock:
            self.objects = dict((tuple(key), obj) for key, obj in data["objects"])
            self.applied = dict(((tuple(key), manager), config) for key, manager, config in data["applied"])
            self._rv = data["rv"]

    def get(self, group, plural, name, namespace=""):
        with self._lock:
            obj = self.objects.get((group, plural, namespace, name))
            return copy.deepcopy(obj)

    def add_node(self, name, labels=None, hostname=None, internal_ip=None, allocatable=None, capacity=None):
        addresses = []
        if internal_ip:
            addresses.append({"type": "InternalIP", "address": internal_ip})
        addresses.append({"type": "Hostname", "address": hostname or name})
        return self.put({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": hostname or name},
                                                      **(labels or {}))},
            "spec": {},
            "status": {"addresses": addresses, "allocatable": dict(allocatable or {"cpu": "64", "pods": "110"}),
                       "capacity": dict(capacity or allocatable or {"cpu": "64", "pods": "110"}),
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })

    def node_labels(self, name):
        return self.get("", "nodes", name)["metadata"].get("labels", {})

    def kubeconfig(self, token=None, context="fake", namespace=None):
        ctx = {"cluster": "fake", "user": "fake-user"}
        if namespace:
            ctx["namespace"] = namespace
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "fake", "cluster": dict({"server": self.url}, **(
                {"certificate-authority-data": self.ca_data} if self.ca_data else {}))}],
            "contexts": [{"name": context, "context": ctx}],
            "users": [{"name": "fake-user", "user": {"token": token} if token else {}}],
        }

    def served(self):
        """The (group, version, plural, kind, namespaced) this server lists in discovery."""
        return [r for r in RESOURCES + RESOURCE_BETA
                if r[0] != "resource.k8s.io" or r[1] in self.resource_api_versions]

    # ---- request handling ---------------------------------------------------------------------------
    def handle(self, method, raw_path, headers, body_bytes):
        """Answer one request: (status code, body). Every request is recorded in ``requests`` (with the time it
        came, for benches); the HTTP handler adds the code it was answered."""
        parts = urlsplit(raw_path)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query)
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
        auth = headers.get("Authorization") or ""
        record = {"method": method, "path": path, "query": query, "content_type": ctype, "body": None,
                  "authorization": auth.split(" ")[0] if auth else None, "time": time.time()}
        with self._lock:
            self.requests.append(record)
        self._local.record = record
        if self.on_request is not None:
            self.on_request(record)
        body = None
        if "protobuf" in ctype and body_bytes:
            # helm (client-go) writes core/v1 objects as protobuf: decode the kinds it writes (Secret, ConfigMap).
            try:
                body = k8s_protobuf.decode(body_bytes)
            except (ValueError, IndexError) as exc:
                return status(415, "UnsupportedMediaType", "the body of the request was in an unknown format: %s"
                              % exc)
            record["body"] = body
        elif body_bytes:
            try:
                body = yaml.safe_load(body_bytes.decode("utf-8")) if "yaml" in ctype else json.loads(body_bytes)
            except ValueError as exc:
                return status(400, "BadRequest", "error decoding request body: %s" % exc)
            record["body"] = body
        # authentication and authorisation
        role = "rw"
        if self.tokens is not None:
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
            if token not in self.tokens:
                return status(401, "Unauthorized", "Unauthorized")
            role = self.tokens[token]
        with self._lock:
            if (self._write_fault and method in ("POST", "PUT", "PATCH", "DELETE")
                    and "All" not in query.get("dryRun", [])
                    and not (self.uncounted and self.uncounted(record))):
                self._write_fault[0] -= 1
                if self._write_fault[0] == 0:
                    code, self._write_fault = self._write_fault[1], None
                    record["injected"] = True
                    return status(code, "InternalError", "Internal error occurred: injected by test (write fault)")
            if (self._write_hold and self._write_hold[0] > 0 and method in ("POST", "PUT", "PATCH", "DELETE")
                    and "All" not in query.get("dryRun", []) and not (self.uncounted and self.uncounted(record))):
                self._write_hold[0] -= 1
                if self._write_hold[0] == 0:
                    record["held"] = True
            for failure in self.failures:
                if failure.times and failure.method in ("*", method) and failure.path_re.search(path):
                    failure.times -= 1
                    return status(failure.code, failure.reason, failure.message)
        if path == "/version":
            major, minor = self.server_version.lstrip("v").split(".")[:2]
            return 200, {"major": major, "minor": minor, "gitVersion": self.server_version,
                         "platform": "linux/amd64", "goVersion": "go1.24"}
        if path == "/openapi/v2":
            # A minimal OpenAPI v2 Document in protobuf (gnostic openapi_v2: swagger = 1, info = 2 {title, version})
            # with no definitions: kubectl/helm client-side validation skips kinds it finds no schema for.
            return 200, _openapi_v2_document(self.server_version)
        if path == "/openapi/v3":
            # OpenAPI v3 index and per-group-version documents with permissive schemas (object, unknown fields
            # kept): enough for clients that validate manifests against the schema (helm) to find every kind.
            return 200, {"paths": {("api/" if not g else "apis/%s/" % g) + v:
                                   {"serverRelativeURL": "/openapi/v3/%s%s" % ("api/" if not g else "apis/%s/" % g, v)}
                                   for g, v, *dummy in self.served()}}
        m = re.match(r"^/openapi/v3/(?:api|apis/([^/]+))/([^/]+)$", path)
        if m:
            group, version = m.group(1) or "", m.group(2)
            schemas = {}
            for g, v, dummy, k, namespaced in self.served():
                if g == group and v == version:
                    schemas["fake.%s.%s.%s" % (g or "core", v, k)] = {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                       "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                        "x-kubernetes-group-version-kind": [{"group": g, "version": v, "kind": k}]}
            return 200, {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": self.server_version},
                         "paths": {}, "components": {"schemas": schemas}}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"],
                         "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if path == "/apis":
            groups = {}
            for g, v, *dummy in self.served():
                if g and v not in groups.setdefault(g, []):
                    groups[g].append(v)
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": "%s/%s" % (g, v), "version": v} for v in vs],
                 "preferredVersion": {"groupVersion": "%s/%s" % (g, vs[0]), "version": vs[0]}}
                for g, vs in groups.items()]}
        m = re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/:]+):(\d+)/proxy(/.*)?$", path)
        if m and method == "GET":
            return self._proxy(m.group(1), m.group(2), int(m.group(3)), m.group(4) or "/")
        m = re.match(r"^/api/(v1)(/.*)?$", path) or re.match(r"^/apis/([^/]+/[^/]+)(/.*)?$", path)
        if not m:
            return status(404, "NotFound", "the server could not find the requested resource")
        group, version = m.group(1).rpartition("/")[::2]
        rest = [p for p in (m.group(2) or "").split("/") if p]
        if not rest:
            res = [{"name": p, "singularName": k.lower(), "namespaced": n, "kind": k, "verbs": _ALL}
                   for g, v, p, k, n in self.served() if g == group and v == version]
            if not res:
                return status(404, "NotFound", "the server could not find the requested resource")
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": m.group(1),
                         "resources": res}
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in _BY_PATH:
            namespace, rest = rest[1], rest[2:]
        plural, name = rest[0], rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (group, version, plural) not in _BY_PATH or (group, version, plural) not in \
                [(g, v, p) for g, v, p, dummy, dummy2 in self.served()]:
            return status(404, "NotFound", "the server could not find the requested resource")
        kind, namespaced = _BY_PATH[(group, version, plural)]
        api_version = "%s/%s" % (group, version) if group else version
        if method != "GET" and role == "ro":
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
            where = "in the namespace \"%s\"" % namespace if namespace else "at the cluster scope"
            return status(403, "Forbidden", "%s%s is forbidden: User \"system:serviceaccount:ci:readonly\" cannot "
                          "%s resource \"%s\" in API group \"%s\" %s"
                          % (plural, " \"%s\"" % name if name else "", verb, plural, group, where),
                          {"name": name, "kind": plural})
        dry_run = "All" in query.get("dryRun", [])
        if query.get("dryRun") and query["dryRun"] != ["All"]:
            return status(400, "BadRequest", "Invalid dry run value %s: the only valid value is All"
                          % query["dryRun"])
        with self._lock:
            return self._crud(method, group, api_version, plural, kind, namespaced, namespace, name, sub,
                              query, ctype, body, dry_run)

    def _proxy(self, namespace, name, port, path):
        """GET through the proxy to a pod's port, as the API server answers it: 404 for no such pod, 503 when the pod
        is not running or nothing listens there (the server's "error trying to reach service"), else what the pod
        serves (text)."""
        with self._lock:
            pod = self.objects.get(("", "pods", namespace, name))
            pod = copy.deepcopy(pod) if pod else None
        if pod is None:
            return self._not_found("pods", name)
        answer = self.pod_proxy(pod, port, path) if self.pod_proxy is not None and \
            (pod.get("status") or {}).get("phase") == "Running" else None
        if answer is None:
            return status(503, "ServiceUnavailable", "error trying to reach service: dial tcp %s:%d: connect: "
                          "connection refused" % ((pod.get("status") or {}).get("podIP") or "", port))
        code, text = answer
        return code, ProxiedText(text)

    def _not_found(self, plural, name, group=""):
        res = plural if not group else "%s.%s" % (plural, group)
        return status(404, "NotFound", "%s \"%s\" not found" % (res, name),
                      {"name": name, "group": group, "kind": plural})

    def _validate(self, plural, kind, obj, name, old=None):
        """None when ``obj`` may be stored (after the defaults the server sets, filled in ``obj``), else a 4xx
        Status; ``old`` is the stored object on an update."""
        if plural in ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"):
            return self._validate_resource(plural, kind, obj, name, old)
        if plural == "leases":
            bad = _bad_times(obj)
            if bad:
                return bad
        causes = []
        meta = obj.get("metadata") or {}
        if not meta.get("name"):
            causes.append(("metadata.name", "", "name or generateName is required"))
        causes += _label_errors(meta.get("labels"))
        if plural == "leases":
            causes += _lease_errors(obj.get("spec") or {})
        if plural == "nodes":
            causes += _taint_errors((obj.get("spec") or {}).get("taints"))
        if plural == "runtimeclasses":
            handler = obj.get("handler")
            if not handler or not _DNS1123_LABEL.match(handler):
                causes.append(("handler", handler, "a lowercase RFC 1123 label must consist of lower case "
                               "alphanumeric characters or '-'"))
        if not causes:
            return fake_crd.admit(self, plural, kind, obj, name, old)
        msgs = ["%s: Invalid value: %s: %s" % (f, json.dumps(v), why) for f, v, why in causes]
        return status(422, "Invalid", "%s \"%s\" is invalid: %s" % (kind, name, "; ".join(msgs)),
                      {"name": name, "kind": kind,
                       "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: %s: %s"
                                   % (json.dumps(v), why), "field": f} for f, v, why in causes]})

    def _validate_resource(self, plural, kind, obj, name, old):
        """resource.k8s.io/v1 objects (fake_resource_api.py): defaulted, then validated as Kubernetes v1.34; the
        Status worded as apimachinery's NewInvalid (group-qualified kind, several errors in brackets)."""
        fake_resource_api.default(plural, obj)
        errs = []
        meta = obj.get("metadata") or {}
        if not meta.get("name"):
            errs.append((fake_resource_api.REQUIRED, "metadata.name", None, "name or generateName is required"))
        elif old is None:
            errs += fake_resource_api._dns_subdomain(meta["name"], "metadata.name")
        errs += [(fake_resource_api.INVALID, f, v, why) for f, v, why in _label_errors(meta.get("labels"))]
        errs += fake_resource_api.errors(plural, obj, old)
        if not errs:
            return None
        bodies = ["%s: %s" % (f, fake_resource_api.error_body(r, v, d)) for r, f, v, d in errs]
        qualified = "%s.%s" % (kind, fake_resource_api.GROUP)
        return status(422, "Invalid", "%s \"%s\" is invalid: %s" % (
            qualified, name, bodies[0] if len(bodies) == 1 else "[%s]" % ", ".join(bodies)),
            {"name": name, "group": fake_resource_api.GROUP, "kind": kind,
             "causes": [{"reason": r, "message": fake_resource_api.error_body(r, v, d), "field": f}
                        for r, f, v, d in errs]})

    def _store(self, key, obj, old, dry_run):
        meta = obj.setdefault("metadata", {})
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            meta["generation"] = 1
        else:
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            gen = old["metadata"].get("generation", 1)
            if obj.get("spec") != old.get("spec") or obj.get("data") != old.get("data"):
                gen += 1
            meta["generation"] = gen
        if dry_run:
            meta["resourceVersion"] = (old or {}).get("metadata", {}).get("resourceVersion", "")
            return copy.deepcopy(obj)
        meta["resourceVersion"] = self._next_rv()
        self.objects[key] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def _crud(self, method, group, api_version, plural, kind, namespaced, namespace, name, sub, query, ctype,
              body, dry_run):
        if namespaced and namespace and method in ("POST", "PUT", "PATCH") \
                and ("", "namespaces", "", namespace) not in self.objects:
            return self._not_found("namespaces", namespace)
        if name is None:
            if method == "GET":
                items = [copy.deepcopy(o) for (g, p, ns, dummy), o in sorted(self.objects.items())
                         if g == group and p == plural and (not namespace or ns == namespace)
                         and _match_selector(o["metadata"].get("labels"), (query.get("labelSelector") or [""])[0])
                         and _match_fields(o, (query.get("fieldSelector") or [""])[0])]
                return 200, {"kind": kind + "List", "apiVersion": api_version,
                             "metadata": {"resourceVersion": str(self._rv)}, "items": items}
            if method == "POST":
                obj = copy.deepcopy(body or {})
                obj["apiVersion"], obj["kind"] = api_version, kind
                meta = obj.setdefault("metadata", {})
                if namespaced:
                    meta["namespace"] = namespace
                if not meta.get("name") and meta.get("generateName"):
                    # names.SimpleNameGenerator: the prefix and 5 random characters of an alphabet without vowels
                    meta["name"] = meta["generateName"] + "".join(
                        random.choice("bcdfghjklmnpqrstvwxz2456789") for dummy in range(5))
                new_name = meta.get("name")
                invalid = self._validate(plural, kind, obj, new_name)
                if invalid:
                    return invalid
                key = (group, plural, namespace, new_name)
                if key in self.objects:
                    return status(409, "AlreadyExists", "%s \"%s\" already exists"
                                  % (plural if not group else plural + "." + group, new_name),
                                  {"name": new_name, "group": group, "kind": plural})
                return 201, self._store(key, obj, None, dry_run)
            return status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        key = (group, plural, namespace, name)
        old = self.objects.get(key)
        if method == "POST" and plural == "pods" and sub == "eviction":
            # The Eviction subresource (policy/v1): no PodDisruptionBudgets modelled, the pod goes at once.
            if not old:
                return self._not_found(plural, name, group)
            if not dry_run:
                del self.objects[key]
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if method == "GET":
            return (200, copy.deepcopy(old)) if old else self._not_found(plural, name, group)
        if method == "DELETE":
            if not old:
                return self._not_found(plural, name, group)
            # DeleteOptions.preconditions (apimachinery): a resourceVersion or uid other than the stored one is 409
            pre = (body or {}).get("preconditions") or {}
            if (pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]) or (
                    pre.get("uid") and pre["uid"] != old["metadata"].get("uid")):
                return _conflict(plural, group, name)
            if not dry_run:
                del self.objects[key]
                for applied in [k for k in self.applied if k[0] == key]:
                    del self.applied[applied]
            return 200, copy.deepcopy(old)
        if method == "PUT":
            if not old:
                return self._not_found(plural, name, group)
            obj = copy.deepcopy(body or {})
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                return _conflict(plural, group, name)
            if sub == "status":
                obj = dict(copy.deepcopy(old), status=obj.get("status"))
            elif plural == "nodes":     # nodeStrategy.PrepareForUpdate: a write to the node keeps its status
                obj["status"] = copy.deepcopy(old.get("status"))
            obj["apiVersion"], obj["kind"] = api_version, kind
            if namespaced:
                obj["metadata"]["namespace"] = namespace
            invalid = self._validate(plural, kind, obj, name, old)
            return invalid or (200, self._store(key, obj, old, dry_run))
        if method == "PATCH":
            if ctype == "application/apply-patch+yaml":
                if not query.get("fieldManager"):
                    return status(400, "BadRequest", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: "
                                  "Required value: is required for apply patch")
                # Server-side apply, modelled per field manager: fields this manager applied last time and no
                # longer applies are removed (as with managedFields), then the applied config is merged in.
                manager = query["fieldManager"][0]
                last = self.applied.get((key, manager)) or {}
                obj = apply_merge(_prune(copy.deepcopy(old or {}), last, body or {}), body or {})
                if not dry_run:
                    self.applied[(key, manager)] = copy.deepcopy(body or {})
            elif not old:
                return self._not_found(plural, name, group)
            elif ctype == "application/merge-patch+json":
                obj = merge_patch(copy.deepcopy(old), body)     # a copy: validation and dry runs must not touch
            elif ctype == "application/strategic-merge-patch+json":    # the stored object
                try:
                    obj = strategic_merge_patch(copy.deepcopy(old), body, STRATEGIC_MERGE_KEYS.get(kind))
                except ValueError as exc:
                    return status(422, "Invalid", "the server rejected our request due to an error in our "
                                  "request: %s" % exc)
            elif ctype == "application/json-patch+json":
                try:
                    obj = json_patch(old, body)
                except (KeyError, IndexError, ValueError) as exc:
                    return status(422, "Invalid", "the server rejected our request due to an error in our "
                                  "request: %s" % exc)
            else:
                return status(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                              "accepted media types include: application/json-patch+json, "
                              "application/merge-patch+json, application/apply-patch+yaml")
            obj["apiVersion"], obj["kind"] = api_version, kind
            obj.setdefault("metadata", {})["name"] = name
            if namespaced:
                obj["metadata"]["namespace"] = namespace
            if old and plural == "nodes":
                # nodeStatusStrategy keeps the stored spec on a status write, nodeStrategy the stored status on a
                # write to the node (kubernetes pkg/registry/core/node/strategy.go, PrepareForUpdate)
                kept = "spec" if sub == "status" else "status"
                if kept in old:
                    obj[kept] = copy.deepcopy(old[kept])
                else:
                    obj.pop(kept, None)
            if old and obj["metadata"].get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                return _conflict(plural, group, name)
            invalid = self._validate(plural, kind, obj, name, old)
            if invalid:
                return invalid
            return (200 if old else 201), self._store(key, obj, old, dry_run)
        return status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_api = None
    # TCP_NODELAY on every connection: an answer is written as its headers, then its body; with Nagle's algorithm on,
    # the body waits for the client's delayed ACK of the headers (up to 40 ms on Linux) on a kept-alive connection,
    # a wait per request that a real API server (Go sets TCP_NODELAY) does not have
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # keep pytest output clean
        pass

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        try:
            code, body = self.server_api.handle(self.command, self.path, self.headers, data)
        except Exception as exc:  # a bug in the fake must show as a 500, not a hang
            code, body = status(500, "InternalError", "fake API server error: %r" % (exc,))
        record = getattr(self.server_api._local, "record", None)
        if record is not None:
            record["code"] = code      # what the request was answered (requests[i]["code"])
            self.server_api._local.record = None
            hold = self.server_api._write_hold
            if record.get("held") and hold:
                hold[1].set()          # applied, not answered: the client waits here (hold_nth_write)
                hold[2].wait(600)
        if isinstance(body, ProxiedText):
            payload, ctype = body.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8"
        elif isinstance(body, bytes):
            payload, ctype = body, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        else:
            payload, ctype = json.dumps(body).encode("utf-8"), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
