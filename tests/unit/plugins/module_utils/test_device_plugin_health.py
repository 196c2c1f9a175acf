"""The device plugin's Xid skip list from the health policy: it agrees with the gate on every Xid, one node or a fleet,
and the value written is what NVIDIA's plugin reads as intended (its parser modelled from the recorded facts)."""
import os
import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin_health as dph
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health as health
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _xid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
with open(os.path.join(ROOT, "tests", "fixtures", "device-plugin", "health-checks.yaml")) as _handle:
    FACTS = yaml.safe_load(_handle)

BUS = "00000000:47:00.0"
ACTIONS = st.sampled_from(health.ACTIONS)
POLICIES = st.fixed_dictionaries({}, optional=dict((kind, ACTIONS) for kind in dph.XID_KINDS))
# catalog codes, codes outside it, and 154 (whose kind the gate takes from its message)
CODES = st.one_of(st.sampled_from(sorted(_xid.CATALOG)), st.integers(1, 400))


def gate_healthy(code, policy, message="something"):
    """The gate's own verdict on a node whose kernel log holds one Xid ``code`` line on its only GPU."""
    gpu = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": BUS, "lost": False}
    line = "NVRM: Xid (PCI:0000:47:00): %d, pid=1234, name=python, %s" % (code, message)
    read = {"backend": "nvml", "gpus": [gpu], "kernel_log": {"readable": True, "source": "journalctl", "lines": [line]}}
    return health.summary(read, policy, gpus=False)["healthy"]


def plugin_skips(value, chart_version):
    """What NVIDIA's plugin of ``chart_version`` skips for DP_DISABLE_HEALTHCHECKS=``value`` (None: unset), as the
    fixture's facts describe its parser: ALL, or the set of Xids."""
    text = (value or "").lower()
    newer = dph._version_tuple(chart_version) >= (0, 18, 0)
    items = [item.strip() for item in text.split(",")]
    if (newer and any(item in ("all", "xids") for item in items)) or (not newer and (text == "all" or "xids" in text)):
        return dph.ALL
    codes = set(int(item) for item in items if item.isdigit())
    if newer and 0 in codes:
        return dph.ALL
    return codes | set(dph.default_skips(chart_version))


# ---- the facts ----------------------------------------------------------------------------------------------------
def test_the_constants_are_the_recorded_facts():
    assert [(d["since"].lstrip("v"), tuple(d["xids"])) for d in FACTS["default_skipped"]] == \
        [("0.14.0", dph.DEFAULT_SKIPS[0][1]), (dph.DEFAULT_SKIPS[1][0], dph.DEFAULT_SKIPS[1][1])]
    assert dph.DISABLE_ENV in FACTS["environment"]
    assert FACTS["chart"]["plugin_container"] == dph.PLUGIN_CONTAINER
    assert FACTS["chart"]["env_value"] == "none"
    assert FACTS["environment"]["DP_DISABLE_HEALTHCHECKS"]["zero_means_all_since"] == "v0.18.0"
    assert FACTS["source"]["tags"]["v0.20.0"] == "1b826acc6af3079d8923bac395c3124b8861a9a6"


@pytest.mark.parametrize("version,has_109", [("0.14.0", False), ("0.17.0", False), ("0.17.1", True),
                                             ("0.20.0", True), ("v0.18.0-rc.1", True), (None, True)])
def test_the_plugin_default_list_by_version(version, has_109):
    assert {13, 31, 43, 45, 68} <= dph.default_skips(version)
    assert (109 in dph.default_skips(version)) is has_109


# ---- one node: the skip set is exactly what the gate does not block ------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(policy=POLICIES, code=CODES)
def test_a_node_skips_exactly_the_xids_its_gate_does_not_block(policy, code):
    skips = dph.node_skips(policy)
    skipped = skips == dph.ALL or code in skips
    if code == 154:      # the gate reads 154's message; the plugin cannot, so it skips 154 only if neither blocks
        assert skipped == (gate_healthy(code, policy, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset "
                                                      "Required)")
                           and gate_healthy(code, policy, "GPU recovery action changed from 0x1 to 0x0 (None)"))
    elif code in _xid.CATALOG or skips == dph.ALL:
        assert skipped == gate_healthy(code, policy)
    else:
        # a code outside the catalog cannot be listed (the plugin is told Xids one by one): it stays checked, which
        # is the gate's verdict where xid_fatal blocks (an unknown code is fatal to the gate) and the safe side else
        assert not skipped
        assert gate_healthy(code, policy) == (health.validate_policy(policy)["xid_fatal"] != "block")


