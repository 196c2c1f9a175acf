# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cdi_spec's run: read the GPUs, generate and check a candidate in private, compare, replace, verify the node's
view, record (PRIVATE to gpuops.nvidia).

nvidia-ctk writes its output through a temporary file in the output's own directory and renames it (atomic, but
then the spec directory holds a spec nobody checked), so it is never pointed at a spec directory: it writes into a
private directory (mode 0700, removed afterwards), where ``cdi list`` reads the candidate alone. Only a candidate that
lists exactly the GPUs' devices reaches the live path, through a hidden temporary file and a rename. The decisions
are _cdi's (pure); the tools run through _nvidia_ctk's runner (argument lists, never a shell string).
Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi import (
    CdiError, device_count, expected_devices, has_gpu_kind, is_empty_spec_error, listing_problems, parse_list,
    stamp_inputs, stamp_path, stamp_text)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import read_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError, read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    binary_identity, file_digest, read_live, write_atomic)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._nvidia_ctk import NvidiaCtkRunner


class CdiSpecRun(object):
    """One run of cdi_spec on the node: ``run()`` returns the module's result, or raises CdiError (_live_file's
    LiveFileError for a live file it cannot read): cdi_spec's base and the MIG boot script report them."""

    def __init__(self, module, ctk_path):
        self.module = module
        self.params = module.params
        self.path = self.params["spec_path"]
        self.runner = NvidiaCtkRunner(module.run_command, ctk_path)
        self.ctk_path = ctk_path

    def fail(self, msg, **extra):
        """A CdiError (not _module_run's Failure: the MIG boot script runs this file without ansible-core), with
        ``changed=False`` and ``spec_path`` besides ``extra``."""
        raise CdiError(msg, changed=False, spec_path=self.path, **extra)

    def refuse(self, msg, **extra):
        """Fail before any change, in _module_run's wording (not imported: the MIG boot script runs this file without
        ansible-core): "<msg>; nothing changed"."""
        self.fail("%s; nothing changed" % msg.rstrip().rstrip(".;"), **extra)

    # -- read ---------------------------------------------------------------------------------------
    def read_gpus(self):
        try:
            return read_facts()
        except GpuBackendError as exc:
            self.refuse(str(exc))
        except NvmlError as exc:
            self.refuse("NVML error %s while reading GPUs: %s" % (exc.name, exc))

    def foreign_specs(self):
        """Other spec files of kind nvidia.com/gpu in the spec directories (they shadow ours, or conflict with it)."""
        out = []
        mine = os.path.realpath(self.path)
        for directory in self.params["spec_dirs"]:
            for path in sorted(glob.glob(os.path.join(directory, "*.yaml")) + glob.glob(os.path.join(directory, "*.json"))
                               + glob.glob(os.path.join(directory, ".*.yaml")) + glob.glob(os.path.join(directory, ".*.json"))):
                if os.path.realpath(path) == mine or not os.path.isfile(path):
                    continue
                try:
                    text = read_text(path, "CDI spec")
                except InputFileError:
                    continue
                if has_gpu_kind(text):
                    out.append(path)
        return out

    # -- the candidate ------------------------------------------------------------------------------
    def candidate(self, expected):
        """(text of the spec nvidia-ctk generates for the GPUs now, device names it lists); (None, []) when the GPUs
        leave it no device (nvidia-ctk refuses an empty spec). A CdiError (``refuse``) on any other failure, or when the
        listing is not exactly what the GPUs have."""
        name = os.path.basename(self.path)
        with self.runner.private_directory() as tmp:
            output = os.path.join(tmp, name)
            args = ["cdi", "generate", "--output=%s" % output]
            args += ["--device-name-strategy=%s" % s for s in self.params["device_name_strategy"]]
            rc, out, err = self.runner.command(*args)
            if rc != 0:
                if is_empty_spec_error(err or out) and device_count(expected) == 0:
                    return None, []
                self.refuse("`nvidia-ctk cdi generate` failed (exit %s): %s" % (rc, (err or out).strip()))
            if not os.path.isfile(output):
                self.refuse("`nvidia-ctk cdi generate` exited 0 but wrote no %s" % name)
            text = read_text(output, "generated CDI spec")
            rc, out, err = self.runner.command("cdi", "list", "--spec-dir=%s" % tmp)
            names, problems = parse_list(out, err)
            if rc != 0 or problems:
                self.refuse("the generated CDI spec does not load (`nvidia-ctk cdi list` exit %s): %s"
                            % (rc, "; ".join(problems) or (err or out).strip()))
            wrong = listing_problems(names, expected)
            if wrong:
                self.refuse("the generated CDI spec does not list the GPUs' devices as they are now: %s"
                            % "; ".join(wrong), devices=names)
            return text, names

    # -- the node's view after a write ------------------------------------------------------------
    def node_view_problems(self, expected):
        args = ["cdi", "list"] + ["--spec-dir=%s" % d for d in self.params["spec_dirs"]]
        rc, out, err = self.runner.command(*args)
        names, problems = parse_list(out, err)
        mine = [p for p in problems if os.path.basename(self.path) in p]
        return (["exit %s" % rc] if rc != 0 else []) + mine + listing_problems(names, expected)

    # -- the run: read -> plan -> finish (cdi_spec's hooks; run() for the MIG boot script) ----------------------
    def run(self):
        current = self.read()
        result = self.plan(current)
        self.finish(current, result)
        return result

    def read(self):
        """The GPUs, the devices they should have, the candidate nvidia-ctk generates for them, and the live spec."""
        params, path = self.params, self.path
        facts = self.read_gpus()
        present = params["state"] == "present"
        expected = expected_devices(facts["gpus"], params["device_name_strategy"]) if present else \
            {"names": [], "counted": {}, "devices": 0}
        warnings = []
        if present:
            others = self.foreign_specs()
            if others:
                self.refuse("other CDI specs of kind nvidia.com/gpu are in the spec directories: %s. Two specs of one"
                            " kind conflict (the same device in one directory is dropped from both; in two directories"
                            " the later one wins), so the spec at %s would not be what containers get. If the file is"
                            " /var/run/cdi/nvidia.yaml, NVIDIA's nvidia-cdi-refresh service (toolkit 1.18+) writes it:"
                            " set spec_path to it (this module then keeps it true after MIG changes), or disable the"
                            " service (systemctl disable --now nvidia-cdi-refresh.path nvidia-cdi-refresh.service)"
                            % (", ".join(others), path))
            desired, names = self.candidate(expected)
            if desired is None:
                warnings.append("no GPU device to describe (every GPU is in MIG mode with no MIG device): nvidia-ctk"
                                " writes no spec for that, so %s is removed where it exists" % path)
        else:
            desired, names = None, []
        live = read_live(path, "spec_path")
        return dict(facts=facts, expected=expected, desired=desired, names=names, live=live, warnings=warnings)

    def plan(self, current):
        """The module's result: what is to be done to the live spec (``action``), with the diff in diff mode."""
        path, desired, live = self.path, current["desired"], current["live"]
        if live == desired:
            action = "none"
        else:
            action = "remove" if desired is None else ("create" if live is None else "replace")
        result = {"changed": action != "none", "spec_path": path, "devices": sorted(current["names"]),
                  "device_count": device_count(current["expected"]) if desired is not None else 0, "action": action,
                  "nvidia_ctk": self.ctk_path}
        if self.module._diff:
            result["diff"] = {"before_header": path, "after_header": path, "before": live or "",
                              "after": desired or ""}
        return result

    def finish(self, current, result):
        """Outside check mode: the change, then the node's view verified and the record written (also when nothing
        changed); the warnings."""
        path, desired, expected, action = self.path, current["desired"], current["expected"], result["action"]
        if not self.module.check_mode:
            self.apply(action, desired, result)
            if desired is not None:
                problems = self.node_view_problems(expected)
                if problems:
                    raise CdiError(
                        "%s %s, but the node's CDI view (`nvidia-ctk cdi list` over %s) is not the GPUs' devices:"
                        " %s" % (path, "was written" if action != "none" else "is as generated",
                                 ", ".join(self.params["spec_dirs"]), "; ".join(problems)),
                        changed=action != "none", spec_path=path)
            self.record(current["facts"], expected, desired)
        for warning in current["warnings"]:
            self.module.warn(warning)

    def apply(self, action, desired, result):
        path = self.path
        if action != "none" and self.params["backup"] and os.path.exists(path):
            result["backup_file"] = self.module.backup_local(path)
        if action in ("create", "replace"):
            write_atomic(self.module, path, desired)
            os.chmod(os.path.realpath(path), 0o644)
            if read_live(path, "written spec") != desired:
                self.fail("%s does not read back as written" % path)
        elif action == "remove":
            os.unlink(path)

    def record(self, facts, expected, desired):
        """The record gpu_node_plan compares (beside the spec); removed with the spec."""
        record = stamp_path(self.path)
        if desired is None and self.params["state"] == "absent":
            if os.path.lexists(record):
                os.unlink(record)
            return
        inputs = stamp_inputs(self.params, expected, facts.get("driver_version"), binary_identity(self.ctk_path))
        text = stamp_text(inputs, file_digest(self.path))
        if read_live(record, "CDI spec record") != text:
            write_atomic(self.module, record, text)
