#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: compute_mode
short_description: Set the compute mode (and optionally persistence mode) of NVIDIA GPUs
version_added: 0.1.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Sets C(Default), C(Exclusive_Process) or C(Prohibited) on the GPUs a selector picks, through NVML.
  - Idempotent; GPUs already in the declared mode are not touched (no NVML setter is called).
  - C(Exclusive_Process) on a MIG-enabled GPU is refused before any change (NVML refuses it too).
  - Compute mode is not persistent. It returns to C(Default) on reboot, and when the driver de-initialises an
    idle GPU because no client holds it and persistence mode is off. Set O(persistence_mode=true) and re-apply
    at boot (the gpuops.nvidia.compute_mode role installs a systemd unit for that).
  - With the environment variable C(GPUOPS_SIMULATED_GPUS) set, works on simulated GPUs.
options:
  mode:
    description:
      - The compute mode. Case does not matter. C(Exclusive_Thread) was removed from NVIDIA's drivers and
        is refused.
      - Required unless O(settings) is given.
    type: str
  settings:
    description:
      - Several selectors with their modes, applied as one declaration. Later entries win where selectors
        overlap, so no GPU is switched back and forth within a run. Mutually exclusive with O(mode) and O(gpus).
    type: list
    elements: dict
    suboptions:
      gpus:
        description: Selector, as O(gpus).
        type: list
        elements: str
        default: [all]
      mode:
        description: Compute mode, as O(mode).
        type: str
        required: true
  gpus:
    description:
      - Which GPUs. C(all), or a list of indices, UUIDs (C(GPU-...)) or model names (C(NVIDIA H200) or C(H200)).
      - All GPUs when not given.
    type: list
    elements: str
  persistence_mode:
    description: Also set persistence mode on the selected GPUs (through NVML, the legacy persistence mode); left as
      it is when not given. Refused with O(persistence_owner=nvidia-persistenced).
    type: bool
  persistence_owner:
    description:
      - Who owns persistence mode on this node. V(compute_mode) - this module sets it where O(persistence_mode) is
        given (a node whose driver the collection does not manage).
      - "V(nvidia-persistenced) - the daemon owns it (M(gpuops.nvidia.driver_services) runs it with
        C(--persistence-mode) where gpuops.nvidia.gpu_node manages the driver); this module makes no persistence call
        and says so in RV(persistence). One writer, never two (docs/driver.md)."
    type: str
    choices: [compute_mode, nvidia-persistenced]
    default: compute_mode
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
notes:
  - MPS does not need C(Exclusive_Process); it runs in C(Default) (measured on H200). NVIDIA's device plugin
    sets C(Exclusive_Process) itself while its MPS daemon runs.
  - If setting the mode fails on one GPU, the GPUs already changed in this run are set back to what they were.
"""

EXAMPLES = r"""
- name: Exclusive_Process on every H100
  gpuops.nvidia.compute_mode:
    gpus: [H100]
    mode: Exclusive_Process
    persistence_mode: true

- name: Default everywhere, Exclusive_Process on the H100s, in one declaration
  gpuops.nvidia.compute_mode:
    settings:
      - {gpus: [all], mode: Default}
      - {gpus: ["NVIDIA H100 80GB HBM3"], mode: Exclusive_Process}
    persistence_mode: true

- name: Back to Default on GPUs 0 and 1
  gpuops.nvidia.compute_mode:
    gpus: ["0", "1"]
    mode: Default
"""

RETURN = r"""
gpus:
  description: The selected GPUs after the run (in check mode, as they would be).
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: GPU index., type: int}
    uuid: {description: GPU UUID., type: str}
    name: {description: GPU model., type: str}
    compute_mode: {description: Compute mode., type: str}
    nvidia_smi_mode: {description: The same mode as C(nvidia-smi -c) takes it (for boot-time re-apply)., type: str}
    persistence_mode: {description: Persistence mode., type: bool}
  sample: [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200", "compute_mode": "Exclusive_Process",
            "nvidia_smi_mode": "EXCLUSIVE_PROCESS", "persistence_mode": true}]
changes:
  description: Per changed GPU, the compute mode and persistence mode before and after (null when unchanged).
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200", "compute_mode": ["Default", "Exclusive_Process"],
            "persistence_mode": null}]
mode:
  description: The mode declared, in NVML's spelling (null when O(settings) give different modes).
  returned: always
  type: str
modes:
  description: Declared mode per selected GPU index.
  returned: always
  type: dict
persistence:
  description: Who owns persistence mode (C(owner)) and what this run did about it (C(note)).
  returned: always
  type: dict
  sample: {"owner": "nvidia-persistenced", "note": "persistence mode left to nvidia-persistenced (run with
           --persistence-mode by the driver step); no NVML persistence call"}
calls:
  description: The NVML setter calls this run made, in order (empty in check mode and when nothing differs).
  returned: always
  type: list
  elements: str
  sample: ["set_persistence_mode(0, True)", "set_compute_mode(0, Exclusive_Process)"]
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import (
    ComputeModeError, plan_settings, planned_state, report, state_view)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    NOTHING_CHANGED, Failure, ModuleRun, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock_with_backend


