# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel the node runs, the kernel its next boot runs, and whether NVIDIA's modules exist for that one (PRIVATE to
gpuops.nvidia). The most common way a GPU node loses its driver is the next kernel: an upgrade installs a kernel for
which no precompiled module package is installed and DKMS did not build, and the node comes back from its next reboot
without a driver (NVIDIA/gpu-operator issues 583 and 1220).

Read-only. The parse_* functions are pure (text in, facts out); ``read`` does the reads (files under a root, and on
a real host's "/" the boot loader's own tool), ``plan`` decides what ``driver_next_kernel`` does.

The boot loader's default entry, in the order a boot uses it:
- RHEL family: ``grubby --default-kernel`` prints the default entry's kernel image (``/boot/vmlinuz-<release>``):
  grubby(8) of rhboot/grubby. Used where it is on PATH and the root is "/".
- GRUB files (GNU GRUB manual, "Simple configuration" and "Environment block"): ``R/boot/grub/grubenv`` (Debian,
  Ubuntu) or ``R/boot/grub2/grubenv`` (RHEL family) holds ``next_entry`` (a one-time entry, grub-reboot) and
  ``saved_entry`` (GRUB_DEFAULT=saved, grub-set-default). ``R/boot/grub/grub.cfg`` (grub-mkconfig's output) holds
  ``set default="..."`` (GRUB_DEFAULT's value, or ``${saved_entry}`` when it is ``saved``) and the ``menuentry`` /
  ``submenu`` blocks with their ``linux /boot/vmlinuz-<release>`` lines; an entry is named by a number (``0``), a
  path through submenus (``1>2``), its title or its ``$menuentry_id_option`` id. An empty default is entry 0. A
  grub.cfg that calls ``blscfg`` takes its entries from ``R/boot/loader/entries/<id>.conf`` (Boot Loader
  Specification: ``linux /vmlinuz-<release>``); its saved_entry is such an id. Where grub.cfg is absent,
  ``R/etc/default/grub``'s GRUB_DEFAULT is read for the entry, which then still needs grub.cfg's menu: unknown.
- Anything else (systemd-boot, a BLS default not saved, an unreadable file): the next kernel is unknown, and the
  reading says why; it is never guessed.

NVIDIA modules for a kernel K: ``modinfo -k K -F version nvidia`` and ``-F license`` (kmod's modinfo(8): the module
file modprobe would load for K; ``Dual MIT/GPL`` is the open flavour's license, ``NVIDIA`` the proprietary one's, as
their MODULE_LICENSE lines say), ``dkms status`` (dkms 3's ``nvidia/580.95.05, 6.8.0-90-generic, x86_64:
installed`` and dkms 2's ``nvidia, 580.95.05, 6.8.0-90-generic, x86_64: installed``; a source only added prints
``nvidia/580.95.05: added``), and the precompiled package for K (Ubuntu's ``linux-modules-nvidia-<branch>-server
[-open]-<K>``, _driver_plan.names) in the package database.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

GRUBENV = ("boot/grub/grubenv", "boot/grub2/grubenv")
GRUB_CFG = ("boot/grub/grub.cfg", "boot/grub2/grub.cfg")
DEFAULT_GRUB = "etc/default/grub"
BLS_ENTRIES = "boot/loader/entries"
SETTINGS = ("ensure", "refuse", "ignore")
# the licenses the two flavours' nvidia.ko declare (open-gpu-kernel-modules' MODULE_LICENSE("Dual MIT/GPL"); the
# proprietary module's "NVIDIA")
OPEN_LICENSE = "Dual MIT/GPL"
PROPRIETARY_LICENSE = "NVIDIA"

_ENTRY_RE = re.compile(r"""^\s*(menuentry|submenu)\s+(?:'([^']*)'|"([^"]*)")(.*)\{\s*$""")
_ID_RE = re.compile(r"""\$menuentry_id_option\s+(?:'([^']*)'|"([^"]*)"|(\S+))""")
_LINUX_RE = re.compile(r"^\s*linux(?:efi|16)?\s+(\S+)")
_DEFAULT_RE = re.compile(r"""^\s*set\s+default=(?:"([^"]*)"|'([^']*)'|(\S*))\s*$""")
_VMLINUZ_RE = re.compile(r"(?:^|/)vmlinuz-([0-9][A-Za-z0-9._+~-]*)$")
_DKMS_RE = re.compile(r"^\s*([A-Za-z0-9_.+-]+)(?:/|,\s*)([^,:\s]+)(?:,\s*([^,:\s]+))?(?:,\s*([^,:\s]+))?\s*:\s*(.+?)\s*$")


class KernelReadError(Exception):
    """A boot loader file or a tool's answer that cannot be what it claims; the message names it."""


# ------------------------------------------------------------------------------------------------ GRUB
def parse_grubenv(text):
    """{name: value} of a GRUB environment block (``# GRUB Environment Block`` then ``name=value`` lines, padded with
    ``#``)."""
    out = {}
    for line in (text or "").splitlines():
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        out[name.strip()] = value
    return out


def kernel_of(image):
    """``/boot/vmlinuz-6.8.0-90-generic`` (or ``/vmlinuz-...`` from a separate /boot) -> ``6.8.0-90-generic``; None
    for anything else."""
    match = _VMLINUZ_RE.search((image or "").strip())
    return match.group(1) if match else None


def parse_grub_cfg(text):
    """{"defaults": [the ``set default=`` values outside the menu, in order], "entries": [{"title", "id", "kernel",
    "children"}], "blscfg": whether it loads Boot Loader Specification entries}; KernelReadError on unbalanced
    braces."""
    root = {"children": []}
    stack = [("top", root)]
    defaults, blscfg = [], False
    for number, line in enumerate((text or "").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ENTRY_RE.match(line)
        if match:
            rest = match.group(4)
            ident = _ID_RE.search(rest)
            entry = {"title": match.group(2) if match.group(2) is not None else match.group(3),
                     "id": next((g for g in ident.groups() if g is not None), None) if ident else None,
                     "kernel": None, "children": []}
            stack[-1][1]["children"].append(entry)
            stack.append((match.group(1), entry))
            continue
        if stripped.endswith("{"):
            stack.append(("block", None))     # a function or another braced block: its lines are no entry's
            continue
        if stripped == "}":
            if len(stack) == 1:
                raise KernelReadError("grub.cfg line %d closes a block that was not opened" % number)
            stack.pop()
            continue
        kind, entry = stack[-1]
        linux = _LINUX_RE.match(line)
        if linux and kind == "menuentry" and entry["kernel"] is None:
            entry["kernel"] = kernel_of(linux.group(1))
            continue
        default = _DEFAULT_RE.match(line)
        if default and all(k in ("top", "block") for k, _e in stack):
            defaults.append(next(g for g in default.groups() if g is not None))
        if stripped.split()[0] == "blscfg":
            blscfg = True
    if len(stack) != 1:
        raise KernelReadError("grub.cfg ends inside a block (%d not closed)" % (len(stack) - 1))
    return {"defaults": defaults, "entries": root["children"], "blscfg": blscfg}


def parse_default_grub(text):
    """GRUB_DEFAULT's value in /etc/default/grub (a shell assignment; quotes removed), or None."""
    value = None
    for line in (text or "").splitlines():
        match = re.match(r"""^\s*GRUB_DEFAULT=(?:"([^"]*)"|'([^']*)'|(\S*))""", line)
        if match:
            value = next(g for g in match.groups() if g is not None)
    return value


def resolve(entries, ref):
    """The menu entry ``ref`` names (a number, ``a>b`` through submenus, a title or an id), or None."""
    level, entry = entries, None
    for part in str(ref).split(">"):
        if part.isdigit():
            index = int(part)
            entry = level[index] if index < len(level) else None
        else:
            entry = next((e for e in level if part in (e["title"], e["id"])), None)
        if entry is None:
            return None
        level = entry["children"]
    return entry


def parse_bls_entry(text):
    """The kernel of one Boot Loader Specification entry (its ``linux`` line), or None."""
    for line in (text or "").splitlines():
        fields = line.split(None, 1)
        if len(fields) == 2 and fields[0] == "linux":
            return kernel_of(fields[1])
    return None


def next_from_grub(grubenv_text, cfg_text, default_grub_text=None, bls=None):
    """(kernel or None, how it was found or why it is unknown) from the GRUB files' texts (None: absent) and the BLS
    entries ({id: text}). Pure."""
    env = parse_grubenv(grubenv_text) if grubenv_text is not None else {}
    if cfg_text is None:
        value = parse_default_grub(default_grub_text) if default_grub_text is not None else None
        return None, ("no grub.cfg to read the menu from%s" % (
            " (GRUB_DEFAULT=%s in /etc/default/grub names an entry of it)" % value if value is not None else ""))
    cfg = parse_grub_cfg(cfg_text)
    if env.get("next_entry"):
        ref, how = env["next_entry"], "grubenv next_entry (a one-time boot, grub-reboot)"
    else:
        chosen = [d for d in cfg["defaults"] if d != "${next_entry}"]
        ref = chosen[-1] if chosen else "0"
        how = "grub.cfg set default=%s" % (ref or '""')
        if ref in ("${saved_entry}", "saved"):
            ref = env.get("saved_entry") or "0"
            how = "grubenv saved_entry=%s" % ref if env.get("saved_entry") else "grubenv saved_entry empty: entry 0"
        if ref == "":
            ref = "0"
    if cfg["blscfg"] and not cfg["entries"]:
        if ref.isdigit() or ref not in (bls or {}):
            return None, ("GRUB takes its menu from Boot Loader Specification entries and the default (%s) is not "
                          "one of %s by id: ask grubby --default-kernel" % (ref, BLS_ENTRIES))
        kernel = parse_bls_entry(bls[ref])
        return (kernel, "%s, BLS entry %s" % (how, ref)) if kernel else (
            None, "BLS entry %s has no linux line naming a vmlinuz-<release>" % ref)
    entry = resolve(cfg["entries"], ref)
    if entry is None:
        return None, "the boot loader's default (%s) names no entry of grub.cfg" % ref
    if entry["children"] and entry["kernel"] is None:
        return None, "the boot loader's default (%s) is a submenu, not an entry" % ref
    if entry["kernel"] is None:
        return None, "grub.cfg entry %r boots no Linux kernel image named vmlinuz-<release>" % entry["title"]
    return entry["kernel"], "%s: entry %r" % (how, entry["title"])


# ------------------------------------------------------------------------------------------------ modules
def parse_dkms_status(text):
    """[{"module", "version", "kernel", "arch", "state"}] from ``dkms status`` (dkms 3's and dkms 2's lines; a source
    only added has no kernel). Lines it does not know are skipped."""
    out = []
    for line in (text or "").splitlines():
        match = _DKMS_RE.match(line)
        if not match:
            continue
        module, version, kernel, arch, state = match.groups()
        out.append({"module": module, "version": version, "kernel": kernel, "arch": arch,
                    "state": state.split()[0].rstrip(",") if state else ""})
    return out


def flavour_of_license(license_text):
    value = (license_text or "").strip()
    if value == OPEN_LICENSE:
        return "open"
    if value == PROPRIETARY_LICENSE:
        return "proprietary"
    return None


def modules_verdict(kernel, modinfo, dkms, precompiled, pin):
    """Whether NVIDIA modules of the declared version (or branch) and flavour exist for ``kernel``: {"present",
    "version", "flavour", "how", "detail"}. ``modinfo``: {"version", "license", "error"}; ``dkms``: parse_dkms_status'
    list or None (no dkms); ``precompiled``: {name: installed version or None}; ``pin``: {"version", "branch",
    "flavour"}."""
    version, branch, flavour = pin.get("version") or "", pin.get("branch") or "", pin.get("flavour") or "open"
    have_version = (modinfo or {}).get("version") or None
    have_flavour = flavour_of_license((modinfo or {}).get("license"))
    built = [d for d in dkms or [] if d["module"] == "nvidia" and d["kernel"] == kernel and d["state"] == "installed"]
    packages = [n for n, v in (precompiled or {}).items() if v]
    how = ("DKMS (dkms status: nvidia/%s installed)" % built[0]["version"] if built else
           ("precompiled package %s" % ", ".join(packages) if packages else ("module file" if have_version else "")))
    matches = bool(have_version) and ((have_version == version) if version else
                                      have_version.split(".")[0] == (branch or have_version.split(".")[0]))
    wrong = []
    if have_version and not matches:
        wrong.append("version %s, %s declared" % (have_version, version or "branch %s" % branch))
    if have_version and have_flavour and have_flavour != flavour:
        wrong.append("%s modules, %s declared" % (have_flavour, flavour))
    present = bool(have_version) and not wrong
    if not have_version:
        detail = "no nvidia module for kernel %s (modinfo: %s)" % (
            kernel, (modinfo or {}).get("error") or "no version")
    elif wrong:
        detail = "the nvidia module for kernel %s is not the declared one: %s" % (kernel, "; ".join(wrong))
    else:
        detail = "nvidia %s (%s) for kernel %s, %s" % (have_version, have_flavour or "flavour unknown", kernel, how)
    return {"present": present, "version": have_version, "flavour": have_flavour, "how": how, "detail": detail}


def plan(readings, setting, module_source, kernel_packages, dkms_version):
    """What ``driver_next_kernel`` does before a reboot: {"action": none|install|build|refuse|unknown, "msg",
    "packages", "dkms"}. ``readings``: read()'s dict; ``module_source``: the driver plan's (precompiled or dkms);
    ``kernel_packages``: the precompiled package names for the next kernel (_driver_plan.names for it);
    ``dkms_version``: the nvidia source version DKMS builds. Pure."""
    if setting not in SETTINGS:
        raise KernelReadError("driver_next_kernel %r is not one of %s" % (setting, ", ".join(SETTINGS)))
    nxt, running = readings.get("next"), readings.get("running")
    out = {"action": "none", "msg": "", "packages": [], "dkms": None, "setting": setting}
    if setting == "ignore":
        out["msg"] = "driver_next_kernel is ignore: the next kernel's modules are not checked"
        return out
    if nxt is None:
        out.update(action="unknown", msg="the kernel the next boot runs is not known (%s): its NVIDIA modules cannot "
                                         "be checked" % readings.get("next_source"))
        return out
    verdict = readings.get("next_modules") or {}
    if verdict.get("present"):
        out["msg"] = "the next boot's kernel %s has the driver: %s" % (nxt, verdict.get("detail"))
        return out
    if module_source == "precompiled":
        fix = "install %s" % ", ".join(kernel_packages)
    else:
        fix = "build them with DKMS (install linux-headers-%s, then dkms install nvidia/%s -k %s)" % (
            nxt, dkms_version, nxt)
    if setting == "refuse":
        out.update(action="refuse", msg=(
            "the next boot runs kernel %s (the boot loader's default; %s runs now) and it has no NVIDIA modules of "
            "the declared driver: %s. The node would come back without a driver. Fix: %s (or set driver_next_kernel: "
            "ensure to let the run do it), or make the running kernel the boot loader's default; not rebooting"
            % (nxt, running, verdict.get("detail"), fix)))
        return out
    if module_source == "precompiled":
        out.update(action="install", packages=list(kernel_packages), msg="kernel %s: %s" % (nxt, fix))
    else:
        out.update(action="build", packages=["linux-headers-%s" % nxt],
                   dkms={"module": "nvidia", "version": dkms_version, "kernel": nxt},
                   msg="kernel %s: %s" % (nxt, fix))
    return out


# ------------------------------------------------------------------------------------------------ reads
def _text(root, relative):
    path = os.path.join(root, relative)
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError) as exc:
        if not os.path.exists(path):
            return None
        raise KernelReadError("cannot read %s: %s" % (path, getattr(exc, "strerror", None) or exc))


def _first(root, candidates):
    for relative in candidates:
        text = _text(root, relative)
        if text is not None:
            return text
    return None


def _bls(root):
    directory = os.path.join(root, BLS_ENTRIES)
    out = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if name.endswith(".conf"):
            out[name[:-len(".conf")]] = _text(root, os.path.join(BLS_ENTRIES, name)) or ""
    return out


def next_kernel(run, root, grubby=None):
    """(kernel or None, how or why not): grubby --default-kernel where ``grubby`` (its path) is given and the root is
    "/", else the GRUB files under ``root``. ``run(argv)`` -> (rc, out, err)."""
    if grubby and root in ("/", ""):
        rc, out, err = run([grubby, "--default-kernel"])
        kernel = kernel_of(out.strip()) if rc == 0 else None
        if kernel:
            return kernel, "grubby --default-kernel: %s" % out.strip()
        return None, "grubby --default-kernel exited %d: %s" % (rc, (err or out).strip() or "no kernel image")
    return next_from_grub(_first(root, GRUBENV), _first(root, GRUB_CFG), _text(root, DEFAULT_GRUB), _bls(root))


def modinfo(run, tool, kernel):
    """{"version", "license", "error"} of the nvidia module modprobe would load for ``kernel``."""
    out = {"version": None, "license": None, "error": None}
    for field in ("version", "license"):
        rc, text, err = run(list(tool) + ["-k", kernel, "-F", field, "nvidia"])
        if rc != 0:
            out["error"] = (err or text).strip() or "modinfo exited %d" % rc
            return out
        out[field] = text.strip() or None
    return out


def dkms_status(run, tool):
    """parse_dkms_status of ``dkms status`` (None without dkms, or where it fails: the reason is in the second value)."""
    if not tool:
        return None, "dkms is not installed"
    rc, out, err = run(list(tool) + ["status"])
    if rc != 0:
        return None, "dkms status exited %d: %s" % (rc, (err or out).strip())
    return parse_dkms_status(out), None


def read(run, root, running, pin, tools, precompiled=None, installed=None):
    """The readings of the node plan and the driver plan: {"running", "next", "next_source", "next_modules",
    "dkms"}. ``tools``: {"grubby": path or None, "modinfo": argv or None, "dkms": argv or None};
    ``precompiled``: a function(kernel) -> the precompiled package names for it; ``installed``: a function(names) ->
    {name: version or None} (the package database). KernelReadError where a file says something that cannot be."""
    kernel, how = next_kernel(run, root, tools.get("grubby"))
    out = {"running": running, "next": kernel, "next_source": how, "next_modules": None, "dkms": None,
           "next_differs": bool(kernel) and kernel != running}
    if kernel is None:
        return out
    dkms, dkms_why = dkms_status(run, tools.get("dkms"))
    out["dkms"] = dkms if dkms is not None else dkms_why
    info = modinfo(run, tools["modinfo"], kernel) if tools.get("modinfo") else {
        "version": None, "license": None, "error": "modinfo not found"}
    names = precompiled(kernel) if precompiled else []
    packages = installed(names) if installed and names else {}
    out["next_modules"] = modules_verdict(kernel, info, dkms, packages, pin)
    return out


# ------------------------------------------------------------------------------------------------ the kernel hold
# The packages that bring a new kernel on an upgrade: apt's kernel metapackages and images (linux-generic,
# linux-image-generic, linux-headers-generic and their -hwe-<release> forms, linux-image-<release> ...), and the RHEL
# family's kernel packages (kernel, kernel-core, kernel-modules, kernel-modules-core, kernel-modules-extra,
# kernel-devel). Holding the metapackages is what stops an upgrade from pulling in a newer kernel.
APT_KERNEL_PATTERNS = ("linux-generic*", "linux-image-*", "linux-headers-*", "linux-modules-*", "linux-virtual*",
                       "linux-lowlatency*")
DNF_KERNEL_PACKAGES = ("kernel", "kernel-core", "kernel-modules", "kernel-modules-core", "kernel-modules-extra",
                       "kernel-devel")


def apt_kernel_packages(text):
    """[{"name", "version", "held"}] of the installed kernel packages in ``dpkg-query -W -f
    '${Package}\\t${Version}\\t${Status}\\n' <APT_KERNEL_PATTERNS>``' output (not the NVIDIA modules' packages,
    which the driver's own hold owns)."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or not fields[2].endswith(" installed"):
            continue
        if fields[0].startswith("linux-modules-nvidia-"):
            continue
        out.append({"name": fields[0], "version": fields[1], "held": fields[2].split()[0] == "hold"})
    return out


def rpm_kernel_packages(text):
    """[{"name", "version", "held": None}] from ``rpm -q --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\n' <names>``' output
    (names rpm does not know print "package ... is not installed" and are skipped)."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) == 2 and fields[0] in DNF_KERNEL_PACKAGES:
            out.append({"name": fields[0], "version": fields[1], "held": None})
    return out
