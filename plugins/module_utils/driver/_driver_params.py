# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA kernel module's parameters (``NVreg_*``, issue 52): the declaration checked, the one modprobe.d file
the collection owns rendered, and the loaded driver's values read back and compared (PRIVATE to gpuops.nvidia).
Pure, no I/O: ``plugins/modules/driver_params.py``, ``driver_modules`` and the node plan's driver step read and act.

Facts (NVIDIA/open-gpu-kernel-modules at tag 580.95.05, commit 2b436058a616676ec888ef3814d1db6b2220f2eb):

- ``kernel-open/common/inc/nv-linux.h``: every integer parameter is ``module_param(x, int, 0)`` and every string one
  ``module_param(x, charp, 0)``. Permission 0: none of them appears under ``/sys/module/nvidia/parameters``; the
  kernel parses an integer with kstrtoint (base 0: ``0x`` hex, a leading ``0`` octal, an optional sign, -2^31 to
  2^31-1; anything else refuses the whole module load with "Invalid argument").
- ``kernel-open/nvidia/nv-procfs.c``, ``nv_procfs_read_params``: ``/proc/driver/nvidia/params`` prints each entry of
  the ``nv_parms`` table (``kernel-open/nvidia/nv-reg.h``) as ``Name: %u`` - the name WITHOUT the ``NVreg_`` prefix,
  the value as unsigned 32 bits (so ``-1`` and ``~0`` read ``4294967295``, ``0666`` reads ``438``) - then seven
  string parameters as ``Name: "value"`` (empty quotes when unset). Parameters outside that table (e.g.
  ``NVreg_RmNvlinkBandwidth``) are not printed at all: they cannot be read back.
- One table entry is printed under another name than its parameter's: ``NVreg_RestrictProfilingToAdminUsers`` is
  ``RmProfilingAdminOnly`` (``NV_DEFINE_PARAMS_TABLE_ENTRY_CUSTOM_NAME``).
- ``modinfo -p nvidia`` (kmod) prints one ``name:description (type)`` line per parameter, or ``name:type`` where the
  module has no description (the nvidia module has none).

Values the collection accepts (docs/driver.md): an integer (YAML int, or text in kstrtoint's forms) within the
kernel's int range; or text of printable ASCII without whitespace, quotes, backslash or ``#`` (an options line is
split at whitespace, and quoting is what this rule avoids). The parameter's type from ``modinfo -p`` decides further:
an ``int`` parameter refuses text that is not an integer, before anything changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

PREFIX = "NVreg_"
MODULE = "nvidia"
DEFAULT_PATH = "/etc/modprobe.d/gpuops-nvidia-params.conf"
PROC_PARAMS = "/proc/driver/nvidia/params"
SYS_PARAMS = "/sys/module/nvidia/parameters"
HEADER = ("# Managed by gpuops.nvidia (driver_module_parameters): the NVIDIA kernel module's parameters, read when\n"
          "# the module loads. Edits here are replaced on the next run.\n")
NAME_RE = re.compile(r"^NVreg_[A-Za-z][A-Za-z0-9_]{0,99}$")
_TEXT_RE = re.compile(r"^[\x21-\x7e]{1,1024}$")
_TEXT_FORBIDDEN = ('"', "'", "\\", "#")
_INT_RE = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
# /proc/driver/nvidia/params' name of a parameter where it is not the parameter's without NVreg_ (nv-reg.h)
PROC_NAMES = {"NVreg_RestrictProfilingToAdminUsers": "RmProfilingAdminOnly"}
INTEGER_TYPES = ("int", "uint", "short", "ushort", "long", "ulong", "byte", "ullong")


class DriverParamsError(ValueError):
    """A declaration or a reading that cannot be used; the message says what is wrong and what is valid."""


def kernel_int(text):
    """The integer kstrtoint reads from ``text`` (base 0), or None where it reads none."""
    text = text.strip() if isinstance(text, str) else ""
    if not _INT_RE.match(text):
        return None
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-")
    if digits[:2] in ("0x", "0X"):
        value = int(digits[2:], 16)
    elif len(digits) > 1 and digits[0] == "0":
        value = int(digits[1:], 8)
    else:
        value = int(digits, 10)
    return sign * value


