"""NVIDIA's dcgm-exporter chart as the collection installs it (plan/_dcgm_exporter.py): the values it builds and
refuses, held to what NVIDIA's own chart rendered with them (tests/fixtures/charts/dcgm-exporter-render-4.8.2.yaml,
recorded with the project's helm from NVIDIA/dcgm-exporter at 4.5.3-4.8.2), the stand-in chart the integration tests
install rendering the same, and the reading of the exporter's /metrics."""
import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_exporter as dx
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._gpu_pods import PAUSE_LABEL, excludes_paused
from tests.support.ansible_run import ROOT

HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHARTS = os.path.join(ROOT, "tests", "fixtures", "charts")
RECORD = os.path.join(CHARTS, "dcgm-exporter-render-4.8.2.yaml")


def record():
    with open(RECORD) as handle:
        return yaml.safe_load(handle)


def daemonset_view(text):
    docs = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "DaemonSet"]
    out = []
    for d in docs:
        spec = d["spec"]["template"]["spec"]
        c = spec["containers"][0]
        out.append({"name": d["metadata"]["name"], "labels": d["spec"]["template"]["metadata"]["labels"],
                    "hostNetwork": spec.get("hostNetwork"), "dnsPolicy": spec.get("dnsPolicy"),
                    "nodeSelector": spec.get("nodeSelector"), "affinity": spec.get("affinity"),
                    "args": c.get("args"), "env": c.get("env"), "ports": c.get("ports")})
    return out


# ---- values -----------------------------------------------------------------------------------------------------
def test_the_collection_still_builds_the_values_nvidia_chart_was_rendered_with():
    rec = record()
    assert rec["source"]["repository"] == "NVIDIA/dcgm-exporter" and len(rec["source"]["commit"]) == 40
    built = dx.build_values({}, rec["host_engine_port"])
    assert json.loads(json.dumps(built)) == rec["values"], (
        "the chart values changed: render NVIDIA's chart at %s again and record it" % rec["source"]["tag"])


def test_nvidia_chart_renders_an_exporter_on_the_host_network_reading_the_node_host_engine():
    ds = record()["daemonsets"]
    assert [d["name"] for d in ds] == ["dcgm-exporter"]
    ds = ds[0]
    assert ds["hostNetwork"] is True and ds["dnsPolicy"] == "ClusterFirstWithHostNet"
    env = dict((e["name"], e.get("value")) for e in ds["env"])
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "localhost:5555"
    assert not any(dx._is_flag(a) for a in ds["args"])       # no -r that would beat the variable
    assert excludes_paused(ds)                                # pausable like the device plugin
    assert ds["labels"]["app.kubernetes.io/instance"] == "dcgm-exporter"


@pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")
def test_the_stand_in_chart_renders_as_nvidia_chart_does(tmp_path):
    rec = record()
    values = tmp_path / "values.json"
    values.write_text(json.dumps(rec["values"]))
    out = subprocess.run([HELM, "template", "dcgm-exporter", os.path.join(CHARTS, "dcgm-exporter"), "--namespace",
                          "nvidia-dcgm-exporter", "-f", str(values)], capture_output=True, text=True, check=True)
    assert daemonset_view(out.stdout) == rec["daemonsets"]


