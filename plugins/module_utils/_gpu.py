# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one interface over a host's GPUs, and the choice of backend.

Two backends implement `GpuBackend`:
- `_nvml_backend.NvmlBackend`: real GPUs through pynvml (the `nvidia-ml-py` package);
- `_simulator.SimulatedBackend`: simulated GPUs kept in the JSON file named by GPUOPS_SIMULATED_GPUS.

Both raise the same errors: `NvmlError` subclasses carrying NVML's return code (the real backend converts
pynvml's NVMLError into them), and `GpuBackendError` for problems outside NVML (package missing, no driver,
unreadable state file). Module code therefore has one error path.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

ENV_STATE = "GPUOPS_SIMULATED_GPUS"
ENV_SHAPE = "GPUOPS_SIMULATED_MACHINE"

# NVML return codes (nvml.h nvmlReturn_t) and the names this collection reports them by.
NVML_ERROR_NAMES = {
    1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED", 10: "TIMEOUT", 11: "IRQ_ISSUE", 12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND", 14: "CORRUPTED_INFOROM", 15: "GPU_IS_LOST", 16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM", 18: "LIB_RM_VERSION_MISMATCH", 19: "IN_USE", 20: "MEMORY",
    21: "NO_DATA", 22: "VGPU_ECC_NOT_SUPPORTED", 23: "INSUFFICIENT_RESOURCES", 999: "UNKNOWN",
}
NVML_ERROR_CODES = dict((v, k) for k, v in NVML_ERROR_NAMES.items())
NVML_SUCCESS = 0

# nvmlComputeMode_t; EXCLUSIVE_THREAD (1) is "Support Removed" in nvml.h and is not offered.
COMPUTE_MODES = {"Default": 0, "Exclusive_Process": 3, "Prohibited": 2}
COMPUTE_MODE_NAMES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
MIG_MODE_NAMES = {0: "Disabled", 1: "Enabled"}


class GpuBackendError(Exception):
    """A problem outside NVML: a missing package, no driver, an unreadable or corrupt state file."""


class NvmlError(Exception):
    """An NVML call failed with `code`; `name` is NVML's name for it (IN_USE, INSUFFICIENT_RESOURCES...)."""

    code = 999

    def __init__(self, message=None, code=None):
        if code is not None:
            self.code = code
        self.name = NVML_ERROR_NAMES.get(self.code, "UNKNOWN")
        super(NvmlError, self).__init__(message or self.name)

    @staticmethod
    def for_code(code, message=None):
        cls = _ERROR_CLASSES.get(code)
        if cls is None:
            return NvmlError(message, code=code)
        return cls(message)

    @staticmethod
    def for_name(name, message=None):
        if name not in NVML_ERROR_CODES:
            raise ValueError("unknown NVML error %r; valid: %s" % (name, ", ".join(sorted(NVML_ERROR_CODES))))
        return NvmlError.for_code(NVML_ERROR_CODES[name], message)


_ERROR_CLASSES = {}


def _make_error_class(code, name):
    camel = "".join(part.capitalize() for part in name.split("_"))
    cls = type("Nvml" + camel, (NvmlError,), {"code": code})
    _ERROR_CLASSES[code] = cls
    return cls


NvmlInvalidArgument = _make_error_class(2, "INVALID_ARGUMENT")
NvmlNotSupported = _make_error_class(3, "NOT_SUPPORTED")
NvmlNoPermission = _make_error_class(4, "NO_PERMISSION")
NvmlNotFound = _make_error_class(6, "NOT_FOUND")
NvmlDriverNotLoaded = _make_error_class(9, "DRIVER_NOT_LOADED")
NvmlLibraryNotFound = _make_error_class(12, "LIBRARY_NOT_FOUND")
NvmlResetRequired = _make_error_class(16, "RESET_REQUIRED")
NvmlInUse = _make_error_class(19, "IN_USE")
NvmlInsufficientResources = _make_error_class(23, "INSUFFICIENT_RESOURCES")
NvmlUnknown = _make_error_class(999, "UNKNOWN")


