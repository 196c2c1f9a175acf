"""On a real GPU host: the DRA claim templates' selectors (plugins/module_utils/plan/_dra.py) against what NVIDIA's DRA
kubelet plugin would publish for the same GPUs, read by NVIDIA's own Go calls.

The other side is scripts/nvidia_facts/dra_device_probe.go (ours), built against kubernetes-sigs/dra-driver-nvidia-gpu
v25.8.1's vendored go-nvml/go-nvlib (never committed; tests/gpu/dra_probe_run.sh and docs/readings/dra-real-gpu.md
say how). It makes getGpuInfo's calls (GetMemoryInfo().Total, GetName, GetUUID, GetBrandAsString, the minor number,
...) and prints the attributes and memory capacity GetDevice publishes. Our side is the collection's NVML backend
(nvidia-ml-py) through _gpu_backend.read_facts, as gpu_info reads it.

Runs only with GPUOPS_REAL_GPU=1 (tests/conftest.py, as every test in tests/gpu), a GPU that pynvml sees, nvidia-smi,
and GPUOPS_DRA_PROBE naming the built probe; CI skips it. Read-only: no GPU setting is changed, and the last test
compares nvidia-smi's compute mode, MIG modes and persistence mode before and after. With GPUOPS_REPORT_DIR set,
writes dra_real_report.json (facts, probe output, templates, every comparison).
"""
import json
import os
import re
import subprocess

import pytest

from tests.gpu.real_host import gpu_settings, why_skip

pytestmark = pytest.mark.gpu

PROBE = os.environ.get("GPUOPS_DRA_PROBE") or ""
NODE = "n"
PROFILE = {"name": "mps-4", "sharing": "mps", "replicas": 4}
SETTINGS = ["index", "uuid", "compute_mode", "mig.mode.current", "mig.mode.pending", "persistence_mode"]

_ATTR = re.compile(r"^device\.attributes\['gpu\.nvidia\.com'\]\.([A-Za-z]+) == '([^']*)'$")
_MEMORY = re.compile(r"^device\.capacity\['gpu\.nvidia\.com'\]\.memory\.compareTo\(quantity\('([^']*)'\)\) == 0$")


WHY_SKIP = why_skip(PROBE, "GPUOPS_DRA_PROBE") if os.environ.get("GPUOPS_REAL_GPU") == "1" else "needs GPUOPS_REAL_GPU=1"
if WHY_SKIP:
    pytestmark = [pytest.mark.gpu, pytest.mark.skip(reason=WHY_SKIP)]


BEFORE = gpu_settings(SETTINGS) if not WHY_SKIP else None


# -- the selectors, evaluated on their literal values ---------------------------------------------------------
def parse_selector(expression):
    """('attribute', name, value) or ('memory', quantity literal); anything else fails the test."""
    match = _ATTR.match(expression)
    if match:
        return ("attribute", match.group(1), match.group(2))
    match = _MEMORY.match(expression)
    if match:
        return ("memory", match.group(1))
    raise AssertionError("selector the test cannot evaluate: %r" % expression)


def selects(expression, device):
    """Whether one selector matches one probe device: an attribute equal to its literal; the memory capacity equal
    to the quantity both as bytes and by the Go side's resource.Quantity.Cmp (the probe's quantityCmp)."""
    parsed = parse_selector(expression)
    if parsed[0] == "attribute":
        return device["published"]["attributes"].get(parsed[1]) == parsed[2]
    literal = parsed[1]
    cmp_go = (device.get("quantityCmp") or {}).get(literal)
    assert cmp_go is not None, "the probe did not compare quantity %r" % literal
    by_bytes = literal.isdigit() and int(literal) == device["memoryBytes"]
    assert by_bytes == (cmp_go == 0), "bytes and Quantity.Cmp disagree on %r vs %s" % (literal, device["memoryBytes"])
    return cmp_go == 0


def template_objects(gpus):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
    decls = _dra.node_templates(PROFILE, gpus, NODE, per_gpu=True)
    return [_dra.template_object(d, "default", "test") for d in decls]


