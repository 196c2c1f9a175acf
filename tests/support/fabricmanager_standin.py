"""STAND-IN for NVIDIA's nv-fabricmanager on a simulated node. Not the real program.

The lab's fake Fabric Manager package (tests/support/driver_rig.py) installs ``/usr/bin/nv-fabricmanager`` as a
script that runs this file with the package's version first:

- ``fabricmanager_standin.py VERSION [-c CONFIG]``: starts the simulated Fabric Manager of the node named by
  GPUOPS_SIMULATED_ROOT (plugins/module_utils/sim/_simulator_host.start_fabric_manager: refused, with the real program's
  message and exit status 1, when the loaded driver is another version or the node has no NVSwitch), then exits 0 as
  the real daemon does once it has forked;
- ``fabricmanager_standin.py VERSION --stop``: the unit's ExecStopPost: the simulated Fabric Manager stops.

Without GPUOPS_SIMULATED_ROOT it refuses to run, so a copy on PATH never acts on this machine.
"""
import os
import sys


def _collections_path():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    for path in [os.path.join(here, ".collections")] + os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
        if path and os.path.isdir(os.path.join(path, "ansible_collections", "gpuops", "nvidia", "plugins")):
            return path
    sys.stderr.write("stand-in nv-fabricmanager: the gpuops.nvidia collection is not beside this script\n")
    sys.exit(1)


sys.path.insert(0, _collections_path())
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host as host  # noqa: E402


def main(argv):
    root = os.environ.get("GPUOPS_SIMULATED_ROOT")
    if not root:
        sys.stderr.write("stand-in nv-fabricmanager: GPUOPS_SIMULATED_ROOT is not set; refusing to run\n")
        return 1
    if not argv:
        sys.stderr.write("usage: fabricmanager_standin.py VERSION [-c CONFIG | --stop]\n")
        return 2
    version, rest = argv[0], argv[1:]
    if "--stop" in rest:
        host.stop_fabric_manager(root)
        return 0
    error = host.start_fabric_manager(root, version)
    if error:
        sys.stderr.write(error + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
