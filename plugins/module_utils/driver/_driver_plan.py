# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA driver's packages for one node (PRIVATE to gpuops.nvidia): which packages, at which exact versions,
from which source, and what is refused before anything changes. Pure: no I/O. Its inputs are the declaration, the
node's distribution and kernel, the PCI devices (``_pci.read_nvidia_devices``' shape), the driver state
(``_driver_state.read``'s shape: Secure Boot, NVSwitch, NVLink5), the package database (``_packages.read_installed``)
and what the package source offers (``_package_repo.probe``, apt-cache madison, or the package files' own names and
versions): the caller reads them.

Package names and version strings, by source (checked against the sources named; where a name could not be checked
it is marked UNVERIFIED here and in docs/driver.md):

- NVIDIA's CUDA repository, Ubuntu (``https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/<arch>/``,
  a flat repository signed by the key of NVIDIA's ``cuda-keyring`` package): the branch is in the names up to 580
  (``nvidia-headless-580-open``, ``nvidia-dkms-580-open``, ``nvidia-utils-580``, ``libnvidia-compute-580``,
  ``nvidia-compute-utils-580`` which holds nvidia-persistenced, ``cuda-drivers-580``), versioned
  ``<driver>-0ubuntu1``. The names and the 590 rename (``libnvidia-compute-580`` -> ``libnvidia-compute``,
  ``nvidia-dkms-580-open`` -> ``nvidia-dkms-open``) are from NVIDIA's Driver Installation Guide, "Recent updates"
  (docs.nvidia.com/datacenter/tesla/driver-installation-guide/recent-updates.html). The CUDA repository for Ubuntu
  builds the kernel modules with DKMS only; Ubuntu's precompiled, signed modules come from the Ubuntu archive.
- Fabric Manager (and NSCQ, IMEX) in the CUDA repository: ``nvidia-fabricmanager-<branch>`` before 580, and
  ``nvidia-fabricmanager`` from 580 on, versioned ``<driver>-1`` (NVIDIA/gpu-driver-container at 06a208ca,
  ubuntu24.04/precompiled/local-repo.sh ``fabricmanager_download`` and ubuntu24.04/install.sh, which installs
  ``nvidia-fabricmanager=${DRIVER_VERSION}*``; rhel9/install.sh installs ``nvidia-fabricmanager-${DRIVER_VERSION}``
  and holds it with ``dnf versionlock``). The Fabric Manager must be the driver's exact version (NVIDIA Fabric
  Manager user guide, docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/).
- The Ubuntu archive (Canonical's packages of the ``-server`` branches): ``nvidia-headless-no-dkms-<b>-server-open``
  with ``linux-modules-nvidia-<b>-server-open-<kernel>`` (precompiled for one kernel, signed by Canonical for Secure
  Boot), or ``nvidia-headless-<b>-server-open`` with DKMS (``nvidia-dkms-<b>-server-open``), and
  ``nvidia-utils-<b>-server``; the proprietary flavour drops ``-open`` (NVIDIA/gpu-driver-container at 06a208ca,
  ubuntu24.04/precompiled/local-repo.sh ``download_driver_package_deps``; NVIDIA/ansible-role-nvidia-driver at
  f68d4a7, defaults/main.yml). The archive's revisions (``-0ubuntu0.24.04.N``) and the precompiled package's
  kernel-like version cannot be derived from the driver's: they are read from the archive (``available``). The
  archive's Fabric Manager name ``nvidia-fabricmanager-<b>`` is UNVERIFIED for 580.
- NVIDIA's CUDA repository, RHEL (``.../repos/rhel9/<arch>/``): dnf module streams ``nvidia-driver:<b>-open`` (open,
  DKMS), ``nvidia-driver:<b>-dkms`` (proprietary, DKMS) and ``nvidia-driver:<b>`` (proprietary, precompiled
  ``kmod-nvidia-<driver>-<kernel>`` packages) (NVIDIA/ansible-role-nvidia-driver at f68d4a7,
  tasks/install-redhat.yml: ``@nvidia-driver:<branch>-dkms``; NVIDIA's blog "Streamlining NVIDIA Driver Deployment
  on RHEL 8 with Modularity Streams"; rhel9/install.sh of the driver container: ``nvidia-driver:${DRIVER_BRANCH}-dkms``).
  Packages ``nvidia-driver``, ``nvidia-driver-cuda``, ``nvidia-driver-libs``, ``nvidia-kmod-common``,
  ``kmod-nvidia-open-dkms`` / ``kmod-nvidia-latest-dkms``, ``nvidia-persistenced``, at epoch 3:
  ``3:<driver>-1.el9`` (the Driver Installation Guide's "Version locking" page lists ``nvidia-driver-3:575.51-1.fc41``
  and ``kmod-nvidia-open-dkms-3:575.51-1.fc41``). The precompiled kmod's name (``kmod-nvidia-<driver>-<kernel
  without arch>``) and precompiled streams for the open flavour are UNVERIFIED: this planner offers RHEL precompiled
  modules for the proprietary flavour only. RHEL's own repositories do not carry NVIDIA's driver here.
