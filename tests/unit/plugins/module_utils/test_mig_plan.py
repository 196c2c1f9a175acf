import os


import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import execute_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import (
    MigLayoutError,
    index_of,
    named_layout_for,
    parse_migparted_config,
    resolve_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import (
    MigBusyError,
    current_devices,
    layout_view,
    plan_gpu,
    plan_layout,
    validate_gpu_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import Catalog

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NvmlError

from mig_model import ALL_MODELS, brute_force_best, gpu_facts, simulated


# --------------------------------------------------------------------------------------------- helpers

def build(model, gis, index=0, procs=()):
    """A simulated GPU with instances: gis is a list of (gi_profile, start, [ci names]), procs a list of (pid, n, m):
    a process on the m-th compute instance of the n-th GPU instance, in the order of ``gis``."""
    m = simulated({index: model})
    cat = Catalog(m.read_gpu(index))
    created = []
    for prof_name, start, cis in gis:
        gi_id = m.create_gpu_instance(index, cat.gi_by_name[prof_name]["id"], start)
        created.append((gi_id, [m.create_compute_instance(index, gi_id, cat.devices[ci][1]["id"]) for ci in cis]))
    for pid, gi_n, ci_n in procs:
        gi_id, ci_ids = created[gi_n]
        m.add_process(index, pid, "job%d" % pid, gi_id=gi_id, ci_id=ci_ids[ci_n])
    return m


def apply(m, index, spec, force=False):
    gpu = m.read_all()["gpus"][index]
    plan = plan_gpu(gpu, spec, force=force)
    if force:
        for b in plan["busy_destroyed"]:
            for process in b["processes"]:
                m.remove_process(process["pid"])
    execute_plan(m, index, plan["operations"])
    return plan, m.read_all()["gpus"][index]


def enabled(devs):
    return {"mig_enabled": True, "mig_devices": devs}


# --------------------------------------------------------------------------------------------- catalog / names

@pytest.mark.parametrize("model,expected", [
    ("A100-SXM4-40GB", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    ("A100-SXM4-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    ("H100-SXM5-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    ("H200", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    ("A30", {"1g.6gb": 2, "2g.12gb": 1}),
])
def test_all_balanced_matches_mig_parted_table(model, expected):
    # reference/mig.md 1.3: all-balanced per family from mig-parted's config-default.yaml
    assert named_layout_for(gpu_facts(model), "all-balanced") == {"mig_enabled": True, "mig_devices": expected}


@pytest.mark.parametrize("model,name,expected", [
    ("A100-SXM4-40GB", "all-1g", {"1g.5gb": 7}),
    ("A100-SXM4-40GB", "all-3g", {"3g.20gb": 2}),
    ("A100-SXM4-40GB", "all-1g.10gb", {"1g.10gb": 4}),   # 2-memory-slice profile on 40GB: 4 (config-default)
    ("A100-SXM4-80GB", "all-1g.10gb", {"1g.10gb": 7}),   # 1-slice profile on 80GB: 7
    ("H200", "all-2g", {"2g.35gb": 3}),
    ("H200", "all-7g", {"7g.141gb": 1}),
    ("H200", "all-1g.18gb+me", {"1g.18gb+me": 1}),
    ("A30", "all-1g", {"1g.6gb": 4}),
    ("A30", "all-4g", {"4g.24gb": 1}),
])
def test_all_size_layouts(model, name, expected):
    assert named_layout_for(gpu_facts(model), name)["mig_devices"] == expected


def test_all_size_missing_on_model_says_valid_sizes():
    with pytest.raises(MigLayoutError, match=r"all-3g.*valid sizes on this GPU: all-1g, all-2g, all-4g"):
        named_layout_for(gpu_facts("A30"), "all-3g")


def test_unknown_named_layout_lists_valid():
    with pytest.raises(MigLayoutError, match="all-balanced"):
        resolve_layout([gpu_facts("H200")], named="some-balanced")


def test_compute_instance_subprofile_names():
    cat = Catalog(gpu_facts("A100-SXM4-40GB"))
    assert "1c.3g.20gb" in cat.valid_names()
    assert "2c.3g.20gb" in cat.valid_names()
    assert "3c.7g.40gb" in cat.valid_names()
    assert "3c.3g.20gb" not in cat.valid_names()   # the full CI is named like its GI


# --------------------------------------------------------------------------------------------- validation

def test_unknown_profile_lists_valid_names_of_that_gpu():
    with pytest.raises(MigLayoutError) as e:
        validate_gpu_layout(gpu_facts("H200"), enabled({"1g.10gb": 1}))
    msg = str(e.value)
    assert "unknown MIG profile '1g.10gb'" in msg and "1g.18gb" in msg and "3g.71gb" in msg


def test_unknown_subprofile_names_valid_subprofiles():
    with pytest.raises(MigLayoutError, match=r"sub-profiles of 3g.20gb here: 1c.3g.20gb, 2c.3g.20gb"):
        validate_gpu_layout(gpu_facts("A100-SXM4-40GB"), enabled({"4c.3g.20gb": 1}))


def test_full_compute_instance_spelled_with_c_is_the_gi_profile():
    # go-nvlib parses 3c.3g.20gb as C=3, G=3 and matches it to the 3g.20gb profile; so does the planner
    assert validate_gpu_layout(gpu_facts("A100-SXM4-40GB"), enabled({"3c.3g.20gb": 1})) == {"3g.20gb": 1}


def test_two_4g_cannot_fit_says_why():
    with pytest.raises(MigLayoutError) as e:
        validate_gpu_layout(gpu_facts("A100-SXM4-80GB"), enabled({"4g.40gb": 2}))
    assert "at most 1 fits" in str(e.value) and "start 0" in str(e.value)


def test_a_count_far_beyond_the_gpu_is_refused_before_planning():
    # before: the planner made one list item per device asked for; 10**12 exhausted memory
    with pytest.raises(MigLayoutError, match=r"1000000000000 MIG devices, but this GPU holds at most 7"):
        validate_gpu_layout(gpu_facts("H200"), enabled({"1g.18gb": 10 ** 12}))
    with pytest.raises(MigLayoutError, match=r"8 MIG devices, but this GPU holds at most 7"):
        validate_gpu_layout(gpu_facts("H200"), enabled({"1g.18gb": 7, "1c.7g.141gb": 1}))
    with pytest.raises(MigLayoutError, match=r"5 MIG devices, but this GPU holds at most 4"):
        validate_gpu_layout(gpu_facts("A30"), enabled({"1g.6gb": 5}))


def test_index_look_alikes_are_no_index():
    assert index_of("3") == 3 and index_of(5) == 5
    for text in ("\u00b2", "\uff13", "\u0663", "9" * 5000):    # superscript 2, fullwidth 3, Arabic-Indic 3, huge
        assert index_of(text) is None
    with pytest.raises(MigLayoutError, match="unknown named layout"):
        resolve_layout([gpu_facts("H200")], named="all-" + "9" * 5000 + "g")


def test_too_many_slices_says_how_many():
    with pytest.raises(MigLayoutError, match=r"needs 10 memory slices, the GPU has 8"):
        validate_gpu_layout(gpu_facts("H200"), enabled({"3g.71gb": 2, "1g.35gb": 1}))


def test_placement_conflict_explained():
    # 4g (only at 0) + 2g (0,2,4) + 2g + 1g: 4+2+2 = 8 slices of 8 but 2g cannot start at 6
    with pytest.raises(MigLayoutError, match="no set of non-overlapping placements"):
        validate_gpu_layout(gpu_facts("A100-SXM4-40GB"), enabled({"4g.20gb": 1, "2g.10gb": 2}))


def test_too_many_subprofiles_in_one_gi_split_into_more_gis():
    # 4 x 1c.3g -> two 3g GIs (3 + 1)
    devs = validate_gpu_layout(gpu_facts("H200"), enabled({"1c.3g.71gb": 4}))
    assert devs == {"1c.3g.71gb": 4}
    with pytest.raises(MigLayoutError):
        validate_gpu_layout(gpu_facts("H200"), enabled({"1c.3g.71gb": 7}))


def test_mig_disabled_where_layout_needs_it():
    gpu = gpu_facts("A100-SXM4-40GB", mig="Disabled")
    gpu["mig_mode_pending"] = "Enabled"
    with pytest.raises(MigLayoutError, match=r"MIG mode is Disabled \(pending Enabled\).*mig_mode"):
        plan_gpu(gpu, enabled({"1g.5gb": 1}))


def test_non_mig_gpu_explicitly_selected_is_an_error():
    gpus = [gpu_facts("H200", 0), gpu_facts("L40S", 1)]
    with pytest.raises(MigLayoutError, match="does not support MIG"):
        resolve_layout(gpus, layout=[{"devices": [1], "mig_devices": {"1g.18gb": 1}}])
    res = resolve_layout(gpus, named="all-balanced")
    assert list(res["gpus"]) == [0] and res["skipped"][0]["index"] == 1


def test_selector_matching_nothing():
    gpus = [gpu_facts("H200", 0)]
    with pytest.raises(MigLayoutError, match=r"devices entry 3 matches no GPU; GPUs here: 0 \(GPU-h200-0\)"):
        resolve_layout(gpus, layout=[{"devices": [3], "mig_devices": {"1g.18gb": 1}}])
    with pytest.raises(MigLayoutError, match="selects no GPU"):
        resolve_layout(gpus, layout=[{"models": ["A100"], "mig_devices": {"1g.18gb": 1}}])


def test_selectors_by_uuid_model_and_filter():
    gpus = [gpu_facts("H200", 0), gpu_facts("A100-SXM4-40GB", 1), gpu_facts("A100-SXM4-40GB", 2)]
    res = resolve_layout(gpus, layout=[
        {"devices": ["GPU-h200-0"], "mig_devices": {"7g.141gb": 1}},
        {"models": "a100", "mig_devices": {"3g.20gb": 2}},
    ])
    assert res["gpus"][0]["mig_devices"] == {"7g.141gb": 1}
    assert res["gpus"][1]["mig_devices"] == res["gpus"][2]["mig_devices"] == {"3g.20gb": 2}
    res = resolve_layout(gpus, layout=[{"device_filter": "0x20B010DE", "mig_devices": {"1g.5gb": 7}}])
    assert sorted(res["gpus"]) == [1, 2]


def test_conflicting_entries_rejected():
    gpus = [gpu_facts("H200", 0)]
    with pytest.raises(MigLayoutError, match="selected by both"):
        resolve_layout(gpus, layout=[{"mig_devices": {"1g.18gb": 1}}, {"devices": [0], "mig_devices": {}}])


# --------------------------------------------------------------------------------------------- mig-parted files

MIGPARTED = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.10gb": [
            {"device-filter": ["0x20B010DE", "0x20B110DE"], "devices": "all", "mig-enabled": True,
             "mig-devices": {"1g.10gb": 4}},
            {"device-filter": ["0x20B210DE", "0x233010DE"], "devices": "all", "mig-enabled": True,
             "mig-devices": {"1g.10gb": 7}},
        ],
        "custom": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1c.3g.20gb": 3, "4g.20gb": 1}}],
    },
}


def test_migparted_file_with_filters():
    gpus = [gpu_facts("A100-SXM4-40GB", 0), gpu_facts("A100-SXM4-80GB", 1)]
    res = resolve_layout(gpus, config=MIGPARTED, config_name="all-1g.10gb")
    assert res["gpus"][0]["mig_devices"] == {"1g.10gb": 4}
    assert res["gpus"][1]["mig_devices"] == {"1g.10gb": 7}
    for idx in (0, 1):
        validate_gpu_layout(gpus[idx], res["gpus"][idx])


def test_migparted_subsystem_filter():
    gpu = gpu_facts("A100-SXM4-40GB", 0)
    gpu["pci_subsystem_id"] = "0x134F10DE"
    cfg = {"version": "v1", "mig-configs": {"x": [{"device-filter": "0x20B010DE:0x145F10DE", "devices": "all",
                                                   "mig-enabled": True, "mig-devices": {}}]}}
    with pytest.raises(MigLayoutError, match="selects no GPU"):
        resolve_layout([gpu], config=cfg)
    cfg["mig-configs"]["x"][0]["device-filter"] = "0x20B010DE:0x134F10DE"
    assert resolve_layout([gpu], config=cfg)["gpus"][0]["mig_devices"] == {}


@pytest.mark.parametrize("cfg,msg", [
    ({"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, "unknown version"),
    ({"version": "v1", "mig-configs": {"a": []}}, "non-empty list"),
    ({"version": "v1", "extra": 1, "mig-configs": {}}, "unknown top-level key"),
    ({"version": "v1", "mig-configs": {"a": [{"mig-enabled": False}]}}, "'devices' is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all"}]}}, "'mig-enabled' is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}}, "'mig-devices' is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False,
                                              "mig-devices": {"1g.5gb": 1}}]}}, "must be empty"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"1g.5gb": 0}}]}}, "every count is 0"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"1g.5gb": -1}}]}}, ">= 0"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "device-filter": "20B0",
                                              "mig-devices": {}}]}}, "packed PCI id"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": ["0"], "mig-enabled": True, "mig-devices": {}}]}},
     "list of GPU indices"),
])
def test_migparted_format_errors(cfg, msg):
    with pytest.raises(MigLayoutError, match=msg):
        parse_migparted_config(cfg, "a" if "a" in cfg.get("mig-configs", {}) else None)