class GpuBackend(object):
    """What every backend offers. Reads return plain dicts (the gpu_info facts shape); mutations change one
    thing on one GPU and raise NvmlError on failure, leaving the GPU as it was."""

    kind = None

    def read_all(self):
        """{'backend', 'driver_version', 'cuda_driver_version', 'gpus': [gpu facts...]}"""
        raise NotImplementedError

    def read_gpu(self, index):
        raise NotImplementedError

    def set_mig_mode(self, index, enabled):
        """Request MIG mode; returns NVML's activation status (0, or IN_USE / RESET_REQUIRED codes).
        Callers must re-read current/pending mode: a zero status does not mean the mode is active."""
        raise NotImplementedError

    def reset_gpu(self, index):
        raise NotImplementedError

    def create_gpu_instance(self, index, profile_id, start):
        """Create a GI of `profile_id` at memory-slice `start`; returns its GI id."""
        raise NotImplementedError

    def destroy_gpu_instance(self, index, gi_id):
        raise NotImplementedError

    def create_compute_instance(self, index, gi_id, ci_profile_id):
        """Create a CI of `ci_profile_id` inside GI `gi_id` (driver-chosen placement); returns its CI id."""
        raise NotImplementedError

    def destroy_compute_instance(self, index, gi_id, ci_id):
        raise NotImplementedError

    def set_compute_mode(self, index, mode):
        """`mode` is a name from COMPUTE_MODES."""
        raise NotImplementedError

    def set_persistence_mode(self, index, enabled):
        raise NotImplementedError

    def close(self):
        pass


def simulated():
    """True when modules on this host run against simulated GPUs."""
    return bool(os.environ.get(ENV_STATE))


def get_backend(run_command=None):
    """The simulator when GPUOPS_SIMULATED_GPUS is set, else the real NVML backend. ``run_command`` (argv -> (rc,
    stdout, stderr), OSError when the command cannot start) runs nvidia-smi for a GPU reset on real GPUs; without it
    the real backend refuses to reset."""
    state_path = os.environ.get(ENV_STATE)
    if state_path:
        from ansible_collections.gpuops.nvidia.plugins.module_utils._simulator import SimulatedBackend
        return SimulatedBackend(state_path, shape=os.environ.get(ENV_SHAPE) or None)
    from ansible_collections.gpuops.nvidia.plugins.module_utils._nvml_backend import NvmlBackend
    return NvmlBackend(run_command=run_command)


def mig_devices(gpu):
    """Flatten a GPU's instances into the MIG devices CUDA sees (one per compute instance)."""
    out = []
    for gi in gpu.get("gpu_instances") or []:
        for ci in gi.get("compute_instances") or []:
            out.append({
                "uuid": ci.get("mig_uuid"),
                "gi_id": gi["id"],
                "ci_id": ci["id"],
                "gi_profile": gi["profile"],
                "profile": ci["profile"],
                "placement": dict(gi["placement"]),
                "processes": list(ci.get("processes") or []),
            })
    return out


def select_gpus(gpus, selector):
    """GPUs matching a selector: 'all', or a list whose items are indices, UUIDs or GPU model names
    (the NVML name, e.g. 'NVIDIA H200', with or without the 'NVIDIA ' prefix)."""
    if selector in (None, "all", ["all"]):
        return list(gpus)
    if not isinstance(selector, (list, tuple)):
        selector = [selector]
    chosen = []
    for gpu in gpus:
        for item in selector:
            if _matches(gpu, item):
                chosen.append(gpu)
                break
    return chosen


def _matches(gpu, item):
    text = str(item).strip()
    if text.isdigit():
        # ASCII digits only: '\u00b2' passes isdigit() but int() refuses it, as it refuses 5000-digit strings
        return text.isascii() and len(text) <= 9 and int(text) == gpu["index"]
    if text.upper().startswith("GPU-"):
        return text.lower() == gpu["uuid"].lower()
    name = gpu["name"]
    short = name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name
    return text.lower() in (name.lower(), short.lower())
