# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The burn-in's GPU-to-GPU bandwidth check (issue 50 item 3): NVIDIA's nvbandwidth, where the node has it, run at the
medium, long and extended burn-in levels, its device-to-device copies held to the catalog's per-model floors
(_gpu_catalog.nvbandwidth_floor_gbps). ``plan``, ``parse`` and ``verdict`` are pure; ``run`` runs the one command
through the caller's runner (argv, environ -> (rc, stdout, stderr); OSError when it cannot start).

What nvbandwidth prints is read from its source (NVIDIA/nvbandwidth at v0.8, commit 66746a3b; json_output.cpp,
nvbandwidth.cpp, testcases_ce.cpp, testcases_sm.cpp, testcase.h). With ``-j`` it prints one JSON document at the end
of the run (3-space indentation, jsoncpp's styled writer):

    {"nvbandwidth": {"version": "v0.8", "git_version": ..., "CUDA Runtime Version": int, "Driver Version": str,
        "GPU Device list": ["0: NVIDIA H100 80GB HBM3 (00000000:07:00): (host)", ...],
        "testcases": [{"name": "device_to_device_memcpy_read_ce", "status": "Passed",
                       "bandwidth_description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
                       "bandwidth_matrix": [["N/A", "389.51", ...], ...], "sum": float}, ...],
        "error": text, "warning": text}}

- The device list names each CUDA device ordinal with its PCI domain, bus and device (``%08x:%02x:%02x``), so an
  ordinal is matched to the NVML GPU of that bus id; the command is run with CUDA_DEVICE_ORDER=PCI_BUS_ID too, so
  that CUDA's ordinals follow NVML's PCI order where the list cannot be matched.
- A matrix cell is a string (the double as a C++ stream writes it, six significant digits) or "N/A": the diagonal,
  and a pair whose peer access could not be enabled. Row is the device whose context runs the copy; the description
  says which way the data goes: read tests ``GPU(row) -> GPU(column)``, write tests ``GPU(row) <- GPU(column)``.
- A test whose GPUs have no accessible peer pair is ``"status": "Waived"`` with no matrix; a test that threw is
  ``"Error"`` (v0.8 adds a second entry of the same name for it); an unknown test name is ``"ERROR"``. A CUDA or NVML
  failure ends the run with the top-level ``"error"`` (the document printed then, exit status 1).

The four unidirectional device-to-device tests (``TESTS``: copy engine and SM copy kernel, read and write) are the
ones that measure one GPU-to-GPU link at a time; the bidirectional ones measure a stream against interfering
traffic, and the all-to-one/one-to-all ones a GPU's total, neither a single link. Each pair of GPUs with a floor is
held to the lower of their two models' floors; a pair with a GPU of a model without a floor is not checked.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

SOURCE = "NVIDIA/nvbandwidth at v0.8 (commit 66746a3b)"
TESTS = ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
         "device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm")
ENVIRON = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
ROOT_KEY = "nvbandwidth"
# the burn-in levels (_burn_in.LEVELS) that run it: medium and above (quick is dcgmi's seconds-long check alone)
FIRST_LEVEL = 2
# failures written per test: a node whose fabric is down has every pair slow (56 pairs on 8 GPUs); the rest counted
MAX_PAIRS_PER_TEST = 8
_DEVICE = re.compile(r"^\s*(\d+): (.*) \(([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\)(?:: \(.*\))?\s*$")


class NvbandwidthError(ValueError):
    """nvbandwidth's output is not its JSON document."""


def argv(binary):
    """The command line: JSON output, the four device-to-device tests by name."""
    return [binary, "-j", "-t"] + list(TESTS)


