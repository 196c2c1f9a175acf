"""Read-only comparison, on a real GPU host, of the collection's driver facts below NVML with what the host itself
says: _driver_state.read("/"), _pci.read_nvidia_devices("/") and gpu_info's driver section next to the raw first
line of /proc/driver/nvidia/version, /sys/module/nvidia/version, NVML's own answers and `nvidia-smi -q` (Driver
Version, each GPU's bus id). Exit status 0 when every pair agrees, 1 when one differs (each difference printed),
2 when something could not be read at all.

Nothing on the GPU is changed: the only NVML calls are reads (GPUOPS_NVML_READ_ONLY=1 is set, so the collection's
backend refuses any mutating call), no module is loaded or unloaded, no package or service is touched.

Runs with Python 3, nvidia-ml-py and this repository only:
    GPUOPS_NVML_READ_ONLY=1 python3 tests/gpu/driver_facts_vs_host.py
It builds a temporary ansible_collections/gpuops/nvidia link to the repository; when ansible-core is not installed,
gpu_info's driver section is computed with a stand-in for AnsibleModule's import (the section's code does not use
it).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _collection_on_path():
    try:
        import ansible_collections.gpuops.nvidia  # noqa: F401  (already importable: make setup's tree)
        return
    except ImportError:
        pass
    base = tempfile.mkdtemp(prefix="gpuops-collection-")
    os.makedirs(os.path.join(base, "ansible_collections", "gpuops"))
    os.symlink(ROOT, os.path.join(base, "ansible_collections", "gpuops", "nvidia"))
    sys.path.insert(0, base)


def _gpu_info_module():
    try:
        import ansible.module_utils.basic  # noqa: F401
    except ImportError:
        stub = types.ModuleType("ansible.module_utils.basic")
        stub.AnsibleModule = object
        for name in ("ansible", "ansible.module_utils"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["ansible.module_utils.basic"] = stub
    from ansible_collections.gpuops.nvidia.plugins.modules import gpu_info
    return gpu_info


def _read(path):
    with open(path) as handle:
        return handle.read()


def raw_nvrm(text):
    """(version, flavour) from the first line, by words alone (independent of _driver_state's expression)."""
    words = text.splitlines()[0].split()
    flavour = "open" if "Open" in words else "proprietary"
    versions = [w for w in words if re.match(r"^\d+(\.\d+)+$", w)]
    return (versions[0] if versions else None), flavour


def smi_facts():
    out = subprocess.run(["nvidia-smi", "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, check=False).stdout
    version = re.search(r"^Driver Version\s*:\s*(\S+)", out, re.M)
    buses = re.findall(r"^GPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", out, re.M)
    return (version.group(1) if version else None), [_bus(b) for b in buses]


def _bus(bus_id):
    """Any PCI bus id form -> sysfs form (4-digit domain, lower case)."""
    domain, rest = bus_id.split(":", 1)
    return ("%04x:%s" % (int(domain, 16), rest)).lower()


def main():
    os.environ["GPUOPS_NVML_READ_ONLY"] = "1"
    _collection_on_path()
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_state
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
    gpu_info = _gpu_info_module()

    try:
        proc_text = _read("/proc/driver/nvidia/version")
        sys_version = _read("/sys/module/nvidia/version").strip()
        state = _driver_state.read("/")
        devices = _pci.read_nvidia_devices("/")
        backend = NvmlBackend()
        try:
            nvml = backend.read_all()
        finally:
            backend.close()
        smi_version, smi_buses = smi_facts()
    except Exception as exc:            # a reading that cannot be made at all: say which, exit 2
        print("cannot read: %s: %s" % (type(exc).__name__, exc))
        return 2
    section = gpu_info.driver_section("/", nvml["driver_version"], None)
    proc_version, proc_flavour = raw_nvrm(proc_text)
    loaded = state["loaded"] or {}
    pci_gpus = dict((d["bus_id"], d) for d in _pci.gpus(devices))
    nvml_gpus = dict((_bus(g["pci_bus_id"]), g) for g in nvml["gpus"])

    pairs = [
        ("loaded version: _driver_state vs /sys/module/nvidia/version", loaded.get("version"), sys_version),
        ("loaded version: _driver_state vs /proc/driver/nvidia/version", loaded.get("version"), proc_version),
        ("flavour: _driver_state vs /proc/driver/nvidia/version's words", loaded.get("flavour"), proc_flavour),
        ("driver version: NVML vs nvidia-smi -q", nvml["driver_version"], smi_version),
        ("driver version: _driver_state vs nvidia-smi -q", loaded.get("version"), smi_version),
        ("gpu_info driver.loaded_version vs nvidia-smi -q", section["loaded_version"], smi_version),
        ("gpu_info driver.nvml_driver_version vs nvidia-smi -q", section["nvml_driver_version"], smi_version),
        ("gpu_info driver.flavour vs /proc words", section["flavour"], proc_flavour),
        ("kernel: _driver_state vs os.uname().release", state["kernel"], os.uname().release),
        ("GPU bus ids: _pci vs nvidia-smi -q", sorted(pci_gpus), sorted(smi_buses)),
        ("GPU bus ids: _pci vs NVML", sorted(pci_gpus), sorted(nvml_gpus)),
        ("GPU names: _pci (catalog) vs NVML", [pci_gpus[b]["name"] for b in sorted(pci_gpus)],
         [nvml_gpus[b]["name"] if b in nvml_gpus else None for b in sorted(pci_gpus)]),
        ("bound driver of every GPU", sorted(set(d["bound_driver"] for d in pci_gpus.values())), ["nvidia"]),
        ("NVSwitch system: /proc mark vs NVSwitch PCI functions", state["nvswitch"], bool(_pci.nvswitches(devices))),
    ]
    print("# /proc/driver/nvidia/version: %s" % proc_text.splitlines()[0])
    print("# /sys/module/nvidia/version: %s" % sys_version)
    print("# _driver_state.read('/'): %s" % json.dumps(state, sort_keys=True))
    print("# _pci devices: %s" % json.dumps(devices, sort_keys=True))
    print("# _pci.flavours: %s" % json.dumps(_pci.flavours(devices), sort_keys=True))
    print("# gpu_info driver section: %s" % json.dumps(section, sort_keys=True))
    differ = 0
    for label, ours, theirs in pairs:
        same = ours == theirs
        differ += 0 if same else 1
        print("%-4s %s: %r %s %r" % ("ok" if same else "DIFF", label, ours, "==" if same else "!=", theirs))
    print("%d of %d pairs differ" % (differ, len(pairs)))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
