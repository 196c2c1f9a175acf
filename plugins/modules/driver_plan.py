#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_plan
short_description: Plan the NVIDIA driver's packages for a node, and refuse what cannot work, before anything changes
version_added: 0.3.0
description:
  - The read and plan of the gpuops.nvidia.driver role; changes nothing, in any mode.
  - Reads the node's NVIDIA PCI devices and driver state (Secure Boot, NVSwitch, NVLink5, nouveau) below O(root),
    unless given in O(devices) and O(state); the installed packages from the package database; and what the package
    source offers - the repository asked from a scratch directory (O(repository)), the node's own apt lists
    (C(package_source=distribution) in O(declaration)), or the package files (O(package_files)).
  - Then plans the packages at exact versions (driver userspace, kernel modules - precompiled where the source has
    them for the running kernel, else DKMS -, the Fabric Manager at exactly the driver's version on NVSwitch systems,
    nvidia-persistenced) and refuses, with what to do - proprietary modules on Blackwell, open modules on a GPU older
    than Turing, Secure Boot with an unsigned DKMS build, a Fabric Manager pinned at another version, a downgrade
    unless allowed, precompiled modules demanded where the source has none for the running kernel, and a version the
    source does not have.
options:
  declaration:
    description:
      - The declared driver - C(version) (like V(580.95.05)) and/or C(branch), C(flavour) (open, proprietary),
        C(module_source) (auto, precompiled, dkms), C(package_source) (cuda_repository, distribution, mirror, files),
        C(fabric_manager) (auto, true, false), C(fabric_manager_version), C(dkms_signing) (none, mok),
        C(allow_downgrade), C(revision) (the package revision, where it differs from NVIDIA's).
    type: dict
    required: true
  kernel:
    description: The running kernel (C(uname -r)); read from O(root)'s C(/proc/sys/kernel/osrelease) when empty.
    type: str
    default: ""
  distribution_major:
    description: The distribution's major version (the RPM release's C(el9)).
    type: str
    default: ""
  root:
    description: Where the node's C(/sys) and C(/proc) are (V(/) on a node; the lab's node directory).
    type: path
    default: /
  devices:
    description: The NVIDIA PCI devices, as the driver layer reads them; read below O(root) when not given.
    type: list
    elements: dict
  state:
    description: The driver state (secure_boot, nvswitch, nvlink5, nouveau_loaded), read below O(root) when not given.
    type: dict
  package_files:
    description: Package files on the node (air-gapped installs); their names and versions are what is offered.
  next_kernel:
    description:
      - What the plan's C(next_kernel) says to do when the kernel the next boot runs (the boot loader's default entry)
        has no NVIDIA modules of the declared version and flavour - V(ensure) (install the precompiled package for it,
        or build them with DKMS), V(refuse) (a reboot is refused, naming the kernel and the fix), V(ignore) (not
        checked). This module only reads and reports; the role acts before any reboot it makes.
    type: str
    choices: [ensure, refuse, ignore]
    default: ensure
  kernel_hold:
    description: Read the installed kernel packages that O(kernel_hold) holds (C(plan.kernel_hold)).
    type: bool
    default: false
  modinfo:
    description: The modinfo command as an argument list (C(modinfo -k <kernel> -F version nvidia)); from PATH when not set.
    type: list
    elements: str
  dkms:
    description: The dkms command as an argument list (C(dkms status)); from PATH when not set (none - no DKMS).
    type: list
    elements: str
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.package_repository
attributes:
  check_mode:
    support: full
    details: The module changes nothing; it runs the same way in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - C(dpkg-query), C(apt-get), C(apt-cache), C(dpkg-deb) (Debian family); C(rpm), C(dnf) (RHEL family).
seealso:
  - module: gpuops.nvidia.package_plan
  - name: NVIDIA Driver Installation Guide
    description: NVIDIA's packages, repositories and kernel module flavours for data-center drivers.
    link: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: What installing driver 580.95.05 (open modules) from NVIDIA's CUDA repository would change
  gpuops.nvidia.driver_plan:
    manager: apt
    declaration: {version: 580.95.05}
  register: driver_plan