def test_user_values_are_kept_beside_the_owned_ones():
    user = {"extraEnv": [{"name": "A", "value": "1"}], "serviceMonitor": {"enabled": True, "interval": "30s"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}}
    built = dx.build_values(user, 5556)
    assert built["extraEnv"] == [{"name": "A", "value": "1"},
                                 {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "localhost:5556"}]
    assert built["serviceMonitor"] == {"enabled": True, "interval": "30s"}
    terms = built["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [[e["key"] for e in t["matchExpressions"]] for t in terms] == [["pool", PAUSE_LABEL]]
    assert user["extraEnv"] == [{"name": "A", "value": "1"}]          # the input is not changed
    assert dx.build_values({})["serviceMonitor"] == {"enabled": False}


@pytest.mark.parametrize("values, words", [
    ({"hostNetwork": False}, "values.hostNetwork is set by the module"),
    ({"arguments": ["-f", "x.csv", "-r", "10.0.0.1:5555"]}, "-r/--remote-hostengine-info"),
    ({"arguments": ["--remote-hostengine-info=h:1"]}, "-r/--remote-hostengine-info"),
    ({"arguments": "-r h:1"}, "values.arguments must be a list"),
    ({"extraEnv": [{"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "x:1"}]}, "values.extraEnv sets"),
    ({"extraEnv": {"A": 1}}, "values.extraEnv must be a list"),
    ({"affinity": "gpu"}, "values.affinity must be a mapping"),
])
def test_values_the_module_cannot_take_are_named(values, words):
    errors = dx.values_errors(values)
    assert len(errors) == 1 and words in errors[0], errors


def test_arguments_without_the_flag_and_unrelated_values_pass():
    assert dx.values_errors({"arguments": ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv", "--r2"],
                             "resources": {}, "affinity": {}}) == []


@pytest.mark.parametrize("port, ok", [(5555, True), (1, True), (65535, True), (0, False), (65536, False),
                                      (True, False), ("5555", False)])
def test_host_engine_port_bounds(port, ok):
    assert (dx.port_error("host_engine_port", port) is None) is ok


@pytest.mark.parametrize("values, release, name", [
    ({}, "dcgm-exporter", "dcgm-exporter"), ({}, "telemetry", "telemetry-dcgm-exporter"),
    ({"nameOverride": "dx"}, "telemetry", "telemetry-dx"), ({"fullnameOverride": "gpu-metrics"}, "t", "gpu-metrics"),
])
def test_names_follow_nvidia_helpers(values, release, name):
    ds, selector = dx.names(values, release)
    assert ds == name
    assert selector.endswith("app.kubernetes.io/instance=%s" % release)


# ---- /metrics ---------------------------------------------------------------------------------------------------
# The line format of NVIDIA's exporter (internal/pkg/rendermetrics/render_metrics.go at 4.5.3-4.8.2) for two GPUs of
# a node named gpu-1, and a MIG instance's series.
SAMPLE = """# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1"} 1980
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1"} 34
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:0F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",\
GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",Hostname="gpu-1",container="",namespace="",pod=""} 36
"""
GPUS = [{"index": 0, "uuid": "GPU-aaaa"}, {"index": 1, "uuid": "GPU-bbbb"}]


def test_the_parser_reads_the_exporter_lines():
    samples = dx.parse_metrics(SAMPLE)
    assert [s[0] for s in samples] == ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP"]
    assert samples[2][1]["GPU_I_PROFILE"] == "1g.10gb" and samples[2][1]["pod"] == "" and samples[2][2] == "36"


def test_readme_style_spaces_escapes_and_timestamps_are_read():
    samples = dx.parse_metrics('M{gpu="0", UUID="GPU-a", modelName="A \\"quoted\\" \\\\ name"} 9223372036854775794 '
                               '1700000000000\nN 1.5e+01\n')
    assert samples[0][1] == {"gpu": "0", "UUID": "GPU-a", "modelName": 'A "quoted" \\ name'}
    assert samples[1] == ("N", {}, "1.5e+01")


@pytest.mark.parametrize("text", ["not a metric line at all", 'M{gpu=0} 1', 'M{gpu="0" 1', "M"])
def test_what_is_not_prometheus_text_is_named(text):
    with pytest.raises(dx.MetricsError) as err:
        dx.parse_metrics("# ok\n" + text)
    assert "line 2" in str(err.value)


def test_every_gpu_with_a_temperature_passes():
    check = dx.temperature_check(dx.parse_metrics(SAMPLE), GPUS, "gpu-1")
    assert check["missing"] == [] and check["found"] == {0: 34.0, 1: 36.0} and check["others"] == []


def test_a_gpu_without_a_series_is_missing_and_named():
    gpus = GPUS + [{"index": 2, "uuid": "GPU-cccc"}]
    check = dx.temperature_check(dx.parse_metrics(SAMPLE), gpus, "gpu-1")
    assert check["missing"] == [gpus[2]]
    msg = dx.describe_missing(check, "gpu-1", "ns/dcgm-exporter-abc")
    assert "GPU 2 (GPU-cccc)" in msg and "it lists GPU 0, GPU 1" in msg and "nvidia-dcgm.service" in msg


def test_series_of_another_node_or_another_gpu_do_not_count():
    other = SAMPLE.replace('Hostname="gpu-1"', 'Hostname="gpu-2"')
    check = dx.temperature_check(dx.parse_metrics(other), GPUS, "gpu-1")
    assert [g["index"] for g in check["missing"]] == [0, 1] and len(check["others"]) == 2
    swapped = SAMPLE.replace("GPU-bbbb", "GPU-zzzz")
    check = dx.temperature_check(dx.parse_metrics(swapped), GPUS, "gpu-1")
    assert [g["index"] for g in check["missing"]] == [1]
    assert "1/GPU-zzzz" in dx.describe_missing(check, "gpu-1", "p")


def test_old_namespace_uuid_label_and_index_only_gpus():
    old = SAMPLE.replace("UUID=", "uuid=")
    assert dx.temperature_check(dx.parse_metrics(old), GPUS, "gpu-1")["missing"] == []
    no_uuids = [{"index": 0}, {"index": 1}]
    bare = 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 30\nDCGM_FI_DEV_GPU_TEMP{gpu="1"} 31\n'
    assert dx.temperature_check(dx.parse_metrics(bare), no_uuids, "n")["found"] == {0: 30.0, 1: 31.0}
