"""STAND-IN for NVIDIA's nvidia-persistenced on a simulated node. Not the real program.

The lab's fake nvidia-compute-utils package (tests/support/driver_rig.py) installs ``/usr/bin/nvidia-persistenced`` as
a script that runs this file with the package's version first:

- ``persistenced_standin.py VERSION [--user U] [--verbose] [--persistence-mode | --no-persistence-mode]``: starts the
  simulated daemon of the node named by GPUOPS_SIMULATED_ROOT (plugins/module_utils/sim/_simulator_host.start_persistenced:
  refused, exit status 1, without a loaded driver) with persistence mode on unless ``--no-persistence-mode`` is the
  last of the two (the real daemon's default is on: NVIDIA/nvidia-persistenced at 580.95.05, option-table.h), then
  exits 0 as the real daemon does once it has forked;
- ``persistenced_standin.py VERSION --gpuops-standin-stop``: the fake unit's ExecStopPost: the simulated daemon stops.

Without GPUOPS_SIMULATED_ROOT it refuses to run, so a copy on PATH never acts on this machine.
"""
import os
import sys

from fabricmanager_standin import _collections_path  # noqa: E402  (the same directory: the collection beside it)

sys.path.insert(0, _collections_path())
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host as host  # noqa: E402


def main(argv):
    root = os.environ.get("GPUOPS_SIMULATED_ROOT")
    if not root:
        sys.stderr.write("stand-in nvidia-persistenced: GPUOPS_SIMULATED_ROOT is not set; refusing to run\n")
        return 1
    if not argv:
        sys.stderr.write("usage: persistenced_standin.py VERSION [OPTIONS | --gpuops-standin-stop]\n")
        return 2
    rest = argv[1:]
    if "--gpuops-standin-stop" in rest:
        host.stop_persistenced(root)
        return 0
    mode = True
    for word in rest:
        if word in ("--persistence-mode", "--no-persistence-mode"):
            mode = word == "--persistence-mode"
    error = host.start_persistenced(root, mode)
    if error:
        sys.stderr.write(error + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
