"""Run every benchmark in bench/ and print their tables (`make bench`)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# module_times: simulated 8-GPU nodes; device_vs_nvidia_smi: needs --real on a GPU host (skips otherwise);
# fleet: site.yml over simulated nodes, 1 and 10 by default (--nodes, --gpus-per-node 1,2,4,8, --issue8, --out DIR).
BENCHES = ["gpu_info_bench.py", "module_times.py", "mig_disruption.py", "device_vs_nvidia_smi.py", "fleet.py"]

if __name__ == "__main__":
    status = 0
    for name in BENCHES:
        print("## %s" % name)
        status |= subprocess.call([sys.executable, os.path.join(HERE, name)] + sys.argv[1:])
    sys.exit(status)
