#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cluster_profiles
short_description: Keep every GPU node's device plugin profile in the cluster, shared by runs and AWX job slices
version_added: 0.1.0
description:
  - A run of site.yml sees only its own nodes - an AWX job slice gets an inventory with only that slice's hosts, a
    run with C(--limit) plays only some. NVIDIA's device plugin release, though, must carry the profile of every
    node in the cluster; a release built from one slice's nodes would remove the profiles that other slices' nodes
    select, and the device plugin on those nodes would stop (its config-manager fails on a label that names a
    missing config).
  - This module keeps the fleet's declarations in a ConfigMap (data C(nodes) - node name to profile name; C(profiles)
    - profile name to profile) and merges this run's O(nodes) and O(profiles) into it, replacing the entries of
    these nodes and keeping every other node's. It returns the profiles that some node of the record declares, for
    M(gpuops.nvidia.device_plugin) - the same set whichever slice asks, once every slice has recorded its nodes.
  - An entry leaves the record when its node declares another profile, or with O(prune=true) (a run over the whole
    fleet drops the nodes it does not name).
  - When there is no record yet (the first run after upgrading to this version may be a job slice or a run with
    C(--limit) on a cluster whose release serves the whole fleet), the record is first seeded from the cluster -
    every Node whose C(nvidia.com/device-plugin.config) label names a profile this collection makes (C(default),
    C(mig-<strategy>), C(mps-<N>), C(ts-<N>)) keeps that profile.
  - Writes carry the C(resourceVersion) that was read; a 409 Conflict (another slice wrote in between) is retried on
    a fresh read.
  - Check mode sends the write as a server-side dry run and returns the merged profiles.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  name:
    description: Name of the ConfigMap.
    type: str
    default: gpuops-nvidia-profiles
  namespace:
    description: Namespace of the ConfigMap.
    type: str
    required: true
  nodes:
    description: This run's nodes - node name to the name of the profile it selects (filter
      gpuops.nvidia.device_plugin_profiles, key C(nodes)).
    type: dict
    required: true
  profiles:
    description: This run's profiles (filter gpuops.nvidia.device_plugin_profiles, key C(profiles)); each has a
      C(name), the value of the node label C(nvidia.com/device-plugin.config) that selects it.
    type: list
    elements: dict
    required: true
  prune:
    description:
      - Drop the entries of nodes not in O(nodes). Only for a run over the whole fleet - never in a job slice or a
        run with C(--limit), where it would drop the other nodes' profiles.
    type: bool
    default: false
  create_namespace:
    description: Create O(namespace) when it does not exist.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Server-side dry run of the write.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - RBAC - C(get), C(create) and C(update) on C(configmaps) in O(namespace); C(list) on C(nodes) (seeding); C(get),
    C(create) on C(namespaces) with O(create_namespace=true).
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Record this run's nodes; get the profiles of the whole fleet
  gpuops.nvidia.cluster_profiles:
    namespace: nvidia-device-plugin
    nodes: "{{ plan.nodes }}"
    profiles: "{{ plan.profiles }}"
  vars:
    plan: "{{ hostvars | gpuops.nvidia.device_plugin_profiles(ansible_play_hosts_all) }}"
  delegate_to: localhost
  run_once: true
  register: fleet

- name: The device plugin with every node's profile
  gpuops.nvidia.device_plugin:
    chart_version: 0.20.0
    profiles: "{{ fleet.profiles }}"
    default_profile: default
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
profiles:
  description: Every profile some node of the record declares (and C(default)), sorted by name.
  returned: success
  type: list
  elements: dict
  sample: [{"name": "default"}, {"name": "mig-mixed", "mig_strategy": "mixed"}]
nodes:
  description: The record's nodes after the task - node name to profile name.
  returned: success
  type: dict
changes:
  description: added_nodes, changed_nodes, removed_nodes, added_profiles, changed_profiles, removed_profiles, and
    seeded_nodes (recorded from their labels because there was no record yet).
  returned: success
  type: dict