- Flavours: open modules need Turing or later; proprietary modules are not supported on Blackwell or later (NVIDIA's
  "NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules", 2024; the Driver Installation Guide's "Kernel
  Modules" page), by architecture as ``_gpu_catalog`` orders them; a GPU's ``architecture`` and ``open_modules`` are the
  caller's (``_pci.read_nvidia_devices``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _nvidia_pci_ids, _pci
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages

FLAVOURS = ("open", "proprietary")
MODULE_SOURCES = ("auto", "precompiled", "dkms")
PACKAGE_SOURCES = ("cuda_repository", "distribution", "mirror", "files")
FABRIC_MANAGER = ("auto", "true", "false")
DKMS_SIGNING = ("none", "mok")

VERSION_RE = re.compile(r"^([0-9]{3})\.[0-9]+(\.[0-9]+)?$")
BRANCH_RE = re.compile(r"^[0-9]{3}$")
KERNEL_RE = re.compile(r"^[0-9][A-Za-z0-9._+~-]*$")
REVISION_RE = re.compile(r"^[A-Za-z0-9.+~_]+$")

# NVIDIA's package revisions in the CUDA repository (see the module docstring)
CUDA_APT_REVISION = "0ubuntu1"
CUDA_RPM_RELEASE = "1.el%s"
CUDA_RPM_EPOCH = "3"
FABRIC_MANAGER_REVISION = "1"


class DriverPlanError(Exception):
    """Input that cannot be planned at all (the caller says what is valid)."""


def _bool_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).lower()


def validate(declaration):
    """The declaration with defaults and its branch; raises DriverPlanError listing every problem."""
    d = dict(declaration or {})
    errors = []
    version, branch = d.get("version") or "", str(d.get("branch") or "")
    d["flavour"] = d.get("flavour") or "open"
    d["module_source"] = d.get("module_source") or "auto"
    d["package_source"] = d.get("package_source") or "cuda_repository"
    d["fabric_manager"] = _bool_text(d.get("fabric_manager", "auto"))
    d["dkms_signing"] = d.get("dkms_signing") or "none"
    d["allow_downgrade"] = bool(d.get("allow_downgrade", False))
    for key in ("version", "fabric_manager_version", "revision"):
        if d.get(key) and not isinstance(d[key], str):
            # a YAML number (version: 580.95 reads as a float), a list...: text is what names a version
            errors.append("%s %r is a %s; give it as text (quoted in YAML)" % (key, d[key], type(d[key]).__name__))
            d[key] = ""
    version = d.get("version") or ""
    if not version and not branch and not errors:
        errors.append("give the driver's version (like 580.95.05) or its branch (like 580)")
    m = VERSION_RE.match(version) if version else None
    if version and not m:
        errors.append("version %r is not a driver version (<branch>.<minor>[.<patch>], like 580.95.05)" % version)
    if branch and not BRANCH_RE.match(branch):
        errors.append("branch %r is not a driver branch (three digits, like 580)" % branch)
    if m and branch and m.group(1) != branch:
        errors.append("version %s is not on branch %s (it is on %s)" % (version, branch, m.group(1)))
    for key, valid in (("flavour", FLAVOURS), ("module_source", MODULE_SOURCES), ("package_source", PACKAGE_SOURCES),
                       ("fabric_manager", FABRIC_MANAGER), ("dkms_signing", DKMS_SIGNING)):
        if d[key] not in valid:
            errors.append("%s %r is not one of %s" % (key, d[key], ", ".join(valid)))
    fm = d.get("fabric_manager_version") or ""
    if fm and not VERSION_RE.match(fm):
        errors.append("fabric_manager_version %r is not a driver version (like 580.95.05)" % fm)
    revision = d.get("revision") or ""
    if revision and not REVISION_RE.match(revision):
        errors.append("revision %r is not a package revision (like 0ubuntu1)" % revision)
    if errors:
        raise DriverPlanError("; ".join(errors))
    d["version"] = version
    d["branch"] = branch or m.group(1)
    d["fabric_manager_version"] = fm
    d["revision"] = revision
    return d


