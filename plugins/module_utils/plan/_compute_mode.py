# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compute mode: validate a declaration against the GPU facts and plan the per-GPU changes. Pure, no I/O.

Facts (NVML's nvml.h, nvmlDeviceSetComputeMode, as vendored in NVIDIA/go-nvml at commit 2f9e261, gen/nvml/nvml.h;
NVIDIA's MIG User Guide, MPS section; docs/compute-mode.md): modes Default, Exclusive_Process, Prohibited
(Exclusive_Thread is "Support Removed" in nvml.h); setting needs root and applies at once; the mode returns to
Default on reboot and when the driver de-initialises an idle GPU without persistence mode; NVML refuses
Exclusive_Process on a MIG-enabled GPU ("not supported on a MIG-enabled device").
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import COMPUTE_MODES, select_gpus

VALID = ", ".join(sorted(COMPUTE_MODES))
# what nvidia-smi -c takes for each mode (used by the boot-time re-apply unit)
NVIDIA_SMI_MODE = {"Default": "DEFAULT", "Exclusive_Process": "EXCLUSIVE_PROCESS", "Prohibited": "PROHIBITED"}


class ComputeModeError(ValueError):
    """A declaration that cannot be applied; the message says what is wrong and what is valid."""


def normalize_mode(value):
    """'exclusive_process' / 'EXCLUSIVE_PROCESS' / 'Exclusive_Process' -> 'Exclusive_Process'."""
    if not isinstance(value, str) or not value.strip():
        raise ComputeModeError("mode must be one of %s, got %r" % (VALID, value))
    text = value.strip()
    for name in COMPUTE_MODES:
        if text.lower() == name.lower():
            return name
    if text.lower() in ("exclusive_thread", "1"):
        raise ComputeModeError("mode %r: Exclusive_Thread was removed from NVIDIA's drivers; valid: %s"
                               % (value, VALID))
    if text in ("0", "2", "3"):
        raise ComputeModeError("mode %r: give the mode's name, not nvidia-smi's number; valid: %s" % (value, VALID))
    raise ComputeModeError("unknown compute mode %r; valid: %s" % (value, VALID))


def describe(gpus):
    return ", ".join("%d (%s, %s)" % (g["index"], g["name"], g["uuid"]) for g in gpus) or "no GPUs"


def plan(gpus, selector, mode, persistence_mode=None):
    """One selector, one mode: see plan_settings."""
    return plan_settings(gpus, [{"gpus": selector, "mode": mode}], persistence_mode)


def plan_settings(gpus, settings, persistence_mode=None):
    """Per GPU: what changes, for a list of {gpus: selector, mode} (later entries win where selectors
    overlap, so a GPU never flips between two modes within a run). Raises ComputeModeError before anything is
    changed.

    Returns {"modes": {index: mode}, "mode": the one mode when all selected GPUs share it else None,
    "selected": [gpu...], "changes": [{"index", "uuid", "name", "compute_mode": (before, after) or None,
    "persistence_mode": (before, after) or None}], "warnings": [...]}.
    """
    if not isinstance(settings, (list, tuple)) or not settings:
        raise ComputeModeError("settings must be a non-empty list of {gpus, mode}, got %r" % (settings,))
    if persistence_mode is not None and not isinstance(persistence_mode, bool):
        raise ComputeModeError("persistence_mode must be true, false or null, got %r" % (persistence_mode,))
    wanted = {}
    for n, entry in enumerate(settings):
        if not isinstance(entry, dict) or "mode" not in entry or set(entry) - set(["gpus", "mode"]):
            raise ComputeModeError("settings entry %d must be a mapping with 'mode' and optional 'gpus', got %r"
                                   % (n + 1, entry))
        mode = normalize_mode(entry["mode"])
        selector = entry.get("gpus", ["all"])
        chosen = select_gpus(gpus, selector)
        if not chosen:
            raise ComputeModeError("gpus=%s matches no GPU on this host; it has: %s (select with 'all', indices, "
                                   "UUIDs or model names)" % (selector, describe(gpus)))
        for g in chosen:
            wanted[g["index"]] = mode
    selected = [g for g in gpus if g["index"] in wanted]
    mig = [g for g in selected if wanted[g["index"]] == "Exclusive_Process" and g.get("mig_mode_current") == "Enabled"]
    if mig:
        raise ComputeModeError(
            "Exclusive_Process is not supported on a MIG-enabled GPU (NVML refuses it), and GPU(s) %s have MIG "
            "enabled; nothing changed. Select only GPUs without MIG, or use Default (MPS runs in Default "
            "mode, one daemon per MIG device)" % describe(mig))
    warnings = []
    changes = []
    for g in selected:
        mode = wanted[g["index"]]
        c = {"index": g["index"], "uuid": g["uuid"], "name": g["name"], "compute_mode": None,
             "persistence_mode": None}
        if g.get("compute_mode") != mode:
            c["compute_mode"] = (g.get("compute_mode"), mode)
            busy = g.get("processes") or []
            if busy and mode != "Default":
                warnings.append("GPU %d has %d process(es) running (PIDs %s): they keep running, but new processes "
                                "%s" % (g["index"], len(busy), ", ".join(str(p["pid"]) for p in busy),
                                        "are refused" if mode == "Prohibited" else
                                        "cannot share the GPU with them"))
        if persistence_mode is not None and bool(g.get("persistence_mode")) != persistence_mode:
            c["persistence_mode"] = (bool(g.get("persistence_mode")), persistence_mode)
        if mode == "Exclusive_Process" and g.get("mig_mode_pending") == "Enabled":
            warnings.append("GPU %d has MIG mode pending Enabled: once it is active, Exclusive_Process is refused "
                            "there and the boot-time re-apply will fail for it" % g["index"])
        if c["compute_mode"] or c["persistence_mode"]:
            changes.append(c)
    distinct = set(wanted.values())
    return {"modes": wanted, "mode": distinct.pop() if len(distinct) == 1 else None, "selected": selected,
            "changes": changes, "warnings": warnings}


def state_view(gpus):
    """{index: {compute_mode, persistence_mode}} for diffs."""
    return dict((str(g["index"]), {"compute_mode": g.get("compute_mode"),
                                   "persistence_mode": bool(g.get("persistence_mode"))}) for g in gpus)


def planned_state(todo):
    """The selected GPUs as they are once ``todo`` (plan_settings' result) is applied."""
    out = []
    for g in todo["selected"]:
        g2 = dict(g)
        for c in todo["changes"]:
            if c["index"] == g["index"]:
                if c["compute_mode"]:
                    g2["compute_mode"] = c["compute_mode"][1]
                if c["persistence_mode"]:
                    g2["persistence_mode"] = c["persistence_mode"][1]
        out.append(g2)
    return out


def report(gpus):
    """compute_mode's per-GPU result entries (the boot-time unit is written from these)."""
    return [{"index": g["index"], "uuid": g["uuid"], "name": g["name"], "compute_mode": g.get("compute_mode"),
             "nvidia_smi_mode": NVIDIA_SMI_MODE.get(g.get("compute_mode")),
             "persistence_mode": bool(g.get("persistence_mode"))} for g in gpus]


UNIT_HEADER = """# Managed by the gpuops.nvidia.compute_mode role: edits here are overwritten.
# Compute mode is not persistent: it returns to Default on reboot and when the driver de-initialises an idle
# GPU. This unit sets it again at boot, by GPU UUID (indices can change when GPUs are added or removed).
[Unit]
Description=Re-apply NVIDIA GPU compute modes (gpuops.nvidia)
After=nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
"""


def boot_unit(gpus, persistence, nvidia_smi):
    """The systemd unit that re-applies compute (and persistence) mode at boot, by GPU UUID, from compute_mode's
    per-GPU result entries (``report``). The compute_mode role writes it (filter compute_mode_unit) and
    gpu_node_plan compares it: one text for both."""
    lines = [UNIT_HEADER]
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        if persistence:
            lines.append("ExecStart=%s -i %s -pm 1\n" % (nvidia_smi, gpu["uuid"]))
        if gpu["nvidia_smi_mode"] is not None:      # a mode not read is not re-applied
            lines.append("ExecStart=%s -i %s -c %s\n" % (nvidia_smi, gpu["uuid"], gpu["nvidia_smi_mode"]))
    lines.append("\n[Install]\nWantedBy=multi-user.target\n")
    return "".join(lines)
