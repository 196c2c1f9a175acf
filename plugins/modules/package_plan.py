#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: package_plan
short_description: Plan packages pinned at one version, and check their repository before it is configured
version_added: 0.2.0
description:
  - The read and plan of the gpuops.nvidia.container_toolkit role; changes nothing, in any mode.
  - Reads the installed version of each package from the node's package database (C(dpkg-query) on the Debian family,
    C(rpm) on the RHEL family) and says per package what the pin means - V(install), V(upgrade), V(downgrade) or
    V(none). A downgrade is refused unless O(allow_downgrade).
  - With O(repository), and where a package has to change or the repository definition or key on the node differ
    from the given ones, asks the node's package manager whether the repository works before anything is written -
    C(apt-get update) and C(apt-cache madison) (or C(dnf makecache) and C(dnf list --showduplicates)) run on a copy of
    the definition and key in a private scratch directory, with their own lists and cache there, so the node's
    sources, lists and cache are neither read nor changed. Refused, with what to fix - a repository that does not
    answer, one whose signature the key does not verify (or that is not signed), and a pinned version it does not
    have (the versions it has are listed).
  - With O(package_files) (air-gapped sites), reads each file's package name and version (C(dpkg-deb --show),
    C(rpm -qp)) and refuses files that are not exactly the declared packages at the pinned version.
  - Package manager commands run with C(LANG=C) and take the task's environment (C(APT_CONFIG), C(DPKG_ROOT) or a
    proxy), as C(ansible.builtin.apt) and C(ansible.builtin.dnf) do.
options:
  packages:
    description: The packages, all at O(version).
    type: list
    elements: str
    required: true
  version:
    description: The pinned version as the package manager writes it (C(1.20.0-1); RPM C(version-release)).
    type: str
    required: true
  allow_downgrade:
    description: Plan a downgrade where an installed package is newer than O(version) (otherwise refused).
    type: bool
    default: false
  repository:
    description: The repository the packages come from, as it will be configured.
    type: dict
    suboptions:
      sources:
        description: The text of the apt C(.list) file or the dnf C(.repo) file.
        type: str
        required: true
      sources_path:
        description: Where that file will be written (compared with O(repository.sources)).
        type: path
        required: true
      key:
        description: The repository's signing key, ASCII-armored.
        type: str
        required: true
      key_path:
        description:
          - Where the key will be written; where O(repository.sources) names this path (C(signed-by=), C(gpgkey=file://)),
            the check uses its scratch copy.
        type: path
        required: true
      check:
        description:
          - V(auto) - check the repository only when a package changes or the definition or key on the node differ.
          - V(always) - on every run. V(never) - never (the plan then trusts the pin).
        type: str
        choices: [auto, always, never]
        default: auto
  package_files:
    description: Package files on the node, one per package (air-gapped installs). Missing files are reported, not read.
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
  - C(dpkg-query), C(apt-get), C(apt-cache) and C(dpkg-deb) on the Debian family; C(rpm) and C(dnf) on the RHEL family.
seealso:
  - module: gpuops.nvidia.gpu_node_plan
  - name: Installing the NVIDIA Container Toolkit
    description: NVIDIA's install guide - the repositories, keys and packages the container_toolkit role configures.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: What pinning the NVIDIA Container Toolkit at 1.20.0-1 would change (checks NVIDIA's repository first)
  gpuops.nvidia.package_plan:
    manager: apt
    packages: [nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools, libnvidia-container1]
    version: 1.20.0-1
    repository:
      sources: >-
        deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.asc]
        https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /
      sources_path: /etc/apt/sources.list.d/nvidia-container-toolkit.list
      key: "{{ lookup('ansible.builtin.file', 'nvidia-container-toolkit.asc') }}"
      key_path: /usr/share/keyrings/nvidia-container-toolkit-keyring.asc
  register: toolkit_plan
"""

RETURN = r"""
packages:
  description: Per package, in the order given - C(name), C(installed) (null when not installed), C(version), C(action).
  returned: always
  type: list
  elements: dict
  sample: [{name: nvidia-container-toolkit, installed: 1.18.1-1, version: 1.20.0-1, action: upgrade}]
