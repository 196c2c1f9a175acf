"""The device plugin release keeps its pods off a node whose GPU pods are paused, in NVIDIA's real chart.

tests/fixtures/charts/nvidia-device-plugin-render-<tag>.yaml record what NVIDIA's own chart (v0.17.0 and v0.20.0,
each with its commit) rendered with `helm template` for the values the collection builds for two profiles: the
names, instance labels, nodeSelector and affinity of the release's DaemonSets. These tests hold three things to
that record: the collection still builds exactly those values (else: render NVIDIA's chart again and record it),
every DaemonSet NVIDIA's chart rendered keeps its pods off a paused node (the rule node_gpu_pods checks before it
pauses), and the test fixture chart renders the same as NVIDIA's (so the integration tests run on the real shape).
"""
import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._device_plugin import build
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._gpu_pods import excludes_paused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHARTS = os.path.join(ROOT, "tests", "fixtures", "charts")
RECORDS = ["nvidia-device-plugin-render-v0.17.0.yaml", "nvidia-device-plugin-render-v0.20.0.yaml"]


def record(name):
    with open(os.path.join(CHARTS, name)) as handle:
        return yaml.safe_load(handle)


def daemonsets(text):
    """The record's view of a render: the release's DaemonSets, by name."""
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc or doc.get("kind") != "DaemonSet" \
                or doc["metadata"]["labels"].get("app.kubernetes.io/name") != "nvidia-device-plugin":
            continue
        spec = doc["spec"]["template"]["spec"]
        out.append({"name": doc["metadata"]["name"],
                    "instance": doc["metadata"]["labels"].get("app.kubernetes.io/instance"),
                    "template_instance": doc["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/instance"),
                    "nodeSelector": spec.get("nodeSelector"), "affinity": spec.get("affinity")})
    return sorted(out, key=lambda d: d["name"])


@pytest.mark.parametrize("name", RECORDS)
def test_the_collection_still_builds_the_values_nvidia_chart_was_rendered_with(name):
    rec = record(name)
    assert rec["source"]["repository"] == "NVIDIA/k8s-device-plugin" and len(rec["source"]["commit"]) == 40
    built = build(rec["profiles"], "default", chart_version=rec["source"]["tag"].lstrip("v"))["values"]
    assert json.loads(json.dumps(built)) == rec["values"], (
        "the chart values changed: render NVIDIA's chart at %s again and record it (see the record's source)"
        % rec["source"]["tag"])


@pytest.mark.parametrize("name", RECORDS)
def test_every_daemonset_of_nvidia_chart_keeps_its_pods_off_a_paused_node(name):
    rendered = record(name)["daemonsets"]
    assert [d["name"] for d in rendered] == ["nvdp-nvidia-device-plugin", "nvdp-nvidia-device-plugin-gpu-feature-discovery",
                                             "nvdp-nvidia-device-plugin-mps-control-daemon"]
    for ds in rendered:
        assert ds["instance"] == ds["template_instance"] == "nvdp", ds["name"]
        assert excludes_paused(ds), ds["name"]
        terms = ds["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert [t["matchExpressions"][0]["key"] for t in terms] == [      # NVIDIA's own terms are all still there
            "feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/cpu-model.vendor_id",
            "nvidia.com/gpu.present"]


def test_a_chart_without_the_expression_does_not_count_as_pausable():
    rendered = record(RECORDS[-1])["daemonsets"][0]
    terms = rendered["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[1]["matchExpressions"] = terms[1]["matchExpressions"][:1]      # one term without it: that term admits the pod
    assert not excludes_paused(rendered)
    assert not excludes_paused({"affinity": None})


@pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")
@pytest.mark.parametrize("name", RECORDS)
def test_the_fixture_chart_renders_as_nvidia_chart_does(tmp_path, name):
    rec = record(name)
    values = tmp_path / "values.json"
    values.write_text(json.dumps(rec["values"]))
    out = subprocess.run([HELM, "template", "nvdp", os.path.join(CHARTS, "nvidia-device-plugin"), "--namespace",
                          "nvidia-device-plugin", "-f", str(values)], capture_output=True, text=True, check=True)
    assert daemonsets(out.stdout) == rec["daemonsets"]
