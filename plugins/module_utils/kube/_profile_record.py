# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The device plugin profiles of a whole fleet, kept in the cluster so that every run sees them (PRIVATE).

A run of site.yml knows the declarations (sharing strategy -> device plugin profile) of its own nodes only: under
AWX job slicing each slice's inventory holds only that slice's hosts (AWX builds it with
``Inventory.get_script_data(slice_number, slice_count)``: hosts sorted by name, every slice_count-th one), and a run
with ``--limit`` plays only some hosts. A device plugin release built from one run's nodes would drop the profiles
that other slices' nodes select, and the next slice would put them back: the config-manager of a node labelled with
a profile that is missing fails ("specified config ... does not exist"), so the plugin on that node stops.

So the declarations live in a ConfigMap, one entry per node (node -> profile name) and one per profile (name ->
profile), and each run merges its own nodes' entries into it (replacing theirs, keeping everyone else's). The
release carries every profile that some node of the record declares: the same set whichever slice computes it,
once every slice has recorded its nodes, and never without a profile that another slice's node still declares.
An entry leaves the record only when its node declares something else, or when a run prunes (``prune``: a run
over the whole fleet drops the nodes it does not play).

The first run that finds no record (the first after an upgrade to this version, which may be a job slice or a run
with --limit on a cluster whose release already serves the whole fleet) seeds it from the cluster: every Node whose
``nvidia.com/device-plugin.config`` label names a profile this collection makes (``default``, ``mig-<strategy>``,
``mps-<N>``, ``ts-<N>``) is recorded with that profile, so its config stays in the release.

Pure: ``merge`` plans; ``RecordStore`` reads and writes through _kube.Kube with the resourceVersion precondition.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import random
import re
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import read_or_none
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import retry_on_conflict

DEFAULT_PROFILE = "default"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
# The names plugins/filter/device_plugin_profiles.py gives (profile_for); tests hold the two to each other.
_PROFILE_NAME = re.compile(
    r"^(?:(default)|mig-(single|mixed)|(mps|ts)-([1-9][0-9]*))(?:-(volume-mounts|cdi-annotations|cdi-cri))?$")
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuops.nvidia"}
CONFLICT_RETRIES = 50


class RecordError(Exception):
    """Input that cannot be recorded, or a record in the cluster that cannot be read (already worded)."""


def validate(nodes, profiles, key_errors):
    """Errors in this run's declarations: every node names a profile that ``profiles`` defines, every profile has a
    name that can be a ConfigMap key and a label value (``key_errors(name)`` returns the errors for one name)."""
    errors = []
    names = {}
    for i, profile in enumerate(profiles):
        name = (profile or {}).get("name")
        if not name or not isinstance(name, str):
            errors.append("profiles[%d] has no name" % i)
            continue
        errors.extend(key_errors(name))
        if name in names and names[name] != profile:
            errors.append("profile %r is given twice with different contents" % name)
        names[name] = profile
    for node, name in sorted(nodes.items()):
        if not node:
            errors.append("nodes: a node with an empty name")
        if name not in names:
            errors.append("nodes: node %s selects profile %r, which profiles does not define (defined: %s)"
                          % (node, name[:80], ", ".join(sorted(names)) or "none"))
    return errors


def merge(record, nodes, profiles, prune=False):
    """The record after this run: ``record`` is {"nodes": {node: name}, "profiles": {name: profile}} (empty dicts
    when there is none), ``nodes``/``profiles`` this run's declarations. Returns (new record, changes)."""
    old_nodes = dict(record.get("nodes") or {})
    old_profiles = dict(record.get("profiles") or {})
    mine = dict((p["name"], p) for p in profiles)
    new_nodes = {} if prune else dict(old_nodes)
    new_nodes.update(nodes)
    used = set(new_nodes.values()) | {DEFAULT_PROFILE}
    new_profiles = {}
    for name in sorted(used):
        if name in mine:
            new_profiles[name] = mine[name]
        elif name in old_profiles:
            new_profiles[name] = old_profiles[name]
        elif name == DEFAULT_PROFILE:
            new_profiles[name] = {"name": DEFAULT_PROFILE}
        else:
            raise RecordError("the record names profile %r for node(s) %s but holds no such profile: the record "
                              "ConfigMap was edited by hand; fix or delete it and run over the whole fleet"
                              % (name, ", ".join(sorted(n for n, v in new_nodes.items() if v == name))))
    changes = {
        "added_nodes": sorted(set(new_nodes) - set(old_nodes)),
        "changed_nodes": sorted(n for n in set(new_nodes) & set(old_nodes) if new_nodes[n] != old_nodes[n]),
        "removed_nodes": sorted(set(old_nodes) - set(new_nodes)),
        "added_profiles": sorted(set(new_profiles) - set(old_profiles)),
        "changed_profiles": sorted(n for n in set(new_profiles) & set(old_profiles)
                                   if new_profiles[n] != old_profiles[n]),
        "removed_profiles": sorted(set(old_profiles) - set(new_profiles)),
    }
    return {"nodes": new_nodes, "profiles": new_profiles}, changes


def diff_view(before, after, changes):
    """before/after of the entries that changed (a fleet's whole record would bury them)."""
    nodes = changes["added_nodes"] + changes["changed_nodes"] + changes["removed_nodes"]
    profiles = changes["added_profiles"] + changes["changed_profiles"] + changes["removed_profiles"]
    out = {}
    for side, rec in (("before", before), ("after", after)):
        out[side] = {"nodes": dict((n, rec["nodes"][n]) for n in sorted(nodes) if n in rec["nodes"]),
                     "profiles": dict((n, rec["profiles"][n]) for n in sorted(profiles) if n in rec["profiles"])}
    return out


