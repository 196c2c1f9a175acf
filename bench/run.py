"""Run every benchmark in bench/ and print their tables (`make bench`)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = ["gpu_info_bench.py", "mig_disruption.py"]

if __name__ == "__main__":
    status = 0
    for name in BENCHES:
        print("## %s" % name)
        status |= subprocess.call([sys.executable, os.path.join(HERE, name)] + sys.argv[1:])
    sys.exit(status)
