"""Benchmark: how long gpu_info takes.

- simulated: an 8 x H200 node laid out as 7 x 1g.18gb per GPU (56 MIG devices);
- real (--real, on a GPU host): the host's GPUs through NVML.
For each: the device layer's read_all() in-process (median of N), and the whole module through
`ansible localhost -m gpuops.nvidia.gpu_info` (median of M wall-clock runs, Ansible's start-up included).
Prints a Markdown table; --out FILE also writes it.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, ROOT)

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend  # noqa: E402
from tests.support.ansible_run import BIN, ansible_env  # noqa: E402


def build_56_mig_devices(path):
    sim = SimulatedBackend(path, shape="hgx-h200")
    for index in range(8):
        sim.set_mig_mode(index, True)
        for start in range(7):
            gi = sim.create_gpu_instance(index, 19, start)
            sim.create_compute_instance(index, gi, 0)
    facts = sim.read_all()
    assert sum(len(g["mig_devices"]) for g in facts["gpus"]) == 56
    return facts


def time_in_process(repeat):
    samples = []
    for _round in range(repeat):
        t0 = time.perf_counter()
        backend = get_backend()
        facts = backend.read_all()
        backend.close()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), min(samples), facts


def time_module(repeat, env):
    samples = []
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-m", "gpuops.nvidia.gpu_info",
           "-e", "ansible_python_interpreter=%s" % sys.executable]
    for _round in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=ansible_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        samples.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit("gpu_info failed: %s %s" % (proc.stdout[-2000:], proc.stderr[-2000:]))
    return statistics.median(samples), min(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--real", action="store_true", help="benchmark the real GPUs of this host")
    parser.add_argument("--repeat", type=int, default=20, help="in-process repetitions")
    parser.add_argument("--module-repeat", type=int, default=5, help="ansible module repetitions")
    parser.add_argument("--out", help="also write the Markdown table here")
    args = parser.parse_known_args()[0]

    env = {}
    if args.real:
        os.environ.pop("GPUOPS_SIMULATED_GPUS", None)
        label = "real GPUs (NVML)"
    else:
        tmp = tempfile.mkdtemp(prefix="gpuops-bench-")
        path = os.path.join(tmp, "state.json")
        build_56_mig_devices(path)
        os.environ["GPUOPS_SIMULATED_GPUS"] = path
        env = {"GPUOPS_SIMULATED_GPUS": path}
        label = "simulated 8 x H200, 56 MIG devices"
    median, best, facts = time_in_process(args.repeat)
    mod_median, mod_best = time_module(args.module_repeat, env)
    gpus = facts["gpus"]
    lines = [
        "| backend | GPUs | MIG devices | read_all median (ms) | read_all best (ms) | gpu_info via ansible median (s) | best (s) |",
        "|---|---|---|---|---|---|---|",
        "| %s | %d (%s) | %d | %.1f | %.1f | %.2f | %.2f |" % (
            label, len(gpus), ", ".join(sorted(set(g["name"] for g in gpus))),
            sum(len(g["mig_devices"]) for g in gpus), median * 1000, best * 1000, mod_median, mod_best),
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
