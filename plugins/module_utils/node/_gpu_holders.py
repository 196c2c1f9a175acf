# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The daemons that hold the GPUs (``/dev/nvidia*``) while they run, and the two lists made from them (PRIVATE to
gpuops.nvidia). Pure, no I/O.

The step registry (``_node_steps``) says which daemons hold the GPUs: each ``Step``'s ``holds_gpus`` (the daemons the
step runs) and ``OTHER_GPU_HOLDERS`` (those no node step runs). From that one table come:

- ``driver_table``: what ``gpuops.nvidia.driver_modules`` stops before it unloads the driver and starts again after it
  loaded it (each daemon's units, or its pid file where no unit runs it; the stop and start orders);
- ``reset_blockers``: the systemd units the mig role stops (where running) before a MIG-mode change that needs a GPU
  reset and restarts in the reverse order (``mig_blocker_services``, which gpu_node passes to the mig role).

Both stop a daemon only where it runs, so a daemon a node does not have costs one look.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

DEFAULT_MPS_UNIT = "gpuops-mps-control.service"

# A client of the driver (DCGM, the MPS control daemon, a new step's daemon) is stopped before the driver's own
# daemons (persistenced, the fabric manager, NVLSM) and started after them: the default ranks say so.
CLIENT_STOP = 50
CLIENT_START = 50

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.service$")


class Holder(object):
    """A daemon that holds the GPUs while it runs. ``name``: its key (the driver's unload record names it); ``label``:
    how messages name it; ``units``: the systemd units that run it (the first active one counts), each ending in
    ``.service``; ``pid_file``: where no unit runs it, the file that holds its PID (a path under the node's root), or
    None; ``stop`` and ``start``: its places in the stop and start orders (lower first; ties keep the table's order).
    The defaults make it a client of the driver: stopped before the driver's own daemons, started after them."""

    __slots__ = ("name", "label", "units", "pid_file", "stop", "start")

    def __init__(self, name, label, units, pid_file=None, stop=CLIENT_STOP, start=CLIENT_START):
        self.name = name
        self.label = label
        self.units = tuple(units)
        self.pid_file = pid_file
        self.stop = stop
        self.start = start

    def __repr__(self):
        return "Holder(%r)" % self.name


def problems(holders):
    """What is wrong with a table of holders (an error in the collection): a name that is not one, a name twice, a unit
    that is not a service unit, a daemon with neither a unit nor a pid file, a rank that is not an integer."""
    found, seen = [], set()
    for holder in holders:
        if not isinstance(holder, Holder):
            found.append("%r is not a Holder" % (holder,))
            continue
        if not _NAME.match(holder.name or ""):
            found.append("holder %r: the name must be lower case letters, digits and _" % (holder.name,))
        if holder.name in seen:
            found.append("holder %s is declared twice" % holder.name)
        seen.add(holder.name)
        bad = [u for u in holder.units if not isinstance(u, str) or not _UNIT.match(u)]
        if bad:
            found.append("holder %s: %s not a systemd service unit (name.service)" % (holder.name, ", ".join(
                repr(u) for u in bad)))
        if not holder.units and not holder.pid_file:
            found.append("holder %s has neither a unit nor a pid file: nothing could find it running" % holder.name)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in (holder.stop, holder.start)):
            found.append("holder %s: stop and start must be integers" % holder.name)
    return found


def service_unit(name):
    """A unit name as systemd names a service (``gpuops-mps-control`` -> ``gpuops-mps-control.service``). Raises
    ValueError, saying what is valid, for a name that is not one."""
    text = name.strip() if isinstance(name, str) else ""
    unit = text if text.endswith(".service") else text + ".service"
    if not text or text.startswith("-") or not _UNIT.match(unit):
        raise ValueError("%r is not a systemd service unit name: give letters, digits and :_.@- (not starting with "
                         "-), with or without .service, e.g. gpuops-mps-control" % (name,))
    return unit


def _units(holder, units):
    """The holder's units, or those ``units`` (name -> units) gives it instead (the MPS unit as a node names it)."""
    if units and holder.name in units:
        return tuple(service_unit(u) for u in units[holder.name])
    return holder.units


def driver_table(holders, units=None):
    """The driver's daemons table (``_driver_modules``): one dict per holder, in stop order - ``name``, ``label``,
    ``units``, ``pid_file``, ``stop`` and ``start`` (the ranks ``_driver_modules.stop_order`` and ``start_order``
    sort by)."""
    ordered = sorted(enumerate(holders), key=lambda item: (item[1].stop, item[0]))
    return [{"name": h.name, "label": h.label, "units": _units(h, units), "pid_file": h.pid_file, "stop": h.stop,
             "start": h.start} for dummy, h in ordered]


def reset_blockers(holders, units=None):
    """The units a GPU reset waits for (the mig role's ``mig_blocker_services``): every holder's units, without
    ``.service``, in the reverse of the start order, so that the mig role, which restarts what it stopped in the
    reverse order, starts them in the start order. A holder run from a pid file only is not a unit: not listed."""
    ordered = sorted(enumerate(holders), key=lambda item: (-item[1].start, item[0]))
    out = []
    for dummy, holder in ordered:
        for unit in _units(holder, units):
            name = unit[:-len(".service")]
            if name not in out:
                out.append(name)
    return out
