#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_burn_in
short_description: Burn a GPU node in with DCGM's diagnostic, once per driver version, and record the verdict on it
version_added: 0.3.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Runs DCGM's diagnostic, C(dcgmi diag -r N -j), at the run level O(level) names (V(quick) 1, V(medium) 2, V(long) 3,
    V(extended) 4; NVIDIA's DCGM documentation, "DCGM Diagnostics") on every GPU of the node, and writes its verdict to
    the node's burn-in record (C(/var/lib/gpuops/burn-in.json)) - the level, C(pass) or C(fail), the time, the loaded
    driver's version, DCGM's version, each failed test and warning in dcgmi's words.
  - Runs only where the record does not already cover the node - a burn-in that passed with the loaded driver at
    O(level) or a higher one; a failed burn-in, another driver (an upgrade) or a higher level declared runs it again.
    So a node is burned in before its first service and again after its driver changes, not on every run.
  - A failed burn-in does not fail this module; the record does - the GPU health read of every gpuops.nvidia module
    (M(gpuops.nvidia.gpu_info), the gpu_node role's gate, the fleet sweep) turns it into the blocking finding
    C(burn_in_failure), naming the failed test, so the node stays out of service until a burn-in passes.
  - At the V(medium) level and above, also checks the bandwidth between every pair of GPUs with NVIDIA's
    C(nvbandwidth) where the node has it (O(nvbandwidth)) - its four device-to-device tests (copy engine and copy
    kernel, read and write), C(nvbandwidth -j -t ...) - against the catalog's floor for the GPUs' model (70 % of
    half the NVLink bandwidth NVIDIA publishes, for example 315 GB/s for H100 and H200 SXM, 630 GB/s for B200). A
    pair below its floor fails the burn-in, named with its test, the two GPUs, the GB/s measured and the floor. A
    node without C(nvbandwidth), or without two GPUs of a model with a floor, is burned in on dcgmi alone, and the
    record says the check was not run and why.
  - Refuses to run where a GPU runs processes (the diagnostic's stress tests need the GPUs to themselves, and would
    disturb a workload) or where C(dcgmi) is not installed; nothing is run or written then.
  - With the environment variable C(GPUOPS_SIMULATED_GPUS) set, works on simulated GPUs (the record then lies under the
    simulated node's root).
options:
  level:
    description: The burn-in's depth, as dcgmi's run level.
    type: str
    required: true
    choices: [quick, medium, long, extended]
  dcgmi:
    description: The C(dcgmi) command, a name looked up on C(PATH) or a path.
    type: str
    default: dcgmi
  nvbandwidth:
    description:
      - The C(nvbandwidth) command of the GPU-to-GPU bandwidth check, a name looked up on C(PATH) or a path. Where it
        is not there the check is not run (a note in the record, no failure).
    type: str
    default: nvbandwidth
  force:
    description: Burn in again even where the record covers the node.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.node_lock
attributes:
  check_mode:
    support: full
    details: Reads the GPUs and the record and reports whether a burn-in would run and why; runs no diagnostic.
  diff_mode:
    support: full
  idempotent:
    support: full
    details: Once a burn-in passed with the loaded driver at the level, a second run runs nothing.
notes:
  - A long or extended burn-in takes from half an hour to hours per node; run it before the node takes work (the
    gpuops.nvidia.gpu_node role runs it before the node's release).
"""

EXAMPLES = r"""
- name: Burn the node in before its first service (dcgmi diag -r 2)
  gpuops.nvidia.gpu_burn_in:
    level: medium
"""

RETURN = r"""
burn_in:
  description:
    - The node's record after this run - C(level), C(diag_level), C(verdict) (C(pass) or C(fail)), C(time),
      C(driver), C(dcgm_version), C(failures) and C(warnings) (each C(gpu), C(test), C(message)); the record found
      where nothing ran, null where none is (check mode on a node never burned in).
  returned: always
  type: dict
  sample: {level: medium, diag_level: 2, verdict: pass, time: "2026-11-29T10:40:00Z", driver: 580.95.05,
           dcgm_version: 4.6.0, failures: [], warnings: []}
bandwidth:
  description:
    - The GPU-to-GPU bandwidth check of this run - C(ran), C(note) (why it was not run), C(version) (nvbandwidth's),
      C(tests) (per test its C(status), the pairs C(checked) against a floor, the C(lowest_gbps)), C(notes); the
      failures are in the record's C(failures), each with its C(test) and C(link). In check mode, whether it would run.
      Null where nothing ran.
  returned: always
  type: dict
  sample: {ran: false, note: "nvbandwidth ('nvbandwidth') is not installed on this node: the GPU-to-GPU bandwidth
           check was not run"}
reasons:
  description: Why a burn-in runs (or would, in check mode); empty where the record covers the node.
  returned: always
  type: list
  elements: str
  sample: ["burned in with driver 570.195.03, driver 580.95.05 is loaded"]
record_path:
  description: Where the record is on the node.
  returned: always
  type: str
  sample: /var/lib/gpuops/burn-in.json
"""

import json
import os
import time

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _burn_in, _dcgm, _gpu_catalog, _nvbandwidth
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NvmlInitError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_run import GpuRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import write_atomic
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock


class GpuBurnIn(GpuRun):
    """(node lock) read the GPUs and the record -> whether a burn-in is due -> dcgmi diag -r N -> the record."""

    argument_spec = dict(
        lock_timeout=dict(type="int"),
        level=dict(type="str", required=True, choices=list(_burn_in.LEVELS)),
        dcgmi=dict(type="str", default="dcgmi"),
        nvbandwidth=dict(type="str", default="nvbandwidth"),
        force=dict(type="bool", default=False),
    )

    def lock(self):
        return module_lock(self.module, "gpu_burn_in")

    def read(self):
        try:
            facts, dummy = self.read_gpus()
        except NvmlInitError as exc:
            raise Failure("cannot read the GPUs: %s; no burn-in ran" % exc, changed=False) from exc
        path = _burn_in.record_path()
        self.result.update(record_path=path, burn_in=None, reasons=[], bandwidth=None)
        return {"facts": facts, "path": path, "record": _burn_in.read_record(path)}

    def plan(self, current):
        errors = _nvbandwidth.command_errors(self.params["nvbandwidth"])
        if errors:
            self.refuse(errors[0])
        record, driver = current["record"], current["facts"].get("driver_version") or ""
        reasons = _burn_in.reasons(record, self.params["level"], driver)
        if self.params["force"] and not reasons:
            reasons = ["a burn-in is asked for (force)"]
        self.result.update(reasons=reasons, burn_in=record if record and not record.get("error") else None)
        if not reasons:
            return None
        busy = ["GPU %d (%s)" % (g["index"], ", ".join("pid %s %s" % (p.get("pid"), p.get("name") or "")
                                                       for p in g["processes"]))
                for g in current["facts"].get("gpus") or [] if g.get("processes")]
        if busy:
            self.refuse("a burn-in needs the GPUs to themselves (its stress tests would disturb a workload), and these "
                        "run processes: %s. Drain the node's GPU work first, or burn it in before its first service"
                        % "; ".join(busy))
        self.dcgmi = _dcgm.find_dcgmi(self.module, self.params["dcgmi"])
        if self.dcgmi is None:
            self.refuse("burn-in level %s runs DCGM's diagnostic, and dcgmi (%r) is not installed on this node: "
                        "install DCGM (gpu_node_dcgm: present installs datacenter-gpu-manager-4-core) or declare no "
                        "burn-in (gpu_node_burn_in: none)"
                        % (self.params["level"], self.params["dcgmi"]))
        self.bandwidth = self.plan_bandwidth(current["facts"].get("gpus") or [])
        if self.module.check_mode:
            self.result["bandwidth"] = {"would_run": bool(self.bandwidth.get("binary")),
                                        "note": self.bandwidth.get("note")}
        self.set_diff(_text(record), "(the record of dcgmi diag -r %d%s, written after it runs)\n"
                      % (_burn_in.level_of(self.params["level"]),
                         " and nvbandwidth" if self.bandwidth.get("binary") else ""), header=current["path"])
        return reasons

    def plan_bandwidth(self, gpus):
        """{"binary": nvbandwidth's path} where the check runs, else {"ran": False, "note": why not}."""
        run, note = _nvbandwidth.plan(_burn_in.level_of(self.params["level"]), gpus, _floor_for)
        if not run:
            return {"ran": False, "note": note}
        binary = _dcgm.find_dcgmi(self.module, self.params["nvbandwidth"])
        if binary is None:
            return {"ran": False, "note": "nvbandwidth (%r) is not installed on this node: the GPU-to-GPU bandwidth "
                                          "check was not run (the burn-in's verdict is dcgmi's alone)"
                                          % self.params["nvbandwidth"]}
        return {"binary": binary}

    def run_bandwidth(self, gpus):
        """The check's part of the record (_burn_in.new_record's ``bandwidth``)."""
        if not self.bandwidth.get("binary"):
            return self.bandwidth
        parsed = _nvbandwidth.run(lambda argv, env: self.module.run_command(argv, check_rc=False,
                                                                            environ_update=env),
                                  self.bandwidth["binary"])
        if not parsed.get("ran"):
            raise Failure("nvbandwidth did not give a verdict: %s; nothing was recorded" % parsed["error"],
                          changed=False)
        found = _nvbandwidth.verdict(parsed, gpus, _floor_for)
        return {"ran": True, "version": parsed.get("version"), "tests": found["tests"], "notes": found["notes"],
                "failures": found["failures"],
                "floors": dict((g["name"], _floor_for(g["name"])) for g in gpus if _floor_for(g.get("name")))}

    def apply(self, current, changes):
        level = self.params["level"]
        parsed = _dcgm.run_diag(lambda argv: self.module.run_command(argv, check_rc=False), self.dcgmi,
                                _burn_in.level_of(level))
        if not parsed.get("ran"):
            raise Failure("dcgmi diag -r %d did not give a verdict: %s; nothing was recorded" % (
                _burn_in.level_of(level), parsed.get("error") or parsed.get("note")), changed=False)
        bandwidth = self.run_bandwidth(current["facts"].get("gpus") or [])
        record = _burn_in.new_record(parsed, level, current["facts"].get("driver_version") or "",
                                     time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     lambda result: _dcgm.describe(result, _burn_in.level_of(level)), _dcgm.failed,
                                     bandwidth=bandwidth)
        self.result["bandwidth"] = record.get("bandwidth")
        text = _text(record)
        try:
            write_atomic(self.module, current["path"], text)
            os.chmod(os.path.realpath(current["path"]), 0o644)
        except (IOError, OSError) as exc:
            raise Failure("dcgmi diag ran (verdict %s) but its record could not be written to %s: %s" % (
                record["verdict"], current["path"], exc), changed=True) from exc
        self.result["burn_in"] = record
        self.set_diff(_text(current["record"]), text, header=current["path"])
        if record["verdict"] == "fail":
            self.module.warn("the burn-in failed: %s. The node's health read blocks on it (burn_in_failure) until a "
                             "burn-in passes" % "; ".join(f["message"] for f in record["failures"]))


def _floor_for(name):
    """The catalog's bandwidth floor (GB/s) of a GPU of this NVML name, or None."""
    key = _gpu_catalog.model_key_for_name(name)
    return _gpu_catalog.nvbandwidth_floor_gbps(key) if key else None


def _text(record):
    return "" if not record else json.dumps(record, indent=2, sort_keys=True) + "\n"


def main():
    run_module(GpuBurnIn)


if __name__ == "__main__":
    main()
