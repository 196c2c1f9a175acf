# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated nvidia module's parameters (PRIVATE to gpuops.nvidia, issue 52): which ``NVreg_*`` parameters it has
(what ``modinfo -p nvidia`` lists), their defaults, how ``/proc/driver/nvidia/params`` prints the loaded values, and
the ``options nvidia ...`` lines of a root's modprobe.d files that a load takes. No imports beyond the standard
library and no I/O but reading modprobe.d under a given root, so that the lab's kmod stand-in
(tests/support/driver_files.py, which loads this file by its path) and the tests render the same text.

A realistic SUBSET of the real module's parameters, NOT the whole table: names, types and defaults from
NVIDIA/open-gpu-kernel-modules at tag 580.95.05 (commit 2b436058a616676ec888ef3814d1db6b2220f2eb),
``kernel-open/nvidia/nv-reg.h`` (``NV_DEFINE_REG_ENTRY``, ``NV_DEFINE_REG_STRING_ENTRY``, the ``nv_parms`` table)
and ``kernel-open/nvidia/nv-procfs.c`` (``nv_procfs_read_params``: the table's entries as ``Name: %u``, in table
order, then the string parameters as ``Name: "value"``). ``NVreg_RmNvlinkBandwidth`` is a parameter outside both
(modinfo lists it, /proc does not print it); ``NVreg_RestrictProfilingToAdminUsers`` is printed as
``RmProfilingAdminOnly``. Every parameter is ``int`` or ``charp`` with permission 0 (``nv-linux.h``), so none is
under /sys/module/nvidia/parameters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

PROC_PARAMS = "proc/driver/nvidia/params"
# (parameter, type, default, name in /proc/driver/nvidia/params or None where it is not printed), in nv_parms order
# for the integers, then nv_procfs_read_params' order for the strings
PARAMS = (
    ("NVreg_ResmanDebugLevel", "int", 4294967295, "ResmanDebugLevel"),
    ("NVreg_RmLogonRC", "int", 1, "RmLogonRC"),
    ("NVreg_ModifyDeviceFiles", "int", 1, "ModifyDeviceFiles"),
    ("NVreg_DeviceFileUID", "int", 0, "DeviceFileUID"),
    ("NVreg_DeviceFileGID", "int", 0, "DeviceFileGID"),
    ("NVreg_DeviceFileMode", "int", 438, "DeviceFileMode"),
    ("NVreg_EnableMSI", "int", 1, "EnableMSI"),
    ("NVreg_EnableStreamMemOPs", "int", 0, "EnableStreamMemOPs"),
    ("NVreg_NvLinkDisable", "int", 0, "NvLinkDisable"),
    ("NVreg_RestrictProfilingToAdminUsers", "int", 1, "RmProfilingAdminOnly"),
    ("NVreg_PreserveVideoMemoryAllocations", "int", 0, "PreserveVideoMemoryAllocations"),
    ("NVreg_EnableResizableBar", "int", 0, "EnableResizableBar"),
    ("NVreg_EnableGpuFirmware", "int", 18, "EnableGpuFirmware"),
    ("NVreg_DmaRemapPeerMmio", "int", 1, "DmaRemapPeerMmio"),
    ("NVreg_ImexChannelCount", "int", 2048, "ImexChannelCount"),
    ("NVreg_CreateImexChannel0", "int", 0, "CreateImexChannel0"),
    ("NVreg_CoherentGPUMemoryMode", "charp", "", "CoherentGPUMemoryMode"),
    ("NVreg_RegistryDwords", "charp", "", "RegistryDwords"),
    ("NVreg_TemporaryFilePath", "charp", "", "TemporaryFilePath"),
    ("NVreg_RmNvlinkBandwidth", "charp", "", None),
)
TYPES = dict((p[0], p[1]) for p in PARAMS)
# modprobe.d directories (man modprobe.d), the first that holds a file name wins
MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "lib/modprobe.d",
                 "usr/lib/modprobe.d")
_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")


def modinfo_p_text():
    """``modinfo -p nvidia``: ``name:type`` per parameter (the module has no descriptions), sorted as kmod prints
    them (by name)."""
    return "".join("%s:%s\n" % (name, kind) for name, kind, _d, _p in sorted(PARAMS))


def options_lines(root, module="nvidia"):
    """The ``options <module> ...`` words of the root's modprobe.d ``*.conf`` files, in modprobe's order (file names
    sorted across the directories, a file in an earlier directory hiding one of the same name in a later one)."""
    files = {}
    for directory in MODPROBE_DIRS:
        full = os.path.join(root, directory)
        for name in sorted(os.listdir(full)) if os.path.isdir(full) else []:
            if name.endswith(".conf") and name not in files:
                files[name] = os.path.join(full, name)
    words = []
    for name in sorted(files):
        try:
            with open(files[name]) as handle:
                text = handle.read()
        except (IOError, OSError):
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "options" and parts[1].replace("-", "_") == module:
                words.extend(parts[2:])
    return words


def load_values(root):
    """(values, error): the parameters a load of nvidia takes from the root's modprobe.d (defaults for the others),
    or the kernel's refusal ("Invalid argument") where an integer parameter's value is not one. A name the module
    does not have is ignored, as the kernel does ("unknown parameter ... ignored")."""
    values = dict((p[0], p[2]) for p in PARAMS)
    for word in options_lines(root):
        name, sep, value = word.partition("=")
        if name not in TYPES:
            continue
        if TYPES[name] == "int":
            if not sep or not _INT.match(value):
                return None, "Invalid argument"
            number = _kernel_int(value)
            if not -(1 << 31) <= number < (1 << 31):
                return None, "Numerical result out of range"
            values[name] = number & 0xFFFFFFFF
        else:
            values[name] = value.strip('"')
    return values, None


def _kernel_int(text):
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-")
    if digits[:2] in ("0x", "0X"):
        return sign * int(digits[2:], 16)
    if len(digits) > 1 and digits[0] == "0":
        return sign * int(digits[1:], 8)
    return sign * int(digits, 10)


def proc_params_text(values):
    """``/proc/driver/nvidia/params`` for loaded ``values`` (load_values' first result)."""
    lines = []
    for name, kind, _default, proc in PARAMS:
        if proc is None:
            continue
        if kind == "int":
            lines.append("%s: %u" % (proc, values[name]))
        else:
            lines.append('%s: "%s"' % (proc, values[name]))
    return "\n".join(lines) + "\n"
