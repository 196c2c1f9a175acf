# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated node below NVML: the files a kernel and a driver show (PCI sysfs, /proc/modules, /sys/module,
/proc/driver/nvidia, the Secure Boot efivar, the NVSwitch and NVLink5 marks) rendered under the node's root, and the
rule that makes the simulated NVML follow them.

The same reading code (_pci, _driver_state) reads a real host's "/" and a simulated node's root; only this file
writes the simulated one. The root is named by GPUOPS_SIMULATED_ROOT (the lab sets it to the node's scratch
directory, gpuops_lab_root); without it nothing is rendered and the simulator behaves as before this layer existed.

When the simulated machine is created (its state file written for the first time) and a root is known, ``render``
writes the machine's host tree once: every GPU and NVSwitch of the shape as PCI functions, and by default a driver
"brought by the image" (loaded at the state's driver version, open flavour, nvidia and nvidia_uvm loaded, its NVML
library installed). GPUOPS_SIMULATED_HOST, a comma-separated list, changes that at creation:
  driver=none | driver=<version>, flavour=open|proprietary, nouveau, secure-boot=on|off|absent, kernel=<release>.

NVML follows the host (``nvml_init_error``), in the order the real library meets the failures: no
``libnvidia-ml.so.1`` -> LIBRARY_NOT_FOUND; no nvidia module loaded -> DRIVER_NOT_LOADED; the loaded module's
version different from the library's -> LIB_RM_VERSION_MISMATCH ("Driver/library version mismatch", as nvidia-smi
prints it). The userspace library is the link ``NVML_LIBRARY_LINK`` -> ``libnvidia-ml.so.<version>`` (the names the
Ubuntu and CUDA-repository driver packages install; the fake driver packages of the lab install the same two files):
its target's name is the library's version. A state created without a root (a test rig's file written before the
run) is rendered the first time it is opened with a root that holds no host tree, as at creation, so that every
simulated node the lab runs on has what a real node has (nvidia-ctk's create-dev-char-symlinks reads R/proc/devices
and PCI sysfs). Without a root nothing is rendered and NVML answers as it always did. The check costs one readlink and
one small read per backend; nothing is re-rendered on later runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import random
import shutil
import tempfile

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _char_devices
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _nvreg_params
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver._driver_state import (
    KERNEL_RELEASE,
    MODULE_VERSION,
    NVRM_VERSION,
    NVSWITCH_DEVICES,
    PROC_MODULES,
    SECURE_BOOT_VAR,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import ENV_HOST, GpuBackendError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._pci import PCI_DEVICES

# The userspace NVML library, relative to the root: Debian/Ubuntu's multiarch directory first, RHEL's lib64 second.
NVML_LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64")
NVML_LIBRARY_LINK = NVML_LIBRARY_DIRS[0] + "/libnvidia-ml.so.1"
NVML_LIBRARY_PREFIX = "libnvidia-ml.so."
# nvmlErrorString's words, as nvidia-smi prints them after "Failed to initialize NVML: " (public nvidia-smi output in
# github.com/oddmario/NVIDIA-Ubuntu-Driver-Guide issue 4 and NVIDIA/ubuntu-packaging-nvidia-driver issue 3).
MISMATCH_TEXT = "Driver/library version mismatch"
NOT_LOADED_TEXT = "Driver Not Loaded"
LIBRARY_NOT_FOUND_TEXT = "NVML Shared Library Not Found"

# The kernel a simulated node runs (an Ubuntu 24.04 GA kernel's release string).
DEFAULT_KERNEL = "6.8.0-87-generic"
# The modules an image's driver has loaded: as on the real H100 of the reference (driver.md: /proc/modules lists
# nvidia_uvm and nvidia). Sizes are placeholders: nothing reads them.
IMAGE_MODULES = ("nvidia_uvm", "nvidia")
_MODULE_SIZES = {"nvidia": 14376960, "nvidia_uvm": 2076672, "nvidia_modeset": 1642496, "nvidia_drm": 135168,
                 "nvidia_peermem": 16384, "nouveau": 3096576}
_MODULE_DEPENDS = {"nvidia_uvm": "nvidia", "nvidia_modeset": "nvidia", "nvidia_peermem": "nvidia",
                   "nvidia_drm": "nvidia_modeset"}
_SB_ATTRIBUTES = b"\x06\x00\x00\x00"      # EFI_VARIABLE_BOOTSERVICE_ACCESS | EFI_VARIABLE_RUNTIME_ACCESS
_GPU_CLASS = 0x030200                     # 3D controller, as the real H100's sysfs reads (reference driver.md)
_NVSWITCH_CLASS = 0x068000                # bridge, other (PCI_CLASS_BRIDGE_NVSWITCH in open-gpu-kernel-modules)
# The list of what render wrote outside the kernel's views (proc/, sys/): the image's own files (its NVML library),
# so that a test can tell them from what the collection wrote. One path a line, relative to the root.
IMAGE_MANIFEST = ".gpuops-simulated-image"
KERNEL_VIEWS = ("proc/", "sys/")


def parse_options(text, default_version):
    """The host options of GPUOPS_SIMULATED_HOST: {"driver": version or None, "flavour", "nouveau", "secure_boot":
    True/False/None, "kernel"}; GpuBackendError saying what is valid on a bad item."""
    opts = {"driver": default_version, "flavour": "open", "nouveau": False, "secure_boot": False,
            "kernel": DEFAULT_KERNEL}
    for item in [i.strip() for i in (text or "").split(",") if i.strip()]:
        key, _sep, value = item.partition("=")
        key = key.strip()
        value = value.strip()
        if key == "driver" and value:
            opts["driver"] = None if value == "none" else value
        elif key == "flavour" and value in ("open", "proprietary"):
            opts["flavour"] = value
        elif key == "nouveau" and not value:
            opts["nouveau"] = True
        elif key == "secure-boot" and value in ("on", "off", "absent"):
            opts["secure_boot"] = {"on": True, "off": False, "absent": None}[value]
        elif key == "kernel" and value:
            opts["kernel"] = value
        else:
            raise GpuBackendError(
                "%s: bad item %r; valid items: driver=none|<version>, flavour=open|proprietary, nouveau, "
                "secure-boot=on|off|absent, kernel=<release>" % (ENV_HOST, item))
    if opts["nouveau"] and opts["driver"]:
        raise GpuBackendError(
            "%s: nouveau and a loaded NVIDIA driver cannot both drive the GPUs; give 'nouveau' with 'driver=none'"
            % ENV_HOST)
    return opts


def sysfs_bus_id(nvml_bus_id):
    """'00000000:07:00.0' (NVML) -> '0000:07:00.0' (sysfs)."""
    domain, rest = nvml_bus_id.split(":", 1)
    return ("%04x:%s" % (int(domain, 16), rest)).lower()


def nvrm_version_line(version, flavour):
    """The first line of /proc/driver/nvidia/version for this driver, in the flavour's wording (_driver_state)."""
    if flavour == "open":
        return "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (gpuops-simulator)" % version
    return "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  (gpuops-simulator)" % version


# ---------------------------------------------------------------------------------------------------- writing
def _write(root, relative, data):
    path = os.path.join(root, relative)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".gpuops-host-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except Exception:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _symlink(root, relative, target):
    path = os.path.join(root, relative)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    tmp = os.path.join(directory, ".gpuops-link-%d" % os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def _remove(root, relative):
    path = os.path.join(root, relative)
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def _hex(value, digits):
    return "0x%0*x\n" % (digits, value)


def _pci_function(root, bus_id, device, pci_class, subsystem, driver):
    base = os.path.join(PCI_DEVICES, bus_id)
    _write(root, base + "/vendor", _hex(0x10DE, 4))
    _write(root, base + "/device", _hex(device, 4))
    _write(root, base + "/class", _hex(pci_class, 6))
    _write(root, base + "/subsystem_vendor", _hex(subsystem[0], 4))
    _write(root, base + "/subsystem_device", _hex(subsystem[1], 4))
    _bind(root, bus_id, driver)


def _bind(root, bus_id, driver):
    link = os.path.join(PCI_DEVICES, bus_id, "driver")
    if driver:
        _symlink(root, link, "../../../bus/pci/drivers/%s" % driver)
    else:
        _remove(root, link)


def machine_functions(shape, gpu_bus_ids):
    """[(bus_id, kind, device, class, subsystem)] of a shape's GPUs (at the state's bus ids) and NVSwitches."""
    out = []
    for position, model_key in enumerate(catalog.MACHINE_SHAPES[shape]):
        device = catalog.GPU_MODELS[model_key]["pci_device_id"] >> 16
        out.append((sysfs_bus_id(gpu_bus_ids[position]), "gpu", device, _GPU_CLASS,
                    catalog.simulated_subsystem(model_key)))
    switches = catalog.SHAPE_NVSWITCHES.get(shape)
    if switches:
        _generation, device, count = switches
        for position in range(count):
            out.append((catalog.nvswitch_bus_id(position), "nvswitch", device, _NVSWITCH_CLASS, (0x10DE, 0x0000)))
    return out


# /proc/modules' last column is the address the kernel loaded the module at (proc_modules_show in the kernel's
# kernel/module/procfs.c, torvalds/linux at v6.8): each load has its own, so a module unloaded and loaded again shows
# another one. The simulated NVML tells a reload of the driver by nvidia's (load_address; _simulator.py): a reload
# loses what the driver held in the GPUs, as a reboot does. The lab's kmod stand-ins give each load a new one too
# (tests/support/driver_files.py).
_MODULE_AREA = 0xffffffffc0000000        # in x86-64's module mapping space (Documentation/arch/x86/x86_64/mm.rst)


def new_load_address():
    """A load address for a module loaded now: page-aligned in the module area, another one at each load."""
    return "0x%016x" % (_MODULE_AREA + random.getrandbits(17) * 0x1000)   # 512 MB of it


def load_addresses(root):
    """{module: its load address} from R/proc/modules (empty where the file is absent)."""
    out = {}
    try:
        with open(os.path.join(root, PROC_MODULES)) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 6:
                    out[parts[0]] = parts[5]
    except (IOError, OSError):
        pass
    return out


def load_address(root, module="nvidia"):
    """The load address of ``module`` under ``root`` (None when it is not loaded or the host is not modelled)."""
    return load_addresses(root).get(module) if root else None


def _module_lines(modules, addresses):
    """/proc/modules lines for these {name: refcnt} (dependents listed on the module they use), each at its load
    address in ``addresses`` or a new one (a module loaded now)."""
    lines = []
    for name in modules:
        users = [m for m in modules if _MODULE_DEPENDS.get(m) == name]
        deps = "".join("%s," % u for u in users) or "-"
        lines.append("%s %d %d %s Live %s" % (
            name, _MODULE_SIZES.get(name, 16384), modules[name], deps, addresses.get(name) or new_load_address()))
    return lines


def _base_refcnts(names):
    """Each module's reference count from the modules using it alone (no process holding a device file)."""
    return dict((name, len([m for m in names if _MODULE_DEPENDS.get(m) == name])) for name in names)


def write_modules(root, modules, others=()):
    """R/proc/modules and R/sys/module/<name>/refcnt for the NVIDIA modules {name: refcnt} and other loaded modules
    (``others``: names, refcnt 0)."""
    loaded = dict(modules)
    for name in others:
        loaded[name] = 0
    # a module loaded before keeps its load address (a refcnt changed, not a load)
    _write(root, PROC_MODULES, "".join(line + "\n" for line in _module_lines(loaded, load_addresses(root))))
    for name, refcnt in loaded.items():
        _write(root, "sys/module/%s/refcnt" % name, "%d\n" % refcnt)
    # the loaded modules' character majors and MIG capability minors (nvidia-ctk's create-dev-char-symlinks reads them)
    for rel, text in _char_devices.files(loaded).items():
        if text is None:
            _remove(root, rel)
        else:
            _write(root, rel, text)


def load_driver(root, version, flavour, gpu_bus_ids, nvswitch_bus_ids=(), modules=IMAGE_MODULES, holders=0):
    """The kernel's view of a loaded NVIDIA driver: module files, version files, /proc/driver/nvidia (one directory
    per GPU), the NVSwitch devices, every GPU and NVSwitch bound to nvidia. ``holders``: processes holding a device
    file (each adds one to nvidia's refcnt)."""
    refcnts = _base_refcnts(modules)
    refcnts["nvidia"] = refcnts.get("nvidia", 0) + holders
    _remove(root, "sys/module/nouveau")
    write_modules(root, refcnts)
    _write(root, MODULE_VERSION, version + "\n")
    _write(root, NVRM_VERSION, "%s\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n" % (
        nvrm_version_line(version, flavour)))
    # the parameters the load took from the root's modprobe.d (a value the kernel refuses: the defaults, as if the
    # file were not there - the boot's modprobe would fail; the kmod stand-in refuses the load itself)
    values, _error = _nvreg_params.load_values(root)
    _write(root, _nvreg_params.PROC_PARAMS, _nvreg_params.proc_params_text(
        values or dict((p[0], p[2]) for p in _nvreg_params.PARAMS)))
    for bus_id in gpu_bus_ids:
        _write(root, "proc/driver/nvidia/gpus/%s/information" % bus_id, "Bus Location: \t %s\n" % bus_id)
        _bind(root, bus_id, "nvidia")
    for bus_id in nvswitch_bus_ids:
        _write(root, "%s/%s" % (NVSWITCH_DEVICES, bus_id), "%s\n" % bus_id)
        _bind(root, bus_id, "nvidia")


def unload_driver(root, bus_ids=()):
    """No NVIDIA module loaded: the files load_driver wrote removed, the functions unbound."""
    for name in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"):
        _remove(root, "sys/module/%s" % name)
    _remove(root, "proc/driver/nvidia")
    _remove(root, "proc/driver/nvidia-nvswitch")
    for bus_id in bus_ids:
        _bind(root, bus_id, None)
    write_modules(root, {}, others=())


def install_nvml_library(root, version):
    """What a driver's userspace package installs for NVML: libnvidia-ml.so.<version> and the link
    libnvidia-ml.so.1 to it (the fake packages of the lab install the same two paths)."""
    directory = NVML_LIBRARY_DIRS[0]
    _write(root, "%s/%s%s" % (directory, NVML_LIBRARY_PREFIX, version),
           "gpuops simulated NVML library %s\n" % version)
    _symlink(root, NVML_LIBRARY_LINK, NVML_LIBRARY_PREFIX + version)


def set_secure_boot(root, value):
    """The SecureBoot efivar: True (on), False (off) or None (absent: not an EFI boot)."""
    if value is None:
        _remove(root, SECURE_BOOT_VAR)
    else:
        _write(root, SECURE_BOOT_VAR, _SB_ATTRIBUTES + (b"\x01" if value else b"\x00"))


# ---------------------------------------------------------------------------------------------------- the Fabric Manager
# The simulated Fabric Manager's run mark: the FM version that runs on the node. NOT a file NVIDIA's Fabric Manager
# writes (it writes its pid file, /var/run/nvidia-fabricmanager/nv-fabricmanager.pid): the simulated node's record
# that its FM runs, written by the lab's FM stand-in (tests/support/fabricmanager_standin.py) through
# ``start_fabric_manager``. The collection never reads it: it asks systemd.
FABRIC_MANAGER_MARK = "var/run/nvidia-fabricmanager/gpuops-simulated-fm"
# nv-fabricmanager's words when its version is not the loaded driver's (NVIDIA/gpu-operator issue 544 and
# NVIDIA/gpu-driver-container issue 735 quote the line from the FM's log), and on a node without NVSwitches
# (data-infra/cube-studio issue 29 quotes it from nvidia-fabricmanager-start.sh's log).
FM_VERSION_MISMATCH = ("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s. "
                       "Please update with matching NVIDIA driver package.")
FM_NO_NVSWITCH = ("request to query NVSwitch device information from NVSwitch driver failed with error:WARNING "
                  "Nothing to do [NV_WARN_NOTHING_TO_DO]")
# (the simulator's own words: the real FM's message for a missing driver was not found in a public source)
FM_NO_DRIVER = "fabric manager: the NVIDIA driver is not loaded (simulated)"


def fabric_manager_version(root):
    """The version of the simulated Fabric Manager running on the node, or None."""
    try:
        with open(os.path.join(root, FABRIC_MANAGER_MARK)) as handle:
            return handle.read().strip() or None
    except (IOError, OSError):
        return None


def _has_fabric_devices(root):
    try:
        if os.listdir(os.path.join(root, NVSWITCH_DEVICES)):
            return True
    except OSError:
        pass
    return os.path.isdir(os.path.join(root, "sys/class/infiniband"))


def start_fabric_manager(root, version):
    """Start the simulated FM of ``version``, as nv-fabricmanager starts: refused (its message returned, nothing
    written) when no driver is loaded, when the loaded driver is another version (the FM runs only at exactly the
    driver's version: NVIDIA Fabric Manager user guide), or when the node has no NVSwitch (nor NVLink5 bridge); else
    the run mark written and None."""
    loaded = loaded_module_version(root)
    if loaded is None:
        return FM_NO_DRIVER
    if loaded != version:
        return FM_VERSION_MISMATCH % (version, loaded)
    if not _has_fabric_devices(root):
        return FM_NO_NVSWITCH
    _write(root, FABRIC_MANAGER_MARK, version + "\n")
    return None


def stop_fabric_manager(root):
    _remove(root, FABRIC_MANAGER_MARK)


# The simulated nvidia-persistenced (tests/support/persistenced_standin.py runs it for the lab's fake package): a mark
# holding "on" (started with persistence mode, its default) or "off" (--no-persistence-mode) while it runs.
PERSISTENCED_MARK = "var/run/nvidia-persistenced/gpuops-simulated-persistenced"
# (the simulator's own words: the real daemon's message without a driver was not found in a public source)
PERSISTENCED_NO_DRIVER = "nvidia-persistenced: the NVIDIA driver is not loaded (simulated)"


def start_persistenced(root, persistence_mode):
    """Start the simulated nvidia-persistenced: refused (its message returned) without a loaded driver, else its mark
    written and None. While it runs with persistence mode, NVML reads persistence mode Enabled on every GPU (NVIDIA/
    nvidia-persistenced at 580.95.05, option-table.h: the daemon enables it on every device unless told
    --no-persistence-mode), whatever the legacy per-GPU setting says."""
    if loaded_module_version(root) is None:
        return PERSISTENCED_NO_DRIVER
    _write(root, PERSISTENCED_MARK, "on\n" if persistence_mode else "off\n")
    return None


def stop_persistenced(root):
    _remove(root, PERSISTENCED_MARK)


def persistenced_mode(root):
    """True or False while the simulated nvidia-persistenced runs (with or without persistence mode), else None."""
    try:
        with open(os.path.join(root, PERSISTENCED_MARK)) as handle:
            return handle.read().strip() == "on"
    except (IOError, OSError):
        return None


def fabric_registered(root):
    """Whether the GPUs' fabric registration can have run: the simulated FM runs at the loaded driver's version. The
    first NVML read after that answers the registration's outcome (completed and SUCCESS, or what a health fault set);
    before it, each GPU's fabric state is not_started (nvml.h, nvmlGpuFabricState_t: NOT_STARTED until the FM
    registers the GPU)."""
    running = fabric_manager_version(root)
    return running is not None and running == loaded_module_version(root)


def render(root, shape, gpu_bus_ids, options):
    """Write the host tree of a new simulated machine under ``root`` (see the module docstring)."""
    functions = machine_functions(shape, gpu_bus_ids)
    gpus = [f[0] for f in functions if f[1] == "gpu"]
    switches = [f[0] for f in functions if f[1] == "nvswitch"]
    _write(root, KERNEL_RELEASE, options["kernel"] + "\n")
    for bus_id, _kind, device, pci_class, subsystem in functions:
        _pci_function(root, bus_id, device, pci_class, subsystem, None)
    if shape in catalog.NVLINK5_SHAPES:
        # Four ConnectX-7 bridge functions, the limited PFs' VPD carrying SW_MNG (Fabric Manager user guide). The
        # VPD here is a text stand-in holding the SMDL field, not the binary VPD format.
        for port in range(4):
            vpd = "PN:NVLINK-MGMT;SMDL:%s\n" % ("SW_MNG" if port % 2 else "FC")
            _write(root, "sys/class/infiniband/mlx5_%d/device/vpd" % port, vpd)
    set_secure_boot(root, options["secure_boot"])
    image = []
    if options["driver"]:
        load_driver(root, options["driver"], options["flavour"], gpus, switches)
        install_nvml_library(root, options["driver"])
        if switches or shape in catalog.NVLINK5_SHAPES:
            # the image's Fabric Manager, at its driver's version, runs (as on an image that brings both)
            _write(root, FABRIC_MANAGER_MARK, options["driver"] + "\n")
            image.append(FABRIC_MANAGER_MARK)       # the image brought it (not the collection)
        image += [NVML_LIBRARY_LINK, "%s/%s%s" % (NVML_LIBRARY_DIRS[0], NVML_LIBRARY_PREFIX, options["driver"])]
    elif options["nouveau"]:
        write_modules(root, {}, others=("nouveau",))
        for bus_id in gpus:
            _bind(root, bus_id, "nouveau")
    else:
        write_modules(root, {})
    _write(root, IMAGE_MANIFEST, "".join(path + "\n" for path in [IMAGE_MANIFEST] + image))


def image_paths(root):
    """The paths (relative to ``root``) the simulated host's image brought: the kernel's views (any path under
    proc/ or sys/ is one) and the files IMAGE_MANIFEST lists. Empty when nothing was rendered."""
    try:
        with open(os.path.join(root, IMAGE_MANIFEST)) as handle:
            return set(line.strip() for line in handle if line.strip())
    except (IOError, OSError):
        return set()


def set_holders(root, count):
    """nvidia's refcnt with ``count`` processes holding device files (the simulator's processes and holders), where a
    driver is loaded; nothing where none is or the host is not modelled."""
    if not root:
        return
    try:
        with open(os.path.join(root, PROC_MODULES)) as handle:
            text = handle.read()
    except (IOError, OSError):
        return
    names = [line.split()[0] for line in text.splitlines() if line.strip()]
    if "nvidia" not in names:
        return
    nvidia = [n for n in names if n.startswith("nvidia")]
    refcnts = _base_refcnts(nvidia)
    refcnts["nvidia"] += count
    write_modules(root, refcnts, others=[n for n in names if not n.startswith("nvidia")])


# ---------------------------------------------------------------------------------------------------- a boot
# modprobe.d directories (man modprobe.d: /etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d,
# /lib/modprobe.d); a "blacklist nouveau" line in any *.conf there keeps udev from loading nouveau at boot.
MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "lib/modprobe.d",
                 "usr/lib/modprobe.d")
# The modules udev loads for an NVIDIA GPU at boot once a driver is installed (nvidia; nvidia_uvm and nvidia_modeset
# by the packages' modprobe.d and udev rules), as the image's driver has them.
BOOT_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset")
_PLACEHOLDER_MAGIC = "GPUOPS-PLACEHOLDER-KO 1"


def nouveau_blacklisted(root):
    """Whether a modprobe.d file under ``root`` blacklists nouveau."""
    for directory in MODPROBE_DIRS:
        try:
            names = sorted(os.listdir(os.path.join(root, directory)))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".conf"):
                continue
            try:
                with open(os.path.join(root, directory, name)) as handle:
                    if any(line.split()[:2] == ["blacklist", "nouveau"] for line in handle if line.strip()):
                        return True
            except (IOError, OSError):
                continue
    return False


