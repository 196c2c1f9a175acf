# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The base of a module that reads the node's GPUs (PRIVATE to gpuops.nvidia).

``GpuRun`` is a ``_module_run.ModuleRun`` with ``read_gpus()``: the GPUs' facts, and on request their health read,
in one session of the run's backend (the simulator or NVML: _gpu_backend.read_facts), with one wording of what went
wrong. It lives beside the GPU layer, not in _module_run, so that a module that never reads GPUs does not carry the
backends in its payload (ansible-core sends a module every file it imports, also inside a function).
Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError, NvmlInitError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import module_runner, read_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, ModuleRun


def nvml_failure(exc):
    """The one wording of an NVML error while the GPUs are read."""
    return Failure("NVML error %s while reading GPUs: %s" % (exc.name, exc))


class GpuRun(ModuleRun):
    """A module run that reads the GPUs through ``read_gpus`` (from ``read``)."""

    def read_gpus(self, health=False):
        """(facts, health read): gpu_info's facts of every GPU and, with ``health``, the backend's ``read_health()``
        from the same session (else None); the kernel log is read through the module's run_command. With ``health``
        a GPU NVML reports lost is left out of the facts' "gpus" and named in "lost_gpus", and a GPU the PCI bus
        shows that NVML does not list in "missing_gpus" (each is a finding of the health read); without it, a lost
        GPU fails the read. NVML that cannot start (NvmlInitError: no driver yet, a version mismatch) is raised for
        the module to decide; any other backend or NVML error is a Failure."""
        try:
            read = read_facts(run_command=module_runner(self.module), health=health)
        except NvmlInitError:
            raise
        except GpuBackendError as exc:
            raise Failure(str(exc)) from exc
        except NvmlError as exc:
            raise nvml_failure(exc) from exc
        return read if health else (read, None)
