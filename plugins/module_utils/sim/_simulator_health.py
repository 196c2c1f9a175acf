# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated GPUs' health: what each GPU answers to the health read, the faults a test or the lab injects, and what
a GPU reset or a reboot does to them. Pure functions over the simulator's state dict (no file, no lock): _simulator
calls them under its lock.

A GPU's health lives in its state entry under "health" (absent = healthy defaults, so state files written before this
existed read as healthy). What a GPU answers NOT_SUPPORTED follows NVML's documented support per generation and the
machine's topology:
- page retirement (nvmlDeviceGetRetiredPages, ...PendingStatus): before Ampere only; Ampere and later replaced it with
  row remapping (NVIDIA "Dynamic Page Retirement" and "A100 GPU Memory Error Management" docs; nvidia-smi prints N/A on
  the H100 of ../shared reading, reference/driver.md "Health fields"). Every model of _gpu_catalog is Ampere or later.
- row remapping (nvmlDeviceGetRemappedRows): Ampere and later (nvml.h: "For Ampere or newer fully supported devices").
- NVLink (nvmlDeviceGetNvLinkState): the SXM parts on an NVSwitch baseboard (DGX/HGX shapes, GB200/GB300 NVL): A100 SXM4 has
  12 links (third-generation NVLink, A100 datasheet), H100/H200 SXM5 and the Blackwell SXM parts 18 (H100 and HGX B200
  datasheets). PCIe cards and the single-GPU or PCIe shapes answer NOT_SUPPORTED, as the real H100 passthrough VM did
  (reference/driver.md "Health fields"); PCIe NVLink bridges (A30, H100 NVL) are not modelled.
- fabric (nvmlDeviceGetGpuFabricInfoV, _gpu_fabric's facts): Hopper and later on an NVSwitch fabric (nvml.h: "For
  Hopper or newer fully supported devices"); elsewhere its state is NOT_SUPPORTED. On a single-node NVSwitch baseboard
  (the HGX/DGX shapes) the probe completes with an all-zero cluster UUID, clique 0 and no health field reported, as
  nvidia-smi -q shows an HGX H100 node (driver 560.35.03: State Completed, Status Success, CliqueId 0, ClusterUUID
  00000000-..., Bandwidth N/A) and meta-pytorch/torchcomms#1385 describes it. A tray of a rack-scale NVLink domain
  (the NVL shapes) carries its rack's cluster UUID and clique id (every tray created with the same GPUOPS_SIMULATED_RACK
  shares them; without one the tray is a rack of its own) and the health mask 0xaa (bandwidth not degraded, no route
  recovery, route healthy, no access timeout recovery), as NVIDIA/nccl#2186 quotes it from a GB200 NVL72; clique id
  32766 as NVIDIA's DRA driver logs one (NVIDIA/k8s-dra-driver-gpu#630). Until the probe completes the GPU reports no
  cluster (all-zero UUID, clique 0): the simulator's choice, nvml.h says only that the status counts once the probe
  completed.
- PCIe: Gen4 x16 for Ampere and Ada, Gen5 x16 for Hopper and Blackwell (the H100 reading: 5/5, 16/16).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re
import uuid

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_fabric as fabric_info
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    NVML_ERROR_CODES,
    GpuBackendError,
    NvmlError,
    NvmlNotSupported,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
    CLOCK_EVENT_BITS,
    FABRIC_STATES,
    NOT_SUPPORTED,
    NVLINK_COUNTERS,
    decode_clock_events,
    encode_clock_events,
)

_NVLINK_LINKS = {"A100-SXM4-40GB": 12, "A100-SXM4-80GB": 12, "H100-SXM5-80GB": 18, "H200": 18, "B200": 18,
                 "B300": 18, "GB200": 18, "GB300": 18}
