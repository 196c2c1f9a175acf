# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Xid events of this boot: NVIDIA's Xid catalog, a pure parser for the driver's kernel-log lines, and the reader that
gets this boot's kernel log.

The driver writes one line per Xid event to the kernel log, in these forms (real lines, as published):
- ``NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.`` (NVIDIA/open-gpu-kernel-modules issue 1151,
  driver 595; no pid on this one)
- ``NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.``
  (stas00/ml-engineering, compute/accelerator/nvidia/debug.md)
- ``NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on ...``
  (leptonai/gpud, its Xid component's README: dmesg of a driver 5xx node)
- ``NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)``
  (an NVIDIA developer forum report on driver 595.71.05)
- older drivers wrote the bus id without ``PCI:``: ``NVRM: Xid (0000:01:00): 3, C 00000005 ...``.
Lines may carry a prefix (dmesg's ``[ 269.517039]``, syslog's ``Jan 18 11:38:05 host kernel:``); the parser finds the
``NVRM: Xid`` part wherever it is. The bus id is ``domain:bus:device`` without the function; it is matched to NVML's
``00000000:47:00.0`` by the three numbers.

The NVSwitch driver (nvidia-nvswitch) writes SXid lines, one event over several lines with the same code, the bus id
being the NVSwitch's own (with its function); ``parse_sxid_line`` reads them (real lines, as published):
- ``[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt``,
  followed by ``... 22013, Severity 0 Engine instance 44 Sub-engine instance 00`` and
  ``... 22013, Data {0x0000002b, 0x0000002b, ...}`` (NVIDIA/nvtrust issue 124, dmesg of an HGX H100 on driver
  570.195.03)
- ``nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, ...}`` (leptonai/gpud pull
  request 338, a node's dmesg; 12028 is the "egress non-posted PRIV error" of NVIDIA's Fabric Manager user guide)
The line that says ``Fatal`` or ``Non-fatal`` is the event; its ``Severity`` and ``Data`` lines only add detail.

