"""dcgm_exporter and dcgm_exporter_verify with the REAL helm binary against the fake API server over real HTTP, with
the stand-in of NVIDIA's chart (tests/fixtures/charts/dcgm-exporter), the fake DaemonSet controller running its pods
(tests/support/fake_daemonsets.py) and the stand-in exporter answering /metrics through the API server's pod proxy
(tests/support/dcgm_exporter_standin.py) from one simulated HGX H200's GPUs."""
import json
import os
import shutil

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import dcgm_exporter, dcgm_exporter_verify
from tests.support.dcgm_exporter_standin import ExporterStandin
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.modrun import run_main as run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "dcgm-exporter")
NS = "nvidia-dcgm-exporter"
NODE = "gpu-1"

pytestmark = pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")


class Cluster(object):
    def __init__(self, tmp_path, monkeypatch):
        for var in list(os.environ):
            if var.startswith("K8S_AUTH_") or var.startswith("HELM_") or var.startswith("GPUOPS_SIMULATED") \
                    or var == "KUBECONFIG":
                monkeypatch.delenv(var)
        monkeypatch.setenv("HOME", str(tmp_path))
        self.api = FakeKubeApi(tokens=None).start()
        self.kubeconfig = str(tmp_path / "kubeconfig")
        with open(self.kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        self.chart = str(tmp_path / "dcgm-exporter")
        shutil.copytree(CHART, self.chart)
        self.api.add_node(NODE, labels={"nvidia.com/gpu.present": "true"})
        self.api.add_node("cpu-1")                  # no GPU: the exporter's affinity keeps it off
        self.state = str(tmp_path / "gpu-1.json")
        self.gpus = SimulatedBackend(self.state, shape="hgx-h200").read_all()["gpus"]
        self.exporter = ExporterStandin({NODE: self.state})
        self.api.pod_proxy = self.exporter
        self.fake = FakeDaemonSets(self.api, {NODE: (self.state, "hgx-h200"), "cpu-1": (self.state, "hgx-h200")})
        self.fake.start()

    def stop(self):
        self.fake.stop()
        self.api.stop()

    def args(self, **kw):
        base = dict(binary_path=HELM, chart_path=self.chart, kubeconfig=self.kubeconfig)
        base.update(kw)
        return base

    def verify_args(self, **kw):
        base = dict(kubeconfig=self.kubeconfig, node_name=NODE, gpus={"gpus": self.gpus}, timeout=20, interval=0.1)
        base.update(kw)
        return base

    def pods(self, node):
        return [p for p in self.fake.pods_on(node) if p["metadata"]["namespace"] == NS]


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    c = Cluster(tmp_path, monkeypatch)
    try:
        yield c
    finally:
        c.stop()


def helm_writes(res):
    return [c[1] for c in res.get("commands", []) if c[1] in ("upgrade", "install", "uninstall", "rollback")]


def test_check_mode_install_idempotence_and_the_scrape(cluster):
    check = run_module(dcgm_exporter.main, cluster.args(), check_mode=True, diff=True)
    assert check["changed"] is True, check.get("msg")
    assert check["changes"] == ["release dcgm-exporter is not installed in namespace %s" % NS]
    assert cluster.api.writes() == [] and helm_writes(check) == []
    after = check["diff"]["after"]["values"]
    assert after["hostNetwork"] is True and after["extraEnv"] == [
        {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "localhost:5555"}]
    # check mode of the scrape before the install: a warning, not a failure
    early = run_module(dcgm_exporter_verify.main, cluster.verify_args(), check_mode=True)
    assert not early.get("failed") and early["changed"] is False and early["pod"] is None
    assert "no Ready DCGM exporter pod on node gpu-1" in early["problems"][0]

    first = run_module(dcgm_exporter.main, cluster.args())
    assert first["changed"] is True and first["release"]["status"] == "deployed", first.get("msg")
    assert first["host_engine"] == "localhost:5555"
    assert first["exporter"] == {"namespace": NS, "name": "dcgm-exporter", "port": 9400,
                                 "selector": "app.kubernetes.io/name=dcgm-exporter,app.kubernetes.io/instance=dcgm-exporter"}
    spec = cluster.api.get("apps", "daemonsets", "dcgm-exporter", NS)["spec"]["template"]["spec"]
    assert _gpu_pods.excludes_paused(spec) and spec["hostNetwork"] is True

    writes = len(cluster.api.writes())
    second = run_module(dcgm_exporter.main, cluster.args())
    assert second["changed"] is False, second["changes"]
    assert helm_writes(second) == [] and len(cluster.api.writes()) == writes

    res = run_module(dcgm_exporter_verify.main, cluster.verify_args())
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False and res["missing"] == [] and res["problems"] == []
    assert sorted(res["temperatures"]) == [str(g["index"]) for g in cluster.gpus]
    assert res["pod"].startswith(NS + "/dcgm-exporter-gpu-1")
    assert cluster.pods("cpu-1") == []                      # no exporter on a node without GPUs
    proxied = [r for r in cluster.api.requests if r["path"].endswith(":9400/proxy/metrics")]
    assert proxied and all(r["method"] == "GET" for r in proxied)


def test_a_gpu_the_exporter_does_not_list_fails_naming_it(cluster):
    assert run_module(dcgm_exporter.main, cluster.args())["changed"] is True
    cluster.exporter.skip[NODE] = (3,)
    res = run_module(dcgm_exporter_verify.main, cluster.verify_args(timeout=2, interval=0.2))
    assert res["failed"] and res["missing"] == [3]
    uuid = cluster.gpus[3]["uuid"]
    assert "serves no DCGM_FI_DEV_GPU_TEMP series for GPU 3 (%s)" % uuid in res["msg"]
    assert "nvidia-dcgm.service" in res["msg"]
    # the same in check mode is a warning
    check = run_module(dcgm_exporter_verify.main, cluster.verify_args(), check_mode=True)
    assert not check.get("failed") and check["missing"] == [3]
    assert "GPU 3" in json.dumps(check.get("warnings", [])), check


def test_an_exporter_that_cannot_reach_the_host_engine_serves_nothing(cluster):
    cluster.exporter.engines[NODE] = None          # no nv-hostengine on the node
    assert run_module(dcgm_exporter.main, cluster.args())["changed"] is True
    res = run_module(dcgm_exporter_verify.main, cluster.verify_args(timeout=1, interval=0.2))
    assert res["failed"] and "reading /metrics of pod" in res["msg"] and "503" in res["msg"], res["msg"]


def test_another_host_engine_port_reaches_the_exporter(cluster):
    cluster.exporter.engines[NODE] = 5556
    res = run_module(dcgm_exporter.main, cluster.args(host_engine_port=5556))
    assert res["host_engine"] == "localhost:5556"
    assert not run_module(dcgm_exporter_verify.main, cluster.verify_args()).get("failed")


@pytest.mark.parametrize("values, words", [
    ({"hostNetwork": False}, "values.hostNetwork is set by the module"),
    ({"arguments": ["-r", "10.0.0.9:5555"]}, "-r/--remote-hostengine-info"),
])
def test_owned_values_are_refused_before_helm_runs(cluster, values, words):
    res = run_module(dcgm_exporter.main, cluster.args(values=values))
    assert res["failed"] and words in res["msg"] and res["changed"] is False
    assert cluster.api.writes() == [] and "commands" not in res


def test_the_verify_module_refuses_bad_input_before_reading(cluster):
    res = run_module(dcgm_exporter_verify.main, cluster.verify_args(gpus=[{"index": "zero"}], port=0))
    assert res["failed"] and "gpus[0].index must be a GPU index" in res["msg"]
    assert "port must be a TCP port number from 1 to 65535" in res["msg"]
    assert cluster.api.requests == []
