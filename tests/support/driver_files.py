"""The driver's files under a lab root, as the lab and the tests write them and the kmod stand-ins change them.

NOT NVIDIA's or the kernel's code: a model of the files that the driver layer reads under a root R (``/`` on a real
host, a node's scratch directory in the lab), following the driver layer's file contract (docs/driver.md,
"Files under the root"):

- ``R/proc/sys/kernel/osrelease``: the running kernel (``uname -r``).
- ``R/lib/modules/<kernel>/<dir>/<file>.ko``: a kernel module file a package installs. In the lab it is a text
  PLACEHOLDER (``render_placeholder``/``parse_placeholder``, below), never a real module.
- ``R/proc/modules``: one line per loaded module, as the kernel prints it (``name size refcnt users state offset``;
  ``users`` is ``nvidia_uvm,nvidia_modeset,`` or ``-``), and ``R/sys/module/<name>/{version,refcnt}``.
- ``R/proc/devices`` (the loaded modules' character majors) and ``R/proc/driver/nvidia-caps/mig-minors`` while
  ``nvidia`` is loaded: the collection's plugins/module_utils/sim/_char_devices.py, as the simulator renders them.
- ``R/proc/driver/nvidia/version`` while ``nvidia`` is loaded (the first line as the driver prints it, open or
  proprietary wording) and ``R/proc/driver/nvidia/gpus/<bus id>/`` for each GPU it binds.
- ``R/sys/bus/pci/devices/<bus id>/driver``: a symlink to ``R/sys/bus/pci/drivers/nvidia`` while ``nvidia`` binds
  the device (a GPU: vendor 0x10de, class 0x03xxxx).
- A process holding the device files: ``R/proc/<pid>/{cmdline,cgroup}`` and ``R/proc/<pid>/fd/<n>`` symlinks to
  ``R/dev/nvidia*`` files, which plugins/module_utils/gpu/_device_holders.py finds as it finds them under /proc; each
  open file counts one reference on the module that owns it, as the kernel counts an open character device.

The placeholder module file (the one format the lab's fake packages, the stand-ins and the tests share) is text:

    GPUOPS-PLACEHOLDER-KO 1
    module=nvidia
    version=580.95.05
    flavour=open
    signed=yes

``module`` is the kernel's module name (underscores), ``flavour`` is ``open`` or ``proprietary``, ``signed`` is
``yes`` or ``no``. Any other line is ignored; a file without the first line is not a placeholder.

Fault hooks a test places (``fail_load``): ``R/.standin-faults/modprobe.<module>`` holds the error text (e.g. ``Key
was rejected by service``) that the modprobe stand-in prints, the way kmod words it, when asked to insert that
module; the module is not loaded. Removing the file removes the fault.

The root's stand-ins learn the root from the environment variable GPUOPS_SIMULATED_ROOT (docs/simulator.md).
"""
import json
import os
import random
import shutil
import sys

ENV_ROOT = "GPUOPS_SIMULATED_ROOT"
MAGIC = "GPUOPS-PLACEHOLDER-KO 1"
FAULT_DIR = ".standin-faults"

# Which loaded module each module needs (modprobe loads these first). Kernel facts of the driver's modules:
# nvidia_uvm, nvidia_modeset and nvidia_peermem use nvidia's symbols, nvidia_drm uses nvidia_modeset's
# (NVIDIA/open-gpu-kernel-modules at 580.95.05, kernel-open/*/*.Kbuild; `lsmod` on a host shows the same users).
DEPENDS = {"nvidia": [], "nvidia_uvm": ["nvidia"], "nvidia_modeset": ["nvidia"], "nvidia_peermem": ["nvidia"],
           "nvidia_drm": ["nvidia_modeset"]}
# The device files each module owns: an open one holds a reference on it.
OWNER_OF_FILE = (("nvidia-uvm", "nvidia_uvm"), ("nvidia-modeset", "nvidia_modeset"), ("nvidia", "nvidia"))
# Sizes are not read by anything; these are a real host's (lsmod on an H100 host, driver 580).
SIZES = {"nvidia": 11882496, "nvidia_uvm": 2068480, "nvidia_modeset": 1638400, "nvidia_drm": 135168,
         "nvidia_peermem": 16384}

NVRM = {
    # The first line of /proc/driver/nvidia/version (real H100 reading: docs of the driver layer; the proprietary
    # wording as NVIDIA's proprietary driver prints it).
    "open": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (dvs-builder@U16-I2-C01-4-1)",
    "proprietary": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Release Build  (dvs-builder@U16-I2-C01-4-1)",
}
GCC_LINE = "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)"


