#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_claim_templates
short_description: Publish the ResourceClaimTemplates that workloads reference to get GPUs from NVIDIA's DRA driver
version_added: 0.1.0
description:
  - Makes each namespace of O(namespaces) hold exactly the declared ResourceClaimTemplates (C(resource.k8s.io/v1)) of
    one template set. Every template requests devices of class C(gpu.nvidia.com) or C(mig.nvidia.com), optionally with
    CEL selectors, and carries an opaque C(GpuConfig) (C(resource.nvidia.com/v1beta1)) for driver C(gpu.nvidia.com)
    with the sharing (TimeSlicing, MPS and its limits). docs/dra.md explains the sets the collection publishes.
  - Every template it writes is labelled C(app.kubernetes.io/managed-by=gpuops.nvidia) and
    C(gpuops.nvidia/claim-template-set=<set>). A template of the same name without these labels (or of another set)
    is B(never touched) - the run fails naming it, before anything is written.
  - A template's spec is immutable in the API - a changed template is deleted and created again (claims already made
    from it keep their own copy). With O(prune=true), the set's templates that are no longer declared are deleted.
  - Namespaces are not created - a missing one fails the run, naming it, before anything is written.
  - Check mode plans without writing; diff mode shows each template before and after.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  templates:
    description: The templates of the set (built by the gpuops.nvidia.dra_templates filter, or by hand).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The template's name (a DNS subdomain).
        type: str
        required: true
      profile:
        description: The value of its C(gpuops.nvidia/profile) label (which sharing profile it serves).
        type: str
        default: explicit
      device_class:
        description: C(gpu) (DeviceClass C(gpu.nvidia.com)) or C(mig) (C(mig.nvidia.com)).
        type: str
        choices: [gpu, mig]
        default: gpu
      selectors:
        description: CEL expressions, all of which a device must match.
        type: list
        elements: str
        default: []
      config:
        description:
          - The opaque C(GpuConfig) for driver C(gpu.nvidia.com); none for the driver's default.
          - Its MPS pinned memory limits must be Kubernetes quantities of whole bytes from C(1Mi) to below C(1Pi)
            (C(8Gi), C(512Mi), C(1G) = 10**9 bytes; not C(8GB)), or the run fails before anything is written.
        type: dict
      count:
        description: How many devices one claim gets.
        type: int
        default: 1
  namespaces:
    description: The namespaces (of the workloads) to publish the templates in.
    type: list
    elements: str
    required: true
  template_set:
    description: The template set's name (label C(gpuops.nvidia/claim-template-set)); pruning only ever sees this set.
    type: str
    required: true
  prune:
    description: Delete the set's templates in O(namespaces) that are not declared.
    type: bool
    default: true
  user:
    description:
      - For a set that several publishers share (the GPU-dependent templates every node with the same GPUs publishes),
        this publisher's name. Each template then lists its users in the annotation C(gpuops.nvidia/users) - a run adds
        its user to the templates it declares and removes it from the set's other templates, and deletes a template
        only when its last user is gone. O(prune) is not used then. A declared template whose spec differs from one
        that other users still publish is refused.
      - Writes are guarded by the template's resourceVersion; a concurrent writer makes the run read again (five
        tries).
    type: str
  state:
    description: C(present) publishes the templates; C(absent) deletes every template of the set in O(namespaces).
    type: str
    choices: [present, absent]
    default: present
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
- name: Claim templates for the fleet's sharing profiles
  gpuops.nvidia.dra_claim_templates:
    template_set: fleet
    namespaces: [ml-team-a, ml-team-b]
    templates: "{{ cluster_fleet_profiles | gpuops.nvidia.dra_templates(explicit=gpuops_dra_claim_templates) }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
templates:
  description: Per namespace, the names of the set's templates after the run.
  returned: always
  type: dict
  sample: {"ml-team-a": ["gpu", "gpu-ts-4"]}
changes:
  description: What was (in check mode, would be) done, one line per template.
  returned: always
  type: list
  elements: str