# ------------------------------------------------------------------------------------------------ the GPUs
def flavour_refusals(flavour, devices):
    """Messages naming the GPUs that cannot run ``flavour`` (with their bus ids) and what to do: one per reason, every
    GPU that has it in the one message (the catalog's rules by architecture; a GPU whose ``open_modules`` is False
    without a known architecture is one outside NVIDIA's open-module table)."""
    refused = []
    for dev in devices or []:
        arch = dev.get("architecture")
        if dev.get("kind") != "gpu":
            continue
        if flavour == "proprietary" and catalog.proprietary_modules_supported(arch) is False:
            refused.append((arch, dev))
        old = catalog.open_modules_supported(arch) is False
        if flavour == "open" and (old or dev.get("open_modules") is False):
            refused.append((arch if old else None, dev))
    out = []
    for arch, members in _pci.grouped(refused):
        one = len(members) == 1
        if flavour == "proprietary":
            out.append("%s %s: NVIDIA's proprietary kernel modules do not support %s; declare the open flavour "
                       "(driver_flavour: open)" % (_pci.subject(members), _a_gpu(arch, one), "it" if one else "them"))
        else:
            why = ("%s (the open modules need Turing or later)" % _a_gpu(arch, one) if arch
                   else "not in NVIDIA's open-module table (%s)" % _nvidia_pci_ids.OPEN_TABLE_SOURCE)
            out.append("%s %s; declare the proprietary flavour (driver_flavour: proprietary)"
                       % (_pci.subject(members), why))
    return out


def _a_gpu(arch, one):
    return ("a %s GPU" if one else "%s GPUs") % catalog.architecture_title(arch)


# ------------------------------------------------------------------------------------------------ names
def _kernel_no_arch(kernel):
    """RHEL's ``5.14.0-427.13.1.el9_4.x86_64`` -> ``5.14.0-427.13.1.el9_4`` (the precompiled kmod's name part)."""
    return re.sub(r"\.(x86_64|aarch64)$", "", kernel)


def precompiled_offered(manager, source, flavour):
    """Whether the source publishes precompiled kernel modules of ``flavour`` (the docstring's table)."""
    if manager == "apt":
        return source == "distribution"
    return source in ("cuda_repository", "mirror", "files") and flavour == "proprietary"


