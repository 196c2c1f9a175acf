# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated machine's state and the NVML rules over it: pure functions on the state dict, no file and no lock.

_simulator.SimulatedBackend keeps this state in its JSON file and calls these under its lock. The rules and their
sources are listed in _simulator's docstring.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import uuid

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator_health import after_reset, rack_fabric
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    GpuBackendError,
    NvmlInvalidArgument,
    NvmlNotFound,
    NvmlNotSupported,
    mig_devices,
)

STATE_FORMAT = 1
SIM_DRIVER_VERSION = "580.159.04"   # the driver of the real H200 reading
SIM_CUDA_DRIVER_VERSION = 13000
_UUID_NAMESPACE = uuid.UUID("6c1c0f9e-3f0e-4b3a-9a55-8d2b5c7e4a10")


def new_state(shape, seed, rack=None):
    """A fresh state for a machine shape. `seed` (usually the state file's path) makes UUIDs differ per node; `rack`
    (GPUOPS_SIMULATED_RACK) names the rack a tray of an NVL shape belongs to (its fabric's cluster and clique,
    _simulator_health.rack_fabric)."""
    if shape not in catalog.MACHINE_SHAPES:
        raise GpuBackendError(
            "unknown simulated machine shape %r; valid shapes: %s" % (shape, ", ".join(catalog.shape_names())))
    gpus = []
    for index, model_key in enumerate(catalog.MACHINE_SHAPES[shape]):
        m = catalog.GPU_MODELS[model_key]
        gpus.append({
            "index": index,
            "model": model_key,
            "uuid": "GPU-%s" % uuid.uuid5(_UUID_NAMESPACE, "%s/%d" % (seed, index)),
            "pci_bus_id": catalog.bus_id(index),
            "compute_mode": "Default",
            "persistence_mode": True,
            "mig_current": False if m["mig"] else None,
            "mig_pending": False if m["mig"] else None,
            # False models a passthrough VM: no per-GPU reset is exposed (SetMigMode -> RESET_REQUIRED).
            "reset_supported": True,
            "gpu_instances": [],
        })
    return {
        "format": STATE_FORMAT,
        "shape": shape,
        "fabric": rack_fabric(shape, seed, rack),
        "driver_version": SIM_DRIVER_VERSION,
        "cuda_driver_version": SIM_CUDA_DRIVER_VERSION,
        "boot_id": 1,
        "uuid_counter": 0,
        "mutating_calls": 0,
        "faults": [],
        "call_log": [],
        "processes": [],
        "gpus": gpus,
    }


def mig_uuid(gpu, gi_id, ci_id, counter):
    """A MIG device's UUID: new for every compute instance created (``counter`` is the state's), as a real driver's
    are after a reset."""
    return "MIG-%s" % uuid.uuid5(_UUID_NAMESPACE, "%s/%d/%d/%d" % (gpu["uuid"], gi_id, ci_id, counter))


def state_problem(state):
    if not isinstance(state, dict):
        return "top level is not an object"
    if state.get("format") != STATE_FORMAT:
        return "format is %r, expected %d" % (state.get("format"), STATE_FORMAT)
    gpus = state.get("gpus")
    if not isinstance(gpus, list):
        return "'gpus' is not a list"
    for key in ("processes", "faults", "call_log"):
        if not isinstance(state.get(key), list):
            return "%r is not a list" % key
    for gpu in gpus:
        if not isinstance(gpu, dict) or gpu.get("model") not in catalog.GPU_MODELS:
            return "a GPU entry has an unknown model %r; known: %s" % (
                gpu.get("model") if isinstance(gpu, dict) else gpu, ", ".join(sorted(catalog.GPU_MODELS)))
        for key in ("index", "uuid", "gpu_instances"):
            if key not in gpu:
                return "GPU entry %r lacks %r" % (gpu.get("index"), key)
    return None


def cuda_version_text(value):
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def arch_rules(gpu):
    return catalog.ARCH_RULES[catalog.GPU_MODELS[gpu["model"]]["architecture"]]


def gpu_by_index(state, index):
    for gpu in state["gpus"]:
        if gpu["index"] == index:
            return gpu
    raise NvmlInvalidArgument("no GPU with index %r (this node has %d)" % (index, len(state["gpus"])))


def require_mig_capable(gpu):
    if gpu["mig_current"] is None:
        raise NvmlNotSupported("GPU %d (%s) does not support MIG" % (
            gpu["index"], catalog.GPU_MODELS[gpu["model"]]["name"]))


def require_mig_enabled(gpu):
    require_mig_capable(gpu)
    if not gpu["mig_current"]:
        # The exact code NVML returns for instance calls with MIG disabled is not documented in the
        # references; NOT_SUPPORTED is what the V-variant profile queries document for that case.
        raise NvmlNotSupported("MIG mode is not enabled on GPU %d" % gpu["index"])