def name(module):
    """The kernel's name of a module: modprobe accepts dashes and underscores alike."""
    return module.replace("-", "_")


def path(root, *parts):
    return os.path.join(root, *[p.lstrip("/") for p in parts])


def write(root, rel, text):
    full = path(root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    tmp = full + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, full)
    return full


def read(root, rel, default=None):
    try:
        with open(path(root, rel)) as handle:
            return handle.read()
    except (IOError, OSError):
        return default


# ---- the placeholder module file ------------------------------------------------------------------------------

def render_placeholder(module, version, flavour="open", signed=True):
    if flavour not in ("open", "proprietary"):
        raise ValueError("flavour must be open or proprietary, not %r" % flavour)
    return "%s\nmodule=%s\nversion=%s\nflavour=%s\nsigned=%s\n" % (
        MAGIC, name(module), version, flavour, "yes" if signed else "no")


def parse_placeholder(text):
    """{"module", "version", "flavour", "signed"} of a placeholder's text, or None when it is not one."""
    lines = (text or "").splitlines()
    if not lines or lines[0].strip() != MAGIC:
        return None
    fields = {}
    for line in lines[1:]:
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    if not {"module", "version", "flavour"} <= set(fields):
        return None
    return {"module": fields["module"], "version": fields["version"], "flavour": fields["flavour"],
            "signed": fields.get("signed", "no") == "yes"}


def module_file_name(module):
    """A package's file name of the module: nvidia-uvm.ko for nvidia_uvm (as NVIDIA's packages name them)."""
    return name(module).replace("_", "-") + ".ko"


def install_module_files(root, version, flavour="open", signed=True, kernel=None, subdir=None,
                         modules=("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")):
    """Placeholders for one driver's modules under R/lib/modules/<kernel>/<subdir>/ (what a fake package installs).
    Returns the directory."""
    kernel = kernel or running_kernel(root)
    subdir = subdir or "kernel/drivers/video"
    directory = path(root, "lib/modules", kernel, subdir)
    os.makedirs(directory, exist_ok=True)
    for module in modules:
        write(root, os.path.join("lib/modules", kernel, subdir, module_file_name(module)),
              render_placeholder(module, version, flavour, signed))
    return directory


def running_kernel(root):
    text = read(root, "proc/sys/kernel/osrelease")
    if not text or not text.strip():
        raise ValueError("%s holds no running kernel" % path(root, "proc/sys/kernel/osrelease"))
    return text.strip()


def set_kernel(root, kernel):
    write(root, "proc/sys/kernel/osrelease", kernel + "\n")


def find_module_file(root, module, kernel=None):
    """The placeholder modprobe would insert for ``module`` under the running kernel's directory: the one under
    ``updates/`` first (depmod's default search order puts ``updates`` before the kernel's own tree, so a DKMS
    build there wins over a packaged one), else the first in path order. None when there is none."""
    kernel = kernel or running_kernel(root)
    base = path(root, "lib/modules", kernel)
    wanted = module_file_name(module)
    found = []
    for dirpath, _dirs, files in os.walk(base):
        for file_name in files:
            if file_name == wanted or file_name == name(module) + ".ko":
                found.append(os.path.join(dirpath, file_name))
    found.sort(key=lambda p: (not os.path.relpath(p, base).startswith("updates" + os.sep), p))
    return found[0] if found else None


# ---- loaded modules ---------------------------------------------------------------------------------------------

def loaded(root):
    """{name: {"refcnt": int, "users": [names], "address": its load address}} from R/proc/modules, in file order."""
    out = {}
    for line in (read(root, "proc/modules", "") or "").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        users = [u for u in parts[3].split(",") if u and u != "-"]
        out[parts[0]] = {"refcnt": int(parts[2]), "users": users, "address": parts[5] if len(parts) > 5 else None}
    return out


def new_load_address():
    """/proc/modules' last column for a module loaded now: each load has its own address, as the kernel's does (the
    simulated NVML tells a driver reload by nvidia's: plugins/module_utils/sim/_simulator_host.py, load_address)."""
    return "0x%016x" % (0xffffffffc0000000 + random.getrandbits(17) * 0x1000)


def _save(root, modules, versions):
    lines = []
    for mod, info in modules.items():
        users = ",".join(info["users"]) + "," if info["users"] else "-"
        if not info.get("address") or not int(info["address"], 16):
            info["address"] = new_load_address()
        lines.append("%s %d %d %s Live %s" % (mod, SIZES.get(mod, 16384), info["refcnt"], users, info["address"]))
    write(root, "proc/modules", "".join(line + "\n" for line in lines))
    for mod, info in modules.items():
        write(root, "sys/module/%s/refcnt" % mod, "%d\n" % info["refcnt"])
        if mod in versions:
            write(root, "sys/module/%s/version" % mod, versions[mod] + "\n")
    for rel, text in _char_devices().files(modules).items():
        if text is None:
            shutil.rmtree(os.path.dirname(path(root, rel)), ignore_errors=True)
        else:
            write(root, rel, text)