def test_migparted_config_name_rules():
    with pytest.raises(MigLayoutError, match="config_name is required.*all-1g.10gb, all-disabled, custom"):
        parse_migparted_config(MIGPARTED)
    with pytest.raises(MigLayoutError, match="'nope' is not in the file"):
        parse_migparted_config(MIGPARTED, "nope")
    one = {"version": "v1", "mig-configs": {"only": [{"devices": "all", "mig-enabled": False}]}}
    assert parse_migparted_config(one)[0] == "only"


def test_migparted_subprofiles_pack_into_one_gi():
    m = build("A100-SXM4-40GB", [])
    res = resolve_layout(m.read_all()["gpus"], config=MIGPARTED, config_name="custom")
    plan, after = apply(m, 0, res["gpus"][0])
    assert current_devices(after) == {"1c.3g.20gb": 3, "4g.20gb": 1}
    assert len(after["gpu_instances"]) == 2     # three 1c share one 3g GI, as mig-parted packs them


# --------------------------------------------------------------------------------------------- reconcile examples

def test_noop_when_already_applied():
    m = build("H200", [("3g.71gb", 4, ["3g.71gb"]), ("2g.35gb", 0, ["2g.35gb"]), ("1g.18gb", 2, ["1g.18gb"]),
                       ("1g.18gb", 3, ["1g.18gb"])])
    plan = plan_gpu(m.read_all()["gpus"][0], named_layout_for(m.read_gpu(0), "all-balanced"))
    assert plan["operations"] == [] and not plan["changed"]
    assert plan["before"] == plan["after"]


