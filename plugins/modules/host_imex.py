#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_imex
short_description: Keep the host's own IMEX service masked where NVIDIA's DRA driver runs ComputeDomains
version_added: 0.3.0
description:
  - NVIDIA's DRA driver runs the IMEX daemons of a ComputeDomain itself. A host C(nvidia-imex.service) that runs holds
    the IMEX session and the domain's daemons never get Ready (NVIDIA/k8s-dra-driver-gpu issue 524); the driver's
    prerequisites ask for C(systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service).
  - With O(state=masked), each unit of O(units) that is installed is stopped, disabled and masked; what it was
    (enabled, running) is kept in O(record). A unit that is not installed is left alone.
  - With O(state=unmasked) (ComputeDomains no longer declared), each unit of the record is unmasked and given back
    what it was (enabled, started), and the record is removed. A unit masked before this module saw it is not in the
    record, so it stays masked.
  - In check mode nothing changes; RV(commands) lists what would run.
options:
  state:
    description: V(masked) where the node serves ComputeDomains, V(unmasked) where it no longer does.
    type: str
    choices: [masked, unmasked]
    required: true
  units:
    description:
      - The host's IMEX units. NVIDIA's C(nvidia-imex) package ships C(nvidia-imex.service); C(nvidia-imex-ctl) is its
        query tool, masked only where a unit of that name is installed.
    type: list
    elements: str
    default: [nvidia-imex.service, nvidia-imex-ctl.service]
  record:
    description: The collection's record of what the units were before they were masked.
    type: path
    default: /var/lib/gpuops/host-imex.json
  systemctl:
    description: The systemctl command (program and arguments); found in PATH when not set.
    type: list
    elements: str
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
requirements:
  - systemd.
seealso:
  - module: gpuops.nvidia.gpu_node_plan
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The host's IMEX service out of the way of the DRA driver's ComputeDomains
  gpuops.nvidia.host_imex:
    state: masked
"""

RETURN = r"""
commands:
  description: The systemctl commands run (in check mode, that would run), as C(VERB UNIT).
  returned: success
  type: list
  elements: str
  sample: ["stop nvidia-imex.service", "disable nvidia-imex.service", "mask nvidia-imex.service"]
units:
  description:
    - Each declared unit as read before this run - C(present), C(enabled) (systemctl is-enabled's word),
      C(active).
  returned: success
  type: dict
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache

_bytecode_cache.install()

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _host_imex

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=list(_host_imex.STATES), required=True),
    units=dict(type="list", elements="str", default=list(_host_imex.UNITS)),
    record=dict(type="path", default=_host_imex.RECORD),
    systemctl=dict(type="list", elements="str"),
)


def _words(units):
    return "".join("%s: %s%s\n" % (unit, seen["enabled"], ", running" if seen["active"] else "")
                   for unit, seen in sorted(units.items()))


class HostImex(ModuleRun):
    """validate -> read (the units, the record) -> plan (_host_imex.plan) -> apply (systemctl, the record)."""

    argument_spec = ARGUMENT_SPEC
    refusals = (_host_imex.HostImexError,)

    def validate(self):
        return _host_imex.validate(self.params)

    def read(self):
        p = self.params
        self.systemctl = _host_imex.systemctl_argv(self.module.get_bin_path, p["systemctl"])
        record = _host_imex.read_record(p["record"])
        names = list(p["units"]) + [u for u in sorted(record or {}) if u not in p["units"]]
        units = _host_imex.read_units(self.module.run_command, self.systemctl, names)
        self.result.update(units=units, commands=[])
        return {"units": units, "record": record}

    def plan(self, current):
        todo = _host_imex.plan(self.params["state"], list(current["units"]), current["units"], current["record"])
        if not todo["reasons"]:
            return None
        self.result["commands"] = ["%s %s" % tuple(c) for c in todo["commands"]]
        after = {}
        for unit, seen in current["units"].items():
            verbs = [v for v, u in todo["commands"] if u == unit]
            word = seen["enabled"]
            word = "masked" if "mask" in verbs else ("disabled" if "unmask" in verbs else word)
            word = "enabled" if "enable" in verbs else ("disabled" if "disable" in verbs and word != "masked" else word)
            after[unit] = {"enabled": word, "active": "start" in verbs or (seen["active"] and "stop" not in verbs)}
        self.set_diff(_words(current["units"]), _words(after), header="host IMEX units")
        return todo

    def apply(self, current, changes):
        failed = _host_imex.apply(self.module.run_command, self.systemctl, changes, self.params["record"])
        if failed:
            self.fail(failed, changed=True)


def main():
    run_module(HostImex)


if __name__ == "__main__":
    main()