@pytest.mark.parametrize("fatal,gpu,skipped", [
    ("block", "warn", False), ("warn", "block", False), ("warn", "warn", True), ("ignore", "ignore", True)])
def test_xid_154_is_skipped_only_where_neither_of_its_kinds_blocks(fatal, gpu, skipped):
    skips = dph.node_skips({"xid_fatal": fatal, "xid_gpu": gpu, "xid_application": "block"})
    assert (154 in skips) is skipped


def test_the_default_policy_skips_application_and_gpu_xids_and_keeps_the_fatal_ones():
    skips = dph.node_skips({})
    assert {8, 13, 31, 43, 45, 63, 92, 94} <= skips          # application's (RESTART_APP, 43/45) and IGNORE ones
    assert not {48, 79, 109, 119, 154} & skips               # fatal, and 154 (fatal unless its message says none)
    assert dph.node_skips({"xid_fatal": "warn", "xid_gpu": "ignore", "xid_application": "warn"}) == dph.ALL
    assert dph.node_skips({"xid_application": "block"}) & {13, 31, 43, 45} == frozenset()


def test_a_bad_policy_is_refused_by_the_gate_rule():
    with pytest.raises(health.HealthPolicyError, match="xid_fatal: 'maybe' is not one of block, warn, ignore"):
        dph.node_skips({"xid_fatal": "maybe"})


# ---- a fleet: one chart, so only what no node blocks ---------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(policies=st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4"]), POLICIES, max_size=4), code=CODES)
def test_the_fleet_skips_an_xid_only_when_no_node_blocks_it(policies, code):
    decided = dph.fleet_skips(policies)
    skipped = decided["skip"] == dph.ALL or code in decided["skip"]
    node_says = [gate_healthy(code, p) for p in policies.values()]
    if code != 154 and (code in _xid.CATALOG or decided["skip"] == dph.ALL):
        assert skipped == (all(node_says) if policies else False)
    if skipped:
        assert all(node_says)
    assert decided["differ"] == (len(set(dph.node_skips(p) for p in policies.values())) > 1)


def test_nodes_that_differ_hold_back_the_xids_one_of_them_blocks():
    off = {"xid_fatal": "ignore", "xid_gpu": "warn", "xid_application": "ignore"}
    decided = dph.fleet_skips({"a": {}, "b": {"xid_gpu": "block"}, "c": off})
    assert decided["differ"] is True
    assert 63 not in decided["skip"] and decided["held"][63] == ["b"]      # 63: IGNORE in the catalog, xid_gpu
    assert 13 in decided["skip"] and 79 not in decided["skip"] and decided["held"][79] == ["a", "b"]


def test_every_node_with_no_blocking_xid_kind_turns_the_check_off_and_no_node_changes_nothing():
    off = {"xid_fatal": "warn", "xid_gpu": "warn", "xid_application": "ignore"}
    assert dph.fleet_skips({"a": off, "b": off}) == {"skip": "all", "differ": False, "held": {}}
    assert dph.fleet_skips({}) == {"skip": [], "differ": False, "held": {}}


# ---- the user's setting -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting,fragment", [
    ("some", "'some' is not a valid setting"), ({"skip": 1}, "a dict is not a valid setting"),
    ([0], "0 is the plugin's own word for every Xid since v0.18.0"), ([True], "True is not an Xid code"),
    ([13, "31"], "skip[1]: '31' is not an Xid code, a whole number from 1 to 99999"), ([100000], "100000"),
    (None, "a NoneType is not a valid setting"), ([1.5], "1.5 is not an Xid code")])
def test_a_bad_setting_says_what_is_wrong_and_what_is_valid(setting, fragment):
    errors = dph.setting_errors(setting, "skip")
    assert errors and fragment in "; ".join(errors)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        dph.resolve(setting, {}, "skip")


def test_a_setting_overrides_the_policies_and_auto_reads_them():
    assert dph.resolve([63, 13, 63], {"a": {"xid_gpu": "block"}})["skip"] == [13, 63]
    assert dph.resolve("all", {})["source"] == "setting"
    assert dph.resolve("auto", {"a": {}})["source"] == "policy"
    with pytest.raises(ValueError, match="unknown health finding kind 'xid'"):
        dph.resolve("auto", {"a": {"xid": "warn"}})
    assert dph.setting_errors("auto", "skip_xids", auto=False) == [
        "skip_xids: 'auto' is not a valid setting; give 'all' (the plugin's Xid check off), or a list of Xid codes "
        "(whole numbers from 1 to 99999) that the plugin skips besides its own 13, 31, 43, 45, 68, 109; [] leaves only "
        "the plugin's own"]