def test_addition_keeps_everything_and_uses_explicit_placement():
    # 1g at 0 would block a 3g at 0 if the driver chose; the plan places 3g at 4 and keeps the 1g
    m = build("A100-SXM4-40GB", [("1g.5gb", 0, ["1g.5gb"])], procs=[(100, 0, 0)])
    plan, after = apply(m, 0, enabled({"1g.5gb": 1, "3g.20gb": 1}))
    assert plan["destroyed"] == []
    assert [o for o in plan["operations"] if o["op"] == "create_gpu_instance"][0]["placement"] == {"start": 4, "size": 4}
    assert current_devices(after) == {"1g.5gb": 1, "3g.20gb": 1}


def test_layout_change_keeps_in_use_instance_and_moves_nothing_else_needlessly():
    # balanced -> 3g + 3g... keeps the busy 3g at 4, replaces the small ones with a 3g at 0
    m = build("A100-SXM4-40GB", [("3g.20gb", 4, ["3g.20gb"]), ("2g.10gb", 0, ["2g.10gb"]),
                                 ("1g.5gb", 2, ["1g.5gb"]), ("1g.5gb", 3, ["1g.5gb"])], procs=[(7, 0, 0)])
    plan, after = apply(m, 0, enabled({"3g.20gb": 2}))
    assert plan["kept"][0]["placement"] == {"start": 4, "size": 4}
    assert sorted(d["profile"] for d in plan["destroyed"] if d["kind"] == "gpu_instance") == ["1g.5gb", "1g.5gb", "2g.10gb"]
    assert current_devices(after) == {"3g.20gb": 2}
    assert any(p["pid"] == 7 for p in after["processes"])


