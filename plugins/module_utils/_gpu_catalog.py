# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU models and machine shapes the simulator knows, with the sources of every number.

Nothing here is guessed silently. Where a figure comes from a real reading it says so; where it is derived
(for example MiB from the GiB that `nvidia-smi mig -lgip` prints) or taken from public output rather than
NVIDIA's documentation, the comment says that too. See docs/simulator.md for the list of what the simulator
does not model.

GPU-instance profile rows: (nvml_profile_index_name, profile_id, name, compute_slices, memory_slices,
max_instances, memory_mib, sms, placement_starts). Placement starts and sizes are in memory slices, as NVML
reports them (nvmlDeviceGetGpuInstancePossiblePlacements_v2).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

# NVML GPU-instance profile indexes (nvml.h NVML_GPU_INSTANCE_PROFILE_*); the index is NOT the profile id.
GI_PROFILE_INDEX = {
    "1_SLICE": 0x0, "2_SLICE": 0x1, "3_SLICE": 0x2, "4_SLICE": 0x3, "7_SLICE": 0x4, "8_SLICE": 0x5,
    "6_SLICE": 0x6, "1_SLICE_REV1": 0x7, "2_SLICE_REV1": 0x8, "1_SLICE_REV2": 0x9,
}
# NVML compute-instance profile indexes (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_*). On every GPU whose
# `nvidia-smi mig -lcip` output is published (UG "Compute Instances": A100 3g GI -> 1c id 0, 2c id 1,
# 3g id 2; A30 2g GI -> 1c id 0, 2g id 1) the CI profile id equals this index.
CI_PROFILE_INDEX_BY_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}

ARCH_RULES = {
    # mig.md §3.9 and §2.6 (UG getting-started): Ampere needs a GPU reset to activate a MIG-mode change and
    # keeps the mode across reboots (InfoROM); Hopper and later need no reset and lose the mode on reboot.
    "ampere": {"mig_change_needs_reset": True, "mig_mode_survives_reboot": True},
    "hopper": {"mig_change_needs_reset": False, "mig_mode_survives_reboot": False},
    "ada": {"mig_change_needs_reset": False, "mig_mode_survives_reboot": False},
}


def _seven_slice(names, mem_mib, sms, ids=(19, 20, 15, 14, 9, 5, 0)):
    """The 7-compute/8-memory-slice layout shared by A100, H100 and H200 (mig.md §3.2-3.6, §3.8)."""
    n1, n1me, n1x2, n2, n3, n4, n7 = names
    m1, m1x2, m3, m7 = mem_mib
    s1, s1x2, s2, s3, s4, s7 = sms
    return [
        ("1_SLICE", ids[0], n1, 1, 1, 7, m1, s1, [0, 1, 2, 3, 4, 5, 6]),
        ("1_SLICE_REV1", ids[1], n1me, 1, 1, 1, m1, s1, [0, 1, 2, 3, 4, 5, 6]),
        ("1_SLICE_REV2", ids[2], n1x2, 1, 2, 4, m1x2, s1x2, [0, 2, 4, 6]),
        ("2_SLICE", ids[3], n2, 2, 2, 3, m1x2, s2, [0, 2, 4]),
        ("3_SLICE", ids[4], n3, 3, 4, 2, m3, s3, [0, 4]),
        ("4_SLICE", ids[5], n4, 4, 4, 1, m3, s4, [0]),
        ("7_SLICE", ids[6], n7, 7, 8, 1, m7, s7, [0]),
    ]