_NVSWITCH_SHAPES = ("dgx-", "hgx-", "gb200-nvl", "gb300-nvl")
# The machine shapes whose NVLink domain spans nodes (a compute tray of a rack): their GPUs carry the rack's cluster.
MULTI_NODE_FABRIC_SHAPES = ("gb200-nvl", "gb300-nvl")
DEFAULT_CLIQUE_ID = 32766
_NO_CLUSTER = "00000000-0000-0000-0000-000000000000"
_RACK_NAMESPACE = uuid.UUID("0b5c6a1e-52d4-4c37-9f0e-5a1d7c3e2b90")
# A healthy GPU's health fields per kind of fabric (module docstring): a tray's 0xaa, nothing on a baseboard.
_HEALTHY_FIELDS = {True: {"degraded_bandwidth": False, "route_recovery_in_progress": False, "route_unhealthy": False,
                          "access_timeout_recovery": False},
                   False: {}}
# fault name -> the health field it sets (a bool: true sets the field, false gives it back its healthy value)
_FABRIC_HEALTH_FAULTS = {"fabric_degraded": "degraded_bandwidth", "fabric_route_recovery": "route_recovery_in_progress",
                         "fabric_route_unhealthy": "route_unhealthy",
                         "fabric_access_timeout_recovery": "access_timeout_recovery"}
_PCIE_GENERATION = {"ampere": 4, "ada": 4, "hopper": 5, "blackwell": 5}
_PAGE_RETIREMENT_ARCHS = ()         # before Ampere; no such model is simulated
_SIM_TEMPERATURE_C = 29             # the H200 reading's temperature at idle

# fault name: (what it sets, the type of its value). The lab's and the tests' way to make a GPU unhealthy.
FAULTS = {
    "lost": "the GPU answers GPU_IS_LOST to every call (bool)",
    "missing": "NVML does not list the GPU while its PCI function stays on the bus, as after an Xid 79 or a failed "
               "RmInitAdapter (bool)",
    "ecc_mode": "ECC enabled (bool)",
    "ecc_volatile_corrected": "count", "ecc_volatile_uncorrected": "count",
    "ecc_aggregate_corrected": "count", "ecc_aggregate_uncorrected": "count",
    "row_remap_pending": "bool", "row_remap_failure": "bool",
    "remapped_rows_corrected": "count", "remapped_rows_uncorrected": "count",
    "retired_pages_pending": "bool", "retired_pages_single_bit": "count", "retired_pages_double_bit": "count",
    "nvlink_down": "link number (value true) or back up (value false)",
    "nvlink_replay": "count on link", "nvlink_recovery": "count on link", "nvlink_crc_flit": "count on link",
    "nvlink_crc_data": "count on link",
    "pcie_generation": "current generation", "pcie_width": "current width",
    "clock_events": "list of clock event reason names", "temperature": "degrees C",
    "fabric_state": "not_started, in_progress or completed", "fabric_status": "SUCCESS or an NVML error name",
    "fabric_degraded": "bool", "fabric_route_recovery": "bool", "fabric_route_unhealthy": "bool",
    "fabric_access_timeout_recovery": "bool",
    "fabric_incorrect_configuration": "none or what is wrong (%s)" % ", ".join(
        sorted(fabric_info.INCORRECT_CONFIGURATION.values())),
    "fabric_clique_id": "the GPU's clique id, 0 to 4294967295 (a tray moved to another clique)",
    "fabric_cluster_uuid": "the GPU's cluster UUID (a tray of another NVLink domain)",
    "hang": "the GPU's health read blocks, as a GPU whose driver never answers, until the reading process is killed "
            "or the fault is set false (bool)",
    "healthy": "back to the healthy defaults (any value)",
}

# The simulated kernel log's clock: the first Xid of a boot at this many seconds after boot, each next one this much
# later (deterministic, so a test's timestamps do not depend on the machine's speed).
_LOG_FIRST_TS = 60.0
_LOG_STEP_TS = 1.5
_BOOT_NAMESPACE = uuid.UUID("6f3f1a52-0c1e-4d55-9a8e-3d7f6c2b9e41")


def _model(gpu):
    return catalog.GPU_MODELS[gpu["model"]]


def nvlink_count(state, gpu):
    """How many NVLinks the GPU answers for on this machine shape (0: NOT_SUPPORTED)."""
    if not str(state.get("shape") or "").startswith(_NVSWITCH_SHAPES):
        return 0
    return _NVLINK_LINKS.get(gpu["model"], 0)


