#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mig_layout
short_description: Lay out MIG GPU instances and compute instances declaratively, with least disruption
version_added: 0.1.0
description:
  - Makes the MIG devices on the selected GPUs exactly what you declare, declared
    inline (O(layout)), as a mig-parted v1 config file (O(config_file) + O(config_name)) that you bring unchanged,
    or as a named layout in O(config_name) that works on every MIG GPU model (C(all-balanced), C(all-<size>)
    such as C(all-1g) or C(all-3g), C(all-<profile>) such as C(all-1g.10gb) or C(all-1g.24gb+gfx) - mig-parted's
    spelling C(all-1g.24gb.gfx) too - C(all-enabled), C(all-disabled)).
  - Profile names are resolved against each GPU's own profile list, so C(1g.10gb) means the profile of that name
    on that GPU (it is a 1-slice profile on 80GB parts and a 2-memory-slice one on A100-40GB).
    Compute-instance sub-profiles (C(1c.3g.20gb)) are packed into shared GPU instances as mig-parted does.
  - Names follow NVIDIA's grammar (go-nvlib) - C(<G>g.<GB>gb) with an optional C(+) or C(-) attribute list -
    so Blackwell's C(1g.23gb+me), C(1g.24gb+gfx), C(1g.24gb+me.all), C(1g.24gb-me) and sub-profiles on them
    (C(1c.2g.48gb+gfx)) are accepted wherever the GPU offers them.
  - Validates everything before the first change - unknown profile names (the message lists the valid names on
    that GPU), counts that cannot fit (and why), selectors that match nothing, MIG mode off where the layout needs
    it on, GPUs without MIG. Errors on several GPUs are reported together; nothing changes.
  - Reconciles with least disruption, unlike mig-parted (which destroys every instance of a GPU whose layout
    differs in any way). It keeps every existing GPU instance and compute instance that the declared layout also
    contains whenever some valid placement of the whole layout keeps it (an exhaustive search over what to keep
    and over placements), destroys only what must go, and creates the rest at explicit placements chosen so
    that the whole layout fits.
  - Never destroys an instance that a process runs on unless O(force=true); then the result names the processes,
    which the module ends (SIGTERM, then SIGKILL after O(force_timeout) seconds) before destroying the instance.
  - Does not change MIG mode (use M(gpuops.nvidia.mig_mode)). In check mode, a GPU whose MIG mode is not yet
    enabled is planned as if it were enabled and empty, so a check run of the whole flow shows the layout.
options:
  gpus:
    description:
      - Which GPUs to manage. C(all), or a list of GPU indices, UUIDs (C(GPU-...)) or model names
        (C(NVIDIA H200) or C(H200)). Narrows what the layout selects; a selector that matches no GPU is an error.
    type: list
    elements: str
    default: [all]
  layout:
    description:
      - Inline layout, a list of entries. Each entry selects GPUs with C(devices) (C(all) - the default - or a list
        of indices or UUIDs), optional C(models) (a list of substrings of the GPU name, case-insensitive, e.g.
        C(A100-SXM4-40GB)) and optional C(device_filter) (packed PCI ids as in mig-parted, e.g. C(0x20B010DE)),
        and declares C(mig_devices) (profile name -> count; sub-profiles such as C(1c.3g.20gb) allowed) and
        optionally C(mig_enabled) (default true).
      - mig-parted's dashed key names (C(mig-devices), C(device-filter), C(mig-enabled)) are accepted too.
      - A GPU selected by two entries with different layouts is an error. GPUs no entry selects are left alone.
    type: list
    elements: dict
  config_file:
    description:
      - Path on the target of a mig-parted v1 config file (top-level C(version) v1 and C(mig-configs)), validated by
        mig-parted's own rules.
    type: path
  config_name:
    description:
      - With O(config_file), the config to apply (optional when the file holds exactly one).
      - Without O(config_file), a named layout (see the description).
    type: str
  force:
    description:
      - Allow destroying instances that processes run on. The processes are ended first and named in the result.
    type: bool
    default: false
  force_timeout:
    description: Seconds to wait after SIGTERM before SIGKILL when O(force=true), from 0 to 86400 (one day).
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Returns the same plan that a real run would execute, and makes no call that changes a GPU.
  diff_mode:
    support: full
    details: Before/after per GPU, with the MIG devices and each GPU instance's profile, placement and compute instances.
  idempotent:
    support: full