def profile_from_name(name):
    """The profile that the device_plugin_profiles filter names ``name``, or None for a name it never makes."""
    m = _PROFILE_NAME.match(name or "")
    if not m:
        return None
    extra = {"flags": {"plugin": {"deviceListStrategy": m.group(5)}}} if m.group(5) else {}
    if m.group(1):
        return dict({"name": name}, **extra)
    if m.group(2):
        return dict({"name": name, "mig_strategy": m.group(2)}, **extra)
    replicas = int(m.group(4))
    if replicas < 2:
        return None
    return dict({"name": name, "sharing": "mps" if m.group(3) == "mps" else "time-slicing", "replicas": replicas},
                **extra)


def seed(nodes):
    """A record from the cluster's Node objects: each node labelled with a profile name this collection makes."""
    record = {"nodes": {}, "profiles": {}}
    for node in nodes:
        name = ((node.get("metadata") or {}).get("labels") or {}).get(CONFIG_LABEL)
        profile = profile_from_name(name)
        if profile:
            record["nodes"][node["metadata"]["name"]] = name
            record["profiles"][name] = profile
    return record


def profile_list(record):
    """The record's profiles as device_plugin takes them: a list sorted by name."""
    return [record["profiles"][name] for name in sorted(record["profiles"])]


def to_data(record):
    return {"nodes": json.dumps(record["nodes"], sort_keys=True, separators=(",", ":")),
            "profiles": json.dumps(record["profiles"], sort_keys=True, separators=(",", ":"))}


def from_data(data, what):
    try:
        nodes = json.loads((data or {}).get("nodes") or "{}")
        profiles = json.loads((data or {}).get("profiles") or "{}")
    except ValueError as exc:
        raise RecordError("%s holds data that is not JSON (%s): it was edited by hand; fix or delete it" % (what, exc))
    if not isinstance(nodes, dict) or not isinstance(profiles, dict):
        raise RecordError("%s: nodes and profiles must be JSON objects; fix or delete it" % what)
    return {"nodes": nodes, "profiles": profiles}


class RecordStore(object):
    """Read-merge-write of the record ConfigMap, retried on a conflict (another slice wrote in between)."""

    def __init__(self, kube, namespace, name, sleep=time.sleep):
        self.kube, self.namespace, self.name, self.sleep = kube, namespace, name, sleep
        self.what = "ConfigMap %s/%s" % (namespace, name)
        base = "/api/v1/namespaces/%s/configmaps" % namespace
        self.collection, self.path = base, "%s/%s" % (base, name)

    def read(self):
        return read_or_none(self.kube, "read " + self.what, self.path)

    def seed(self):
        """The record seeded from the Nodes labelled with a profile (see the module docstring)."""
        listed = self.kube.get("list the nodes labelled %s" % CONFIG_LABEL, "/api/v1/nodes",
                               labelSelector=CONFIG_LABEL)
        return seed(listed.get("items") or [])

    def plan(self, obj, nodes, profiles, prune=False):
        """The record as ``obj`` (the ConfigMap as read; None: there is none) holds it, merged with ``nodes`` and
        ``profiles``: (record before, record after, changes, changed); a record that did not exist is seeded from
        the cluster's labelled Nodes first (changes["seeded_nodes"])."""
        before = from_data((obj or {}).get("data"), self.what) if obj else {"nodes": {}, "profiles": {}}
        seeded = self.seed() if obj is None and not prune else {"nodes": {}, "profiles": {}}
        after, changes = merge(before if obj else seeded, nodes, profiles, prune)
        changes["seeded_nodes"] = sorted(set(seeded["nodes"]) - set(nodes))
        return before, after, changes, obj is None or to_data(after) != to_data(before)

    def write(self, obj, after, dry_run=False):
        """Store ``after``: create the ConfigMap, or replace ``obj`` at the resourceVersion it was read at (another
        writer since: the API's 409 Conflict, a KubeError)."""
        body = {"apiVersion": "v1", "kind": "ConfigMap", "data": to_data(after),
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED_BY)}}
        if obj is None:
            return self.kube.create("create " + self.what, self.collection, body, dry_run=dry_run)
        meta = obj.get("metadata") or {}
        body["metadata"].update(resourceVersion=meta.get("resourceVersion"),
                                labels=dict(meta.get("labels") or {}, **MANAGED_BY))
        if meta.get("annotations"):
            body["metadata"]["annotations"] = meta["annotations"]
        return self.kube.replace("update " + self.what, self.path, body, dry_run=dry_run)

    def pause(self, dummy_conflict):
        """Between two tries a short random wait, so that slices which wrote at once do not write at once again."""
        self.sleep(random.uniform(0.05, 0.3))

    def gave_up(self, dummy_conflict):
        """Every one of CONFLICT_RETRIES writes met another slice's."""
        raise RecordError("could not update %s: %d conflicting writes in a row" % (self.what, CONFLICT_RETRIES))

    def update(self, nodes, profiles, prune=False, dry_run=False):
        """Read, merge and store, tried again on a conflict (``pause`` between, ``gave_up`` after CONFLICT_RETRIES
        tries; cluster_profiles runs the same steps as its hooks, with the same retry). Returns (record before,
        record after, changes, changed)."""

        def attempt():
            obj = self.read()
            before, after, changes, changed = self.plan(obj, nodes, profiles, prune)
            if changed:
                self.write(obj, after, dry_run=dry_run)
            return before, after, changes, changed
        return retry_on_conflict(attempt, tries=CONFLICT_RETRIES, exhausted=self.gave_up, between=self.pause)
