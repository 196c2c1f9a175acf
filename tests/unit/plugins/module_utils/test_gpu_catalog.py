"""The simulator's profile tables against real readings and the published rules they must obey."""
import json
import os
import re

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")
# Catalog model -> a read-only NVML reading of that model on real hardware (tests/gpu/nvml_reading.py).
READINGS = {"H200": "h200", "H100-SXM5-80GB": "h100"}


def _reading(model):
    with open(os.path.join(FIXTURES, READINGS[model], "nvml_reading.json")) as handle:
        return json.load(handle)


def _lgipp_placements(text):
    """Parse `nvidia-smi mig -lgipp`: 'GPU  0 Profile ID 19 Placements: {0,1,2}:1'."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"GPU\s+\d+\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)", line)
        if m:
            out[int(m.group(1))] = ([int(s) for s in m.group(2).split(",")], int(m.group(3)))
    return out


@pytest.mark.parametrize("model", sorted(READINGS))
def test_gi_table_equals_the_real_nvml_reading(model):
    reading = _reading(model)
    real = {}
    for index_name, answer in reading["devices"][0]["gi_profiles"].items():
        info = answer["v"]
        if "nvml_error" in info:
            continue
        real[info["id"]] = {
            "name": info["name"][len("MIG "):], "slices": info["sliceCount"],
            "max_instances": info["instanceCount"], "memory_mib": info["memorySizeMB"],
            "sms": info["multiprocessorCount"], "nvml_index": index_name[len("NVML_GPU_INSTANCE_PROFILE_"):],
        }
    ours = dict((p["id"], p) for p in catalog.gi_profiles(model))
    assert sorted(ours) == sorted(real)
    for pid, r in real.items():
        o = ours[pid]
        assert (o["name"], o["slices"], o["max_instances"], o["memory_mib"], o["sms"]) == (
            r["name"], r["slices"], r["max_instances"], r["memory_mib"], r["sms"]), pid
        assert o["nvml_index"] == catalog.GI_PROFILE_INDEX[r["nvml_index"]]


@pytest.mark.parametrize("model", sorted(READINGS))
def test_placements_equal_real_lgipp_output(model):
    real = _lgipp_placements(_reading(model)["cmds"]["nvidia-smi mig -lgipp"]["out"])
    assert len(real) == 7
    for p in catalog.gi_profiles(model):
        starts, size = real[p["id"]]
        assert [pl["start"] for pl in p["placements"]] == starts, p["name"]
        assert all(pl["size"] == size for pl in p["placements"]), p["name"]


@pytest.mark.parametrize("model", sorted(READINGS))
def test_model_identity_equals_reading(model):
    dev = _reading(model)["devices"][0]
    m = catalog.GPU_MODELS[model]
    assert m["name"] == dev["name"]
    assert m["pci_device_id"] == dev["pci"]["pciDeviceId"]
    assert m["memory_total_mib"] * 1024 * 1024 == dev["memory"]["total"]
    assert m["compute_capability"] == "%d.%d" % tuple(dev["cuda_cc"])


@pytest.mark.parametrize("model", sorted(k for k, v in catalog.GPU_MODELS.items() if v["mig"]))
def test_profile_tables_obey_the_placement_rules(model):
    mig = catalog.GPU_MODELS[model]["mig"]
    profiles = catalog.gi_profiles(model)
    ids = [p["id"] for p in profiles]
    assert len(ids) == len(set(ids)), "profile ids are unique per GPU"
    for p in profiles:
        for pl in p["placements"]:
            assert pl["start"] % pl["size"] == 0 or pl["size"] == 1, (p["name"], pl)
            assert pl["start"] + pl["size"] <= mig["memory_slices"], (p["name"], pl)
        # max instances never exceeds what disjoint placements allow
        disjoint = mig["memory_slices"] // p["memory_slices"]
        assert p["max_instances"] <= min(disjoint, len(p["placements"])), p["name"]
        assert p["slices"] <= mig["compute_slices"]
        # the name carries the compute-slice count
        assert p["name"].startswith("%dg." % p["slices"]), p["name"]
    full = [p for p in profiles if p["slices"] == mig["compute_slices"]]
    assert len([p for p in full if "+" not in p["name"] and "-" not in p["name"]]) == 1
    assert all(p["placements"] == [{"start": 0, "size": mig["memory_slices"]}] for p in full)


def test_a100_40gb_matches_the_user_guide_table():
    # mig.md §3.2 (UG -lgip/-lgipp): name -> (id, max, SMs, placement starts, size)
    expected = {
        "1g.5gb": (19, 7, 14, [0, 1, 2, 3, 4, 5, 6], 1), "1g.5gb+me": (20, 1, 14, [0, 1, 2, 3, 4, 5, 6], 1),
        "1g.10gb": (15, 4, 14, [0, 2, 4, 6], 2), "2g.10gb": (14, 3, 28, [0, 2, 4], 2),
        "3g.20gb": (9, 2, 42, [0, 4], 4), "4g.20gb": (5, 1, 56, [0], 4), "7g.40gb": (0, 1, 98, [0], 8),
    }
    got = dict((p["name"], (p["id"], p["max_instances"], p["sms"], [x["start"] for x in p["placements"]],
                            p["memory_slices"])) for p in catalog.gi_profiles("A100-SXM4-40GB"))
    assert got == expected


def test_a30_ids_differ_from_a100_ids_for_the_same_slice_count():
    a30 = dict((p["name"], p["id"]) for p in catalog.gi_profiles("A30"))
    assert a30 == {"1g.6gb": 14, "1g.6gb+me": 21, "2g.12gb": 5, "2g.12gb+me": 6, "4g.24gb": 0}


def test_compute_instance_profiles_inside_a_3g_gi_on_a100_40gb():
    three = [p for p in catalog.gi_profiles("A100-SXM4-40GB") if p["name"] == "3g.20gb"][0]
    got = [(c["name"], c["id"], c["max_instances"]) for c in three["ci_profiles"]]
    # UG "Compute Instances": 1c.3g.20gb (id 0, x3), 2c.3g.20gb (id 1, x1), 3g.20gb (id 2, x1)
    assert got == [("1c.3g.20gb", 0, 3), ("2c.3g.20gb", 1, 1), ("3g.20gb", 2, 1)]


def test_non_mig_gpu_has_no_profiles():
    assert catalog.gi_profiles("L40S") == []


def test_every_shape_uses_known_models_and_distinct_bus_ids():
    for shape, models in catalog.MACHINE_SHAPES.items():
        assert models, shape
        assert all(m in catalog.GPU_MODELS for m in models), shape
        buses = [catalog.bus_id(i) for i in range(len(models))]
        assert len(set(buses)) == len(buses)
    for needed in ("dgx-a100-40gb", "dgx-a100-80gb", "hgx-h100-80gb", "hgx-h200", "a30-x4", "l40s-x2", "mixed",
                   "h200-x1", "h200-x2", "h200-x4"):
        assert needed in catalog.MACHINE_SHAPES


# --------------------------------------------------------------------------------------------- Blackwell and others

def _table(model):
    return dict((p["name"], p) for p in catalog.gi_profiles(model))


# The MIG user guide's supported-mig-profiles tables: name -> (fraction of memory, compute slices, instances).
UG_TABLES = {
    "B200": {
        "1g.23gb": ("1/8", 1, 7), "1g.23gb+me": ("1/8", 1, 1), "1g.45gb": ("2/8", 1, 4), "2g.45gb": ("2/8", 2, 3),
        "3g.90gb": ("4/8", 3, 2), "4g.90gb": ("4/8", 4, 1), "7g.180gb": ("8/8", 7, 1)},
    "RTX-PRO-6000": {
        "1g.24gb": ("1/4", 1, 4), "1g.24gb+me": ("1/4", 1, 1), "1g.24gb+gfx": ("1/4", 1, 4),
        "1g.24gb+me.all": ("1/4", 1, 1), "1g.24gb-me": ("1/4", 1, 4), "2g.48gb": ("2/4", 2, 2),
        "2g.48gb+gfx": ("2/4", 2, 2), "2g.48gb+me.all": ("2/4", 2, 1), "2g.48gb-me": ("2/4", 2, 2),
        "4g.96gb": ("4/4", 4, 1), "4g.96gb+gfx": ("4/4", 4, 1)},
    "H100-NVL": {   # the UG's "H100 94GB (PCIe and SXM5)" table
        "1g.12gb": ("1/8", 1, 7), "1g.12gb+me": ("1/8", 1, 1), "1g.24gb": ("2/8", 1, 4), "2g.24gb": ("2/8", 2, 3),
        "3g.47gb": ("4/8", 3, 2), "4g.47gb": ("4/8", 4, 1), "7g.94gb": ("8/8", 7, 1)},
    "GH200": {      # the UG's "H100 96GB (H100 on GH200)" table
        "1g.12gb": ("1/8", 1, 7), "1g.12gb+me": ("1/8", 1, 1), "1g.24gb": ("2/8", 1, 4), "2g.24gb": ("2/8", 2, 3),
        "3g.48gb": ("4/8", 3, 2), "4g.48gb": ("4/8", 4, 1), "7g.96gb": ("8/8", 7, 1)},
}
# No UG table: names and counts from mig-parted's config-default.yaml (all-<profile>: count), memory fractions from
# the 7-slice geometry every other 7-slice table shares.
CONFIG_DEFAULT_TABLES = {
    "GB200": {"1g.23gb": 7, "1g.23gb+me": 1, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1, "7g.186gb": 1},
    "B300": {"1g.34gb": 7, "1g.34gb+me": 1, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1, "7g.269gb": 1},
    "GB300": {"1g.35gb": 7, "1g.35gb+me": 1, "1g.70gb": 4, "2g.70gb": 3, "3g.139gb": 2, "4g.139gb": 1, "7g.278gb": 1},
}


@pytest.mark.parametrize("model", sorted(UG_TABLES))
def test_new_models_match_the_user_guide_tables(model):
    mig = catalog.GPU_MODELS[model]["mig"]
    got = dict((name, ("%d/%d" % (p["memory_slices"], mig["memory_slices"] if mig["memory_slices"] == 4 else 8),
                       p["slices"], p["max_instances"])) for name, p in _table(model).items())
    assert got == UG_TABLES[model]


@pytest.mark.parametrize("model", sorted(CONFIG_DEFAULT_TABLES))
def test_models_without_a_ug_table_match_mig_parteds_shipped_counts(model):
    assert dict((n, p["max_instances"]) for n, p in _table(model).items()) == CONFIG_DEFAULT_TABLES[model]
    assert [p["memory_slices"] for p in catalog.gi_profiles(model)] == [1, 1, 2, 2, 4, 4, 8]


# Published `nvidia-smi mig -lgip` listings: name -> (profile id, instances, memory MiB (GiB x 1024), SMs).
LGIP = {
    # RTX PRO 6000 Blackwell Max-Q, driver 580.105.08, every row (23.62, 47.38, 95.00 GiB as printed)
    "RTX-PRO-6000": {
        "1g.24gb": (14, 4, 24192, 46), "1g.24gb+me": (21, 1, 24192, 46), "1g.24gb+gfx": (47, 4, 24192, 46),
        "1g.24gb+me.all": (65, 1, 24192, 46), "1g.24gb-me": (67, 4, 24192, 46), "2g.48gb": (5, 2, 48512, 94),
        "2g.48gb+gfx": (35, 2, 48512, 94), "2g.48gb+me.all": (64, 1, 48512, 94), "2g.48gb-me": (66, 2, 48512, 94),
        "4g.96gb": (0, 1, 97280, 188), "4g.96gb+gfx": (32, 1, 97280, 188)},
    # NVIDIA/mig-parted#187 (B200, the listing with 4g.90gb); the rows after 2g are not in what is published
    "B200": {"1g.23gb": (19, 7, 20992, 18), "1g.23gb+me": (20, 1, 20992, 18), "1g.45gb": (15, 4, 45312, 30),
             "2g.45gb": (14, 3, 45312, 36)},
    # NVIDIA/mig-parted#227 (GB200 production boards), likewise cut after 2g
    "GB200": {"1g.23gb": (19, 7, 22528, 18), "1g.23gb+me": (20, 1, 22528, 18), "1g.47gb": (15, 4, 46592, 32),
              "2g.47gb": (14, 3, 46592, 38)},
}


@pytest.mark.parametrize("model", sorted(LGIP))
def test_new_models_match_published_lgip_listings(model):
    table = _table(model)
    for name, row in LGIP[model].items():
        p = table[name]
        assert (p["id"], p["max_instances"], p["memory_mib"], p["sms"]) == row, name
    if model == "RTX-PRO-6000":
        assert sorted(table) == sorted(LGIP[model])


# Name, PCI device id (as mig-parted's device-filter values name them), total MiB as nvidia-smi prints it,
# compute capability (UG supported-gpus, or a device query where the UG gives none).
IDENTITY = {
    "B200": ("NVIDIA B200", 0x290110DE, 183359, "10.0", "blackwell"),
    "GB200": ("NVIDIA GB200", 0x294110DE, 189471, "10.0", "blackwell"),
    "B300": ("NVIDIA B300 SXM6 AC", 0x318210DE, 275040, "10.3", "blackwell"),
    "GB300": ("NVIDIA GB300", 0x31C210DE, 284208, "10.3", "blackwell"),
    "GH200": ("NVIDIA GH200 480GB", 0x234210DE, 97871, "9.0", "hopper"),
    "H100-NVL": ("NVIDIA H100 NVL", 0x232110DE, 95830, "9.0", "hopper"),
    "RTX-PRO-6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 0x2BB510DE, 97887, "12.0", "blackwell"),
}


@pytest.mark.parametrize("model", sorted(IDENTITY))
def test_new_models_identity(model):
    m = catalog.GPU_MODELS[model]
    assert (m["name"], m["pci_device_id"], m["memory_total_mib"], m["compute_capability"], m["architecture"]) == \
        IDENTITY[model]


@pytest.mark.parametrize("model", sorted(k for k, v in catalog.GPU_MODELS.items() if v["mig"]))
def test_every_profile_name_follows_from_its_memory(model):
    # go-nvlib derives <GB> from the profile's memory (reference/mig.md 1.2); published or derived, the memory
    # figures must give the names NVIDIA's tools print
    total = catalog.GPU_MODELS[model]["memory_total_mib"]
    for p in catalog.gi_profiles(model):
        gb = int(p["name"].split(".")[1].split("gb")[0])
        assert catalog.mig_name_gb(total, p["memory_mib"]) == gb, (model, p["name"], p["memory_mib"])


def test_mig_name_gb_rounds_halves_away_from_zero():
    # H200 3g: 71424 of 143771 MiB -> 4/8 of 141 GiB = 70.5 -> 71 (Go's math.Round); Python's round() would say 70
    assert catalog.mig_name_gb(143771, 71424) == 71
    assert catalog.mig_name_gb(275040, catalog.derived_mib(275040, 4)) == 135


def test_derived_memory_reproduces_published_rows():
    assert catalog.derived_mib(81559, 1) == 9984      # H100 80GB HBM3 reading: 1g.10gb
    assert catalog.derived_mib(81559, 4) == 40448     # ... 3g.40gb 39.50 GiB
    assert catalog.derived_mib(143771, 4) == 71424    # H200 reading: 3g.71gb
    assert catalog.derived_mib(97887, 4, of=4) == 97280   # RTX PRO 6000 listing: 4g.96gb 95.00 GiB


SUFFIX_INDEX = {"": ("1_SLICE", "2_SLICE", "3_SLICE", "4_SLICE", "7_SLICE", "1_SLICE_REV2"),
                "+me": ("1_SLICE_REV1", "2_SLICE_REV1"), "+gfx": ("1_SLICE_GFX", "2_SLICE_GFX", "4_SLICE_GFX"),
                "-me": ("1_SLICE_NO_ME", "2_SLICE_NO_ME"), "+me.all": ("1_SLICE_ALL_ME", "2_SLICE_ALL_ME")}


@pytest.mark.parametrize("model", sorted(k for k, v in catalog.GPU_MODELS.items() if v["mig"]))
def test_suffixes_map_to_nvmls_profile_index_families(model):
    # go-nvlib NewMigProfile: REV1 -> +me, ALL_ME -> +me.all, GFX -> +gfx, NO_ME -> -me
    names = dict((v, k) for k, v in catalog.GI_PROFILE_INDEX.items())
    for p in catalog.gi_profiles(model):
        suffix = p["name"][p["name"].index("gb") + 2:]
        assert names[p["nvml_index"]] in SUFFIX_INDEX[suffix], (p["name"], names[p["nvml_index"]])
        assert names[p["nvml_index"]].startswith("%d_SLICE" % p["slices"])


def test_new_shapes():
    shapes = catalog.MACHINE_SHAPES
    assert shapes["hgx-b200"] == ["B200"] * 8 and shapes["hgx-b300"] == ["B300"] * 8
    assert shapes["gb200-nvl"] == ["GB200"] * 4 and shapes["gh200"] == ["GH200"]
    assert shapes["gb300-nvl"] == ["GB300"] * 4
    assert shapes["rtx-pro-6000-x8"] == ["RTX-PRO-6000"] * 8 and shapes["h100-nvl-x2"] == ["H100-NVL"] * 2
