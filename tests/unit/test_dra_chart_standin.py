"""The stand-in DRA chart (tests/fixtures/charts/nvidia-dra-driver-gpu) renders, with the values dra_driver builds, what
NVIDIA's chart nvidia-dra-driver-gpu 25.8.1 rendered with them (tests/fixtures/dra/chart-render-v25.8.1.txt, recorded
with the project's helm from kubernetes-sigs/dra-driver-nvidia-gpu at v25.8.1): the kubelet plugin DaemonSet's name,
labels, selector, node affinity (with the pause expression) and feature gates, and the DeviceClasses with their CEL
selectors - everything the fakes and the node flow rely on."""

import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra_driver
from tests.support.ansible_run import ROOT

HELM = os.path.join(ROOT, "tools", "bin", "helm")
STANDIN = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
RECORDED = os.path.join(ROOT, "tests", "fixtures", "dra", "chart-render-v25.8.1.txt")

pytestmark = pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")


def _docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def _essentials(docs):
    out = {}
    for d in docs:
        if d["kind"] == "DeviceClass":
            out["DeviceClass/" + d["metadata"]["name"]] = (d["apiVersion"], d["spec"])
        if d["kind"] == "DaemonSet":
            spec = d["spec"]["template"]["spec"]
            env = dict((e["name"], e.get("value")) for c in spec["containers"] for e in c.get("env") or []
                       if e["name"] == "FEATURE_GATES")
            labels = d["metadata"]["labels"]
            out["DaemonSet/" + d["metadata"]["name"]] = {
                "name": labels.get("app.kubernetes.io/name"), "instance": labels.get("app.kubernetes.io/instance"),
                "selector": d["spec"]["selector"], "pod_labels": d["spec"]["template"]["metadata"]["labels"],
                "affinity": spec.get("affinity"), "feature_gates": env}
    return out


def test_the_standin_renders_what_nvidias_chart_rendered(tmp_path):
    values = _dra_driver.build_values({}, False)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    rendered = subprocess.run([HELM, "template", "nvidia-dra-driver-gpu", STANDIN, "-n", "nvidia-dra-driver-gpu", "-f",
                               str(path), "--api-versions", "resource.k8s.io/v1", "--kube-version", "1.34.0"],
                              check=True, capture_output=True, text=True).stdout
    with open(RECORDED) as handle:
        recorded = _essentials(_docs(handle.read()))
    ours = _essentials(_docs(rendered))
    assert sorted(ours) == sorted(recorded)
    for key in recorded:
        assert ours[key] == recorded[key], key
    # and the values the recorded render was made with are the ones dra_driver builds
    with open(RECORDED) as handle:
        header = [line for line in handle.read().splitlines()[:12] if line.startswith("#   {")]
    assert json.loads(header[0][len("#   "):]) == values
