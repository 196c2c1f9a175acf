"""The device_plugin_skip_xids filter: the fleet's Xid skip list from hostvars, and its errors."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.device_plugin_skip_xids import device_plugin_skip_xids

OFF = {"xid_fatal": "warn", "xid_gpu": "ignore", "xid_application": "ignore"}


def test_nodes_without_a_policy_get_the_default_and_skip_what_it_does_not_block():
    got = device_plugin_skip_xids({"n1": {}, "n2": {"gpu_node_health_policy": None}, "cpu": {}}, ["n1", "n2"])
    assert got["source"] == "policy" and got["differ"] is False and got["held"] == {}
    assert {8, 13, 63, 94} <= set(got["skip"]) and not {48, 79, 109, 154} & set(got["skip"])
    assert got["summary"].startswith("the device plugin skips Xid 8, 11, ") and "of 2 node(s)" in got["summary"]


def test_a_node_that_blocks_gpu_xids_holds_them_back_for_the_fleet():
    got = device_plugin_skip_xids({"n1": {}, "n2": {"gpu_node_health_policy": {"xid_gpu": "block"}}}, ["n1", "n2"])
    assert 63 not in got["skip"] and got["held"][63] == ["n2"] and 13 in got["skip"] and got["differ"] is True
    assert "still checked because some node's policy blocks them: Xid 8 (n2), 37 (n2)" in got["summary"]


def test_every_node_off_turns_the_check_off_and_a_setting_wins():
    hv = {"n1": {"gpu_node_health_policy": OFF}, "n2": {"gpu_node_health_policy": OFF}}
    assert device_plugin_skip_xids(hv, ["n1", "n2"])["skip"] == "all"
    got = device_plugin_skip_xids({"n1": {"gpu_node_health_policy": {"xid": "warn"}}}, ["n1"], [79, 13])
    assert got == {"skip": [13, 79], "differ": False, "held": {}, "source": "setting",
                   "summary": "the device plugin skips Xid 13, 79 besides its own (cluster_device_plugin_skip_xids)"}


@pytest.mark.parametrize("hostvars,nodes,setting,fragment", [
    ({"n1": {"gpu_node_health_policy": {"xid_fatal": "later"}}}, ["n1"], "auto",
     "node n1: gpu_node_health_policy: health policy xid_fatal: 'later' is not one of block, warn, ignore"),
    ({"n1": {"gpu_node_health_policy": {"xid": "warn"}}}, ["n1"], "auto", "unknown health finding kind 'xid'"),
    ({}, ["n1"], "auto", "node 'n1' is not in the input"),
    ({"n1": {}}, "n1", "auto", "nodes must be a list of node names"),
    ({"n1": {}}, ["n1"], "sometimes", "cluster_device_plugin_skip_xids: 'sometimes' is not a valid setting; give "
                                      "'auto'"),
    ({"n1": {}}, ["n1"], [13, 0], "cluster_device_plugin_skip_xids[1]: 0 is not an Xid code"),
    ([], ["n1"], "auto", "the input must be a mapping"),
    ({"n1": "x"}, ["n1"], "auto", "the variables of node n1 are not a mapping")])
def test_bad_input_says_what_is_wrong(hostvars, nodes, setting, fragment):
    with pytest.raises(AnsibleFilterError) as exc:
        device_plugin_skip_xids(hostvars, nodes, setting)
    assert fragment in str(exc.value)
