# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one interface over a host's GPUs (the choice of backend for a run is _gpu_backend.get_backend).

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

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._device_holders import describe

ENV_STATE = "GPUOPS_SIMULATED_GPUS"
ENV_SHAPE = "GPUOPS_SIMULATED_MACHINE"
# The simulated node's root below NVML and its host options at creation (_simulator_host).
ENV_ROOT = "GPUOPS_SIMULATED_ROOT"
ENV_HOST = "GPUOPS_SIMULATED_HOST"
# The rack a new simulated tray of an NVL shape belongs to: its GPUs share that rack's NVLink cluster and clique.
ENV_RACK = "GPUOPS_SIMULATED_RACK"

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
# nvmlErrorString(NVML_ERROR_IN_USE): all that NVML (and nvidia-smi, for a refused reset) says of who holds a GPU.
IN_USE_TEXT = "In use by another client"
NVML_SUCCESS = 0

# nvmlComputeMode_t; EXCLUSIVE_THREAD (1) is "Support Removed" in nvml.h and is not offered.
COMPUTE_MODES = {"Default": 0, "Exclusive_Process": 3, "Prohibited": 2}
COMPUTE_MODE_NAMES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
MIG_MODE_NAMES = {0: "Disabled", 1: "Enabled"}


class GpuBackendError(Exception):
    """A problem outside NVML: a missing package, no driver, an unreadable or corrupt state file."""


class NvmlInitError(GpuBackendError):
    """NVML could not start (nvmlInit failed): ``name`` is NVML's name for the failure (LIBRARY_NOT_FOUND,
    DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, ...). A GpuBackendError, so code that only reports it needs no
    change; code that must tell a node without a driver from a version mismatch reads ``name``."""

    def __init__(self, name, message):
        self.name = name
        super(NvmlInitError, self).__init__(message)


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

    def read_all(self, skip_lost=False):
        """{'backend', 'driver_version', 'cuda_driver_version', 'gpus': [gpu facts...]}. A GPU NVML answers GPU_IS_LOST
        for fails the read (NvmlError), or with ``skip_lost`` is left out of "gpus" and listed in "lost_gpus"
        ([{"index", "error"}]; only with ``skip_lost``), so that the rest of the node can still be read and planned
        (the health read names the lost GPU as a blocking finding)."""
        raise NotImplementedError

    def read_gpu(self, index):
        raise NotImplementedError

    def read_health(self):
        """Every GPU's health and this boot's Xid lines, read only: {"backend", "gpus": [...], "kernel_log": {...}} in
        the shape _gpu_health's docstring gives. Apart from read_all: a lost GPU is an entry ("lost": true), not an
        error, and a field whose NVML call answers NOT_SUPPORTED holds _gpu_health.NOT_SUPPORTED."""
        raise NotImplementedError

    def set_mig_mode(self, index, enabled):
        """Request MIG mode; returns NVML's activation status (0, or IN_USE / RESET_REQUIRED codes).
        Callers must re-read current/pending mode: a zero status does not mean the mode is active."""
        raise NotImplementedError

    def reset_gpu(self, index):
        """Reset one GPU. When it is refused IN_USE, the error names who holds the GPU's device files (NVML's own
        error names nobody): the backend's ``device_holders``, in ``_device_holders.describe``'s words, for both
        backends alike."""
        try:
            self._reset_gpu(index)
        except NvmlInUse as exc:
            raise NvmlInUse(self.in_use_message(index, exc))

    def in_use_message(self, index, error):
        """``error``'s text followed by the holders of GPU ``index``'s device files, or why they could not be
        listed."""
        try:
            found = self.device_holders(index)
        except (GpuBackendError, NvmlError, OSError) as exc:
            return "%s; the processes holding GPU %d's device files could not be listed: %s" % (error, index, exc)
        return "%s; GPU %d: %s" % (error, index, describe(found, own_pid=os.getpid()))

    def _reset_gpu(self, index):
        """The reset itself; raises NvmlInUse with NVML's (or nvidia-smi's) own words when the GPU is in use."""
        raise NotImplementedError

    def device_holders(self, index):
        """Who holds GPU ``index``'s device files open: ``_device_holders.find_holders``'s answer narrowed by
        ``for_device`` to this GPU ({"holders": [...], "unreadable": [PIDs], "files": [...]}). Reads only."""
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
