"""On a real GPU host (GPUOPS_REAL_GPU=1): gpu_info, run through ansible, read-only, compared field by field
with nvidia-smi. CI skips it (no GPU). Writes a readable comparison to $GPUOPS_REPORT_DIR when set."""
import os
import re
import subprocess

import pytest

from tests.gpu import fabric_vs_smi
from tests.support.ansible_run import run_module

pytestmark = pytest.mark.gpu

QUERY = ["index", "uuid", "name", "pci.bus_id", "pci.device_id", "memory.total", "compute_cap", "compute_mode",
         "persistence_mode", "mig.mode.current", "mig.mode.pending", "driver_version"]


def _smi(*args):
    return subprocess.run(["nvidia-smi"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=True).stdout


def _query():
    out = _smi("--query-gpu=" + ",".join(QUERY), "--format=csv,noheader,nounits")
    return [dict(zip(QUERY, [c.strip() for c in line.split(",")])) for line in out.strip().splitlines()]


def _lgip():
    """{(gpu, profile id): (name, instances total, memory GiB, SMs)} from `nvidia-smi mig -lgip`."""
    out = {}
    for line in _smi("mig", "-lgip").splitlines():
        m = re.match(r"\|\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+\S+\s+(\d+)", line)
        if m:
            out[(int(m.group(1)), int(m.group(3)))] = (m.group(2), int(m.group(5)), float(m.group(6)), int(m.group(7)))
    return out


def _lgipp():
    out = {}
    for line in _smi("mig", "-lgipp").splitlines():
        m = re.match(r"GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)", line)
        if m:
            out[(int(m.group(1)), int(m.group(2)))] = ([int(s) for s in m.group(3).split(",")], int(m.group(4)))
    return out


def _report(rows):
    directory = os.environ.get("GPUOPS_REPORT_DIR")
    if not directory:
        return
    with open(os.path.join(directory, "gpu_info_vs_nvidia_smi.txt"), "w") as handle:
        handle.write("%-28s %-44s %-44s %s\n" % ("field", "gpu_info", "nvidia-smi", "match"))
        for field, ours, theirs in rows:
            handle.write("%-28s %-44s %-44s %s\n" % (field, ours, theirs, "yes" if ours == theirs else "NO"))


def test_gpu_info_matches_nvidia_smi():
    result, proc = run_module("gpuops.nvidia.gpu_info", check=True)
    assert not result.get("failed"), result.get("msg") or proc.stderr
    assert result["backend"] == "nvml" and result["changed"] is False
    rows = [("driver_version", result["driver_version"], _query()[0]["driver_version"])]
    lgip, lgipp = _lgip(), _lgipp()
    for smi, gpu in zip(_query(), result["gpus"]):
        i = gpu["index"]
        rows += [
            ("gpu%d.index" % i, str(gpu["index"]), smi["index"]),
            ("gpu%d.uuid" % i, gpu["uuid"], smi["uuid"]),
            ("gpu%d.name" % i, gpu["name"], smi["name"]),
            ("gpu%d.pci_bus_id" % i, gpu["pci_bus_id"], smi["pci.bus_id"]),
            ("gpu%d.pci_device_id" % i, gpu["pci_device_id"].lower(), smi["pci.device_id"].lower()),
            ("gpu%d.memory_total_mib" % i, str(gpu["memory_total_mib"]), smi["memory.total"]),
            ("gpu%d.compute_capability" % i, gpu["compute_capability"], smi["compute_cap"]),
            ("gpu%d.compute_mode" % i, gpu["compute_mode"], smi["compute_mode"]),
            ("gpu%d.persistence_mode" % i, "Enabled" if gpu["persistence_mode"] else "Disabled",
             smi["persistence_mode"]),
            ("gpu%d.mig_mode_current" % i, gpu["mig_mode_current"] or "[N/A]", smi["mig.mode.current"]),
            ("gpu%d.mig_mode_pending" % i, gpu["mig_mode_pending"] or "[N/A]", smi["mig.mode.pending"]),
        ]
        for p in gpu["gi_profiles"]:
            name, total, gib, sms = lgip[(i, p["id"])]
            rows += [
                ("gpu%d.%s.name" % (i, p["id"]), p["name"], name),
                ("gpu%d.%s.max_instances" % (i, p["id"]), str(p["max_instances"]), str(total)),
                ("gpu%d.%s.memory_gib" % (i, p["id"]), "%.2f" % (p["memory_mib"] / 1024.0), "%.2f" % gib),
                ("gpu%d.%s.sms" % (i, p["id"]), str(p["sms"]), str(sms)),
                ("gpu%d.%s.placements" % (i, p["id"]),
                 "%s:%s" % ([x["start"] for x in p["placements"]], p["memory_slices"]),
                 "%s:%s" % lgipp[(i, p["id"])]),
            ]
        assert len(gpu["gi_profiles"]) == len([k for k in lgip if k[0] == i])
    # each GPU's NVLink fabric against nvidia-smi -q's Fabric section (tests/gpu/fabric_vs_smi.py)
    rows += [(field, str(ours), str(theirs)) for field, ours, theirs in fabric_vs_smi.rows(result["gpus"], _smi("-q"))]
    _report(rows)
    mismatches = [r for r in rows if r[1] != r[2]]
    assert not mismatches, mismatches