class ComputeMode(ModuleRun):
    """(node lock) read the GPUs -> plan (_compute_mode) -> apply the setters, rolled back on an NVML error, then
    read back and verify."""

    argument_spec = dict(
        lock_timeout=dict(type="int"),
        mode=dict(type="str"),
        gpus=dict(type="list", elements="str"),
        settings=dict(type="list", elements="dict", options=dict(
            gpus=dict(type="list", elements="str", default=["all"]),
            mode=dict(type="str", required=True))),
        persistence_mode=dict(type="bool"),
        persistence_owner=dict(type="str", choices=["compute_mode", "nvidia-persistenced"], default="compute_mode"),
    )
    module_options = dict(mutually_exclusive=[("settings", "mode"), ("settings", "gpus")],
                          required_one_of=[("settings", "mode")])

    def validate(self):
        if self.params["persistence_owner"] == "nvidia-persistenced" and self.params["persistence_mode"] is not None:
            return ["persistence_mode is owned by nvidia-persistenced on this node (persistence_owner), so compute_mode "
                    "does not set it: leave persistence_mode unset, or set persistence_owner to compute_mode where "
                    "no daemon runs"]
        return []

    def lock(self):
        return module_lock_with_backend(self, "compute_mode")

    def read(self):
        try:
            backend = get_backend()
        except (GpuBackendError, NvmlError) as exc:
            self.fail("cannot reach the GPUs: %s" % exc)
        self.backend = backend
        try:
            return backend.read_all()
        except (GpuBackendError, NvmlError) as exc:
            self.fail("cannot read the GPUs: %s" % exc)

    def plan(self, current):
        p = self.params
        try:
            settings = p["settings"] or [{"gpus": p["gpus"] or ["all"], "mode": p["mode"]}]
            todo = plan_settings(current["gpus"], settings, p["persistence_mode"])
        except ComputeModeError as exc:
            self.fail(str(exc))
        self.todo = todo
        changes = [dict(c) for c in todo["changes"]]
        planned = planned_state(todo)
        owner = p["persistence_owner"]
        if owner == "nvidia-persistenced":
            note = ("persistence mode left to nvidia-persistenced (run with --persistence-mode by the driver step); "
                    "no NVML persistence call")
        elif p["persistence_mode"] is None:
            note = "persistence mode left as it is (persistence_mode not given)"
        else:
            note = "persistence mode set through NVML where it differs"
        self.result.update(persistence={"owner": owner, "note": note})
        self.result.update(mode=todo["mode"], changes=changes, calls=[],
                           modes=dict((str(k), v) for k, v in todo["modes"].items()), gpus=report(planned))
        self.set_diff(state_view(todo["selected"]), state_view(planned), header="GPU modes")
        for w in todo["warnings"]:
            self.module.warn(w)
        return changes

    def apply(self, current, changes):
        backend, calls, todo = self.backend, self.result["calls"], self.todo
        done = []  # (index, what, old value) for the rollback
        try:
            for c in changes:
                # persistence first: with it on, the driver keeps the GPU initialised and the mode stays
                if c["persistence_mode"]:
                    calls.append("set_persistence_mode(%d, %s)" % (c["index"], c["persistence_mode"][1]))
                    backend.set_persistence_mode(c["index"], c["persistence_mode"][1])
                    done.append((c["index"], "persistence_mode", c["persistence_mode"][0]))
                if c["compute_mode"]:
                    calls.append("set_compute_mode(%d, %s)" % (c["index"], c["compute_mode"][1]))
                    backend.set_compute_mode(c["index"], c["compute_mode"][1])
                    done.append((c["index"], "compute_mode", c["compute_mode"][0]))
        except NvmlError as exc:
            undone, failed = [], []
            for index, what, old in reversed(done):
                try:
                    calls.append("set_%s(%d, %s) [rollback]" % (what, index, old))
                    if what == "compute_mode":
                        backend.set_compute_mode(index, old)
                    else:
                        backend.set_persistence_mode(index, old)
                    undone.append("GPU %d %s back to %s" % (index, what, old))
                except NvmlError as exc2:
                    failed.append("GPU %d %s: %s" % (index, what, exc2))
            raise Failure("NVML error %s while setting compute modes: %s. Rolled back: %s.%s" % (
                exc.name, exc, ", ".join(undone) or "none (%s before the error)" % NOTHING_CHANGED,
                (" Could NOT roll back: %s" % "; ".join(failed)) if failed else ""),
                changes=changes, calls=calls, changed=False) from exc
        try:
            after = backend.read_all()
        except (GpuBackendError, NvmlError) as exc:
            raise Failure("modes were set but the GPUs cannot be read back: %s" % exc, changes=changes,
                          changed=False) from exc
        by_index = dict((g["index"], g) for g in after["gpus"])
        now = [by_index[g["index"]] for g in todo["selected"]]
        persistence = self.params["persistence_mode"]
        wrong = [g for g in now if g.get("compute_mode") != todo["modes"][g["index"]]
                 or (persistence is not None and bool(g.get("persistence_mode")) != persistence)]
        if wrong:
            raise Failure("after setting, GPU(s) %s do not report the declared modes: %s"
                          % (", ".join(str(g["index"]) for g in wrong), state_view(wrong)), changes=changes,
                          changed=False)
        self.result["gpus"] = report(now)


def main():
    run_module(ComputeMode)


if __name__ == "__main__":
    main()
