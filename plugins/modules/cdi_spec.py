#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cdi_spec
short_description: Keep the node's CDI spec for its NVIDIA GPUs and MIG devices true
version_added: 0.3.0
description:
  - Generates the Container Device Interface (CDI) spec of the node's GPUs with C(nvidia-ctk cdi generate) into a
    private temporary directory, checks it with C(nvidia-ctk cdi list) against the GPUs as they are now (every full
    GPU and every MIG device, by index and by UUID; nothing else), compares it with the live spec, and replaces the
    live spec atomically only when it differs. A spec edited by hand, or left from another MIG layout or another
    driver, is replaced; a run killed before the replace leaves the old spec whole.
  - NVIDIA's C(nvidia-cdi-refresh) service (toolkit 1.18 and newer) regenerates C(/var/run/cdi/nvidia.yaml) at boot
    and when the driver or the toolkit changes, but not when MIG devices change. Run this module after every MIG
    change (the gpuops.nvidia.gpu_node role does). Another spec of the same kind (C(nvidia.com/gpu)) in O(spec_dirs)
    would shadow or conflict with this one, so it is refused, naming the file; point O(spec_path) at it instead.
  - When the GPUs leave no device to describe (every GPU in MIG mode with no MIG device), C(nvidia-ctk) refuses to
    write a spec ("invalid device, empty device edits"); the module then removes a live spec (its devices no longer
    exist) and warns.
  - After a write, checks the node's own view (C(cdi list) over O(spec_dirs)) and records what it verified beside
    the spec (C(.<name>.gpuops-verified)), which gpuops.nvidia.gpu_node_plan compares with the node so that an
    unchanged node does not run this module.
  - Holds the node lock while it reads the GPUs and writes, so that the spec is never generated from a half-applied
    MIG change.
options:
  state:
    description:
      - V(present) - the spec lists exactly the node's GPUs and MIG devices.
      - V(absent) - no spec at O(spec_path) (and no record).
    type: str
    choices: [present, absent]
    default: present
  spec_path:
    description:
      - The spec file, in one of O(spec_dirs), ending in C(.yaml) or C(.json) (its encoding).
      - The default is the file NVIDIA's C(nvidia-cdi-refresh) service writes; C(/var/run) is emptied at boot, where
        the service (or the next run) writes it again.
    type: path
    default: /var/run/cdi/nvidia.yaml
  spec_dirs:
    description: The directories CDI readers on the node load specs from (containerd's C(cdi_spec_dirs); later ones
      win), checked for other specs of the same kind and for the node's view after a write.
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  device_name_strategy:
    description: The names each device gets (C(nvidia-ctk cdi generate --device-name-strategy)), in this order.
    type: list
    elements: str
    choices: [index, uuid, type-index]
    default: [index, uuid]
  nvidia_ctk_path:
    description: The nvidia-ctk program; found in PATH, /usr/bin, /usr/local/bin or /usr/sbin when not set.
    type: path
  backup:
    description: Keep the replaced or removed spec as C(<spec_path>.<pid>.<timestamp>~) (not a name CDI readers load).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.node_lock
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
requirements:
  - nvidia-ctk (NVIDIA Container Toolkit) with C(cdi generate) and C(cdi list); 1.18 or newer recommended.
seealso:
  - module: gpuops.nvidia.containerd_runtime
  - name: NVIDIA Container Toolkit, Container Device Interface
    description: How nvidia-ctk generates CDI specs.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The CDI spec of the GPUs and MIG devices as they are now
  gpuops.nvidia.cdi_spec:
    spec_path: /var/run/cdi/nvidia.yaml

- name: A persistent spec in /etc/cdi, devices named by UUID only
  gpuops.nvidia.cdi_spec:
    spec_path: /etc/cdi/nvidia.yaml
    device_name_strategy: [uuid]
"""

RETURN = r"""
spec_path:
  description: The spec file.
  returned: always
  type: str
devices:
  description: The device names the spec lists (without the C(nvidia.com/gpu=) kind), as C(nvidia-ctk cdi list)
    read them from the generated spec; empty when there is no spec.
  returned: always
  type: list
  elements: str
  sample: ["0", "1", "GPU-3e165db4-9e73-0984-9e34-2e913492cfaa", "all"]
device_count:
  description: How many GPUs and MIG devices the spec describes (C(all) not counted).
  returned: always
  type: int
action:
  description: What was (or in check mode would be) done to the live spec.
  returned: always
  type: str
  choices: [none, create, replace, remove]
backup_file:
  description: The backup of the replaced or removed spec, with O(backup).
  returned: when a backup was made
  type: str
nvidia_ctk:
  description: The nvidia-ctk program used.
  returned: always
  type: str
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi import ARGUMENT_SPEC, CdiError, param_problems
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi_run import CdiSpecRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import CTK_PACKAGE
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    LiveFileError, ToolNotFound, require_tool)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock


class CdiSpec(ModuleRun):
    """validate -> (node lock) read (the GPUs, nvidia-ctk's candidate, the live spec) -> plan (the action) -> apply,
    verify the node's view and record (_cdi_run's runner, shared with the MIG boot script)."""

    argument_spec = dict(ARGUMENT_SPEC, lock_timeout=dict(type="int"))
    errors = (CdiError, LiveFileError)      # _cdi_run's failures (it runs at boot too, without this base)

    def validate(self):
        p = self.params
        problems = param_problems(p["spec_path"], p["spec_dirs"], p["device_name_strategy"])
        if problems:
            self.refuse("; ".join(problems))
        return []

    def lock(self):
        return module_lock(self.module, "cdi_spec")

    def read(self):
        try:
            ctk = require_tool(self.module.get_bin_path, self.params, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
        except ToolNotFound as exc:
            self.refuse(str(exc))
        self.cdi = CdiSpecRun(self.module, ctk)
        return self.cdi.read()

    def plan(self, current):
        self.result = self.cdi.plan(current)
        return self.result["changed"]

    def apply(self, current, changes):
        """The write is in ``after``: it verifies and records on every run outside check mode, changed or not."""

    def after(self, current, changes):
        self.cdi.finish(current, self.result)


def main():
    run_module(CdiSpec)


if __name__ == "__main__":
    main()
