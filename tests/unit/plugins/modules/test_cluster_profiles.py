"""cluster_profiles and its planner (plugins/module_utils/kube/_profile_record.py): the fleet's device plugin profiles,
merged from what each run (an AWX job slice) declares, against the fake API server."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.filter.device_plugin_profiles import device_plugin_profiles
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _profile_record as record
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_profiles
from tests.support.modrun import run_main

MIG = {"gpu_node_sharing": "mig", "gpu_node_mig_strategy": "mixed"}
MPS4 = {"gpu_node_sharing": "mps", "gpu_node_replicas": 4}
TS2 = {"gpu_node_sharing": "time-slicing", "gpu_node_replicas": 2}
FLEET = {"n1": MIG, "n2": MPS4, "n3": TS2, "n4": MIG}


def plan(nodes, fleet=None):
    return device_plugin_profiles(fleet or FLEET, nodes)


def names(profiles):
    return [p["name"] for p in profiles]


pytestmark = pytest.mark.usefixtures("no_ambient_credentials")


def test_merge_keeps_other_slices_nodes_whatever_the_order():
    # AWX slices of the fleet, every order: the end state is the same, and no profile is ever dropped on the way
    slices = [["n1", "n4"], ["n2"], ["n3"]]
    ends = set()
    for order in ([0, 1, 2], [2, 1, 0], [1, 0, 2]):
        rec, seen = {}, []
        for i in order:
            p = plan(slices[i])
            rec, changes = record.merge(rec, p["nodes"], p["profiles"])
            assert not changes["removed_profiles"], (order, changes)
            seen.append(set(rec["profiles"]))
        assert all(a <= b for a, b in zip(seen, seen[1:]))
        ends.add(json.dumps(rec, sort_keys=True))
    assert len(ends) == 1
    rec = json.loads(ends.pop())
    assert names(record.profile_list(rec)) == ["default", "mig-mixed", "mps-4", "ts-2"]
    assert rec["nodes"] == {"n1": "mig-mixed", "n2": "mps-4", "n3": "ts-2", "n4": "mig-mixed"}


def test_a_profile_goes_only_when_no_node_of_the_record_declares_it():
    p = plan(["n1", "n2", "n3", "n4"])
    rec = record.merge({}, p["nodes"], p["profiles"])[0]
    # n2 (the only MPS node) now declares time-slicing: mps-4 goes, the rest stays
    p = plan(["n2"], dict(FLEET, n2=TS2))
    rec, changes = record.merge(rec, p["nodes"], p["profiles"])
    assert changes["changed_nodes"] == ["n2"] and changes["removed_profiles"] == ["mps-4"]
    assert names(record.profile_list(rec)) == ["default", "mig-mixed", "ts-2"]
    # a slice with only n1: nothing of the others goes; prune (a run over the whole fleet) drops the rest
    p = plan(["n1"])
    assert record.merge(rec, p["nodes"], p["profiles"])[1]["removed_nodes"] == []
    pruned, changes = record.merge(rec, p["nodes"], p["profiles"], prune=True)
    assert changes["removed_nodes"] == ["n2", "n3", "n4"] and names(record.profile_list(pruned)) == [
        "default", "mig-mixed"]


@pytest.mark.parametrize("hostvars", [MIG, MPS4, TS2, {"gpu_node_sharing": "none"},
                                      {"gpu_node_sharing": "mig", "gpu_node_mig_strategy": "single"},
                                      {"gpu_node_sharing": "mps", "gpu_node_replicas": 48},
                                      dict(MPS4, gpu_node_device_list_strategy="cdi-cri"),
                                      dict(MIG, gpu_node_device_list_strategy="cdi-annotations"),
                                      {"gpu_node_sharing": "none", "gpu_node_device_list_strategy": "volume-mounts"}])
def test_a_profile_name_gives_back_the_profile_the_filter_made(hostvars):
    profile = device_plugin_profiles({"n": hostvars}, ["n"])["profiles"]
    made = [p for p in profile if p["name"] == device_plugin_profiles({"n": hostvars}, ["n"])["nodes"]["n"]][0]
    assert record.profile_from_name(made["name"]) == made


@pytest.mark.parametrize("name", ["custom-a100", "mps-1", "mps-04", "ts-", "mig-auto", "mps-4-cdi", "cdi-cri", "",
                                  None])
def test_names_the_filter_never_makes_are_not_profiles(name):
    assert record.profile_from_name(name) is None


def test_a_record_edited_into_nonsense_is_refused():
    with pytest.raises(record.RecordError) as exc:
        record.merge({"nodes": {"x": "mps-9"}, "profiles": {}}, {}, [])
    assert "profile 'mps-9' for node(s) x" in str(exc.value)
    with pytest.raises(record.RecordError):
        record.from_data({"nodes": "{not json"}, "ConfigMap a/b")


def _args(kube_api, nodes, **kw):
    p = plan(nodes)
    args = dict(kubeconfig=kube_api.kubeconfig_path, namespace="nvidia-device-plugin", nodes=p["nodes"],
                profiles=p["profiles"])
    args.update(kw)
    return args


def _stored(kube_api):
    cm = kube_api.get("", "configmaps", "gpuops-nvidia-profiles", "nvidia-device-plugin")
    return record.from_data(cm["data"], "cm") if cm else None


def test_check_mode_then_apply_then_idempotent_then_another_slice(kube_api):
    res = run_main(cluster_profiles.main, _args(kube_api, ["n1", "n4"]), check_mode=True, diff=True)
    assert res["changed"] and names(res["profiles"]) == ["default", "mig-mixed"], res
    assert res["diff"]["after"]["nodes"] == {"n1": "mig-mixed", "n4": "mig-mixed"}
    assert kube_api.writes(dry_run=False) == [] and _stored(kube_api) is None

    res = run_main(cluster_profiles.main, _args(kube_api, ["n1", "n4"]), diff=True)
    assert res["changed"] and res["changes"]["added_nodes"] == ["n1", "n4"]
    assert _stored(kube_api)["nodes"] == {"n1": "mig-mixed", "n4": "mig-mixed"}
    writes = len(kube_api.writes())
    res = run_main(cluster_profiles.main, _args(kube_api, ["n1", "n4"]))
    assert res["changed"] is False and len(kube_api.writes()) == writes

    # another slice: its nodes are added, the first slice's stay; the result is the whole fleet's profiles
    res = run_main(cluster_profiles.main, _args(kube_api, ["n2", "n3"]), diff=True)
    assert res["changed"] and names(res["profiles"]) == ["default", "mig-mixed", "mps-4", "ts-2"]
    assert res["diff"]["before"]["nodes"] == {} and res["diff"]["after"]["nodes"] == {"n2": "mps-4", "n3": "ts-2"}
    # the first slice asking again gets the same set (what every slice computes once all recorded)
    res = run_main(cluster_profiles.main, _args(kube_api, ["n1", "n4"]))
    assert res["changed"] is False and names(res["profiles"]) == ["default", "mig-mixed", "mps-4", "ts-2"]


def test_a_write_that_lost_the_race_is_merged_again(kube_api):
    run_main(cluster_profiles.main, _args(kube_api, ["n1"]))
    # the first PUT is answered 409 (another slice wrote in between), the retry on a fresh read goes through
    kube_api.inject_failure("PUT", "/configmaps/gpuops-nvidia-profiles$", code=409, reason="Conflict",
                            message="Operation cannot be fulfilled on configmaps \"gpuops-nvidia-profiles\": the "
                            "object has been modified; please apply your changes to the latest version and try again")
    res = run_main(cluster_profiles.main, _args(kube_api, ["n2"]))
    assert res["changed"] and _stored(kube_api)["nodes"] == {"n1": "mig-mixed", "n2": "mps-4"}
    assert [r["code"] for r in kube_api.requests if r["method"] == "PUT"] == [409, 200]


def test_a_record_that_keeps_losing_the_race_gives_up_after_its_tries(kube_api):
    run_main(cluster_profiles.main, _args(kube_api, ["n1"]))
    kube_api.inject_failure("PUT", "/configmaps/gpuops-nvidia-profiles$", code=409, reason="Conflict",
                            times=record.CONFLICT_RETRIES)
    sleeps = []
    store = record.RecordStore(_kube.Kube.from_params(dict(kubeconfig=kube_api.kubeconfig_path)),
                               "nvidia-device-plugin", "gpuops-nvidia-profiles", sleep=sleeps.append)
    p = plan(["n2"])
    with pytest.raises(record.RecordError) as exc:
        store.update(p["nodes"], p["profiles"])
    assert str(exc.value) == ("could not update ConfigMap nvidia-device-plugin/gpuops-nvidia-profiles: %d conflicting "
                              "writes in a row" % record.CONFLICT_RETRIES)
    assert [r["code"] for r in kube_api.requests if r["method"] == "PUT"] == [409] * record.CONFLICT_RETRIES
    assert len(sleeps) == record.CONFLICT_RETRIES - 1 and all(0.05 <= s <= 0.3 for s in sleeps)   # between tries
    assert _stored(kube_api)["nodes"] == {"n1": "mig-mixed"}


def test_the_first_record_keeps_what_labelled_nodes_select(kube_api):
    # a cluster converged by an earlier version: nodes labelled with their profiles, no record yet
    kube_api.add_node("old-mps", labels={"nvidia.com/device-plugin.config": "mps-8"})
    kube_api.add_node("old-custom", labels={"nvidia.com/device-plugin.config": "my-own-config"})
    kube_api.add_node("n1", labels={"nvidia.com/device-plugin.config": "default"})
    res = run_main(cluster_profiles.main, _args(kube_api, ["n1"]))      # a --limit run over n1 only
    assert res["changes"]["seeded_nodes"] == ["old-mps"], res["changes"]
    assert names(res["profiles"]) == ["default", "mig-mixed", "mps-8"]
    assert res["nodes"] == {"n1": "mig-mixed", "old-mps": "mps-8"}
    # seeded once: from now on the record is what counts
    kube_api.add_node("later", labels={"nvidia.com/device-plugin.config": "ts-3"})
    res = run_main(cluster_profiles.main, _args(kube_api, ["n1"]))
    assert res["changed"] is False and "later" not in res["nodes"]


@pytest.mark.parametrize("kw,fragment", [
    (dict(namespace="Bad"), "a lowercase RFC 1123 label"),
    (dict(nodes={"n1": "mps-9"}), "nodes: node n1 selects profile 'mps-9', which profiles does not define"),
    (dict(nodes={"N_1": "default"}), "nodes: 'N_1' is not a Kubernetes node name"),
    (dict(nodes={"n" * 254: "default"}), "is not a Kubernetes node name"),
    (dict(nodes={"n1": 8}), "nodes['n1']: the profile must be a profile name (a string), got a int"),
    (dict(profiles=[{"name": "bad name!"}], nodes={}), "profile name 'bad name!' is not a ConfigMap key"),
    (dict(profiles=[{"sharing": "mps"}], nodes={}), "profiles[0] has no name"),
])
def test_bad_input_refused_before_any_call(kube_api, kw, fragment):
    res = run_main(cluster_profiles.main, dict(_args(kube_api, ["n1"]), **kw))
    assert res["failed"] and fragment in res["msg"], res
    assert kube_api.requests == []
