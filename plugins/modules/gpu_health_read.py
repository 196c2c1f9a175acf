#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_health_read
short_description: A fleet health sweep's read of one node - its GPUs' health with a deadline, and the Xid lines since the last sweep
version_added: 0.3.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Reads every GPU's health as M(gpuops.nvidia.gpu_info) does (docs/health.md), with every NVML read in a child
    process that has O(deadline) seconds per part - NVML's start and the GPU count, then each GPU - so that a GPU or a
    driver that never answers becomes a finding (C(gpu_unresponsive), C(nvml_unresponsive), blocking by default) within
    the deadline instead of a hung job. The child is killed (SIGKILL) when its part does not answer, and a new one reads
    the GPUs after the one that hung.
  - Reads this boot's kernel log with timestamps (C(journalctl -k -b -o short-monotonic), else C(dmesg)), keeps its Xid
    and SXid (NVSwitch) lines, and compares them with a cursor file on the node (O(cursor_path)), so that RV(xid.new)
    holds only the lines logged since the previous sweep. The Xid and SXid events that block under O(policy) stay in
    the cursor for the rest of the boot, so a fatal Xid or SXid keeps the node unhealthy until a reboot even after the
    log rotated; a new boot id (C(/proc/sys/kernel/random/boot_id)) drops them.
  - A fatal SXid (its line says C(Fatal), or NVIDIA's Fabric Manager guide lists its code as always fatal) is the node
    finding C(sxid_fatal), naming the NVSwitch and the code; a non-fatal SXid is reported in RV(xid) and makes no
    finding (docs/health.md).
  - RV(health) is the policy's verdict over the GPUs' read and this boot's outstanding Xid events (the cursor's and the
    new ones), in the shape of M(gpuops.nvidia.gpu_info)'s RV(gpuops.nvidia.gpu_info#module:health) without each GPU's
    read fields; its C(gate) is the verdict as M(gpuops.nvidia.node_health) takes it.
  - Changes nothing on the GPUs. The only write is the cursor file, and only when new Xid or SXid lines or a new boot
    were seen (or there was no usable cursor), so a sweep that finds nothing new reports C(changed=false).
  - With the environment variable C(GPUOPS_SIMULATED_GPUS) set, works on simulated GPUs (their fault C(hang) makes a
    GPU's read block; docs/health.md).
options:
  policy:
    description:
      - "What each health finding kind does, C(block), C(warn) or C(ignore), over the defaults (docs/health.md), as
        M(gpuops.nvidia.gpu_info)'s O(gpuops.nvidia.gpu_info#module:health_policy); for example
        C({xid_gpu: block, ecc_corrected: ignore})."
      - An Xid event whose kind the policy blocks, and a fatal SXid while C(sxid_fatal) blocks, stays outstanding for
        the rest of the boot.
      - An unknown kind or action is an error that names the valid ones.
    type: dict
    default: {}
  deadline:
    description:
      - Seconds each part of the read may take - NVML's start with the GPU count, each GPU's read, the kernel log, the
        PCI bus - before it is given up and reported as not answering. More than 0.
    type: float
    default: 30
  cursor_path:
    description:
      - The cursor file on the node (JSON; written atomically, mode 0644, its directory created). An empty file or one
        that is not a cursor is treated as no cursor, with a warning, and rewritten.
      - An absolute path.
    type: path
    default: /var/lib/gpuops/health-cursor.json
  kernel_log:
    description:
      - Read the kernel log's Xid and SXid lines and keep the cursor. With V(false) neither is read nor written, and
        RV(health) warns that Xid events are not known (C(kernel_log_unreadable)).
    type: bool
    default: true
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reads everything, reports whether the cursor file would change, and writes nothing.
  diff_mode:
    support: full
    details: The cursor file's content before and after.
  idempotent:
    support: full
    details: A second run with no new Xid line and the same boot reports no change.
requirements:
  - On a real GPU host, the Python package C(nvidia-ml-py) (module C(pynvml)) and the NVIDIA driver.
notes:
  - A killed read may leave the hung call inside the driver; the node needs the reset or reboot the finding names.
seealso:
  - module: gpuops.nvidia.gpu_info
  - module: gpuops.nvidia.node_health
"""

EXAMPLES = r"""
- name: Read this node's health for the sweep, 30 s per read
  gpuops.nvidia.gpu_health_read:
  register: sweep

- name: Show what blocks the node, and the Xid lines since the last sweep
  ansible.builtin.debug:
    msg:
      blocking: "{{ sweep.health.blocking }}"
      new_xid: "{{ sweep.xid.new | map(attribute='line') | list }}"

- name: A stricter policy and a shorter deadline
  gpuops.nvidia.gpu_health_read:
    policy:
      xid_gpu: block
    deadline: 10
    cursor_path: /var/lib/gpuops/health-cursor.json
"""

RETURN = r"""
health:
  description:
    - The policy's verdict over the read (C(verdict), C(healthy), C(blocking), C(warnings), C(findings),
      C(kernel_log), C(dcgm), C(pci)) and C(gate) (C(healthy), C(blocking), C(warnings), C(reset_clears)), as
      M(gpuops.nvidia.gpu_info)'s RV(gpuops.nvidia.gpu_info#module:health) without each GPU's read fields. Its Xid
      findings are this boot's outstanding events (RV(xid.outstanding)).
  returned: always
  type: dict
  sample:
    verdict: block
    healthy: false
    blocking: ["GPU 3 (00000000:4E:00.0): NVML did not answer for this GPU within the deadline (no answer to the
               health read within the deadline of 30 s; bus id as NVML named it before the read stopped answering) -
               the GPU needs a reset, or the node a reboot (look for Xid 79, 119 or 120 in the kernel log); the gate
               clears when the next run finds it healthy"]
    gate: {healthy: false, blocking: [{gpu: 3, bus_id: "00000000:4E:00.0", kind: gpu_unresponsive, message: "..."}],
           warnings: [], reset_clears: []}
