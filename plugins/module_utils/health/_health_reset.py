# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate's remediation that a user may allow (issue 35, item 4): which GPUs a GPU reset would clear of their
blocking findings, and which of them may be reset now. Pure: no I/O (the module gpu_health_reset reads and resets).

A GPU reset clears a pending row remap: nvml.h says of nvmlDeviceGetRemappedRows' ``isPending`` "A reset will be
required to actually remap the row" (NVIDIA/go-nvml@2f9e261:gen/nvml/nvml.h; NVIDIA, "GPU Memory Error Management",
Row Remapping, https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html). Before Ampere, nvml.h says of
nvmlDeviceGetRetiredPagesPendingStatus that such pages "need a reboot to fully retire", while NVIDIA's Dynamic Page
Retirement page has them retired when the GPU is next initialised
(https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html): the reset is tried for it too, and the health
read after the reset says whether it took (a finding still there keeps the node out, its fix saying reboot). The
kinds are ``_gpu_health.RESET_CLEARS``.

A GPU is reset only where the reset cannot hurt anything running: NVML lists no process on it, no process holds its
device file (``_device_holders``; the run's own NVML session excepted), MIG mode is disabled (a reset destroys a MIG
GPU's GPU and compute instances, which the mig step made) and it exposes a reset (a passthrough VM's GPU does not).
A GPU that fails one of these is not reset, and the reason names what stopped it (the processes and holders by PID and
command, the pods they run in where their cgroup says so).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._device_holders import describe_holder
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import RESET_CLEARS

# A GPU's own device file (/dev/nvidia<minor>), as _device_holders.for_device tells it from the shared ones.
_GPU_FILE = re.compile(r"nvidia\d+$")


def candidates(decided, only=None):
    """{GPU index: [kinds]} of the GPUs with a blocking finding that a reset clears (``decided``: ``verdict``'s
    findings, each with its ``action``); ``only``: the indexes to consider (None: every GPU)."""
    out = {}
    for finding in decided:
        index = finding.get("gpu")
        if finding.get("action") != "block" or finding.get("kind") not in RESET_CLEARS or index is None:
            continue
        if only is not None and index not in only:
            continue
        kinds = out.setdefault(index, [])
        if finding["kind"] not in kinds:
            kinds.append(finding["kind"])
    return out


def _holds_gpu(holder):
    """Whether ``holder`` (one of ``for_device``'s answer for this GPU) has a GPU's own device file open: a holder of
    the shared files only (nvidiactl, nvidia-uvm) holds no one GPU, and the reset itself says if it waits for one."""
    return any(_GPU_FILE.search(str(path)) for path in holder.get("paths") or [])


def decide(index, kinds, gpu, holders, own_pid=None):
    """One GPU's decision: {"index", "pci_bus_id", "clears" (kinds), "reset" (bool), "reason" (why not; None)}.
    ``gpu``: its facts (gpu_info's entry: processes, mig_mode_current, reset_supported, pci_bus_id); ``holders``:
    the backend's ``device_holders`` answer for it (None: not read); ``own_pid``: the reading process, whose NVML session holds the files."""
    bus_id = gpu.get("pci_bus_id")
    who = "GPU %d (%s)" % (index, bus_id)
    entry = {"index": index, "pci_bus_id": bus_id, "clears": list(kinds), "reset": False, "reason": None}
    stops = []
    if gpu.get("mig_mode_current") == "Enabled":
        stops.append("MIG mode is enabled: a reset destroys its GPU and compute instances; reboot the node, or reset "
                     "it yourself once its MIG devices are free")
    if gpu.get("reset_supported") is False:
        stops.append("it exposes no GPU reset here (a passthrough VM's GPU): reboot the node (the VM)")
    processes = list(gpu.get("processes") or [])     # (gpu_info lists a MIG device's processes here too)
    if processes:
        stops.append("in use by %d process(es) NVML lists: %s" % (len(processes), ", ".join(
            "PID %s %s" % (p.get("pid"), p.get("name") or "?") for p in processes)))
    held = [h for h in ((holders or {}).get("holders") or [])
            if h.get("pid") != own_pid and _holds_gpu(h)]
    if held:
        stops.append("in use: %s" % "; ".join(describe_holder(h) for h in held))
    if stops:
        entry["reason"] = "%s not reset - %s; the GPU keeps its blocking finding" % (who, "; ".join(stops))
    else:
        entry["reset"] = True
    return entry


def plan(decided, gpus, holders, only=None, own_pid=None):
    """The decisions for every GPU a reset would clear, in index order. ``gpus``: {index: facts}; ``holders``:
    {index: holders as ``decide`` takes them}. A GPU whose facts could not be read (``gpus`` has no entry) is not
    reset."""
    out = []
    for index, kinds in sorted(candidates(decided, only).items()):
        gpu = gpus.get(index)
        if gpu is None:
            out.append({"index": index, "pci_bus_id": None, "clears": kinds, "reset": False,
                        "reason": "GPU %d not reset - NVML could not read it" % index})
            continue
        out.append(decide(index, kinds, gpu, holders.get(index), own_pid))
    return out


def blocking_view(decided):
    """{"GPU <index>": [blocking kinds]} (node findings under "node"): the diff's before and after."""
    out = {}
    for finding in decided:
        if finding.get("action") != "block":
            continue
        key = "node" if finding.get("gpu") is None else "GPU %d" % finding["gpu"]
        out.setdefault(key, [])
        if finding["kind"] not in out[key]:
            out[key].append(finding["kind"])
    return out


def predicted(decided, decisions):
    """``blocking_view`` as it would be once the GPUs ``decisions`` reset are reset (check mode's after)."""
    reset = dict((d["index"], set(d["clears"])) for d in decisions if d["reset"])
    kept = [f for f in decided if not (f.get("gpu") in reset and f.get("kind") in reset[f.get("gpu")])]
    return blocking_view(kept)
