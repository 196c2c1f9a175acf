"""Filters used by site.yml: device_plugin_profiles and mig_plan_summary."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.device_plugin_profiles import device_plugin_profiles
from ansible_collections.gpuops.nvidia.plugins.filter.mig_plan_summary import mig_plan_summary

HOSTVARS = {
    "a1": {"gpu_node_sharing": "mig"},
    "a2": {"gpu_node_sharing": "mig", "gpu_node_mig_strategy": "single"},
    "h1": {"gpu_node_sharing": "mps", "gpu_node_replicas": 4},
    "h2": {"gpu_node_sharing": "mps", "gpu_node_replicas": "4"},
    "l1": {"gpu_node_sharing": "time-slicing", "gpu_node_replicas": 8},
    "x1": {},
}


def test_one_profile_per_distinct_strategy_and_each_node_choice():
    plan = device_plugin_profiles(HOSTVARS, sorted(HOSTVARS))
    assert plan["profiles"] == [
        {"name": "default"},
        {"name": "mig-mixed", "mig_strategy": "mixed"},
        {"name": "mig-single", "mig_strategy": "single"},
        {"name": "mps-4", "sharing": "mps", "replicas": 4},
        {"name": "ts-8", "sharing": "time-slicing", "replicas": 8},
    ]
    assert plan["nodes"] == {"a1": "mig-mixed", "a2": "mig-single", "h1": "mps-4", "h2": "mps-4", "l1": "ts-8",
                             "x1": "default"}


def test_only_the_named_nodes_and_always_a_default():
    plan = device_plugin_profiles(HOSTVARS, ["h1"])
    assert [p["name"] for p in plan["profiles"]] == ["default", "mps-4"] and plan["nodes"] == {"h1": "mps-4"}


@pytest.mark.parametrize("hv,words", [
    ({"gpu_node_sharing": "mps-4"}, ["node n: sharing strategy 'mps-4'", "mig, mps, time-slicing, none"]),
    ({"gpu_node_sharing": "mps"}, ["mps needs replicas", "got None"]),
    ({"gpu_node_sharing": "time-slicing", "gpu_node_replicas": 1}, ["2 or more", "got 1"]),
    ({"gpu_node_sharing": "time-slicing", "gpu_node_replicas": "2.5"}, ["whole number", "'2.5'"]),
    ({"gpu_node_sharing": "mig", "gpu_node_mig_strategy": "none"}, ["MIG strategy 'none'"]),
])
def test_bad_declarations_name_the_node_and_the_value(hv, words):
    with pytest.raises(AnsibleFilterError) as err:
        device_plugin_profiles({"n": hv}, ["n"])
    for word in words:
        assert word in str(err.value)


def test_mig_plan_summary_lines_only_for_gpus_that_change():
    mode = [{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "changed": True, "before": {"current": "Disabled"},
             "desired": "Enabled", "actions": ["set_mig_mode", "reset_gpu"]},
            {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "changed": False, "before": {"current": "Enabled"},
             "desired": "Enabled", "actions": []},
            {"index": 2, "name": "NVIDIA H200", "changed": True, "before": {"current": "Disabled"},
             "desired": "Enabled", "actions": ["set_mig_mode"], "reboot_required": True, "reason": "GPU busy"}]
    layout = [{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "changed": True, "destroyed": [],
               "created": [{"kind": "gpu_instance", "profile": "3g.20gb", "placement": {"start": 4, "size": 4}},
                           {"kind": "compute_instance", "profile": "3g.20gb"}]},
              {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "changed": True,
               "destroyed": [{"kind": "gpu_instance", "profile": "7g.40gb", "placement": {"start": 0, "size": 8}}],
               "created": [], "busy_destroyed": [{"gi_id": 0}]},
              {"index": 3, "name": "NVIDIA H200", "changed": False, "destroyed": [], "created": []}]
    assert mig_plan_summary(layout, mode) == [
        "GPU0 A100-SXM4-40GB: MIG Disabled -> Enabled (set_mig_mode, reset_gpu); create 3g.20gb@4",
        "GPU1 A100-SXM4-40GB: destroy 7g.40gb@0; BUSY instances destroyed: 1",
        "GPU2 H200: MIG Disabled -> Enabled (set_mig_mode); REBOOT required: GPU busy",
    ]
    assert mig_plan_summary([], []) == []