GPU_MODELS = {
    # Real reading: ../shared/fixtures/h200/nvml_reading.json (driver 580.159.04) and gpu-readings.md.
    "H200": {
        "name": "NVIDIA H200", "pci_device_id": 0x233510DE, "memory_total_mib": 143771,
        "compute_capability": "9.0", "architecture": "hopper", "sms": 132,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
            (16384, 33280, 71424, 143360), (16, 26, 32, 60, 64, 132))},
    },
    # H100 80GB HBM3 (SXM5): real reading tests/fixtures/h100/nvml_reading.json (driver 580.159.04,
    # 2026-11-23): every profile's id, NVML index, max instances, memory MiB, SMs and placements, the PCI device
    # id and the 81559 MiB total equal this table (test_gpu_catalog checks it). Names/fractions also match the
    # UG table (mig.md §3.5); the placements equal the H200's.
    "H100-SXM5-80GB": {
        "name": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x233010DE, "memory_total_mib": 81559,
        "compute_capability": "9.0", "architecture": "hopper", "sms": 132,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9984, 20096, 40448, 81152), (16, 26, 32, 60, 64, 132))},
    },
    # A100-SXM4-40GB: UG `-lgip`/`-lgipp` (mig.md §3.2). MiB = GiB x 1024 (4.75, 9.625, 19.50, 39.25).
    # Total 40536 MiB as nvidia-smi commonly reports this part (not from our own reading).
    "A100-SXM4-40GB": {
        "name": "NVIDIA A100-SXM4-40GB", "pci_device_id": 0x20B010DE, "memory_total_mib": 40536,
        "compute_capability": "8.0", "architecture": "ampere", "sms": 108,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
            (4864, 9856, 19968, 40192), (14, 14, 28, 42, 56, 98))},
    },
    # A100-SXM4-80GB: same ids/placements/SMs as the 40GB part, names from mig.md §3.3; 9.50/19.50/39.25 GiB
    # from the A100 80GB `-lgip` quoted there; 7g.80gb at 79.25 GiB from public A100 80GB listings (not in
    # mig.md). Total 81920 MiB (nvidia-smi output of A100-SXM4-80GB nodes in public issues).
    "A100-SXM4-80GB": {
        "name": "NVIDIA A100-SXM4-80GB", "pci_device_id": 0x20B210DE, "memory_total_mib": 81920,
        "compute_capability": "8.0", "architecture": "ampere", "sms": 108,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9728, 19968, 40192, 81152), (14, 14, 28, 42, 56, 98))},
    },
    # A30-24GB: 4 memory and 4 compute slices (mig.md §3.4: UG table + a public A30 `-lgip`, driver 535).
    # MiB = GiB x 1024 (5.8125, 11.6875, 23.4375). Placements per mig.md (go-nvml mock + public allocations).
    # Total 24258 MiB as nvidia-smi commonly reports the A30 (not from our own reading).
    "A30": {
        "name": "NVIDIA A30", "pci_device_id": 0x20B710DE, "memory_total_mib": 24258,
        "compute_capability": "8.0", "architecture": "ampere", "sms": 56,
        "mig": {"memory_slices": 4, "compute_slices": 4, "profiles": [
            ("1_SLICE", 14, "1g.6gb", 1, 1, 4, 5952, 14, [0, 1, 2, 3]),
            ("1_SLICE_REV1", 21, "1g.6gb+me", 1, 1, 1, 5952, 14, [0, 1, 2, 3]),
            ("2_SLICE", 5, "2g.12gb", 2, 2, 2, 11968, 28, [0, 2]),
            ("2_SLICE_REV1", 6, "2g.12gb+me", 2, 2, 1, 11968, 28, [0, 2]),
            ("4_SLICE", 0, "4g.24gb", 4, 4, 1, 24000, 56, [0]),
        ]},
    },
    # L40S: no MIG. Every MIG call answers NOT_SUPPORTED, as NVML does on GPUs without MIG.
    # Total 46068 MiB as nvidia-smi commonly reports the L40S (not from our own reading).
    "L40S": {
        "name": "NVIDIA L40S", "pci_device_id": 0x26B910DE, "memory_total_mib": 46068,
        "compute_capability": "8.9", "architecture": "ada", "sms": 142, "mig": None,
    },
}

# Bus numbers in the order a DGX/HGX enumerates its eight GPUs (PCI enumeration order = NVML index order).
_BUS_NUMBERS = [0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD]