changes:
  description: One line per package whose C(action) is not V(none).
  returned: always
  type: list
  elements: str
  sample: ["nvidia-container-toolkit: 1.18.1-1 -> 1.20.0-1 (upgrade)"]
installed:
  description: What the package database says of each package (C(version), C(held), C(status)).
  returned: always
  type: dict
repository:
  description:
    - C(checked) (whether the repository was asked), C(differs) (the definition or key on the node differ from the
      given ones) and C(available) (per package, the versions the repository has).
  returned: when O(repository) is given
  type: dict
files:
  description: Per package, the file of O(package_files) that holds it.
  returned: when O(package_files) is given
  type: dict
kind:
  description:
    - On failure, what failed - V(downgrade), V(version), V(signature), V(unreachable), V(files), V(database) or
      V(other).
  returned: on failure
  type: str
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _package_repo
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError, check_regular_file
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    NOTHING_CHANGED, ModuleRun, invalid_input, nothing_changed, run_module)


class PackagePlan(ModuleRun):
    """validate -> read -> plan (-> check the repository); nothing is ever written, so the plan is reported with
    changed=false and the role acts on it."""

    argument_spec = dict(
        manager=dict(type="str", choices=list(_packages.MANAGERS), required=True),
        packages=dict(type="list", elements="str", required=True),
        version=dict(type="str", required=True),
        allow_downgrade=dict(type="bool", default=False),
        repository=dict(type="dict", options=dict(
            _package_repo.REPOSITORY_OPTIONS,
            sources_path=dict(type="path", required=True),
            check=dict(type="str", choices=["auto", "always", "never"], default="auto"),
        )),
        package_files=dict(type="list", elements="path", default=[]),
    )

    def __init__(self, module):
        super(PackagePlan, self).__init__(module)
        self.p = module.params

    def fail_kind(self, kind, msg, **extra):
        """Fail naming what failed (the ``kind`` the role's messages branch on)."""
        self.fail(msg, kind=kind, **extra)

    def refuse_input(self, errors):
        self.fail_kind("input", invalid_input(errors))

    def validate(self):
        bad = [n for n in self.p["packages"] if not _packages.NAME_RE.match(n)]
        errors = []
        if not self.p["packages"]:
            errors.append("packages: give at least one package")
        if bad:
            errors.append("packages: %s not package names (a-z, 0-9, +.-)" % ", ".join(repr(n) for n in bad))
        if not _packages.VERSION_RE.match(self.p["version"]):
            errors.append("version: %r is not a package version (starting with a digit; A-Z, a-z, 0-9, .+~^_:-), "
                          "for example 1.20.0-1" % self.p["version"])
        repo = self.p["repository"]
        if repo is not None and "-----BEGIN PGP PUBLIC KEY BLOCK-----" not in repo["key"]:
            errors.append("repository.key: not an ASCII-armored OpenPGP public key (-----BEGIN PGP PUBLIC KEY "
                          "BLOCK-----)")
        for path in self.p["package_files"]:
            if not os.path.isabs(path):
                errors.append("package_files: %r is not an absolute path" % path)
        return errors

    def read(self):
        try:
            self.installed = _packages.read_installed(self.module, self.p["manager"], self.p["packages"])
        except _packages.PackageError as exc:
            self.fail_kind("database", "the package database cannot be read: %s" % exc)
        self.result["installed"] = self.installed

    def plan(self, current):
        """The packages' plan and the checks of its sources; returns None: this module changes nothing."""
        todo = self.package_plan()
        if self.p["repository"] is not None:
            self.check_repository(todo)
        if self.p["package_files"]:
            self.check_files()
        return None

    def package_plan(self):
        entries = _packages.plan(self.p["manager"], self.p["packages"], self.p["version"], self.installed)
        self.result["packages"] = entries
        self.result["changes"] = ["%s: %s -> %s (%s)" % (e["name"], e["installed"] or "not installed", e["version"],
                                                         e["action"]) for e in entries if e["action"] != "none"]
        down = [e for e in entries if e["action"] == "downgrade"]
        if down and not self.p["allow_downgrade"]:
            self.fail_kind("downgrade", nothing_changed(
                           "refusing to downgrade %s: installed %s is newer than the pinned %s. Pin the "
                           "installed version, or allow the downgrade (allow_downgrade; the role's "
                           "container_toolkit_allow_downgrade=true)"
                           % (", ".join(e["name"] for e in down), ", ".join(sorted(set(e["installed"] for e in down))),
                              self.p["version"])))
        return [e for e in entries if e["action"] != "none"]

    def check_repository(self, todo):
        repo = self.p["repository"]
        differs = _differs(repo["sources_path"], repo["sources"]) or _differs(repo["key_path"], repo["key"])
        out = self.result["repository"] = {"checked": False, "differs": differs, "available": {}}
        if repo["check"] == "never" or (repo["check"] == "auto" and not todo and not differs):
            return
        try:
            available = _package_repo.probe(self.module, self.p["manager"], repo["sources"], repo["key"],
                                            repo["key_path"], self.p["packages"])
        except _package_repo.RepositoryError as exc:
            what = {"signature": "its signature does not verify with the given key (or it is not signed): give "
                                 "the key that signs it",
                    "unreachable": "it does not answer: check the URL and the node's network or proxy",
                    "other": "the package manager refused it"}[exc.kind]
            self.fail_kind(exc.kind, "the repository cannot be used, %s; %s. %s said: %s"
                           % (what, NOTHING_CHANGED, "apt-get" if self.p["manager"] == "apt" else "dnf", exc),
                           output=exc.output)
        out.update(checked=True, available=available)
        missing = [n for n in self.p["packages"]
                   if not any(_packages.compare(self.p["manager"], v, self.p["version"]) == 0 for v in available[n])]
        if missing:
            have = sorted(set(v for n in missing for v in available[n]),
                          key=_sort_key(self.p["manager"]), reverse=True)
            self.fail_kind("version", nothing_changed("the repository has no %s at version %s; it has %s. Pin one of "
                                                      "those" % (", ".join(missing), self.p["version"],
                                                                 ", ".join(have) or "none of them")))

    def check_files(self):
        manager = self.p["manager"]
        tool = self.module.get_bin_path("dpkg-deb" if manager == "apt" else "rpm", required=True)
        files, errors = {}, []
        for path in self.p["package_files"]:
            if not os.path.exists(path):
                continue        # check mode before the copy: the declared checksum vouches for the file
            try:
                # dpkg-deb and rpm wait for ever on a FIFO and read a device without end: regular files only
                check_regular_file(path, "package_files", limit=_package_repo.MAX_PACKAGE_BYTES)
            except InputFileError as exc:
                errors.append(str(exc))
                continue
            rc, out, err = self.module.run_command(
                _package_repo.file_command(manager, path, dpkg_deb=tool, rpm=tool), environ_update={"LANG": "C"})
            found = _package_repo.parse_file(manager, out) if rc == 0 else None
            if found is None:
                errors.append("%s is not a %s package (%s)" % (path, "deb" if manager == "apt" else "rpm",
                                                               (err or out).strip()))
            elif found[0] not in self.p["packages"]:
                errors.append("%s holds %s, which is not one of %s" % (path, found[0], ", ".join(self.p["packages"])))
            elif _packages.compare(manager, found[1], self.p["version"]) != 0:
                errors.append("%s holds %s %s, not the pinned %s" % (path, found[0], found[1], self.p["version"]))
            elif found[0] in files:
                errors.append("%s and %s both hold %s" % (files[found[0]], path, found[0]))
            else:
                files[found[0]] = path
        self.result["files"] = files
        if errors:
            self.fail_kind("files", nothing_changed("package_files: not the pinned packages: %s" % "; ".join(errors)))


def _differs(path, text):
    try:
        with open(path, "rb") as handle:
            return handle.read() != text.encode("utf-8")
    except (IOError, OSError):
        return True


def _sort_key(manager):
    import functools
    return functools.cmp_to_key(lambda a, b: _packages.compare(manager, a, b))


def main():
    run_module(PackagePlan)


if __name__ == "__main__":
    main()
