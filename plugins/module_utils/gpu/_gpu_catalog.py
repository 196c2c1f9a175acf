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

# NVML GPU-instance profile indexes (nvml.h NVML_GPU_INSTANCE_PROFILE_*, pynvml 13.615.71); the index is NOT the
# profile id. The GFX / NO_ME / ALL_ME indexes are the Blackwell (GB20x) variants behind the +gfx, -me and +me.all
# profile names (go-nvlib pkg/nvlib/device/mig_profile.go NewMigProfile maps each index to its suffix).
GI_PROFILE_INDEX = {
    "1_SLICE": 0x0, "2_SLICE": 0x1, "3_SLICE": 0x2, "4_SLICE": 0x3, "7_SLICE": 0x4, "8_SLICE": 0x5,
    "6_SLICE": 0x6, "1_SLICE_REV1": 0x7, "2_SLICE_REV1": 0x8, "1_SLICE_REV2": 0x9,
    "1_SLICE_GFX": 0xA, "2_SLICE_GFX": 0xB, "4_SLICE_GFX": 0xC, "1_SLICE_NO_ME": 0xD, "2_SLICE_NO_ME": 0xE,
    "1_SLICE_ALL_ME": 0xF, "2_SLICE_ALL_ME": 0x10, "3_SLICE_GFX": 0x11,
}
# NVML compute-instance profile indexes (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_*). On every GPU whose
# `nvidia-smi mig -lcip` output is published (UG "Compute Instances": A100 3g GI -> 1c id 0, 2c id 1,
# 3g id 2; A30 2g GI -> 1c id 0, 2g id 1) the CI profile id equals this index.
CI_PROFILE_INDEX_BY_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}

ARCH_RULES = {
    # MIG user guide (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/), Getting Started with MIG > Enable
    # MIG Mode, and Deployment Considerations: Ampere needs a GPU reset to activate a MIG-mode change and keeps the
    # mode across reboots (InfoROM); Hopper and later need no reset and lose the mode on reboot.
    "ampere": {"mig_change_needs_reset": True, "mig_mode_survives_reboot": True},
    "hopper": {"mig_change_needs_reset": False, "mig_mode_survives_reboot": False},
    # Blackwell (B200, GB200, B300: cc 10.x; RTX PRO 6000: cc 12.0): the user guide states the rule for "Hopper and
    # later" and documents nothing Blackwell-specific; mig-parted treats every GPU of compute capability >= 9.0 alike
    # (deployments/systemd/utils.sh picks hooks-minimal, no GPU reset) and ships one example for
    # "hopper-blackwell". The simulator follows that; a Blackwell-specific difference, if any, is not modelled.
    "blackwell": {"mig_change_needs_reset": False, "mig_mode_survives_reboot": False},
    "ada": {"mig_change_needs_reset": False, "mig_mode_survives_reboot": False},
}

# Memory the driver keeps out of MIG: the 7g profiles of the real readings hold ~400 MiB less than the total
# (H100 80GB HBM3: 81152 of 81559 MiB; H200: 143360 of 143771 MiB).
_MIG_RESERVED_MIB = 512


def derived_mib(total_mib, slices, of=8):
    """DERIVED memory of a profile spanning ``slices`` of ``of`` memory slices, for rows no published listing gives:
    that fraction of (total - 512 MiB), rounded down to 256 MiB. On the GPUs with published listings this reproduces
    H100 80GB's 1g (9984) and 3g (40448) and the H200 reading's 3g (71424); elsewhere it is within 7%. Every profile
    name the simulator carries follows from these figures by go-nvlib's naming rule (see mig_name_gb)."""
    return (total_mib - _MIG_RESERVED_MIB) * slices // of // 256 * 256


