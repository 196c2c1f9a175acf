# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA driver as the kernel shows it, read from files under a root ("/" on a host, the node's scratch
directory in the lab), with no NVML: the running kernel, the loaded driver's version and flavour, each nvidia*
module's reference count, nouveau, Secure Boot, and whether the node is an NVSwitch or NVLink5 system.

Files (R = root):
- R/proc/sys/kernel/osrelease: the running kernel, as `uname -r` prints it.
- R/sys/module/nvidia/version: the loaded nvidia module's version (`580.159.04` on a real H100, driver 580.159.04,
  read for this project; equal to NVML's nvmlSystemGetDriverVersion there).
- R/proc/driver/nvidia/version, first line: the flavour in the wording. Open modules print
  `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (...)` (real H100 reading;
  the string is assembled in NVIDIA/open-gpu-kernel-modules, src/nvidia/Makefile "UNIX Open Kernel Module").
  The proprietary modules print `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42
  UTC 2024` (a real line quoted in github.com/oddmario/NVIDIA-Ubuntu-Driver-Guide issue 4; another, driver
  580.173.02, in github.com/zzzhouuu/truenas-nvidia-drivers issue 19). Both files must give one version.
- R/proc/modules (lsmod's source: `name size refcnt deps state offset`): which modules are loaded and their
  reference counts; absent on a kernel built without loadable modules (then none is loaded). The count is the
  one /sys/module/<name>/refcnt prints (both are the kernel's module_refcount); one read of /proc/modules gives
  every module's.
- R/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c: 4 attribute bytes, then 1 value byte
  (1 = on). Absent: not booted through EFI, or efivarfs not mounted: unknown (None).
- R/proc/driver/nvidia-nvswitch/devices/: an NVSwitch system when it exists and is not empty; R/sys/class/
  infiniband/*/device/vpd holding `SW_MNG`: an NVLink5 system (NVIDIA/gpu-driver-container, ubuntu24.04/
  nvidia-driver, _assert_nvswitch_system and _assert_nvlink5_system).

The parse_* functions are pure (text in, facts out); ``read`` does the file reads. Installed packages are read
separately (_packages.read_installed).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re

KERNEL_RELEASE = "proc/sys/kernel/osrelease"
MODULE_VERSION = "sys/module/nvidia/version"
NVRM_VERSION = "proc/driver/nvidia/version"
PROC_MODULES = "proc/modules"
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
NVSWITCH_DEVICES = "proc/driver/nvidia-nvswitch/devices"
INFINIBAND_VPD_GLOB = "sys/class/infiniband/*/device/vpd"
NVLINK5_VPD_MARK = b"SW_MNG"
# The modules of one NVIDIA driver (reference driver.md; NVIDIA/gpu-driver-container _unload_driver), the order in
# which they are unloaded: every one that depends on nvidia first.
DRIVER_MODULES = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia")
# nvidia's direct dependents whose reference on nvidia does not mean a user (the driver container's count).
_NVIDIA_DEPENDENTS = ("nvidia_modeset", "nvidia_uvm", "nvidia_peermem")

_NVRM_RE = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\s+(?:(?P<open>Open Kernel Module for \S+)|(?P<arch>\S+) Kernel Module)"
    r"\s+(?P<version>\d+(?:\.\d+)+)(?:\s|$)")
_VERSION_RE = re.compile(r"^\d+(?:\.\d+)+$")


class DriverStateError(Exception):
    """A driver file could not be read or says something that cannot be; the message names the file."""


def parse_nvrm_version(text, path=NVRM_VERSION):
    """(version, flavour) from the text of /proc/driver/nvidia/version; DriverStateError naming ``path`` when its
    first line is neither wording."""
    first = (text or "").splitlines()[0].strip() if (text or "").strip() else ""
    match = _NVRM_RE.match(first)
    if not match:
        raise DriverStateError(
            "%s does not start with an NVIDIA driver's version line (expected 'NVRM version: NVIDIA UNIX Open "
            "Kernel Module for <arch>  <version> ...' or 'NVRM version: NVIDIA UNIX <arch> Kernel Module  <version> "
            "...'); found %r" % (path, first))
    return match.group("version"), ("open" if match.group("open") else "proprietary")


def parse_module_version(text, path=MODULE_VERSION):
    """The version in /sys/module/nvidia/version (one line, digits and dots)."""
    value = (text or "").strip()
    if not _VERSION_RE.match(value):
        raise DriverStateError("%s does not hold a driver version (found %r)" % (path, value))
    return value


def parse_proc_modules(text, path=PROC_MODULES):
    """{name: {"size": int, "refcnt": int or None, "deps": [names], "state": str}} from /proc/modules. A refcnt of
    '-' (a module built without unload support) is None."""
    out = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 5:
            raise DriverStateError("%s line %d is not 'name size refcnt deps state offset': %r" % (path, number, line))
        name, size, refcnt, deps, state = fields[:5]
        try:
            out[name] = {"size": int(size), "refcnt": None if refcnt == "-" else int(refcnt),
                         "deps": [d for d in deps.split(",") if d and d != "-"], "state": state}
        except ValueError:
            raise DriverStateError("%s line %d has a size or refcnt that is not a number: %r" % (path, number, line))
    return out


def parse_secure_boot(data, path=SECURE_BOOT_VAR):
    """True/False from the SecureBoot efivar's bytes (4 attribute bytes, then the value); None for None (absent)."""
    if data is None:
        return None
    if len(data) < 5:
        raise DriverStateError("%s holds %d bytes; an EFI variable holds 4 attribute bytes and its value" % (
            path, len(data)))
    value = bytearray(data[4:5])[0]
    if value not in (0, 1):
        raise DriverStateError("%s has value %d; SecureBoot is 0 (off) or 1 (on)" % (path, value))
    return value == 1


def nvidia_modules(modules):
    """{name: refcnt} of the loaded nvidia* modules, from parse_proc_modules' result."""
    return dict((name, info["refcnt"]) for name, info in modules.items() if name.startswith("nvidia"))


def in_use(module_refcnts):
    """Whether the loaded driver is held (cannot be unloaded): nvidia's refcnt is larger than the number of its
    loaded dependents nvidia_modeset, nvidia_uvm, nvidia_peermem, or one of those has a refcnt above 0 (the rule of
    NVIDIA/gpu-driver-container's _unload_driver). ``module_refcnts`` is nvidia_modules()' result. A refcnt of None (a
    kernel built without module unloading shows '-') counts as held: such a driver cannot be unloaded at all."""
    if "nvidia" not in module_refcnts:
        return False
    if any(module_refcnts[m] is None for m in module_refcnts if m == "nvidia" or m in _NVIDIA_DEPENDENTS):
        return True
    dependents = [m for m in _NVIDIA_DEPENDENTS if m in module_refcnts]
    if (module_refcnts["nvidia"] or 0) > len(dependents):
        return True
    return any((module_refcnts[m] or 0) > 0 for m in dependents)


def loaded_driver(module_version_text, nvrm_text, modules, root="/"):
    """The loaded driver ({"version", "flavour", "modules"}) or None, from the two version files' texts (None when
    absent) and parse_proc_modules' result; DriverStateError saying which file said what when they disagree."""
    sys_path, nvrm_path = os.path.join(root, MODULE_VERSION), os.path.join(root, NVRM_VERSION)
    if module_version_text is None and nvrm_text is None:
        return None
    if module_version_text is None:
        version, _flavour = parse_nvrm_version(nvrm_text, nvrm_path)
        raise DriverStateError("%s says driver %s is loaded, but %s does not exist" % (nvrm_path, version, sys_path))
    module_version = parse_module_version(module_version_text, sys_path)
    if nvrm_text is None:
        raise DriverStateError("%s says driver %s is loaded, but %s does not exist" % (
            sys_path, module_version, nvrm_path))
    version, flavour = parse_nvrm_version(nvrm_text, nvrm_path)
    if version != module_version:
        raise DriverStateError("the loaded driver's version files disagree: %s says %s, %s says %s" % (
            sys_path, module_version, nvrm_path, version))
    return {"version": version, "flavour": flavour, "modules": nvidia_modules(modules)}


def _read(root, relative, binary=False, required=False):
    path = os.path.join(root, relative)
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        if not required and not os.path.exists(path):
            return None
        raise DriverStateError("cannot read %s: %s" % (path, exc.strerror or exc))


def _nvlink5(root):
    for vpd in sorted(glob.glob(os.path.join(root, INFINIBAND_VPD_GLOB))):
        try:
            with open(vpd, "rb") as handle:
                if NVLINK5_VPD_MARK in handle.read():
                    return True
        except (IOError, OSError):
            continue        # an adapter whose VPD cannot be read is not the NVLink management bridge we look for
    return False


def read(root="/"):
    """The driver state under ``root`` (the contract's shape): {"kernel", "loaded", "nouveau_loaded",
    "secure_boot", "nvswitch", "nvlink5"}; DriverStateError naming the file when one cannot be read or parsed."""
    kernel = (_read(root, KERNEL_RELEASE, required=True) or "").strip()
    if not kernel:
        raise DriverStateError("%s is empty" % os.path.join(root, KERNEL_RELEASE))
    # No /proc/modules: a kernel built without loadable modules (no module is or can be loaded).
    modules = parse_proc_modules(_read(root, PROC_MODULES) or "", os.path.join(root, PROC_MODULES))
    loaded = loaded_driver(_read(root, MODULE_VERSION), _read(root, NVRM_VERSION), modules, root)
    try:
        nvswitch = bool(os.listdir(os.path.join(root, NVSWITCH_DEVICES)))
    except OSError:
        nvswitch = False
    return {
        "kernel": kernel,
        "loaded": loaded,
        "nouveau_loaded": "nouveau" in modules,
        "secure_boot": parse_secure_boot(_read(root, SECURE_BOOT_VAR, binary=True),
                                         os.path.join(root, SECURE_BOOT_VAR)),
        "nvswitch": nvswitch,
        "nvlink5": _nvlink5(root),
    }
