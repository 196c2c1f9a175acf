#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_params
short_description: The NVIDIA kernel module's NVreg_ parameters in one modprobe.d file, checked and read back
version_added: 0.4.0
description:
  - Writes O(parameters) (C(NVreg_*) names and values) as one C(options nvidia ...) line to O(path), a modprobe.d file
    this collection owns, atomically and only where its text differs; removes the file where O(parameters) is empty.
    The module takes them at its next load (a reload by M(gpuops.nvidia.driver_modules), or a boot).
  - Before anything changes, each name is checked against the installed nvidia module's parameters (C(modinfo -p
    nvidia)); an unknown name is refused, naming the valid ones. Values are integers in the kernel's C(int) range
    (C(1), C(-1), C(0x12), C(0666)) or text of printable ASCII without whitespace, quotes, backslash or C(#); an
    integer parameter refuses text.
  - Reads the loaded driver's values back from C(/proc/driver/nvidia/params) (names without C(NVreg_); integers
    printed as unsigned 32 bits, so C(-1) reads C(4294967295) and C(0666) reads C(438)) and returns those that differ
    (RV(pending)). With O(verify), a difference fails the run, naming the parameter, the declared and the read value.
options:
  parameters:
    description: C(NVreg_*) names and their values. Empty - the file is removed (the module's defaults at its next
      load).
    type: dict
    default: {}
  path:
    description: The modprobe.d file the collection owns.
    type: path
    default: /etc/modprobe.d/gpuops-nvidia-params.conf
  root:
    description: The root C(/proc/driver/nvidia/params) is read under (V(/) on a node; a lab node's directory).
    type: path
    default: /
  modinfo:
    description: The modinfo command as an argument list. Found in PATH when not set.
    type: list
    elements: str
  missing_module:
    description:
      - What to do where C(modinfo -p nvidia) finds no installed nvidia module (the driver's packages not installed
        yet) - V(fail), or V(skip) the name check (RV(names_checked) false; the driver role checks them again once the
        packages are installed, before the file is written).
    type: str
    choices: [fail, skip]
    default: fail
  verify:
    description: Fail, before the file is written, where the loaded driver reads another value than declared (or no
      nvidia module is loaded). A parameter C(/proc/driver/nvidia/params) does not print (RV(unreadable)) cannot be
      verified and does not fail.
    type: bool
    default: false
  backup:
    description: Keep a timestamped copy of the file before it is replaced or removed.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
seealso:
  - name: NVIDIA open GPU kernel modules, nv-reg.h and nv-procfs.c
    description: The parameters, their defaults and how /proc/driver/nvidia/params prints them.
    link: https://github.com/NVIDIA/open-gpu-kernel-modules/blob/580.95.05/kernel-open/nvidia/nv-reg.h
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Coherent driver memory on a GB200 node, stream memory operations on
  gpuops.nvidia.driver_params:
    parameters:
      NVreg_CoherentGPUMemoryMode: driver
      NVreg_EnableStreamMemOPs: 1

- name: After a reload, the loaded driver must read them
  gpuops.nvidia.driver_params:
    parameters:
      NVreg_EnableStreamMemOPs: 1
    verify: true
"""

RETURN = r"""
parameters:
  description: The declaration as written (values as text).
  returned: always
  type: dict
names_checked:
  description: Whether the names were checked against the installed module (false only with O(missing_module=skip)).
  returned: always
  type: bool
loaded:
  description: The loaded driver's values of the declared parameters (null when no nvidia module is loaded).
  returned: always
  type: dict
pending:
  description: The declared parameters the loaded driver reads otherwise (name, declared, loaded) - they take effect
    at the module's next load.
  returned: always
  type: list
  elements: dict
unreadable:
  description: Declared parameters the loaded driver does not print in /proc/driver/nvidia/params (not verifiable).
  returned: always
  type: list
  elements: str
backup_file:
  description: The copy made with O(backup).
  returned: when a backup was made
  type: str
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params as dp
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    ModuleRun, Refusal, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    SYSTEM_TOOL_PACKAGES, ToolNotFound, require_tool, write_atomic)

READ_LIMIT = 1024 * 1024


def read_small(path):
    """A regular file's text (at most READ_LIMIT bytes); None where absent. Anything else is refused."""
    if not os.path.lexists(path):
        return None
    if not os.path.isfile(path):
        raise Refusal("%s is not a regular file: the collection's modprobe.d file must be one (move it away)" % path)
    with open(path, "rb") as handle:
        data = handle.read(READ_LIMIT + 1)
    if len(data) > READ_LIMIT:
        raise Refusal("%s is larger than %d bytes: not a file this module wrote (move it away)" % (path, READ_LIMIT))
    return data.decode("utf-8", "replace")