requirements:
  - On a real GPU host, the Python package C(nvidia-ml-py) and the NVIDIA driver; root.
  - PyYAML for O(config_file) (ships with ansible-core).
notes:
  - GPU and compute instances never survive a reboot or GPU reset; the
    R(gpuops.nvidia.mig,ansible_collections.gpuops.nvidia.mig_role) role installs a boot-time unit that re-applies
    the layout.
  - Compute instances are created without an explicit placement (the driver places them); the planner assumes
    the driver puts each at the first free run of compute slices aligned to its size and creates bigger ones first.
  - If a run is interrupted (an NVML error, a fault), a re-run re-reads the GPUs and plans from where it stopped.
seealso:
  - module: gpuops.nvidia.mig_mode
  - module: gpuops.nvidia.gpu_info
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.node_lock
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Balanced layout on every MIG GPU, whatever the model
  gpuops.nvidia.mig_layout:
    config_name: all-balanced

- name: An existing mig-parted file, unchanged
  gpuops.nvidia.mig_layout:
    config_file: /etc/nvidia-mig-manager/config.yaml
    config_name: custom-config

- name: Inline, per model, with compute-instance sub-profiles
  gpuops.nvidia.mig_layout:
    layout:
      - models: [A100-SXM4-40GB]
        mig_devices: {"1c.3g.20gb": 3, "4g.20gb": 1}
      - devices: [GPU-5c32da19-d853-56e0-ab55-28828a3c2c58]
        mig_devices: {"7g.80gb": 1}

- name: Preview what would be destroyed and created
  gpuops.nvidia.mig_layout:
    config_name: all-1g
  check_mode: true
  diff: true
  register: preview
"""

RETURN = r"""
changed:
  description: Whether any instance was created or destroyed.
  returned: always
  type: bool
config_name:
  description: The config or named layout applied.
  returned: always
  type: str
gpus:
  description: One entry per managed GPU.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: "NVML index.", type: int, returned: always}
    uuid: {description: "GPU UUID.", type: str, returned: always}
    name: {description: "GPU model.", type: str, returned: always}
    changed: {description: "Whether this GPU changed (would change in check mode).", type: bool, returned: always}
    desired: {description: "The declared MIG devices (profile -> count) in this GPU's names.", type: dict, returned: always}
    kept:
      description: GPU instances kept (gi_id, profile, placement, compute_instances kept with their MIG UUIDs).
      type: list
      elements: dict
      returned: always
    destroyed:
      description: Compute and GPU instances destroyed, with the processes that ran on them (only with force).
      type: list
      elements: dict
      returned: always
    created:
      description: GPU instances created (profile and explicit placement) and compute instances created.
      type: list
      elements: dict
      returned: always
    operations:
      description: The ordered plan (destroy compute instances, destroy GPU instances, create GPU instances at
        placements, create compute instances).
      type: list
      elements: dict
      returned: always
    busy_destroyed:
      description: Instances with processes that force destroyed, and those processes (pid, name).
      type: list
      elements: dict
      returned: always
    mig_devices:
      description: The MIG devices after the run (uuid, gi_id, ci_id, gi_profile, profile, placement); in check
        mode, those that exist now.
      type: list
      elements: dict
      returned: always
    before: {description: "Layout before (mig_mode, mig_devices, gpu_instances).", type: dict, returned: always}
    after: {description: "Layout after (planned in check mode).", type: dict, returned: always}
    planned_as_enabled:
      description: Check mode only; MIG is not enabled yet on this GPU, so the plan assumes an enabled, empty GPU.
      type: bool
      returned: always
    planned_after_mode_change:
      description: Check mode only; the GPU's MIG mode differs from the layout's, so the plan assumes
        M(gpuops.nvidia.mig_mode) changed it first.
      type: bool
      returned: always