def names(decl, node, module_source):
    """{"driver": [...], "kernel": [...], "persistenced": name, "fabric_manager": [...], "extra": [...],
    "stream": dnf module stream or None} for a validated declaration and a module source (precompiled or dkms)."""
    b, flavour, source, kernel = decl["branch"], decl["flavour"], decl["package_source"], node["kernel"]
    opn = "-open" if flavour == "open" else ""
    fm_name = "nvidia-fabricmanager" if int(b) >= 580 else "nvidia-fabricmanager-%s" % b
    if node["manager"] == "apt" and source == "distribution":
        if module_source == "precompiled":
            driver = ["nvidia-headless-no-dkms-%s-server%s" % (b, opn)]
            kernel_pkgs = ["linux-modules-nvidia-%s-server%s-%s" % (b, opn, kernel)]
            extra = []
        else:
            driver = ["nvidia-headless-%s-server%s" % (b, opn)]
            kernel_pkgs = ["nvidia-dkms-%s-server%s" % (b, opn)]
            extra = ["linux-headers-%s" % kernel]
        driver += ["nvidia-utils-%s-server" % b, "nvidia-compute-utils-%s-server" % b, "libnvidia-compute-%s-server" % b]
        return {"driver": driver, "kernel": kernel_pkgs, "persistenced": "nvidia-compute-utils-%s-server" % b,
                "fabric_manager": ["nvidia-fabricmanager-%s" % b], "extra": extra, "stream": None}
    if node["manager"] == "apt":
        driver = ["nvidia-headless-%s%s" % (b, opn), "nvidia-utils-%s" % b, "nvidia-compute-utils-%s" % b,
                  "libnvidia-compute-%s" % b]
        return {"driver": driver, "kernel": ["nvidia-dkms-%s%s" % (b, opn)],
                "persistenced": "nvidia-compute-utils-%s" % b, "fabric_manager": [fm_name],
                "extra": ["linux-headers-%s" % kernel], "stream": None}
    # dnf: NVIDIA's CUDA repository for RHEL (its module streams)
    driver = ["nvidia-driver", "nvidia-driver-cuda", "nvidia-driver-libs", "nvidia-kmod-common", "nvidia-persistenced"]
    if module_source == "precompiled":
        kernel_pkgs = ["kmod-nvidia-%s-%s" % (decl["version"] or b, _kernel_no_arch(kernel))]
        stream, extra = "nvidia-driver:%s" % b, []
    else:
        kernel_pkgs = ["kmod-nvidia-open-dkms" if flavour == "open" else "kmod-nvidia-latest-dkms"]
        stream = "nvidia-driver:%s-%s" % (b, "open" if flavour == "open" else "dkms")
        extra = ["kernel-devel-%s" % kernel, "kernel-headers-%s" % kernel]
    return {"driver": driver, "kernel": kernel_pkgs, "persistenced": "nvidia-persistenced",
            "fabric_manager": ["nvidia-fabricmanager"], "extra": extra, "stream": stream}


def probe_names(declaration, node):
    """Every package name the source is asked about for this node (both module sources where auto may choose)."""
    decl = validate(declaration)
    out = []
    for source in (("precompiled", "dkms") if decl["module_source"] == "auto" else (decl["module_source"],)):
        n = names(decl, node, source)
        for name in n["driver"] + n["kernel"] + n["fabric_manager"]:
            if name not in out:
                out.append(name)
    return out


def replaced_names(declaration, node, installed_driver):
    """apt: the package names of the installed driver's branch (``installed_driver``), where it is not the declared
    one - both flavours, both module sources - that the declared packages do not reuse. Ubuntu's and NVIDIA's apt
    packages carry the branch in their names (nvidia-headless-570-open, libnvidia-compute-580, ...), so a branch
    change installs other packages; their Conflicts make apt remove the old ones, but apt's resolver will not remove
    a held package by itself ("pkgProblemResolver::Resolve generated breaks, this may be caused by held packages"),
    and this role holds what it installs. The plan names the installed ones for removal in the install's own
    transaction (``remove``). [] on dnf (one set of names across branches: the module stream changes) and where the
    branch is the declared one."""
    decl = validate(declaration)
    if node.get("manager") != "apt" or not installed_driver or not VERSION_RE.match(installed_driver):
        return []
    branch = installed_driver.split(".")[0]
    if branch == decl["branch"]:
        return []
    keep = set(probe_names(declaration, node))
    out = []
    for flavour in ("open", "proprietary"):
        old = dict(decl, branch=branch, version=installed_driver, flavour=flavour)
        for source in ("precompiled", "dkms"):
            n = names(old, node, source)
            for name in n["driver"] + n["kernel"] + n["fabric_manager"]:
                if name not in keep and name not in out:
                    out.append(name)
    return out