"""

RETURN = r"""
plan:
  description:
    - The plan - C(version), C(branch), C(flavour), C(module_source) and why, C(stream) (dnf), C(packages) (per
      package C(name), C(version), C(group), C(installed), C(action)), C(extra) (unpinned - kernel headers, nvlsm),
      C(remove) (apt - the installed packages of another branch that the install removes in its transaction),
      C(fabric_manager), C(persistenced), C(changes), C(notes), C(reboot_needed) and C(reboot_reason), C(refusals).
    - C(next_kernel) - the running kernel (C(running)), the kernel the next boot runs (C(next), null where the boot
      loader does not say; C(next_source) says how it was read or why not), C(next_modules) (C(present), C(version),
      C(flavour), C(how), C(detail)), C(dkms) (C(dkms status), parsed), and what O(next_kernel) does (C(action) none,
      install, build, refuse or unknown; C(packages), C(dkms), C(msg)).
    - C(kernel_hold) (with O(kernel_hold)) - the installed kernel packages (C(name), C(version), C(held)).
  returned: always
  type: dict
installed:
  description: What the package database says of each package.
  returned: always
  type: dict
available:
  description: Per package, the versions the source offers (null when the source was not read).
  returned: always
  type: dict
files:
  description: Per package, the package file that holds it (O(package_files)).
  returned: always
  type: dict
kind:
  description: On failure, what failed - V(input), V(read), V(database), V(signature), V(unreachable), V(other), or a
    refusal's kind (V(flavour), V(secure_boot), V(fabric_manager), V(downgrade), V(precompiled), V(version),
    V(source)).
  returned: on failure
  type: str
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_kernel, _driver_plan, _driver_state
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _package_repo
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError, check_regular_file
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    NOTHING_CHANGED, ModuleRun, nothing_changed, run_module)


# A driver package is tens to a few hundred MiB (the DKMS source, the userspace libraries); larger is not a package.


def read_devices(root):
    """The driver layer's PCI reader (plugins/module_utils/gpu/_pci.py)."""
    return _pci.read_nvidia_devices(root=root)


def read_state(root):
    return _driver_state.read(root=root)


def read_kernel(root):
    with open(os.path.join(root, "proc/sys/kernel/osrelease")) as handle:
        return handle.read().strip()


