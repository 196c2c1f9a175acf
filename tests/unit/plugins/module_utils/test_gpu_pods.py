# -*- coding: utf-8 -*-
"""The pause affinity (expression, check, message) owned by _gpu_pods, which both chart modules ask."""
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods

DEFAULT_TERMS = ({"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},)


def test_pausable_affinity_keeps_pods_off_a_paused_node_with_the_charts_terms():
    affinity = _gpu_pods.pausable_affinity(None, DEFAULT_TERMS)
    assert _gpu_pods.excludes_paused({"affinity": affinity})
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [DEFAULT_TERMS[0]["matchExpressions"][0], _gpu_pods.pause_expression()]}]
    assert DEFAULT_TERMS[0]["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "In",
                                                     "values": ["true"]}]  # the caller's terms are not modified


def test_pausable_affinity_keeps_the_users_terms_and_keys_and_adds_the_expression_once():
    user = {"podAntiAffinity": {"x": 1}, "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]},
                              {"matchExpressions": [_gpu_pods.pause_expression()]}]}}}
    affinity = _gpu_pods.pausable_affinity(user, DEFAULT_TERMS)
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [len(t["matchExpressions"]) for t in terms] == [2, 1]
    assert affinity["podAntiAffinity"] == {"x": 1}
    assert _gpu_pods.excludes_paused({"affinity": affinity})
    assert _gpu_pods.pausable_affinity(affinity, DEFAULT_TERMS) == affinity


def test_affinity_errors_name_the_value_the_user_gave():
    assert _gpu_pods.affinity_errors(None, "values.kubeletPlugin.affinity") == []
    assert _gpu_pods.affinity_errors({"nodeAffinity": {}}, "values.kubeletPlugin.affinity") == []
    bad = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    errors = _gpu_pods.affinity_errors(bad, "values.kubeletPlugin.affinity")
    assert len(errors) == 1 and errors[0].startswith("values.kubeletPlugin.affinity must be a mapping whose ")
    assert "non-empty list of terms" in errors[0]
    assert _gpu_pods.affinity_errors("x", "helm value affinity")[0].startswith("helm value affinity must be a mapping")