xid:
  description: The kernel log's Xid and SXid events, against the cursor.
  returned: always
  type: dict
  contains:
    new:
      description:
        - The events logged since the previous sweep (all of this boot's where there was no cursor or the node
          rebooted). An Xid has C(type=xid), C(ts) (seconds after boot), C(line), C(bus_id), C(code), C(pid),
          C(process), C(message), C(fatal), C(cause), C(mnemonic), C(action); an SXid C(type=sxid), C(ts), C(line),
          C(switch), C(bus_id) (the NVSwitch's), C(code), C(fatal) (the line's Fatal, or a code NVIDIA lists as
          always fatal), C(scope) (C(fabric), C(partition), or null for a non-fatal one), C(link), C(message).
      type: list
      elements: dict
    outstanding:
      description: The events of this boot that the cursor keeps (those the policy blocks on), then the new ones.
      type: list
      elements: dict
    rebooted: {description: The cursor was another boot's; its events were dropped., type: bool}
    rotated:
      description: The kernel log rotated past the cursor's line; lines logged in between may have been missed (a
        warning says so).
      type: bool
    source: {description: "Where the log was read: C(journalctl), C(dmesg), C(simulated), or null.", type: str}
    cursor_path: {description: The cursor file., type: str}
  sample:
    new: [{type: xid, ts: 61.5, line: "NVRM: Xid (PCI:0000:47:00): 79, GPU has fallen off the bus.",
           bus_id: "0000:47:00", code: 79, fatal: true, cause: gpu, mnemonic: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS,
           action: RESTART_BM, pid: null, process: null, message: GPU has fallen off the bus.}]
    outstanding: []
    rebooted: false
    rotated: false
    source: journalctl
    cursor_path: /var/lib/gpuops/health-cursor.json
unresponsive:
  description: The GPUs NVML did not answer for within the deadline, with their bus id where known (as NVML named it
    before the read stopped, else the one GPU on the PCI bus NVML did not answer for; null otherwise) and the deadline.
  returned: always
  type: list
  elements: dict
  sample: [{gpu: 3, bus_id: "00000000:4E:00.0", seconds: 30.0}]
deadline:
  description: The seconds each part of the read had.
  returned: always
  type: float
  sample: 30.0
gpus:
  description: How many GPUs were read (the unresponsive ones not counted).
  returned: always
  type: int
  sample: 8
