"""_gpu_operator: the mig-parted configs published for the operator's MIG manager, the owned ClusterPolicy patch, and
the per-node checks against a ClusterPolicy (pure functions)."""
import re

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import execute_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError, resolve_layout
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import plan_layout

LABEL_VALUE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _gpus(make_sim, shape, enable=()):
    sim = make_sim(shape)
    for index in enable:
        sim.set_mig_mode(index, True)
        sim.reset_gpu(index)
    return sim, sim.read_all()["gpus"]


def test_named_layout_renders_per_model_entries_and_a_content_name(make_sim):
    dummy, gpus = _gpus(make_sim, "dgx-a100-40gb")
    name, entries, resolved = _gpu_operator.node_config(gpus, config_name_hint="all-balanced")
    assert entries == [{"device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True,
                        "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}]
    assert name.startswith("gpuops-all-balanced-") and len(name) <= 63 and LABEL_VALUE.match(name)
    assert _gpu_operator.gpus_differ(gpus, resolved) == list(range(8))        # MIG is off on every GPU
    again, dummy, dummy2 = _gpu_operator.node_config(gpus, config_name_hint="all-balanced")
    assert again == name                                            # the name is a function of the content
    other, dummy, dummy2 = _gpu_operator.node_config(gpus, config_name_hint="all-3g")
    assert other != name and other.startswith("gpuops-all-3g-")


def test_same_name_on_other_models_has_other_content(make_sim):
    dummy, a100 = _gpus(make_sim, "dgx-a100-40gb")
    h200 = make_sim("hgx-h200", "h200.json").read_all()["gpus"]
    a, a_entries, dummy = _gpu_operator.node_config(a100, config_name_hint="all-balanced")
    h, h_entries, dummy = _gpu_operator.node_config(h200, config_name_hint="all-balanced")
    assert a != h and h_entries[0]["device-filter"] == "0x233510DE"
    assert h_entries[0]["mig-devices"] == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}


def test_inline_layout_per_index_and_mixed_node(make_sim):
    dummy, gpus = _gpus(make_sim, "mixed")       # 2 x A100-80GB, 2 x H100, 1 x L40S
    layout = [{"devices": [0], "mig_devices": {"3g.40gb": 2}}, {"devices": [1], "mig_enabled": False},
              {"models": ["H100"], "mig_devices": {"7g.80gb": 1}}]
    name, entries, dummy = _gpu_operator.node_config(gpus, layout=layout)
    assert name.startswith("gpuops-layout-")
    assert entries == [
        {"device-filter": "0x20B210DE", "devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"device-filter": "0x20B210DE", "devices": [1], "mig-enabled": False},
        {"device-filter": "0x233010DE", "devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]
    # mig-parted's own parser accepts what was rendered
    doc = _gpu_operator.with_config({"version": "v1", "mig-configs": {}}, name, entries)
    resolved = resolve_layout(gpus, config=yaml.safe_load(yaml.safe_dump(doc)), config_name=name)
    assert sorted(resolved["gpus"]) == [0, 1, 2, 3]


def test_all_disabled_and_layouts_a_gpu_cannot_take(make_sim):
    dummy, gpus = _gpus(make_sim, "dgx-a100-40gb", enable=[3])
    name, entries, resolved = _gpu_operator.node_config(gpus, config_name_hint="all-disabled")
    assert (name, entries) == ("all-disabled", [{"devices": "all", "mig-enabled": False}])
    assert _gpu_operator.gpus_differ(gpus, resolved) == [3]
    with pytest.raises(MigLayoutError, match="1g.10gb"):
        _gpu_operator.node_config(gpus, layout=[{"devices": "all", "mig_devices": {"1g.10gb": 8}}])


def test_gpus_differ_is_empty_once_applied(make_sim):
    sim, gpus = _gpus(make_sim, "hgx-h200", enable=range(8))
    name, entries, resolved = _gpu_operator.node_config(gpus, config_name_hint="all-3g")
    plans = plan_layout(gpus, resolved)
    for plan in plans:
        execute_plan(sim, plan["index"], plan["operations"])
    assert _gpu_operator.gpus_differ(sim.read_all()["gpus"], resolved) == []


def test_with_config_keeps_other_configs_and_validates():
    entry = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}
    doc = {"version": "v1", "mig-configs": {"all-1g.5gb": [entry]}}
    out = _gpu_operator.with_config(doc, "gpuops-x-1", [{"devices": "all", "mig-enabled": False}])
    assert sorted(out["mig-configs"]) == ["all-1g.5gb", "all-disabled", "gpuops-x-1"]
    assert "gpuops-x-1" not in doc["mig-configs"]                  # a copy
    with pytest.raises(MigLayoutError):
        _gpu_operator.with_config(doc, "bad", [{"devices": "all"}])
    with pytest.raises(_gpu_operator.OperatorError, match="not a mig-parted v1 config"):
        _gpu_operator.parse_config_text("version: v2\n", yaml)
    assert _gpu_operator.unused_configs(out, {"n1": {_gpu_operator.MIG_CONFIG_LABEL: "all-disabled"}}) == ["gpuops-x-1"]


def _policy(**spec):
    base = {"metadata": {"name": "cluster-policy", "labels": {"app.kubernetes.io/version": "v25.3.4"}},
            "spec": {"toolkit": {"enabled": True}, "mig": {"strategy": "single"}}}
    base["spec"].update(spec)
    return base


def test_versions_from_labels_and_image_tags():
    assert _gpu_operator.operator_version(_policy()) == "v25.3.4"
    deployment = {"metadata": {"labels": {"helm.sh/chart": "gpu-operator-v24.9.2"}}}
    assert _gpu_operator.operator_version(deployment) == "v24.9.2"
    assert _gpu_operator.operator_version({"metadata": {}}) is None
    assert _gpu_operator.image_version("v0.17.0-ubi8") == "v0.17.0"
    assert _gpu_operator.image_version("v0.18.0-rc.1") == "v0.18.0-rc.1"


def test_owned_patch_touches_only_owned_fields_and_detects_pruning():
    patch = _gpu_operator.owned_patch(("cm", "default"), "mig-cm")
    assert patch == {"spec": {"devicePlugin": {"config": {"name": "cm", "default": "default"}},
                              "migManager": {"config": {"name": "mig-cm"}}}}
    assert _gpu_operator.owned_patch(("cm", "default"), None) == {"spec": {"devicePlugin": {"config": {
        "name": "cm", "default": "default"}}}}
    policy = _policy(devicePlugin={"config": {"name": "cm", "default": "default"}})
    assert _gpu_operator.patch_needed(policy, patch) == ["spec.migManager.config.name"]
    pruned_answer = _policy(devicePlugin={}, migManager={"config": {"name": "mig-cm"}})
    dropped = _gpu_operator.dropped_fields(pruned_answer, patch)
    assert dropped == ["spec.devicePlugin.config.default", "spec.devicePlugin.config.name"]
    msg = " ".join(_gpu_operator.too_old_errors("cluster-policy", "v1.10.0", dropped))
    assert "operator v1.10.0" in msg and "GPU Operator >= v1.11.0" in msg


def test_mig_strategy_of_the_policy_against_node_profiles():
    profiles = {"a": {"name": "mig-mixed", "mig_strategy": "mixed", "sharing": "none"},
                "b": {"name": "mps-4", "mig_strategy": "none", "sharing": "mps"},
                "c": {"name": "default", "mig_strategy": "none", "sharing": "none"}}
    errs = _gpu_operator.mig_strategy_errors(_policy(), profiles)
    assert len(errs) == 2 and "node a declares MIG strategy mixed" in errs[0] and "--set mig.strategy=" in errs[1]
    errs = _gpu_operator.mig_strategy_errors(_policy(mig={"strategy": "mixed"}), profiles)
    assert len(errs) == 2 and "node b uses MPS" in errs[0]
    assert _gpu_operator.mig_strategy_errors(_policy(mig={}), profiles) == []


def test_containerd_ownership_and_refusals():
    nodes = [{"name": "a", "owner": "auto", "files": ["/etc/containerd/config.toml"]},
             {"name": "b", "owner": "auto", "files": ["/etc/containerd/config.toml"]},
             {"name": "c", "owner": "collection", "files": ["/etc/containerd/config.toml"]},
             {"name": "d", "owner": "collection", "files": ["/srv/k3s/config.toml"]}]
    labels = {"b": {_gpu_operator.TOOLKIT_DEPLOY_LABEL: "false"}}
    owners, errs = _gpu_operator.containerd_owners(_policy(), "v25.3.4", nodes, labels)
    assert owners == {"a": "gpu_operator", "b": "collection", "c": "collection", "d": "collection"}
    assert len(errs) == 1 and errs[0].startswith("node c:") and "writes /etc/containerd/config.toml too" in errs[0]
    owners, errs = _gpu_operator.containerd_owners(_policy(toolkit={"enabled": False}), None,
                                                   [{"name": "a", "owner": "gpu_operator", "files": []}], {})
    assert "spec.toolkit.enabled is false" in errs[0]
    assert _gpu_operator.toolkit_files(_policy(), "v25.3.4") == (True, ["/etc/containerd/config.toml"])
    k3s = _policy(toolkit={"env": [{"name": "CONTAINERD_CONFIG", "value": "/k3s.toml"}]})
    assert _gpu_operator.toolkit_files(k3s, "v25.10.1") == (True, ["/k3s.toml",
                                                                   "/etc/containerd/conf.d/99-nvidia.toml"])


def test_select_policy_never_guesses():
    assert _gpu_operator.select_policy([{"metadata": {"name": "p"}}])["metadata"]["name"] == "p"
    with pytest.raises(_gpu_operator.OperatorError, match="no ClusterPolicy found"):
        _gpu_operator.select_policy([])
    with pytest.raises(_gpu_operator.OperatorError, match="give policy_name"):
        _gpu_operator.select_policy([{"metadata": {"name": "p"}}, {"metadata": {"name": "q"}}])
    with pytest.raises(_gpu_operator.OperatorError, match="never creates"):
        _gpu_operator.select_policy([{"metadata": {"name": "p"}}], "cluster-policy")


def test_state_problems_name_the_node_the_state_and_where_to_look():
    failed = _gpu_operator.state_problem("n1", "failed", "gpuops-x-1", "gpu-operator")
    assert "node n1" in failed and "=failed" in failed and "kubectl -n gpu-operator logs" in failed
    pending = _gpu_operator.state_problem("n1", "pending", "gpuops-x-1", "gpu-operator", 600)
    assert "still pending" in pending and "after 600 s" in pending
    none = _gpu_operator.state_problem("n1", None, "gpuops-x-1", "gpu-operator", 10)
    assert "is the MIG manager running" in none