"""

import copy


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module

TEMPLATE_OPTIONS = dict(
    name=dict(type="str", required=True),
    profile=dict(type="str", default="explicit"),
    device_class=dict(type="str", choices=["gpu", "mig"], default="gpu"),
    selectors=dict(type="list", elements="str", default=[]),
    config=dict(type="dict"),
    count=dict(type="int", default=1),
)

ARGUMENT_SPEC = dict(
    templates=dict(type="list", elements="dict", options=TEMPLATE_OPTIONS, default=[]),
    namespaces=dict(type="list", elements="str", required=True),
    template_set=dict(type="str", required=True),
    prune=dict(type="bool", default=True),
    user=dict(type="str"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
)
ARGUMENT_SPEC.update(_kube.AUTH_ARG_SPEC)


def path(namespace, name=None):
    return _kube.dra_path("resourceclaimtemplates", namespace, name)


def param_errors(p):
    errors = []
    for ns in p["namespaces"]:
        errors.extend(_kube_names.dns_label_errors(ns, "namespaces"))
    if not p["namespaces"]:
        errors.append("namespaces must list at least one namespace")
    if not _kube_names.is_label_value(p["template_set"]):
        errors.append("template_set %.80r is not a label value (%s)"
                      % (p["template_set"], _kube_names.LABEL_VALUE_RULE))
    seen = set()
    for n, t in enumerate(p["templates"]):
        where = "templates[%d]" % n
        errors.extend(_dra.name_errors(t["name"], where + ".name"))
        if t["name"] in seen:
            errors.append("%s.name %r is declared twice" % (where, t["name"]))
        seen.add(t["name"])
        if not _kube_names.is_label_value(t["profile"]):
            errors.append("%s.profile %.80r is not a label value (%s)"
                          % (where, t["profile"], _kube_names.LABEL_VALUE_RULE))
        if not 1 <= t["count"] <= 16:
            errors.append("%s.count must be from 1 to 16, got %d" % (where, t["count"]))
        if any(not isinstance(s, str) or not s.strip() or len(s) > 10240 for s in t["selectors"]):
            errors.append("%s.selectors must be non-empty CEL expressions of at most 10 KiB" % where)
        config = t.get("config")
        if config is not None and (config.get("apiVersion") != _dra.CONFIG_API_VERSION
                                   or config.get("kind") != _dra.CONFIG_KIND):
            errors.append("%s.config must be a GpuConfig (apiVersion %s, kind %s), got apiVersion %r kind %r"
                          % (where, _dra.CONFIG_API_VERSION, _dra.CONFIG_KIND, config.get("apiVersion"),
                             config.get("kind")))
        errors.extend(_dra.config_limit_errors(config, where + ".config"))
    return errors


def _view(obj):
    """What the collection declares of a template: its labels of ours and its spec."""
    if not obj:
        return {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {"labels": dict((k, v) for k, v in labels.items() if k in (_dra.MANAGED_BY[0], _dra.SET_LABEL,
                                                                      _dra.PROFILE_LABEL)),
            "spec": obj.get("spec")}


USERS = "gpuops.nvidia/users"
TRIES = 5


def users_of(obj):
    text = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(USERS) or ""
    return set(u for u in text.split(",") if u)


def ours(obj, template_set):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(_dra.MANAGED_BY[0]) == _dra.MANAGED_BY[1] and labels.get(_dra.SET_LABEL) == template_set


class ClaimTemplates(KubeRun):
    """validate -> read the namespaces' templates -> plan the actions -> apply them (in check mode the API server's
    dry run) -> after: the templates of the set. A shared set (``user``) whose template another publisher wrote
    between the read and the write (a conflict) is read and planned again."""

    argument_spec = ARGUMENT_SPEC
    apply_in_check_mode = True

    def __init__(self, module):
        super(ClaimTemplates, self).__init__(module)
        self.p = module.params
        self.result.update(changes=[], templates={})
        self.diff = {"before": {}, "after": {}}
        # a shared set: another publisher wrote between our read and our write (a conflict: a changed
        # resourceVersion, or a create that found the template already there) - read and plan again
        self.conflict_tries = TRIES if self.p["user"] else 1

    def validate(self):
        return _kube.auth_param_errors(self.params) + param_errors(self.params)

    def read(self):
        """Per namespace, the existing templates by name; fails, writing nothing, on a missing namespace or a
        template of the same name that is not the set's."""
        existing, problems = {}, []
        for ns in self.p["namespaces"]:
            if _kube.read_or_none(self.kube, "read namespace %s" % ns, _kube.namespace_path(ns)) is None:
                problems.append("namespace %s does not exist (the collection does not create workload namespaces: "
                                "create it, or remove it from the list)" % ns)
                continue
            listed = self.kube.get("list ResourceClaimTemplates in %s" % ns, path(ns))
            existing[ns] = dict((o["metadata"]["name"], o) for o in listed.get("items") or [])
            if self.p["state"] == "present":
                for t in self.p["templates"]:
                    obj = existing[ns].get(t["name"])
                    if obj is not None and not ours(obj, self.p["template_set"]):
                        labels = (obj.get("metadata") or {}).get("labels") or {}
                        problems.append("ResourceClaimTemplate %s/%s exists and is not this collection's template set "
                                        "%s (labels %s): it is never touched; rename the declared template or remove "
                                        "that one" % (ns, t["name"], self.p["template_set"], labels or "none"))
                    elif obj is not None and self.p["user"] and users_of(obj) - set([self.p["user"]]) and \
                            obj.get("spec") != _dra.template_object(t, ns, self.p["template_set"])["spec"]:
                        problems.append("ResourceClaimTemplate %s/%s is published by %s with another spec than %s "
                                        "declares: the same template name must mean the same devices and limits "
                                        "everywhere" % (ns, t["name"], ", ".join(sorted(users_of(obj) - set(
                                            [self.p["user"]]))), self.p["user"]))
        if problems:
            self.refuse("; ".join(problems), errors=problems)
        return existing

    def plan(self, current):
        """[(action, namespace, name, desired object or None, current object or None)]; with ``user`` the desired
        object carries the users it will have."""
        user = self.p["user"]
        changes = []
        for ns in self.p["namespaces"]:
            have = current[ns]
            declared = {}
            if self.p["state"] == "present":
                for t in self.p["templates"]:
                    declared[t["name"]] = _dra.template_object(t, ns, self.p["template_set"])
            for name, want in sorted(declared.items()):
                cur = have.get(name)
                if user:
                    users = users_of(cur) | set([user])
                    want["metadata"]["annotations"] = {USERS: ",".join(sorted(users))}
                if cur is None:
                    changes.append(("create", ns, name, want, None))
                elif cur.get("spec") != want["spec"]:
                    changes.append(("replace", ns, name, want, cur))
                elif _view(cur)["labels"] != want["metadata"]["labels"] or (user and user not in users_of(cur)):
                    changes.append(("relabel", ns, name, want, cur))
            for name, cur in sorted(have.items()):
                if name in declared or not ours(cur, self.p["template_set"]):
                    continue
                if user:
                    if user in users_of(cur):
                        left = users_of(cur) - set([user])
                        if left:
                            want = copy.deepcopy(cur)
                            want["metadata"].setdefault("annotations", {})[USERS] = ",".join(sorted(left))
                            changes.append(("release", ns, name, want, cur))
                        else:
                            changes.append(("delete", ns, name, None, cur))
                elif self.p["prune"] or self.p["state"] == "absent":
                    changes.append(("delete", ns, name, None, cur))
        return changes

    def apply(self, current, changes):
        dry = self.module.check_mode
        words = {"create": "created", "replace": "replaced (a template's spec is immutable: deleted and created "
                                                 "again)", "relabel": "labels updated", "delete": "deleted",
                 "release": "no longer used by %s (still by others)" % self.p["user"]}
        for action, ns, name, want, cur in changes:
            what = "%s ResourceClaimTemplate %s/%s" % (action, ns, name)
            if action in ("replace", "delete"):
                self.kube.delete(what, path(ns, name), dry_run=dry,
                                 precondition=cur["metadata"].get("resourceVersion") if self.p["user"] else None)
            if action in ("create", "replace"):
                body = copy.deepcopy(want)
                if not (dry and action == "replace"):      # a dry-run create would collide with the undeleted one
                    self.kube.create(what, path(ns), body, dry_run=dry)
            if action in ("relabel", "release"):
                meta = {"labels": want["metadata"]["labels"], "resourceVersion": cur["metadata"]["resourceVersion"]}
                if self.p["user"]:
                    meta["annotations"] = {USERS: want["metadata"]["annotations"][USERS]}
                self.kube.patch(what, path(ns, name), {"metadata": meta}, dry_run=dry)
            self.result["changes"].append("%s/%s %s" % (ns, name, words[action]))
            key = "%s/%s" % (ns, name)
            self.diff["before"][key] = _view(cur)
            self.diff["after"][key] = _view(want)

    def forget(self, conflict):
        """What a try that ended in a conflict reported is not the run's answer: the next try reports its own."""
        self.result["changes"] = []
        self.diff = {"before": {}, "after": {}}

    def after(self, current, changes):
        for ns in self.p["namespaces"]:
            names = set(n for n, o in current[ns].items() if ours(o, self.p["template_set"]))
            for action, a_ns, name, dummy, dummy2 in changes:
                if a_ns == ns:
                    (names.discard if action == "delete" else names.add)(name)
            self.result["templates"][ns] = sorted(names)
        if self.module._diff and changes:
            self.result["diff"] = self.diff


def main():
    run_module(ClaimTemplates)


if __name__ == "__main__":
    main()