def gi_profile_by_id(gpu, profile_id):
    for p in catalog.gi_profiles(gpu["model"]):
        if p["id"] == profile_id:
            return p
    raise NvmlInvalidArgument("GPU-instance profile id %r does not exist on %s" % (
        profile_id, catalog.GPU_MODELS[gpu["model"]]["name"]))


def gi_by_id(gpu, gi_id):
    for gi in gpu["gpu_instances"]:
        if gi["id"] == gi_id:
            return gi
    raise NvmlNotFound("GPU %d has no GPU instance %r" % (gpu["index"], gi_id))


def used_memory_slices(gpu):
    used = set()
    for gi in gpu["gpu_instances"]:
        size = gi_profile_by_id(gpu, gi["profile_id"])["memory_slices"]
        used.update(range(gi["start"], gi["start"] + size))
    return used


def lowest_free_id(taken, first):
    # Real drivers choose GI ids by their own scheme (on A100 they follow the placement slot, UG "Instance
    # Geometry"); the simulator hands out the lowest free id. Code must identify instances by
    # (profile, placement), never by id across a reset.
    candidate = first
    taken = set(taken)
    while candidate in taken:
        candidate += 1
    return candidate


def processes_on(state, index):
    return [p for p in state["processes"] if p["gpu"] == index]


def apply_reset(gpu):
    after_reset(gpu)
    gpu["gpu_instances"] = []
    if gpu["mig_current"] is not None:
        gpu["mig_current"] = gpu["mig_pending"]
    # Whether a GPU reset returns compute mode to Default is not documented (neither the MIG user guide nor
    # nvml.h's SetComputeMode says); the simulator keeps it.


def due_fault(state, call):
    for fault in state["faults"]:
        if fault.get("call") not in (None, call):
            continue
        fault["remaining"] -= 1
        if fault["remaining"] <= 0:
            state["faults"].remove(fault)
            return fault
    return None


def due_stop(state):
    """Whether this mutating call is the one a `stop_after` test hook names (counts it down; absent: False)."""
    remaining = state.get("stop_after")
    if remaining is None:
        return False
    if remaining <= 1:
        del state["stop_after"]
        return True
    state["stop_after"] = remaining - 1
    return False


def process_facts(p):
    return {"pid": p["pid"], "name": p["name"], "used_memory_mib": p["used_memory_mib"],
            "gi_id": p.get("gi_id"), "ci_id": p.get("ci_id")}


def gpu_facts(state, gpu):
    m = catalog.GPU_MODELS[gpu["model"]]
    profiles = catalog.gi_profiles(gpu["model"])
    by_id = dict((p["id"], p) for p in profiles)
    procs = processes_on(state, gpu["index"])
    instances = []
    for gi in gpu["gpu_instances"]:
        gp = by_id[gi["profile_id"]]
        cis = []
        for ci in gi["compute_instances"]:
            cp = [c for c in gp["ci_profiles"] if c["id"] == ci["profile_id"]][0]
            cis.append({
                "id": ci["id"], "profile_id": ci["profile_id"], "profile": cp["name"],
                "placement": {"start": ci["start"], "size": ci["slices"]},
                "mig_uuid": ci["uuid"],
                "processes": [process_facts(p) for p in procs
                              if p.get("gi_id") == gi["id"] and p.get("ci_id") == ci["id"]],
            })
        instances.append({
            "id": gi["id"], "profile_id": gi["profile_id"], "profile": gp["name"],
            "placement": {"start": gi["start"], "size": gp["memory_slices"]},
            "compute_instances": cis,
        })
    mig_supported = m["mig"] is not None
    facts = {
        "index": gpu["index"],
        "uuid": gpu["uuid"],
        "name": m["name"],
        "pci_bus_id": gpu["pci_bus_id"],
        "pci_device_id": "0x%08X" % m["pci_device_id"],
        "memory_total_mib": m["memory_total_mib"],
        "memory_total_bytes": m["memory_total_mib"] * 1024 * 1024,
        "compute_capability": m["compute_capability"],
        "architecture": m["architecture"],
        "compute_mode": gpu["compute_mode"],
        "persistence_mode": gpu["persistence_mode"],
        "mig_supported": mig_supported,
        "mig_mode_current": None if not mig_supported else ("Enabled" if gpu["mig_current"] else "Disabled"),
        "mig_mode_pending": None if not mig_supported else ("Enabled" if gpu["mig_pending"] else "Disabled"),
        "reset_supported": gpu.get("reset_supported", True),
        "gi_profiles": profiles,
        "gpu_instances": instances,
        "processes": [process_facts(p) for p in procs],
    }
    facts["mig_devices"] = mig_devices(facts)
    return facts