"""

import math
import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import (
    get_backend, get_host_reader, module_runner)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
    HealthPolicyError,
    summary,
    validate_policy,
    xid_kind,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import read_record, record_path
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_deadline import HealthReadError, read_health
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    LiveFileError, read_live, write_atomic)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._xid_cursor import advance

MAX_DEADLINE = 3600.0


class GpuHealthRead(ModuleRun):
    """read the GPUs (with a deadline) and the kernel log against the cursor -> plan: the cursor's next content ->
    apply: write it."""

    argument_spec = dict(
        policy=dict(type="dict", default={}),
        deadline=dict(type="float", default=30.0),
        cursor_path=dict(type="path", default="/var/lib/gpuops/health-cursor.json"),
        kernel_log=dict(type="bool", default=True),
    )
    errors = (LiveFileError,)

    def validate(self):
        errors = []
        try:
            self.policy = validate_policy(self.params["policy"] or None)
        except HealthPolicyError as exc:
            errors.append(str(exc))
        deadline = self.params["deadline"]
        if not (math.isfinite(deadline) and 0 < deadline <= MAX_DEADLINE):
            errors.append("deadline: %r is not a number of seconds more than 0 and at most %g (for example 30)" % (
                deadline, MAX_DEADLINE))
        path = self.params["cursor_path"]
        if not path or not os.path.isabs(path):
            errors.append("cursor_path: %r is not an absolute path (for example /var/lib/gpuops/health-cursor.json)"
                          % (path,))
        return errors

    def _keep(self, event):
        """An Xid event the policy blocks on, and a fatal SXid while sxid_fatal blocks, stay outstanding for the rest
        of the boot."""
        if event["type"] == "sxid":
            return bool(event["fatal"]) and self.policy["sxid_fatal"] == "block"
        return event["type"] == "xid" and self.policy[xid_kind(event)] == "block"

    def read(self):
        runner = module_runner(self.module)
        path = self.params["cursor_path"]
        text = read_live(path, "cursor_path") if self.params["kernel_log"] else None
        try:
            raw = read_health(lambda: get_backend(run_command=runner), lambda: get_host_reader(run_command=runner),
                              deadline=self.params["deadline"], kernel_log=self.params["kernel_log"])
        except HealthReadError as exc:
            raise Failure("cannot read the GPUs' health: %s; nothing changed" % exc.msg, changed=False) from exc
        # the node's burn-in record (a failed burn-in keeps the node out, as in the gate: _burn_in)
        raw["burn_in"] = read_record(record_path())
        log = raw["kernel_log"]
        sweep = None
        if self.params["kernel_log"]:
            readable = bool(log.get("readable"))
            sweep = advance(text, log.get("boot_id"), log.get("lines") if readable else [],
                            oldest=log.get("oldest") if readable else None, keep=self._keep, path=path)
        return {"raw": raw, "text": text, "sweep": sweep}

    def plan(self, current):
        raw, sweep = current["raw"], current["sweep"]
        log = raw["kernel_log"]
        outstanding = sweep["outstanding"] if sweep else []
        read = dict(raw, kernel_log={
            "readable": bool(log.get("readable")), "source": log.get("source"), "reason": log.get("reason"),
            "lines": [event["line"] for event in outstanding if event["type"] in ("xid", "sxid")]})
        health = summary(read, self.policy, gpus=False)
        self.result.update(
            health=health,
            xid={"new": sweep["new"] if sweep else [], "outstanding": outstanding,
                 "rebooted": bool(sweep and sweep["rebooted"]), "rotated": bool(sweep and sweep["rotated"]),
                 "source": log.get("source"), "cursor_path": self.params["cursor_path"]},
            unresponsive=[{"gpu": g["gpu"], "bus_id": g["bus_id"], "seconds": g["seconds"]}
                          for g in raw["unresponsive"]],
            deadline=self.params["deadline"],
            gpus=len(raw["gpus"]))
        if sweep is None:
            return None
        for warning in sweep["warnings"]:
            self.module.warn(warning)
        if sweep["changed"]:
            self.set_diff(current["text"] or "", sweep["text"], header=self.params["cursor_path"])
            return sweep["text"]
        return None

    def apply(self, current, changes):
        path = self.params["cursor_path"]
        try:
            write_atomic(self.module, path, changes)
            os.chmod(os.path.realpath(path), 0o644)
        except (IOError, OSError) as exc:
            raise Failure("cannot write the health cursor %s: %s; the next sweep reports these Xid lines again"
                          % (path, exc), changed=False) from exc


def main():
    run_module(GpuHealthRead)


if __name__ == "__main__":
    main()