def has_fabric(state, gpu):
    return nvlink_count(state, gpu) > 0 and _model(gpu)["architecture"] in ("hopper", "blackwell")


def multi_node_fabric(state):
    return state.get("shape") in MULTI_NODE_FABRIC_SHAPES


def rack_fabric(shape, seed, rack=None):
    """A new machine's fabric identity, kept in its state as "fabric": {"rack", "cluster_uuid", "clique_id"}. A tray of
    an NVL shape takes its rack's (from the rack's name: every tray of one rack gets the same; without a name, from
    ``seed``, a rack of its own); any other shape has no cluster (all-zero UUID, clique 0)."""
    if shape not in MULTI_NODE_FABRIC_SHAPES:
        return {"rack": None, "cluster_uuid": _NO_CLUSTER, "clique_id": 0}
    return {"rack": rack, "cluster_uuid": str(uuid.uuid5(_RACK_NAMESPACE, "rack/%s" % (rack or seed))),
            "clique_id": DEFAULT_CLIQUE_ID}


def fabric_facts(state, gpu, unregistered=False):
    """GPU ``gpu``'s fabric facts as NVML gives them (_gpu_fabric.facts), or NOT_SUPPORTED where it has no fabric;
    ``unregistered``: no Fabric Manager has registered the GPUs yet (state not_started)."""
    if not has_fabric(state, gpu):
        return NOT_SUPPORTED
    stored = (gpu.get("health") or default_health())["fabric"]
    ident = state.get("fabric") or rack_fabric(state.get("shape"), state["gpus"][0]["uuid"])
    probe = "not_started" if unregistered else stored["state"]
    fields = dict(_HEALTHY_FIELDS[multi_node_fabric(state)])
    fields.update(stored.get("health") or {})
    if stored.get("degraded_bandwidth"):
        fields["degraded_bandwidth"] = True
    cluster, clique = _NO_CLUSTER, 0
    if probe == "completed":
        cluster = stored.get("cluster_uuid", ident["cluster_uuid"])
        clique = stored.get("clique_id", ident["clique_id"])
    return fabric_info.facts(fabric_info.FABRIC_STATE_CODES[probe], stored["status"],
                             fabric_info.cluster_uuid_bytes(cluster), clique, fabric_info.encode_health(fields))


def has_page_retirement(gpu):
    return _model(gpu)["architecture"] in _PAGE_RETIREMENT_ARCHS


def default_health():
    return {
        "lost": False, "missing": False, "ecc_mode": True,
        "ecc": {"volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {"corrected": 0, "uncorrected": 0}},
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False},
        "nvlink_down": [], "nvlink_errors": {}, "pcie": {}, "clock_events": ["gpu_idle"],
        "temperature_c": _SIM_TEMPERATURE_C,
        "fabric": {"state": "completed", "status": "SUCCESS", "degraded_bandwidth": False},
    }


def is_lost(gpu):
    return bool((gpu.get("health") or {}).get("lost"))


def is_hung(gpu):
    return bool((gpu.get("health") or {}).get("hang"))


def is_missing(gpu):
    return bool((gpu.get("health") or {}).get("missing"))


def listed(state):
    """The GPUs NVML lists: every GPU but those missing from it. A missing GPU's PCI function stays in the host tree
    (_simulator_host renders it from the state's GPUs whatever their health), so the health read's comparison of the
    bus with NVML finds it. The other GPUs keep their indexes here; real NVML numbers the GPUs it lists from 0 without a
    gap (a known limit of the simulator, docs/health.md)."""
    return [g for g in state["gpus"] if not is_missing(g)]


def raise_if_missing(gpu):
    """What NVML answers for an index it does not list: INVALID_ARGUMENT; else the GPU entry itself."""
    if is_missing(gpu):
        raise NvmlError.for_name("INVALID_ARGUMENT", "GPU %d (%s): NVML does not list this GPU (missing)" % (
            gpu["index"], gpu["pci_bus_id"]))
    return gpu