"""

import re

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _profile_record as record
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Done, run_module

_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _key_errors(name):
    errors = _kube_names.label_value_errors("nvidia.com/device-plugin.config", name)
    if not _CONFIGMAP_KEY.match(name):
        errors.append("profile name %r is not a ConfigMap key (letters, digits, '-', '_', '.')" % name)
    return errors


def _node_errors(nodes):
    """Errors in O(nodes): every key a Kubernetes node name, every value a profile name (a string)."""
    errors = []
    for node, name in sorted(nodes.items(), key=lambda item: repr(item[0])):
        shown = repr(node)[:80]
        if not isinstance(node, str) or _kube_names.dns_subdomain_errors(node):
            errors.append("nodes: %s is not a Kubernetes node name (a lowercase RFC 1123 subdomain of 1 to 253 "
                          "characters)" % shown)
        if not isinstance(name, str):
            errors.append("nodes[%s]: the profile must be a profile name (a string), got a %s" % (
                shown, type(name).__name__))
    return errors


class ClusterProfiles(KubeRun):
    """validate -> read the record (the namespace ensured first; one that would be created in check mode: the plan
    from an empty record is the answer) -> plan (_profile_record's merge) -> apply: one write at the resourceVersion
    read (in check mode the API server's dry run). A conflict (another slice wrote in between) reads, merges and
    writes again, the record store's tries, pause and last word."""

    argument_spec = dict(
        name=dict(type="str", default="gpuops-nvidia-profiles"),
        namespace=dict(type="str", required=True),
        nodes=dict(type="dict", required=True),
        profiles=dict(type="list", elements="dict", required=True),
        prune=dict(type="bool", default=False),
        create_namespace=dict(type="bool", default=True),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    errors = (record.RecordError, KubeError)
    apply_in_check_mode = True          # the write is the API server's dry run
    conflict_tries = record.CONFLICT_RETRIES
    store = None

    def validate(self):
        p = self.params
        errors = (_kube_names.dns_subdomain_errors(p["name"], "name")
                  + _kube_names.dns_label_errors(p["namespace"], "namespace"))
        node_errors = _node_errors(p["nodes"] or {})
        errors += node_errors
        self.nodes = {} if node_errors else dict(p["nodes"] or {})
        errors += record.validate(self.nodes, p["profiles"], _key_errors)
        return errors

    def forget(self, conflict):
        self.store.pause(conflict)

    def exhausted(self, conflict):
        return self.store.gave_up(conflict)

    def read(self):
        p = self.params
        if self.store is None:
            self.store = record.RecordStore(self.kube, p["namespace"], p["name"])
            namespace = _kube.ensure_namespace(self.kube, p["namespace"], dry_run=self.module.check_mode,
                                               create=p["create_namespace"])
            if namespace == "would be created":
                # nothing inside a namespace that does not exist can be dry-run: plan from an empty record
                before = {"nodes": {}, "profiles": {}}
                after, changes = record.merge(before, self.nodes, p["profiles"], p["prune"])
                changes["seeded_nodes"] = []       # no namespace, no release in it: nothing to keep
                self.report(before, after, changes, True)
                raise Done(changed=True)
        return self.store.read()

    def plan(self, current):
        p = self.params
        before, after, changes, changed = self.store.plan(current, self.nodes, p["profiles"], p["prune"])
        self.report(before, after, changes, changed)
        return after if changed else None

    def apply(self, current, changes):
        self.store.write(current, changes, dry_run=self.module.check_mode)

    def report(self, before, after, changes, changed):
        self.result.update(profiles=record.profile_list(after), nodes=after["nodes"], changes=changes)
        self.result.pop("diff", None)           # (a try that met a conflict planned another record)
        if self.module._diff and changed:
            self.result["diff"] = record.diff_view(before, after, changes)


def main():
    run_module(ClusterProfiles)


if __name__ == "__main__":
    main()