def test_busy_instance_needs_force_and_names_processes():
    m = build("H200", [("1g.18gb", 0, ["1g.18gb"]), ("1g.18gb", 1, ["1g.18gb"])], procs=[(4242, 1, 0)])
    gpu = m.read_all()["gpus"][0]
    with pytest.raises(MigBusyError) as e:
        plan_gpu(gpu, enabled({"7g.141gb": 1}))
    assert "pid 4242 (job4242)" in str(e.value) and "force: true" in str(e.value)
    assert e.value.busy[0]["processes"] == [{"pid": 4242, "name": "job4242"}]
    assert m.calls()[-1] == "create_compute_instance"   # nothing happened beyond the build
    plan, after = apply(m, 0, enabled({"7g.141gb": 1}), force=True)
    assert plan["busy_destroyed"][0]["processes"][0]["pid"] == 4242
    assert current_devices(after) == {"7g.141gb": 1}


def test_busy_instance_kept_over_idle_one_of_same_profile():
    # two 1g.18gb exist, the target wants one and a 3g at 0..3: keep the busy one wherever it is
    m = build("H200", [("1g.18gb", 0, ["1g.18gb"]), ("1g.18gb", 5, ["1g.18gb"])], procs=[(1, 0, 0)])
    plan, after = apply(m, 0, enabled({"1g.18gb": 1, "3g.71gb": 1}))
    assert plan["kept"][0]["placement"]["start"] == 0
    assert current_devices(after) == {"1g.18gb": 1, "3g.71gb": 1}