def raise_if_lost(gpu):
    """What NVML answers for a lost GPU's handle: GPU_IS_LOST; else the GPU entry itself."""
    if is_lost(gpu):
        raise NvmlError.for_name("GPU_IS_LOST", "GPU %d (%s): GPU is lost" % (gpu["index"], gpu["pci_bus_id"]))
    return gpu


def health_facts(state, gpu):
    """The GPU's health entry, as the NVML backend reads it (the shape in _gpu_health's docstring)."""
    m = _model(gpu)
    stored = gpu.get("health") or default_health()
    entry = {"index": gpu["index"], "uuid": gpu["uuid"], "name": m["name"], "pci_bus_id": gpu["pci_bus_id"],
             "architecture": m["architecture"]}
    if stored["lost"]:
        entry.update({"lost": True, "error": "GPU is lost"})
        return entry
    links = nvlink_count(state, gpu)
    nvlink = NOT_SUPPORTED
    if links:
        nvlink = []
        for link in range(links):
            counts = stored["nvlink_errors"].get(str(link), {})
            nvlink.append({"link": link, "active": link not in stored["nvlink_down"],
                           "errors": dict((name, counts.get(name, 0)) for name in NVLINK_COUNTERS)})
    best = _PCIE_GENERATION[m["architecture"]]
    fabric = fabric_info.health_entry(fabric_facts(state, gpu))
    entry.update({
        "lost": False,
        "ecc": {"mode_current": "Enabled" if stored["ecc_mode"] else "Disabled",
                "mode_pending": "Enabled" if stored["ecc_mode"] else "Disabled",
                "volatile": dict(stored["ecc"]["volatile"]), "aggregate": dict(stored["ecc"]["aggregate"])},
        "retired_pages": dict(stored["retired_pages"]) if has_page_retirement(gpu) else NOT_SUPPORTED,
        "remapped_rows": dict(stored["remapped_rows"]),
        "nvlink": nvlink,
        "pcie": {"generation": {"current": stored["pcie"].get("generation", best), "max": best, "gpu_max": best},
                 "width": {"current": stored["pcie"].get("width", 16), "max": 16}},
        "clock_events": decode_clock_events(encode_clock_events(stored["clock_events"])),
        "temperature_c": stored["temperature_c"],
        "fabric": fabric,
    })
    return entry


def kernel_log(state):
    """The simulated kernel log of this boot, in _xid.read_kernel_log's shape."""
    log = state.get("kernel_log") or {"readable": True, "lines": []}
    if not log.get("readable", True):
        return {"readable": False, "source": None, "lines": [],
                "reason": "kernel log not readable: journalctl: no entries; dmesg: rc 1: dmesg: read kernel buffer "
                          "failed: Operation not permitted (simulated)"}
    return {"readable": True, "source": "simulated", "lines": list(log.get("lines") or [])}


def _count(value, fault):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GpuBackendError("fault %s needs a whole number, 0 or more; got %r" % (fault, value))
    return value


def _flag(value, fault):
    if not isinstance(value, bool):
        raise GpuBackendError("fault %s needs true or false; got %r" % (fault, value))
    return value


