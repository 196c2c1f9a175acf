"""Blackwell (B200, B300, GB200, RTX PRO 6000) and the Hopper parts with other memory sizes (GH200, H100 NVL) in the
planner and the simulator: go-nvlib's profile grammar (+me, -me, +me.all, +gfx, compute-instance sub-profiles on
them), the named layouts on each model, the layouts NVIDIA's mig-parted ships for these models planned and applied
on the simulator exactly as declared, and the generation rules (no reset, MIG mode lost on reboot)."""
import os

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import execute_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import (
    MigLayoutError,
    named_layout_for,
    parse_inline_layout,
    resolve_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import (
    current_devices,
    plan_gpu,
    plan_layout,
    validate_gpu_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import (
    Catalog,
    format_profile_name,
    is_plain_profile,
    parse_profile_name,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    NVML_ERROR_CODES,
    NvmlInsufficientResources,
    NvmlInvalidArgument,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

SHAPES = {"B200": "hgx-b200", "B300": "hgx-b300", "GB200": "gb200-nvl", "GB300": "gb300-nvl", "GH200": "gh200",
          "H100-NVL": "h100-nvl-x2", "RTX-PRO-6000": "rtx-pro-6000-x8"}


def enabled(devs):
    return {"mig_enabled": True, "mig_devices": devs}


def mig_sim(path, shape):
    """A simulator of ``shape`` with MIG enabled on GPU 0 (no reset: every model here is Hopper or later)."""
    sim = SimulatedBackend(str(path), shape=shape)
    assert sim.set_mig_mode(0, True) == 0
    assert sim.read_gpu(0)["mig_mode_current"] == "Enabled"
    return sim


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    """GPU 0 of every new shape, MIG enabled, as gpu_info would return it."""
    base = tmp_path_factory.mktemp("bw-facts")
    return dict((model, mig_sim(base / ("%s.json" % model), shape).read_gpu(0)) for model, shape in SHAPES.items())


# --------------------------------------------------------------------------------------------- grammar

@pytest.mark.parametrize("name,parsed", [
    ("1g.24gb", (1, 1, 24, (), ())),
    ("1g.24gb+me", (1, 1, 24, ("me",), ())),
    ("1g.24gb-me", (1, 1, 24, (), ("me",))),
    ("1g.24gb+me.all", (1, 1, 24, ("me.all",), ())),
    ("1g.24gb+gfx", (1, 1, 24, ("gfx",), ())),
    ("4g.96gb+gfx", (4, 4, 96, ("gfx",), ())),
    ("1c.2g.48gb+gfx", (1, 2, 48, ("gfx",), ())),
    ("2c.4g.96gb+gfx", (2, 4, 96, ("gfx",), ())),
    ("1c.2g.48gb-me", (1, 2, 48, (), ("me",))),
    ("1c.3g.90gb", (1, 3, 90, (), ())),
    ("1g.10gb+gfx,me", (1, 1, 10, ("gfx", "me"), ())),
])
def test_every_suffix_parses_and_round_trips(name, parsed):
    assert parse_profile_name(name) == parsed
    assert format_profile_name(parsed) == name


def test_attribute_lists_compare_as_sets():
    # go-nvlib MigProfileInfo.Matches sorts both attribute lists before comparing them
    assert parse_profile_name("1g.10gb+me,gfx") == parse_profile_name("1g.10gb+gfx,me")
    assert parse_profile_name("1g.24gb+me.all") != parse_profile_name("1g.24gb+me,all")


@pytest.mark.parametrize("name", [
    "1g.24gb+me-me",        # '+' and '-' attributes in one name (go-nvlib: "contains both '+/-' attributes")
    "1g.24gb+", "1g.24gb-",  # empty attribute list
    "1g.24gb+me,",          # empty attribute in the list
    "1g.24gb+me.",          # attribute ends with a dot
    "1g.24gb+.me",          # attribute begins with a dot
    "1g.24gb+1me",          # attribute begins with a digit
    "1g.24gb+me,me",        # attribute twice
    "1g.24gb+me gfx", "1g.24gb+m_e", "1g.24gb++me", " 1g.24gb", "1g.24GB", "g.24gb", "1g.gb", "1c.1g",
    "\uff11g.24gb", "1g.\u0662\u0664gb",  # unicode digits (fullwidth 1, Arabic-Indic 24): Go takes ASCII digits only
    "9" * 5000 + "g.24gb", "1g." + "9" * 5000 + "gb",   # int() refuses more than 4300 digits (fuzz, issue 15)
    "1234567890g.24gb",     # more than 9 digits: no GPU has that many slices
])
def test_malformed_names_are_refused_with_the_valid_forms(name):
    assert parse_profile_name(name) is None
    with pytest.raises(MigLayoutError) as e:
        parse_inline_layout([{"mig_devices": {name: 1}}])
    assert "is not a MIG profile name" in str(e.value)
    for form in ("1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "1c.2g.48gb+gfx"):
        assert form in str(e.value)


_ATTR = st.from_regex(r"[A-Za-z]([A-Za-z0-9.]{0,4}[A-Za-z0-9])?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(0, 8), st.integers(0, 999), st.sampled_from("+-"),
       st.lists(_ATTR, min_size=0, max_size=3, unique=True), st.randoms())
def test_any_grammatical_name_round_trips(g, dc, gb, sign, attrs, rnd):
    c = max(1, g - dc)
    suffix = (sign + ",".join(attrs)) if attrs else ""
    name = ("%dg.%dgb" % (g, gb) if c == g else "%dc.%dg.%dgb" % (c, g, gb)) + suffix
    parsed = parse_profile_name(name)
    assert parsed is not None, name
    assert parse_profile_name(format_profile_name(parsed)) == parsed
    shuffled = list(attrs)
    rnd.shuffle(shuffled)
    other = name[:len(name) - len(suffix)] + ((sign + ",".join(shuffled)) if attrs else "")
    assert parse_profile_name(other) == parsed


def test_unknown_profile_on_rtx_pro_lists_its_suffixed_profiles(facts):
    with pytest.raises(MigLayoutError) as e:
        validate_gpu_layout(facts["RTX-PRO-6000"], enabled({"1g.23gb": 1}))
    msg = str(e.value)
    assert "unknown MIG profile '1g.23gb'" in msg
    for name in ("1g.24gb", "1g.24gb+me", "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb-me",
                 "4g.96gb+gfx", "1c.2g.48gb+gfx", "2c.4g.96gb"):
        assert name in msg, name


def test_unknown_subprofile_of_a_suffixed_profile_names_the_valid_ones(facts):
    with pytest.raises(MigLayoutError, match=r"sub-profiles of 2g.48gb\+gfx here: 1c.2g.48gb\+gfx;"):
        validate_gpu_layout(facts["RTX-PRO-6000"], enabled({"3c.2g.48gb+gfx": 1}))


def test_suffixed_sub_profiles_plan_and_apply(tmp_path):
    sim = mig_sim(tmp_path / "s.json", "rtx-pro-6000-x8")
    want = {"1c.2g.48gb+gfx": 2, "1g.24gb-me": 1, "1g.24gb+me.all": 1}
    plan = plan_gpu(sim.read_gpu(0), enabled(want))
    execute_plan(sim, 0, plan["operations"])
    after = sim.read_gpu(0)
    assert current_devices(after) == want
    assert sorted(gi["profile"] for gi in after["gpu_instances"]) == ["1g.24gb+me.all", "1g.24gb-me", "2g.48gb+gfx"]
    assert plan_gpu(after, enabled(want))["operations"] == []


def test_two_4g_profiles_cannot_share_an_rtx_pro(facts):
    with pytest.raises(MigLayoutError, match="needs 8 memory slices, the GPU has 4"):
        validate_gpu_layout(facts["RTX-PRO-6000"], enabled({"4g.96gb": 1, "4g.96gb+gfx": 1}))


# --------------------------------------------------------------------------------------------- named layouts

# mig-parted config-default.yaml all-balanced, per device-filter (reference/mig.md 1.3 table)
BALANCED = {
    "B200": {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
    "GB200": {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1},
    "B300": {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1},
    "GB300": {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1},
    "GH200": {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1},
    "H100-NVL": {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1},
    "RTX-PRO-6000": {"1g.24gb": 2, "2g.48gb": 1},
}


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_all_balanced_on_each_new_model(model, facts):
    assert named_layout_for(facts[model], "all-balanced") == enabled(BALANCED[model])


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_all_size_layouts_on_each_new_model(model, facts):
    gpu = facts[model]
    if model == "RTX-PRO-6000":
        counts = {1: 4, 2: 2, 4: 1}
    else:
        counts = {1: 7, 2: 3, 3: 2, 4: 1, 7: 1}
    for size, n in counts.items():
        devs = named_layout_for(gpu, "all-%dg" % size)["mig_devices"]
        assert len(devs) == 1, devs
        name, count = list(devs.items())[0]
        assert name.startswith("%dg." % size) and is_plain_profile(name) and count == n, (size, devs)
    missing = sorted(set(range(1, 8)) - set(counts))
    with pytest.raises(MigLayoutError, match="valid sizes on this GPU: %s" % ", ".join(
            "all-%dg" % s for s in sorted(counts))):
        named_layout_for(gpu, "all-%dg" % missing[0])


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_all_profile_layouts_on_each_new_model(model, facts):
    # every profile, in both spellings: as many as fit (mig-parted's generated layouts use the instance count)
    for prof in facts[model]["gi_profiles"]:
        want = enabled({prof["name"]: prof["max_instances"]})
        assert named_layout_for(facts[model], "all-" + prof["name"]) == want
        assert named_layout_for(facts[model], "all-" + prof["name"].replace("+", ".")) == want


@pytest.mark.parametrize("name,expected", [
    ("all-1g.24gb+gfx", {"1g.24gb+gfx": 4}),
    ("all-1g.24gb.gfx", {"1g.24gb+gfx": 4}),        # mig-parted's spelling of the same layout
    ("all-1g.24gb+me.all", {"1g.24gb+me.all": 1}),
    ("all-1g.24gb.me.all", {"1g.24gb+me.all": 1}),
    ("all-1g.24gb-me", {"1g.24gb-me": 4}),
    ("all-1g.24gb.me", {"1g.24gb+me": 1}),
    ("all-2g.48gb.gfx", {"2g.48gb+gfx": 2}),
    ("all-2g.48gb-me", {"2g.48gb-me": 2}),
    ("all-2g.48gb.me.all", {"2g.48gb+me.all": 1}),
    ("all-4g.96gb.gfx", {"4g.96gb+gfx": 1}),
])
def test_all_profile_layouts_with_suffixes_on_rtx_pro(name, expected, facts):
    assert named_layout_for(facts["RTX-PRO-6000"], name) == enabled(expected)


def test_all_profile_names_a_profile_this_gpu_lacks(facts):
    with pytest.raises(MigLayoutError) as e:
        named_layout_for(facts["B200"], "all-1g.24gb.gfx")
    assert "names profile '1g.24gb.gfx', which this GPU does not offer" in str(e.value)
    assert "1g.23gb+me" in str(e.value) and "7g.180gb" in str(e.value)


# --------------------------------------------------------------------------------------------- mig-parted's files

def _all(profile, count):
    return [{"devices": "all", "mig-enabled": True, "mig-devices": {profile: count}}]


def _filtered(device_filter, devices):
    return {"device-filter": device_filter, "devices": "all", "mig-enabled": True, "mig-devices": devices}


# The configurations NVIDIA's mig-parted ships for these models (NVIDIA/mig-parted@bd7160f4
# deployments/systemd/config-default.yaml): every all-<profile> layout whose profile one of them offers, and the
# whole all-balanced layout with its per-model device filters. Names, counts and filters as published.
PUBLISHED = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    "all-balanced": [
        _filtered(["0x294110DE"], {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}),
        _filtered(["0x31C210DE"], {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}),
        _filtered(["0x2BB510DE"], {"1g.24gb": 2, "2g.48gb": 1}),
        _filtered(["0x290110DE"], {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
        _filtered(["0x318210DE"], {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}),
        _filtered(["0x234810DE"], {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}),
        _filtered(["0x233510DE", "0x233B10DE"], {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        _filtered(["0x232110DE", "0x233A10DE"], {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
        _filtered(["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE",
                   "0x20F510DE", "0x232410DE"], {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        _filtered(["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"], {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        _filtered("0x20B710DE", {"1g.6gb": 2, "2g.12gb": 1}),
        _filtered(["0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"], {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
    ],
    # RTX PRO 6000 Blackwell
    "all-1g.24gb.gfx": _all("1g.24gb+gfx", 4), "all-1g.24gb.me.all": _all("1g.24gb+me.all", 1),
    "all-1g.24gb-me": _all("1g.24gb-me", 4), "all-2g.48gb": _all("2g.48gb", 2),
    "all-2g.48gb.gfx": _all("2g.48gb+gfx", 2), "all-2g.48gb.me.all": _all("2g.48gb+me.all", 1),
    "all-2g.48gb-me": _all("2g.48gb-me", 2), "all-4g.96gb": _all("4g.96gb", 1),
    "all-4g.96gb.gfx": _all("4g.96gb+gfx", 1),
    # H100 NVL, H800 NVL, GH200 (and, by name, RTX PRO 6000)
    "all-1g.12gb": _all("1g.12gb", 7), "all-1g.12gb.me": _all("1g.12gb+me", 1), "all-1g.24gb": _all("1g.24gb", 4),
    "all-2g.24gb": _all("2g.24gb", 3), "all-1g.24gb.me": _all("1g.24gb+me", 1),
    "all-3g.47gb": _all("3g.47gb", 2), "all-4g.47gb": _all("4g.47gb", 1), "all-7g.94gb": _all("7g.94gb", 1),
    "all-3g.48gb": _all("3g.48gb", 2), "all-4g.48gb": _all("4g.48gb", 1), "all-7g.96gb": _all("7g.96gb", 1),
    # GB200 HGX, B200
    "all-1g.47gb": _all("1g.47gb", 4), "all-2g.47gb": _all("2g.47gb", 3), "all-3g.93gb": _all("3g.93gb", 2),
    "all-4g.93gb": _all("4g.93gb", 1), "all-7g.186gb": _all("7g.186gb", 1), "all-1g.23gb": _all("1g.23gb", 7),
    "all-1g.23gb.me": _all("1g.23gb+me", 1), "all-1g.45gb": _all("1g.45gb", 4), "all-2g.45gb": _all("2g.45gb", 3),
    "all-3g.90gb": _all("3g.90gb", 2), "all-4g.90gb": _all("4g.90gb", 1), "all-7g.180gb": _all("7g.180gb", 1),
    # B300
    "all-1g.34gb": _all("1g.34gb", 7), "all-1g.34gb.me": _all("1g.34gb+me", 1), "all-1g.67gb": _all("1g.67gb", 4),
    "all-2g.67gb": _all("2g.67gb", 3), "all-3g.135gb": _all("3g.135gb", 2), "all-4g.135gb": _all("4g.135gb", 1),
    "all-7g.269gb": _all("7g.269gb", 1),
    # GB300 (commit 75449116; all-1g.35gb filtered, as it is shared with the H200)
    "all-1g.35gb": [_filtered(["0x233510DE"], {"1g.35gb": 4}), _filtered(["0x31C210DE"], {"1g.35gb": 7})],
    "all-1g.35gb.me": _all("1g.35gb+me", 1), "all-1g.70gb": _all("1g.70gb", 4), "all-2g.70gb": _all("2g.70gb", 3),
    "all-3g.139gb": _all("3g.139gb", 2), "all-4g.139gb": _all("4g.139gb", 1), "all-7g.278gb": _all("7g.278gb", 1),
}}


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_published_layouts_plan_and_apply_exactly_as_declared(model, facts, tmp_path):
    gpu = facts[model]
    cat = Catalog(gpu)
    applied, covered = [], set()
    for name in sorted(PUBLISHED["mig-configs"]):
        try:
            res = resolve_layout([gpu], config=PUBLISHED, config_name=name)
        except MigLayoutError as e:
            # a config whose filters select another model only
            assert "selects no GPU" in str(e), (name, e)
            continue
        spec = res["gpus"][0]
        unknown = [n for n in spec["mig_devices"] if cat.lookup(n) is None]
        if unknown:
            # a layout of another model's profiles, declared for every GPU: refused before any change, naming what
            # this GPU offers (mig-parted fails on it too)
            with pytest.raises(MigLayoutError, match="unknown MIG profile.*valid on this GPU"):
                plan_layout([gpu], res)
            continue
        if not spec["mig_enabled"]:
            continue
        sim = mig_sim(tmp_path / ("%s.json" % name), SHAPES[model])
        plan = plan_layout([sim.read_gpu(0)], res)[0]
        execute_plan(sim, 0, plan["operations"])
        after = sim.read_gpu(0)
        assert current_devices(after) == spec["mig_devices"], name
        assert plan_gpu(after, spec)["operations"] == [], name
        assert not [e for e in sim.raw_state()["call_log"] if e.get("error")], name
        applied.append(name)
        covered.update(spec["mig_devices"])
    assert "all-balanced" in applied and "all-enabled" in applied
    # every profile of the model appears in a layout NVIDIA ships for it, and applies: names agree
    assert covered == set(cat.gi_by_name), sorted(set(cat.gi_by_name) - covered)


# --------------------------------------------------------------------------------------------- generation rules

@pytest.mark.parametrize("shape", ["hgx-b200", "gb200-nvl", "rtx-pro-6000-x8"])
def test_blackwell_mode_change_needs_no_reset_and_is_lost_on_reboot(shape, tmp_path):
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape=shape)
    gpu = sim.read_gpu(0)
    assert gpu["architecture"] == "blackwell"
    assert sim.set_mig_mode(0, True) == 0
    assert (sim.read_gpu(0)["mig_mode_current"], sim.read_gpu(0)["mig_mode_pending"]) == ("Enabled", "Enabled")
    assert not [e for e in sim.raw_state()["call_log"] if e.get("call") == "reset_gpu"]
    gi = sim.create_gpu_instance(0, gpu["gi_profiles"][0]["id"], gpu["gi_profiles"][0]["placements"][0]["start"])
    sim.create_compute_instance(0, gi, gpu["gi_profiles"][0]["ci_profiles"][0]["id"])
    sim.reboot()
    after = sim.read_gpu(0)
    assert after["mig_mode_current"] == "Disabled" and after["gpu_instances"] == []


def test_busy_blackwell_gpu_keeps_the_mode_change_pending(tmp_path):
    sim = SimulatedBackend(str(tmp_path / "s.json"), shape="rtx-pro-6000-x8")
    sim.add_process(0, 4242, "render")
    assert sim.set_mig_mode(0, True) == NVML_ERROR_CODES["IN_USE"]
    gpu = sim.read_gpu(0)
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == ("Disabled", "Enabled")
    sim.remove_process(4242)
    assert sim.set_mig_mode(0, True) == 0 and sim.read_gpu(0)["mig_mode_current"] == "Enabled"


def test_simulator_refuses_a_suffixed_profile_beyond_its_maximum(tmp_path):
    sim = mig_sim(tmp_path / "s.json", "rtx-pro-6000-x8")
    by_name = dict((p["name"], p) for p in sim.read_gpu(0)["gi_profiles"])
    sim.create_gpu_instance(0, by_name["1g.24gb+me.all"]["id"], 0)
    with pytest.raises(NvmlInsufficientResources, match="at most 1"):
        sim.create_gpu_instance(0, by_name["1g.24gb+me.all"]["id"], 1)
    with pytest.raises(NvmlInvalidArgument, match="possible starts: \\[0, 2\\]"):
        sim.create_gpu_instance(0, by_name["2g.48gb+gfx"]["id"], 1)


def test_the_example_inventorys_blackwell_layouts_are_valid_on_their_models(facts):
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
    with open(os.path.join(root, "inventories", "example", "hosts.yml")) as handle:
        groups = yaml.safe_load(handle)["all"]["children"]["gpu_nodes"]["children"]
    with open(os.path.join(root, "inventories", "example", "group_vars", "mig_nodes.yml")) as handle:
        default = yaml.safe_load(handle)["gpu_node_mig_config_name"]
    for group, model in (("hgx_b200", "B200"), ("rtx_pro_6000", "RTX-PRO-6000")):
        for host, hostvars in groups[group]["hosts"].items():
            assert host in groups["mig_nodes"]["hosts"], host
            name = (hostvars or {}).get("gpu_node_mig_config_name", default)
            assert named_layout_for(facts[model], name)["mig_devices"], (host, name)