# ---- the value and what the plugin makes of it -------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(skip=st.one_of(st.just(dph.ALL), st.lists(st.integers(1, 200), max_size=12)),
       version=st.sampled_from(["0.14.0", "0.17.0", "0.17.1", "0.18.0", "0.20.0"]))
def test_the_plugin_skips_exactly_the_decision_plus_its_own_list(skip, version):
    value = dph.env_value(skip, version)
    got = plugin_skips(value, version)
    if skip == dph.ALL:
        assert value == "all" and got == dph.ALL
    else:
        assert got == set(skip) | set(dph.default_skips(version))
        assert value is None or all(int(v) not in dph.default_skips(version) for v in value.split(","))


def test_the_default_policy_value_for_the_pinned_chart():
    value = dph.env_value(dph.fleet_skips({"a": {}})["skip"], "0.20.0")
    assert value.split(",")[:4] == ["8", "11", "25", "32"] and "13" not in value.split(",")
    assert dph.plugin_skips_blocked(dph.fleet_skips({"a": {}})["skip"], "0.20.0") == [109]
    assert dph.plugin_skips_blocked(dph.fleet_skips({"a": {}})["skip"], "0.17.0") == []
    assert dph.env_value([13, 31], "0.20.0") is None


# ---- the DaemonSet -------------------------------------------------------------------------------------------------
def daemonset(env=None, mark=None):
    meta = {"name": "nvdp-nvidia-device-plugin", "annotations": {"meta.helm.sh/release-name": "nvdp"}}
    if mark is not None:
        meta["annotations"][dph.MARK] = mark
    container = {"name": dph.PLUGIN_CONTAINER, "env": [{"name": "MPS_ROOT", "value": "/run/nvidia/mps"}]}
    if env is not None:
        container["env"].append({"name": dph.DISABLE_ENV, "value": env})
    sidecar = {"name": "nvidia-device-plugin-sidecar", "env": [{"name": dph.DISABLE_ENV, "value": "xids"}]}
    return {"kind": "DaemonSet", "metadata": meta,
            "spec": {"template": {"spec": {"containers": [sidecar, container]}}}}


@pytest.mark.parametrize("env,mark,desired,action,after", [
    (None, None, "8,11", "set", "8,11"), ("8,11", "8,11", "8,11", "none", "8,11"),
    ("8,11", "8,11", "all", "set", "all"), ("8,11", "8,11", None, "remove", None),
    (None, "8,11", None, "unmark", None), (None, "8,11", "63", "set", "63"), (None, None, None, "none", None),
    ("xids", None, "8,11", "foreign", "xids"), ("xids", "8,11", None, "foreign", "xids"),
    ("63", None, "63", "none", "63")])
def test_the_plan_changes_only_what_this_collection_wrote(env, mark, desired, action, after):
    plan = dph.env_plan(daemonset(env, mark), desired)
    assert (plan["action"], plan["before"], plan["after"]) == (action, env, after)


def test_no_daemonset_is_missing_and_the_rendered_manifest_names_the_plugin_daemonset():
    assert dph.env_plan(None, "8")["action"] == "missing"
    gfd = {"kind": "DaemonSet", "metadata": {"name": "x-gfd"},
           "spec": {"template": {"spec": {"containers": [{"name": "gpu-feature-discovery-ctr"}]}}}}
    ds = dict(daemonset(), metadata={"name": "nvdp-nvidia-device-plugin", "namespace": "other"})
    assert dph.plugin_daemonsets([None, {"kind": "ConfigMap"}, gfd, ds], "nvidia-device-plugin") == \
        [("other", "nvdp-nvidia-device-plugin")]
    assert dph.live_value(daemonset()) is None and dph.live_value(daemonset("8")) == "8"


def test_the_patch_names_only_the_plugin_container_and_the_one_variable():
    assert dph.env_patch("8,11") == {
        "metadata": {"annotations": {dph.MARK: "8,11"}},
        "spec": {"template": {"spec": {"containers": [
            {"name": dph.PLUGIN_CONTAINER, "env": [{"name": dph.DISABLE_ENV, "value": "8,11"}]}]}}}}
    assert dph.env_patch(None)["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": dph.DISABLE_ENV, "$patch": "delete"}]