def read_loaded(root):
    """The loaded driver's parameters (parse_proc_params), or None where no nvidia module is loaded."""
    path = os.path.join(root, dp.PROC_PARAMS.lstrip("/"))
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return dp.parse_proc_params(handle.read(READ_LIMIT))


class DriverParams(ModuleRun):
    """validate: the declaration's form. read: the file, modinfo -p, the loaded values. plan: the names refused, the
    read-back (verify), the file's text against the declaration. apply: write or remove."""

    argument_spec = dict(
        parameters=dict(type="dict", default={}),
        path=dict(type="path", default=dp.DEFAULT_PATH),
        root=dict(type="path", default="/"),
        modinfo=dict(type="list", elements="str"),
        missing_module=dict(type="str", choices=["fail", "skip"], default="fail"),
        verify=dict(type="bool", default=False),
        backup=dict(type="bool", default=False),
    )
    errors = (dp.DriverParamsError,)

    def validate(self):
        try:
            self.values = dp.check(self.params["parameters"], "parameters")
        except dp.DriverParamsError as exc:
            return [str(exc)]
        if not os.path.isdir(self.params["root"]):
            return ["root %s is not a directory; give / on a node, or the lab node's directory" % self.params["root"]]
        return []

    def modinfo(self):
        given = self.params["modinfo"]
        if given:
            return list(given)
        try:
            return [require_tool(self.module.get_bin_path, self.params, "modinfo", "modinfo",
                                 SYSTEM_TOOL_PACKAGES["modinfo"], opt_dirs=["/usr/sbin", "/sbin"])]
        except ToolNotFound as exc:
            raise Refusal(str(exc))

    def valid_names(self):
        """{name: type} of the installed module, or None (missing_module=skip and no module installed)."""
        argv = self.modinfo() + ["-p", dp.MODULE]
        try:
            rc, out, err = self.module.run_command(argv, environ_update={"LANG": "C", "LC_ALL": "C"},
                                                   handle_exceptions=False)
        except (IOError, OSError) as exc:
            rc, out, err = 127, "", str(exc)
        if rc != 0:
            if self.params["missing_module"] == "skip":
                return None
            raise Refusal("the installed nvidia module's parameters cannot be read (%s: rc %d, %s): install the "
                          "driver's packages first, or give modinfo" % (" ".join(argv), rc, (err or out).strip()))
        return dp.parse_modinfo(out)

    def read(self):
        valid = self.valid_names() if self.values else {}
        return {"text": read_small(self.params["path"]), "valid": valid, "loaded": read_loaded(self.params["root"])}

    def plan(self, current):
        if current["valid"] is not None and self.values:
            try:
                dp.check_names(self.values, current["valid"])
            except dp.DriverParamsError as exc:
                raise Refusal("parameters: %s" % exc)
        wanted = dp.render(self.values)
        self.result.update(parameters=self.values, names_checked=current["valid"] is not None)
        self.read_back(current)
        self.set_diff(current["text"] or "", wanted or "", header=self.params["path"])
        return {"text": wanted} if wanted != current["text"] else None

    def apply(self, current, changes):
        path = self.params["path"]
        if self.params["backup"] and current["text"] is not None:
            self.result["backup_file"] = self.module.backup_local(path)
        if changes["text"] is None:
            os.unlink(path)
        else:
            write_atomic(self.module, path, changes["text"])

    def read_back(self, current):
        """The loaded driver's values against the declaration (RV pending, unreadable); with verify, a difference
        fails the run here, before the file is written (the file changes nothing in a loaded driver)."""
        loaded = current["loaded"]
        types = current["valid"] or {}
        diffs, unreadable = dp.compare(self.values, loaded, types)
        if loaded is None:
            unreadable = []
        self.result.update(loaded=None if loaded is None else dict((n, loaded.get(n)) for n in self.values),
                           pending=diffs if loaded is not None else [], unreadable=unreadable)
        if not self.params["verify"]:
            return
        if loaded is None:
            self.refuse("verify: no nvidia module is loaded (%s absent): the parameters cannot be verified"
                        % os.path.join(self.params["root"], dp.PROC_PARAMS.lstrip("/")))
        if diffs:
            self.refuse("verify: the loaded NVIDIA driver does not read the declared parameters: %s"
                        % dp.differences_text(diffs))


def main():
    run_module(DriverParams)


if __name__ == "__main__":
    main()