def test_kept_gi_repartitioned_compute_instances():
    # 3g GI with three 1c CIs, one busy -> 1c + 2c in the same GI; busy one stays
    m = build("A100-SXM4-40GB", [("3g.20gb", 0, ["1c.3g.20gb", "1c.3g.20gb", "1c.3g.20gb"])], procs=[(5, 0, 2)])
    plan, after = apply(m, 0, enabled({"1c.3g.20gb": 1, "2c.3g.20gb": 1}))
    assert [d["kind"] for d in plan["destroyed"]] == ["compute_instance", "compute_instance"]
    assert current_devices(after) == {"1c.3g.20gb": 1, "2c.3g.20gb": 1}
    assert len(after["gpu_instances"]) == 1


def test_operation_order():
    m = build("H200", [("7g.141gb", 0, ["7g.141gb"])])
    plan = plan_gpu(m.read_all()["gpus"][0], enabled({"1g.18gb": 7}))
    kinds = [o["op"] for o in plan["operations"]]
    assert kinds == ["destroy_compute_instance", "destroy_gpu_instance"] + ["create_gpu_instance"] * 7 + \
        ["create_compute_instance"] * 7


def test_empty_gpu_instance_is_removed():
    m = build("H200", [("2g.35gb", 0, [])])
    plan, after = apply(m, 0, enabled({"1g.18gb": 1}))
    assert after["gpu_instances"] and all(gi["compute_instances"] for gi in after["gpu_instances"])


def test_empty_gi_reused_when_target_has_its_profile():
    m = build("H200", [("2g.35gb", 2, [])])
    plan, after = apply(m, 0, enabled({"2g.35gb": 1}))
    assert [o["op"] for o in plan["operations"]] == ["create_compute_instance"]


def test_plan_layout_reports_all_gpus_errors_together():
    gpus = [gpu_facts("H200", 0), gpu_facts("H200", 1)]
    res = resolve_layout(gpus, layout=[{"devices": [0], "mig_devices": {"4g.71gb": 2}},
                                       {"devices": [1], "mig_devices": {"9g.1gb": 1}}])
    with pytest.raises(MigLayoutError) as e:
        plan_layout(gpus, res)
    assert "GPU 0" in str(e.value) and "GPU 1" in str(e.value)


# --------------------------------------------------------------------------------------------- property-based

def _random_state(draw, model, max_gis=7, with_procs=True):
    """Random reachable state: random GI creations at random valid placements, random CIs, random processes."""
    m = simulated([model])
    cat = Catalog(m.read_gpu(0))
    profs = sorted(cat.gi_by_name.values(), key=lambda p: p["id"])
    n = draw(st.integers(0, max_gis))
    for _attempt in range(n):
        prof = draw(st.sampled_from(profs))
        pl = draw(st.sampled_from(prof["placements"]))
        try:
            gi_id = m.create_gpu_instance(0, prof["id"], pl["start"])
        except NvmlError:
            continue
        cis = prof["ci_profiles"]
        for _attempt in range(draw(st.integers(0, 3))):
            ci = draw(st.sampled_from(cis))
            try:
                m.create_compute_instance(0, gi_id, ci["id"])
            except NvmlError:
                pass
    if with_procs:
        for gi in m.read_gpu(0)["gpu_instances"]:
            for ci in gi["compute_instances"]:
                if draw(st.integers(0, 4)) == 0:
                    m.add_process(0, 1000 + len(m.read_gpu(0)["processes"]), "p", gi_id=gi["id"], ci_id=ci["id"])
    m.clear_call_log()
    return m


