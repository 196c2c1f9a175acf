# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Boot-time re-apply of the declared MIG mode and layout (run by gpuops-mig.service).

GPU instances never survive a reboot, and Hopper and Blackwell lose MIG mode too; this script re-applies both with the
collection's own code (the module_utils the mig role puts next to it as one file, gpuops-mig-lib.json, so a copy
interrupted half-way can never leave old and new modules mixed), writes a JSON summary to stdout (the journal)
and exits 1 if any GPU is not in its declared state, so `systemctl status` shows the failure.

With a ``cdi`` entry in the config (the node declares CDI), it then writes the node's CDI spec again with cdi_spec's
own run: the MIG instances it re-created have new UUIDs, and a spec under /var/run is gone after a reboot
(docs/cdi.md). Its unit runs before containerd and kubelet, so no container starts against a stale spec.

Usage: gpuops-mig-apply.py --config /etc/gpuops/mig.json [--lib /usr/local/lib/gpuops]
The config holds the mig role's declared parameters: gpus, layout | config_file + config_name | config_name,
allow_reset, and optionally cdi (cdi_spec's spec_path, spec_dirs, device_name_strategy, nvidia_ctk_path).
"""
import argparse
import importlib.abc
import importlib.util
import json
import os
import shutil
import subprocess
import sys

PACKAGE = "ansible_collections.gpuops.nvidia.plugins.module_utils"
BUNDLE = "gpuops-mig-lib.json"


def run_command(argv):
    """argv -> (rc, stdout, stderr): what the NVML backend runs nvidia-smi with for a GPU reset (a module gives its
    AnsibleModule.run_command instead). OSError when the command cannot start."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


class BundleImporter(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports PACKAGE's modules from the bundle: {"gpu/_gpu.py": "<source>", ...}, a file's key its path below
    module_utils; the folders of those paths are packages, as PACKAGE and its parents are."""

    def __init__(self, path):
        with open(path) as handle:
            sources = json.load(handle)
        self.path = path
        self.modules = dict(("%s.%s" % (PACKAGE, name[:-3].replace("/", ".")), text)
                            for name, text in sources.items())
        parts = PACKAGE.split(".")
        self.packages = set(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        self.packages.update(name.rsplit(".", 1)[0] for name in self.modules)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.packages:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        if fullname in self.modules:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        text = self.modules.get(module.__name__)
        if text is not None:
            module.__file__ = "%s/%s.py" % (self.path, module.__name__[len(PACKAGE) + 1:].replace(".", "/"))
            exec(compile(text, module.__file__, "exec"), module.__dict__)  # pylint: disable=exec-used


class StepFailed(Exception):
    pass


class BootModule(object):
    """What cdi_spec's run needs of an AnsibleModule, at boot: its parameters, commands, atomic moves, warnings."""

    check_mode = False
    _diff = False

    def __init__(self, params):
        self.params = dict({"state": "present", "backup": False, "nvidia_ctk_path": None}, **params)
        self.warnings = []

    def run_command(self, argv):
        return run_command(argv)

    def warn(self, msg):
        self.warnings.append(msg)

    def atomic_move(self, src, dest):
        os.replace(src, dest)

    @staticmethod
    def get_bin_path(name, opt_dirs=()):
        for directory in [None] + list(opt_dirs):
            found = shutil.which(name) if directory is None else shutil.which(name, path=directory)
            if found:
                return found
        return None


def write_cdi_spec(params):
    """cdi_spec's run for the GPUs as they are now; a summary entry, or StepFailed (a live file it cannot read:
    _live_file's LiveFileError, a ValueError, which main reports with the same message)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi import CdiError
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi_run import CdiSpecRun
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import ToolNotFound, find_tool

    module = BootModule(params)
    try:
        ctk = find_tool(module.get_bin_path, module.params, "nvidia_ctk_path", "nvidia-ctk")
    except ToolNotFound as exc:
        raise StepFailed(str(exc))
    if ctk is None:
        raise StepFailed("nvidia-ctk not found: no CDI spec written")
    try:
        result = CdiSpecRun(module, ctk).run()
    except CdiError as exc:     # the run's failure (cdi_spec's base reports it with its fields)
        raise StepFailed(exc.msg) from exc
    return {"spec_path": result["spec_path"], "action": result["action"], "device_count": result["device_count"],
            "warnings": module.warnings}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--lib", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args(argv)
    sys.meta_path.insert(0, BundleImporter(os.path.join(args.lib, BUNDLE)))
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import plan_layout
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import (
        apply_layout_plans, apply_mode, busy_clear_problem, mode_step, resolve_from_params)

    with open(args.config) as handle:
        cfg = json.load(handle)
    summary = {"mode": [], "layout": [], "errors": []}
    try:
        backend = get_backend(run_command=run_command)
        gpus = backend.read_all()["gpus"]
        resolved = resolve_from_params(gpus, cfg)
        by_index = dict((g["index"], g) for g in gpus)
        for index in sorted(resolved["gpus"]):
            want = resolved["gpus"][index]["mig_enabled"]
            problem = busy_clear_problem(by_index[index], mode_step(by_index[index], want, False))
            if problem:
                summary["errors"].append(problem)
                continue
            entry = apply_mode(backend, by_index[index], want, bool(cfg.get("allow_reset", True)))
            summary["mode"].append({k: entry[k] for k in ("index", "desired", "actions", "after", "reason")})
            if entry["pending"]:
                summary["errors"].append("GPU %d: MIG mode %s not active: %s" % (index, entry["desired"], entry["reason"]))
        gpus = backend.read_all()["gpus"]
        ready = dict(resolved)
        enabled_now = set(g["index"] for g in gpus if g.get("mig_mode_current") == "Enabled")
        # lay out only GPUs whose mode is now what the layout declares (the others are reported above)
        ready["gpus"] = dict((i, s) for i, s in resolved["gpus"].items() if s["mig_enabled"] == (i in enabled_now))
        plans = plan_layout(gpus, ready, force=False)
        for entry in apply_layout_plans(backend, plans):
            summary["layout"].append({"index": entry["index"], "created": len(entry["created"]),
                                      "destroyed": len(entry["destroyed"]),
                                      "mig_devices": entry["after"]["mig_devices"]})
    except (MigLayoutError, NvmlError, GpuBackendError, IOError, OSError, ValueError) as exc:
        summary["errors"].append("%s: %s" % (type(exc).__name__, exc))
    if cfg.get("cdi"):
        try:
            summary["cdi"] = write_cdi_spec(cfg["cdi"])
        except (StepFailed, IOError, OSError, ValueError) as exc:
            summary["errors"].append("CDI spec: %s" % exc)
    print(json.dumps(summary, sort_keys=True))
    if summary["errors"]:
        sys.stderr.write("gpuops-mig: %s\n" % "; ".join(summary["errors"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
