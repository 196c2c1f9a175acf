# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA kernel modules and the daemons that hold them: what to stop, unload, load and start again, and when
to refuse (PRIVATE to gpuops.nvidia). Pure, no I/O: ``plugins/modules/driver_modules.py`` reads and acts.

Sources of the rules encoded here:

- The driver's modules and who uses whom: ``nvidia_uvm``, ``nvidia_modeset`` and ``nvidia_peermem`` link against
  ``nvidia``; ``nvidia_drm`` against ``nvidia_modeset`` (its NVKMS interface: NVIDIA/open-gpu-kernel-modules at
  580.95.05, ``kernel-open/nvidia-drm/``; ``lsmod`` prints the same "Used by" lists).
- Stopping and unloading: NVIDIA/gpu-driver-container, ``nvidia-driver`` ``_unload_driver`` (ubuntu22.04/ at tag
  25.01.21; ubuntu24.04/ at commit 06a208ca, which adds NVLSM). It stops nvidia-persistenced, the fabric manager
  and NVLSM (in that order) through their pid files (SIGTERM, then up to 5 s), then refuses when the driver is in
  use: ``nvidia``'s refcnt is above the number of its loaded dependent modules (``nvidia_modeset``, ``nvidia_uvm``,
  ``nvidia_peermem``), or any of those has a refcnt above 0; else ``rmmod`` of the loaded ones, ``nvidia`` last.
  The same script's ``_load_driver``: ``modprobe nvidia``, ``nvidia-uvm``, ``nvidia-modeset``, then
  ``nvidia-peermem`` where GPUDirect RDMA is on, then ``_start_daemons`` (persistenced first, then the fabric
  manager, whose start script starts NVLSM on NVLink5 systems).