def inject(state, gpu, fault, value, link=None):
    """Set one health fault on ``gpu`` (a GPU entry of ``state``); bad input raises GpuBackendError (or NvmlNotSupported
    for a field the GPU answers NOT_SUPPORTED for) and changes nothing."""
    if fault not in FAULTS:
        raise GpuBackendError("unknown health fault %r; valid: %s" % (fault, ", ".join(sorted(FAULTS))))
    work = copy.deepcopy(gpu.get("health") or default_health())
    where = "GPU %d (%s)" % (gpu["index"], _model(gpu)["name"])
    if fault == "healthy":
        work = default_health()
    elif fault in ("lost", "missing", "ecc_mode", "hang"):
        work[fault] = _flag(value, fault)
    elif fault.startswith("ecc_"):
        dummy, counter, kind = fault.split("_")
        work["ecc"][counter][kind] = _count(value, fault)
    elif fault in ("row_remap_pending", "row_remap_failure"):
        work["remapped_rows"][fault[len("row_remap_"):]] = _flag(value, fault)
    elif fault.startswith("remapped_rows_"):
        work["remapped_rows"][fault[len("remapped_rows_"):]] = _count(value, fault)
    elif fault.startswith("retired_pages_"):
        if not has_page_retirement(gpu):
            raise NvmlNotSupported("%s has no page retirement: NVML answers NOT_SUPPORTED from Ampere on (row "
                                   "remapping replaced it; use row_remap_pending)" % where)
        key = fault[len("retired_pages_"):]
        work["retired_pages"][key] = _flag(value, fault) if key == "pending" else _count(value, fault)
    elif fault.startswith("nvlink_"):
        links = nvlink_count(state, gpu)
        if not links:
            raise NvmlNotSupported("%s has no NVLink on this machine shape (%s): NVML answers NOT_SUPPORTED" % (
                where, state.get("shape")))
        if isinstance(link, bool) or not isinstance(link, int) or not 0 <= link < links:
            raise GpuBackendError("fault %s needs a link number from 0 to %d; got %r" % (fault, links - 1, link))
        if fault == "nvlink_down":
            down = set(work["nvlink_down"])
            (down.add if _flag(value, fault) else down.discard)(link)
            work["nvlink_down"] = sorted(down)
        else:
            work["nvlink_errors"].setdefault(str(link), {})[fault[len("nvlink_"):]] = _count(value, fault)
    elif fault in ("pcie_generation", "pcie_width"):
        best = _PCIE_GENERATION[_model(gpu)["architecture"]] if fault == "pcie_generation" else 16
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= best:
            raise GpuBackendError("fault %s needs a number from 1 to %d (this GPU's maximum); got %r" % (
                fault, best, value))
        work["pcie"][fault[len("pcie_"):]] = value
    elif fault == "clock_events":
        if not isinstance(value, list) or [r for r in value if r not in CLOCK_EVENT_BITS]:
            raise GpuBackendError("fault clock_events needs a list of reasons from: %s; got %r" % (
                ", ".join(sorted(CLOCK_EVENT_BITS)), value))
        work["clock_events"] = list(value)
    elif fault == "temperature":
        work["temperature_c"] = _count(value, fault)
    else:
        if not has_fabric(state, gpu):
            raise NvmlNotSupported("%s has no NVSwitch fabric on this machine shape (%s): its fabric state is "
                                   "NOT_SUPPORTED" % (where, state.get("shape")))
        work["fabric"] = _fabric_fault(work["fabric"], fault, value)
    gpu["health"] = work


def _fabric_fault(stored, fault, value):
    """``stored`` (a GPU's stored fabric) with one fabric fault set; GpuBackendError naming what is valid."""
    if fault == "fabric_state":
        if value not in FABRIC_STATES.values():
            raise GpuBackendError("fault fabric_state needs one of %s; got %r" % (
                ", ".join(sorted(FABRIC_STATES.values())), value))
        stored["state"] = value
    elif fault == "fabric_status":
        if value != "SUCCESS" and value not in NVML_ERROR_CODES:
            raise GpuBackendError("fault fabric_status needs SUCCESS or an NVML error name (%s); got %r" % (
                ", ".join(sorted(NVML_ERROR_CODES)), value))
        stored["status"] = value
    elif fault == "fabric_degraded":
        stored["degraded_bandwidth"] = _flag(value, fault)
    elif fault in _FABRIC_HEALTH_FAULTS:
        health = stored.setdefault("health", {})
        if _flag(value, fault):
            health[_FABRIC_HEALTH_FAULTS[fault]] = True
        else:
            health.pop(_FABRIC_HEALTH_FAULTS[fault], None)
    elif fault == "fabric_incorrect_configuration":
        if value not in fabric_info.INCORRECT_CONFIGURATION.values():
            raise GpuBackendError("fault fabric_incorrect_configuration needs one of %s; got %r" % (
                ", ".join(sorted(fabric_info.INCORRECT_CONFIGURATION.values())), value))
        stored.setdefault("health", {})["incorrect_configuration"] = value
    elif fault == "fabric_clique_id":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= fabric_info.CLIQUE_ID_MAX:
            raise GpuBackendError("fault fabric_clique_id needs a whole number from 0 to %d; got %r" % (
                fabric_info.CLIQUE_ID_MAX, value))
        stored["clique_id"] = value
    else:
        try:
            stored["cluster_uuid"] = str(uuid.UUID(bytes=fabric_info.cluster_uuid_bytes(value)))
        except fabric_info.FabricValueError as exc:
            raise GpuBackendError("fault fabric_cluster_uuid: %s" % exc)
    return stored


