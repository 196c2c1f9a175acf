"""Read-only probe on a lent GPU machine (tests/gpu/reload_preflight_real_run.sh; issue 47): the driver reload's
preflight (driver_modules preflight, in check mode too) with the real driver and its real holders, a process of this
probe's holding /dev/nvidia0 read-only, the open-module table's answer for the real GPUs, and a node plan refused by
a step's input check still returning the real health verdict. Nothing is stopped, unloaded, loaded, reset or set:
the preflight returns before any action, check mode is on for every module, NVML's read-only guard is on. Prints
JSON lines; exits 1 when a reading disagrees with what the collection says or the GPUs' settings moved."""
import json
import subprocess
import sys
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci
from ansible_collections.gpuops.nvidia.plugins.modules import driver_modules, gpu_node_plan
from tests.support.modrun import run_main

QUERY = "index,name,pci.bus_id,driver_version,mig.mode.current,compute_mode,persistence_mode"


def smi():
    return subprocess.run(["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader"], capture_output=True,
                          text=True, check=False).stdout


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as exc:
        return "unreadable: %s" % exc


def show(label, value):
    print(json.dumps({label: value}, sort_keys=True, default=str))


def main():
    problems = []
    before = (smi(), read("/proc/modules"), read("/sys/module/nvidia/version").strip())
    loaded = before[2]
    show("loaded", loaded)
    # the declared driver is the loaded one: no reload due, nothing to check
    same = run_main(driver_modules.main, {"state": "reloaded", "version": loaded, "preflight": True}, check_mode=True)
    show("preflight, declared = loaded", same)
    if same.get("failed") or same["reload"] or same["blockers"]:
        problems.append("a preflight at the loaded version found a reload or blockers")
    # another version declared (a reload due): the real holders as the preflight counts them
    other = "1.0.0"
    base = run_main(driver_modules.main, {"state": "reloaded", "version": other, "preflight": True}, check_mode=True)
    show("preflight, another version declared", base)
    # a process of ours holding /dev/nvidia0 read-only, then the same preflight
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time\nf = os.open('/dev/nvidia0', os.O_RDONLY)\n"
                               "sys.stdout.write('open\\n'); sys.stdout.flush(); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        held = run_main(driver_modules.main, {"state": "reloaded", "version": other, "preflight": True},
                        check_mode=True)
        show("preflight with a holder", held)
        if not any("PID %d " % holder.pid in h for h in held.get("holders", [])):
            problems.append("the preflight did not name the probe's holder PID %d" % holder.pid)
        if held.get("changed") or held.get("actions"):
            problems.append("the preflight reported actions")
    finally:
        holder.kill()
        holder.wait()
    # the open-module table and the architecture ranges for the real GPUs (below NVML, from PCI sysfs)
    devices = _pci.read_nvidia_devices("/")
    show("pci devices", [{k: d.get(k) for k in ("bus_id", "device", "name", "architecture", "open_modules", "kind")}
                         for d in devices])
    flavours = _pci.flavours(devices)
    show("flavours", flavours)
    if not flavours["open"]:
        problems.append("the open modules are refused for these GPUs")
    # a node plan refused by a step's input check (the Fabric Manager pinned at another version) still reads health
    plan = run_main(gpu_node_plan.main, {"driver": {"version": loaded, "fabric_manager_version": other},
                                         "health": {"policy": {}}}, check_mode=True)
    show("refused plan", {k: plan.get(k) for k in ("failed", "msg", "refused_step")})
    show("refused plan's health", (plan.get("health") or {}).get("gate"))
    if not plan.get("failed") or plan.get("refused_step") != "driver" or "gate" not in (plan.get("health") or {}):
        problems.append("the refused plan did not carry the health verdict")
    time.sleep(1)
    after = (smi(), read("/proc/modules"), read("/sys/module/nvidia/version").strip())
    if after[0] != before[0] or after[2] != before[2]:
        problems.append("the GPUs' settings or the loaded driver moved: %r -> %r" % (before, after))
    if [line.split()[:3] for line in after[1].splitlines() if line.startswith("nvidia")] != \
            [line.split()[:3] for line in before[1].splitlines() if line.startswith("nvidia")]:
        problems.append("the nvidia modules (name, size, refcount) changed")
    show("problems", problems)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