- This planner extends that rule by one module the container never loads, ``nvidia_drm``: it uses
  ``nvidia_modeset``, so ``nvidia_modeset`` may hold one reference per loaded ``nvidia_drm`` and ``nvidia_drm``
  none (a reference on it is a DRM client: a display server, a console on its framebuffer). A module outside the
  driver that uses one of its modules (``/proc/modules``' "used by" column: ``nvidia_fs``, ``gdrdrv``) is named;
  the run does not unload it.
- Daemons: which daemons hold the driver, their units and pid files, and their stop and start orders are the step
  registry's table of GPU holders (``_node_steps.gpu_holders``: each step's ``holds_gpus`` and ``OTHER_GPU_HOLDERS``,
  made into this module's table by ``_gpu_holders.driver_table``; the sources are named there). Clients of the driver
  (DCGM, the MPS control daemon) go first, then the driver container's order and pid files; where a daemon's unit is
  not active its pid file decides. ``driver_modules`` builds the table and hands it to the functions below.

Holders of ``/dev/nvidia*`` come from ``_device_holders`` (the same records and words as a refused GPU reset).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._device_holders import describe_holder
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver._driver_state import DriverStateError
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver._driver_state import (
    parse_proc_modules as _parse_modules)

# Unload order: each module before the one it uses; nvidia last.
UNLOAD_ORDER = ("nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")
# Load order (the driver container's, with nvidia_drm after the nvidia_modeset it uses).
LOAD_ORDER = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
BASE_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset")
OPTIONAL_MODULES = ("nvidia_drm", "nvidia_peermem")
DRIVER_MODULES = frozenset(LOAD_ORDER)
# The driver module each one uses.
USES = {"nvidia_uvm": "nvidia", "nvidia_modeset": "nvidia", "nvidia_peermem": "nvidia", "nvidia_drm": "nvidia_modeset"}

_NVRM = re.compile(r"^NVRM version: NVIDIA UNIX (Open Kernel Module for \S+|\S+ Kernel Module)\s+(\S+)")


class DriverModulesError(ValueError):
    """Input that cannot be used; the message says what is wrong and what is valid."""


def parse_proc_modules(text):
    """{name: {"refcnt": int or None, "users": [names]}} of ``/proc/modules`` (_driver_state's reading: ``users`` is
    its ``deps`` column; a refcnt of ``-``, a kernel that cannot unload modules, is None), in the file's order. A line
    that does not read is an error naming it."""
    try:
        modules = _parse_modules(text)
    except DriverStateError as exc:
        raise DriverModulesError(str(exc))
    return dict((name, {"refcnt": info["refcnt"], "users": info["deps"]}) for name, info in modules.items())


def driver_loaded(modules):
    """The driver's modules that are loaded, in load order."""
    return [m for m in LOAD_ORDER if m in modules]


def parse_nvrm(text):
    """(version, flavour) of ``/proc/driver/nvidia/version``'s first line; (None, None) when it does not read."""
    first = (text or "").splitlines()[0] if (text or "").strip() else ""
    match = _NVRM.match(first.strip())
    if not match:
        return None, None
    return match.group(2), ("open" if match.group(1).startswith("Open") else "proprietary")


def in_use(modules):
    """Why the loaded driver cannot be unloaded by its module counts: [sentences], empty when it can. The driver
    container's rule, with nvidia_drm (see the module docstring)."""
    reasons = []
    for mod in LOAD_ORDER:
        info = modules.get(mod)
        if info is None:
            continue
        if info["refcnt"] is None:
            # (a real H100 host's kernel, docs/readings/driver-health-real-gpu.md: /proc/modules shows '-')
            reasons.append("module %s shows no reference count in /proc/modules ('-'): this kernel was built without "
                           "module unloading (CONFIG_MODULE_UNLOAD), so the driver cannot be unloaded on a live node; "
                           "another version loads only with a reboot" % mod)
            continue
        foreign = [u for u in info["users"] if u not in DRIVER_MODULES]
        if foreign:
            reasons.append("module %s is used by %s, which is not part of the NVIDIA driver: unload %s first"
                           % (mod, ", ".join(foreign), "it" if len(foreign) == 1 else "them"))
            continue
        allowed = [d for d, used in sorted(USES.items()) if used == mod and d in modules]
        if info["refcnt"] > len(allowed):
            held = info["refcnt"] - len(allowed)
            reasons.append("module %s has %d reference(s) beyond %s: open device files or another kernel user"
                           % (mod, held, "its loaded dependent modules (%s)" % ", ".join(allowed)
                              if allowed else "none expected"))
    return reasons


def foreign_users(modules):
    """Modules outside the driver that use one of its modules: {driver module: [users]}."""
    out = {}
    for mod in LOAD_ORDER:
        users = [u for u in (modules.get(mod) or {}).get("users", []) if u not in DRIVER_MODULES]
        if users:
            out[mod] = users
    return out


def not_ours(holders, daemons):
    """The holders that are not one of the running ``daemons`` about to be stopped (matched by the systemd unit its
    cgroup names, or by the PID its pid file holds). A daemon's own children (an MPS server started by the control
    daemon) run in its unit and go with it."""
    units = set(d["unit"] for d in daemons if d.get("unit"))
    pids = set(d["pid"] for d in daemons if d.get("pid"))
    return [h for h in holders if h.get("unit") not in units and h.get("pid") not in pids]


def _ranked(daemons, table, key):
    """``daemons`` ({"name", ...}) sorted by the table's ``key`` rank (``stop`` or ``start``); a name the table does
    not hold (an unload record of another release) last, in the order given."""
    rank = dict((entry["name"], entry[key]) for entry in table)
    last = max(rank.values()) + 1 if rank else 0
    return [d for dummy, d in sorted(enumerate(daemons), key=lambda item: (rank.get(item[1]["name"], last), item[0]))]


def stop_order(running, table):
    """The running daemons ({"name", ...}) in the order they are stopped (``table``: the daemons table)."""
    return _ranked(running, table, "stop")


def start_order(daemons, table):
    """The daemons ({"name", ...}) in the order they are started (``table``: the daemons table)."""
    return _ranked(daemons, table, "start")


def unload_plan(modules):
    """The loaded driver modules in the order they are removed."""
    return [m for m in UNLOAD_ORDER if m in modules]


def load_plan(modules, wanted):
    """The ``wanted`` modules (base and optional) not loaded, in load order."""
    return [m for m in LOAD_ORDER if m in wanted and m not in modules]


def wanted_modules(before, also_load=()):
    """The modules a load brings: nvidia, nvidia_uvm, nvidia_modeset, and nvidia_drm / nvidia_peermem where they
    were loaded before (``before``: names) or are asked for."""
    wanted = set(BASE_MODULES)
    for mod in OPTIONAL_MODULES:
        if mod in before or mod in also_load:
            wanted.add(mod)
    return [m for m in LOAD_ORDER if m in wanted]


def check_also_load(values):
    bad = [v for v in values or () if v not in OPTIONAL_MODULES]
    if bad:
        raise DriverModulesError("also_load: %s not valid; valid: %s" % (
            ", ".join(map(repr, bad)), ", ".join(OPTIONAL_MODULES)))
    return list(values or ())


def record_problem(data):
    """What is wrong with an unload's record read back (driver_modules' record_path), or None: an object whose
    ``daemons`` is a list of objects each with a ``name`` (and ``argv`` a list of strings where present) and whose
    ``modules`` is a list of module names."""
    if not isinstance(data, dict):
        return "not a JSON object"
    daemons = data.get("daemons", [])
    if not isinstance(daemons, list) or not all(isinstance(d, dict) and isinstance(d.get("name"), str)
                                                for d in daemons):
        return "daemons is not a list of objects with a name"
    if any(not isinstance(d.get("argv", []), list) or not all(isinstance(a, str) for a in d.get("argv", []))
           for d in daemons):
        return "a daemon's argv is not a list of strings"
    modules = data.get("modules", [])
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        return "modules is not a list of module names"
    return None


_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


def check_version(value):
    if value is None:
        return None
    text = str(value).strip()
    if not _VERSION.match(text):
        raise DriverModulesError("version %r is not a driver version; give it as the driver prints it, e.g. "
                                 "580.95.05 or 570.172.08" % (value,))
    return text


def holders_sentence(holders, pods=None):
    return "; ".join(describe_holder(h, pods) for h in holders)


def refusal(holders, reasons, unreadable=()):
    """The one message of a refused unload: every holder named, every count that decides."""
    parts = []
    if holders:
        parts.append("%d process(es) hold the NVIDIA device files open: %s" % (len(holders),
                                                                               holders_sentence(holders)))
    if reasons:
        parts.append("; ".join(reasons))
    if unreadable:
        parts.append("%d process(es) could not be read (run as root to see them): PID %s"
                     % (len(unreadable), ", ".join(str(p) for p in unreadable[:20])))
    return ". ".join(parts)
