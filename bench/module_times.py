"""Benchmark: gpu_info and mig_layout module time on simulated 8-GPU nodes (dgx-a100-40gb, hgx-h200).

Cases per machine (MIG enabled on all 8 GPUs before timing):
- gpu_info on the node with no instances, and with all-balanced applied (32 MIG devices);
- mig_layout all-balanced from no instances (a full layout: 32 GPU + 32 compute instances created);
- mig_layout all-balanced again (no-op: read + plan, no mutating call);
- mig_layout all-balanced -> all-1g (a relayout keeping what it can).
Each is timed two ways: the module's main() in this process (the module's own work: device reads, planning,
simulated calls; median of --repeat) and the whole `ansible localhost -m ...` command (Ansible's start-up, module
transfer and Python start included; median of --module-repeat). Every timed run starts from a copy of the same
prepared state file. Prints a Markdown table.

Usage: python bench/module_times.py [--repeat N] [--module-repeat M]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, ROOT)

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_info, mig_layout  # noqa: E402
from tests.support.ansible_run import BIN, ansible_env  # noqa: E402
from tests.support.modrun import run_main_ok  # noqa: E402

MACHINES = ["dgx-a100-40gb", "hgx-h200"]


def prepare(tmp, shape):
    """Two state files: MIG on, no instances ('empty'); MIG on, all-balanced applied ('balanced')."""
    empty = os.path.join(tmp, "%s-empty.json" % shape)
    sim = SimulatedBackend(empty, shape=shape)
    for index in range(8):
        sim.set_mig_mode(index, True)
        if sim.read_gpu(index)["mig_mode_current"] != "Enabled":
            sim.reset_gpu(index)
    sim.clear_call_log()
    balanced = os.path.join(tmp, "%s-balanced.json" % shape)
    shutil.copyfile(empty, balanced)
    os.environ["GPUOPS_SIMULATED_GPUS"] = balanced
    run_main_ok(mig_layout.main, {"config_name": "all-balanced"})
    SimulatedBackend(balanced).clear_call_log()
    return {"empty": empty, "balanced": balanced}


def time_inproc(source, work, module, args, repeat):
    samples = []
    for _i in range(repeat):
        shutil.copyfile(source, work)
        os.environ["GPUOPS_SIMULATED_GPUS"] = work
        t0 = time.perf_counter()
        res = run_main_ok(module.main, args)
        samples.append(time.perf_counter() - t0)
    calls = [e for e in SimulatedBackend(work).raw_state()["call_log"] if "call" in e]
    return statistics.median(samples), len(calls), res


def time_ansible(source, work, module, args, repeat):
    samples = []
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-m", "gpuops.nvidia.%s" % module,
           "-e", "ansible_python_interpreter=%s" % sys.executable]
    if args:
        cmd += ["-a", json.dumps(args)]
    for _i in range(repeat):
        shutil.copyfile(source, work)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=ansible_env({"GPUOPS_SIMULATED_GPUS": work}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        samples.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit("%s failed: %s %s" % (module, proc.stdout[-2000:], proc.stderr[-2000:]))
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="in-process repetitions (median)")
    parser.add_argument("--module-repeat", type=int, default=3, help="ansible command repetitions (median)")
    args = parser.parse_known_args()[0]
    tmp = tempfile.mkdtemp(prefix="gpuops-module-times-")
    cases = [
        ("gpu_info, no instances", "empty", gpu_info, "gpu_info", {}),
        ("gpu_info, 32 MIG devices", "balanced", gpu_info, "gpu_info", {}),
        ("mig_layout all-balanced, full layout from empty", "empty", mig_layout, "mig_layout",
         {"config_name": "all-balanced"}),
        ("mig_layout all-balanced, no-op", "balanced", mig_layout, "mig_layout", {"config_name": "all-balanced"}),
        ("mig_layout all-balanced -> all-1g", "balanced", mig_layout, "mig_layout", {"config_name": "all-1g"}),
    ]
    header = ("machine", "case", "mutating calls", "module in-process (ms, median)",
              "`ansible localhost -m` (s, median)")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for shape in MACHINES:
        states = prepare(tmp, shape)
        work = os.path.join(tmp, "%s-work.json" % shape)
        for label, start, module, name, margs in cases:
            inproc, calls, _res = time_inproc(states[start], work, module, margs, args.repeat)
            whole = time_ansible(states[start], work, name, margs, args.module_repeat)
            print("| %s | %s | %d | %.1f | %.2f |" % (shape, label, calls, inproc * 1000, whole))
    os.environ.pop("GPUOPS_SIMULATED_GPUS", None)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
