# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters over what a role declares it owns on a node (its ``declared`` entry point).

Documentation of each filter lives next to this file (declared_files.yml, node_plan_checks.yml) so that
``ansible-doc -t filter gpuops.nvidia.<name>`` renders it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean

# The planners are imported where a filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process, and compiles the
# collection's Python from source each time (issue 36; in git history:
# docs/readings/fleet-compare-issue36-2cores.md at dd40865).


def declared_files(entries, contents):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_plan import FILE_STATES, normal_mode, sha1
    if not isinstance(entries, list):
        raise AnsibleFilterError("declared_files: the entries must be a list, got %s" % type(entries).__name__)
    if not isinstance(contents, dict):
        raise AnsibleFilterError("declared_files: contents must be a dict of texts, got %s" % type(contents).__name__)
    out = []
    for entry in _expand_sources(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not entry["path"].startswith("/"):
            raise AnsibleFilterError("declared_files: every entry needs an absolute path, got %r" % (entry,))
        path, state = entry["path"], entry.get("state", "file")
        if not isinstance(state, str) or state not in FILE_STATES:
            raise AnsibleFilterError("declared_files: %s: state %r is not one of %s" % (path, state, ", ".join(FILE_STATES)))
        if state != "absent" and normal_mode(entry.get("mode")) in (None, False):
            raise AnsibleFilterError("declared_files: %s: mode must be octal like 0644, got %r" % (path, entry.get("mode")))
        item = dict(entry, state=state, diff=bool(entry.get("diff", True)))
        if state == "file" and "src" in entry:
            # a file copied as it is from the controller (a package file): its bytes' sha1, no diff
            src = entry["src"]
            if "content" in entry or not isinstance(src, str) or not os.path.isabs(src) or not os.path.isfile(src):
                raise AnsibleFilterError("declared_files: %s: src must be the absolute path of a file on the controller "
                                         "(and no content with it), got %r" % (path, src))
            digest = hashlib.sha1()
            with open(src, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            item.update(checksum=digest.hexdigest(), diff=False)
        elif state == "file":
            key = entry.get("content")
            if not isinstance(key, str) or key not in contents or not isinstance(contents[key], str):
                raise AnsibleFilterError("declared_files: %s: content %r is not one of the texts given (%s)"
                                         % (path, key, ", ".join(sorted(contents)) or "none"))
            item["checksum"] = sha1(to_text(contents[key], errors="surrogate_or_strict"))
        elif "content" in entry:
            raise AnsibleFilterError("declared_files: %s: a %s has no content" % (path, state))
        out.append(item)
    return out


def _expand_sources(entries):
    """A directory entry with ``sources`` (controller files copied as they are) -> the directory, then one file entry
    per source at <directory>/<its name>, with ``src`` and the entry's ``file_mode``."""
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or "sources" not in entry:
            out.append(entry)
            continue
        sources = entry["sources"]
        if entry.get("state") != "directory" or not isinstance(sources, list):
            raise AnsibleFilterError("declared_files: %s: sources (a list of controller files) belong to a "
                                     "directory entry, got %r" % (entry.get("path"), entry))
        out.append(dict((k, v) for k, v in entry.items() if k not in ("sources", "file_mode")))
        names = set()
        for src in sources:
            name = os.path.basename(str(src))
            if name in names:
                raise AnsibleFilterError("declared_files: %s: two sources named %s" % (entry.get("path"), name))
            names.add(name)
            out.append({"path": "%s/%s" % (str(entry["path"]).rstrip("/"), name), "src": src,
                        "mode": entry.get("file_mode", "0644")})
    return out


def node_plan_checks(declarations):
    """[[step, declaration], ...] -> what gpuops.nvidia.gpu_node_plan's files, units and packages options take:
    every entry of each declaration's ``inputs`` and ``files`` (path, state, mode, checksum), ``units`` (name) and
    ``packages`` (manager, names, version, hold), each with its step. A declaration that is None or empty adds
    nothing."""
    if not isinstance(declarations, list):
        raise AnsibleFilterError("node_plan_checks: a list of [step, declaration] pairs, got %s"
                                 % type(declarations).__name__)
    files, units, packages = [], [], []
    for pair in declarations:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str) \
                or not isinstance(pair[1], (dict, type(None))):
            raise AnsibleFilterError("node_plan_checks: each item must be [step name, declaration dict or null], "
                                     "got %r" % (pair,))
        step, declaration = pair[0], pair[1] or {}
        entries, declared_units = [], declaration.get("units") or []
        for key in ("inputs", "files"):
            value = declaration.get(key) or []
            if not isinstance(value, list):
                raise AnsibleFilterError("node_plan_checks: %s: %s must be a list, got %r" % (step, key, value))
            entries.extend(value)
        if not isinstance(declared_units, list):
            raise AnsibleFilterError("node_plan_checks: %s: units must be a list, got %r" % (step, declared_units))
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                    or not isinstance(entry.get("state"), str):
                raise AnsibleFilterError("node_plan_checks: %s: a file needs a path and a state (declared_files' "
                                         "output), got %r" % (step, entry))
            check = {"step": step, "path": entry["path"], "state": entry["state"]}
            check.update((key, entry[key]) for key in ("mode", "checksum") if entry.get(key) is not None)
            files.append(check)
        for unit in declared_units:
            if not isinstance(unit, dict) or not isinstance(unit.get("name"), str):
                raise AnsibleFilterError("node_plan_checks: %s: a unit needs a name, got %r" % (step, unit))
            units.append({"step": step, "name": unit["name"]})
        declared_packages = declaration.get("packages") or []
        if not isinstance(declared_packages, list):
            raise AnsibleFilterError("node_plan_checks: %s: packages must be a list, got %r" % (step, declared_packages))
        for package in declared_packages:
            if not isinstance(package, dict) or not all(isinstance(package.get(k), str) for k in ("manager", "version")) \
                    or not isinstance(package.get("names"), list):
                raise AnsibleFilterError("node_plan_checks: %s: a set of packages needs a manager, names (a list) "
                                         "and a version, got %r" % (step, package))
            packages.append({"step": step, "manager": package["manager"], "names": list(package["names"]),
                             "version": package["version"], "hold": boolean(package.get("hold", False), strict=False)})
    return {"files": files, "units": units, "packages": packages}


class FilterModule(object):
    def filters(self):
        return {"declared_files": declared_files, "node_plan_checks": node_plan_checks}
