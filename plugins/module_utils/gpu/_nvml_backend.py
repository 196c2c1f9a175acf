# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real backend: NVIDIA GPUs through pynvml (PyPI package `nvidia-ml-py`).

Every pynvml error is converted into the collection's `NvmlError` classes (same code), so modules handle
real and simulated GPUs through one error path. Reads never change anything on the GPU.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import read_record, record_path
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._device_holders import (
    DEV_DIR,
    PROC_ROOT,
    device_patterns,
    find_holders,
    for_device,
    gpu_file,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_fabric import facts as fabric_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_fabric import health_entry as fabric_health_entry
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
    NOT_SUPPORTED,
    decode_clock_events,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._pci import bus_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._xid import read_kernel_log
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    COMPUTE_MODE_NAMES,
    COMPUTE_MODES,
    MIG_MODE_NAMES,
    NVML_ERROR_NAMES,
    GpuBackend,
    GpuBackendError,
    NvmlError,
    NvmlInitError,
    NvmlInUse,
    NvmlNotSupported,
    mig_devices,
)

try:
    import pynvml
    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised by a test that hides the package
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = _exc

PYNVML_MISSING = (
    "pynvml is not installed on this GPU host: install the Python package nvidia-ml-py "
    "(for example `pip install nvidia-ml-py`) for the Python that runs Ansible modules here")

# Safety net for hosts whose GPU settings must not change (the project's lent GPU, a rehearsal on a production
# node): with GPUOPS_NVML_READ_ONLY=1 every mutating call is refused before it reaches NVML, and with
# GPUOPS_NVML_CALL_LOG=/path each attempted mutating call is appended there as one JSON line.
ENV_READ_ONLY = "GPUOPS_NVML_READ_ONLY"
ENV_CALL_LOG = "GPUOPS_NVML_CALL_LOG"

