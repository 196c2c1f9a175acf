#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_compute_domains
short_description: Make the cluster hold exactly the declared ComputeDomains of NVIDIA's DRA driver
version_added: 0.4.0
description:
  - Makes the cluster hold exactly the declared ComputeDomains (C(resource.nvidia.com/v1beta1), multi-node NVLink),
    each built from a short declaration by the collection's planner (whose output the tests check against the CRD of
    NVIDIA's DRA driver chart v25.12.0; the API server validates every write, check mode's dry runs included).
    NVIDIA's controller then creates each one's ResourceClaimTemplate (C(<name>-channel) unless
    C(claim_template) names it), which a workload's pods reference. docs/dra.md has an example workload.
  - Every ComputeDomain it writes is labelled C(app.kubernetes.io/managed-by=gpuops.nvidia). One of the same name
    without that label is B(never touched) - the run fails naming it, before anything is written.
  - The collection's ComputeDomains (in every namespace) that are no longer declared are deleted. A ComputeDomain's
    spec is immutable in the API - a changed one is deleted and created again.
  - A ComputeDomain that a ResourceClaim still uses (a running workload's channel) is never deleted or replaced - the
    run fails naming the claims, before anything is written.
  - Namespaces are not created - a missing one fails the run, naming it, before anything is written.
  - Check mode plans without writing (the API server's dry run checks each write); diff mode shows each ComputeDomain
    before and after.
  - A delete is guarded by the resourceVersion the run read; another writer in between makes the run read and plan
    again (three tries).
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  compute_domains:
    description:
      - The ComputeDomains, each a mapping with the keys C(name) (an object name), C(namespace) (an existing
        namespace), C(num_nodes) (a whole number, 0 or more), C(channel_allocation_mode) (C(Single), the default, or
        C(All), as NVIDIA's CRD says) and optionally C(claim_template) (the name of the ResourceClaimTemplate NVIDIA's
        controller creates; default C(<name>-channel)).
      - A bad declaration fails the run before anything is read, naming the key, the value given and what is valid.
      - An empty list deletes every ComputeDomain the collection created (that no claim uses).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: One ComputeDomain for an NVL72 training job
  gpuops.nvidia.dra_compute_domains:
    compute_domains:
      - name: nvl72-train
        namespace: ml
        num_nodes: 0
        channel_allocation_mode: Single
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
compute_domains:
  description: The collection's ComputeDomains after the run, as C(namespace/name), with their claim template's name.
  returned: always
  type: dict
  sample: {"ml/nvl72-train": "nvl72-train-channel"}
changes:
  description: What was (in check mode, would be) done, one line per ComputeDomain.
  returned: always
  type: list
  elements: str
"""

import copy
from urllib.parse import quote


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module


ARGUMENT_SPEC = dict(
    compute_domains=dict(type="list", elements="dict", default=[]),
)
ARGUMENT_SPEC.update(_kube.AUTH_ARG_SPEC)


def path(namespace=None, name=None):
    """The path of ComputeDomains (in every namespace without ``namespace``)."""
    out = "/apis/%s" % _dra.COMPUTE_DOMAIN_API_VERSION
    if namespace:
        out += "/namespaces/%s" % quote(namespace, safe="")
    out += "/computedomains"
    return out + ("/%s" % quote(name, safe="") if name else "")


def param_errors(p):
    errors, seen = [], set()
    for n, decl in enumerate(p["compute_domains"]):
        where = "compute_domains[%d]" % n
        errors.extend(_dra.compute_domain_errors(decl, where))
        if isinstance(decl, dict):
            key = (decl.get("namespace"), decl.get("name"))
            if key in seen:
                errors.append("%s: ComputeDomain %s/%s is declared twice" % (where, key[0], key[1]))
            seen.add(key)
    return errors


def ours(obj):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(_dra.MANAGED_BY[0]) == _dra.MANAGED_BY[1]


def _view(obj):
    """What the collection declares of a ComputeDomain: its label of ours and its spec."""
    if not obj:
        return {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {"labels": dict((k, v) for k, v in labels.items() if k == _dra.MANAGED_BY[0]), "spec": obj.get("spec")}


def _domain_ids(claim):
    """The ComputeDomain uids a ResourceClaim's opaque configs name (ComputeDomainChannelConfig's domainID)."""
    out = set()
    for conf in (((claim.get("spec") or {}).get("devices") or {}).get("config") or []):
        params = ((conf or {}).get("opaque") or {}).get("parameters") or {}
        if isinstance(params, dict) and params.get("domainID"):
            out.add(params["domainID"])
    return out


class ComputeDomains(KubeRun):
    """validate -> read the declared namespaces and the collection's ComputeDomains -> plan -> apply (in check mode
    the API server's dry run) -> after: the collection's ComputeDomains."""

    argument_spec = ARGUMENT_SPEC
    apply_in_check_mode = True
    # a delete is guarded by the resourceVersion read: another writer in between (a 409 Conflict) makes the run read,
    # check the claims and plan again
    conflict_tries = 3

    def __init__(self, module):
        super(ComputeDomains, self).__init__(module)
        self.p = module.params
        self.result.update(changes=[], compute_domains={})
        self.diff = {"before": {}, "after": {}}
        self.crd_missing = False

    def validate(self):
        return _kube.auth_param_errors(self.params) + param_errors(self.params)

    def read(self):
        """{(namespace, name): object} of the declared names and of the collection's ComputeDomains anywhere, and
        {(namespace, name): [claims using it]}; fails, writing nothing, on a missing namespace or a ComputeDomain of
        a declared name that is not the collection's."""
        problems, current = [], {}
        namespaces = sorted(set(d["namespace"] for d in self.p["compute_domains"]))
        for ns in namespaces:
            if _kube.read_or_none(self.kube, "read namespace %s" % ns, _kube.namespace_path(ns)) is None:
                problems.append("namespace %s does not exist (the collection does not create workload namespaces: "
                                "create it, or declare the ComputeDomain in another)" % ns)
        if problems:
            self.refuse("; ".join(problems), errors=problems)
        try:
            listed = self.kube.get("list ComputeDomains", path(), labelSelector="%s=%s" % _dra.MANAGED_BY)
        except _kube.KubeError as exc:
            if exc.status != 404:
                raise
            # no ComputeDomain CRD: the chart that brings it is not installed yet (a check run before the DRA
            # driver's first install may plan the declared ones; a real run cannot write them)
            if not self.module.check_mode and self.p["compute_domains"]:
                self.refuse("the cluster serves no ComputeDomains (%s computedomains): their CRD comes with NVIDIA's "
                            "DRA driver chart - install it first (cluster_device_plugin_provider dra, "
                            "cluster_dra_compute_domains true)" % _dra.COMPUTE_DOMAIN_API_VERSION)
            self.crd_missing = True
            listed = {}
        for obj in listed.get("items") or []:
            current[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        for decl in self.p["compute_domains"]:
            key = (decl["namespace"], decl["name"])
            if key in current or self.crd_missing:
                continue
            obj = _kube.read_or_none(self.kube, "read ComputeDomain %s/%s" % key, path(*key))
            if obj is not None and not ours(obj):
                labels = (obj.get("metadata") or {}).get("labels") or {}
                problems.append("ComputeDomain %s/%s exists and is not this collection's (labels %s): it is never "
                                "touched; rename the declared one or remove that one" % (key + (labels or "none",)))
            elif obj is not None:
                current[key] = obj
        if problems:
            self.refuse("; ".join(problems), errors=problems)
        return current

    def plan(self, current):
        """[(action, namespace, name, desired object or None, current object or None)]"""
        declared = dict(((d["namespace"], d["name"]), _dra.compute_domain_object(d)) for d in self.p["compute_domains"])
        changes = []
        for key, want in sorted(declared.items()):
            cur = current.get(key)
            if cur is None:
                changes.append(("create",) + key + (want, None))
            elif cur.get("spec") != want["spec"]:
                changes.append(("replace",) + key + (want, cur))
        for key, cur in sorted(current.items()):
            if key not in declared and ours(cur):
                changes.append(("delete",) + key + (None, cur))
        self._refuse_in_use([c for c in changes if c[0] in ("replace", "delete")])
        return changes

    def _refuse_in_use(self, removals):
        """A ComputeDomain whose channel a ResourceClaim holds (a workload runs in it) is not deleted: fail, naming
        the claims, before anything is written."""
        problems, claims = [], {}
        for action, ns, name, dummy, cur in removals:
            if ns not in claims:
                listed = self.kube.get("list ResourceClaims in %s" % ns, _kube.dra_path("resourceclaims", ns))
                claims[ns] = listed.get("items") or []
            uid = cur["metadata"].get("uid")
            users = sorted(c["metadata"]["name"] for c in claims[ns] if uid and uid in _domain_ids(c))
            if users:
                problems.append("ComputeDomain %s/%s would be %s but ResourceClaim(s) %s use its IMEX channel: stop the "
                                "workloads first (their pods), then run again" % (
                                    ns, name, "deleted" if action == "delete" else
                                    "replaced (its spec is immutable: %s)" % self._spec_change(cur), ", ".join(users)))
        if problems:
            self.refuse("; ".join(problems), errors=problems)

    def _spec_change(self, cur):
        for d in self.p["compute_domains"]:
            if (d["namespace"], d["name"]) == (cur["metadata"]["namespace"], cur["metadata"]["name"]):
                want = _dra.compute_domain_object(d)["spec"]
                return "declared %s, it has %s" % (want, cur.get("spec"))
        return ""

    def apply(self, current, changes):
        dry = self.module.check_mode
        words = {"create": "created", "replace": "replaced (a ComputeDomain's spec is immutable: deleted and created "
                                                 "again)", "delete": "deleted"}
        for action, ns, name, want, cur in changes:
            what = "%s ComputeDomain %s/%s" % (action, ns, name)
            if action in ("replace", "delete"):
                gone = self.kube.delete(what, path(ns, name), dry_run=dry,
                                        precondition=cur["metadata"].get("resourceVersion"))
                if action == "replace" and not dry and ((gone or {}).get("metadata") or {}).get("deletionTimestamp"):
                    self.fail("ComputeDomain %s/%s was deleted to be created again with the declared spec, but NVIDIA's "
                              "controller is still finalizing it: run again once it is gone to create it" % (ns, name),
                              changed=True)
            # (a dry-run create would meet the old one; without the CRD the API server has nothing to dry-run)
            if (action == "create" and not (dry and self.crd_missing)) or (action == "replace" and not dry):
                self.kube.create(what, path(ns), copy.deepcopy(want), dry_run=dry)
            self.result["changes"].append("%s/%s %s" % (ns, name, words[action]))
            key = "%s/%s" % (ns, name)
            self.diff["before"][key] = _view(cur)
            self.diff["after"][key] = _view(want)

    def forget(self, conflict):
        """What a try that ended in a conflict reported is not the run's answer: the next try reports its own."""
        self.result["changes"] = []
        self.diff = {"before": {}, "after": {}}

    def after(self, current, changes):
        names = dict(("%s/%s" % k, o["spec"]["channel"]["resourceClaimTemplate"]["name"])
                     for k, o in current.items() if ours(o))
        for action, ns, name, want, dummy in changes:
            if action == "delete":
                names.pop("%s/%s" % (ns, name), None)
            else:
                names["%s/%s" % (ns, name)] = want["spec"]["channel"]["resourceClaimTemplate"]["name"]
        self.result["compute_domains"] = names
        if self.module._diff and changes:
            self.result["diff"] = self.diff


def main():
    run_module(ComputeDomains)


if __name__ == "__main__":
    main()