# ------------------------------------------------------------------------------------------------ versions
def exact_version(decl, node, name, group):
    """The version the source publishes ``name`` at for the declared driver, where it can be derived (None: read it
    from the source)."""
    if not decl["version"] or (node["manager"] == "apt" and decl["package_source"] == "distribution"):
        return None
    if node["manager"] == "apt":
        revision = FABRIC_MANAGER_REVISION if group == "fabric_manager" else (decl["revision"] or CUDA_APT_REVISION)
        return "%s-%s" % (decl["version"], revision)
    if group == "fabric_manager":
        return "%s-%s" % (decl["version"], FABRIC_MANAGER_REVISION)
    release = decl["revision"] or CUDA_RPM_RELEASE % str(node.get("distribution_major") or "9")
    return "%s:%s-%s" % (CUDA_RPM_EPOCH, decl["version"], release)


def upstream(version):
    """The driver version inside a package version: ``3:580.95.05-1.el9`` -> ``580.95.05``."""
    return _packages._split_evr(version)[1]


def _newest(manager, versions):
    return sorted(versions, key=functools.cmp_to_key(lambda a, b: _packages.compare(manager, a, b)))[-1]


def _resolve(decl, node, name, group, available):
    """(version, problem): the exact version for ``name``; from ``available`` where the source was read."""
    manager = node["manager"]
    want = exact_version(decl, node, name, group)
    offered = None if available is None else list(available.get(name) or [])
    if offered is None:
        return want, None if want else "the version of %s is read from the package source, which was not read" % name
    if not offered:
        return None, "the package source has no %s" % name
    if want is not None:
        if any(_packages.compare(manager, v, want) == 0 for v in offered):
            return want, None
        return None, "the package source has no %s at %s (it has %s)" % (name, want, ", ".join(offered))
    if group == "kernel" and name.startswith("linux-modules-nvidia-"):
        return _newest(manager, offered), None      # named for the kernel; its version is the kernel's
    match = [v for v in offered if upstream(v) == decl["version"]] if decl["version"] else \
        [v for v in offered if upstream(v).split(".")[0] == decl["branch"]]
    if not match:
        return None, "the package source has no %s at driver %s (it has %s)" % (
            name, decl["version"] or "branch " + decl["branch"], ", ".join(offered))
    return _newest(manager, match), None