def check(parameters, what="driver_module_parameters"):
    """The declaration as {name: value text}, sorted by name; DriverParamsError naming each bad entry."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise DriverParamsError("%s must be a mapping of NVreg_* names to values, got %s"
                                % (what, type(parameters).__name__))
    out, bad = {}, []
    for name in sorted(parameters, key=str):
        value = parameters[name]
        if not isinstance(name, str) or not NAME_RE.match(name):
            bad.append("%r is not a parameter name of the nvidia module (NVreg_ followed by letters, digits and "
                       "underscores, like NVreg_EnableStreamMemOPs)" % (name,))
            continue
        text = value_text(name, value)
        if isinstance(text, DriverParamsError):
            bad.append(str(text))
            continue
        out[name] = text
    if bad:
        raise DriverParamsError("%s: %s" % (what, "; ".join(bad)))
    return out


def value_text(name, value):
    """The value as the options line carries it, or a DriverParamsError (returned, not raised) saying why not."""
    if isinstance(value, bool) or value is None or isinstance(value, (float, list, dict)):
        return DriverParamsError("%s: %r is not a value the kernel takes: give an integer (like 1 or 0x12) or text "
                                 "without spaces or quotes%s" % (name, value, " (write 1 or 0 for true or false)"
                                                                 if isinstance(value, bool) else ""))
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return DriverParamsError("%s: a %s is not a value the kernel takes" % (name, type(value).__name__))
    number = kernel_int(text)
    if number is not None:
        if not INT_MIN <= number <= INT_MAX:
            return DriverParamsError("%s: %s is outside the kernel's int range (%d to %d; for all bits set write -1)"
                                     % (name, text, INT_MIN, INT_MAX))
        return text
    if not _TEXT_RE.match(text) or any(c in text for c in _TEXT_FORBIDDEN):
        return DriverParamsError("%s: %r cannot be written on a modprobe options line: give 1 to 1024 printable "
                                 "ASCII characters without spaces, quotes, backslash or # (like "
                                 "RMUseSwI2c=0x01;RMI2cSpeed=100)" % (name, text[:80]))
    return text


def render(values):
    """The modprobe.d file's text for checked ``values`` ({name: text}); None where there are none (no file)."""
    if not values:
        return None
    return HEADER + "options %s %s\n" % (MODULE, " ".join("%s=%s" % (n, values[n]) for n in sorted(values)))


def parse_modinfo(text):
    """{name: type} of ``modinfo -p``'s lines (type "" where the line has none)."""
    out = {}
    for line in (text or "").splitlines():
        name, sep, rest = line.strip().partition(":")
        if not sep or not name:
            continue
        rest = rest.strip()
        match = re.search(r"\(([A-Za-z_]+)\)$", rest)
        out[name] = match.group(1) if match else (rest if re.match(r"^[A-Za-z_]+$", rest) else "")
    return out


def check_names(values, valid):
    """Refuse names the installed module does not have (``valid``: parse_modinfo's result), naming the valid ones;
    then refuse text for an integer parameter."""
    unknown = [n for n in sorted(values) if n not in valid]
    if unknown:
        raise DriverParamsError("%s %s not a parameter of the installed nvidia module; its parameters: %s"
                                % (", ".join(unknown), "is" if len(unknown) == 1 else "are",
                                   ", ".join(sorted(valid))))
    wrong = [n for n in sorted(values) if valid[n] in INTEGER_TYPES and kernel_int(values[n]) is None]
    if wrong:
        raise DriverParamsError("; ".join("%s is an integer parameter (%s): %r is not an integer (like 1, -1 or "
                                          "0x12)" % (n, valid[n], values[n]) for n in wrong))


def parse_proc_params(text):
    """{NVreg_ name: value text} of ``/proc/driver/nvidia/params`` (string values without their quotes)."""
    out = {}
    by_proc = dict((v, k) for k, v in PROC_NAMES.items())
    for line in (text or "").splitlines():
        name, sep, value = line.partition(":")
        name = name.strip()
        if not sep or not re.match(r"^[A-Za-z][A-Za-z0-9_]*$", name):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out[by_proc.get(name, PREFIX + name)] = value
    return out


def expected(value, kind=""):
    """How the loaded driver shows a declared value: an integer as unsigned 32 bits (``%u``), text as it is."""
    number = kernel_int(value) if kind not in ("charp", "string") else None
    return str(number & 0xFFFFFFFF) if number is not None else value


def compare(values, loaded, types=None):
    """(differences, unreadable): [{"name", "declared", "loaded"}] where the loaded driver reads another value, and
    the declared names it does not report. ``loaded``: parse_proc_params' result (None: nothing loaded)."""
    types = types or {}
    diffs, unreadable = [], []
    for name in sorted(values):
        if loaded is None or name not in loaded:
            unreadable.append(name)
            continue
        kind = types.get(name, "")
        # (type unknown: text that looks like an integer may be a string parameter's; either reading is the value)
        if expected(values[name], kind) != loaded[name] and (kind or values[name] != loaded[name]):
            diffs.append({"name": name, "declared": values[name], "loaded": loaded[name]})
    return diffs, unreadable


def differences_text(diffs):
    return "; ".join("%s: declared %s, the loaded driver reads %s" % (d["name"], d["declared"], d["loaded"])
                     for d in diffs)