def mig_name_gb(total_mib, profile_mib, fractions=8):
    """The <GB> of a profile name, computed as go-nvlib's getMigMemorySizeGB does (pkg/nvlib/device/mig_profile.go,
    vendored in NVIDIA/mig-parted@bd7160f4): the
    profile's share of the GPU's memory rounded UP to eighths, times the GPU's memory in GiB rounded up, rounded
    half away from zero."""
    gib = 1024
    frac = -(-profile_mib * fractions // total_mib)          # ceil(profile/total * 8), in eighths
    total_gb = -(-total_mib // gib)                          # GiB, rounded up
    return (2 * frac * total_gb + fractions) // (2 * fractions)   # round(frac/8 * total_gb), halves up


def _derived_seven_slice_mib(total_mib):
    """DERIVED memory of the 1-, 2-, 4- and 8-memory-slice profiles of a 7-slice GPU (see derived_mib)."""
    return tuple(derived_mib(total_mib, k) for k in (1, 2, 4, 8))


# SMs per 7-slice profile (1g, 1g of 2 memory slices, 2g, 3g, 4g, 7g) of the H100 80GB HBM3 (GH100, 132 SMs; the real
# reading in tests/fixtures/h100) and of the B200 (mig-parted#187 up to 2g; 3g/4g at 18 per slice; 7g all 148: see
# GPU_MODELS["B200"]).
_H100_SMS = (16, 26, 32, 60, 64, 132)
_B200_SMS = (18, 30, 36, 54, 72, 148)


def _seven_slice(names, mem_mib, sms, ids=(19, 20, 15, 14, 9, 5, 0)):
    """The 7-compute/8-memory-slice layout shared by A100, H100, H200 and the 7-slice Blackwell parts (the MIG
    user guide's Supported MIG Profiles tables, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
    supported-mig-profiles.html; B200, GB200 and B300 have the same fractions of memory and SMs in the UG table
    and the same ids in every published listing). Placements are those of the H200 reading; for the other models
    they are derived from the same geometry, as no -lgipp output of theirs is published."""
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
    # Real reading: tests/fixtures/h200/nvml_reading.json (driver 580.159.04; docs/simulator.md lists the sources).
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
    # UG table (Supported MIG Profiles, H100 80GB); the placements equal the H200's.
    "H100-SXM5-80GB": {
        "name": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x233010DE, "memory_total_mib": 81559,
        "compute_capability": "9.0", "architecture": "hopper", "sms": 132,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9984, 20096, 40448, 81152), _H100_SMS)},
    },
    # A100-SXM4-40GB: the UG's `nvidia-smi mig -lgip`/`-lgipp` output (Getting Started with MIG). MiB = GiB x 1024
    # (4.75, 9.625, 19.50, 39.25).
    # Total 40536 MiB as nvidia-smi commonly reports this part (not from our own reading).
    "A100-SXM4-40GB": {
        "name": "NVIDIA A100-SXM4-40GB", "pci_device_id": 0x20B010DE, "memory_total_mib": 40536,
        "compute_capability": "8.0", "architecture": "ampere", "sms": 108,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
            (4864, 9856, 19968, 40192), (14, 14, 28, 42, 56, 98))},
    },
    # A100-SXM4-80GB: same ids/placements/SMs as the 40GB part, names from the UG table (A100 80GB); 9.50/19.50/
    # 39.25 GiB from the A100 80GB PCIe `-lgip` in https://github.com/NVIDIA/mig-parted/issues/97; 7g.80gb at
    # 79.25 GiB from public A100 80GB listings. Total 81920 MiB (nvidia-smi output of A100-SXM4-80GB nodes in
    # public issues).
    "A100-SXM4-80GB": {
        "name": "NVIDIA A100-SXM4-80GB", "pci_device_id": 0x20B210DE, "memory_total_mib": 81920,
        "compute_capability": "8.0", "architecture": "ampere", "sms": 108,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9728, 19968, 40192, 81152), (14, 14, 28, 42, 56, 98))},
    },
    # A30-24GB: 4 memory and 4 compute slices (UG table + a public A30 `-lgip`, driver 535). MiB = GiB x 1024
    # (5.8125, 11.6875, 23.4375). Placements from go-nvml's A30 mock (NVIDIA/go-nvml@2f9e261:pkg/nvml/mock/gpus)
    # plus the 0:1, 1:1 and 2:2 allocations seen in public A30 output; the UG lists none.
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
    # ---------------------------------------------------------------------------------------------------------
    # Blackwell and the Hopper parts with other memory sizes. Sources, short names used below:
    #   UG table    = MIG user guide, supported-mig-profiles (the B200, RTX PRO 6000 Blackwell, H100 94GB and
    #                 H100 96GB tables: names, fractions of memory and SMs, max instances, media engines).
    #   UG gpus     = MIG user guide, supported-gpus (compute capability, memory size, max instances).
    #   config-default = NVIDIA/mig-parted@bd7160f4 deployments/systemd/config-default.yaml (names and counts of the
    #                 shipped all-<profile> layouts; device-filter PCI ids).
    #   pci.ids     = the PCI id database vendored by mig-parted (go-nvlib pkg/pciids/default_pci.ids, 2025.07.11).
    #   DERIVED     = computed here, no published figure: memory by derived_mib(); SMs as stated on the row.
    # Profile ids 9, 5, 0 (3g, 4g, 7g) on the 7-slice Blackwell parts are not in any listing we could read (the
    # published B200 and GB200 listings are cut after 2g); they are taken as on every other 7-slice GPU.
    #
    # B200 (HGX/DGX B200): name and 183359 MiB as nvidia-smi reports the part on public DGX/HGX B200 nodes (driver
    # 570.172.08 and 595.71.05); PCI 0x2901 (pci.ids "GB100 [B200]", config-default all-balanced filter); cc 10.0
    # (UG gpus); 148 SMs (CUDA device query on a B200). Rows: UG table; ids 19/20/15/14, GiB and SMs of 1g.23gb
    # (20.50 GiB, 18 SMs), 1g.45gb (44.25 GiB, 30 SMs) and 2g.45gb (44.25 GiB, 36 SMs) from the `nvidia-smi mig
    # -lgip` in NVIDIA/mig-parted#187 (the listing that added 4g.90gb). 3g/4g memory DERIVED; 3g/4g SMs DERIVED as
    # 18 per compute slice (the 2g has 2 x 18); 7g SMs = all 148 (UG table: "Full").
    "B200": {
        "name": "NVIDIA B200", "pci_device_id": 0x290110DE, "memory_total_mib": 183359,
        "compute_capability": "10.0", "architecture": "blackwell", "sms": 148,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
            (20992, 45312, derived_mib(183359, 4), derived_mib(183359, 8)), _B200_SMS)},
    },
    # GB200 (one GPU of a GB200 tray): name and 189471 MiB from public nvidia-smi output of GB200 nodes (driver
    # 580.95.05); PCI 0x2941 (pci.ids "GB100 [HGX GB200]", config-default all-balanced filter); cc 10.0 and 186GB
    # (UG gpus). The UG has no GB200 profile table. Names are those of production boards (NVIDIA/mig-parted#227 and
    # the fix #228: 1g.23gb, 1g.47gb, 2g.47gb, 3g.93gb, 4g.93gb, 7g.186gb; an earlier driver named 1g.24gb and
    # 3g.95gb, mig-parted PR #175); ids 19/20/15/14, 1g.23gb (22.00 GiB, 18 SMs), 1g.47gb (45.50 GiB, 32 SMs) and
    # 2g.47gb (45.50 GiB, 38 SMs) from the -lgip in mig-parted#227; max instances of 3g/4g/7g from config-default
    # (all-3g.93gb: 2, all-4g.93gb: 1, all-7g.186gb: 1). 3g/4g/7g memory DERIVED; their SMs DERIVED as 19 per
    # compute slice (the 2g has 38): the GPU's SM count is not in any source we could read.
    "GB200": {
        "name": "NVIDIA GB200", "pci_device_id": 0x294110DE, "memory_total_mib": 189471,
        "compute_capability": "10.0", "architecture": "blackwell", "sms": None,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
            (22528, 46592, derived_mib(189471, 4), derived_mib(189471, 8)), (18, 32, 38, 57, 76, 133))},
    },
    # B300 (HGX B300): name, cc 10.3, 148 SMs and 275040 MiB from public nvidia-smi / device-query output of
    # B300 nodes (driver 580.x); PCI 0x3182 as config-default's B300 device-filter names it (not yet in the
    # vendored pci.ids). The UG has no B300 profile table: names and counts are config-default's (1g.34gb x7,
    # 1g.34gb+me x1, 1g.67gb x4, 2g.67gb x3, 3g.135gb x2, 4g.135gb x1, 7g.269gb x1; mig-parted commit 47c56d96).
    # All memory DERIVED; SMs DERIVED as B200's per profile (the same 148 SMs in the same 7-slice geometry).
    "B300": {
        "name": "NVIDIA B300 SXM6 AC", "pci_device_id": 0x318210DE, "memory_total_mib": 275040,
        "compute_capability": "10.3", "architecture": "blackwell", "sms": 148,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"),
            _derived_seven_slice_mib(275040), _B200_SMS)},
    },
    # GB300 (one GPU of a GB300 NVL72 compute tray): name, 284208 MiB and compute capability 10.3 from public
    # nvidia-smi output of a four-GPU GB300 tray (driver 580.82.07); PCI 0x31C2 (config-default's GB300 device-filter;
    # NVIDIA's open table row "31C2 10DE 21F1 NVIDIA GB300"). The UG has no GB300 table: names and counts are
    # config-default's (1g.35gb x7, 1g.35gb+me x1, 1g.70gb x4, 2g.70gb x3, 3g.139gb x2, 4g.139gb x1, 7g.278gb x1;
    # mig-parted commit 75449116). All memory DERIVED (it gives exactly those names); SMs DERIVED as B300's per
    # profile (the same Blackwell Ultra GPU and 7-slice geometry); the GPU's SM count is not in a source we read.
    "GB300": {
        "name": "NVIDIA GB300", "pci_device_id": 0x31C210DE, "memory_total_mib": 284208,
        "compute_capability": "10.3", "architecture": "blackwell", "sms": None,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"),
            _derived_seven_slice_mib(284208), _B200_SMS)},
    },
    # GH200 (H100 96GB HBM3 on Grace Hopper): name, 132 SMs and 97871 MiB from public nvidia-smi output of GH200
    # nodes; PCI 0x2342 (pci.ids "GH200 120GB / 480GB"; config-default all-balanced filter "H100-96GB, PG506-96GB,
    # GH200, H20"); cc 9.0 (UG gpus). Rows: the UG table for "H100 96GB (H100 on GH200)". Memory DERIVED; SMs
    # DERIVED as the H100 80GB reading's (same GH100 die with 132 SMs). The GH200 144G HBM3e (0x2348, 1g.18gb...)
    # is a different part and is not modelled.
    "GH200": {
        "name": "NVIDIA GH200 480GB", "pci_device_id": 0x234210DE, "memory_total_mib": 97871,
        "compute_capability": "9.0", "architecture": "hopper", "sms": 132,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
            _derived_seven_slice_mib(97871), _H100_SMS)},
    },
    # H100 NVL (94GB, PCIe): name and 95830 MiB from public nvidia-smi output; PCI 0x2321 (pci.ids "GH100 [H100L
    # 94GB]"; config-default all-balanced filter "H100 NVL"); cc 9.0 (UG gpus). Its profiles differ from the SXM5
    # 80GB part's (1g.12gb ... 7g.94gb): the UG table for "H100 94GB (PCIe and SXM5)". Memory DERIVED; SMs DERIVED
    # as the H100 80GB reading's.
    "H100-NVL": {
        "name": "NVIDIA H100 NVL", "pci_device_id": 0x232110DE, "memory_total_mib": 95830,
        "compute_capability": "9.0", "architecture": "hopper", "sms": None,
        "mig": {"memory_slices": 8, "compute_slices": 7, "profiles": _seven_slice(
            ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
            _derived_seven_slice_mib(95830), _H100_SMS)},
    },
    # RTX PRO 6000 Blackwell Server Edition: name and 97887 MiB from public nvidia-smi output (driver 595.71.05);
    # PCI 0x2BB5 (pci.ids "GB202GL [RTX PRO 6000 Blackwell Server Edition]"; config-default filter); cc 12.0, 4
    # instances (UG gpus). 4 memory and 4 compute slices. Rows: the UG table (the same for the Workstation, Max-Q
    # and Server Editions) and a published `nvidia-smi mig -lgip` of an RTX PRO 6000 Blackwell Max-Q (driver
    # 580.105.08): ids, instances, GiB (23.62 -> 23.625, 47.38 -> 47.375, 95.00) and SMs (46, 94, 188) of every
    # row; the same listing names CI profile id 0 inside a 1g GI. Placements DERIVED from the 4-slice geometry
    # (1g at any slice, 2g on aligned pairs, 4g whole), the same as the A30's: no -lgipp output is published.
    "RTX-PRO-6000": {
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "pci_device_id": 0x2BB510DE,
        "memory_total_mib": 97887, "compute_capability": "12.0", "architecture": "blackwell", "sms": 188,
        "mig": {"memory_slices": 4, "compute_slices": 4, "profiles": [
            ("1_SLICE", 14, "1g.24gb", 1, 1, 4, 24192, 46, [0, 1, 2, 3]),
            ("1_SLICE_REV1", 21, "1g.24gb+me", 1, 1, 1, 24192, 46, [0, 1, 2, 3]),
            ("1_SLICE_GFX", 47, "1g.24gb+gfx", 1, 1, 4, 24192, 46, [0, 1, 2, 3]),
            ("1_SLICE_ALL_ME", 65, "1g.24gb+me.all", 1, 1, 1, 24192, 46, [0, 1, 2, 3]),
            ("1_SLICE_NO_ME", 67, "1g.24gb-me", 1, 1, 4, 24192, 46, [0, 1, 2, 3]),
            ("2_SLICE", 5, "2g.48gb", 2, 2, 2, 48512, 94, [0, 2]),
            ("2_SLICE_GFX", 35, "2g.48gb+gfx", 2, 2, 2, 48512, 94, [0, 2]),
            ("2_SLICE_ALL_ME", 64, "2g.48gb+me.all", 2, 2, 1, 48512, 94, [0, 2]),
            ("2_SLICE_NO_ME", 66, "2g.48gb-me", 2, 2, 2, 48512, 94, [0, 2]),
            ("4_SLICE", 0, "4g.96gb", 4, 4, 1, 97280, 188, [0]),
            ("4_SLICE_GFX", 32, "4g.96gb+gfx", 4, 4, 1, 97280, 188, [0]),
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
    # The lent machine of this project: one H200, as read in tests/fixtures/h200.
    "h200-x1": ["H200"],
    # Smaller H200 nodes, so that a GPUs-per-node series (1, 2, 4, 8 H200: h200-x1, h200-x2, h200-x4, hgx-h200)
    # keeps one GPU model (bench/fleet.py --gpus-per-node).
    "h200-x2": ["H200"] * 2,
    "h200-x4": ["H200"] * 4,
    # Blackwell and the other Hopper memory sizes (sources in GPU_MODELS).
    "hgx-b200": ["B200"] * 8,
    "hgx-b300": ["B300"] * 8,
    # One compute tray of a GB200 / GB300 NVL72 rack: 2 Grace CPUs, 4 GPUs; 18 trays make the rack's 72 GPUs, one
    # NVLink domain (NVIDIA's GB200 NVL72 and GB300 NVL72 product pages: 36 Grace CPUs and 72 GPUs in one NVLink
    # domain). The simulator gives the trays of one rack its cluster and clique (GPUOPS_SIMULATED_RACK).
    "gb200-nvl": ["GB200"] * 4,
    "gb300-nvl": ["GB300"] * 4,
    "gh200": ["GH200"],
    "rtx-pro-6000-x8": ["RTX-PRO-6000"] * 8,
    "h100-nvl-x2": ["H100-NVL"] * 2,
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
    """The order `nvidia-smi mig -lgip` prints: by compute slices, memory slices, then profile id (the published
    RTX PRO 6000 listing prints 1g.24gb+me.all, id 65, before 1g.24gb-me, id 67, although NVML's index of the
    -me variant is the lower one)."""
    return sorted(profiles, key=lambda p: (p["slices"], p["memory_slices"] or 0, p["id"]))


def model(model_key):
    return copy.deepcopy(GPU_MODELS[model_key])


def model_key_for_name(name):
    """Catalog key of a GPU by its NVML name, or None."""
    for key, m in GPU_MODELS.items():
        if m["name"] == name:
            return key
    return None


# ---------------------------------------------------------------------------------------------------------------
# Below NVML: naming a GPU from PCI sysfs before a driver is loaded, and which kernel-module flavour can run it.
#
# Sources, short names used below:
#   open table = NVIDIA/open-gpu-kernel-modules at 580.95.05, README.md, "Compatible GPUs": "The NVIDIA open kernel
#                modules can be used on any Turing or later GPU", with one row per product and PCI id (device, or
#                device + subsystem vendor + subsystem device). Rows copied below as (subsystem vendor, subsystem
#                device); None = a row with the device id alone.
#   pci.ids    = the PCI id database vendored by go-nvlib (pkg/pciids/default_pci.ids, 2025.07.11), NVIDIA 10de.
#   kernel modules page = NVIDIA Data Center driver installation guide, "Kernel Modules"
#                (docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html): the open flavour
#                needs the GSP (Turing and later); Maxwell, Pascal and Volta need the proprietary flavour; Blackwell
#                and later need the open flavour.
# ---------------------------------------------------------------------------------------------------------------
# Oldest first. Before Fermi, the families as envytools names them (envytools/envytools at 0c9ea6be, docs/hw/gpu.rst):
# the chip families of NVIDIA's PCI id database (_nvidia_pci_ids.ARCHITECTURE_RANGES) all have a place here. Rubin is
# announced as the architecture after Blackwell (no PCI id of it is published yet).
ARCHITECTURE_ORDER = ("nv1", "nv3", "nv4", "celsius", "kelvin", "rankine", "curie", "tesla", "fermi", "kepler",
                      "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "rubin")
OPEN_MODULES_FIRST_ARCHITECTURE = "turing"          # kernel modules page; open table's first sentence
PROPRIETARY_LAST_ARCHITECTURE = "hopper"            # kernel modules page: Blackwell and later need open modules
OPEN_TABLE_SOURCE = "NVIDIA/open-gpu-kernel-modules at 580.95.05, README.md, Compatible GPUs"

# Catalog model -> the open table's rows for its PCI device id (the device id is the model's pci_device_id >> 16).
OPEN_MODULE_ROWS = {
    "H200": [(0x10DE, 0x18BE), (0x10DE, 0x18BF)],
    "H100-SXM5-80GB": [(0x10DE, 0x16C0), (0x10DE, 0x16C1)],
    "A100-SXM4-40GB": [None],       # the row "20B0" alone (the table's "20B0 10DE 1450" is another board, PG509-200)
    "A100-SXM4-80GB": [(0x10DE, 0x1463), (0x10DE, 0x147F), (0x10DE, 0x1622), (0x10DE, 0x1623)],
    "A30": [(0x10DE, 0x1532), (0x10DE, 0x1804), (0x10DE, 0x1852)],
    "B200": [(0x10DE, 0x1999), (0x10DE, 0x199B), (0x10DE, 0x20DA)],
    "GB200": [(0x10DE, 0x2046), (0x10DE, 0x20CA), (0x10DE, 0x20D5), (0x10DE, 0x21C9), (0x10DE, 0x21CA)],
    "B300": [(0x10DE, 0x20E6)],
    "GB300": [(0x10DE, 0x21F1)],
    "GH200": [(0x10DE, 0x16EB), (0x10DE, 0x1805), (0x10DE, 0x1809)],   # GH200 120GB (x2), GH200 480GB
    "H100-NVL": [(0x10DE, 0x1839)],
    "RTX-PRO-6000": [(0x10DE, 0x204E)],
    "L40S": [(0x10DE, 0x1851), (0x10DE, 0x18CF)],
}

# GPUs the collection names from PCI but does not simulate (no MIG tables here): the data-center parts a fleet still
# runs. Names as pci.ids writes them (the open table's names where it has the part); architecture from the chip name
# (TU = Turing, GA10x = Ampere, AD = Ada, GV = Volta, GP = Pascal). V100 and P100 are in no row of the open table:
# they run the proprietary flavour only.
PCI_ONLY_MODELS = {
    "T4": {"name": "Tesla T4", "device_id": 0x1EB8, "architecture": "turing", "open_rows": [(0x10DE, 0x12A2)]},
    "A10": {"name": "NVIDIA A10", "device_id": 0x2236, "architecture": "ampere", "open_rows": [(0x10DE, 0x1482)]},
    "L4": {"name": "NVIDIA L4", "device_id": 0x27B8, "architecture": "ada",
           "open_rows": [(0x10DE, 0x16CA), (0x10DE, 0x16EE)]},
    "V100-SXM2-16GB": {"name": "Tesla V100 SXM2 16GB", "device_id": 0x1DB1, "architecture": "volta", "open_rows": []},
    "V100-PCIE-16GB": {"name": "Tesla V100 PCIe 16GB", "device_id": 0x1DB4, "architecture": "volta", "open_rows": []},
    "V100-SXM2-32GB": {"name": "Tesla V100 SXM2 32GB", "device_id": 0x1DB5, "architecture": "volta", "open_rows": []},
    "V100-PCIE-32GB": {"name": "Tesla V100 PCIe 32GB", "device_id": 0x1DB6, "architecture": "volta", "open_rows": []},
    "P100-PCIE-16GB": {"name": "Tesla P100 PCIe 16GB", "device_id": 0x15F8, "architecture": "pascal", "open_rows": []},
    "P100-SXM2-16GB": {"name": "Tesla P100 SXM2 16GB", "device_id": 0x15F9, "architecture": "pascal", "open_rows": []},
}

# NVSwitch PCI functions (class 0x0680, "bridge, other"). Device ids as the NVSwitch driver of
# NVIDIA/open-gpu-kernel-modules at 580.95.05 lists them (src/common/nvswitch/kernel/nvswitch.c:
# nvswitch_lr10_device_ids, and the PCIe management endpoints of nvswitch_ls10_device_ids); SV10 (first generation,
# HGX-2 / DGX-2 with V100) from the comment in src/nvidia/generated/g_kernel_nvlink_nvoc.h ("Willow device ID is
# 0x10F5 or 0x1AC0..0x1ACF"), which the open NVSwitch driver does not drive. pci.ids names 1af1 "GA100 [A100
# NVSwitch]" and 22a3 "GH100 [H100 NVSwitch]"; the Fabric Manager user guide's "GPU Baseboard Topologies" shows
# 1ac2 on HGX-2, 1af1 on HGX A100 and 22a3 on HGX H100. On HGX B200/B300 the NVSwitches are not PCI devices of the
# host (same guide): they are reached through a ConnectX-7 bridge whose VPD names SW_MNG (an NVLink5 system).
NVSWITCH_GENERATIONS = {
    "sv10": {"name": "NVSwitch (first generation, V100)", "open_modules": False,
             "device_ids": [0x10F5] + list(range(0x1AC0, 0x1AD0))},
    "lr10": {"name": "NVSwitch (second generation, A100)", "open_modules": True,
             "device_ids": [0x1AE8] + list(range(0x1AF0, 0x1B00))},
    "ls10": {"name": "NVSwitch (third generation, H100/H200)", "open_modules": True,
             "device_ids": list(range(0x22A0, 0x22A8))},
}

# The NVSwitches of the machine shapes, in PCI bus order: (generation, device id, count). The Fabric Manager user
# guide shows six 1af1 on an HGX A100 and four 22a3 on an HGX H100 (H200: "the same as HGX H100"). NVLink5 shapes
# have instead the ConnectX-7 bridge functions named in NVLINK5_SHAPES.
SHAPE_NVSWITCHES = {
    "dgx-a100-40gb": ("lr10", 0x1AF1, 6),
    "dgx-a100-80gb": ("lr10", 0x1AF1, 6),
    "hgx-h100-80gb": ("ls10", 0x22A3, 4),
    "hgx-h200": ("ls10", 0x22A3, 4),
}
# HGX B200/B300: four ConnectX-7 bridge functions (two ports, each a full-capability PF and a limited PF whose VPD
# carries SW_MNG), as the Fabric Manager user guide describes them.
NVLINK5_SHAPES = ("hgx-b200", "hgx-b300")
# NVSwitch bus numbers: those of a DGX A100 (public `lspci` of DGX A100 nodes list them at c4..c9 next to GPUs at
# 07, 0f, 47, 4e, 87, 90, b7, bd, the simulator's GPU bus numbers); the H100/H200 shapes keep the same numbers
# although a DGX H100 lists its four at 05..08, because the simulator's GPUs keep the DGX A100's bus numbers.
_NVSWITCH_BUS_NUMBERS = [0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9]
# The PCI subsystem of a simulated GPU whose open-table row has no subsystem (A100-SXM4-40GB): NVIDIA's vendor id and
# subsystem device 0000, a placeholder (no reading of that board's subsystem id was at hand).
_SIMULATED_SUBSYSTEM_DEFAULT = (0x10DE, 0x0000)


def architecture_rank(architecture):
    """Position of an architecture in ARCHITECTURE_ORDER (None when unknown)."""
    try:
        return ARCHITECTURE_ORDER.index(architecture)
    except ValueError:
        return None


def architecture_title(architecture):
    """An architecture as a sentence names it: "Blackwell", and the NV1, NV3 and NV4 families in capitals."""
    if architecture in ("nv1", "nv3", "nv4"):
        return architecture.upper()
    return (architecture or "unknown").capitalize()


def open_modules_supported(architecture):
    """Whether NVIDIA's open kernel modules can run a GPU of this architecture (Turing and later), None if unknown."""
    rank = architecture_rank(architecture)
    if rank is None:
        return None
    return rank >= ARCHITECTURE_ORDER.index(OPEN_MODULES_FIRST_ARCHITECTURE)


def proprietary_modules_supported(architecture):
    """Whether the proprietary kernel modules can run a GPU of this architecture (not Blackwell or later)."""
    rank = architecture_rank(architecture)
    if rank is None:
        return None
    return rank <= ARCHITECTURE_ORDER.index(PROPRIETARY_LAST_ARCHITECTURE)


def _pci_index():
    index = {}
    for key, m in GPU_MODELS.items():
        index.setdefault(m["pci_device_id"] >> 16, []).append(
            {"key": key, "name": m["name"], "architecture": m["architecture"], "open_rows": OPEN_MODULE_ROWS[key]})
    for key, m in PCI_ONLY_MODELS.items():
        index.setdefault(m["device_id"], []).append(
            {"key": key, "name": m["name"], "architecture": m["architecture"], "open_rows": m["open_rows"]})
    return index


_PCI_INDEX = _pci_index()


def gpu_by_pci(device_id, subsystem_vendor=None, subsystem_device=None):
    """The catalog's GPU for a PCI device id (and subsystem, where the catalog has several models on one device id),
    as {"key", "name", "architecture", "open_modules", "open_module_row"}, or None when the device id is unknown.

    ``open_modules`` follows the open table's rule (Turing and later); ``open_module_row`` says whether the board's
    exact (device, subsystem) or the bare device id is a row of that table (False for a board the table does not
    list, which the rule still covers)."""
    candidates = _PCI_INDEX.get(device_id)
    if not candidates:
        return None
    chosen = candidates[0]
    for cand in candidates:
        if (subsystem_vendor, subsystem_device) in cand["open_rows"]:
            chosen = cand
            break
    rows = chosen["open_rows"]
    return {
        "key": chosen["key"], "name": chosen["name"], "architecture": chosen["architecture"],
        "open_modules": open_modules_supported(chosen["architecture"]),
        "open_module_row": None in rows or (subsystem_vendor, subsystem_device) in rows,
    }


def nvswitch_generation(device_id):
    """The NVSwitch generation key ('sv10', 'lr10', 'ls10') of an NVIDIA PCI device id, or None."""
    for key, gen in NVSWITCH_GENERATIONS.items():
        if device_id in gen["device_ids"]:
            return key
    return None


def simulated_subsystem(model_key):
    """The PCI subsystem (vendor, device) the simulator gives a GPU of this model: the model's first board in the
    open table, or the bare id's NVIDIA default when the table lists the device id alone."""
    rows = OPEN_MODULE_ROWS.get(model_key) or []
    for row in rows:
        if row is not None:
            return row
    return _SIMULATED_SUBSYSTEM_DEFAULT


def nvswitch_bus_id(position):
    """PCI bus id (sysfs form, 4-hex-digit domain) of the simulated machine's NVSwitch at this position."""
    return "0000:%02x:00.0" % _NVSWITCH_BUS_NUMBERS[position]


# ---------------------------------------------------------------------------------------------------------------
# GPU-to-GPU bandwidth floors of the burn-in's nvbandwidth check (_nvbandwidth.py; docs/health.md, "Burn-in").
#
# NVLINK_GBPS: NVIDIA's published NVLink bandwidth per GPU, in GB/s, BIDIRECTIONAL (the sum of both directions, as
# NVIDIA states it), for the models whose GPUs of one node all reach each other over NVLink (through NVSwitches on
# HGX/DGX boards, or the GB200 tray's NVLink). Sources: NVIDIA's product pages and datasheets - "NVIDIA H100 Tensor
# Core GPU" datasheet, H100 SXM: NVLink 900GB/s (NVLink 4, 18 links of 50 GB/s); "NVIDIA H200 Tensor Core GPU",
# H200 SXM: NVLink 900GB/s; "NVIDIA A100 Tensor Core GPU" datasheet, A100 SXM: NVLink 600GB/s (NVLink 3, 12 links);
# "NVIDIA HGX Platform" (HGX B200, HGX B300) and "NVIDIA GB200 NVL72": fifth-generation NVLink, 1.8TB/s per GPU
# (18 links of 100 GB/s). The same figures are in NVIDIA's MLPerf system descriptions (mlcommons/inference_results
# v4.1 closed/NVIDIA/systems H200-SXM-141GBx8: "18x 4th Gen NVLink, 900GB/s").
# Models left out skip the check with a note: H100 NVL and A30 join GPUs in PAIRS with NVLink bridges (the other pairs
# of a node cross PCIe, and which pairs are bridged is not known here); GH200 is one GPU per node; RTX PRO 6000 and
# L40S have no NVLink.
NVLINK_GBPS = {
    "H100-SXM5-80GB": 900, "H200": 900, "A100-SXM4-40GB": 600, "A100-SXM4-80GB": 600,
    "B200": 1800, "B300": 1800, "GB200": 1800,
}
# The floor: a stated fraction of the unidirectional peak (half the bidirectional figure: nvbandwidth's
# device_to_device tests copy one way at a time). A healthy link measures well below the peak but well above this
# floor: nvbandwidth's README (NVIDIA/nvbandwidth at v0.8) shows device_to_device_memcpy_write_ce at 274.9-276.8 GB/s
# on every pair of an 8-GPU node (it does not name the GPUs: 92 % of 300 if they are A100s), and a public H100 SXM
# report (NVIDIA/nccl issue 1264, CUDA's p2pBandwidthLatencyTest) measures 376-380 GB/s one way of 450 (84 %). 0.7
# leaves a healthy pair a margin of 14 points or more against run-to-run noise
# and catches what a burn-in must catch: a pair that falls back to PCIe (tens of GB/s), or one that lost a third or
# more of its links or bandwidth. A single NVLink down of 18 (a 6 % loss) is NOT caught by it; the health read's NVLink
# state finds that one.
NVBANDWIDTH_FLOOR_FRACTION = 0.7


def nvbandwidth_floor_gbps(model_key):
    """The GB/s that every GPU-to-GPU copy between two GPUs of this model must reach in nvbandwidth's
    device_to_device tests (NVLINK_GBPS / 2 x NVBANDWIDTH_FLOOR_FRACTION), or None: no floor, not checked."""
    peak = NVLINK_GBPS.get(model_key)
    if peak is None:
        return None
    return round(peak / 2.0 * NVBANDWIDTH_FLOOR_FRACTION, 1)