def _mutated_target(draw, m):
    """A target near the current state: drop some instances, then create random new ones where they fit."""
    t = m.clone()
    for process in t.read_gpu(0)["processes"]:
        t.remove_process(process["pid"])
    cat = Catalog(t.read_gpu(0))
    for gi in t.read_gpu(0)["gpu_instances"]:
        if draw(st.integers(0, 2)) == 0:
            for ci in list(gi["compute_instances"]):
                t.destroy_compute_instance(0, gi["id"], ci["id"])
            t.destroy_gpu_instance(0, gi["id"])
        else:
            for ci in list(gi["compute_instances"]):
                if draw(st.integers(0, 3)) == 0:
                    t.destroy_compute_instance(0, gi["id"], ci["id"])
    profs = sorted(cat.gi_by_name.values(), key=lambda p: p["id"])
    for _attempt in range(draw(st.integers(0, 4))):
        prof = draw(st.sampled_from(profs))
        pl = draw(st.sampled_from(prof["placements"]))
        try:
            gi_id = t.create_gpu_instance(0, prof["id"], pl["start"])
            t.create_compute_instance(0, gi_id, draw(st.sampled_from(prof["ci_profiles"]))["id"])
        except NvmlError:
            pass
    return current_devices(t.read_gpu(0))


@st.composite
def scenario(draw, models=tuple(ALL_MODELS), max_gis=7, with_procs=True):
    model = draw(st.sampled_from(models))
    m = _random_state(draw, model, max_gis, with_procs)
    if draw(st.booleans()):
        target = _mutated_target(draw, m)
    else:
        target = current_devices(_random_state(draw, model, max_gis, False).read_gpu(0))
    return model, m, target


# GPUOPS_PBT_EXAMPLES=5000 for a longer hunt; the default keeps `make test` quick.
EXAMPLES = int(os.environ.get("GPUOPS_PBT_EXAMPLES", "300"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(scenario())
def test_plan_reaches_target_and_is_idempotent(sc):
    model, m, target = sc
    gpu = m.read_all()["gpus"][0]
    before_busy = {(p["gi_id"], p["ci_id"]) for p in gpu["processes"]}
    try:
        plan = plan_gpu(gpu, enabled(target))
    except MigBusyError as e:
        # refused: only if an in-use instance really has to go, and nothing was touched
        assert e.busy and m.calls() == []
        plan = plan_gpu(gpu, enabled(target), force=True)
        assert plan["busy_destroyed"]
        for b in plan["busy_destroyed"]:
            assert (b["gi_id"], b["ci_id"]) in before_busy or b["ci_id"] is None
        return
    execute_plan(m, 0, plan["operations"])
    after = m.read_all()["gpus"][0]
    assert current_devices(after) == target
    assert all(gi["compute_instances"] for gi in after["gpu_instances"])
    assert plan_gpu(after, enabled(target))["operations"] == []
    # every busy compute instance survived with the same GI
    for gi_id, ci_id in before_busy:
        assert any(gi["id"] == gi_id and any(c["id"] == ci_id for c in gi["compute_instances"])
                   for gi in after["gpu_instances"])
    # the "after" view promised in the plan is what we got
    assert plan["after"]["gpu_instances"] == layout_view(after)["gpu_instances"]


@settings(max_examples=EXAMPLES + 100, **SETTINGS)
@given(scenario(models=["A100-SXM4-40GB", "A30", "H200", "B200", "RTX-PRO-6000"], max_gis=5))
def test_plan_keeps_as_much_as_brute_force(sc):
    model, m, target = sc
    gpu = m.read_all()["gpus"][0]
    if sum(target.values()) > 7:
        return
    plan = plan_gpu(gpu, enabled(target), force=True)
    kept = sum(len(k["compute_instances"]) for k in plan["kept"])
    busy_ids = {(p["gi_id"], p["ci_id"]) for p in gpu["processes"]}
    kept_busy = sum(1 for k in plan["kept"] for c in k["compute_instances"] if (k["gi_id"], c["ci_id"]) in busy_ids)
    assert (kept_busy, kept) == brute_force_best(gpu, target)


def test_migparted_indices_missing_here_select_nothing_but_inline_ones_are_errors():
    gpus = [gpu_facts("H200", 0), gpu_facts("H200", 1)]
    cfg = {"version": "v1", "mig-configs": {"x": [
        {"devices": [0, 5], "mig-enabled": True, "mig-devices": {"7g.141gb": 1}}]}}
    assert list(resolve_layout(gpus, config=cfg)["gpus"]) == [0]
    with pytest.raises(MigLayoutError, match="devices entry 5 matches no GPU"):
        resolve_layout(gpus, layout=[{"devices": [0, 5], "mig_devices": {"7g.141gb": 1}}])