_SIM_MODULES = {}


def _sim_module(name):
    """The collection's plugins/module_utils/sim/<name>.py, loaded by its path (it imports nothing), once."""
    if name not in _SIM_MODULES:
        import importlib.util
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        spec = importlib.util.spec_from_file_location(
            "gpuops" + name, os.path.join(here, "plugins", "module_utils", "sim", name + ".py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SIM_MODULES[name] = module
    return _SIM_MODULES[name]


def _char_devices():
    """_char_devices.py: R/proc/devices and mig-minors, as the simulator renders them."""
    return _sim_module("_char_devices")


def nvreg_params():
    """_nvreg_params.py: the simulated nvidia module's parameters (what modinfo -p lists, what a load takes from
    modprobe.d, R/proc/driver/nvidia/params)."""
    return _sim_module("_nvreg_params")


def load_module(root, module, info):
    """Insert one module (its dependencies must be loaded) from a parsed placeholder ``info``."""
    mod = name(module)
    modules = loaded(root)
    if mod in modules:
        return
    modules[mod] = {"refcnt": 0, "users": []}
    for dep in DEPENDS.get(mod, []):
        modules[dep]["refcnt"] += 1
        modules[dep]["users"].append(mod)
    _save(root, modules, {mod: info["version"]})
    if mod == "nvidia":
        gpus = bind_gpus(root, True)
        write(root, "proc/driver/nvidia/version", NVRM[info["flavour"]] % info["version"] + "\n" + GCC_LINE + "\n")
        # the parameters this load took from the root's modprobe.d (the modprobe stand-in refuses a bad value first)
        values, _error = nvreg_params().load_values(root)
        write(root, nvreg_params().PROC_PARAMS, nvreg_params().proc_params_text(values or dict(
            (p[0], p[2]) for p in nvreg_params().PARAMS)))
        for bus_id in gpus:
            os.makedirs(path(root, "proc/driver/nvidia/gpus", bus_id), exist_ok=True)
        # nvidia also drives the NVSwitches (class 0x0680): one entry each under /proc/driver/nvidia-nvswitch/devices
        for bus_id in nvswitches(root):
            write(root, "proc/driver/nvidia-nvswitch/devices/%s" % bus_id, bus_id + "\n")


def unload_module(root, module):
    mod = name(module)
    modules = loaded(root)
    info = modules.pop(mod)
    for dep in DEPENDS.get(mod, []):
        if dep in modules:
            modules[dep]["refcnt"] -= 1
            modules[dep]["users"] = [u for u in modules[dep]["users"] if u != mod]
    _save(root, modules, {})
    shutil.rmtree(path(root, "sys/module", mod), ignore_errors=True)
    if mod == "nvidia":
        bind_gpus(root, False)
        shutil.rmtree(path(root, "proc/driver/nvidia"), ignore_errors=True)
        shutil.rmtree(path(root, "proc/driver/nvidia-nvswitch"), ignore_errors=True)
    return info


def nvswitches(root):
    """The bus ids of the NVIDIA bridge functions (class 0x0680xx: the NVSwitches) under R/sys/bus/pci/devices."""
    devices = path(root, "sys/bus/pci/devices")
    out = []
    for bus_id in sorted(os.listdir(devices)) if os.path.isdir(devices) else []:
        dev = os.path.join(devices, bus_id)
        if (read(dev, "vendor", "") or "").strip().lower() == "0x10de" and \
                (read(dev, "class", "") or "").strip().lower().startswith("0x0680"):
            out.append(bus_id)
    return out


def set_refcnt(root, module, delta):
    """A reference the kernel counts without a process (a display server's DRM client, another kernel user)."""
    modules = loaded(root)
    modules[name(module)]["refcnt"] += delta
    _save(root, modules, {})


def bind_gpus(root, bind):
    """Bind (or unbind) ``nvidia`` to every NVIDIA GPU under R/sys/bus/pci/devices; returns their bus ids."""
    devices = path(root, "sys/bus/pci/devices")
    driver_dir = path(root, "sys/bus/pci/drivers/nvidia")
    done = []
    if not os.path.isdir(devices):
        return done
    for bus_id in sorted(os.listdir(devices)):
        dev = os.path.join(devices, bus_id)
        vendor = (read(dev, "vendor", "") or "").strip().lower()
        klass = (read(dev, "class", "") or "").strip().lower()
        if vendor != "0x10de" or not klass.startswith("0x03"):
            continue
        link = os.path.join(dev, "driver")
        if bind:
            os.makedirs(driver_dir, exist_ok=True)
            if not os.path.lexists(link):
                os.symlink(os.path.relpath(driver_dir, dev), link)
        elif os.path.islink(link) and os.path.basename(os.readlink(link)) == "nvidia":
            os.unlink(link)
        done.append(bus_id)
    return done


def load_driver(root, version, flavour="open", modules=("nvidia", "nvidia_uvm", "nvidia_modeset")):
    """A node whose driver is loaded (no module file needed): the lab's and the tests' starting point."""
    for mod in modules:
        for dep in DEPENDS[mod]:
            load_module(root, dep, {"version": version, "flavour": flavour})
        load_module(root, mod, {"version": version, "flavour": flavour})


# ---- processes holding the device files --------------------------------------------------------------------------

def _owner(device_file):
    base = os.path.basename(device_file)
    for prefix, module in OWNER_OF_FILE:
        if base.startswith(prefix):
            return module
    return "nvidia"


def add_holder(root, pid, command, device_files=("nvidia0", "nvidiactl"), cgroup="0::/user.slice/session-1.scope"):
    """A process ``pid`` running ``command`` (argv list or str) holding R/dev/<file> open: its /proc entry, and one
    reference per open file on the owning module (when loaded)."""
    argv = [command] if isinstance(command, str) else list(command)
    proc = path(root, "proc", str(pid))
    if os.path.isdir(os.path.join(proc, "fd")) and os.listdir(os.path.join(proc, "fd")):
        return  # that process already runs and holds them (a daemon whose stop left it running)
    os.makedirs(os.path.join(proc, "fd"), exist_ok=True)
    write(root, "proc/%d/cmdline" % pid, "\0".join(argv) + "\0")
    write(root, "proc/%d/comm" % pid, os.path.basename(argv[0])[:15] + "\n")
    write(root, "proc/%d/cgroup" % pid, cgroup + "\n")
    modules = loaded(root)
    for index, dev in enumerate(device_files):
        target = path(root, "dev", dev)
        if not os.path.exists(target):
            write(root, "dev/" + dev, "")
        os.symlink(target, os.path.join(proc, "fd", str(10 + index)))
        owner = _owner(dev)
        if owner in modules:
            modules[owner]["refcnt"] += 1
    _save(root, modules, {})


def remove_holder(root, pid):
    """The process exits: its references go with it."""
    proc = path(root, "proc", str(pid))
    fd_dir = os.path.join(proc, "fd")
    modules = loaded(root)
    for fd in os.listdir(fd_dir) if os.path.isdir(fd_dir) else []:
        owner = _owner(os.readlink(os.path.join(fd_dir, fd)))
        if owner in modules and modules[owner]["refcnt"] > 0:
            modules[owner]["refcnt"] -= 1
    _save(root, modules, {})
    shutil.rmtree(proc, ignore_errors=True)


# ---- fault hooks ---------------------------------------------------------------------------------------------

def fail_load(root, module, error="Key was rejected by service"):
    """The next modprobe of ``module`` fails with ``error`` (kmod's wording: could not insert '<m>': <error>)."""
    write(root, os.path.join(FAULT_DIR, "modprobe." + name(module)), error + "\n")


def load_fault(root, module):
    text = read(root, os.path.join(FAULT_DIR, "modprobe." + name(module)))
    return text.strip() if text else None


def clear_faults(root):
    shutil.rmtree(path(root, FAULT_DIR), ignore_errors=True)


def snapshot(root):
    """Every file under the root with its content (symlinks by target): for 'nothing changed' assertions."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for entry in sorted(dirs + files):
            full = os.path.join(dirpath, entry)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = "-> " + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as handle:
                    out[rel] = handle.read()
    return out


def main(argv):
    """Command line for unit files of the lab and the tests (the systemctl stand-in runs their Exec lines), on the
    root named by GPUOPS_SIMULATED_ROOT:
    ``hold PID UNIT COMMAND`` (a daemon started by UNIT holds nvidia0 and nvidiactl), ``release PID`` (it exits),
    ``modules`` (print the loaded modules)."""
    root = os.environ[ENV_ROOT]
    if argv[:1] == ["hold"] and len(argv) >= 4:
        add_holder(root, int(argv[1]), argv[3:], cgroup="0::/system.slice/%s" % argv[2])
    elif argv[:1] == ["release"] and len(argv) == 2:
        remove_holder(root, int(argv[1]))
    elif argv == ["modules"]:
        print(json.dumps(loaded(root), indent=1))
    else:
        print(main.__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
