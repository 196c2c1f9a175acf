"""Compare the collection's GPU health read with nvidia-smi's, on a real GPU host, READ-ONLY.

Run from the repository root on a GPU host (Python 3, nvidia-ml-py and the driver's nvidia-smi; nothing else):

    GPUOPS_NVML_READ_ONLY=1 python3 tests/gpu/health_vs_smi.py [--out health.json]

It reads every GPU's health through the collection's real backend (_nvml_backend.NvmlBackend.read_health: NVML getters
only, and journalctl/dmesg for the kernel log) and `nvidia-smi -q -x` (plus `nvidia-smi nvlink -s` for the links), and
compares each field: ECC mode and volatile/aggregate corrected/uncorrected counts, retired pages, remapped rows, PCIe
current/max generation and width, clock event reasons, temperature, fabric state/status and each NVLink's state, and
the GPUs PCI sysfs shows (the gpu_missing comparison) against the GPUs nvidia-smi lists. A
field NVML answers NOT_SUPPORTED for must be N/A in nvidia-smi. A field nvidia-smi's XML does not carry on this driver is
listed as "not compared", never as equal. Live values (clock event reasons, temperature) can change between the two
reads: a difference there is worth a second run before it is believed.

Exit status: 0 when every compared field agrees, 1 on a difference, 2 when a read could not be made. With --out the
whole comparison (both reads included) is written as JSON. `--xml FILE` compares with a saved `nvidia-smi -q -x`.
Nothing on the GPU is changed: GPUOPS_NVML_READ_ONLY=1 makes the backend refuse any mutating call.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _import_backend():
    """The collection's modules under their ansible_collections name, from this checkout, without ansible."""
    top = tempfile.mkdtemp(prefix="gpuops-health-")
    os.makedirs(os.path.join(top, "ansible_collections", "gpuops"))
    os.symlink(ROOT, os.path.join(top, "ansible_collections", "gpuops", "nvidia"))
    sys.path.insert(0, top)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
    return NvmlBackend, _gpu_health


