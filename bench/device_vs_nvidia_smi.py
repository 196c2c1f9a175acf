"""Benchmark: the same GPU facts read in-process through NVML (the device layer's read_all()) versus by shelling out
to `nvidia-smi`, as many tools do. NEEDS A GPU HOST: run with --real there (without it this prints that and exits 0).

nvidia-smi side, for the facts gpu_info returns:
- `--query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap,compute_mode,persistence_mode,mig.mode.current,
  mig.mode.pending,driver_version --format=csv,noheader` (one call);
- `--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader` (processes);
- `mig -lgip` (GPU-instance profiles and placements: `mig -lgipp`), `mig -lgi`, `mig -lci` when any GPU has MIG on;
- and, for comparison, `nvidia-smi -q -x` (everything as XML in one call).
Medians of --repeat runs; prints a Markdown table.

Usage: python bench/device_vs_nvidia_smi.py --real [--repeat N]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

QUERY_GPU = ("index,uuid,name,pci.bus_id,memory.total,compute_cap,compute_mode,persistence_mode,mig.mode.current,"
             "mig.mode.pending,driver_version")


def median_time(fn, repeat):
    samples = []
    for _i in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), min(samples)


def smi(smi_path, *args):
    proc = subprocess.run([smi_path] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    return proc.returncode, proc.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="run on this host's GPUs (needs NVIDIA driver + GPU)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--nvidia-smi", default=shutil.which("nvidia-smi") or "/usr/bin/nvidia-smi")
    args = parser.parse_known_args()[0]
    if not args.real:
        print("device_vs_nvidia_smi: needs a GPU host; run `python bench/device_vs_nvidia_smi.py --real` on one "
              "(skipped).")
        return 0
    os.environ.pop("GPUOPS_SIMULATED_GPUS", None)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend

    def nvml_read():
        backend = get_backend()
        try:
            return backend.read_all()
        finally:
            backend.close()

    facts = nvml_read()
    mig_on = any(g.get("mig_mode_current") == "Enabled" for g in facts["gpus"])
    commands = [("--query-gpu (one call)", ["--query-gpu=" + QUERY_GPU, "--format=csv,noheader"]),
                ("--query-compute-apps", ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                                          "--format=csv,noheader"]),
                ("mig -lgip + -lgipp", None)]
    if mig_on:
        commands += [("mig -lgi + -lci", None)]

    def smi_all():
        smi(args.nvidia_smi, "--query-gpu=" + QUERY_GPU, "--format=csv,noheader")
        smi(args.nvidia_smi, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader")
        smi(args.nvidia_smi, "mig", "-lgip")
        smi(args.nvidia_smi, "mig", "-lgipp")
        if mig_on:
            smi(args.nvidia_smi, "mig", "-lgi")
            smi(args.nvidia_smi, "mig", "-lci")

    rows = [("in-process NVML read_all() (all facts)", median_time(nvml_read, args.repeat))]
    rows.append(("nvidia-smi, the same facts (%d calls)" % (6 if mig_on else 4), median_time(smi_all, args.repeat)))
    for label, argv in commands:
        if argv is None:
            continue
        rows.append(("nvidia-smi " + label, median_time(lambda a=argv: smi(args.nvidia_smi, *a), args.repeat)))
    rows.append(("nvidia-smi -q -x (everything, one call)",
                 median_time(lambda: smi(args.nvidia_smi, "-q", "-x"), args.repeat)))
    name = facts["gpus"][0]["name"] if facts["gpus"] else "-"
    print("GPUs: %d x %s, driver %s, MIG on: %s" % (len(facts["gpus"]), name, facts.get("driver_version"), mig_on))
    print("| read | median ms | min ms |")
    print("|---|---|---|")
    for label, (med, low) in rows:
        print("| %s | %.1f | %.1f |" % (label, med * 1000, low * 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
