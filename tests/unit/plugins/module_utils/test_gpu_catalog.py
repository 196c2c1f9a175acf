"""The simulator's profile tables against real readings and the published rules they must obey."""
import json
import os
import re

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_catalog as catalog

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
    assert len(full) == 1 and full[0]["placements"] == [{"start": 0, "size": mig["memory_slices"]}]


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