def boot_id(state):
    """This boot's id, as /proc/sys/kernel/random/boot_id shows it: a UUID of the machine's first GPU and the state's
    boot counter, so a reboot (which counts the boot) gives a new one."""
    seed = state["gpus"][0]["uuid"] if state.get("gpus") else state.get("shape")
    return str(uuid.uuid5(_BOOT_NAMESPACE, "%s/boot/%s" % (seed, state.get("boot_id", 1))))


def _stamps(log):
    """The log's timestamps, one per line (a log written before they were kept gets the clock's, in order)."""
    stamps = list(log.get("ts") or [])
    while len(stamps) < len(log["lines"]):
        stamps.append(stamps[-1] + _LOG_STEP_TS if stamps else _LOG_FIRST_TS)
    return stamps[:len(log["lines"])]


def kernel_log_timed(state):
    """This boot's simulated kernel log with monotonic timestamps, in _xid.read_kernel_log_timed's shape, and the boot
    id: {"readable", "source", "oldest", "lines": [[seconds, text]], "boot_id"}. The oldest line the log still has is
    the boot's first (0.0 s) until ``rotate_kernel_log`` drops lines."""
    log = state.get("kernel_log") or {"readable": True, "lines": []}
    if not log.get("readable", True):
        answer = dict(kernel_log(state), oldest=None)
    else:
        stamps = _stamps(dict(log, lines=list(log.get("lines") or [])))
        answer = {"readable": True, "source": "simulated", "oldest": log.get("oldest", 0.0),
                  "lines": [[ts, line] for ts, line in zip(stamps, log.get("lines") or [])]}
    answer["boot_id"] = boot_id(state)
    return answer