MACHINE_SHAPES = {
    "dgx-a100-40gb": ["A100-SXM4-40GB"] * 8,
    "dgx-a100-80gb": ["A100-SXM4-80GB"] * 8,
    "hgx-h100-80gb": ["H100-SXM5-80GB"] * 8,
    "hgx-h200": ["H200"] * 8,
    "a30-x4": ["A30"] * 4,
    "l40s-x2": ["L40S"] * 2,
    # A mixed node: two GPU generations with MIG and one GPU without, to exercise selectors and
    # per-generation rules in one place.
    "mixed": ["A100-SXM4-80GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H100-SXM5-80GB", "L40S"],
    # The lent machine of this project: one H200, as read in gpu-readings.md.
    "h200-x1": ["H200"],
    # Smaller H200 nodes, so that a GPUs-per-node series (1, 2, 4, 8 H200: h200-x1, h200-x2, h200-x4, hgx-h200)
    # keeps one GPU model (bench/fleet.py --gpus-per-node).
    "h200-x2": ["H200"] * 2,
    "h200-x4": ["H200"] * 4,
}


def shape_names():
    return sorted(MACHINE_SHAPES)


def bus_id(position):
    """PCI bus id, in NVML's 8-hex-digit-domain form, of the GPU at this enumeration position."""
    if position < len(_BUS_NUMBERS):
        bus = _BUS_NUMBERS[position]
    else:
        bus = 0xC0 + position
    return "00000000:%02X:00.0" % bus


def ci_profiles_for(gi_profile_row):
    """Compute-instance profiles offered inside a GPU instance of this profile.

    A GI of G compute slices offers CIs of C in {1, 2, 3, 4, 7} compute slices, C <= G, G // C of each;
    the CI spanning the whole GI carries the GI's own name, the others `<C>c.<GI name>` (go-nvlib naming).
    This matches every published `-lcip` table (UG: A100 3g -> 1c.3g.20gb x3, 2c.3g.20gb x1, 3g.20gb x1;
    A30 2g -> 1c.2g.12gb x2, 2g.12gb x1). SMs per CI are the GI's SMs split evenly; NVIDIA does not publish
    per-CI SM counts for every GPU, so this is a derivation, not a reading.
    """
    _index, _pid, gi_name, g, _mem_slices, _max, _mem, gi_sms, _starts = gi_profile_row
    out = []
    for c in (1, 2, 3, 4, 7):
        if c > g:
            continue
        full = c == g
        out.append({
            "name": gi_name if full else "%dc.%s" % (c, gi_name),
            "id": CI_PROFILE_INDEX_BY_SLICES[c],
            "slices": c,
            "max_instances": g // c,
            "sms": gi_sms if full else gi_sms * c // g,
            "full": full,
        })
    return out


def gi_profiles(model_key):
    """The GI profile table of a model in the facts shape gpu_info returns (empty for non-MIG GPUs)."""
    model = GPU_MODELS[model_key]
    if not model["mig"]:
        return []
    out = []
    for row in model["mig"]["profiles"]:
        index_name, pid, name, g, mem_slices, max_inst, mem, sms, starts = row
        out.append({
            "name": name,
            "id": pid,
            "nvml_index": GI_PROFILE_INDEX[index_name],
            "slices": g,
            "memory_slices": mem_slices,
            "max_instances": max_inst,
            "memory_mib": mem,
            "sms": sms,
            "placements": [{"start": s, "size": mem_slices} for s in starts],
            "ci_profiles": ci_profiles_for(row),
        })
    return sort_profiles(out)


def sort_profiles(profiles):
    """The order `nvidia-smi mig -lgip` prints: by compute slices, memory slices, then NVML index."""
    return sorted(profiles, key=lambda p: (p["slices"], p["memory_slices"] or 0, p["nvml_index"]))


def model(model_key):
    return copy.deepcopy(GPU_MODELS[model_key])


def model_key_for_name(name):
    """Catalog key of a GPU by its NVML name, or None."""
    for key, m in GPU_MODELS.items():
        if m["name"] == name:
            return key
    return None