What an SXid means (``classify_sxid``) follows NVIDIA's Fabric Manager user guide, "Error Handling" (release 2.3 of
2025-03-04, https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html, its tables "Non-Fatal
NVSwitch SXid Errors", "Fatal NVSwitch SXid Errors", "Always Fatal NVSwitch SXid Errors" and "Other Notable NVSwitch
SXid Errors"): a fatal SXid stalls the NVLink traffic of the GPUs behind the port (the partition; it reaches the GPU
as an Xid 74 where it applies), and one of the "always fatal" codes is fatal to the whole NVSwitch fabric, which then
needs the host restarted (or every NVSwitch and GPU reset by a secondary bus reset). The driver itself says which event
is fatal: its line reads ``Fatal`` or ``Non-fatal``, as NVIDIA's NVSentinel reads it (its syslog health monitor,
health-monitors/syslog-health-monitor/pkg/sxid/sxid_handler.go). So an SXid is fatal when its line says ``Fatal`` or
its code is one of the guide's always-fatal ones (``SXID_ALWAYS_FATAL``, which also holds 10003, "never expected",
fatal to the fabric); a non-fatal one (single-bit ECC corrected by the switch, a TX replay, 22013 "can be safely
ignored") is reported and makes no finding.

The catalog (``CATALOG``) is NVIDIA's "Xid Catalog" for Ampere and newer GPUs:
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html and its Xid-Catalog.xlsx ("Catalog" sheet), as
published by 2025-10-29 (codes 1-172), read through leptonai/gpud's copy generated from that page
(components/accelerator/nvidia/xid/catalog_generated.go at commit 73e270e3e0fd490ec5c33e144ad894de7d6c4d21). For each
code it keeps NVIDIA's mnemonic, description and "Resolution Bucket (Immediate Action)"; the collection's own
classification (``cause``, ``fatal``) is derived from that action by the rule in ``classify``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# NVIDIA's immediate actions (the catalog's resolution buckets) and what each asks of an operator, in this collection's
# words.
ACTIONS = {
    "RESTART_APP": "restart the application",
    "RESET_GPU": "reset the GPU (or reboot the node)",
    "RESTART_BM": "reboot the node (bare metal)",
    "RESTART_VM": "restart the VM",
    "IGNORE": "no action needed",
    "CONTACT_SUPPORT": "contact NVIDIA support",
    "CHECK_MECHANICALS": "check the GPU's power cables and seating",
    "UPDATE_SWFW": "update the driver and firmware",
    "CHECK_UVM": "check the nvidia-uvm module and the application",
    "WORKFLOW_XID_45": "follow the other Xid this cleanup came with",
    "WORKFLOW_XID_48": "reset the GPU, then check its remapped rows (NVIDIA's Xid 48 workflow)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU, then check its NVLinks (NVIDIA's NVLink error workflow)",
    "WORKFLOW_NVLINK5_ERR": "follow NVIDIA's NVLink5 error decode for this Xid (reset the GPU if fatal)",
    "XID_154": "do what the recovery action in the message says",
    "": "not given by NVIDIA's catalog; treated as needing a GPU reset",
}

# Immediate actions that mean the GPU is not fit to run work until something is done to it.
FATAL_ACTIONS = frozenset(["RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR",
                           "WORKFLOW_NVLINK5_ERR", "CHECK_MECHANICALS", "UPDATE_SWFW", ""])

# Codes whose immediate action is RESTART_APP (or that clean up after an application) and whose investigation NVIDIA
# points at the application or CUDA (CHECK_APP/CUDA, WORKFLOW_XID_13/31), plus 43 and 45: the application's fault.
APPLICATION_CODES = frozenset([11, 13, 25, 31, 32, 43, 45, 69, 80])

# code: (mnemonic, description, immediate action). Codes the catalog marks "Unused" (immediate action CONTACT_SUPPORT,
# no investigation) are left out: they are classified as unknown codes are.
CATALOG = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP"),
    40: ("ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP"),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board",
         "CHECK_MECHANICALS"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP"),
    62: ("PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", "RESTART_APP"),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", "RESTART_APP"),
    72: ("ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", "RESTART_APP"),
    74: ("NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", "RESTART_APP"),
    76: ("ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", "RESTART_APP"),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", "RESTART_APP"),
    78: ("VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP"),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", "RESTART_APP"),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", "RESTART_APP"),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP"),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP"),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", "RESTART_APP"),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", "RESTART_APP"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", "RESTART_APP"),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", "RESTART_APP"),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", "RESTART_APP"),
    99: ("ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", "RESTART_APP"),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", "RESTART_APP"),
    101: ("ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", "RESTART_APP"),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", "RESTART_APP"),
    103: ("ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", "RESTART_APP"),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", "RESTART_APP"),
    105: ("ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", "RESTART_APP"),
    106: ("SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE"),
    108: ("NVLINK_REMOTE_TRANSLATION_ERROR", "NVLink remote translation error", "IGNORE"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU"),
    110: ("SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU"),
    119: ("GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU"),
    120: ("GSP_ERROR", "GSP Error", "RESET_GPU"),
    121: ("C2C_ERROR", "C2C Error", "IGNORE"),
    126: ("ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", "RESTART_APP"),
    127: ("ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", "RESTART_APP"),
    128: ("ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", "RESTART_APP"),
    129: ("ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", "RESTART_APP"),
    130: ("ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", "RESTART_APP"),
    131: ("ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", "RESTART_APP"),
    132: ("ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", "RESTART_APP"),
    133: ("ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", "RESTART_APP"),
    134: ("ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", "RESTART_APP"),
    135: ("ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", "RESTART_APP"),
    136: ("ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU"),
    137: ("NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE"),
    143: ("GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU"),
    144: ("NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM"),
    152: ("ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE"),
    153: ("ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU"),
    156: ("RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE"),
    158: ("GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM"),
    160: ("CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE"),
    # 162-172: the catalog names them but gives no action yet (""): conservative (fatal), except the power-smoothing
    # notices, which say a power feature changed state, not that the GPU is unfit.
    162: ("PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "IGNORE"),
    163: ("PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "IGNORE"),
    164: ("PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "IGNORE"),
    165: ("PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "IGNORE"),
    166: ("NVLINK_SECURE_CRYPTO_ERR", "NVLink traffic before the link was set up for encrypted traffic", ""),
    167: ("PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", ""),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", "Errors found in the write-protected region", ""),
    169: ("SEC2_HALT_ERROR", "Internal micro-controller halt", ""),
    170: ("NVLINK_SECURE_OTHER", "Interrupt seen in confidential-computing mode", ""),
    171: ("UNCORRECTABLE_DRAM_ERROR", "Uncorrectable DRAM error (details of an Xid 48)", ""),
    172: ("UNCORRECTABLE_SRAM_ERROR", "Uncorrectable SRAM error (details of an Xid 48)", ""),
}
# The catalog's ``IGNORE`` for 162-165 above is this collection's reading (no action in the catalog); they are listed
# apart so the docs can say so.
ACTION_NOT_IN_CATALOG = frozenset([162, 163, 164, 165])

# The recovery actions an Xid 154 line names (nvidia-smi's "GPU Recovery Action" values).
_RECOVERY_NONE = re.compile(r"\bto\s+0x0\b", re.IGNORECASE)

_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\):\s*(?P<code>\d{1,5})"
    r"\s*(?:,\s*(?P<rest>.*))?$")
_PID = re.compile(r"^pid=(?:'(?P<q>[^']*)'|(?P<n>[^,\s]*)),\s*(?:name=(?P<name>[^,]*),\s*)?")


def bus_key(bus_id):
    """(domain, bus, device) of a PCI bus id in any of the forms NVML, sysfs or the kernel log write
    (``00000000:47:00.0``, ``0000:47:00.0``, ``0000:47:00``); None when it is not one."""
    match = re.match(r"^\s*([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\s*$", bus_id or "")
    if not match:
        return None
    return tuple(int(part, 16) for part in match.groups())


def classify(code, message=""):
    """What the collection makes of Xid ``code``: {"code", "mnemonic", "description", "action" (NVIDIA's immediate
    action), "recommended" (in words), "cause" ("application", "gpu" or "unknown"), "fatal" (bool)}.

    The rule: a code in ``APPLICATION_CODES`` is the application's (not fatal); any other code in the catalog is the
    GPU's, driver's or hardware's, fatal when its immediate action is one of ``FATAL_ACTIONS``; an Xid 154 is fatal
    unless its message says the recovery action changed to 0x0 (None); a code not in the catalog is unknown and treated
    as fatal (a new driver's code for a hardware fault must not release a node)."""
    entry = CATALOG.get(code)
    if entry is None:
        return {"code": code, "mnemonic": None, "description": "not in NVIDIA's Xid catalog", "action": None,
                "recommended": "check NVIDIA's Xid catalog for this code; reset the GPU or reboot to be safe",
                "cause": "unknown", "fatal": True}
    mnemonic, description, action = entry
    if code in APPLICATION_CODES:
        cause, fatal = "application", False
    elif code == 154:
        cause, fatal = "gpu", not _RECOVERY_NONE.search(message or "")
    else:
        cause, fatal = "gpu", action in FATAL_ACTIONS
    return {"code": code, "mnemonic": mnemonic, "description": description, "action": action or None,
            "recommended": ACTIONS[action], "cause": cause, "fatal": fatal}


def parse_line(line):
    """One kernel-log line -> {"bus_id" (the line's, e.g. "0000:47:00"), "code", "pid", "process", "message"}, or None
    when the line is not an Xid line."""
    match = _LINE.search(line or "")
    if not match:
        return None
    rest = (match.group("rest") or "").strip()
    pid = process = None
    head = _PID.match(rest)
    if head:
        pid_text = head.group("q") if head.group("q") is not None else head.group("n")
        pid = int(pid_text) if pid_text and pid_text.isdigit() else None
        name = head.group("name")
        process = None if name in (None, "", "<unknown>") else name.strip()
        rest = rest[head.end():]
    return {"bus_id": match.group("bus").lower(), "code": int(match.group("code")), "pid": pid, "process": process,
            "message": rest.strip()}


_SXID = re.compile(
    r"(?P<switch>nvidia-nvswitch\d+):\s*SXid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
    r"(?:\.[0-7])?)\):\s*(?P<code>\d{1,6})\s*(?:,\s*(?P<rest>.*))?$")
_SXID_SEVERITY = re.compile(r"^(?P<severity>Fatal|Non-fatal)\s*(?:,\s*(?P<message>.*))?$", re.IGNORECASE)
_SXID_LINK = re.compile(r"\bLink\s+(?P<link>\d+)\b")


# The Fabric Manager user guide's always-fatal SXids (its table "Always Fatal NVSwitch SXid Errors", and 10003 of its
# "Other Notable" table): fatal to the entire NVSwitch fabric, whatever the line's severity word.
SXID_ALWAYS_FATAL = frozenset([10003, 12020, 22003, 22011] + list(range(23001, 23018)))
# Its table "Fatal NVSwitch SXid Errors": fatal to the partition whose GPUs use the port (the driver's line says Fatal).
SXID_FATAL = frozenset([11001, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12022, 12024, 12025, 12026, 12027,
                        12030, 12031, 12032, 14017, 15001, 15006, 15009, 15010, 15012, 15013, 19047, 19048, 19054,
                        19056, 19058, 19060, 19061, 19063, 19064, 19066, 19067, 19069, 19070, 20034, 22012, 24004,
                        24005, 24006, 24007])


def classify_sxid(code, fatal):
    """What the collection makes of SXid ``code`` whose line says ``fatal`` (True: ``Fatal``, False: ``Non-fatal``):
    {"code", "fatal" (bool), "scope" ("fabric" for an always-fatal code, "partition" for another fatal one, None for a
    non-fatal one), "recommended" (in words)}. Fatal when the line says so or the code is always fatal (the module's
    docstring gives NVIDIA's source); a line without its severity word (``fatal`` None) is fatal when the guide lists
    its code as fatal."""
    if fatal is None:
        fatal = code in SXID_FATAL
    if code in SXID_ALWAYS_FATAL:
        return {"code": code, "fatal": True, "scope": "fabric",
                "recommended": "fatal to the whole NVSwitch fabric: reboot the node (or reset every NVSwitch and GPU), "
                               "as NVIDIA's Fabric Manager guide says for an always-fatal SXid"}
    if fatal:
        return {"code": code, "fatal": True, "scope": "partition",
                "recommended": "the NVLink traffic of the GPUs behind this NVSwitch port stalls: reboot the node (or "
                               "reset the GPUs and NVSwitches), as NVIDIA's Fabric Manager guide says for a fatal SXid"}
    return {"code": code, "fatal": False, "scope": None,
            "recommended": "none needed: the NVSwitch reports it non-fatal (watch it if it repeats)"}


def sxid_events(lines):
    """The SXid events among kernel-log ``lines`` (their ``Severity``/``Data`` detail lines left out), each parsed and
    classified: {"switch", "bus_id" (the NVSwitch's), "code", "fatal", "scope", "recommended", "link", "message",
    "line"}."""
    events = []
    for line in lines:
        parsed = parse_sxid_line(line)
        if parsed is None or parsed["detail"]:
            continue
        event = classify_sxid(parsed["code"], parsed["fatal"])
        event.update({"switch": parsed["switch"], "bus_id": parsed["bus_id"], "link": parsed["link"],
                      "message": parsed["message"], "line": line.strip()})
        events.append(event)
    return events


def parse_sxid_line(line):
    """One kernel-log line of the NVSwitch driver -> {"switch" ("nvidia-nvswitch0"), "bus_id" (the NVSwitch's, e.g.
    "0000:05:00.0"), "code", "fatal" (True for ``Fatal``, False for ``Non-fatal``, None on a detail line), "link" (the
    line's ``Link N``, or None), "detail" (True for the event's ``Severity``/``Data`` lines), "message"}, or None when
    the line is not an SXid line."""
    match = _SXID.search(line or "")
    if not match:
        return None
    rest = (match.group("rest") or "").strip()
    severity = _SXID_SEVERITY.match(rest)
    fatal, message = None, rest
    if severity:
        fatal = severity.group("severity").lower() == "fatal"
        message = (severity.group("message") or "").strip()
    link = _SXID_LINK.search(message) if severity else None
    return {"switch": match.group("switch"), "bus_id": match.group("bus").lower(), "code": int(match.group("code")),
            "fatal": fatal, "link": int(link.group("link")) if link else None, "detail": severity is None,
            "message": message}


def xid_events(lines, gpus):
    """The Xid events among kernel-log ``lines``, each classified and mapped to the GPU of ``gpus`` (dicts with
    "index" and "pci_bus_id") whose bus id it names: {"gpu" (index, or None when no GPU has that bus id),
    "pci_bus_id" (the GPU's, or the line's), "code", "pid", "process", "message", "line", and ``classify``'s keys}."""
    by_bus = {}
    for gpu in gpus:
        key = bus_key(gpu.get("pci_bus_id"))
        if key is not None:
            by_bus[key] = gpu
    events = []
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        gpu = by_bus.get(bus_key(parsed["bus_id"]))
        event = classify(parsed["code"], parsed["message"])
        event.update({
            "gpu": None if gpu is None else gpu["index"],
            "pci_bus_id": parsed["bus_id"] if gpu is None else gpu["pci_bus_id"],
            "pid": parsed["pid"], "process": parsed["process"], "message": parsed["message"],
            "line": line.strip(),
        })
        events.append(event)
    return events


# This boot's kernel log: journald's kernel messages of the current boot without metadata, else the kernel ring buffer.
XID_MARK = "NVRM: Xid"
JOURNALCTL = ["journalctl", "-k", "-b", "-o", "cat", "--no-pager"]
DMESG = ["dmesg"]


def _answers(run_command, sources, reasons):
    """Each of ``sources`` ((name, argv), in order) run through ``run_command``: yields (name, its stdout as text) for
    one that ran with exit status 0; one that could not start or failed adds its reason to ``reasons`` instead. The
    caller stops at the first answer it can use."""
    for source, argv in sources:
        try:
            rc, out, err = run_command(list(argv))
        except OSError as exc:
            reasons.append("%s: %s" % (source, exc))
            continue
        out = out.decode("utf-8", "replace") if isinstance(out, bytes) else (out or "")
        err = err.decode("utf-8", "replace") if isinstance(err, bytes) else (err or "")
        if rc != 0:
            reasons.append("%s: rc %d%s" % (source, rc, (": " + err.strip().splitlines()[-1]) if err.strip() else ""))
            continue
        yield source, out


def read_kernel_log(run_command):
    """This boot's kernel log through ``run_command`` (argv -> (rc, stdout, stderr); OSError when the program cannot
    start): ``journalctl -k -b -o cat``, else ``dmesg``. Returns {"readable": True, "source": "journalctl"|"dmesg",
    "lines": [its Xid and SXid lines]} or {"readable": False, "source": None, "lines": [], "reason": "kernel log not
    readable: ..."}. An empty journal counts as unreadable (a booted kernel always logs: an empty answer means a
    volatile journal that kept nothing or a user that may not read it), and dmesg is tried next. Never raises for an
    unreadable log."""
    reasons = []
    if run_command is None:
        return {"readable": False, "source": None, "lines": [],
                "reason": "kernel log not readable: no command runner was given to read it"}
    for source, out in _answers(run_command, (("journalctl", JOURNALCTL), ("dmesg", DMESG)), reasons):
        lines = [line for line in out.splitlines() if line.strip()]
        if not lines or (source == "journalctl" and all(line.startswith("-- ") for line in lines)):
            reasons.append("%s: no entries" % source)
            continue
        return {"readable": True, "source": source, "lines": [line for line in lines if is_event_line(line)]}
    return {"readable": False, "source": None, "lines": [], "reason": "kernel log not readable: " + "; ".join(reasons)}


# The kernel log with each line's monotonic timestamp (seconds since boot), for the sweep's cursor (_xid_cursor).
SXID_MARK = "SXid (PCI:"
JOURNALCTL_TIMED = ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager"]
_STAMP = re.compile(r"^\s*\[\s*(?P<ts>\d+\.\d+)\]\s?(?P<text>.*)$")
_MARK = re.compile(r"(NVRM: Xid|nvidia-nvswitch\d+:\s*SXid \()")


def timed_line(line):
    """(monotonic seconds, text) of one line of ``journalctl -o short-monotonic`` (``[  269.517039] host kernel:
    NVRM: Xid ...``) or of ``dmesg`` (``[ 269.517039] NVRM: Xid ...``), or None when the line has no timestamp. The
    text of an Xid or SXid line starts at its mark (``NVRM: Xid``, ``nvidia-nvswitchN: SXid``), so the same event
    reads the same from either source."""
    match = _STAMP.match(line or "")
    if not match:
        return None
    text = match.group("text").strip()
    mark = _MARK.search(text)
    return float(match.group("ts")), text[mark.start():] if mark else text


def is_event_line(text):
    """Whether a kernel-log text is an Xid line (``NVRM: Xid``) or an SXid line of the NVSwitch driver."""
    return XID_MARK in (text or "") or parse_sxid_line(text) is not None


def read_kernel_log_timed(run_command):
    """This boot's kernel log with timestamps through ``run_command`` (as ``read_kernel_log``): ``journalctl -k -b -o
    short-monotonic``, else ``dmesg``. Returns {"readable": True, "source", "oldest" (the timestamp of the oldest line
    the log still has), "lines": [[seconds, text] of its Xid and SXid lines, in the log's order]} or {"readable":
    False, "source": None, "oldest": None, "lines": [], "reason"}. Never raises for an unreadable log."""
    if run_command is None:
        return {"readable": False, "source": None, "oldest": None, "lines": [],
                "reason": "kernel log not readable: no command runner was given to read it"}
    reasons = []
    for source, out in _answers(run_command, (("journalctl", JOURNALCTL_TIMED), ("dmesg", DMESG)), reasons):
        timed = [entry for entry in (timed_line(line) for line in out.splitlines()) if entry is not None]
        if not timed:
            reasons.append("%s: no entries" % source)
            continue
        return {"readable": True, "source": source, "oldest": min(ts for ts, dummy in timed),
                "lines": [[ts, text] for ts, text in timed if is_event_line(text)]}
    return {"readable": False, "source": None, "oldest": None, "lines": [],
            "reason": "kernel log not readable: " + "; ".join(reasons)}
