# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_node role's one read and one plan per node (PRIVATE to gpuops.nvidia).

gpu_node used to read the GPUs and then let each role find out for itself, task by task and module by module,
that it had nothing to do (43 tasks and 23 module runs on an idempotent re-run of one MIG node). The node plan
answers every one of those questions in one module run: the GPUs as they are (gpu_info's facts), MIG mode and
layout as mig_mode and mig_layout would plan them in check mode (the same functions, _mig_apply), compute and
persistence mode as compute_mode would (_compute_mode), every file, directory and systemd unit the roles would
write or enable (compared with what the roles declare), and containerd's runtime (containerd_runtime's own
verified-state stamp, _containerd_stamp.Stamp). gpu_node then includes a role only when its step has work.

The comparisons below are conservative: anything they cannot prove unchanged (a symlink where a file is
declared, an unreadable path, a unit systemd calls anything but "enabled") counts as work, so the role runs and
decides as it always did. A wrong "work" costs time; a wrong "no work" would hide a change, and cannot happen
unless the roles' own modules would see the same state as unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import stat

FILE_STATES = ("file", "directory", "absent")


def mig_managed(gpus, manage):
    """Whether gpu_node manages MIG on this node: some GPU supports MIG, and MIG is declared (``declared``), or
    it must be disabled where it is on (``disable``: on, or pending on, some MIG-capable GPU)."""
    capable = [g for g in gpus if g.get("mig_supported")]
    if not capable:
        return False
    if manage == "declared":
        return True
    return any(g.get("mig_mode_current") == "Enabled" or g.get("mig_mode_pending") == "Enabled" for g in capable)


def mig_disruptive(mode_plan, layout_plan):
    """Reasons a MIG step changes GPUs (what the node is cordoned for): a mode to set or still pending, a layout
    to change (the GPU indices in each)."""
    reasons = []
    mode = [g["index"] for g in mode_plan["gpus"] if g["changed"]]
    if mode:
        reasons.append("MIG mode changes on GPU(s) %s" % ", ".join(str(i) for i in mode))
    if mode_plan["pending"]:
        reasons.append("MIG mode still pending on GPU(s) %s" % ", ".join(str(i) for i in mode_plan["pending"]))
    layout = [g["index"] for g in layout_plan["gpus"] if g["changed"]]
    if layout:
        reasons.append("MIG layout changes on GPU(s) %s" % ", ".join(str(i) for i in layout))
    return reasons


def compute_mode_reasons(todo):
    """Reasons compute_mode would change a GPU (plan_settings' result)."""
    out = []
    for c in todo["changes"]:
        what = []
        if c["compute_mode"]:
            what.append("compute mode %s -> %s" % tuple(c["compute_mode"]))
        if c["persistence_mode"]:
            what.append("persistence mode %s -> %s" % tuple(c["persistence_mode"]))
        out.append("GPU %d: %s" % (c["index"], ", ".join(what)))
    return out


def sha1(text):
    """Ansible's checksum (sha1 of the UTF-8 bytes) of a text a step would write."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def observe(path):
    """What is at ``path`` now: {state: absent | file | directory | link | other | unreadable, mode: '0644',
    checksum: sha1 of a regular file's bytes (Ansible's own checksum)}. Never follows a symlink."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if not os.path.lexists(path) and exc.__class__.__name__ in ("FileNotFoundError", "NotADirectoryError"):
            return {"state": "absent", "mode": None, "checksum": None}
        return {"state": "unreadable", "mode": None, "checksum": None, "error": str(exc)}
    mode = "%04o" % stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return {"state": "directory", "mode": mode, "checksum": None}
    if stat.S_ISLNK(st.st_mode):
        return {"state": "link", "mode": mode, "checksum": None}
    if not stat.S_ISREG(st.st_mode):
        return {"state": "other", "mode": mode, "checksum": None}
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except (IOError, OSError) as exc:
        return {"state": "unreadable", "mode": mode, "checksum": None, "error": str(exc)}
    return {"state": "file", "mode": mode, "checksum": digest.hexdigest()}


def normal_mode(mode):
    """'644', '0644', 0o644 -> '0644' (None stays None); anything else (symbolic modes) -> None: not compared
    here, so it counts as work (see file_reason)."""
    if mode is None:
        return None
    text = str(mode).strip()
    if text.isdigit() and len(text) <= 4 and all(c in "01234567" for c in text):
        return "%04o" % int(text, 8)
    return False


def file_reason(expect, seen):
    """Why the declared file, directory or absence at expect['path'] is not what ``seen`` shows, or None.

    Exactly what ansible.builtin.copy/template (state file), file state=directory and file state=absent would
    find to do: content (sha1) and permission bits; owner and group are not declared by the roles, so not
    compared. A declaration without checksum is compared by state and mode only (the caller compares the
    content)."""
    path, state = expect["path"], expect.get("state") or "file"
    if state not in FILE_STATES:
        return "%s: unknown declared state %r" % (path, state)
    if seen["state"] == "unreadable":
        return "%s cannot be read (%s)" % (path, seen.get("error"))
    if state == "absent":
        return None if seen["state"] == "absent" else "%s exists (%s) and must not" % (path, seen["state"])
    if seen["state"] != state:
        return "%s is %s, declared %s" % (path, seen["state"], state)
    want_mode = normal_mode(expect.get("mode"))
    if want_mode is False:
        return "%s: mode %r is not compared here" % (path, expect.get("mode"))
    if want_mode is not None and want_mode != seen["mode"]:
        return "%s has mode %s, declared %s" % (path, seen["mode"], want_mode)
    if state == "file" and expect.get("checksum") and expect["checksum"] != seen["checksum"]:
        return "%s differs from what is declared" % path
    return None


def unit_reason(name, rc, out):
    """Why systemd does not report the unit enabled, or None. Only plain "enabled" counts (systemd_service would
    also accept a few other states: those count as work, and the role decides)."""
    if rc == 0 and out.strip() == "enabled":
        return None
    return "unit %s is %s" % (name, out.strip() or "not enabled (systemctl is-enabled exit %s)" % rc)
