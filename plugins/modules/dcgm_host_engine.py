#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dcgm_host_engine
short_description: Install NVIDIA DCGM at a pinned version and keep its host engine service enabled and running
version_added: 0.3.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Installs NVIDIA's Data Center GPU Manager (DCGM 4) - the packages C(datacenter-gpu-manager-4-core) and
    C(datacenter-gpu-manager-4-cuda<N>) for the CUDA major O(cuda) (and NVIDIA's closed parts with O(proprietary)) - at
    exactly O(version), in one transaction of the node's package manager, from the repository the node has configured
    (NVIDIA's CUDA repository, as the gpuops.nvidia.driver role configures it, or a mirror) or from package files
    already on the node (O(package_files), air-gapped); then enables and starts the host engine's unit
    (C(nvidia-dcgm.service), which runs C(nv-hostengine); its default port is 5555).
  - One host engine per node - the gpu_node role's health gate and burn-in (C(dcgmi)) and a DCGM exporter pointed at
    the node share it (docs/dcgm.md).
  - On apt the packages are then held at O(version), as the driver's and the toolkit's are - an apt preferences pin
    (C(nvidia-dcgm-gpuops) in apt's preferences directory, C(/etc/apt/preferences.d), priority 990) so that
    C(apt-get upgrade) and unattended-upgrades do not move them, and a dpkg hold (C(apt-mark showhold) lists them).
    dnf holds nothing (its versionlock plugin is not managed).
  - With O(state=absent), stops and disables the service, removes the packages (held ones too) and the pin.
  - Reads first (the package database, C(systemctl is-enabled) and C(is-active)), plans (a downgrade is refused unless
    O(allow_downgrade)), then changes only what differs; a second run changes nothing.
options:
  state:
    description: Whether DCGM is installed and its host engine running (V(present)) or removed (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  version:
    description:
      - The packages' version, as the node's package manager writes it (apt - C(1:4.5.2-1), with NVIDIA's epoch 1).
    type: str
    required: true
  cuda:
    description: The CUDA major of DCGM's CUDA part - V(13) needs a driver of branch 580 or later, V(12) runs on older ones too.
    type: int
    choices: [12, 13]
    default: 12
  proprietary:
    description: Install NVIDIA's closed parts too (C(datacenter-gpu-manager-4-proprietary) and C(-proprietary-cuda<N>)).
    type: bool
    default: false
  package_manager:
    description: V(apt), V(dnf), or V(auto) (apt where the node has dpkg-query and apt-get, dnf where it has rpm and dnf).
    type: str
    choices: [apt, dnf, auto]
    default: auto
  package_files:
    description:
      - Absolute paths of package files on the node to install from instead of the configured repository (an
        air-gapped node; the gpu_node role copies them there first). Each file is read before anything is installed
        (C(dpkg-deb -f) or C(rpm -qp)) - one file per package, each at O(version), no other package - or nothing is.
    type: list
    elements: str
    default: []
  update_cache:
    description: Refresh the package lists before an install from the repository (C(apt-get update); dnf refreshes itself).
    type: bool
    default: true
  allow_downgrade:
    description: Allow installing a version older than the one installed.
    type: bool
    default: false
  hold:
    description:
      - On apt, keep the packages at O(version) - the preferences pin and the dpkg hold - so that an upgrade of the node
        does not move them. V(false) leaves the pin and the holds as they are. Ignored on dnf.
    type: bool
    default: true
  service:
    description: The host engine's systemd unit.
    type: str
    default: nvidia-dcgm.service
  systemctl:
    description: The systemctl command as an argument list (the lab passes its stand-in). Found in PATH when not set.
    type: list
    elements: str
  lock_timeout:
    description: Seconds to wait for the node lock that gpuops.nvidia modules which change the node hold (default 300).
    type: int
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reads the packages and the service and reports what would change; installs, starts and writes nothing.
  diff_mode:
    support: full
  idempotent:
    support: full
    details: Once the packages are at the version and the service is enabled and running, a second run changes nothing.
notes:
  - The host engine holds the GPUs' device files (C(/dev/nvidia*)) while it runs; the driver's unload stops
    C(nvidia-dcgm.service) first and starts it again after (gpuops.nvidia.driver_modules' table of daemons).
  - Under NVIDIA's GPU Operator, the operator runs its own DCGM; the gpu_node role does not run this module there.
"""

EXAMPLES = r"""
- name: DCGM 4 for CUDA 12 from NVIDIA's CUDA repository, its host engine running
  gpuops.nvidia.dcgm_host_engine:
    version: "1:4.5.2-1"

- name: Air-gapped - from package files copied to the node
  gpuops.nvidia.dcgm_host_engine:
    version: "1:4.5.2-1"
    package_files:
      - /var/cache/gpuops/dcgm/datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb
      - /var/cache/gpuops/dcgm/datacenter-gpu-manager-4-cuda12_4.5.2-1_amd64.deb
"""

RETURN = r"""
packages:
  description: Each package - C(name), C(installed) (before this run), C(version) (declared), C(action) (C(none),
    C(install), C(upgrade), C(downgrade), C(remove)).
  returned: always
  type: list
  elements: dict
  sample: [{name: datacenter-gpu-manager-4-core, installed: null, version: "1:4.5.2-1", action: install}]
hold:
  description: The packages held by this run (or that would be, in check mode) - dpkg selection C(hold).
  returned: always
  type: list
  elements: str
  sample: [datacenter-gpu-manager-4-core, datacenter-gpu-manager-4-cuda12]
pin:
  description: The apt preferences pin's path and whether this run wrote it (or would) - C(path) (null on dnf),
    C(changed).
  returned: always
  type: dict
  sample: {path: /etc/apt/preferences.d/nvidia-dcgm-gpuops, changed: true}
service:
  description: The systemctl verbs run on the unit (or that would be, in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [daemon-reload, enable, start]
reasons:
  description: Why something changes (or would); empty where the node is as declared.
  returned: always
  type: list
  elements: str
  sample: ["package datacenter-gpu-manager-4-core is not installed, declared 1:4.5.2-1"]
package_files_unread:
  description: In check mode, the package files not on the node yet (not read; a real run reads them before installing).
  returned: in check mode, where some of O(package_files) are not on the node
  type: list
  elements: str
host_engine:
  description: The unit after the run (in check mode, as read) - C(unit), C(enabled), C(active), C(port) (the
    host engine's default port).
  returned: always
  type: dict
  sample: {unit: nvidia-dcgm.service, enabled: true, active: true, port: 5555}
"""

import os
import tempfile

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Failure, ModuleRun, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._dcgm_node import (
    find_systemctl, read_files, read_node)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_plan, _packages


class DcgmHostEngine(ModuleRun):
    """(node lock) read the packages and the unit -> plan -> one install transaction -> systemctl -> read back."""

    argument_spec = dict(
        state=dict(type="str", choices=list(_dcgm_plan.STATES), default="present"),
        version=dict(type="str", required=True),
        cuda=dict(type="int", choices=list(_dcgm_plan.CUDA_MAJORS), default=12),
        proprietary=dict(type="bool", default=False),
        package_manager=dict(type="str", choices=["apt", "dnf", "auto"], default="auto"),
        package_files=dict(type="list", elements="str", default=[]),
        update_cache=dict(type="bool", default=True),
        allow_downgrade=dict(type="bool", default=False),
        hold=dict(type="bool", default=True),
        service=dict(type="str", default=_dcgm_plan.SERVICE),
        systemctl=dict(type="list", elements="str"),
        lock_timeout=dict(type="int"),
    )
    refusals = (_dcgm_plan.DcgmPlanError, _packages.PackageError)

    def validate(self):
        return _dcgm_plan.validate(self.params)

    def lock(self):
        return module_lock(self.module, "dcgm_host_engine")

    def read(self):
        self.systemctl = find_systemctl(self.module, self.params["systemctl"])
        if self.systemctl is None:
            raise Failure("systemctl not found: the host engine runs as the systemd unit %s; give systemctl as an "
                          "argument list (systemctl: [/usr/bin/systemctl]); nothing changed" % self.params["service"],
                          changed=False)
        return read_node(self.module, self.params, self.systemctl)

    def plan(self, current):
        todo = self._plan(current, self.params["allow_downgrade"])
        self.result.update(packages=todo["packages"], service=todo["service"], hold=todo["hold"],
                           pin={"path": current["pin_path"], "changed": todo["pin"] is not None},
                           reasons=todo["reasons"], host_engine=self._engine(current["unit"]))
        present = self.params["state"] == "present"
        held = _dcgm_plan.holds(current["manager"], self.params["hold"])
        after_pin = current["pin"] if todo["pin"] is None else (todo["pin"] or None)
        self.set_diff(_text(current["names"], dict((n, (current["installed"][n] or {}).get("version"))
                                                   for n in current["names"]), current["unit"],
                            dict((n, (current["installed"][n] or {}).get("held")) for n in current["names"]),
                            current["pin"] if current["pin_path"] else False),
                      _text(current["names"], dict((p["name"], p["version"] if present else None)
                                                   for p in todo["packages"]),
                            {"enabled": present, "active": present},
                            dict((n, present and (held or (current["installed"][n] or {}).get("held")))
                                 for n in current["names"]), after_pin if current["pin_path"] else False),
                      header="DCGM (%s)" % self.params["service"])
        if not todo["reasons"]:
            return None
        installs = [p for p in todo["packages"] if p["action"] not in ("none", "remove")]
        files = self.params["package_files"]
        if installs and files and self.module.check_mode and not all(os.path.exists(f) for f in files):
            # check mode: the gpu_node role has not copied them yet (its copy reports the change); read at the install
            self.result["package_files_unread"] = [f for f in files if not os.path.exists(f)]
        elif installs and files:
            problems = _dcgm_plan.files_problems(current["manager"], current["names"], self.params["version"],
                                                 read_files(self.module, current["manager"], files))
            if problems:
                raise _dcgm_plan.DcgmPlanError("package_files cannot install DCGM %s: %s"
                                               % (self.params["version"], "; ".join(problems)))
        return todo

    def _plan(self, current, allow_downgrade):
        return _dcgm_plan.plan(self.params["state"], current["manager"], current["names"], self.params["version"],
                               current["installed"], current["unit"], allow_downgrade, hold=self.params["hold"],
                               pin=current["pin"])

    def apply(self, current, changes):
        manager, names = current["manager"], current["names"]
        packages = [p for p in changes["packages"] if p["action"] != "none"]
        if self.params["state"] == "absent":
            self._systemctl(changes["service"])
            if packages:
                self._run(_dcgm_plan.remove_command(manager, [p["name"] for p in packages]), "remove DCGM's packages",
                          before=current)
            if changes["pin"] == "":
                os.remove(current["pin_path"])
        else:
            if packages:
                if manager == "apt" and self.params["update_cache"] and not self.params["package_files"]:
                    self._run(["apt-get", "update", "-q"], "refresh the package lists", before=current)
                self._run(_dcgm_plan.install_command(manager, names, self.params["version"],
                                                     self.params["package_files"], self.params["allow_downgrade"]),
                          "install DCGM %s" % self.params["version"], before=current)
            # held after the install, as the driver and the toolkit are: a failed install leaves the previous pin
            if changes["pin"]:
                self._write(current["pin_path"], changes["pin"])
            if changes["hold"]:
                self._run(["dpkg", "--set-selections"], "hold DCGM's packages",
                          data="".join("%s hold\n" % name for name in changes["hold"]))
            self._systemctl(changes["service"])
        after = read_node(self.module, self.params, self.systemctl)
        self.result["host_engine"] = self._engine(after["unit"])
        left = self._plan(after, True)["reasons"]
        if left:
            raise Failure("DCGM was changed but is not as declared after the run: %s" % "; ".join(left), changed=True)

    def _engine(self, unit):
        return {"unit": self.params["service"], "enabled": unit["enabled"], "active": unit["active"],
                "port": _dcgm_plan.PORT}

    def _write(self, path, text):
        """Write ``text`` to ``path`` atomically (mode 0644), through a temporary file in the same directory."""
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o755)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".%s." % os.path.basename(path))
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        self.module.atomic_move(tmp, path)

    def _run(self, argv, what, data=None, before=None):
        """Run one command of the apply; where it fails, ``changed`` says whether DCGM's packages differ from
        ``before`` (the node as read; apt-get and dnf resolve before they change anything: a version the repository
        lacks changes nothing), or True where there is no ``before`` (a later command: the packages changed already)."""
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        rc, out, err = self.module.run_command(argv, environ_update=env, data=data, binary_data=True)
        if rc != 0:
            changed = True
            if before is not None:
                try:
                    now = read_node(self.module, self.params, self.systemctl)["installed"]
                    changed = any((now[n] or {}).get("version") != (before["installed"][n] or {}).get("version")
                                  for n in before["names"])
                except (_dcgm_plan.DcgmPlanError, _packages.PackageError):
                    changed = True
            raise Failure("could not %s: %s exited %d: %s%s" % (
                what, " ".join(argv[:2]), rc, (err or out).strip()[-2000:],
                "" if changed else "; DCGM's packages are as they were"), changed=changed, rc=rc, stdout=out,
                stderr=err)

    def _systemctl(self, verbs):
        for verb in verbs:
            argv = self.systemctl + ([verb] if verb == "daemon-reload" else [verb, self.params["service"]])
            rc, out, err = self.module.run_command(argv)
            if rc != 0:
                raise Failure("systemctl %s %s failed (rc %d): %s; check the host engine's log: journalctl -u %s"
                              % (verb, self.params["service"], rc, (err or out).strip() or "no output",
                                 self.params["service"]), changed=True)


def _text(names, versions, unit, held, pin):
    """The diff's text: each package's version (held or not), the engine, and on apt the pin (False: not apt)."""
    lines = ["%s %s%s" % (n, versions.get(n) or "(not installed)", " (held)" if versions.get(n) and held.get(n) else "")
             for n in names]
    lines.append("host engine: %s, %s" % ("enabled" if unit["enabled"] else "disabled",
                                          "running" if unit["active"] else "stopped"))
    if pin is not False:        # (apt only)
        lines.append("apt preferences pin: %s" % ("none" if pin is None else " / ".join(
            line for line in pin.splitlines() if line.startswith(("Package:", "Pin:")))))
    return "\n".join(lines) + "\n"


def main():
    run_module(DcgmHostEngine)


if __name__ == "__main__":
    main()
