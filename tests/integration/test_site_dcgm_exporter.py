"""site.yml with gpuops_dcgm_exporter=true on the standalone chart: NVIDIA's DCGM exporter installed by the cluster
play, pointed at the node's host engine, paused with the node's other GPU DaemonSets around its change, and scraped
once per node at the end (docs/health.md, "The DCGM exporter").

One node only (the lab's HGX H200, MPS with 4 replicas: a disruptive change on the standalone chart, so its GPU pods
are paused and let back). The cluster is the fake API server with the real helm and the stand-in charts of the
device plugin and of the exporter (tests/fixtures/charts), the fake DaemonSet controller, and the stand-in exporter
that serves /metrics through the API server's pod proxy from the node's simulated GPUs, only where the exporter
reaches the node's host engine (tests/support/dcgm_exporter_standin.py). Three runs: check mode, the converge, and a
re-run in which one GPU has no series.
"""
import os
import pathlib
import shutil

import pytest
import yaml

from tests.integration.site_helpers import HELM, Site
from tests.support.ansible_run import ROOT
from tests.support.dcgm_exporter_standin import ExporterStandin
from tests.support.fake_cluster import FakeCluster
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.lab_cluster import lab_nodes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

H200 = "lab-hgx-h200"
NS = "nvidia-dcgm-exporter"
EXPORTER_CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "dcgm-exporter")


class Cluster(FakeCluster):
    default_node = H200

    def __init__(self, tmp_path):
        tmp_path = pathlib.Path(str(tmp_path))
        self.api = FakeKubeApi(tokens=None).start()
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        self.api.add_node(H200, internal_ip="10.0.0.12", labels={"nvidia.com/gpu.present": "true"})
        chart = str(tmp_path / "exporter-chart")
        shutil.copytree(EXPORTER_CHART, chart)
        self.site = Site(tmp_path, limit=(H200,), gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpuops_dcgm_exporter=True, cluster_dcgm_exporter_chart_path=chart,
                         cluster_dcgm_exporter_verify_timeout=60, gpu_node_verify_timeout=60,
                         gpu_node_quiesce_timeout=60)
        self.site.extra["cluster_device_plugin_chart_path"] = self.site.chart()
        self.state = str(self.site.state / ("%s.json" % H200))
        self.exporter = ExporterStandin({H200: self.state})
        self.api.pod_proxy = self.exporter
        self.fake = FakeDaemonSets(self.api, {H200: (self.state, lab_nodes()[H200])})
        self.fake.start()

    def exporter_events(self):
        return [what for dummy, node, what in self.fake.events if "dcgm-exporter" in what]


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_the_exporter_is_installed_paused_around_the_change_and_lists_every_gpu(cluster):
    # check mode first: the release is reported, nothing is installed, the scrape only warns
    check = cluster.site.run(check=True)
    assert check.rc == 0, check
    [would] = check.task("NVIDIA's DCGM exporter", H200)
    assert would["changed"] is True and would["changes"] == [
        "release dcgm-exporter is not installed in namespace %s" % NS]
    assert cluster.api.get("apps", "daemonsets", "dcgm-exporter", NS) is None
    [looked] = check.task("The DCGM exporter on this node lists a GPU temperature", H200)
    assert not looked.get("failed") and looked["pod"] is None and "no Ready DCGM exporter pod" in looked["problems"][0]

    res = cluster.site.run()
    assert res.rc == 0, res
    ds = cluster.api.get("apps", "daemonsets", "dcgm-exporter", NS)
    spec = ds["spec"]["template"]["spec"]
    env = dict((e["name"], e.get("value")) for e in spec["containers"][0]["env"])
    assert spec["hostNetwork"] is True and env["DCGM_REMOTE_HOSTENGINE_INFO"] == "localhost:5555"
    [install] = res.task("NVIDIA's DCGM exporter", H200)
    assert install["changed"] is True and install["exporter"]["name"] == "dcgm-exporter"
    # the exporter's pod ran before the node play, left the node while it changed (paused with the device plugin's)
    # and came back: two pods, the first ended
    events = [e for e in cluster.exporter_events() if e.startswith(("created", "ended"))]
    created = [e for e in events if e.startswith("created")]
    assert [e.split(" ")[0] for e in events] == ["created", "ended", "created"], events
    assert events[1].split(" ")[1] == created[0].split(" ")[1]          # the first pod is the one that ended
    [scrape] = res.task("The DCGM exporter on this node lists a GPU temperature", H200)
    gpus = cluster.site.gpus(H200)["gpus"]
    assert scrape["missing"] == [] and sorted(scrape["temperatures"]) == sorted(str(g["index"]) for g in gpus)
    assert scrape["pod"].endswith(created[-1].split(" ")[1])           # the pod that came back was read
    assert cluster.exporter.served and cluster.exporter.served[-1][0] == H200

    # again, with GPU 5 not watched by the host engine: nothing changes, the scrape fails naming the GPU
    cluster.exporter.skip[H200] = (5,)
    again = cluster.site.run(cluster_dcgm_exporter_verify_timeout=2)
    assert again.rc != 0 and again.changed(H200) == 0, again
    [(host, task, msg)] = again.failures()
    assert host == H200 and task.endswith("The DCGM exporter on this node lists a GPU temperature for every GPU")
    assert "no DCGM_FI_DEV_GPU_TEMP series for GPU 5 (%s)" % gpus[5]["uuid"] in msg
    assert "nvidia-dcgm.service" in msg
