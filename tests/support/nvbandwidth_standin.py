"""STAND-IN for NVIDIA's nvbandwidth (the lab inventory and tests), NOT the real tool: it answers ``nvbandwidth [-j]
-t <test> ...`` for the simulated node named by GPUOPS_SIMULATED_GPUS, with the output of nvbandwidth v0.8
(NVIDIA/nvbandwidth at v0.8, commit 66746a3b: json_output.cpp for ``-j``, output.cpp and inline_common.h's matrix
printer for plain text; plugins/module_utils/gpu/_nvbandwidth.py describes the format).

Only the four unidirectional device-to-device tests are known (device_to_device_memcpy_{read,write}_{ce,sm}); any
other test name is answered as nvbandwidth answers an unknown one (status "ERROR"). Every pair of simulated GPUs
measures ``HEALTHY_GBPS`` of their model (a stand-in figure: 88 % of half the NVLink bandwidth NVIDIA publishes,
between the 84 % and 92 % of public runs; _gpu_catalog.NVLINK_GBPS), a model without NVLink 50 GB/s (PCIe), the
diagonal "N/A". Where a file ``<state file>.nvbandwidth.json`` exists a test injects faults:

    {"links": [{"from": 0, "to": 3, "gbps": 180.0, "tests": [...]}],   # a slow pair (row 0, column 3), all tests
                                                                        # unless "tests" names some; gbps null: N/A
     "waived": [test, ...],                                             # tests waived (no peer access)
     "error": "[CUDA_ERROR_...] ..."}                                   # the run ends with this error (rc 1)

The order of CUDA's devices is the simulated GPUs' PCI order (as with CUDA_DEVICE_ORDER=PCI_BUS_ID).
"""
import json
import os
import socket
import sys

TESTS = {
    "device_to_device_memcpy_read_ce": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
    "device_to_device_memcpy_write_ce": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
    "device_to_device_memcpy_read_sm": "memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)",
    "device_to_device_memcpy_write_sm": "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)",
}
# stand-in figures (GB/s one way), NOT readings: 0.88 x NVLINK_GBPS / 2 of the catalog
HEALTHY_GBPS = {"H100-SXM5-80GB": 396.0, "H200": 396.0, "A100-SXM4-40GB": 264.0, "A100-SXM4-80GB": 264.0,
                "B200": 792.0, "B300": 792.0, "GB200": 792.0}
PCIE_GBPS = 50.0
NAMES = {"H100-SXM5-80GB": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200", "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
         "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", "A30": "NVIDIA A30", "B200": "NVIDIA B200",
         "GB200": "NVIDIA GB200", "B300": "NVIDIA B300 SXM6 AC", "GH200": "NVIDIA GH200 480GB",
         "H100-NVL": "NVIDIA H100 NVL", "RTX-PRO-6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
         "L40S": "NVIDIA L40S"}


def _cell(value):
    return "N/A" if value is None else format(value, ".6g")      # a C++ stream's default: six significant digits


def _matrix(gpus, test, faults):
    rows = []
    for a in gpus:
        row = []
        for b in gpus:
            if a is b:
                row.append(None)
                continue
            value = min(HEALTHY_GBPS.get(a["model"], PCIE_GBPS), HEALTHY_GBPS.get(b["model"], PCIE_GBPS))
            for link in faults.get("links") or []:
                if (link["from"], link["to"]) == (a["index"], b["index"]) and test in (link.get("tests") or TESTS):
                    value = link["gbps"]
            row.append(value)
        rows.append(row)
    return rows


def _display(gpu):
    """getDeviceDisplayInfo: the name and the PCI domain, bus and device."""
    domain, bus, rest = gpu["pci_bus_id"].split(":")
    return "%s (%08x:%s:%s)" % (NAMES.get(gpu["model"], gpu["model"]), int(domain, 16), bus.lower(),
                                rest.split(".")[0].lower())


def _device(gpu, hostname):
    return "%d: %s: (%s)" % (gpu["index"], _display(gpu), hostname)


def _json(state, gpus, tests, faults):
    root = {"version": "v0.8", "git_version": "gpuops-standin", "CUDA Runtime Version": 12080,
            "Driver Version": state.get("driver_version") or "", "GPU Device list": [
                _device(g, socket.gethostname()) for g in gpus], "testcases": []}
    if faults.get("error"):
        root["error"] = faults["error"]
        return {"nvbandwidth": root}, 1
    for test in tests:
        if test not in TESTS:
            root["testcases"].append({"name": test, "status": "ERROR"})
        elif test in (faults.get("waived") or []) or len(gpus) < 2:
            root["testcases"].append({"name": test, "status": "Waived"})
        else:
            matrix = _matrix(gpus, test, faults)
            total = sum(v for row in matrix for v in row if v is not None)
            root["testcases"].append({"name": test, "status": "Passed", "bandwidth_description": TESTS[test],
                                      "bandwidth_matrix": [[_cell(v) for v in row] for row in matrix],
                                      "sum": total})
    return {"nvbandwidth": root}, 0


def _text(state, gpus, tests, faults):
    out = ["nvbandwidth Version: v0.8", "Built from Git version: gpuops-standin", ""]
    if faults.get("error"):
        sys.stderr.write(faults["error"] + "\n")
        return "\n".join(out) + "\n", 1
    out += ["CUDA Runtime Version: 12080", "CUDA Driver Version: 12080",
            "Driver Version: %s" % (state.get("driver_version") or ""), "", socket.gethostname()]
    out += ["Device %d: %s" % (g["index"], _display(g)) for g in gpus] + [""]
    for test in tests:
        if test not in TESTS:
            out.append("ERROR: Testcase %s not found!" % test)
        elif test in (faults.get("waived") or []) or len(gpus) < 2:
            out.append("Waived: ")
        else:
            out.append("Running %s." % test)
            out.append(TESTS[test])
            matrix = _matrix(gpus, test, faults)
            out.append("  " + "".join("%10d" % g["index"] for g in gpus))
            for g, row in zip(gpus, matrix):
                out.append("%2d" % g["index"] + "".join("%10s" % ("N/A" if v is None else "%.2f" % v) for v in row))
            out += ["", "SUM %s %.2f" % (test, sum(v for row in matrix for v in row if v is not None)), ""]
    return "\n".join(out) + "\n", 0


def main(argv):
    as_json = "-j" in argv or "--json" in argv
    rest = [a for a in argv if a not in ("-j", "--json")]
    if len(rest) < 2 or rest[0] not in ("-t", "--testcase"):
        sys.stderr.write("nvbandwidth stand-in: only 'nvbandwidth [-j] -t <test> ...' is answered; got %r\n" % (argv,))
        return 2
    path = os.environ.get("GPUOPS_SIMULATED_GPUS")
    if not path:
        sys.stderr.write("nvbandwidth stand-in: GPUOPS_SIMULATED_GPUS is not set\n")
        return 2
    with open(path) as handle:
        state = json.load(handle)
    faults = {}
    if os.path.exists(path + ".nvbandwidth.json"):
        with open(path + ".nvbandwidth.json") as handle:
            faults = json.load(handle)
    gpus = sorted((g for g in state["gpus"] if not (g.get("health") or {}).get("missing")),
                  key=lambda g: g["pci_bus_id"])
    if as_json:
        doc, rc = _json(state, gpus, rest[1:], faults)
        sys.stdout.write(json.dumps(doc, indent=3, sort_keys=True) + "\n")  # jsoncpp: keys in std::map order
        return rc
    text, rc = _text(state, gpus, rest[1:], faults)
    sys.stdout.write(text)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
