#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: declared_files
short_description: Converge the directories and files a role declares, in one module run
version_added: 0.3.0
description:
  - Takes a role's declared directories, files and absent paths (the entries of the filter
    P(gpuops.nvidia.declared_files#filter), with the texts they name) and makes the node match them in one module run,
    where one C(ansible.builtin.file) run per directory and a C(stat) and a C(copy) run per file did the same work.
  - What counts as different is what gpuops.nvidia.gpu_node_plan compares (the same code); the kind of path, the
    permission bits and, for a file, the sha1 of its bytes. Owner and group are left as they are (the roles declare
    none).
  - A file is written to a temporary file in its directory and moved over the old one atomically; an existing file
    keeps its owner, and gets the declared mode. A symlink where a file is declared is replaced by the file (as
    C(ansible.builtin.copy) does without C(follow)). Missing parent directories are created (under the umask).
  - Every entry is read and checked before anything is written. A relative path, a mode that is not octal, a text
    that is not given, a directory where a file is declared (or the reverse) or a path that cannot be read fails the
    run with nothing changed.
  - In check mode nothing is written; RV(changed_paths) lists what would change.
  - With diff mode, one diff per changed path; an entry with O(files[].diff=false) shows none (the collection's own
    Python files would bury the plan).
options:
  files:
    description:
      - The entries, converged in this order (a directory before the files in it).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: The absolute path on the node.
        type: str
        required: true
      state:
        description:
          - V(file), V(directory), or V(absent) (a file, link or directory there is removed; a directory with all it
            holds).
        type: str
        choices: [file, directory, absent]
        default: file
      mode:
        description:
          - The permission bits, as a quoted octal string such as V('0644'). Required for V(file) and V(directory).
        type: str
      content:
        description:
          - For V(file), the key in O(contents) of the file's text.
        type: str
      force:
        description:
          - For V(file), V(false) writes the file only where nothing is at its path; whatever is there is then left
            as it is, its content and its mode (as C(ansible.builtin.copy)'s C(force=false)). A seed for a config that
            other tools edit afterwards.
        type: bool
        default: true
      diff:
        description: Whether diff mode shows this entry's change.
        type: bool
        default: true
      checksum:
        description:
          - The sha1 of the text that the declaration computed (the filter's C(checksum)). When given, the text in
            O(contents) must have it, so that what is written is what the node plan compared; otherwise the run fails
            with nothing changed.
        type: str
      src:
        description:
          - Not written by this module. Copy an entry that has C(src) (a package file, copied as it is from the
            controller) with C(ansible.builtin.copy), which transfers it. Given here it fails the run with nothing
            changed.
        type: str
  contents:
    description:
      - The texts of the files, by the key their entries name in O(files[].content). Keys no entry names are ignored.
    type: dict
    default: {}
  backup:
    description:
      - Keep a timestamped copy of a file before it is replaced or removed (as C(ansible.builtin.copy)'s C(backup)).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: One diff per changed entry; none for an entry with O(files[].diff=false).
  idempotent:
    support: full
notes:
  - The texts travel in the module's arguments; the result's C(invocation) names each one by its length and sha1
    instead of repeating it.
seealso:
  - module: gpuops.nvidia.gpu_node_plan
  - name: ansible.builtin.copy
    description: The module whose C(stat) and C(copy) runs per file this one replaces in the roles.
    link: https://docs.ansible.com/ansible/latest/collections/ansible/builtin/copy_module.html
  - name: ansible.builtin.file
    description: The module whose run per directory this one replaces in the roles.
    link: https://docs.ansible.com/ansible/latest/collections/ansible/builtin/file_module.html
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The boot-time unit, its directory and its script, in one module run
  gpuops.nvidia.declared_files:
    files:
      - {path: /usr/local/lib/gpuops, state: directory, mode: "0755"}
      - {path: /usr/local/lib/gpuops/apply.py, content: script, mode: "0755"}
      - {path: /usr/local/lib/gpuops/bundle.json, content: bundle, mode: "0644", diff: false}
      - {path: /etc/systemd/system/gpuops-mig.service, content: unit, mode: "0644"}
    contents:
      script: "{{ lookup('ansible.builtin.file', 'apply.py') }}"
      bundle: "{{ bundle | to_json }}"
      unit: "{{ lookup('ansible.builtin.template', 'gpuops-mig.service.j2') }}"
  register: written
  notify: Reload systemd

- name: A role's declaration as it is (the declared_files filter's entries and the texts they name)
  gpuops.nvidia.declared_files:
    files: "{{ __mig_declared.files | rejectattr('state', 'equalto', 'absent') | list }}"
    contents: "{{ __mig_contents }}"
"""

RETURN = r"""
changed_paths:
  description: The paths created, rewritten, given their mode or removed (in check mode, that would be), in order.
  returned: always
  type: list
  elements: str
  sample: [/usr/local/lib/gpuops, /etc/systemd/system/gpuops-mig.service]
backup_files:
  description: The backup made of each replaced or removed file, by its path (with O(backup)).
  returned: always
  type: dict
  sample: {/etc/apt/sources.list.d/cuda.list: /etc/apt/sources.list.d/cuda.list.12345.2026-11-29@20:01:02~}
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()

import os
import shutil
import tempfile

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Failure, ModuleRun, invalid_input, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_plan

# Like ansible.builtin.copy's diff (ansible-core's MAX_FILE_SIZE_FOR_DIFF): a longer old text is not shown.
MAX_DIFF_BYTES = 104448

ARGUMENT_SPEC = dict(
    files=dict(type="list", elements="dict", required=True, options=dict(
        path=dict(type="str", required=True),
        state=dict(type="str", choices=list(_node_plan.FILE_STATES), default="file"),
        mode=dict(type="str"),
        content=dict(type="str"),
        force=dict(type="bool", default=True),
        diff=dict(type="bool", default=True),
        checksum=dict(type="str"),
        src=dict(type="str"),
    )),
    contents=dict(type="dict", default={}),
    backup=dict(type="bool", default=False),
)


def entry_problems(entries, contents):
    """What is wrong with the entries, each naming its path and what is valid (empty: valid). Pure."""
    problems, seen = [], set()
    for index, entry in enumerate(entries):
        path, state = entry["path"], entry["state"]
        where = "files[%d] (%s)" % (index, path)
        if "\x00" in path or not path.startswith("/") or os.path.normpath(path) != path.rstrip("/") \
                or path.rstrip("/") == "":
            problems.append("%s: the path must be absolute and normal (no '..', '.' or '//'), like /etc/gpuops/x.conf"
                            % where)
            continue
        if path in seen:
            problems.append("%s: declared twice" % where)
        seen.add(path)
        if entry.get("src") is not None:
            problems.append("%s: src %s is a file of the controller: copy it with ansible.builtin.copy, this module "
                            "writes texts (content)" % (where, entry["src"]))
            continue
        if state != "absent" and _node_plan.normal_mode(entry.get("mode")) in (None, False):
            problems.append("%s: mode must be a quoted octal string like '0644' for a %s, got %r"
                            % (where, state, entry.get("mode")))
        if state == "file":
            key = entry.get("content")
            if key is None or key not in contents:
                names = sorted(str(name) for name in contents)
                problems.append("%s: content %r is not one of the texts in contents (%s)" % (
                    where, key, ", ".join(names[:10] + (["..."] if len(names) > 10 else [])) or "none given"))
            elif not isinstance(contents[key], str):
                problems.append("%s: the text contents[%s] must be a string, got %s"
                                % (where, key, type(contents[key]).__name__))
            elif entry.get("checksum") and entry["checksum"] != _node_plan.sha1(contents[key]):
                problems.append("%s: the text contents[%s] does not have the declared checksum %s (the node plan "
                                "compared another text)" % (where, key, entry["checksum"]))
        elif entry.get("content") is not None:
            problems.append("%s: a %s has no content" % (where, state))
    return problems


def action(where, entry, seen):
    """What to do at one entry's path, given what is there (_node_plan.observe): None (as declared), "create",
    "write" (the content, and the mode), "mode" (only the permission bits) or "remove"; or raises Failure where the
    path holds another kind of thing that this module must not replace, or cannot be made (nothing has been written
    yet). ``where`` names the entry in a message. The comparison is the node plan's own (_node_plan.file_reason)."""
    if entry["state"] == "file" and not entry["force"] and seen["state"] != "absent":
        return None
    want = dict(entry, mode=_node_plan.normal_mode(entry.get("mode")))
    if _node_plan.file_reason(want, seen) is None:
        return None
    state, there = entry["state"], seen["state"]
    if there == "unreadable":
        raise Failure("%s cannot be read (%s); nothing changed" % (where, seen.get("error")), changed=False)
    if state == "absent":
        return "remove"
    if there == "absent":
        parent = os.path.dirname(entry["path"].rstrip("/"))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise Failure("%s cannot be made: %s is not a directory; nothing changed" % (where, parent), changed=False)
        return "create"
    if state == "directory":
        if there != "directory":
            raise Failure("%s is a %s, declared a directory: remove it or declare another path; nothing changed"
                          % (where, there), changed=False)
        return "mode"
    if there == "link":
        return "write"
    if there != "file":
        raise Failure("%s is a %s, declared a file: remove it or declare another path; nothing changed"
                      % (where, there), changed=False)
    return "write" if seen["checksum"] != entry["checksum"] else "mode"


def _old_text(path):
    """The text of the file at ``path`` for a diff, or a line saying why it is not shown."""
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            return ""
        if os.path.getsize(path) > MAX_DIFF_BYTES:
            return "(the old file is larger than %d bytes: not shown)\n" % MAX_DIFF_BYTES
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except UnicodeDecodeError:
        return "(the old file is not UTF-8 text: not shown)\n"
    except (IOError, OSError) as exc:
        return "(the old file cannot be read: %s)\n" % exc


def entry_diff(entry, seen, what):
    """One entry's diff (ansible's before/after with headers)."""
    path, mode = entry["path"], _node_plan.normal_mode(entry.get("mode"))
    if entry["state"] == "file" and what in ("create", "write"):
        before = _old_text(path) if what == "write" else ""
        head_before = path if what == "create" or seen["mode"] == mode else "%s (mode %s)" % (path, seen["mode"])
        head_after = path if what == "create" or seen["mode"] == mode else "%s (mode %s)" % (path, mode)
        return dict(before_header=head_before, after_header=head_after, before=before, after=entry["text"])
    before = dict(path=path, state=seen["state"])
    after = dict(path=path, state=entry["state"])
    if seen["mode"] is not None and seen["state"] != "absent":
        before["mode"] = seen["mode"]
    if mode is not None:
        after["mode"] = mode
    return dict(before_header=path, after_header=path, before=before, after=after)


class DeclaredFiles(ModuleRun):
    """validate (every entry) -> read (what is at each path) -> plan (per entry: the node plan's comparison) ->
    apply (in order: directories made, files written atomically, modes set, paths removed) -> after (the
    invocation without the texts)."""

    argument_spec = ARGUMENT_SPEC

    def validate(self):
        self.entries = [dict(e, path=e["path"]) for e in self.params["files"]]
        return entry_problems(self.entries, self.params["contents"])

    def read(self):
        for entry in self.entries:
            if entry["state"] == "file":
                entry["text"] = self.params["contents"][entry["content"]]
                entry["checksum"] = _node_plan.sha1(entry["text"])
        return [_node_plan.observe(entry["path"]) for entry in self.entries]

    def plan(self, current):
        changes, diffs = [], []
        for index, (entry, seen) in enumerate(zip(self.entries, current)):
            what = action("files[%d] (%s)" % (index, entry["path"]), entry, seen)
            if what is None:
                continue
            changes.append((entry, seen, what))
            if entry["diff"]:
                diffs.append(entry_diff(entry, seen, what))
        self.result.update(changed_paths=[entry["path"] for entry, _seen, _what in changes], backup_files={})
        if diffs and self.module._diff:
            self.result["diff"] = diffs
        return changes

    def apply(self, current, changes):
        done = []
        for entry, seen, what in changes:
            try:
                self._apply_one(entry, seen, what)
            except (IOError, OSError) as exc:
                raise Failure("%s: %s (%s); written before it: %s" % (entry["path"], exc, what, ", ".join(done) or
                                                                      "nothing"),
                              changed=bool(done), changed_paths=done)
            done.append(entry["path"])

    def _apply_one(self, entry, seen, what):
        path, module = entry["path"], self.module
        mode = None if entry["state"] == "absent" else int(_node_plan.normal_mode(entry["mode"]), 8)
        if what == "remove":
            if seen["state"] == "file" and self.params["backup"]:
                self.result["backup_files"][path] = module.backup_local(path)
            if seen["state"] == "directory":
                shutil.rmtree(path)
            else:
                os.unlink(path)
            return
        if what == "create":
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                os.makedirs(parent)
            if entry["state"] == "directory":
                os.mkdir(path)
        if entry["state"] == "file" and what in ("create", "write"):
            if what == "write" and seen["state"] == "file" and self.params["backup"]:
                self.result["backup_files"][path] = module.backup_local(path)
            if seen["state"] == "link":
                os.unlink(path)     # the link itself is replaced, never the file it points to
            fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(entry["text"].encode("utf-8"))
                module.atomic_move(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        module.set_mode_if_different(path, mode, False)

    def after(self, current, changes):
        self.result.setdefault("changed_paths", [])
        self.result.setdefault("backup_files", {})
        self.result["invocation"] = self.invocation()

    def failing(self, exc):
        self.result["invocation"] = self.invocation()

    def refuse_input(self, errors):
        # (the base's refusal, with the invocation as this module shows it: the texts by length and sha1)
        self.fail(invalid_input(errors), errors=list(errors), changed=False, invocation=self.invocation())

    def invocation(self):
        """The module's arguments as the result shows them (-vvv, the json callback): each text by its length and
        sha1, not repeated (the MIG bundle alone is hundreds of kilobytes)."""
        contents = dict((key, "(%d characters, sha1 %s)" % (len(text), _node_plan.sha1(text)) if isinstance(text, str)
                         else text) for key, text in self.params["contents"].items())
        return dict(module_args=dict(self.params, contents=contents))


def main():
    run_module(DeclaredFiles)


if __name__ == "__main__":
    main()