# ------------------------------------------------------------------------------------------------ the plan
def plan(declaration, node, devices, state=None, installed=None, available=None, installed_driver=None):
    """The driver's packages for a node, and every refusal.

    ``node``: {"manager": apt|dnf, "distribution": "ubuntu", "distribution_major": "24", "kernel": uname -r,
    "architecture": "x86_64"}. ``state``: ``_driver_state.read``'s dict (secure_boot, nvswitch, nvlink5,
    nouveau_loaded) or None. ``installed``: ``_packages.read_installed``' dict or None. ``available``: {name:
    [versions]} that the source offers (the repository asked, or the package files' own versions), None when not
    read. ``installed_driver``: the driver version the node's packages hold whatever their names (another branch's
    packages carry another name on apt). Returns a dict; ``refusals`` (each {"kind", "msg"}) empty means the plan may be applied."""
    decl = validate(declaration)
    state = state or {}
    manager = node.get("manager")
    if manager not in _packages.MANAGERS:
        raise DriverPlanError("package manager %r is not one of %s" % (manager, ", ".join(_packages.MANAGERS)))
    if not KERNEL_RE.match(str(node.get("kernel") or "")):
        raise DriverPlanError("the running kernel %r is not a kernel release (uname -r)" % node.get("kernel"))
    refusals = []

    def refuse(kind, msg):
        refusals.append({"kind": kind, "msg": msg})

    for msg in flavour_refusals(decl["flavour"], devices):
        refuse("flavour", msg)
    if manager == "dnf" and decl["package_source"] == "distribution":
        refuse("source", "the RHEL family's own repositories do not carry NVIDIA's driver: use package_source "
                         "cuda_repository (NVIDIA's CUDA repository), mirror or files")

    # the kernel modules: precompiled where the source offers them for the running kernel, else DKMS
    offered = precompiled_offered(manager, decl["package_source"], decl["flavour"])
    module_source, why = decl["module_source"], ""
    pre_names = names(decl, node, "precompiled")["kernel"]
    have_pre = offered and (available is None or all(available.get(n) for n in pre_names))
    if module_source == "precompiled" and not have_pre:
        if not offered:
            where = {"apt": "NVIDIA's CUDA repository for Ubuntu builds the modules with DKMS only; Canonical's "
                            "signed precompiled modules come from the Ubuntu archive (package_source distribution)",
                     "dnf": "precompiled open modules for RHEL are not offered by this role (declare "
                            "module_source dkms, or the proprietary flavour's precompiled stream)"}[manager]
        else:
            where = "the source has no %s for the running kernel %s: boot a kernel it has modules for, or declare " \
                    "module_source dkms" % (", ".join(pre_names), node["kernel"])
        refuse("precompiled", "precompiled kernel modules were demanded (module_source precompiled) and are not "
                              "available: %s" % where)
    if module_source == "auto":
        module_source = "precompiled" if have_pre else "dkms"
        why = ("the source offers precompiled modules for kernel %s" % node["kernel"] if have_pre
               else "no precompiled modules for kernel %s from this source: built with DKMS" % node["kernel"])
    elif module_source == "precompiled":
        why = "declared"
    else:
        why = "declared"
    if module_source == "dkms" and state.get("secure_boot") is True and decl["dkms_signing"] != "mok":
        refuse("secure_boot", "Secure Boot is on and the kernel modules would be built with DKMS, unsigned: the "
                              "kernel would refuse to load them. Use precompiled signed modules (on Ubuntu: "
                              "package_source distribution, module_source precompiled), or enroll a Machine Owner "
                              "Key that DKMS signs with (mokutil --import, then a reboot to confirm it) and declare "
                              "dkms_signing: mok")

    n = names(decl, node, module_source)
    # the Fabric Manager
    nvswitch = bool(state.get("nvswitch")) or bool(state.get("nvlink5")) or any(
        d.get("kind") == "nvswitch" for d in devices or [])
    fm = {"true": True, "false": False}.get(decl["fabric_manager"], nvswitch)
    fm_reason = ("declared" if decl["fabric_manager"] != "auto" else
                 ("NVSwitch system" if nvswitch else "no NVSwitch on this node"))
    if decl["fabric_manager_version"] and decl["version"] and decl["fabric_manager_version"] != decl["version"]:
        refuse("fabric_manager", "the Fabric Manager is pinned at %s and the driver at %s: NVIDIA's Fabric Manager "
                                 "runs only at exactly the driver's version. Pin both at one version (or leave "
                                 "fabric_manager_version empty)" % (decl["fabric_manager_version"], decl["version"]))
    notes = []
    if nvswitch and decl["fabric_manager"] == "false":
        notes.append("this is an NVSwitch system and the Fabric Manager is declared off: CUDA jobs across GPUs fail "
                     "until it runs")

    groups = [("driver", n["driver"]), ("kernel", n["kernel"])] + ([("fabric_manager", n["fabric_manager"])] if fm else [])
    packages, problems = [], []
    for group, group_names in groups:
        for name in group_names:
            version, problem = _resolve(decl, node, name, group, available)
            if problem:
                problems.append(problem)
            packages.append({"name": name, "version": version, "group": group})
    if problems:
        refuse("version", "; ".join(problems) + ". Pin a version the source has; nothing changed")

    extra = list(n["extra"]) + (["nvlsm", "infiniband-diags"] if fm and state.get("nvlink5") else [])
    actions, changes = [], []
    for entry in packages:
        have = (installed or {}).get(entry["name"], {}).get("version")
        if entry["version"] is None:
            action = "unknown"
        elif have is None:
            action = "install"
        else:
            order = _packages.compare(manager, have, entry["version"])
            action = "none" if order == 0 else ("upgrade" if order < 0 else "downgrade")
        actions.append(dict(entry, installed=have, action=action))
        if action != "none":
            changes.append("%s: %s -> %s (%s)" % (entry["name"], have or "not installed", entry["version"] or "?", action))
    remove = [name for name in replaced_names(declaration, node, installed_driver) if name in (installed or {})]
    for name in remove:
        have = installed[name].get("version") or "?"
        changes.append("%s: %s -> removed (branch %s replaces it)" % (name, have, decl["branch"]))
    down = [a for a in actions if a["action"] == "downgrade"]
    target = decl["version"] or (upstream(packages[0]["version"]) if packages and packages[0]["version"] else "")
    if installed_driver and target and not down and _packages.deb_compare(installed_driver, target) > 0:
        down = [{"name": "the installed driver", "installed": installed_driver}]
    if down and not decl["allow_downgrade"]:
        refuse("downgrade", "refusing to downgrade %s: installed %s is newer than the declared %s. Declare the "
                            "installed version, or allow the downgrade (driver_allow_downgrade: true)"
               % (", ".join(a["name"] for a in down), ", ".join(sorted(set(a["installed"] for a in down))),
                  decl["version"] or decl["branch"]))
    version = decl["version"] or (upstream(packages[0]["version"]) if packages and packages[0]["version"] else "")
    return {
        "branch": decl["branch"], "version": version, "flavour": decl["flavour"], "manager": manager,
        "package_source": decl["package_source"], "module_source": module_source, "module_source_reason": why,
        "stream": n["stream"], "packages": actions, "extra": extra, "remove": remove,
        "persistenced": n["persistenced"],
        "fabric_manager": fm, "fabric_manager_reason": fm_reason, "changes": changes, "notes": notes,
        "refusals": refusals,
        "reboot_needed": bool(state.get("nouveau_loaded")),
        "reboot_reason": ("nouveau is loaded: it holds the GPUs until a reboot with it blacklisted"
                          if state.get("nouveau_loaded") else ""),
    }


