# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's own IMEX service and the IMEX channels, for ComputeDomains (issue 52; PRIVATE to gpuops.nvidia).

NVIDIA's DRA driver runs the IMEX daemons of a ComputeDomain itself; a host ``nvidia-imex.service`` that runs holds
the IMEX session, and the domain's daemons never get Ready (NVIDIA/k8s-dra-driver-gpu #524). Its prerequisites
(docs/prerequisites.md, commit 213335714f1111f4743a0975c377938c981e0498) ask, where the nvidia-imex packages are
installed, ``systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service``. What this file
plans: with state ``masked``, each declared unit that is installed is stopped, disabled and masked, and what it was
(enabled, running) is kept in a record the collection owns; with state ``unmasked`` (the declaration went away),
each unit of that record is unmasked and given back what it was, and the record is removed. A unit that was masked
before the collection saw it is not recorded, so it is never unmasked by us.

The IMEX channels: the nvidia module registers the character device ``nvidia-caps-imex-channels`` with
NVreg_ImexChannelCount minors (2048 by default; 0 registers none: NVIDIA/open-gpu-kernel-modules
kernel-open/nvidia/nv-caps-imex.c), and the DRA driver's compute-domain kubelet plugin reads its major from
/proc/devices and creates ``/dev/nvidia-caps-imex-channels/channel<N>`` (major, minor N) itself
(cmd/compute-domain-kubelet-plugin/nvlib.go, getDeviceMajor and createComputeDomainChannelDevice). So a node is
ready when /proc/devices lists it, and every channel node already there is that character device; the collection
creates none (they are the plugin's).

Functions take ``run`` (``module.run_command``) and a root (node/_containerd_distribution.node_root); no other I/O
than the reads and the record file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import stat

UNITS = ("nvidia-imex.service", "nvidia-imex-ctl.service")
CHANNELS_DEVICE = "nvidia-caps-imex-channels"
CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
RECORD = "/var/lib/gpuops/host-imex.json"
# NVIDIA/k8s-dra-driver-gpu docs/prerequisites.md: "v570.158.01 or later for ComputeDomains"
MIN_DRIVER = "570.158.01"
STATES = ("masked", "unmasked")
_ACTIVE = ("active", "activating", "reloading", "refreshing")
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")


class HostImexError(ValueError):
    """Input that is not what this file takes (the message says what is valid)."""


def validate(params):
    """The step's options: state, units (systemd service names), record (an absolute path). Returns the problems."""
    problems = []
    if params.get("state") not in STATES:
        problems.append("state must be one of %s; got %r" % (", ".join(STATES), params.get("state")))
    units = params.get("units")
    if not isinstance(units, (list, tuple)) or not all(isinstance(u, str) and _UNIT_RE.match(u) for u in units):
        problems.append("units must be a list of systemd service names (like nvidia-imex.service); got %r" % (units,))
    record = params.get("record")
    if not isinstance(record, str) or not record.startswith("/"):
        problems.append("record must be an absolute path; got %r" % (record,))
    return problems


def systemctl_argv(get_bin_path, given):
    """The systemctl command: ``given`` (program and arguments) where set, its program found as a path or on PATH;
    else systemctl on PATH. HostImexError where the program is not there."""
    if given:
        if not isinstance(given, (list, tuple)) or not all(isinstance(a, str) and a for a in given):
            raise HostImexError("systemctl must be a command as a list (program, then arguments); got %r" % (given,))
        program = given[0] if os.path.isabs(given[0]) else get_bin_path(given[0])
        if not program or not os.path.isfile(program) or not os.access(program, os.X_OK):
            raise HostImexError("systemctl: %r is not a program here (give its path, or leave systemctl unset to use "
                                "the one on PATH)" % given[0])
        return [program] + list(given[1:])
    program = get_bin_path("systemctl")
    if not program:
        raise HostImexError("systemctl: no systemctl on PATH (this needs systemd, or set systemctl to its path)")
    return [program]


def unit_state(run, systemctl, unit):
    """{"present", "enabled" (systemctl is-enabled's word), "active"} of one unit. A unit that is not installed:
    present False (is-enabled prints nothing, or ``not-found``)."""
    dummy, out, dummy = run(list(systemctl) + ["is-enabled", unit])
    word = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else ""
    present = word not in ("", "not-found")
    dummy, out, dummy = run(list(systemctl) + ["is-active", unit])
    active = (out or "").strip() in _ACTIVE
    return {"present": present, "enabled": word or "not-found", "active": present and active}


def masked(state):
    return state["enabled"] in ("masked", "masked-runtime")


def read_record(path):
    """The record ({unit: {"enabled", "active"}}), or None where there is none; a record that is not one is
    HostImexError naming the file."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise HostImexError("%s is not the collection's IMEX record (JSON of unit -> state): %s; remove it once the "
                            "host's IMEX units are as you want them" % (path, exc))
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise HostImexError("%s is not the collection's IMEX record (JSON of unit -> {enabled, active})" % path)
    return data


def plan(state, units, current, record):
    """What to do: ``units`` the declared names in order, ``current`` {unit: unit_state}, ``record`` read_record's.
    Returns {"commands": [[verb, unit], ...] (systemctl verbs, in order), "record": the record afterwards (None:
    removed), "reasons": [...]}."""
    commands, reasons = [], []
    if state == "masked":
        after = dict(record or {})
        for unit in units:
            seen = current[unit]
            if not seen["present"]:
                continue
            if masked(seen) and not seen["active"]:
                continue
            if not masked(seen) and unit not in after:
                after[unit] = {"enabled": seen["enabled"], "active": seen["active"]}
            todo = (["stop"] if seen["active"] else []) + \
                ([] if masked(seen) or seen["enabled"] in ("disabled", "static", "indirect") else ["disable"]) + \
                ([] if masked(seen) else ["mask"])
            commands.extend([verb, unit] for verb in todo)
            reasons.append("%s is %s%s (the host's IMEX service holds the IMEX session the DRA driver's ComputeDomain "
                           "daemons need): %s" % (unit, seen["enabled"], ", running" if seen["active"] else "",
                                                  ", ".join(todo)))
        new = after or None
        if new != record and not reasons:
            reasons.append("%s does not record the IMEX units as the collection found them: write it" % "the record")
        return {"commands": commands, "record": new, "reasons": reasons}
    if record is None:
        return {"commands": [], "record": None, "reasons": []}
    for unit in sorted(record):
        seen = current.get(unit)
        was = record[unit]
        if seen is None or not seen["present"]:
            continue
        todo = ["unmask"] if masked(seen) else []
        if was.get("enabled") in ("enabled", "enabled-runtime") and (masked(seen) or seen["enabled"] == "disabled"):
            todo.append("enable")
        if was.get("active") and not seen["active"]:
            todo.append("start")
        commands.extend([verb, unit] for verb in todo)
        if todo:
            reasons.append("%s was masked by gpuops.nvidia for ComputeDomains, which are no longer declared: %s (as "
                           "it was: %s%s)" % (unit, ", ".join(todo), was.get("enabled"),
                                              ", running" if was.get("active") else ""))
    reasons.append("the IMEX record of ComputeDomains no longer declared is left: remove it")
    return {"commands": commands, "record": None, "reasons": reasons}


def read_units(run, systemctl, units):
    return dict((unit, unit_state(run, systemctl, unit)) for unit in units)


def _under(root, path):
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def channels_major(root):
    """The major of ``nvidia-caps-imex-channels`` in R/proc/devices' character devices, or None."""
    try:
        with open(_under(root, "/proc/devices")) as handle:
            text = handle.read()
    except (IOError, OSError):
        return None
    in_chars = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Character") and line.endswith(":"):
            in_chars = True
            continue
        if in_chars and line.endswith(":"):
            break
        parts = line.split()
        if in_chars and len(parts) >= 2 and parts[1] == CHANNELS_DEVICE and parts[0].isdigit():
            return int(parts[0])
    return None


def channels(root):
    """The IMEX channels as the DRA driver reads them: {"major", "nodes" (channel nodes there), "problems"}."""
    major = channels_major(root)
    out = {"major": major, "nodes": [], "problems": []}
    if major is None:
        out["problems"].append(
            "/proc/devices lists no %s: the loaded driver registers no IMEX channels (the nvidia module not loaded, "
            "or loaded with NVreg_ImexChannelCount=0) - load a driver of branch %s or later without "
            "NVreg_ImexChannelCount=0; the DRA driver creates the channel nodes from that major" % (
                CHANNELS_DEVICE, MIN_DRIVER))
        return out
    folder = _under(root, CHANNELS_DIR)
    if not os.path.isdir(folder):
        return out      # (none yet: the DRA driver's kubelet plugin creates each channel it hands out)
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        out["nodes"].append(name)
        match = re.match(r"^channel(\d+)$", name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not match or not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != major or \
                os.minor(st.st_rdev) != int(match.group(1)):
            minor = match.group(1) if match else "<channel>"
            out["problems"].append(
                "%s/%s is not the character device %d:%s the driver registers: remove it (the DRA driver's "
                "kubelet plugin creates each channel node itself)" % (CHANNELS_DIR, name, major, minor))
    return out


def _version(text):
    return tuple(int(p) if p.isdigit() else 0 for p in str(text or "").split("."))


def driver_problems(version):
    """The loaded driver against the DRA driver's minimum for ComputeDomains."""
    if not version:
        return ["no loaded NVIDIA driver was read: ComputeDomains need %s or later" % MIN_DRIVER]
    if _version(version) < _version(MIN_DRIVER):
        return ["driver %s is older than %s, the DRA driver's minimum for ComputeDomains (its IMEXDaemonsWithDNSNames "
                "gate): declare driver_version %s or later (or a later branch)" % (version, MIN_DRIVER, MIN_DRIVER)]
    return []


def apply(run, systemctl, todo, record_path):
    """Run ``todo``'s systemctl commands in order and write or remove the record. Returns the first failure's
    message, or None."""
    for verb, unit in todo["commands"]:
        rc, out, err = run(list(systemctl) + [verb, unit])
        if rc != 0:
            return "systemctl %s %s failed (rc %d): %s" % (verb, unit, rc, (err or out or "").strip())
    if todo["record"] is None:
        if os.path.lexists(record_path):
            os.unlink(record_path)
        return None
    folder = os.path.dirname(record_path)
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    tmp = record_path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(todo["record"], handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.rename(tmp, record_path)
    return None