def installed_module(root, kernel):
    """(version, flavour, signed) of the nvidia module a package installed for ``kernel`` (the lab's placeholder
    module file, tests/support/driver_files.py's format; ``updates/`` first, as depmod orders them), or None."""
    base = os.path.join(root, "lib/modules", kernel)
    found = []
    for dirpath, _dirs, files in os.walk(base):
        if "nvidia.ko" in files:
            found.append(os.path.join(dirpath, "nvidia.ko"))
    found.sort(key=lambda p: (not os.path.relpath(p, base).startswith("updates" + os.sep), p))
    for path in found:
        try:
            with open(path) as handle:
                lines = handle.read().splitlines()
        except (IOError, OSError, UnicodeDecodeError):
            continue
        if not lines or lines[0].strip() != _PLACEHOLDER_MAGIC:
            continue
        fields = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
        if "version" in fields and fields.get("flavour") in ("open", "proprietary"):
            return fields["version"].strip(), fields["flavour"].strip(), fields.get("signed", "no").strip() == "yes"
    return None


def boot_loader_kernel(root, running):
    """The kernel a boot runs: the boot loader's default entry where the root has GRUB's files naming one
    (_driver_kernel.next_kernel, the reading the driver plan makes), written to R/proc/sys/kernel/osrelease; else
    the one running now (a root without boot loader files boots what it ran). A one-time entry (grubenv's
    next_entry) is used once, as GRUB clears it when it boots it."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_kernel
    try:
        kernel, _how = _driver_kernel.next_kernel(None, root)
    except _driver_kernel.KernelReadError:
        return running
    if not kernel:
        return running
    for relative in _driver_kernel.GRUBENV:
        path = os.path.join(root, relative)
        if os.path.exists(path):
            with open(path) as handle:
                lines = handle.read().splitlines()
            if any(line.startswith("next_entry=") and line != "next_entry=" for line in lines):
                kept = ["next_entry=" if line.startswith("next_entry=") else line for line in lines]
                _write(root, relative, "\n".join(kept) + "\n")
            break
    if kernel != running:
        _write(root, KERNEL_RELEASE, kernel + "\n")
    return kernel


def boot(root, host_state, gpu_bus_ids, nvswitch_bus_ids=()):
    """The kernel's view after a boot into the boot loader's default kernel (``boot_loader_kernel``): every module and
    process of the last boot gone; nouveau loaded where the host has it
    (``host_state["nouveau"]``: the distribution's nouveau claims the GPUs) and no modprobe.d file blacklists it; else
    the nvidia module a package installed for the running kernel (refused, as the kernel does, when Secure Boot is
    on and it is unsigned), else the image's driver (``host_state["driver"]``). Returns the loaded driver's version
    or None."""
    kernel = (open(os.path.join(root, KERNEL_RELEASE)).read().strip() if os.path.exists(os.path.join(root, KERNEL_RELEASE))
              else host_state.get("kernel") or DEFAULT_KERNEL)
    kernel = boot_loader_kernel(root, kernel)
    unload_driver(root, list(gpu_bus_ids) + list(nvswitch_bus_ids))
    # every process ends; an enabled Fabric Manager starts again below where it can (its version is the driver's)
    fabric_manager = fabric_manager_version(root)
    stop_fabric_manager(root)
    # no process outlives a boot: the test rigs' processes under R/proc/<pid> (one that held the device files) end
    proc = os.path.join(root, "proc")
    for name in os.listdir(proc) if os.path.isdir(proc) else []:
        if name.isdigit():
            shutil.rmtree(os.path.join(proc, name), ignore_errors=True)
    persistenced = persistenced_mode(root)
    stop_persistenced(root)
    if host_state.get("nouveau") and not nouveau_blacklisted(root):
        write_modules(root, {}, others=("nouveau",))
        for bus_id in gpu_bus_ids:
            _bind(root, bus_id, "nouveau")
        return None
    installed = installed_module(root, kernel)
    secure_boot = os.path.exists(os.path.join(root, SECURE_BOOT_VAR)) and \
        open(os.path.join(root, SECURE_BOOT_VAR), "rb").read()[4:5] == b"\x01"
    modules = BOOT_MODULES
    if installed is not None:
        version, flavour, signed = installed
        if secure_boot and not signed:
            return None
    elif host_state.get("driver"):
        version, flavour, modules = host_state["driver"], host_state.get("flavour") or "open", IMAGE_MODULES
    else:
        return None
    if _nvreg_params.load_values(root)[1]:
        return None  # an NVreg_ value in modprobe.d that the kernel does not parse: the boot's modprobe fails
    load_driver(root, version, flavour, gpu_bus_ids, nvswitch_bus_ids, modules=modules)
    if persistenced is not None:
        # a running (enabled) nvidia-persistenced starts again with the driver, as its unit does at boot
        start_persistenced(root, persistenced)
    if fabric_manager is not None:
        # an enabled FM of another version fails its start at boot (start_fabric_manager's refusal)
        start_fabric_manager(root, fabric_manager)
    return version


# ---------------------------------------------------------------------------------------------------- NVML's view
def nvml_library_version(root):
    """The version of the NVML library NVML would load under ``root`` (the name libnvidia-ml.so.1 links to), or
    None when there is none."""
    for directory in NVML_LIBRARY_DIRS:
        try:
            target = os.readlink(os.path.join(root, directory, "libnvidia-ml.so.1"))
        except OSError as exc:
            if exc.errno == errno.EINVAL:        # a plain file, not a link: the version is not in its name
                return "unknown"
            continue
        name = os.path.basename(target)
        return name[len(NVML_LIBRARY_PREFIX):] if name.startswith(NVML_LIBRARY_PREFIX) else "unknown"
    return None


def loaded_module_version(root):
    try:
        with open(os.path.join(root, MODULE_VERSION)) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def modelled(root):
    """Whether ``root`` holds a simulated host (R/proc/modules exists)."""
    return bool(root) and os.path.exists(os.path.join(root, PROC_MODULES))


def nvml_init_error(root):
    """None and the loaded version when simulated NVML can start under ``root`` (None, None when the host is not
    modelled), else (NVML error name, message) and None."""
    if not root:
        return None, None
    library = nvml_library_version(root)
    if library is None:
        if not modelled(root):
            return None, None
        return ("LIBRARY_NOT_FOUND", "%s: libnvidia-ml.so.1 is not installed under %s (no NVIDIA driver package)"
                % (LIBRARY_NOT_FOUND_TEXT, root)), None
    loaded = loaded_module_version(root)
    if loaded is None:
        if not modelled(root):
            return None, None
        return ("DRIVER_NOT_LOADED", "%s: no nvidia kernel module is loaded (%s is absent)" % (
            NOT_LOADED_TEXT, os.path.join(root, MODULE_VERSION))), None
    if loaded != library:
        return ("LIB_RM_VERSION_MISMATCH", "%s: NVML library version %s, loaded kernel module version %s" % (
            MISMATCH_TEXT, library, loaded)), None
    return None, loaded