def rotate_kernel_log(state, count):
    """Test hook: the kernel log drops its ``count`` oldest lines (journald's vacuum, dmesg's ring buffer wrapping);
    the oldest line it still has is then the first one left (or just after the last one dropped)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise GpuBackendError("rotate needs a whole number of lines, 1 or more; got %r" % (count,))
    log = state.setdefault("kernel_log", {"readable": True, "lines": []})
    stamps = _stamps(log)
    dropped = stamps[:count]
    log["lines"], log["ts"] = log["lines"][count:], stamps[count:]
    if log["ts"]:
        log["oldest"] = log["ts"][0]
    elif dropped:
        log["oldest"] = dropped[-1] + 0.000001


def add_xid(state, gpu, code, message, pid=None, ts=None):
    """A driver Xid line for ``gpu`` in this boot's simulated kernel log, in the driver's own form, at ``ts`` seconds
    after boot (default: the log's clock, after its last line)."""
    if isinstance(code, bool) or not isinstance(code, int) or code < 1:
        raise GpuBackendError("an Xid code is a whole number, 1 or more; got %r" % (code,))
    domain, bus, device = gpu["pci_bus_id"].split(":")[0], gpu["pci_bus_id"].split(":")[1], \
        gpu["pci_bus_id"].split(":")[2].split(".")[0]
    head = "NVRM: Xid (PCI:%04x:%s:%s): %d, " % (int(domain, 16), bus.lower(), device.lower(), code)
    if pid is not None:
        head += "pid=%d, " % int(pid)
    return _append_line(state, head + (message or "simulated Xid %d" % code), ts, "an Xid's")


def _append_line(state, line, ts, what):
    """``line`` appended to this boot's simulated kernel log at ``ts`` seconds after boot (None: the log's clock, after
    its last line); returns it."""
    log = state.setdefault("kernel_log", {"readable": True, "lines": []})
    stamps = _stamps(log)
    if ts is None:
        ts = stamps[-1] + _LOG_STEP_TS if stamps else _LOG_FIRST_TS
    elif isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0 or (stamps and ts < stamps[-1]):
        raise GpuBackendError("%s timestamp is seconds after boot, not before the log's last line (%s); got %r"
                              % (what, stamps[-1] if stamps else 0, ts))
    log["lines"].append(line)
    log["ts"] = stamps + [float(ts)]
    return line


_SWITCH_BUS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def add_sxid(state, switch, bus_id, code, fatal, message=None, link=None, ts=None):
    """An NVSwitch driver's SXid event in this boot's simulated kernel log, in the driver's own form (NVIDIA's
    nvidia-nvswitch driver: the event line ``nvidia-nvswitch<switch>: SXid (PCI:<bus_id>): <code>, Fatal|Non-fatal,
    Link <link> <message>``, then its ``Severity`` and ``Data`` detail lines with the same code, as a real HGX H100
    logs them: _xid.parse_sxid_line's docstring), at ``ts`` seconds after boot (default: the log's clock). Returns the
    event line. ``switch``: the NVSwitch's number (0 or more); ``bus_id``: its PCI address (``0000:05:00.0``)."""
    if isinstance(switch, bool) or not isinstance(switch, int) or switch < 0:
        raise GpuBackendError("an NVSwitch number is a whole number, 0 or more; got %r" % (switch,))
    if not isinstance(bus_id, str) or not _SWITCH_BUS.match(bus_id):
        raise GpuBackendError("an NVSwitch's bus id is a PCI address such as 0000:05:00.0; got %r" % (bus_id,))
    if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 999999:
        raise GpuBackendError("an SXid code is a whole number from 1 to 999999; got %r" % (code,))
    if link is not None and (isinstance(link, bool) or not isinstance(link, int) or link < 0):
        raise GpuBackendError("an NVSwitch link is a whole number, 0 or more, or None; got %r" % (link,))
    head = "nvidia-nvswitch%d: SXid (PCI:%s): %d, " % (switch, bus_id.lower(), code)
    text = (message or "simulated SXid %d" % code)
    event = head + ("Fatal" if fatal else "Non-fatal") + ", " + ("Link %d " % link if link is not None else "") + text
    line = _append_line(state, event, ts, "an SXid's")
    stamp = state["kernel_log"]["ts"][-1]
    _append_line(state, head + "Severity %d Engine instance %d Sub-engine instance 00" % (
        1 if fatal else 0, link or 0), stamp, "an SXid's")
    _append_line(state, head + "Data {0x%08x, 0x%08x}" % (link or 0, code), stamp, "an SXid's")
    return line


def set_kernel_log_readable(state, readable):
    state.setdefault("kernel_log", {"readable": True, "lines": []})["readable"] = bool(readable)


def after_reset(gpu):
    """A GPU reset: a pending row remap (or page retirement) takes effect - the row is remapped, so ``pending`` is
    cleared and the counts (which include the pending row) stay, as nvml.h says of nvmlDeviceGetRemappedRows'
    ``isPending``: "A reset will be required to actually remap the row" (NVIDIA/go-nvml@2f9e261:gen/nvml/nvml.h) - and
    the volatile ECC counts start again. A lost GPU cannot be reset (its reset fails GPU_IS_LOST before this)."""
    stored = gpu.get("health")
    if not stored:
        return
    stored["remapped_rows"]["pending"] = False
    stored["retired_pages"]["pending"] = False
    stored["ecc"]["volatile"] = {"corrected": 0, "uncorrected": 0}


def after_reboot(state):
    """A reboot: each GPU as after a reset, a lost or missing GPU back (initialised again), and a new boot's empty
    kernel log. Hardware faults (a degraded PCIe link, a link down, a failed remap, a fabric fault) stay until the test
    clears them."""
    for gpu in state["gpus"]:
        after_reset(gpu)
        if gpu.get("health"):
            gpu["health"]["lost"] = False
            gpu["health"]["missing"] = False
            gpu["health"]["hang"] = False
    if "kernel_log" in state:
        state["kernel_log"]["lines"] = []
        state["kernel_log"]["ts"] = []
        state["kernel_log"].pop("oldest", None)
