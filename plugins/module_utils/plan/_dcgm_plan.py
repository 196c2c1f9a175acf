# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA DCGM on the node, planned (PRIVATE to gpuops.nvidia): its packages at one pinned version and its host engine
service, from what the package database and systemctl say. Pure functions, no I/O (docs/dcgm.md).

Facts (public sources, read for this code; nothing of NVIDIA's is copied):
- DCGM 4 is split in packages named ``datacenter-gpu-manager-4-<part>``: ``-core`` holds ``dcgmi``, ``nv-hostengine``
  and the systemd unit ``nvidia-dcgm.service`` (NVIDIA/DCGM at commit 0d22068b8af4ff97ed8dc126da427ce4cf613e23,
  scripts/verify_package_contents/datacenter-gpu-manager-core_amd64.deb.txt, where the name's ``<MAJORVERSION>`` is 4);
  ``-cuda12`` and ``-cuda13`` hold the parts built against one CUDA major (the same folder lists
  datacenter-gpu-manager-cuda12_amd64.deb.txt and -cuda13_amd64.deb.txt); ``-proprietary`` and
  ``-proprietary-cuda<N>`` hold NVIDIA's closed parts. NVIDIA's installation guide installs
  ``datacenter-gpu-manager-4-cuda<N>`` for the CUDA major of the node's driver
  (https://docs.nvidia.com/datacenter/dcgm/latest/installation.html).
- The packages are in NVIDIA's CUDA repository, versioned ``1:<dcgm version>-1`` on apt (an epoch of 1: for example
  ``datacenter-gpu-manager-4-core=1:4.4.0-1`` as NVIDIA's own container builds pin it).
- The host engine listens on TCP port 5555 by default (``DCGM_HE_PORT_NUMBER`` in NVIDIA/DCGM's dcgmlib/dcgm_structs.h).

Held as the driver's and the toolkit's packages are (docs/dcgm.md): on apt an apt preferences pin at the version
(priority 990: the pinned version is the candidate, so ``apt-get upgrade`` and unattended-upgrades do not move the
packages) and a dpkg hold (any other tool's change fails loudly); dnf holds nothing (its versionlock plugin is not
managed, as for the driver).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages

STATES = ("present", "absent")
CUDA_MAJORS = (12, 13)
SERVICE = "nvidia-dcgm.service"
PORT = 5555
# What a unit name may be (systemd's own characters for a unit name, ending in .service).
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")
# The apt preferences pin's file name (in apt's Dir::Etc::PreferencesParts, /etc/apt/preferences.d on a node) and its
# priority (below 1000: a newer version installed by hand is not downgraded behind the owner's back).
PIN_NAME = "nvidia-dcgm-gpuops"
PIN_PRIORITY = 990


class DcgmPlanError(Exception):
    """A declaration that cannot be planned (what is wrong and what is valid), before anything changes."""


def package_names(cuda, proprietary=False):
    """The DCGM 4 packages for CUDA major ``cuda``: core and the CUDA part, plus NVIDIA's closed parts where asked."""
    if cuda not in CUDA_MAJORS:
        raise DcgmPlanError("cuda must be the CUDA major of DCGM 4's packages, one of %s; got %r"
                            % (", ".join(str(c) for c in CUDA_MAJORS), cuda))
    names = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda%d" % cuda]
    if proprietary:
        names += ["datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda%d" % cuda]
    return names


def resolve_manager(manager, found):
    """``manager`` (apt, dnf or auto) as the node has it: auto is apt where ``found`` (tool name -> whether the node
    has it) has dpkg-query and apt-get, dnf where it has rpm and dnf."""
    if manager in _packages.MANAGERS:
        return manager
    if manager != "auto":
        raise DcgmPlanError("package_manager must be one of apt, dnf, auto; got %r" % (manager,))
    if found.get("dpkg-query") and found.get("apt-get"):
        return "apt"
    if found.get("rpm") and found.get("dnf"):
        return "dnf"
    raise DcgmPlanError("package_manager auto: this node has neither apt (dpkg-query, apt-get) nor dnf (rpm, dnf); "
                        "DCGM's packages are served for both by NVIDIA's CUDA repository: set package_manager")


def validate(params):
    """What is wrong with the parameters (a list; empty: valid), before anything is read."""
    errors = []
    if params.get("state") not in STATES:
        errors.append("state must be one of %s, got %r" % (", ".join(STATES), params.get("state")))
    version = params.get("version")
    if not isinstance(version, str) or not _packages.VERSION_RE.match(version):
        errors.append("version %r is not a package version (the package manager's, like 1:4.5.2-1 on apt: it starts "
                      "with a digit; A-Z, a-z, 0-9, .+~^_:-)" % (version,))
    try:
        package_names(params.get("cuda"))
    except DcgmPlanError as exc:
        errors.append(str(exc))
    systemctl = params.get("systemctl")
    # (unset or empty: found on PATH)
    words_ok = isinstance(systemctl, list) and all(isinstance(a, str) and a and "\x00" not in a for a in systemctl)
    if systemctl and not words_ok:
        errors.append("systemctl must be an argument list naming the systemctl program first, like "
                      "[/usr/bin/systemctl], each element a non-empty text; got %r" % (systemctl,))
    service = params.get("service")
    if not isinstance(service, str) or not UNIT_RE.match(service):
        errors.append("service %r is not a systemd service name (like %s)" % (service, SERVICE))
    for path in params.get("package_files") or []:
        if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
            errors.append("package_files: %r must be an absolute path on the node" % (path,))
        elif ":" in path:
            # (apt-get install skips such a path without an error: seen with apt 2.6.1; the repository's file names
            # carry no epoch)
            errors.append("package_files: %r must not contain a colon (apt-get does not install such a path); name "
                          "the files as the repository does, like datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb"
                          % (path,))
    return errors


def pin_text(names, version):
    """The apt preferences pin that keeps ``names`` at ``version`` (one stanza, as the toolkit's)."""
    return ("Explanation: Managed by gpuops.nvidia (dcgm_host_engine): NVIDIA DCGM stays at %s (change "
            "gpu_node_dcgm_version to move it)\nPackage: %s\nPin: version %s\nPin-Priority: %d\n"
            % (version, " ".join(names), version, PIN_PRIORITY))


def holds(manager, hold):
    """Whether the packages are held on this package manager (apt only: dnf holds nothing)."""
    return bool(hold) and manager == "apt"


def plan(state, manager, names, version, installed, unit, allow_downgrade=False, hold=False, pin=None):
    """What to change: {"packages": the package plan (_packages.plan's; for absent each installed one "remove"),
    "service": the systemctl verbs in order, "hold": the packages to hold (dpkg selection), "pin": the preferences pin's
    text to write (None: leave it; "" for absent: remove it), "reasons": why (empty: nothing to change)}.
    ``installed`` is _packages.read_installed's answer, ``unit`` _dcgm_node.unit_state's, ``pin`` the text of the
    preferences pin file now (None: no such file); ``hold``: keep the packages held (apt only). Raises DcgmPlanError
    on a downgrade that is not allowed."""
    reasons = []
    if state == "absent":
        packages = [{"name": n, "installed": (installed.get(n) or {}).get("version"), "version": None,
                     "action": "remove" if (installed.get(n) or {}).get("version") else "none"} for n in names]
        service = (["stop"] if unit["active"] else []) + (["disable"] if unit["enabled"] else [])
        reasons += ["the host engine is running (state absent)"] if unit["active"] else []
        reasons += ["the host engine is enabled (state absent)"] if unit["enabled"] else []
        reasons += ["package %s is installed at %s (state absent)" % (p["name"], p["installed"])
                    for p in packages if p["action"] == "remove"]
        reasons += ["the apt preferences pin %s is there (state absent)" % PIN_NAME] if pin is not None else []
        return {"packages": packages, "service": service, "hold": [], "pin": "" if pin is not None else None,
                "reasons": reasons}
    packages = _packages.plan(manager, names, version, installed)
    downgrades = [p for p in packages if p["action"] == "downgrade"]
    if downgrades and not allow_downgrade:
        raise DcgmPlanError("DCGM %s is declared and %s installed: a downgrade is refused unless allowed "
                            "(allow_downgrade: true)" % (version, ", ".join(
                                "%s at %s" % (p["name"], p["installed"]) for p in downgrades)))
    held = holds(manager, hold)
    reasons += _packages.reasons([{"name": n, "version": version, "manager": manager, "hold": held} for n in names],
                                 installed)
    to_hold = [p["name"] for p in packages if held and (p["action"] != "none"
                                                        or not (installed.get(p["name"]) or {}).get("held"))]
    want_pin = pin_text(names, version) if held else None
    if want_pin is not None and pin != want_pin:
        reasons.append("the apt preferences pin %s %s" % (PIN_NAME, "is missing" if pin is None else
                                                          "does not pin DCGM's packages at %s" % version))
    changing = any(p["action"] != "none" for p in packages)
    service = ["daemon-reload"] if changing else []
    if not unit["enabled"]:
        service.append("enable")
        if not changing:
            reasons.append("the host engine is not enabled" if unit["known"] else
                           "systemctl does not know the host engine's unit although its packages are installed")
    if not unit["active"]:
        service.append("start")
        if not changing and unit["known"]:
            reasons.append("the host engine is not running")
    elif changing:
        service.append("restart")       # the running engine is the old version's
    return {"packages": packages, "service": service if reasons else [], "hold": to_hold,
            "pin": want_pin if want_pin is not None and pin != want_pin else None, "reasons": reasons}


def files_problems(manager, names, version, files):
    """What is wrong with the package files before anything is installed: ``files`` maps each path to (package name,
    version) as the package tool read it, or to an error text. Each declared package must come from exactly one file
    at the pin, and no file may hold another package."""
    problems, seen = [], {}
    for path in sorted(files):
        found = files[path]
        if isinstance(found, str):
            problems.append("%s: %s" % (path, found))
            continue
        name, have = found
        if name not in names:
            problems.append("%s holds %s, which is not one of DCGM's declared packages (%s)"
                            % (path, name, ", ".join(names)))
        elif _packages.compare(manager, have, version) != 0:
            problems.append("%s holds %s at %s, declared %s" % (path, name, have, version))
        elif name in seen:
            problems.append("%s and %s both hold %s" % (seen[name], path, name))
        seen.setdefault(name, path)
    missing = [n for n in names if n not in seen]
    if missing and not problems:
        problems.append("no package file holds %s" % ", ".join(missing))
    return problems


def install_command(manager, names, version, package_files, allow_downgrade):
    """The one transaction that installs the packages at the pin (an argument list): from the repository, or from the
    package files on the node (air-gapped)."""
    if manager == "apt":
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "--allow-change-held-packages",
               "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
        cmd += ["--allow-downgrades"] if allow_downgrade else []
        return cmd + (list(package_files) if package_files else ["%s=%s" % (n, version) for n in names])
    cmd = ["dnf", "install", "-y"]
    return cmd + (list(package_files) if package_files else ["%s-%s" % (n, version) for n in names])


def remove_command(manager, names):
    """The removal (held packages included: apt-get refuses to change a held package without being told)."""
    if manager == "apt":
        return ["apt-get", "remove", "-y", "-q", "--allow-change-held-packages"] + list(names)
    return ["dnf", "remove", "-y"] + list(names)
