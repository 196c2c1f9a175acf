"""The stand-in DRA chart (tests/fixtures/charts/nvidia-dra-driver-gpu) renders, with the values dra_driver builds, what
NVIDIA's chart nvidia-dra-driver-gpu rendered with them at each supported version (tests/fixtures/dra/chart-render-v<V>.txt,
recorded with the project's helm from NVIDIA/k8s-dra-driver-gpu at tag v<V>: 25.8.1 and 25.12.0, the default): the
kubelet plugin DaemonSet's name, labels, selector, node affinity (with the pause expression) and feature gates, and the
DeviceClasses with their CEL selectors - everything the fakes and the node flow rely on. And NVIDIA's own rendering keeps
the kubelet plugin off a node the collection paused, and on a GPU node that is not paused."""

import json
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra_driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from tests.support.ansible_run import ROOT
from tests.support.fake_daemonsets import should_run

HELM = os.path.join(ROOT, "tools", "bin", "helm")
STANDIN = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
# The chart versions the collection supports (roles/cluster cluster_dra_chart_version defaults to the newest).
VERSIONS = ("25.8.1", "25.12.0")


def _recorded(version):
    return os.path.join(ROOT, "tests", "fixtures", "dra", "chart-render-v%s.txt" % version)


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


def _standin_at(version, tmp_path):
    """A copy of the stand-in whose Chart.yaml says ``version`` (its templates branch on .Chart.Version)."""
    chart = tmp_path / "chart"
    shutil.copytree(STANDIN, str(chart))
    meta = (chart / "Chart.yaml").read_text()
    assert "\nversion: 25.8.1\n" in meta
    (chart / "Chart.yaml").write_text(meta.replace("\nversion: 25.8.1\n", "\nversion: %s\n" % version))
    return str(chart)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_standin_renders_what_nvidias_chart_rendered(version, tmp_path):
    values = _dra_driver.build_values({}, False)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    rendered = subprocess.run([HELM, "template", "nvidia-dra-driver-gpu", _standin_at(version, tmp_path),
                               "-n", "nvidia-dra-driver-gpu", "-f", str(path), "--api-versions", "resource.k8s.io/v1",
                               "--kube-version", "1.34.0"], check=True, capture_output=True, text=True).stdout
    with open(_recorded(version)) as handle:
        text = handle.read()
    recorded = _essentials(_docs(text))
    ours = _essentials(_docs(rendered))
    assert sorted(ours) == sorted(recorded)
    for key in recorded:
        assert ours[key] == recorded[key], key
    # the recording is NVIDIA's chart at that version
    assert "helm.sh/chart: nvidia-dra-driver-gpu-%s\n" % version in text
    assert "image: nvcr.io/nvidia/k8s-dra-driver-gpu:v%s\n" % version in text
    # and the values the recorded render was made with are the ones dra_driver builds
    header = [line for line in text.splitlines()[:12] if line.startswith("#   {")]
    assert json.loads(header[0][len("#   "):]) == values


GPU_NODE = {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("version", VERSIONS)
def test_nvidias_kubelet_plugin_stays_off_a_paused_node(version):
    with open(_recorded(version)) as handle:
        daemonsets = [d for d in _docs(handle.read()) if d["kind"] == "DaemonSet"]
    assert [d["metadata"]["name"] for d in daemonsets] == [_dra_driver.kubelet_plugin_daemonset({})]
    pod_spec = daemonsets[0]["spec"]["template"]["spec"]
    assert _gpu_pods.excludes_paused(pod_spec)
    assert should_run(pod_spec, GPU_NODE)
    assert not should_run(pod_spec, dict(GPU_NODE, **{_gpu_pods.PAUSE_LABEL: _gpu_pods.PAUSE_VALUE}))
    assert not should_run(pod_spec, {"kubernetes.io/hostname": "cpu-1"})


def test_what_changed_from_25_8_1_to_25_12_0_for_the_collection():
    """The differences docs/dra.md states: a third DeviceClass, gpu.nvidia.com names the extended resource
    nvidia.com/gpu, and the kubelet plugin's affinity and feature gates are the same."""
    renders = []
    for version in VERSIONS:
        with open(_recorded(version)) as handle:
            renders.append(_essentials(_docs(handle.read())))
    old, new = renders
    assert sorted(set(new) - set(old)) == ["DeviceClass/vfio.gpu.nvidia.com"]
    assert set(old) <= set(new)
    assert new["DeviceClass/gpu.nvidia.com"][1].pop("extendedResourceName") == "nvidia.com/gpu"
    assert new["DeviceClass/gpu.nvidia.com"] == old["DeviceClass/gpu.nvidia.com"]
    key = "DaemonSet/" + _dra_driver.kubelet_plugin_daemonset({})
    assert new[key] == old[key]