def template_selection(template, devices):
    """(deviceClassName, [CEL expressions], names of the probe's devices all of them select)."""
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    expressions = [s["cel"]["expression"] for s in exactly.get("selectors") or []]
    chosen = [d["deviceName"] for d in devices if not d["migEnabled"] and all(selects(e, d) for e in expressions)]
    return exactly["deviceClassName"], expressions, chosen


def quantity_literals(templates):
    out = set()
    for template in templates:
        for selector in template["spec"]["spec"]["devices"]["requests"][0]["exactly"].get("selectors") or []:
            parsed = parse_selector(selector["cel"]["expression"])
            if parsed[0] == "memory":
                out.add(parsed[1])
    return sorted(out)


# -- one reading of both sides --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reading():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import read_facts
    facts = read_facts()
    templates = template_objects(facts["gpus"])
    proc = subprocess.run([PROBE] + quantity_literals(templates), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False, timeout=120)
    probe = json.loads(proc.stdout) if proc.stdout.strip() else {"errors": ["no output"], "gpus": []}
    data = {"facts": facts, "probe": probe, "probe_rc": proc.returncode, "probe_stderr": proc.stderr[-4000:],
            "templates": templates, "rows": [], "selection": {}, "settings_before": BEFORE}
    yield data
    data["settings_after"] = gpu_settings(SETTINGS)
    directory = os.environ.get("GPUOPS_REPORT_DIR")
    if directory:
        with open(os.path.join(directory, "dra_real_report.json"), "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=True, default=str)


def _pairs(reading):
    gpus = {g["index"]: g for g in reading["facts"]["gpus"]}
    devs = {d["index"]: d for d in reading["probe"]["gpus"]}
    assert sorted(gpus) == sorted(devs), "NVML backend sees GPUs %s, the probe %s" % (sorted(gpus), sorted(devs))
    return [(gpus[i], devs[i]) for i in sorted(gpus)]


def _compare(reading, rows):
    reading["rows"].extend(rows)
    return ["%s: ours %r, NVIDIA's %r" % (field, ours, theirs) for field, ours, theirs in rows if ours != theirs]


def test_probe_read_every_gpu(reading):
    probe = reading["probe"]
    assert reading["probe_rc"] == 0 and not probe["errors"], (reading["probe_rc"], probe["errors"],
                                                              reading["probe_stderr"])
    assert probe["count"] == len(reading["facts"]["gpus"]) > 0
    _pairs(reading)


def test_selector_fields_equal(reading):
    """What the templates' selectors name: NVML name == productName, uuid, memory_total_bytes == memory.Total."""
    rows = []
    for gpu, dev in _pairs(reading):
        i = gpu["index"]
        rows += [("gpu%d.name/productName" % i, gpu["name"], dev["productName"]),
                 ("gpu%d.uuid" % i, gpu["uuid"], dev["uuid"]),
                 ("gpu%d.memory_total_bytes/memoryBytes" % i, gpu["memory_total_bytes"], dev["memoryBytes"]),
                 ("gpu%d.published productName" % i, gpu["name"], dev["published"]["attributes"]["productName"]),
                 ("gpu%d.published uuid" % i, gpu["uuid"], dev["published"]["attributes"]["uuid"])]
    assert not _compare(reading, rows)


def test_other_published_fields_agree(reading):
    """The rest of getGpuInfo's reads, in our facts' own spelling: driver and CUDA versions, compute capability,
    PCI bus ID (go-nvlib lowercases it and drops the first 4 of the 8 domain digits), architecture, MIG mode."""
    facts = reading["facts"]
    arch = {"hopper": "Hopper", "ampere": "Ampere", "ada": "Ada Lovelace", "blackwell": "Blackwell"}
    rows = []
    for gpu, dev in _pairs(reading):
        i = gpu["index"]
        bus = gpu["pci_bus_id"].lower()
        rows += [("gpu%d.driver_version" % i, facts["driver_version"], dev["driverVersion"]),
                 ("gpu%d.cuda_driver_version" % i, facts["cuda_driver_version"], dev["cudaDriverVersion"]),
                 ("gpu%d.compute_capability" % i, gpu["compute_capability"], dev["cudaComputeCapability"]),
                 ("gpu%d.pci_bus_id" % i, bus[4:] if bus.startswith("0000") and bus != "0000" else bus,
                  dev["pcieBusID"]),
                 ("gpu%d.architecture" % i, arch.get(gpu["architecture"], gpu["architecture"]), dev["architecture"]),
                 ("gpu%d.mig enabled" % i, gpu["mig_mode_current"] == "Enabled", dev["migEnabled"])]
    assert not _compare(reading, rows)


def test_templates_select_exactly_the_probes_devices(reading):
    """Each GPU (MIG disabled) is selected by exactly one MPS template, the one built from its own facts, and by
    exactly one per-GPU template, n-gpu<index>, which selects that GPU alone; no template selects nothing."""
    devices = reading["probe"]["gpus"]
    by_uuid = {d["uuid"]: d["deviceName"] for d in devices}
    problems = []
    selected_by = {d["deviceName"]: [] for d in devices}
    for template in reading["templates"]:
        name = template["metadata"]["name"]
        device_class, expressions, chosen = template_selection(template, devices)
        reading["selection"][name] = {"deviceClassName": device_class, "selectors": expressions, "selects": chosen}
        if device_class != "gpu.nvidia.com":
            problems.append("%s: device class %s" % (name, device_class))
        if not chosen:
            problems.append("%s selects none of the probe's devices" % name)
        for dev in chosen:
            selected_by[dev].append(name)
    for gpu, dev in _pairs(reading):
        if dev["migEnabled"]:
            continue
        mine = selected_by[dev["deviceName"]]
        per_gpu = "%s-gpu%d" % (NODE, gpu["index"])
        mps = [n for n in mine if n.startswith("gpu-mps-4-")]
        if sorted(mine) != sorted(mps + [per_gpu]) or len(mps) != 1:
            problems.append("%s (GPU %d) is selected by %s" % (dev["deviceName"], gpu["index"], mine))
        if reading["selection"].get(per_gpu, {}).get("selects") != [by_uuid.get(gpu["uuid"])]:
            problems.append("%s selects %s" % (per_gpu, reading["selection"].get(per_gpu)))
        for name in mps:
            selectors = reading["selection"][name]["selectors"]
            wanted = {("attribute", "productName", gpu["name"]), ("memory", str(gpu["memory_total_bytes"]))}
            if set(parse_selector(e) for e in selectors) != wanted:
                problems.append("%s selects GPU %d with %s" % (name, gpu["index"], selectors))
    assert not problems, problems


def test_expected_devices_are_what_the_plugin_publishes(reading):
    """_dra.expected_devices(facts) is the probe's device list (type gpu per GPU with MIG disabled), and
    slice_problems finds nothing in a ResourceSlice made of the probe's published devices."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
    gpus = reading["facts"]["gpus"]
    devices = reading["probe"]["gpus"]
    if any(d["migEnabled"] for d in devices):
        pytest.skip("a GPU has MIG enabled: the probe does not enumerate MIG devices")
    published = {d["published"]["attributes"]["uuid"]: {"type": d["published"]["attributes"]["type"]}
                 for d in devices}
    assert _dra.expected_devices(gpus) == published
    slices = [{"spec": {"driver": _dra.DRIVER, "nodeName": NODE,
                        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": d["published"]["name"],
                                     "attributes": {k: ({"version": v} if k.endswith("Version") or k ==
                                                        "cudaComputeCapability" else {"string": v})
                                                    for k, v in d["published"]["attributes"].items()},
                                     "capacity": {"memory": {"value": d["published"]["capacity"]["memory"]}}}
                                    for d in devices]}}]
    assert _dra.slice_problems(slices, NODE, gpus) == []


def test_no_gpu_setting_changed(reading):
    assert reading is not None
    assert gpu_settings(SETTINGS) == BEFORE