def refusal_text(result):
    """One message for every refusal of a plan, ending in what changed (nothing)."""
    return "; ".join(r["msg"] for r in result["refusals"]) + "; nothing changed"


def declared_packages(declaration, node, hold=True):
    """What the node plan compares without asking the source: [{manager, names, version, hold}], one entry per
    version, for the packages whose exact version follows from the declaration (NVIDIA's CUDA repository, a mirror of
    it, package files); [] where the source decides the versions (the Ubuntu archive) or only a branch is declared.
    The module source is ``auto``'s choice before the source is read (precompiled where the source publishes them)."""
    decl = validate(declaration)
    manager = node["manager"]
    if not decl["version"] or (manager == "apt" and decl["package_source"] == "distribution") or manager == "dnf" \
            and decl["package_source"] == "distribution":
        return []
    source = decl["module_source"]
    if source == "auto":
        source = "precompiled" if precompiled_offered(manager, decl["package_source"], decl["flavour"]) else "dkms"
    n = names(decl, node, source)
    groups = [("driver", n["driver"]), ("kernel", n["kernel"])]
    fm = {"true": True, "false": False}.get(decl["fabric_manager"])
    if fm is None:
        fm = bool(node.get("nvswitch"))
    if fm:
        groups.append(("fabric_manager", n["fabric_manager"]))
    out = []
    for group, group_names in groups:
        version = exact_version(decl, node, group_names[0], group)
        same = [e for e in out if e["version"] == version]
        if same:
            same[0]["names"].extend(group_names)
        else:
            out.append({"manager": manager, "names": list(group_names), "version": version,
                        "hold": bool(hold) and manager == "apt"})
    return out


def version_key(version):
    """A sort key for driver versions (580.95.05 after 580.82.07)."""
    return tuple(int(part) for part in version.split("."))