def command_errors(value):
    """What is wrong with the ``nvbandwidth`` option (a command name looked up on PATH or a path), as sentences."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value or value != value.strip():
        return ["nvbandwidth must be a command name looked up on PATH (nvbandwidth) or a path to the program, without "
                "surrounding spaces or NUL characters; got %r" % (value,)]
    return []


def plan(level, gpus, floor_for):
    """Whether the check runs: (True, None) or (False, the note saying why not). ``level``: the burn-in's run level
    (1-4); ``gpus``: the node's GPUs ({"index", "name"}); ``floor_for(name)``: the floor in GB/s of a GPU of that
    NVML name, or None."""
    if level < FIRST_LEVEL:
        return False, "the GPU-to-GPU bandwidth check (nvbandwidth) runs at the medium level and above, not at quick"
    floored = [g for g in gpus if floor_for(g.get("name")) is not None]
    if len(floored) < 2:
        names = sorted(set(str(g.get("name")) for g in gpus)) or ["no GPU"]
        return False, ("the GPU-to-GPU bandwidth check (nvbandwidth) was not run: it needs two GPUs of a model with a "
                       "bandwidth floor in the catalog (NVLink-joined H100/H200 SXM, A100 SXM, B200, B300, GB200), and "
                       "this node has %d GPU(s): %s" % (len(gpus), ", ".join(names)))
    return True, None


def _cell(value):
    if value == "N/A" or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise NvbandwidthError("a bandwidth matrix cell is neither a number nor N/A: %r" % (value,))
    if math.isnan(number) or number < 0:
        raise NvbandwidthError("a bandwidth matrix cell is not a bandwidth: %r" % (value,))
    return number


def parse(text):
    """nvbandwidth -j's stdout -> {"version", "driver", "error", "devices": {ordinal: {"name", "pci"}}, "tests":
    {name: {"status", "description", "matrix" (rows of float or None), "error"}}}. Where a name appears twice (a test
    that threw: v0.8 appends an "Error" entry), the first status other than Passed or Running wins. NvbandwidthError when it is not that
    JSON."""
    text = text if isinstance(text, str) else ""
    start = text.find("{")
    try:
        doc = json.loads(text[start:] if start >= 0 else text)
    except ValueError as exc:
        raise NvbandwidthError("nvbandwidth -j did not print JSON (%s): %r" % (exc, text[:200]))
    if not isinstance(doc, dict) or not isinstance(doc.get(ROOT_KEY), dict):
        raise NvbandwidthError("nvbandwidth -j printed JSON without a %r object: %r" % (ROOT_KEY, text[:200]))
    root = doc[ROOT_KEY]
    devices = {}
    for entry in root.get("GPU Device list") or []:
        match = _DEVICE.match(entry) if isinstance(entry, str) else None
        if match:
            devices[int(match.group(1))] = {"name": match.group(2), "pci": "%08x:%s:%s" % (
                int(match.group(3), 16), match.group(4).lower(), match.group(5).lower())}
    tests = {}
    for case in root.get("testcases") or []:
        if not isinstance(case, dict) or not isinstance(case.get("name"), str):
            continue
        matrix = case.get("bandwidth_matrix")
        rows = None
        if isinstance(matrix, list):
            if not all(isinstance(row, list) for row in matrix):
                raise NvbandwidthError("%s: bandwidth_matrix is not a list of rows: %r" % (case["name"], matrix))
            rows = [[_cell(v) for v in row] for row in matrix]
        entry = {"status": str(case.get("status")), "description": str(case.get("bandwidth_description") or ""),
                 "matrix": rows, "error": case.get("error")}
        if tests.get(case["name"], {}).get("status") not in (None, "Passed", "Running"):
            continue
        tests[case["name"]] = entry
    error = root.get("error")
    return {"version": root.get("version"), "driver": root.get("Driver Version"),
            "error": str(error) if error else None, "devices": devices, "tests": tests}


def _pci_key(bus_id):
    """"00000000:07:00.0" (NVML) or "0000:07:00.0" -> "00000000:07:00" (nvbandwidth's device list)."""
    parts = str(bus_id or "").lower().split(":")
    if len(parts) != 3:
        return None
    try:
        return "%08x:%s:%s" % (int(parts[0], 16), parts[1], parts[2].split(".")[0])
    except ValueError:
        return None


def _gbps(value):
    text = "%.1f" % value
    return text[:-2] if text.endswith(".0") else text


def verdict(parsed, gpus, floor_for):
    """The check's verdict: {"failures": [{"gpu": None, "test": "nvbandwidth <test>", "link": "GPU a -> GPU b" or
    None, "message"}], "tests": {test: {"status", "checked" (pairs held to a floor), "lowest_gbps"}}, "notes"}.
    ``parsed``: ``parse``'s answer; ``gpus``: the node's GPUs ({"index", "name", "pci_bus_id"}) as NVML lists them;
    ``floor_for(name)``: the floor of a GPU of that NVML name or None. A failure is: the run's error, a test missing,
    waived or in error, a pair of floored GPUs with no bandwidth (N/A) or below their floor."""
    failures, notes, tests = [], [], {}
    by_pci = dict((_pci_key(g.get("pci_bus_id")), g) for g in gpus)
    by_index = dict((g.get("index"), g) for g in gpus)
    unmatched = []

    def gpu_of(ordinal):
        device = parsed["devices"].get(ordinal)
        if device is not None:
            gpu = by_pci.get(device["pci"])
            if gpu is None:
                unmatched.append(ordinal)
            return gpu
        return by_index.get(ordinal)

    if parsed.get("error"):
        failures.append({"gpu": None, "test": "nvbandwidth", "link": None,
                         "message": "nvbandwidth could not run its tests: %s" % parsed["error"].strip()})
    floored = [g for g in gpus if floor_for(g.get("name")) is not None]
    for name in TESTS:
        test = "nvbandwidth " + name
        case = parsed["tests"].get(name)
        if case is None:
            if not parsed.get("error"):
                failures.append({"gpu": None, "test": test, "link": None,
                                 "message": "%s: no result (the run ended before this test)" % test})
            continue
        tests[name] = {"status": case["status"], "checked": 0, "lowest_gbps": None}
        if case["status"] == "Waived":
            failures.append({"gpu": None, "test": test, "link": None, "message": (
                "%s: waived by nvbandwidth (no pair of GPUs could access each other's memory), on a node of %d GPUs "
                "that NVLink joins (%s)" % (test, len(floored), ", ".join(sorted(set(g["name"] for g in floored)))))})
            continue
        if case["status"] != "Passed" or case["matrix"] is None:
            failures.append({"gpu": None, "test": test, "link": None, "message": "%s: %s%s" % (
                test, case["status"], (" - %s" % str(case["error"]).strip()) if case.get("error") else "")})
            continue
        arrow = "<-" if "<-" in case["description"] else "->"
        slow = []
        for row, cells in enumerate(case["matrix"]):
            for column, value in enumerate(cells):
                if row == column:
                    continue
                a, b = gpu_of(row), gpu_of(column)
                if a is None or b is None:
                    continue
                floors = [floor_for(a.get("name")), floor_for(b.get("name"))]
                if None in floors:
                    continue
                floor = min(floors)
                tests[name]["checked"] += 1
                if value is not None:
                    lowest = tests[name]["lowest_gbps"]
                    tests[name]["lowest_gbps"] = value if lowest is None else min(lowest, value)
                if value is None or value < floor:
                    slow.append((a["index"], b["index"], value, floor))
        slow.sort(key=lambda pair: (pair[0], pair[1]))        # by NVML index, whatever CUDA's order
        for a, b, value, floor in slow[:MAX_PAIRS_PER_TEST]:
            link = "GPU %s %s GPU %s" % (a, arrow, b)
            said = "no bandwidth measured (N/A: peer access could not be enabled)" if value is None else \
                "%s GB/s" % _gbps(value)
            failures.append({"gpu": None, "test": test, "link": link, "message": "%s: %s %s below floor %s" % (
                test, link, said, _gbps(floor))})
        if len(slow) > MAX_PAIRS_PER_TEST:
            rest = slow[MAX_PAIRS_PER_TEST:]
            measured = [v for dummy, dummy2, v, dummy3 in rest if v is not None]
            failures.append({"gpu": None, "test": test, "link": None, "message": "%s: %d more pairs below floor%s" % (
                test, len(rest), " (lowest %s GB/s)" % _gbps(min(measured)) if measured else "")})
    if unmatched:
        notes.append("nvbandwidth's CUDA devices %s match no GPU NVML lists by PCI bus id: not checked"
                     % ", ".join(str(o) for o in sorted(set(unmatched))))
    unfloored = sorted(set(str(g.get("name")) for g in gpus if floor_for(g.get("name")) is None))
    if unfloored:
        notes.append("no bandwidth floor in the catalog for %s: pairs with these GPUs were not checked"
                     % ", ".join(unfloored))
    return {"failures": failures, "tests": tests, "notes": notes}


def run(run_command, binary):
    """Run nvbandwidth (``binary``: a path or a name found on PATH) -> {"ran": True, parse's keys} or {"ran": False,
    "error"} where it could not start or its output is not its JSON. nvbandwidth exits 1 after a CUDA error; its
    JSON is read whatever the exit status."""
    try:
        rc, out, err = run_command(argv(binary), dict(ENVIRON))
    except OSError as exc:
        return {"ran": False, "error": "nvbandwidth could not be started (%s)" % exc}
    try:
        parsed = parse(out)
    except NvbandwidthError as exc:
        said = (err or "").strip()[:200]
        return {"ran": False, "error": "%s (rc %s%s)" % (exc, rc, ", " + said if said else "")}
    parsed["ran"] = True
    return parsed
