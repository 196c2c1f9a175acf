"""Write a READ-ONLY NVML reading of this host's GPUs as JSON (the format of tests/fixtures/h200/nvml_reading.json).

Run on a GPU host: `python3 tests/gpu/nvml_reading.py OUT.json`. It calls only NVML getters (no setter, no
instance creation, no reset) and the read-only nvidia-smi listings, so that a GPU model's MIG profile table can be
compared with the simulator's catalog (tests/unit/plugins/module_utils/test_gpu_catalog.py). Every
NVML_GPU_INSTANCE_PROFILE_* constant that pynvml defines is asked for, not only those the catalog knows, so a
reading shows profiles the catalog lacks.
"""
import json
import subprocess
import sys

import pynvml

SMI = [
    ["nvidia-smi"],
    ["nvidia-smi", "-L"],
    ["nvidia-smi", "mig", "-lgip"],
    ["nvidia-smi", "mig", "-lgipp"],
    ["nvidia-smi", "mig", "-lgi"],
    ["nvidia-smi", "--query-gpu=index,name,uuid,pci.device_id,compute_mode,mig.mode.current,mig.mode.pending,"
     "memory.total,driver_version,compute_cap", "--format=csv"],
]


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _struct(obj):
    out = {}
    for field in getattr(obj, "_fields_", []):
        name = field[0]
        value = getattr(obj, name)
        out[name] = _text(value) if isinstance(value, (bytes, str)) else (
            value if isinstance(value, (int, float)) else str(value))
    return out


def _try(fn, *args):
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        return {"nvml_error": str(exc), "code": getattr(exc, "value", None)}


def _placements(handle, profile_id):
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
    count = pynvml.c_uint(16)
    try:
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, pynvml.byref(count))
    except pynvml.NVMLError as exc:
        return {"nvml_error": str(exc), "code": getattr(exc, "value", None)}
    return [{"start": array[i].start, "size": array[i].size} for i in range(count.value)]


def gi_profiles(handle):
    out = {}
    names = sorted(n for n in dir(pynvml) if n.startswith("NVML_GPU_INSTANCE_PROFILE_")
                   and n != "NVML_GPU_INSTANCE_PROFILE_COUNT" and isinstance(getattr(pynvml, n), int))
    for name in names:
        index = getattr(pynvml, name)
        entry = {"nvml_index": index}
        info = _try(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, index)
        entry["v1"] = info if isinstance(info, dict) else _struct(info)
        if hasattr(pynvml, "nvmlDeviceGetGpuInstanceProfileInfoV"):
            info_v = _try(pynvml.nvmlDeviceGetGpuInstanceProfileInfoV, handle, index)
            entry["v"] = info_v if isinstance(info_v, dict) else _struct(info_v)
        if not isinstance(info, dict):
            remaining = _try(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, handle, info.id)
            entry["remaining"] = remaining
            entry["placements"] = _placements(handle, info.id)
        out[name] = entry
    return out


def device(i):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    return {
        "index": i,
        "name": _text(pynvml.nvmlDeviceGetName(h)),
        "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
        "pci": {"busId": _text(pci.busId), "pciDeviceId": pci.pciDeviceId,
                "pciDeviceIdHex": "0x%08X" % pci.pciDeviceId, "pciSubSystemId": pci.pciSubSystemId},
        "memory": {"total": mem.total},
        "compute_mode": _try(pynvml.nvmlDeviceGetComputeMode, h),
        "persistence_mode": _try(pynvml.nvmlDeviceGetPersistenceMode, h),
        "mig_mode": _try(pynvml.nvmlDeviceGetMigMode, h),
        "cuda_cc": _try(pynvml.nvmlDeviceGetCudaComputeCapability, h),
        "arch": _try(pynvml.nvmlDeviceGetArchitecture, h),
        "num_cores": _try(pynvml.nvmlDeviceGetNumGpuCores, h),
        "gi_profiles": gi_profiles(h),
    }


def main(path):
    pynvml.nvmlInit()
    try:
        reading = {
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": _text(pynvml.nvmlSystemGetNVMLVersion()),
            "cuda_driver_version": pynvml.nvmlSystemGetCudaDriverVersion(),
            "count": pynvml.nvmlDeviceGetCount(),
        }
        reading["devices"] = [device(i) for i in range(reading["count"])]
    finally:
        pynvml.nvmlShutdown()
    cmds = {}
    for cmd in SMI:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              check=False)
        cmds[" ".join(cmd)] = {"rc": proc.returncode, "out": proc.stdout}
    reading["cmds"] = cmds
    with open(path, "w") as handle:
        json.dump(reading, handle, indent=1, sort_keys=False, default=str)
        handle.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