_ARCH_NAMES = {7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell", 13: "rubin"}
_MAX_PLACEMENTS = 16   # more than any GPU offers for one profile (7 on 7-slice GPUs)
_MAX_INSTANCES = 16


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class NvmlBackend(GpuBackend):
    kind = "nvml"
    # Where device_holders looks: the device files and the processes (a test points them at its own).
    dev_dir = DEV_DIR
    proc_root = PROC_ROOT

    def __init__(self, nvml=None, run_command=None, sys_root="/"):
        self.nvml = nvml if nvml is not None else pynvml
        # Where PCI sysfs is read for the health read's comparison with the GPUs NVML lists ("/"; a test's fake tree).
        self.sys_root = sys_root
        # Runs nvidia-smi for the one change NVML has no public call for, a GPU reset: argv -> (rc, stdout, stderr),
        # raising OSError when the command cannot start. A module gives its AnsibleModule.run_command, the boot-time
        # script its own: module_utils start no process themselves (ansible-test's pylint, ansible-core 2.20+).
        self.run_command = run_command
        if self.nvml is None:
            raise GpuBackendError(PYNVML_MISSING)
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            name = NVML_ERROR_NAMES.get(code, "UNKNOWN")
            if code in (self.nvml.NVML_ERROR_LIBRARY_NOT_FOUND, self.nvml.NVML_ERROR_DRIVER_NOT_LOADED):
                raise NvmlInitError(name, (
                    "no NVIDIA driver on this host: NVML could not start (%s). Install the NVIDIA driver "
                    "(libnvidia-ml.so.1 must load), or set GPUOPS_SIMULATED_GPUS to run against simulated GPUs"
                    % exc))
            raise NvmlInitError(name, "NVML could not start: %s" % exc)
        self._closed = False

    def close(self):
        if not self._closed:
            self._closed = True
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            raise NvmlError.for_code(getattr(exc, "value", 999), str(exc))

    def _try(self, fn, *args):
        """A read that a GPU may legitimately not support: None on NOT_SUPPORTED/INVALID_ARGUMENT."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) in (self.nvml.NVML_ERROR_NOT_SUPPORTED,
                                               self.nvml.NVML_ERROR_INVALID_ARGUMENT,
                                               self.nvml.NVML_ERROR_NOT_FOUND):
                return None
            raise NvmlError.for_code(getattr(exc, "value", 999), str(exc))

    def _handle(self, index):
        return self._call(self.nvml.nvmlDeviceGetHandleByIndex, index)

    # ------------------------------------------------------------------ reads
    def read_all(self, skip_lost=False):
        n = self._call(self.nvml.nvmlDeviceGetCount)
        cuda = self._call(self.nvml.nvmlSystemGetCudaDriverVersion)
        gpus, lost = [], []
        for i in range(n):
            try:
                gpus.append(self.read_gpu(i))
            except NvmlError as exc:
                if not skip_lost or exc.name != "GPU_IS_LOST":
                    raise
                lost.append({"index": i, "error": str(exc)})
        out = {
            "backend": self.kind,
            "driver_version": _text(self._call(self.nvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": "%d.%d" % (cuda // 1000, (cuda % 1000) // 10),
            "nvml_version": _text(self._call(self.nvml.nvmlSystemGetNVMLVersion)),
            "gpus": gpus,
        }
        if skip_lost:
            out["lost_gpus"] = lost
        return out

    def read_gpu(self, index):
        nv = self.nvml
        h = self._handle(index)
        pci = self._call(nv.nvmlDeviceGetPciInfo, h)
        mem = self._call(nv.nvmlDeviceGetMemoryInfo, h)
        major, minor = self._call(nv.nvmlDeviceGetCudaComputeCapability, h)
        mig = self._try(nv.nvmlDeviceGetMigMode, h)
        arch = self._try(nv.nvmlDeviceGetArchitecture, h)
        name = _text(self._call(nv.nvmlDeviceGetName, h))
        facts = {
            "index": index,
            "uuid": _text(self._call(nv.nvmlDeviceGetUUID, h)),
            "name": name,
            "pci_bus_id": _text(pci.busId),
            "pci_device_id": "0x%08X" % pci.pciDeviceId,
            "memory_total_mib": mem.total // (1024 * 1024),
            "memory_total_bytes": mem.total,
            "compute_capability": "%d.%d" % (major, minor),
            "architecture": _ARCH_NAMES.get(arch, "unknown"),
            "compute_mode": COMPUTE_MODE_NAMES.get(self._call(nv.nvmlDeviceGetComputeMode, h), "unknown"),
            "persistence_mode": self._try(nv.nvmlDeviceGetPersistenceMode, h) == 1,
            "mig_supported": mig is not None,
            "mig_mode_current": MIG_MODE_NAMES.get(mig[0]) if mig is not None else None,
            "mig_mode_pending": MIG_MODE_NAMES.get(mig[1]) if mig is not None else None,
            # Per-GPU reset is exposed when the PCI function has a reset file (mig-parted's passthrough test).
            "reset_supported": os.path.exists("/sys/bus/pci/devices/%s/reset" % _sysfs_bus_id(_text(pci.busId))),
            "gi_profiles": [],
            "gpu_instances": [],
            "processes": [],
        }
        if mig is not None:
            facts["gi_profiles"] = self._gi_profiles(h, name)
            if mig[0] == 1:
                facts["gpu_instances"] = self._gpu_instances(h, facts["gi_profiles"])
        facts["processes"] = self._processes(h)
        try:
            facts["fabric"] = self._fabric_info(h)
        except nv.NVMLError as exc:
            raise NvmlError.for_code(getattr(exc, "value", 999), str(exc))
        self._attach_mig_processes(h, facts)
        facts["mig_devices"] = mig_devices(facts)
        return facts

    def _gi_profiles(self, h, gpu_name):
        nv = self.nvml
        out = []
        for index_name, nvml_index in sorted(catalog.GI_PROFILE_INDEX.items(), key=lambda kv: kv[1]):
            info = self._try(nv.nvmlDeviceGetGpuInstanceProfileInfo, h, nvml_index)
            if info is None:
                continue
            placements = self._placements(h, info.id)
            mem_slices = placements[0]["size"] if placements else None
            name = _text(info.name) if hasattr(info, "name") else ""
            name = name[len("MIG "):] if name.startswith("MIG ") else name
            row = (index_name, info.id, name, info.sliceCount, mem_slices, info.instanceCount,
                   info.memorySizeMB, info.multiprocessorCount, [p["start"] for p in placements])
            out.append({
                "name": name,
                "id": info.id,
                "nvml_index": nvml_index,
                "slices": info.sliceCount,
                "memory_slices": mem_slices,
                "max_instances": info.instanceCount,
                "memory_mib": info.memorySizeMB,
                "sms": info.multiprocessorCount,
                "placements": placements,
                # Compute-instance profiles can only be queried from an existing GPU instance; the table is
                # derived by the same rule as the simulator's (see _gpu_catalog.ci_profiles_for).
                "ci_profiles": catalog.ci_profiles_for(row),
            })
        return catalog.sort_profiles(out)

    def _placements(self, h, profile_id):
        nv = self.nvml
        array = (nv.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
        count = nv.c_uint(_MAX_PLACEMENTS)
        if self._try(nv.nvmlDeviceGetGpuInstancePossiblePlacements, h, profile_id, array, nv.byref(count)) is None:
            return []
        return [{"start": array[i].start, "size": array[i].size} for i in range(count.value)]

    def _gpu_instances(self, h, profiles):
        nv = self.nvml
        out = []
        for profile in profiles:
            array = (nv.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
            count = nv.c_uint(0)
            if self._try(nv.nvmlDeviceGetGpuInstances, h, profile["id"], array, nv.byref(count)) is None:
                continue
            for i in range(count.value):
                gi = array[i]
                info = self._call(nv.nvmlGpuInstanceGetInfo, gi)
                out.append({
                    "id": info.id,
                    "profile_id": info.profileId,
                    "profile": profile["name"],
                    "placement": {"start": info.placement.start, "size": info.placement.size},
                    "compute_instances": self._compute_instances(gi, profile),
                })
        out.sort(key=lambda g: g["placement"]["start"])
        return out

    def _compute_instances(self, gi, gi_profile):
        nv = self.nvml
        out = []
        names = dict((c["id"], c["name"]) for c in gi_profile["ci_profiles"])
        for ci_index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            info = self._try(nv.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, ci_index,
                             nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            if info is None:
                continue
            array = (nv.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
            count = nv.c_uint(0)
            if self._try(nv.nvmlGpuInstanceGetComputeInstances, gi, info.id, array, nv.byref(count)) is None:
                continue
            for i in range(count.value):
                ci = self._call(nv.nvmlComputeInstanceGetInfo, array[i])
                out.append({
                    "id": ci.id,
                    "profile_id": ci.profileId,
                    "profile": names.get(ci.profileId, "unknown"),
                    "placement": {"start": ci.placement.start, "size": ci.placement.size},
                    "mig_uuid": None,
                    "processes": [],
                })
        out.sort(key=lambda c: c["placement"]["start"])
        return out

    def _processes(self, h):
        nv = self.nvml
        seen = {}
        for fn in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            for p in self._try(fn, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                gi_id = getattr(p, "gpuInstanceId", None)
                ci_id = getattr(p, "computeInstanceId", None)
                invalid = 0xFFFFFFFF
                seen[p.pid] = {
                    "pid": p.pid,
                    "name": self._process_name(p.pid),
                    "used_memory_mib": used // (1024 * 1024) if isinstance(used, int) else None,
                    "gi_id": None if gi_id in (None, invalid) else gi_id,
                    "ci_id": None if ci_id in (None, invalid) else ci_id,
                }
        return sorted(seen.values(), key=lambda p: p["pid"])

    def _process_name(self, pid):
        try:
            return _text(self.nvml.nvmlSystemGetProcessName(pid))
        except self.nvml.NVMLError:
            return None

    def _attach_mig_processes(self, h, facts):
        """Fill each compute instance's MIG device UUID and processes from the MIG device handles."""
        nv = self.nvml
        if facts["mig_mode_current"] != "Enabled":
            return
        by_ids = {}
        for gi in facts["gpu_instances"]:
            for ci in gi["compute_instances"]:
                by_ids[(gi["id"], ci["id"])] = ci
        count = self._try(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0
        for i in range(count):
            mh = self._try(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if mh is None:
                continue
            key = (self._call(nv.nvmlDeviceGetGpuInstanceId, mh), self._call(nv.nvmlDeviceGetComputeInstanceId, mh))
            ci = by_ids.get(key)
            if ci is None:
                continue
            ci["mig_uuid"] = _text(self._call(nv.nvmlDeviceGetUUID, mh))
            ci["processes"] = self._processes(mh)

    # ------------------------------------------------------------------ health (read-only; docs/health.md)
    def read_health(self):
        """Every GPU's health (the shape in _gpu_health's docstring) and this boot's Xid lines, read with NVML's
        read-only calls and ``journalctl``/``dmesg`` through ``run_command``. A GPU NVML answers GPU_IS_LOST for is an
        entry with "lost"; a call that answers NOT_SUPPORTED is recorded as NOT_SUPPORTED for its field. The GPUs PCI
        sysfs shows are read too (read-only, under ``sys_root``), for the GPUs NVML does not list."""
        n = self._call(self.nvml.nvmlDeviceGetCount)
        return {"backend": self.kind, "gpus": [self.read_gpu_health(i) for i in range(n)],
                "kernel_log": read_kernel_log(self.run_command), "pci": bus_gpus(self.sys_root),
                "burn_in": read_record(record_path())}

    def read_kernel_log(self):
        return read_kernel_log(self.run_command)

    def health_indexes(self):
        """The indexes of the GPUs NVML lists (nvmlDeviceGetCount), for a health read GPU by GPU."""
        return list(range(self._call(self.nvml.nvmlDeviceGetCount)))

    def read_gpu_identity(self, index):
        """GPU ``index``'s bus id as NVML names it (nvmlDeviceGetPciInfo), before its health is read: {"index",
        "pci_bus_id"}; NvmlError where NVML refuses (a lost GPU)."""
        h = self._handle(index)
        return {"index": index, "pci_bus_id": _text(self._call(self.nvml.nvmlDeviceGetPciInfo, h).busId)}

    def read_gpu_health(self, index):
        lost_code = getattr(self.nvml, "NVML_ERROR_GPU_IS_LOST", 15)
        entry = {"index": index}
        try:
            h = self.nvml.nvmlDeviceGetHandleByIndex(index)
            entry["uuid"] = _text(self.nvml.nvmlDeviceGetUUID(h))
            entry["name"] = _text(self.nvml.nvmlDeviceGetName(h))
            entry["pci_bus_id"] = _text(self.nvml.nvmlDeviceGetPciInfo(h).busId)
            arch = self._ns(self.nvml.nvmlDeviceGetArchitecture, h)
            entry["architecture"] = _ARCH_NAMES.get(arch, "unknown")
            entry["lost"] = False
            entry.update(self._health_fields(h))
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) != lost_code:
                raise NvmlError.for_code(getattr(exc, "value", 999), str(exc))
            entry.update({"lost": True, "error": str(exc)})
        return entry

    def _ns(self, fn, *args):
        """A read whose NOT_SUPPORTED answer is recorded as NOT_SUPPORTED; other errors (GPU_IS_LOST included) go up
        as pynvml raised them, for read_gpu_health to judge."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self.nvml.NVML_ERROR_NOT_SUPPORTED:
                return NOT_SUPPORTED
            raise

    def _health_fields(self, h):
        nv = self.nvml
        return {
            "ecc": self._ecc(h),
            "retired_pages": self._retired_pages(h),
            "remapped_rows": self._remapped_rows(h),
            "nvlink": self._nvlinks(h),
            "pcie": {
                # The link's best: what this GPU in this slot can train to (nvmlDeviceGetMaxPcieLinkGeneration/Width,
                # nvidia-smi's "Max"); the GPU's own best is kept apart (nvmlDeviceGetGpuMaxPcieLinkGeneration,
                # nvidia-smi's "Device Max").
                "generation": {"current": self._ns(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                               "max": self._ns(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                               "gpu_max": self._gpu_max_generation(h)},
                "width": {"current": self._ns(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                          "max": self._ns(nv.nvmlDeviceGetMaxPcieLinkWidth, h)},
            },
            "clock_events": self._clock_events(h),
            "temperature_c": self._ns(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "fabric": self._fabric(h),
        }

    def _gpu_max_generation(self, h):
        fn = getattr(self.nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)
        if fn is None:
            return NOT_SUPPORTED
        try:
            return self._ns(fn, h)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                return NOT_SUPPORTED
            raise

    def _ecc(self, h):
        nv = self.nvml
        mode = self._ns(nv.nvmlDeviceGetEccMode, h)
        if mode == NOT_SUPPORTED:
            return NOT_SUPPORTED
        names = {nv.NVML_FEATURE_ENABLED: "Enabled", nv.NVML_FEATURE_DISABLED: "Disabled"}
        out = {"mode_current": names.get(mode[0], str(mode[0])), "mode_pending": names.get(mode[1], str(mode[1]))}
        for counter, key in ((nv.NVML_VOLATILE_ECC, "volatile"), (nv.NVML_AGGREGATE_ECC, "aggregate")):
            out[key] = {
                "corrected": self._ns(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter),
                "uncorrected": self._ns(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                        counter),
            }
        return out

    def _retired_pages(self, h):
        nv = self.nvml
        single = self._ns(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        if single == NOT_SUPPORTED:
            return NOT_SUPPORTED
        double = self._ns(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = self._ns(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        return {"single_bit": len(single), "double_bit": NOT_SUPPORTED if double == NOT_SUPPORTED else len(double),
                "pending": pending if pending == NOT_SUPPORTED else pending == nv.NVML_FEATURE_ENABLED}

    def _remapped_rows(self, h):
        rows = self._ns(self.nvml.nvmlDeviceGetRemappedRows, h)
        if rows == NOT_SUPPORTED:
            return NOT_SUPPORTED
        corrected, uncorrected, pending, failure = rows
        return {"corrected": corrected, "uncorrected": uncorrected, "pending": bool(pending), "failure": bool(failure)}

    def _nvlinks(self, h):
        """Each NVLink's state and its DL error counters: links 0.. until NVML refuses a link number; a GPU whose link
        0 answers NOT_SUPPORTED has no NVLink (a PCIe card, a passthrough VM)."""
        nv = self.nvml
        links = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                state = nv.nvmlDeviceGetNvLinkState(h, link)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_INVALID_ARGUMENT):
                    break
                raise
            errors = {}
            for name, counter in (("replay", nv.NVML_NVLINK_ERROR_DL_REPLAY),
                                  ("recovery", nv.NVML_NVLINK_ERROR_DL_RECOVERY),
                                  ("crc_flit", nv.NVML_NVLINK_ERROR_DL_CRC_FLIT),
                                  ("crc_data", nv.NVML_NVLINK_ERROR_DL_CRC_DATA)):
                errors[name] = self._ns(nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
            links.append({"link": link, "active": state == nv.NVML_FEATURE_ENABLED, "errors": errors})
        return links or NOT_SUPPORTED

    def _clock_events(self, h):
        nv = self.nvml
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = self._ns(fn, h)
        return mask if mask == NOT_SUPPORTED else decode_clock_events(mask)

    def _fabric(self, h):
        """The health read's fabric entry (_gpu_health's shape) from the same read as the facts' (``_fabric_info``)."""
        return fabric_health_entry(self._fabric_info(h))

    def _fabric_info(self, h):
        """The GPU's fabric facts (_gpu_fabric.facts): nvmlDeviceGetGpuFabricInfoV with the v2 struct (the health
        mask) where the driver has it, else nvmlDeviceGetGpuFabricInfo (no mask). NOT_SUPPORTED where NVML answers
        so (no NVSwitch fabric) or the state is NOT_SUPPORTED. Other NVML errors go up as pynvml raised them."""
        nv = self.nvml
        info, has_mask = None, False
        if hasattr(nv, "nvmlDeviceGetGpuFabricInfoV") and hasattr(nv, "c_nvmlGpuFabricInfo_v2_t"):
            info = nv.c_nvmlGpuFabricInfo_v2_t()
            try:
                if self._ns(nv.nvmlDeviceGetGpuFabricInfoV, h, nv.byref(info)) == NOT_SUPPORTED:
                    return NOT_SUPPORTED
                has_mask = True
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) not in (nv.NVML_ERROR_FUNCTION_NOT_FOUND,
                                                       getattr(nv, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25)):
                    raise
                info = None
        if info is None:
            if not hasattr(nv, "nvmlDeviceGetGpuFabricInfo"):
                return NOT_SUPPORTED
            info = nv.c_nvmlGpuFabricInfo_t()
            try:
                if self._ns(nv.nvmlDeviceGetGpuFabricInfo, h, nv.byref(info)) == NOT_SUPPORTED:
                    return NOT_SUPPORTED
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) != nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                return NOT_SUPPORTED
        status = NVML_ERROR_NAMES.get(info.status, str(info.status)) if info.status else "SUCCESS"
        return fabric_facts(info.state, status, bytes(bytearray(info.clusterUuid)), info.cliqueId,
                            info.healthMask if has_mask else None)

    # ------------------------------------------------------------------ mutations
    def _mutating(self, call, **args):
        log = os.environ.get(ENV_CALL_LOG)
        refused = os.environ.get(ENV_READ_ONLY) == "1"
        if log:
            with open(log, "a") as handle:
                handle.write(json.dumps({"call": call, "args": args, "refused": refused}) + "\n")
        if refused:
            raise GpuBackendError("%s=1: refusing the mutating NVML call %s(%s)" % (
                ENV_READ_ONLY, call, ", ".join("%s=%r" % kv for kv in sorted(args.items()))))

    def set_mig_mode(self, index, enabled):
        self._mutating("set_mig_mode", index=index, enabled=bool(enabled))
        nv = self.nvml
        mode = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        return self._call(nv.nvmlDeviceSetMigMode, self._handle(index), mode)

    def device_holders(self, index):
        """Who holds GPU ``index``'s device files: every process under ``proc_root`` with a descriptor open on
        ``dev_dir``'s NVIDIA files, narrowed to this GPU by its minor number (/dev/nvidia<minor>; every holder
        when NVML does not give the minor). Reads /proc only."""
        minor = self._try(self.nvml.nvmlDeviceGetMinorNumber, self._handle(index))
        found = find_holders(self.proc_root, device_patterns(self.dev_dir))
        return for_device(found, None if minor is None else gpu_file(minor, self.dev_dir))

    def _reset_gpu(self, index):
        self._mutating("reset_gpu", index=index)
        # NVML has no public GPU-reset call; nvidia-smi does it (as mig-parted does, per GPU here).
        bus = self.read_gpu(index)["pci_bus_id"]
        if self.run_command is None:
            raise GpuBackendError("cannot reset GPU %d: this NVML backend was given no command runner for nvidia-smi"
                                  % index)
        try:
            rc, stdout, stderr = self.run_command(["nvidia-smi", "--gpu-reset", "-i", bus])
        except OSError as exc:
            raise GpuBackendError("cannot run nvidia-smi to reset GPU %d: %s" % (index, exc))
        out = "\n".join(text for text in (_text(stdout) or "", _text(stderr) or "") if text.strip())
        if rc != 0:
            if "in use" in out.lower():
                raise NvmlInUse("GPU %d reset refused: %s" % (index, out.strip()))
            if "not supported" in out.lower():
                raise NvmlNotSupported("GPU %d reset not supported: %s" % (index, out.strip()))
            raise NvmlError("GPU %d reset failed (rc %d): %s" % (index, rc, out.strip()))

    def create_gpu_instance(self, index, profile_id, start):
        self._mutating("create_gpu_instance", index=index, profile_id=profile_id, start=start)
        nv = self.nvml
        h = self._handle(index)
        info = self._call(nv.nvmlDeviceGetGpuInstanceProfileInfoById, h, profile_id)
        sizes = [p["size"] for p in self._placements(h, info.id)]
        placement = nv.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = sizes[0] if sizes else 0
        gi = self._call(nv.nvmlDeviceCreateGpuInstanceWithPlacement, h, profile_id, nv.byref(placement))
        return self._call(nv.nvmlGpuInstanceGetInfo, gi).id

    def _gi_handle(self, index, gi_id):
        return self._call(self.nvml.nvmlDeviceGetGpuInstanceById, self._handle(index), gi_id)

    def destroy_gpu_instance(self, index, gi_id):
        self._mutating("destroy_gpu_instance", index=index, gi_id=gi_id)
        self._call(self.nvml.nvmlGpuInstanceDestroy, self._gi_handle(index, gi_id))

    def create_compute_instance(self, index, gi_id, ci_profile_id):
        self._mutating("create_compute_instance", index=index, gi_id=gi_id, ci_profile_id=ci_profile_id)
        nv = self.nvml
        ci = self._call(nv.nvmlGpuInstanceCreateComputeInstance, self._gi_handle(index, gi_id), ci_profile_id)
        return self._call(nv.nvmlComputeInstanceGetInfo, ci).id

    def destroy_compute_instance(self, index, gi_id, ci_id):
        self._mutating("destroy_compute_instance", index=index, gi_id=gi_id, ci_id=ci_id)
        nv = self.nvml
        ci = self._call(nv.nvmlGpuInstanceGetComputeInstanceById, self._gi_handle(index, gi_id), ci_id)
        self._call(nv.nvmlComputeInstanceDestroy, ci)

    def set_compute_mode(self, index, mode):
        self._mutating("set_compute_mode", index=index, mode=mode)
        if mode not in COMPUTE_MODES:
            raise GpuBackendError("unknown compute mode %r; valid: %s" % (mode, ", ".join(COMPUTE_MODES)))
        self._call(self.nvml.nvmlDeviceSetComputeMode, self._handle(index), COMPUTE_MODES[mode])

    def set_persistence_mode(self, index, enabled):
        self._mutating("set_persistence_mode", index=index, enabled=bool(enabled))
        nv = self.nvml
        self._call(nv.nvmlDeviceSetPersistenceMode, self._handle(index),
                   nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED)


def _sysfs_bus_id(nvml_bus_id):
    """NVML's 00000000:07:00.0 -> sysfs's 0000:07:00.0 (lower case)."""
    domain, rest = nvml_bus_id.split(":", 1)
    return ("%04x:%s" % (int(domain, 16), rest)).lower()