skipped_gpus:
  description: GPUs the layout selected but that were left alone (no MIG support), and why.
  returned: always
  type: list
  elements: dict
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import (
    apply_layout_plans,
    assumed_warning,
    layout_entry,
    layout_result,
    name_source,
    plan_layouts,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import MigBusyError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Failure, ModuleRun, Refusal, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock_with_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS


class MigLayout(ModuleRun):
    """validate -> (node lock) read the GPUs -> plan (_mig_apply.plan_layouts) -> apply the plans (in check mode the
    plans are the report) -> after: the result per GPU."""

    argument_spec = dict(
        lock_timeout=dict(type="int"),
        gpus=dict(type="list", elements="str", default=["all"]),
        layout=dict(type="list", elements="dict"),
        config_file=dict(type="path"),
        config_name=dict(type="str"),
        force=dict(type="bool", default=False),
        force_timeout=dict(type="int", default=WAITS["processes_exit"].timeout),
    )
    module_options = dict(mutually_exclusive=[("layout", "config_file"), ("layout", "config_name")],
                          required_one_of=[("layout", "config_file", "config_name")])
    errors = (GpuBackendError,)
    apply_in_check_mode = True      # in check mode the plans are reported, not applied

    def validate(self):
        error = seconds_error("force_timeout", self.params["force_timeout"])
        if error:
            self.refuse("%s: the wait between SIGTERM and SIGKILL for processes ended with force=true (>= 0)" % error)
        return []

    def lock(self):
        self.results, self.executed = [], []   # executed: what a failure part way reports
        return module_lock_with_backend(self, "mig_layout")

    def read(self):
        self.backend = get_backend()
        return self.guarded(self.backend.read_all)

    def plan(self, current):
        module = self.module
        gpus = current["gpus"]
        try:
            resolved, plans, assumed = plan_layouts(gpus, module.params, module.check_mode)
        except MigBusyError as exc:
            raise Refusal(str(exc), busy=exc.busy) from exc
        except MigLayoutError as exc:
            raise Refusal(name_source(module.params, str(exc))) from exc
        if assumed:
            module.warn(assumed_warning(assumed))
        by_index = dict((g["index"], g) for g in gpus)
        self.resolved = resolved
        self.entry_of = lambda plan: layout_entry(plan, assumed, by_index[plan["index"]])
        return plans

    def apply(self, current, changes):
        if self.module.check_mode:
            self.results.extend(self.entry_of(plan) for plan in changes)
            return
        self.guarded(lambda: apply_layout_plans(self.backend, changes, self.params["force_timeout"],
                                                entry_of=self.entry_of,
                                                on_step=lambda op, res: self.executed.append(op),
                                                on_gpu=self.results.append))

    def after(self, current, changes):
        results = self.results
        self.result = layout_result(self.resolved, results)
        self.set_diff(dict(("gpu %d" % r["index"], r["before"]) for r in results if r["changed"]),
                      dict(("gpu %d" % r["index"], r["after"]) for r in results if r["changed"]))

    def guarded(self, step):
        """``step()``; an NVML or backend error part way fails saying what was carried out."""
        try:
            return step()
        except NvmlError as exc:
            raise Failure("NVML error %s: %s. Nothing was rolled back; re-run to reconcile from the current state."
                          % (exc.name, exc), gpus=self.results, changed=bool(self.executed)) from exc
        except GpuBackendError as exc:
            raise Failure(str(exc), gpus=self.results, changed=bool(self.executed)) from exc


def main():
    run_module(MigLayout)


if __name__ == "__main__":
    main()