def _run(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


NA = object()          # nvidia-smi said N/A (or Not Supported)
MISSING = object()     # nvidia-smi's XML has no such element on this driver


def _text(node, *paths):
    """The first of ``paths`` that exists under ``node``: its stripped text, NA for N/A, MISSING if none exists."""
    for path in paths:
        found = node.find(path)
        if found is not None:
            text = (found.text or "").strip()
            return NA if text in ("N/A", "Not Supported", "[N/A]", "") else text
    return MISSING


def _number(value):
    if value in (NA, MISSING):
        return value
    digits = "".join(ch for ch in value if ch.isdigit())
    return int(digits) if digits else NA


def _yes_no(value):
    if value in (NA, MISSING):
        return value
    return value.lower() in ("yes", "true", "active", "enabled")


def _ecc_total(section, uncorrected):
    """Corrected or uncorrected count of an ecc_errors/volatile or /aggregate element: newer drivers split SRAM and
    DRAM (sram_correctable, sram_uncorrectable_parity, sram_uncorrectable_secded, dram_correctable, dram_uncorrectable),
    older ones write single_bit/total and double_bit/total."""
    if section is None:
        return MISSING
    old = _text(section, "double_bit/total" if uncorrected else "single_bit/total")
    if old is not MISSING:
        return _number(old)
    total, seen = 0, False
    for child in section:
        tag = child.tag
        wanted = "uncorrectable" in tag if uncorrected else (tag.endswith("_correctable") and "uncorrectable" not in tag)
        if not wanted or "threshold" in tag:
            continue
        value = _number((child.text or "").strip() or "N/A")
        if value is NA:
            return NA
        total, seen = total + value, True
    return total if seen else MISSING


_REASON_TAGS = {"gpu_idle": "gpu_idle", "applications_clocks_setting": "applications_clocks_setting",
                "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "sync_boost": "sync_boost",
                "sw_thermal_slowdown": "sw_thermal_slowdown", "hw_thermal_slowdown": "hw_thermal_slowdown",
                "hw_power_brake_slowdown": "hw_power_brake_slowdown", "display_clocks_setting": "display_clock_setting"}


def _clock_reasons(gpu):
    section = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if section is None:
        section, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if section is None:
        return MISSING
    active = []
    for child in section:
        name = _REASON_TAGS.get(child.tag[len(prefix):]) if child.tag.startswith(prefix) else None
        if name and (child.text or "").strip() == "Active":
            active.append(name)
    return sorted(active)


def smi_fields(gpu):
    """The fields compared, from one <gpu> element of nvidia-smi -q -x."""
    link = "pci/pci_gpu_link_info/"
    fabric_state = _text(gpu, "fabric/state")
    return {
        "ecc.mode_current": _text(gpu, "ecc_mode/current_ecc"),
        "ecc.volatile.corrected": _ecc_total(gpu.find("ecc_errors/volatile"), False),
        "ecc.volatile.uncorrected": _ecc_total(gpu.find("ecc_errors/volatile"), True),
        "ecc.aggregate.corrected": _ecc_total(gpu.find("ecc_errors/aggregate"), False),
        "ecc.aggregate.uncorrected": _ecc_total(gpu.find("ecc_errors/aggregate"), True),
        "retired_pages.single_bit": _number(_text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")),
        "retired_pages.double_bit": _number(_text(gpu, "retired_pages/double_bit_retirement/retired_count")),
        "retired_pages.pending": _yes_no(_text(gpu, "retired_pages/pending_retirement")),
        "remapped_rows.corrected": _number(_text(gpu, "remapped_rows/remapped_row_corr")),
        "remapped_rows.uncorrected": _number(_text(gpu, "remapped_rows/remapped_row_unc")),
        "remapped_rows.pending": _yes_no(_text(gpu, "remapped_rows/remapped_row_pending")),
        "remapped_rows.failure": _yes_no(_text(gpu, "remapped_rows/remapped_row_failure")),
        "pcie.generation.current": _number(_text(gpu, link + "pcie_gen/current_link_gen")),
        "pcie.generation.max": _number(_text(gpu, link + "pcie_gen/max_link_gen")),
        "pcie.generation.gpu_max": _number(_text(gpu, link + "pcie_gen/max_device_link_gen")),
        "pcie.width.current": _number(_text(gpu, link + "link_widths/current_link_width")),
        "pcie.width.max": _number(_text(gpu, link + "link_widths/max_link_width")),
        "clock_events.reasons": _clock_reasons(gpu),
        "temperature_c": _number(_text(gpu, "temperature/gpu_temp")),
        "fabric.state": fabric_state if fabric_state in (NA, MISSING) else fabric_state.lower().replace(" ", "_"),
        "fabric.status": _text(gpu, "fabric/status"),
    }


def ours_fields(entry, not_supported):
    """The same fields from the collection's health read of one GPU (NA where NVML answered NOT_SUPPORTED)."""
    def get(path):
        value = entry
        for key in path.split("."):
            if value == not_supported:
                return NA
            value = value.get(key) if isinstance(value, dict) else None
        return NA if value == not_supported else value
    out = dict((key, get(key)) for key in (
        "ecc.mode_current", "ecc.volatile.corrected", "ecc.volatile.uncorrected", "ecc.aggregate.corrected",
        "ecc.aggregate.uncorrected", "retired_pages.single_bit", "retired_pages.double_bit", "retired_pages.pending",
        "remapped_rows.corrected", "remapped_rows.uncorrected", "remapped_rows.pending", "remapped_rows.failure",
        "pcie.generation.current", "pcie.generation.max", "pcie.generation.gpu_max", "pcie.width.current",
        "pcie.width.max", "temperature_c", "fabric.state", "fabric.status"))
    reasons = get("clock_events.reasons")
    out["clock_events.reasons"] = reasons if reasons is NA else sorted(reasons)
    status = out["fabric.status"]
    out["fabric.status"] = status if status in (NA, None) else ("Success" if status == "SUCCESS" else status)
    return out


def nvlink_states(text):
    """{gpu index: {link: active}} from `nvidia-smi nvlink -s` ("GPU 0: ...", "Link 3: 26.562 GB/s" or "<inactive>")."""
    out, gpu = {}, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("GPU ") and ":" in stripped:
            gpu = int(stripped[4:stripped.index(":")])
            out[gpu] = {}
        elif stripped.startswith("Link ") and gpu is not None and ":" in stripped:
            link = int(stripped[5:stripped.index(":")])
            out[gpu][link] = "inactive" not in stripped.lower()
    return out


def _show(value):
    return "N/A" if value is NA else ("(not in XML)" if value is MISSING else value)


def compare(health, xml_text, nvlink_text, not_supported, tolerance_c=3):
    """[{"gpu", "field", "ours", "smi", "result": "equal"|"differ"|"not compared"}] for every GPU of ``health``."""
    root = ET.fromstring(xml_text)
    by_bus = {}
    for gpu in root.findall("gpu"):
        by_bus[gpu.get("id", "").lower()] = gpu
    links = nvlink_states(nvlink_text or "")
    rows = []
    for entry in health["gpus"]:
        index = entry["index"]
        gpu = by_bus.get((entry.get("pci_bus_id") or "").lower())
        if entry.get("lost") or gpu is None:
            rows.append({"gpu": index, "field": "gpu", "ours": "lost" if entry.get("lost") else entry.get("pci_bus_id"),
                         "smi": "no <gpu> with this bus id" if gpu is None else "present", "result": "differ"})
            continue
        ours, smi = ours_fields(entry, not_supported), smi_fields(gpu)
        for field in sorted(ours):
            a, b = ours[field], smi[field]
            if b is MISSING:
                result = "not compared"
            elif field == "temperature_c" and isinstance(a, int) and isinstance(b, int):
                result = "equal" if abs(a - b) <= tolerance_c else "differ"
            else:
                result = "equal" if a == b or (a is NA and b is NA) else "differ"
            rows.append({"gpu": index, "field": field, "ours": _show(a), "smi": _show(b), "result": result})
        ours_links = entry.get("nvlink")
        theirs = links.get(index, {})
        if ours_links == not_supported:
            rows.append({"gpu": index, "field": "nvlink", "ours": "N/A", "smi": theirs or "no links",
                         "result": "equal" if not any(theirs.values()) else "differ"})
        else:
            for link in ours_links:
                seen = theirs.get(link["link"], MISSING)
                rows.append({"gpu": index, "field": "nvlink.%d.active" % link["link"], "ours": link["active"],
                             "smi": _show(seen),
                             "result": "not compared" if seen is MISSING else (
                                 "equal" if seen == link["active"] else "differ")})
    rows.append(_pci_row(health, by_bus))
    return rows


def _bus_key(bus_id):
    """00000000:07:00.0 (NVML, nvidia-smi) and 0000:07:00.0 (sysfs) as one comparable form."""
    domain, rest = bus_id.strip().split(":", 1)
    return ("%04x:%s" % (int(domain, 16), rest)).lower()


def _pci_row(health, by_bus):
    """The GPUs PCI sysfs shows (the read's "pci", compared with NVML for the gpu_missing finding) against the GPUs
    nvidia-smi lists: on a host whose every GPU is up, the same bus ids."""
    pci = health.get("pci")
    smi = sorted(_bus_key(bus) for bus in by_bus)
    if not isinstance(pci, dict) or not pci.get("readable"):
        return {"gpu": "node", "field": "pci.gpus", "ours": (pci or {}).get("reason") or "not read", "smi": smi,
                "result": "not compared"}
    ours = sorted(_bus_key(g["bus_id"]) for g in pci["gpus"])
    return {"gpu": "node", "field": "pci.gpus", "ours": ours, "smi": smi,
            "result": "equal" if ours == smi else "differ"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--out", help="write the comparison and both reads here as JSON")
    parser.add_argument("--xml", help="a saved `nvidia-smi -q -x` instead of running it")
    args = parser.parse_args(argv)
    backend_class, gpu_health = _import_backend()
    try:
        backend = backend_class(run_command=_run)
        try:
            health = backend.read_health()
        finally:
            backend.close()
    except Exception as exc:  # pylint: disable=broad-except  # any failure to read is exit 2, said plainly
        print("cannot read health through NVML: %s" % exc, file=sys.stderr)
        return 2
    if args.xml:
        with open(args.xml) as handle:
            xml_text = handle.read()
    else:
        rc, xml_text, err = _run(["nvidia-smi", "-q", "-x"])
        if rc != 0:
            print("nvidia-smi -q -x failed (rc %d): %s" % (rc, err.strip()), file=sys.stderr)
            return 2
    nvlink_text = _run(["nvidia-smi", "nvlink", "-s"])[1] if not args.xml else ""
    rows = compare(health, xml_text, nvlink_text, gpu_health.NOT_SUPPORTED)
    for row in rows:
        print("GPU %s %-28s %-8s ours=%s smi=%s" % (row["gpu"], row["field"], row["result"], row["ours"], row["smi"]))
    differ = [r for r in rows if r["result"] == "differ"]
    verdict = gpu_health.verdict(gpu_health.findings(health))
    print("%d fields compared, %d differ, %d not compared; health verdict with the default policy: %s" % (
        len([r for r in rows if r["result"] != "not compared"]), len(differ),
        len([r for r in rows if r["result"] == "not compared"]), verdict["verdict"]))
    print("kernel log: %s" % (health["kernel_log"].get("source") or health["kernel_log"].get("reason")))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"rows": rows, "health": health, "verdict": verdict, "nvidia_smi_xml": xml_text,
                       "nvlink_status": nvlink_text}, handle, indent=1, default=str)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