class DriverPlan(ModuleRun):
    """validate the declaration -> read (the node, what its sources offer, what is installed) -> plan (_driver_plan;
    a refusal fails the run). Nothing is ever written: the plan is reported with changed=false."""

    argument_spec = dict(
        manager=dict(type="str", choices=list(_packages.MANAGERS), required=True),
        declaration=dict(type="dict", required=True),
        kernel=dict(type="str", default=""),
        distribution_major=dict(type="str", default=""),
        root=dict(type="path", default="/"),
        devices=dict(type="list", elements="dict"),
        state=dict(type="dict"),
        repository=dict(type="dict", options=_package_repo.REPOSITORY_OPTIONS),
        package_files=dict(type="list", elements="path", default=[]),
        next_kernel=dict(type="str", choices=list(_driver_kernel.SETTINGS), default="ensure"),
        kernel_hold=dict(type="bool", default=False),
        modinfo=dict(type="list", elements="str"),
        dkms=dict(type="list", elements="str"),
    )

    def __init__(self, module):
        super(DriverPlan, self).__init__(module)
        self.p = module.params
        self.result.update(available=None, files={}, installed={})

    def fail_kind(self, kind, msg, **extra):
        """Fail naming what failed (the ``kind`` the role's messages branch on)."""
        self.fail(msg, kind=kind, **extra)

    def node(self):
        p = self.p
        devices, state = p["devices"], p["state"]
        try:
            if devices is None:
                devices = read_devices(p["root"])
            if state is None:
                state = read_state(p["root"])
            kernel = p["kernel"] or (state or {}).get("kernel") or read_kernel(p["root"])
        except (IOError, OSError, ValueError, _pci.PciReadError, _driver_state.DriverStateError) as exc:
            self.fail_kind("read", "the node's devices or driver state cannot be read below root %s: %s"
                           % (p["root"], exc))
        return {"manager": p["manager"], "kernel": kernel, "distribution_major": p["distribution_major"]}, devices, state

    def offered(self, decl, node):
        p = self.p
        names = _driver_plan.probe_names(decl, node)
        if p["package_files"]:
            tool = self.module.get_bin_path("dpkg-deb" if p["manager"] == "apt" else "rpm", required=True)
            available, errors = {}, []
            for path in p["package_files"]:
                try:
                    # dpkg-deb and rpm wait for ever on a FIFO and read a device without end: regular files only
                    check_regular_file(path, "package_files", limit=_package_repo.MAX_PACKAGE_BYTES)
                except InputFileError as exc:
                    errors.append(str(exc))
                    continue
                rc, out, err = self.module.run_command(_package_repo.file_command(p["manager"], path, tool, tool),
                                                       environ_update={"LANG": "C"})
                found = _package_repo.parse_file(p["manager"], out) if rc == 0 else None
                if found is None:
                    errors.append("%s is not a package (%s)" % (path, (err or out).strip()))
                    continue
                available.setdefault(found[0], []).append(found[1])
                self.result["files"][found[0]] = path
            if errors:
                self.fail_kind("files", nothing_changed("package_files: %s" % "; ".join(errors)))
            return available
        if p["repository"] is not None:
            repo = p["repository"]
            try:
                return _package_repo.probe(self.module, p["manager"], repo["sources"], repo["key"], repo["key_path"],
                                           names)
            except _package_repo.RepositoryError as exc:
                what = {"signature": "its signature does not verify with the given key (or it is not signed): give "
                                     "the key that signs it",
                        "unreachable": "it does not answer: check the URL and the node's network or proxy",
                        "other": "the package manager refused it"}[exc.kind]
                self.fail_kind(exc.kind, "the repository cannot be used, %s; %s. %s said: %s"
                               % (what, NOTHING_CHANGED, "apt-get" if p["manager"] == "apt" else "dnf", exc),
                               output=exc.output)
        if decl.get("package_source") == "distribution" and p["manager"] == "apt":
            # the node's own, configured sources (the Ubuntu archive), as its apt lists have them
            rc, out, err = self.module.run_command([self.module.get_bin_path("apt-cache", required=True), "madison"]
                                                   + names, environ_update={"LANG": "C", "LC_ALL": "C"})
            if rc != 0:
                self.fail_kind("other", "apt-cache madison exited %d: %s" % (rc, err.strip()))
            return _package_repo.parse_madison(out, names)
        return None

    def installed_driver(self, state):
        """The newest driver version on the node whatever its packages' names: the loaded module's, and on apt any
        branch's libnvidia-compute package (dpkg-query takes a name pattern)."""
        found = []
        loaded = (state or {}).get("loaded") or {}
        if loaded.get("version"):
            found.append(loaded["version"])
        if self.p["manager"] == "apt":
            binary = self.module.get_bin_path("dpkg-query")
            if binary:
                rc, out, err = self.module.run_command([binary, "-W", "-f", "${Package}\t${Version}\t${Status}\n",
                                                        "libnvidia-compute-*"])
                for line in out.splitlines():
                    fields = line.split("\t")
                    if len(fields) == 3 and fields[2].endswith(" installed"):
                        found.append(_driver_plan.upstream(fields[1]))
        found = [v for v in found if _driver_plan.VERSION_RE.match(v)]
        if not found:
            return None
        self.result["installed_driver"] = max(found, key=_driver_plan.version_key)
        return self.result["installed_driver"]

    def validate(self):
        try:
            _driver_plan.validate(self.p["declaration"])
        except _driver_plan.DriverPlanError as exc:
            self.fail_kind("input", "invalid driver declaration, %s: %s" % (NOTHING_CHANGED, exc))
        return []

    def read(self):
        decl = self.p["declaration"]
        node, devices, state = self.node()
        available = self.offered(decl, node)
        self.result["available"] = available
        installed_driver = self.installed_driver(state)
        # the declared packages, and another branch's that the plan removes where they are installed
        candidates = _driver_plan.probe_names(decl, node) + _driver_plan.replaced_names(decl, node, installed_driver)
        try:
            installed = _packages.read_installed(self.module, self.p["manager"], candidates)
        except _packages.PackageError as exc:
            self.fail_kind("database", "the package database cannot be read: %s" % exc)
        self.result["installed"] = installed
        return dict(node=node, devices=devices, state=state, available=available, installed=installed,
                    installed_driver=installed_driver)

    def plan(self, current):
        """The driver's plan into the result; returns None: this module changes nothing."""
        try:
            plan = _driver_plan.plan(self.p["declaration"], current["node"], current["devices"], current["state"],
                                     installed=current["installed"], available=current["available"],
                                     installed_driver=current["installed_driver"])
        except _driver_plan.DriverPlanError as exc:
            self.fail_kind("input", "the driver cannot be planned for this node, %s: %s" % (NOTHING_CHANGED, exc))
        plan["next_kernel"] = self.next_kernel(current, plan)
        if self.p["kernel_hold"]:
            plan["kernel_hold"] = self.kernel_packages()
        self.result["plan"] = plan
        if plan["refusals"]:
            self.fail_kind(plan["refusals"][0]["kind"], _driver_plan.refusal_text(plan))
        return None

    def command(self, argv):
        try:
            return self.module.run_command(argv, environ_update={"LANG": "C", "LC_ALL": "C"}, handle_exceptions=False)
        except (IOError, OSError) as exc:
            return 127, "", str(exc)

    def tool(self, name):
        """The tool's argv: as given; from PATH on a real root only (a lab root is never read with this host's tools)."""
        given = self.p.get(name)
        if given:
            return list(given)
        if self.p["root"] not in ("/", ""):
            return None
        found = self.module.get_bin_path(name)
        return [found] if found else None

    def next_kernel(self, current, plan):
        """The next boot's kernel and its NVIDIA modules (_driver_kernel), and what O(next_kernel) does."""
        decl = _driver_plan.validate(self.p["declaration"])
        node = current["node"]
        pin = {"version": decl["version"] or plan["version"], "branch": decl["branch"], "flavour": decl["flavour"]}
        names = {}

        def precompiled(kernel):
            if kernel not in names:
                names[kernel] = _driver_plan.names(decl, dict(node, kernel=kernel), "precompiled")["kernel"]
            return names[kernel]

        def installed(wanted):
            try:
                found = _packages.read_installed(self.module, node["manager"], wanted)
            except _packages.PackageError:
                return {}
            return dict((n, (found.get(n) or {}).get("version")) for n in wanted)
        grubby = self.module.get_bin_path("grubby")
        running = (current["state"] or {}).get("kernel") or node["kernel"]
        try:
            readings = _driver_kernel.read(
                self.command, self.p["root"], running, pin,
                {"grubby": grubby, "modinfo": self.tool("modinfo"), "dkms": self.tool("dkms")}, precompiled, installed)
            decision = _driver_kernel.plan(readings, self.p["next_kernel"], plan["module_source"],
                                           precompiled(readings["next"]) if readings["next"] else [], pin["version"])
        except _driver_kernel.KernelReadError as exc:
            readings = {"running": running, "next": None, "next_source": str(exc)}
            decision = _driver_kernel.plan(readings, self.p["next_kernel"], plan["module_source"], [], pin["version"])
        return dict(readings, **decision)

    def kernel_packages(self):
        """The installed kernel packages a kernel hold holds (_driver_kernel)."""
        if self.p["manager"] == "apt":
            binary = self.module.get_bin_path("dpkg-query", required=True)
            argv = [binary, "-W", "-f", "${Package}\t${Version}\t${Status}\n"] + list(_driver_kernel.APT_KERNEL_PATTERNS)
            rc, out, err = self.command(argv)
            return _driver_kernel.apt_kernel_packages(out)
        binary = self.module.get_bin_path("rpm", required=True)
        argv = [binary, "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"] + list(_driver_kernel.DNF_KERNEL_PACKAGES)
        rc, out, err = self.command(argv)
        return _driver_kernel.rpm_kernel_packages(out)


def main():
    run_module(DriverPlan)


if __name__ == "__main__":
    main()
