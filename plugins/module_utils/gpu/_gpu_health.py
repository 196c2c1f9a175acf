# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health: the shape of a health read, the findings it holds, and the policy that says which findings block a node's
release. Pure: no I/O (the read is each backend's ``read_health``; the kernel log's Xid lines are parsed by ``_xid``).

A health read (both backends return it) is {"backend", "gpus": [per GPU], "kernel_log": {"readable", "source", "reason",
"lines" (its Xid and SXid lines: ``_sxid_findings``)}, "pci": the GPUs the PCI bus shows (``_pci.bus_gpus``:
{"readable", "root", "gpus": [{"bus_id", "name", "bound_driver"}], "reason"}), or None where the node's PCI bus is not
read (a simulator without a modelled host), "dcgm": where the user asked for DCGM's diagnostic, ``_dcgm.run_diag``'s
answer (else absent or None), and, from a read with a deadline (``_health_deadline``), "unresponsive": [{"gpu",
"bus_id", "bus_id_source", "seconds"}] (the GPUs NVML did not answer for in time) and "nvml_unresponsive": None or
{"seconds", "not_read": [the GPU indexes left unread]} (NVML's start or its GPU count did not answer)}. A GPU the bus
shows and NVML does not list is the node finding ``gpu_missing`` (``missing_gpus``).
A GPU's entry holds "index", "uuid", "name", "pci_bus_id", "architecture" and, unless NVML answered GPU_IS_LOST
("lost": true, "error"), these fields; a field whose NVML call answered NOT_SUPPORTED holds ``NOT_SUPPORTED`` instead of
its value (the NVML call behind each field is named in docs/health.md):
- "ecc": {"mode_current", "mode_pending" ("Enabled"/"Disabled"), "volatile"/"aggregate": {"corrected", "uncorrected"}}
- "retired_pages": {"single_bit", "double_bit", "pending"} (before Ampere; Ampere and later answer NOT_SUPPORTED)
- "remapped_rows": {"corrected", "uncorrected", "pending", "failure"} (Ampere and later)
- "nvlink": [{"link", "active", "errors": {"replay", "recovery", "crc_flit", "crc_data"}}]
- "pcie": {"generation": {"current", "max", "gpu_max"}, "width": {"current", "max"}}
- "clock_events": {"mask" ("0x..."), "reasons": [names, ``CLOCK_EVENT_REASONS``]}
- "temperature_c"
- "fabric": {"state", "status", "degraded_bandwidth"}
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import findings as burn_in_findings
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import summary as burn_in_summary
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._dcgm import describe as dcgm_describe
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._dcgm import failed as dcgm_failed
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._pci import sysfs_bus_id
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._xid import (
    bus_key, parse_sxid_line, sxid_events, xid_events)

NOT_SUPPORTED = "not supported"

# nvmlClocksEventReason* bits (nvml.h; pynvml of nvidia-ml-py 13.615.71 names the same values), in bit order.
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)
CLOCK_EVENT_BITS = dict((name, bit) for bit, name in CLOCK_EVENT_REASONS)
HW_SLOWDOWN_REASONS = ("hw_slowdown", "hw_power_brake_slowdown")
THERMAL_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown")

# nvmlGpuFabricState_t: 0 NOT_SUPPORTED (recorded as NOT_SUPPORTED), 1..3 below.
FABRIC_STATES = {1: "not_started", 2: "in_progress", 3: "completed"}

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")

ACTIONS = ("block", "warn", "ignore")
GATE_CLEARS = "the gate clears when the next run finds it healthy"

# Finding kind: (default action, what the finding says, what fixes it). The defaults are the (35): a finding that
# makes the GPU's results or its availability untrustworthy blocks; a count that says "watch this GPU" warns.
FINDING_KINDS = {
    "gpu_lost": ("block", "NVML reports the GPU lost (GPU_IS_LOST)",
                 "reboot / reseat the GPU (service it if it stays lost); " + GATE_CLEARS),
    # the fix here is for a GPU the nvidia driver holds; _missing_fix words it for an unbound one or another driver's
    "gpu_missing": ("block", "on the PCI bus but not listed by NVML",
                    "it fell off the bus or failed to initialise (look for its Xid 79 or an RmInitAdapter failure in "
                    "the kernel log): reboot, and reseat or service the GPU if it stays missing; " + GATE_CLEARS),
    "row_remap_pending": ("block", "remapped rows pending", "reset the GPU or reboot; " + GATE_CLEARS),
    "row_remap_failure": ("block", "row remapping failed", "the GPU needs service (RMA); " + GATE_CLEARS),
    "retired_pages_pending": ("block", "page retirement pending",
                              "reset the GPU or reboot to retire the pages; " + GATE_CLEARS),
    "ecc_uncorrected_volatile": ("block", "uncorrected ECC errors since the last reset",
                                 "reset the GPU or reboot, then check its remapped rows; " + GATE_CLEARS),
    "xid_fatal": ("block", "a fatal Xid since boot", "do what NVIDIA's Xid catalog says for it"),
    # a fatal NVSwitch SXid (_xid.classify_sxid: the line says Fatal, or NVIDIA's Fabric Manager guide lists the code as
    # always fatal): a node finding, since the NVSwitch serves every GPU of the baseboard; a non-fatal one is none
    "sxid_fatal": ("block", "a fatal NVSwitch SXid since boot",
                   "reboot the node (or reset the NVSwitches and GPUs), as NVIDIA's Fabric Manager guide says"),
    "fabric_incomplete": ("block", "NVLink fabric registration not completed",
                          "check nvidia-fabricmanager on this node and the NVSwitches; " + GATE_CLEARS),
    "nvlink_down": ("block", "an NVLink is down", "reset the GPU or reboot; if it stays down, check the link; "
                    + GATE_CLEARS),
    "pcie_generation_degraded": ("block", "PCIe link below its maximum generation",
                                 "reseat the GPU or check its riser and slot, then reboot; " + GATE_CLEARS),
    "pcie_width_degraded": ("block", "PCIe link narrower than its maximum width",
                            "reseat the GPU or check its riser and slot, then reboot; " + GATE_CLEARS),
    "ecc_uncorrected_aggregate": ("warn", "uncorrected ECC errors over the GPU's life",
                                  "watch the GPU's remapped rows; service it if they keep growing"),
    "ecc_corrected": ("warn", "corrected ECC errors", "watch the GPU; no action needed while rows remap"),
    "ecc_disabled": ("warn", "ECC is disabled", "enable ECC (nvidia-smi -e 1) and reset the GPU"),
    "remapped_rows": ("warn", "rows already remapped", "none while no remap is pending or failed; watch the count"),
    "retired_pages": ("warn", "pages already retired", "none while no retirement is pending; watch the count"),
    "nvlink_errors": ("warn", "NVLink error counters above zero", "watch the link; reseat or service it if they grow"),
    "fabric_degraded": ("warn", "NVLink fabric bandwidth degraded", "check the NVSwitches and the GPU's links"),
    "hw_slowdown": ("warn", "hardware clock slowdown active", "check the GPU's power supply and cooling"),
    "thermal_slowdown": ("warn", "thermal clock slowdown active", "check the GPU's cooling"),
    "xid_gpu": ("warn", "a GPU or driver Xid since boot that needs no reset", "see NVIDIA's Xid catalog for it"),
    "xid_application": ("warn", "an application's Xid since boot", "the application's fault: check the application"),
    # DCGM's quick diagnostic (dcgmi diag -r 1, optional; _dcgm): a failed test blocks, a result whose errors DCGM rates
    # NONE or MONITOR ("can perform workload, but needs to be monitored") warns, a diagnostic that could not run warns
    "dcgm_diag_failure": ("block", "DCGM's diagnostic failed a test",
                          "act on DCGM's error (its id is in the DCGM error table), then run the diagnostic again; "
                          + GATE_CLEARS),
    "dcgm_diag_warning": ("warn", "DCGM's diagnostic warns", "watch the GPU; DCGM says it can run work"),
    "dcgm_diag_error": ("warn", "DCGM's diagnostic could not run",
                        "check nv-hostengine and dcgmi on this node, or turn the diagnostic off"),
    # the node's burn-in (_burn_in: dcgmi diag at the declared level, recorded on the node): a failed burn-in keeps the
    # node out until a burn-in passes (the next run of gpu_node burns in again)
    "burn_in_failure": ("block", "the node's burn-in failed a test",
                        "act on DCGM's error, then run gpu_node again (it burns the node in again); the gate clears "
                        "when a burn-in passes"),
    "burn_in_warning": ("warn", "the node's burn-in warns", "watch the GPU; DCGM says it can run work"),
    "burn_in_unreadable": ("warn", "the node's burn-in record cannot be read",
                           "run gpu_node again: it burns the node in again and writes the record"),
    "kernel_log_unreadable": ("warn", "the kernel log could not be read, so Xid events are not known",
                              "let the collection read journalctl -k or dmesg on this node"),
    # the health read with a deadline (_health_deadline, gpu_health_read): a GPU or the node's NVML that never answers
    # (a hung GPU or driver) is a finding, never a hung job. Xid 79 (fallen off the bus), 119 and 120 (GSP timeout,
    # GSP error) are the usual companions in the kernel log (NVIDIA's Xid catalog).
    "gpu_unresponsive": ("block", "NVML did not answer for this GPU within the deadline",
                         "the GPU needs a reset, or the node a reboot (look for Xid 79, 119 or 120 in the kernel log); "
                         + GATE_CLEARS),
    "nvml_unresponsive": ("block", "NVML did not answer (its start or the GPU count) within the deadline",
                          "the node needs a reboot (look for Xid 79, 119 or 120 in the kernel log); " + GATE_CLEARS),
}
DEFAULT_POLICY = dict((kind, entry[0]) for kind, entry in FINDING_KINDS.items())
# Blocking findings that a GPU reset clears where the GPU is idle: a pending row remap is applied at the next GPU reset
# (NVIDIA, GPU Memory Error Management, "Error Recovery and Response Flags":
# https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html; nvml.h,
# nvmlDeviceGetRemappedRows), as a pending page retirement is before Ampere (NVIDIA, Dynamic Page Retirement,
# https://docs.nvidia.com/deploy/dynamic-page-retirement/). The gate's optional remediation (not built yet)
# would reset such GPUs and read them again.
RESET_CLEARS = ("row_remap_pending", "retired_pages_pending")
# A PCI address as NVML writes it (the node_health module takes no other): an Xid's bus id of no GPU is left out.
_NVML_BUS_ID = re.compile(r"^(?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


class HealthPolicyError(ValueError):
    """A health policy that is not a mapping of known finding kinds to block, warn or ignore."""


def decode_clock_events(mask):
    """NVML's clock event reason bitmask -> {"mask": "0x...", "reasons": [names of the set bits]} (unknown bits named
    "bit_0x...")."""
    reasons = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, dummy in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            reasons.append("bit_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return {"mask": "0x%016x" % mask, "reasons": reasons}


def encode_clock_events(reasons):
    """The bitmask of clock event reason names (the simulator keeps names; NVML answers a mask)."""
    mask = 0
    for name in reasons:
        mask |= CLOCK_EVENT_BITS[name]
    return mask


def _supported(value):
    return value is not None and value != NOT_SUPPORTED


def _count(section, key):
    if not isinstance(section, dict):
        return 0
    value = section.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def gpu_findings(gpu):
    """(kind, detail) pairs for one GPU's health entry."""
    out = []
    if gpu.get("lost"):
        return [("gpu_lost", gpu.get("error") or "")]
    ecc = gpu.get("ecc")
    if isinstance(ecc, dict):
        if ecc.get("mode_current") == "Disabled":
            out.append(("ecc_disabled", "ECC mode %s, pending %s" % (ecc.get("mode_current"), ecc.get("mode_pending"))))
        volatile, aggregate = ecc.get("volatile"), ecc.get("aggregate")
        if _count(volatile, "uncorrected"):
            out.append(("ecc_uncorrected_volatile", "%d uncorrected (volatile)" % _count(volatile, "uncorrected")))
        if _count(aggregate, "uncorrected"):
            out.append(("ecc_uncorrected_aggregate", "%d uncorrected (aggregate)" % _count(aggregate, "uncorrected")))
        sections = (("volatile", volatile), ("aggregate", aggregate))
        corrected = [(name, _count(section, "corrected")) for name, section in sections]
        if any(n for dummy, n in corrected):
            out.append(("ecc_corrected", ", ".join("%d %s" % (n, name) for name, n in corrected)))
    pages = gpu.get("retired_pages")
    if isinstance(pages, dict):
        if pages.get("pending") is True:
            out.append(("retired_pages_pending", ""))
        if _count(pages, "single_bit") or _count(pages, "double_bit"):
            out.append(("retired_pages", "%d single-bit, %d double-bit" % (
                _count(pages, "single_bit"), _count(pages, "double_bit"))))
    rows = gpu.get("remapped_rows")
    if isinstance(rows, dict):
        if rows.get("pending") is True:
            out.append(("row_remap_pending", ""))
        if rows.get("failure") is True:
            out.append(("row_remap_failure", ""))
        if _count(rows, "corrected") or _count(rows, "uncorrected"):
            out.append(("remapped_rows", "%d for corrected, %d for uncorrected errors" % (
                _count(rows, "corrected"), _count(rows, "uncorrected"))))
    links = gpu.get("nvlink")
    if isinstance(links, list):
        down = [link["link"] for link in links if link.get("active") is False]
        if down:
            plural = "s" if len(down) > 1 else ""
            out.append(("nvlink_down", "link%s %s inactive" % (plural, ", ".join(str(n) for n in down))))
        noisy = []
        for link in links:
            counts = ["%s %d" % (name, _count(link.get("errors"), name)) for name in NVLINK_COUNTERS
                      if _count(link.get("errors"), name)]
            if counts:
                noisy.append("link %d: %s" % (link["link"], ", ".join(counts)))
        if noisy:
            out.append(("nvlink_errors", "; ".join(noisy)))
    pcie = gpu.get("pcie")
    if isinstance(pcie, dict):
        for kind, key, unit in (("pcie_generation_degraded", "generation", "Gen%s"),
                                ("pcie_width_degraded", "width", "x%s")):
            section = pcie.get(key)
            if not isinstance(section, dict):
                continue
            current, best = section.get("current"), section.get("max")
            if _supported(current) and _supported(best) and current < best:
                out.append((kind, "%s, max %s" % (unit % current, unit % best)))
    events = gpu.get("clock_events")
    if isinstance(events, dict):
        reasons = events.get("reasons") or []
        hardware = [r for r in reasons if r in HW_SLOWDOWN_REASONS]
        thermal = [r for r in reasons if r in THERMAL_REASONS]
        temperature = gpu.get("temperature_c")
        heat = (" at %s C" % temperature) if _supported(temperature) else ""
        if hardware:
            out.append(("hw_slowdown", ", ".join(hardware) + heat))
        if thermal:
            out.append(("thermal_slowdown", ", ".join(thermal) + heat))
    fabric = gpu.get("fabric")
    if isinstance(fabric, dict):
        if fabric.get("state") != "completed" or fabric.get("status") not in (None, "SUCCESS"):
            out.append(("fabric_incomplete", "state %s, status %s" % (fabric.get("state"), fabric.get("status"))))
        if fabric.get("degraded_bandwidth") is True:
            out.append(("fabric_degraded", "the fabric reports degraded bandwidth"))
    return out


def missing_gpus(health):
    """The GPUs the PCI bus shows (the read's "pci") that NVML does not list, by bus id (NVML's 00000000:47:00.0 and
    sysfs's 0000:47:00.0 are the same function): [{"bus_id", "name", "bound_driver"}]. None are missing where the bus
    was not read or could not be. A GPU NVML lists as lost without its bus id (its PCI info answered GPU_IS_LOST too)
    may be one of those the bus shows: while no more GPUs are unmatched than such lost entries, none is missing (the
    lost GPU is its own finding)."""
    pci = health.get("pci")
    if not isinstance(pci, dict) or not pci.get("readable") or health.get("nvml_unresponsive"):
        return []
    gpus = _nvml_gpus(health)
    listed = set(sysfs_bus_id(g.get("pci_bus_id")) for g in gpus)
    unnamed = len([g for g in gpus if sysfs_bus_id(g.get("pci_bus_id")) is None])
    missing = [dict(g) for g in pci.get("gpus") or [] if sysfs_bus_id(g.get("bus_id")) not in listed]
    return missing if len(missing) > unnamed else []


def _nvml_gpus(health):
    """The GPUs NVML lists: those it read, and those it did not answer for in time (by their bus id where known)."""
    return list(health.get("gpus") or []) + [{"index": g.get("gpu"), "pci_bus_id": g.get("bus_id")}
                                             for g in health.get("unresponsive") or []]


def _unresponsive_findings(health):
    out = []
    for gpu in health.get("unresponsive") or []:
        where = {"pci": "bus id from the PCI bus: the one GPU there NVML did not answer for",
                 "nvml": "bus id as NVML named it before the read stopped answering"}.get(gpu.get("bus_id_source"),
                                                                                          "bus id not known")
        out.append(_finding("gpu_unresponsive", gpu.get("gpu"), gpu.get("bus_id"),
                            "no answer to the health read within the deadline of %s s; %s" % (
                                _seconds(gpu.get("seconds")), where)))
    stuck = health.get("nvml_unresponsive")
    if stuck:
        unread = stuck.get("not_read")
        out.append(_finding("nvml_unresponsive", None, None, "no answer within the deadline of %s s%s" % (
            _seconds(stuck.get("seconds")),
            "; GPUs not read: %s" % ", ".join(str(i) for i in unread) if unread else
            "; no GPU of this node could be read")))
    return out


def _seconds(value):
    return ("%g" % value) if isinstance(value, (int, float)) else str(value)


def _missing_fix(gpu):
    driver = gpu.get("bound_driver")
    if driver == "nvidia":
        return None
    if not driver:
        return "no driver is bound to it, so the nvidia driver did not take it (look for NVRM errors naming its bus " \
               "id in the kernel log): reboot, and reseat or service the GPU if it stays missing; " + GATE_CLEARS
    return "it is bound to %s, not nvidia: bind it to nvidia, or where it is passed to a VM on purpose set " \
           "gpu_missing to warn or ignore for this group; %s" % (driver, GATE_CLEARS)


def _dcgm_findings(diag, gpus):
    """Findings of DCGM's diagnostic: each failed result (a GPU entity is the NVML GPU of the same index, _dcgm's
    docstring says why; another entity, or a GPU id NVML does not list, is a node finding)."""
    if not isinstance(diag, dict):
        return []
    if diag.get("error") or diag.get("runtime_error"):
        return [_finding("dcgm_diag_error", None, None, diag.get("error") or diag.get("runtime_error"))]
    by_index = dict((g.get("index"), g) for g in gpus)
    out = []
    for result in diag.get("results") or []:
        level = dcgm_failed(result)
        if level is None:
            continue
        gpu = by_index.get(result["entity_id"]) if result["entity_group"] == "GPU" else None
        detail = dcgm_describe(result)
        if gpu is None and result["entity_group"]:
            detail += " (DCGM entity %s %s)" % (result["entity_group"], result["entity_id"])
        out.append(_finding("dcgm_diag_" + level, gpu.get("index") if gpu else None,
                            gpu.get("pci_bus_id") if gpu else None, detail))
    return out


def xid_kind(event):
    """The finding kind of an Xid event (``_xid.classify``'s "fatal" and "cause"): xid_fatal, xid_application or
    xid_gpu."""
    if event["fatal"]:
        return "xid_fatal"
    return "xid_application" if event["cause"] == "application" else "xid_gpu"


def _xid_detail(event):
    name = event["mnemonic"] or "unknown code"
    who = ""
    if event.get("pid") is not None or event.get("process"):
        who = " (pid %s%s)" % (event.get("pid"), ", " + event["process"] if event.get("process") else "")
    action = (" - NVIDIA: %s" % event["action"]) if event.get("action") else ""
    return "Xid %d %s: %s%s%s" % (event["code"], name, event["message"] or event["description"], who, action)


def findings(health):
    """Every finding of a health read: [{"kind", "gpu" (index or None for the node), "pci_bus_id", "detail", "fix",
    "summary"}], in ``order_key``'s order. Xid events are deduplicated per GPU and code (the first line of each is
    kept, with how many times it was logged); an Xid on the bus of a GPU NVML does not list is that GPU's (its bus id
    as sysfs writes it, next to its gpu_missing finding), not a bus of no GPU."""
    out = _unresponsive_findings(health)
    gpus = health.get("gpus") or []
    for gpu in gpus:
        for kind, detail in gpu_findings(gpu):
            out.append(_finding(kind, gpu.get("index"), gpu.get("pci_bus_id"), detail))
    for gpu in missing_gpus(health):
        detail = "%s, %s" % (gpu.get("name") or "a GPU the catalog does not name",
                             "driver %s" % gpu["bound_driver"] if gpu.get("bound_driver") else "no driver bound")
        out.append(_finding("gpu_missing", None, sysfs_bus_id(gpu["bus_id"]), detail, _missing_fix(gpu)))
    out.extend(_dcgm_findings(health.get("dcgm"), gpus))
    by_index = dict((g.get("index"), g) for g in gpus)
    for kind, index, detail in burn_in_findings(health.get("burn_in")):
        gpu = by_index.get(index)
        out.append(_finding(kind, index if gpu else None, gpu.get("pci_bus_id") if gpu else None,
                            detail if gpu or index is None else "%s (GPU %s, not listed now)" % (detail, index)))
    log = health.get("kernel_log") or {}
    if not log.get("readable"):
        # (the lines of an unreadable log are none, but for a sweep's Xid events kept from this boot's earlier reads)
        out.append(_finding("kernel_log_unreadable", None, None, log.get("reason") or "kernel log not readable"))
    unlisted = _unlisted_gpus(health)
    seen = {}
    for event in xid_events(log.get("lines") or [], [g for g in _nvml_gpus(health) if g.get("index") is not None]):
        if event["gpu"] is None and bus_key(event["pci_bus_id"]) in unlisted:
            # the GPU the bus shows there and NVML does not list (the one that fell off): its finding's bus id
            event["pci_bus_id"], event["unlisted"] = unlisted[bus_key(event["pci_bus_id"])]
        key = (event["gpu"], event["pci_bus_id"], event["code"])
        if key in seen:
            seen[key]["times"] += 1
            continue
        kind = xid_kind(event)
        fix = event["recommended"]
        if kind == "xid_fatal":
            fix += "; the Xid stays in this boot's kernel log, so the gate clears after a reboot (or set xid_fatal to " \
                   "warn once it is dealt with)"
        finding = _finding(kind, event["gpu"], event["pci_bus_id"], _xid_detail(event), fix)
        finding["xid"] = {"code": event["code"], "mnemonic": event["mnemonic"], "cause": event["cause"],
                          "action": event["action"], "recommended": event["recommended"], "line": event["line"]}
        finding["times"] = 1
        if event.get("unlisted"):
            finding["detail"] += " (%s)" % event["unlisted"]
            finding["gpu_at_bus"] = True
        elif event["gpu"] is None:
            finding["detail"] += " (no GPU of this node has that bus id)"
        seen[key] = finding
        out.append(finding)
    out.extend(_sxid_findings(log.get("lines") or []))
    for finding in out:
        if finding.get("times", 1) > 1:
            finding["detail"] += " (logged %d times)" % finding["times"]
    return _ordered(out)


def _sxid_findings(lines):
    """The node findings (``sxid_fatal``) of the fatal SXid lines among ``lines``, one per NVSwitch and code (with how
    many times it was logged). The finding names the switch and its bus id in its detail and names no PCI address of
    its own: the address a finding carries is a GPU's, and the NVSwitch serves every GPU of the baseboard."""
    seen, out = {}, []
    for event in sxid_events(lines):
        if not event["fatal"]:
            continue
        key = (event["bus_id"], event["code"])
        if key in seen:
            seen[key]["times"] += 1
            continue
        detail = "%s (PCI:%s) SXid %d: %s (%s)" % (
            event["switch"], event["bus_id"], event["code"], event["message"] or "no message",
            "always fatal to the NVSwitch fabric" if event["scope"] == "fabric" else "logged Fatal by the driver")
        fix = event["recommended"] + "; the SXid stays in this boot's kernel log, so the gate clears after a reboot " \
                                     "(or set sxid_fatal to warn once it is dealt with)"
        finding = _finding("sxid_fatal", None, None, detail, fix)
        finding["sxid"] = {"switch": event["switch"], "bus_id": event["bus_id"], "code": event["code"],
                           "link": event["link"], "scope": event["scope"], "line": event["line"]}
        finding["times"] = 1
        seen[key] = finding
        out.append(finding)
    return out


def _unlisted_gpus(health):
    """The GPUs the PCI bus shows and NVML does not list by bus id, by ``_xid.bus_key``: (their bus id as sysfs writes
    it, what an Xid naming that bus says of its GPU). Each is a missing GPU (``missing_gpus``), or, where NVML lists
    GPUs lost without a bus id and the bus shows no more unmatched GPUs than those, one of the lost GPUs."""
    pci = health.get("pci")
    if not isinstance(pci, dict) or not pci.get("readable"):
        return {}
    missing = set(sysfs_bus_id(g.get("bus_id")) for g in missing_gpus(health))
    listed = set(sysfs_bus_id(g.get("pci_bus_id")) for g in _nvml_gpus(health))
    out = {}
    for gpu in pci.get("gpus") or []:
        bus_id = sysfs_bus_id(gpu.get("bus_id"))
        if bus_id is None or bus_id in listed:
            continue
        out[bus_key(bus_id)] = (bus_id, "the GPU at that bus, which NVML no longer lists" if bus_id in missing else
                                "the GPU at that bus, which NVML lists only as a lost GPU without its bus id")
    return out


def order_key(gpu, bus_id):
    """The one order of a node's findings, which every consumer keeps (the verdict's lists, the run's message, the Node
    condition's reason, message and taint): a GPU's findings by its index, then the findings of a GPU NVML does not
    list and other node findings naming a PCI address, by that address (a missing GPU's Xid beside the finding that
    says it is missing), then those naming no address. Sorted stably: one GPU's or one address's findings stay in the
    read's order (a missing GPU first, then its Xid lines as the kernel logged them). ``bus_id``: NVML's or sysfs's
    form; any other text (an Xid line's bus of no GPU) names no address."""
    bus = sysfs_bus_id(bus_id)
    return (gpu is None, gpu if gpu is not None else 0, bus is None, bus or "")


def _ordered(found):
    return [_summarize(f) for f in sorted(found, key=lambda f: order_key(f["gpu"], f["pci_bus_id"]))]


def _finding(kind, index, bus_id, detail, fix=None):
    dummy, words, default_fix = FINDING_KINDS[kind]
    fix = fix or default_fix
    return {"kind": kind, "gpu": index, "pci_bus_id": bus_id, "words": words, "detail": detail, "fix": fix}


def _summarize(finding):
    """The line a user reads: "GPU 3 (00000000:47:00.0): remapped rows pending (...) - reset the GPU or reboot; ..."."""
    index, bus_id = finding["gpu"], finding["pci_bus_id"]
    at_gpu = finding.pop("gpu_at_bus", False) or finding["kind"] == "gpu_missing"
    who = "node" if index is None else "GPU %d (%s)" % (index, bus_id or "bus id unknown")
    if index is None and bus_id:
        who = ("GPU (PCI %s)" if at_gpu else "node (PCI %s)") % bus_id
    finding["summary"] = "%s: %s%s - %s" % (who, finding.pop("words"),
                                            (" (%s)" % finding["detail"]) if finding["detail"] else "", finding["fix"])
    return finding


def validate_policy(policy):
    """A user's policy ({kind: block|warn|ignore}, None for the defaults) merged over ``DEFAULT_POLICY``; raises
    HealthPolicyError naming the bad key or value and the valid ones."""
    if policy is None:
        return dict(DEFAULT_POLICY)
    if not isinstance(policy, dict):
        raise HealthPolicyError("the health policy must be a mapping of finding kind to block, warn or ignore; got %s"
                                % type(policy).__name__)
    merged = dict(DEFAULT_POLICY)
    for kind in sorted(policy, key=str):
        if kind not in FINDING_KINDS:
            raise HealthPolicyError("unknown health finding kind %r in the health policy; valid kinds: %s" % (
                kind, ", ".join(sorted(FINDING_KINDS))))
        action = policy[kind]
        if not isinstance(action, str) or action not in ACTIONS:
            raise HealthPolicyError("health policy %s: %r is not one of %s" % (kind, action, ", ".join(ACTIONS)))
        merged[kind] = action
    return merged


def verdict(found, policy=None):
    """The policy applied to ``findings``: {"verdict": "block"|"warn"|"pass", "healthy" (nothing blocks),
    "blocking": [summaries], "warnings": [summaries], "findings": [each finding with its "action"]}. ``policy`` is
    validated (HealthPolicyError)."""
    merged = validate_policy(policy)
    decided = []
    for finding in found:
        item = dict(finding)
        item["action"] = merged[finding["kind"]]
        decided.append(item)
    blocking = [f["summary"] for f in decided if f["action"] == "block"]
    warnings = [f["summary"] for f in decided if f["action"] == "warn"]
    return {"verdict": "block" if blocking else ("warn" if warnings else "pass"), "healthy": not blocking,
            "blocking": blocking, "warnings": warnings, "findings": decided}


def _gate_finding(finding):
    bus_id = finding["pci_bus_id"]
    return {"gpu": finding["gpu"], "bus_id": bus_id if isinstance(bus_id, str) and _NVML_BUS_ID.match(bus_id) else None,
            "kind": finding["kind"], "message": finding["summary"]}


def gate(decided):
    """The verdict as the gate hands it to the node_health module ({"healthy", "blocking", "warnings"}, each finding
    {"gpu", "bus_id", "kind", "message"}), and ``reset_clears``: the GPUs (indexes) with a blocking finding that a
    GPU reset clears (``RESET_CLEARS``), for the gate's optional remediation. ``decided``: ``verdict``'s findings."""
    blocking = [_gate_finding(f) for f in decided if f["action"] == "block"]
    return {"healthy": not blocking, "blocking": blocking,
            "warnings": [_gate_finding(f) for f in decided if f["action"] == "warn"],
            "reset_clears": sorted(set(f["gpu"] for f in decided if f["action"] == "block" and f["kind"] in RESET_CLEARS
                                       and f["gpu"] is not None))}


def summary(health, policy=None, gpus=True):
    """gpu_info's ``health`` section: the verdict over the read's findings, the gate's form of it (``gate``), the
    kernel log's source, the burn-in record's summary (``burn_in``, _burn_in.summary), and (with ``gpus``) each GPU's
    read fields."""
    result = verdict(findings(health), policy)
    result["gate"] = gate(result["findings"])
    log = health.get("kernel_log") or {}
    result["kernel_log"] = {"readable": bool(log.get("readable")), "source": log.get("source"),
                            "reason": log.get("reason"),
                            "xid_lines": len([line for line in log.get("lines") or []
                                              if parse_sxid_line(line) is None])}
    diag = health.get("dcgm")
    result["dcgm"] = None if not isinstance(diag, dict) else dict(
        (key, diag.get(key)) for key in ("ran", "version", "note", "error", "runtime_error"))
    if isinstance(diag, dict):
        result["dcgm"]["results"] = len(diag.get("results") or [])
    pci = health.get("pci")
    result["pci"] = None if not isinstance(pci, dict) else {
        "readable": bool(pci.get("readable")), "reason": pci.get("reason"),
        "gpus": [g["bus_id"] for g in pci.get("gpus") or []]}
    # the node's burn-in record in short (None: none, or unreadable), which the gate writes onto the Kubernetes Node
    result["burn_in"] = burn_in_summary(health.get("burn_in"))
    if gpus:
        result["gpus"] = health.get("gpus") or []
    return result
