# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's PCI functions read from sysfs, before any driver is loaded: which are GPUs and NVSwitches, their catalog
names, and which kernel-module flavours can run them.

Everything is read under a root directory ("/" on a host, the node's scratch directory in the lab):
``<root>/sys/bus/pci/devices/<domain:bus:dev.fn>/{vendor,device,class,subsystem_vendor,subsystem_device}`` (hex
text such as ``0x10de``) and the ``driver`` link, whose basename is the bound driver. The classification:
- a GPU: class 0x0300xx (VGA controller) or 0x0302xx (3D controller; the data-center GPUs);
- an NVSwitch: class 0x0680xx (bridge, other) with one of the NVSwitch device ids of _gpu_catalog
  (NVIDIA/open-gpu-kernel-modules at 580.95.05, src/common/nvswitch/kernel/nvswitch.c);
- anything else of vendor 0x10de (an audio function, a USB controller of a workstation board): "other".
A virtual function (SR-IOV: the function has a ``physfn`` link, Linux Documentation/ABI/testing/sysfs-bus-pci) is
marked ``virtual_function``: NVML lists physical GPUs only, so the health read's comparison with NVML
(``bus_gpus``) leaves virtual functions out.
A GPU is named and given its architecture by the catalog where the catalog knows its device id, else from NVIDIA's
facts shipped in _nvidia_pci_ids: the product name of its row in the open kernel modules' "Compatible GPUs" table, and
the architecture of its device id's range in NVIDIA's PCI id database. Its ``open_modules`` is True when the table has
its row (the device id alone, or the device id with the board's subsystem), else what its architecture says (the
table's rule: Turing and later; False for an older one), and None when neither source knows it. Proprietary modules
are ruled out for Blackwell and later (the Data Center driver installation guide, "Kernel Modules"). ``parse_device``
and ``flavours`` are pure; ``read_nvidia_devices`` does the reads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import bisect
import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _nvidia_pci_ids as pci_ids

NVIDIA_VENDOR = 0x10DE
PCI_DEVICES = "sys/bus/pci/devices"
CLASS_VGA = 0x0300
CLASS_3D = 0x0302
CLASS_BRIDGE_OTHER = 0x0680
_ATTRIBUTES = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device")
# A PCI address in either form: NVML's (8 hex digits of domain, upper case: 00000000:47:00.0) or sysfs's (4, lower
# case: 0000:47:00.0).
_BUS_ID = re.compile(r"^([0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")


def _open_table_index():
    """{device id: {(subsystem vendor, subsystem device) or None: product name}} from the open-module table."""
    index = {}
    for device, sub_vendor, sub_device, name in pci_ids.OPEN_TABLE:
        index.setdefault(device, {}).setdefault(None if sub_vendor is None else (sub_vendor, sub_device), name)
    return index


_OPEN_TABLE = _open_table_index()
_RANGE_STARTS = [first for first, _last, _arch in pci_ids.ARCHITECTURE_RANGES]


class PciReadError(Exception):
    """PCI sysfs could not be read; the message names the path."""


def parse_hex(text, path):
    """The number in a sysfs hex attribute (``0x10de\\n``); PciReadError naming ``path`` when it is not one."""
    value = (text or "").strip()
    try:
        return int(value, 16)
    except ValueError:
        raise PciReadError("%s does not hold a hexadecimal number (found %r)" % (path, value))


def sysfs_bus_id(bus_id):
    """A PCI address as sysfs names it (``0000:47:00.0``) from NVML's form (``00000000:47:00.0``) or sysfs's own; None
    when ``bus_id`` is not a PCI address. Two addresses are the same function exactly when these are equal."""
    match = _BUS_ID.match(bus_id.strip()) if isinstance(bus_id, str) else None
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return "%04x:%s:%s.%s" % (int(domain, 16), bus.lower(), device.lower(), function)


def classify(pci_class, device):
    """'gpu', 'nvswitch' or 'other' for an NVIDIA function of this class and device id."""
    base = pci_class >> 8
    if base in (CLASS_VGA, CLASS_3D):
        return "gpu"
    if base == CLASS_BRIDGE_OTHER and catalog.nvswitch_generation(device):
        return "nvswitch"
    return "other"


def open_table_row(device, subsystem_vendor=None, subsystem_device=None):
    """The product name of the open-module table's row for this board (its device id with its subsystem, else its
    device id alone), or None when the table has no row for it."""
    rows = _OPEN_TABLE.get(device, {})
    return rows.get((subsystem_vendor, subsystem_device)) or rows.get(None)


def architecture_by_id(device):
    """The architecture of an NVIDIA GPU's PCI device id from the ranges of NVIDIA's PCI id database, or None."""
    at = bisect.bisect_right(_RANGE_STARTS, device) - 1
    if at >= 0 and device <= pci_ids.ARCHITECTURE_RANGES[at][1]:
        return pci_ids.ARCHITECTURE_RANGES[at][2]
    return None


def gpu_facts(device, subsystem_vendor=None, subsystem_device=None):
    """(name, architecture, open_modules) of a GPU by its PCI ids (see the module docstring): the catalog's name and
    architecture where it knows the id, else the open-module table's name (the board's row, or the one name all the
    device id's rows share) and the architecture of the id's range; None for what neither says."""
    known = catalog.gpu_by_pci(device, subsystem_vendor, subsystem_device)
    row = open_table_row(device, subsystem_vendor, subsystem_device)
    if known:
        name, architecture = known["name"], known["architecture"]
    else:
        names = set(_OPEN_TABLE.get(device, {}).values())
        name = row or (names.pop() if len(names) == 1 else None)
        architecture = architecture_by_id(device)
    return name, architecture, True if row else catalog.open_modules_supported(architecture)


def parse_device(bus_id, attributes, bound_driver, virtual_function=False):
    """One function's record (the contract's shape) from its attribute numbers, bound driver (None: unbound) and
    whether it is an SR-IOV virtual function."""
    device = attributes["device"]
    kind = classify(attributes["class"], device)
    name = architecture = open_modules = None
    if kind == "gpu":
        name, architecture, open_modules = gpu_facts(device, attributes["subsystem_vendor"],
                                                     attributes["subsystem_device"])
    elif kind == "nvswitch":
        generation = catalog.NVSWITCH_GENERATIONS[catalog.nvswitch_generation(device)]
        name, open_modules = generation["name"], generation["open_modules"]
    return {
        "bus_id": bus_id,
        "vendor": attributes["vendor"],
        "device": device,
        "subsystem_vendor": attributes["subsystem_vendor"],
        "subsystem_device": attributes["subsystem_device"],
        "class": attributes["class"],
        "kind": kind,
        "bound_driver": bound_driver,
        "name": name,
        "architecture": architecture,
        "open_modules": open_modules,
        "virtual_function": bool(virtual_function),
    }


def _read_text(path):
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        raise PciReadError("cannot read %s: %s" % (path, exc.strerror or exc))


def _bound_driver(directory):
    link = os.path.join(directory, "driver")
    try:
        return os.path.basename(os.readlink(link).rstrip("/")) or None
    except OSError:
        # No link: no driver bound. A directory (a test tree without links) names the driver by its own name.
        if os.path.isdir(link):
            return os.path.basename(os.path.realpath(link)) or None
        return None


def read_nvidia_devices(root="/"):
    """Every NVIDIA PCI function under ``root``, in bus-id order (see the module docstring for the record).
    PciReadError naming the path when the devices directory or an attribute of an NVIDIA function is unreadable."""
    base = os.path.join(root, PCI_DEVICES)
    try:
        names = sorted(os.listdir(base))
    except OSError as exc:
        raise PciReadError("cannot list the PCI devices in %s: %s" % (base, exc.strerror or exc))
    out = []
    for bus_id in names:
        directory = os.path.join(base, bus_id)
        vendor_path = os.path.join(directory, "vendor")
        if parse_hex(_read_text(vendor_path), vendor_path) != NVIDIA_VENDOR:
            continue
        attributes = {}
        for attribute in _ATTRIBUTES:
            path = os.path.join(directory, attribute)
            attributes[attribute] = parse_hex(_read_text(path), path)
        out.append(parse_device(bus_id, attributes, _bound_driver(directory),
                                os.path.lexists(os.path.join(directory, "physfn"))))
    return out


def bus_gpus(root="/"):
    """The GPUs the PCI bus shows under ``root``, for the health read's comparison with the GPUs NVML lists (read-only):
    {"readable": True, "root", "gpus": [{"bus_id" (sysfs form), "name", "bound_driver"}]} - physical GPU functions
    only (NVSwitches, audio and other functions, and SR-IOV virtual functions left out) - or {"readable": False,
    "root", "gpus": [], "reason"} when sysfs cannot be read."""
    try:
        devices = read_nvidia_devices(root)
    except PciReadError as exc:
        return {"readable": False, "root": root, "gpus": [], "reason": str(exc)}
    return {"readable": True, "root": root, "gpus": [
        {"bus_id": d["bus_id"], "name": d["name"], "bound_driver": d["bound_driver"]}
        for d in gpus(devices) if not d["virtual_function"]]}


def gpu_list(devices):
    """The devices for a sentence, each name once with its bus ids: "NVIDIA B200 at 0000:1b:00.0", "8 x NVIDIA B200 at
    0000:07:00.0, ..., 0000:bd:00.0", several names joined by "and"; a GPU without a name by its PCI id."""
    buses = {}
    for device in devices:
        label = device.get("name") or "PCI device %04x:%04x" % (device.get("vendor", NVIDIA_VENDOR), device["device"])
        buses.setdefault(label, []).append(device.get("bus_id"))
    return " and ".join("%s%s at %s" % ("%d x " % len(ids) if len(ids) > 1 else "", label, ", ".join(ids))
                        for label, ids in buses.items())


def grouped(pairs):
    """[(key, [device, ...])] from (key, device) pairs: one entry per key, in the order the keys first come."""
    out = {}
    for key, device in pairs:
        out.setdefault(key, []).append(device)
    return list(out.items())


def subject(devices):
    """gpu_list's words with the verb that agrees with them ("... is", "... are")."""
    return "%s %s" % (gpu_list(devices), "is" if len(devices) == 1 else "are")


def flavours(devices):
    """Which kernel-module flavours can run these devices: {"open": bool, "proprietary": bool, "reasons": {"open":
    [...], "proprietary": [...]}}, each reason one sentence naming every device that rules the flavour out for the same
    reason (a node of eight B200 gets one sentence, not eight).

    open: every GPU's ``open_modules`` (see the module docstring) True, and no NVSwitch of a generation the open
    modules do not drive; a GPU whose support is unknown rules it out (it cannot be shown to be supported).
    proprietary: no GPU of Blackwell or later. Functions of kind "other" do not count."""
    no_open, no_proprietary = [], []
    for device in devices:
        arch = device.get("architecture")
        if device["kind"] == "gpu":
            if device["open_modules"] is None:
                no_open.append(("unknown", device))
            elif not device["open_modules"]:
                no_open.append((arch, device))
            if catalog.proprietary_modules_supported(arch) is False:
                no_proprietary.append((arch, device))
        elif device["kind"] == "nvswitch" and device["open_modules"] is False:
            no_open.append(("nvswitch", device))
    reasons = {"open": [], "proprietary": []}
    for why, members in grouped(no_open):
        if why == "unknown":
            reasons["open"].append(
                "%s: neither NVIDIA's open-module table (%s) nor the architectures of its PCI id database (%s) cover "
                "the device id, so open-module support is unknown" % (
                    gpu_list(members), pci_ids.OPEN_TABLE_SOURCE, pci_ids.PCI_IDS_SOURCE))
        elif why == "nvswitch":
            reasons["open"].append("%s: the open kernel modules do not drive this NVSwitch generation"
                                   % gpu_list(members))
        else:
            reasons["open"].append("%s %s: the open kernel modules need Turing or later" % (
                subject(members), catalog.architecture_title(why) if why else "older than Turing"))
    for arch, members in grouped(no_proprietary):
        reasons["proprietary"].append("%s %s: Blackwell and later GPUs need the open kernel modules" % (
            subject(members), catalog.architecture_title(arch)))
    return {"open": not reasons["open"], "proprietary": not reasons["proprietary"], "reasons": reasons}


def gpus(devices):
    return [d for d in devices if d["kind"] == "gpu"]


def nvswitches(devices):
    return [d for d in devices if d["kind"] == "nvswitch"]
