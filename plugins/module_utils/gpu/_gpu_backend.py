# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The choice of GPU backend for a run: the simulator when GPUOPS_SIMULATED_GPUS names its state file, else the real
NVML backend. Both backends implement _gpu's interface and import it; only this file imports them, so the import
graph stays one-way (_gpu imports neither backend). It imports the chosen one only, when a run asks for it: a
simulated run never loads pynvml, a real one never loads the simulator."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    ENV_HOST, ENV_RACK, ENV_ROOT, ENV_SHAPE, ENV_STATE)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import missing_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._pci import bus_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._xid import read_kernel_log_timed

BOOT_ID = "proc/sys/kernel/random/boot_id"


def module_runner(module):
    """The ``run_command`` a module gives the backend: AnsibleModule.run_command on an argument list, with its exit
    status left to the caller and a program that cannot start raised as OSError (``handle_exceptions=False``), as
    get_backend's contract says. AnsibleModule's default instead ends the module ("Error executing command."), so a
    node without journalctl (a container, a minimal image) failed the whole health read where the kernel-log reader
    (_xid.read_kernel_log) goes on to dmesg - found on a lent GPU machine without systemd."""
    def run(argv):
        return module.run_command(argv, check_rc=False, handle_exceptions=False)
    return run


def get_backend(run_command=None):
    """The simulator when GPUOPS_SIMULATED_GPUS is set, else the real NVML backend. ``run_command`` (argv -> (rc,
    stdout, stderr), OSError when the command cannot start) runs nvidia-smi for a GPU reset on real GPUs; without it
    the real backend refuses to reset."""
    state_path = os.environ.get(ENV_STATE)
    if state_path:
        from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
        # GPUOPS_SIMULATED_ROOT / GPUOPS_SIMULATED_HOST: the simulated node below NVML (_simulator_host).
        return SimulatedBackend(state_path, shape=os.environ.get(ENV_SHAPE) or None,
                                root=os.environ.get(ENV_ROOT) or None, host_options=os.environ.get(ENV_HOST) or None,
                                rack=os.environ.get(ENV_RACK) or None)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._nvml_backend import NvmlBackend
    return NvmlBackend(run_command=run_command)


def read_facts(run_command=None, health=False):
    """gpu_info's facts of every GPU, read once through the chosen backend, which is closed afterwards
    (GpuBackendError or NvmlError as the backend raises them). With ``health``, (facts, the backend's
    ``read_health()``) from the same session (``run_command`` then also reads the kernel log on real GPUs); a GPU
    NVML reports lost is then left out of the facts' "gpus" and named in "lost_gpus", and a GPU the PCI bus shows that
    NVML does not list is named in "missing_gpus" ([{"bus_id", "name", "bound_driver"}]); each is a finding of the
    health read."""
    backend = get_backend(run_command=run_command)
    try:
        facts = backend.read_all(skip_lost=health)
        if not health:
            return facts
        read = backend.read_health()
        facts["missing_gpus"] = missing_gpus(read)
        return facts, read
    finally:
        backend.close()


class HostReader(object):
    """What a health sweep reads of a real node besides NVML, without starting NVML (which may be what hangs): this
    boot's kernel log with timestamps and the boot id, and the GPUs PCI sysfs shows."""

    def __init__(self, run_command=None, root="/"):
        self.run_command = run_command
        self.root = root

    def read_kernel_log_timed(self):
        """_xid.read_kernel_log_timed's answer and "boot_id" (R/proc/sys/kernel/random/boot_id; None when it cannot be
        read)."""
        answer = read_kernel_log_timed(self.run_command)
        try:
            with open(os.path.join(self.root, BOOT_ID)) as handle:
                answer["boot_id"] = handle.read().strip() or None
        except (IOError, OSError):
            answer["boot_id"] = None
        return answer

    def read_pci(self):
        return bus_gpus(self.root)

    def close(self):
        pass


def get_host_reader(run_command=None):
    """The reader of the node below NVML for a health sweep (kernel log, boot id, PCI bus): the simulator where
    GPUOPS_SIMULATED_GPUS is set (its NVML starts only at a GPU read), else ``HostReader``."""
    if os.environ.get(ENV_STATE):
        return get_backend(run_command=run_command)
    return HostReader(run_command=run_command)
