# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters over what a role declares it owns on a node (its ``declared`` entry point).

Documentation of each filter lives next to this file (declared_files.yml, node_plan_checks.yml) so that
``ansible-doc -t filter gpuops.nvidia.<name>`` renders it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpuops.nvidia.plugins.module_utils._node_plan import FILE_STATES, normal_mode, sha1


def declared_files(entries, contents):
    if not isinstance(entries, list):
        raise AnsibleFilterError("declared_files: the entries must be a list, got %s" % type(entries).__name__)
    if not isinstance(contents, dict):
        raise AnsibleFilterError("declared_files: contents must be a dict of texts, got %s" % type(contents).__name__)
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not entry["path"].startswith("/"):
            raise AnsibleFilterError("declared_files: every entry needs an absolute path, got %r" % (entry,))
        path, state = entry["path"], entry.get("state", "file")
        if state not in FILE_STATES:
            raise AnsibleFilterError("declared_files: %s: state %r is not one of %s" % (path, state, ", ".join(FILE_STATES)))
        if state != "absent" and normal_mode(entry.get("mode")) in (None, False):
            raise AnsibleFilterError("declared_files: %s: mode must be octal like 0644, got %r" % (path, entry.get("mode")))
        item = dict(entry, state=state, diff=bool(entry.get("diff", True)))
        if state == "file":
            key = entry.get("content")
            if key not in contents:
                raise AnsibleFilterError("declared_files: %s: content %r is not one of the contents given (%s)"
                                         % (path, key, ", ".join(sorted(contents)) or "none"))
            item["checksum"] = sha1(to_text(contents[key], errors="surrogate_or_strict"))
        elif "content" in entry:
            raise AnsibleFilterError("declared_files: %s: a %s has no content" % (path, state))
        out.append(item)
    return out


def node_plan_checks(declarations):
    """[[step, declaration], ...] -> what gpuops.nvidia.gpu_node_plan's files and units options take: every
    entry of each declaration's ``inputs`` and ``files`` (path, state, mode, checksum) and ``units`` (name),
    each with its step. A declaration that is None or empty adds nothing."""
    files, units = [], []
    for step, declaration in declarations:
        declaration = declaration or {}
        for entry in list(declaration.get("inputs") or []) + list(declaration.get("files") or []):
            check = {"step": step, "path": entry["path"], "state": entry["state"]}
            check.update((key, entry[key]) for key in ("mode", "checksum") if entry.get(key) is not None)
            files.append(check)
        units.extend({"step": step, "name": unit["name"]} for unit in declaration.get("units") or [])
    return {"files": files, "units": units}


class FilterModule(object):
    def filters(self):
        return {"declared_files": declared_files, "node_plan_checks": node_plan_checks}
