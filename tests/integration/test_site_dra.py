"""site.yml with gpuops_device_plugin_provider=dra: NVIDIA's DRA driver instead of a device plugin (docs/dra.md).

The cluster is the fake API server as Kubernetes 1.34 (resource.k8s.io/v1; tests/support/fake_kube_api.py validates
the DeviceClasses, ResourceSlices and ResourceClaimTemplates written), the real helm with the stand-in of NVIDIA's
chart nvidia-dra-driver-gpu 25.8.1 (tests/fixtures/charts/nvidia-dra-driver-gpu), and tests/support/fake_daemonsets.py,
whose fake kubelet plugin publishes a node's ResourceSlice from its simulated GPUs when its pod starts (stale after a MIG
change until it restarts, as NVIDIA's plugin) and holds the GPUs while it runs. The lab's A100 (MIG all-balanced) and
H200 (MPS, 4 replicas) converge; their templates are published into the namespace ml.

The check run and the converge from scratch are made once per session (the ``converged`` fixture,
tests/support/converged_lab.py): the test of the converge asserts on what they recorded, and each test that starts
from the converged lab takes a copy of it.
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

A100, H200 = "lab-dgx-a100", "lab-hgx-h200"
DRA_CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
PAUSED = "gpuops.nvidia/gpu-pods-paused"


class Cluster(FakeCluster):
    """The lab's two nodes on the fake cluster, all under ``tmp_path``; with ``restore`` (a converged lab's record,
    _converge), the API server's objects and the fake controller's state of that converge, whose files a
    converged_labs copy has put under ``tmp_path``."""

    def __init__(self, tmp_path, restore=None):
        tmp_path = pathlib.Path(str(tmp_path))
        self.api = FakeKubeApi(tokens=None, server_version="v1.34.1").start()
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        if restore is None:
            for i, node in enumerate((A100, H200)):
                self.api.add_node(node, internal_ip="10.0.0.%d" % (11 + i), labels={"nvidia.com/gpu.present": "true"})
            self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        else:
            self.api.restore(restore["api"])
        chart = str(tmp_path / "dra-chart")
        if not os.path.exists(chart):
            shutil.copytree(DRA_CHART, chart)
        self.site = Site(tmp_path, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpuops_device_plugin_provider="dra", cluster_dra_chart_path=chart,
                         gpuops_dra_namespaces=["ml"], gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60,
                         gpu_node_operator_poll_interval=0.5)
        shapes = lab_nodes()
        self.fake = FakeDaemonSets(self.api, dict((n, (str(self.site.state / ("%s.json" % n)), shapes[n]))
                                                  for n in (A100, H200)))
        if restore is not None:
            self.fake.restore(restore["fake"])
        self.fake.start()

    def objects(self, plural, namespace=None):
        with self.api._lock:
            return dict((n, o) for (g, p, ns, n), o in self.api.objects.items()
                        if p == plural and (namespace is None or ns == namespace))

    def slices(self):
        return list(self.objects("resourceslices").values())

    def gpus(self, node):
        return self.fake._backend(node).read_all()["gpus"]

    def templates(self):
        return self.objects("resourceclaimtemplates", "ml")

    def writes(self, since=0):
        return ["%s %s" % (r["method"], r["path"]) for r in self.api.requests[since:]
                if r["method"] in ("POST", "PUT", "PATCH", "DELETE") and not r["query"].get("dryRun")
                and "/leases/" not in r["path"] and not r["path"].endswith("/leases")]


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def _converge(directory):
    """The lab variant "dra": on the fresh cluster, site.yml in check mode, then the converge. Recorded are what a
    copy restores besides its files (the API server's objects, the fake controller's state) and what the two runs
    showed, for the test that asserts on them: the check run's result and what the cluster and the A100's GPUs were
    before and right after it, and the converge's result."""
    c = Cluster(directory)
    try:
        before = c.gpus(A100)
        check = c.site.run(check=True, diff=True)
        after_check = {"result": check, "gpus_before": before, "gpus": c.gpus(A100), "writes": c.writes(),
                       "slices": c.slices(), "templates": c.templates()}
        res = c.site.run()
        assert check.rc == 0 and res.rc == 0, (check, res)
        c.wait_settled()
    finally:
        c.stop()
    return {"api": c.api.snapshot(), "fake": c.fake.snapshot(), "check": after_check, "result": res}


@pytest.fixture
def converged(converged_labs, tmp_path, request):
    """A Cluster that site.yml checked, then converged, from scratch: a fresh copy of this session's converge of the
    DRA lab (tests/support/converged_lab.py); ``converged.first`` is what that converge recorded (_converge)."""
    with converged_labs.copy("dra", _converge, keep_in=tmp_path, test=request.node.nodeid) as (slot, record):
        c = Cluster(slot, restore=record)
        c.first = record
        try:
            yield c
        finally:
            c.stop()


def _released(node):
    meta = node["metadata"]
    return not (node.get("spec") or {}).get("unschedulable") and PAUSED not in (meta.get("labels") or {})


def _published(cluster, node):
    """{uuid: type/profile} the node's ResourceSlices list (read independently of the collection's code)."""
    out = {}
    for s in cluster.slices():
        if s["spec"]["nodeName"] == node and s["spec"]["driver"] == "gpu.nvidia.com":
            for dev in s["spec"]["devices"]:
                attrs = dev["attributes"]
                out[attrs["uuid"]["string"]] = (attrs["type"]["string"], (attrs.get("profile") or {}).get("string"))
    return out


def _promised(gpus):
    out = {}
    for gpu in gpus:
        if gpu["mig_mode_current"] == "Enabled":
            out.update((d["uuid"], ("mig", d["profile"])) for d in gpu["mig_devices"])
        else:
            out[gpu["uuid"]] = ("gpu", None)
    return out


def test_check_converge_rerun_and_a_mig_relayout_republished_before_uncordon(converged):
    # The check run and the converge from scratch are the session's runs of this lab, as they recorded them
    # (converged.first); the cluster and the GPUs are a copy of what the converge left.
    cluster, first = converged, converged.first
    # check mode on a fresh cluster: the plan, and nothing written (no release, no slice, no template, no GPU change)
    check = first["check"]
    res = check["result"]
    assert res.rc == 0, res
    assert check["writes"] == [] and check["slices"] == [] and check["templates"] == {}
    assert check["gpus"] == check["gpus_before"]

    # converge
    res = first["result"]
    assert res.rc == 0, res
    a100 = cluster.site.gpus(A100)
    assert all(g["mig_current"] is True for g in a100["gpus"])
    calls = [c.get("call") or c.get("event") for c in a100["call_log"]]
    assert calls.count("reset_gpu") == 8 and "reboot" not in calls, "the kubelet plugin left the node first"
    # each node publishes exactly its devices: the A100's MIG devices only, the H200's 8 GPUs
    assert _published(cluster, A100) == _promised(cluster.gpus(A100))
    assert set(t for t, p in _published(cluster, A100).values()) == {"mig"}
    assert _published(cluster, H200) == _promised(cluster.gpus(H200)) and len(_published(cluster, H200)) == 8
    # no device plugin at all; the DRA driver's kubelet plugin runs on both nodes; both released
    daemonsets = cluster.objects("daemonsets")
    assert [n for n in daemonsets if "kubelet-plugin" in n] and not [n for n in daemonsets if "device-plugin" in n]
    assert sorted(cluster.objects("deviceclasses")) == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert _released(cluster.api.get("", "nodes", A100)) and _released(cluster.api.get("", "nodes", H200))
    # the H200's compute mode is the driver's to set per claim: the collection set none
    h200_calls = [c.get("call") for c in cluster.site.gpus(H200)["call_log"]]
    assert "set_compute_mode" not in h200_calls
    # templates: a whole GPU (fleet), MPS for the H200 with the device plugin's share math, one per MIG profile
    templates = cluster.templates()
    profiles = sorted(set(d["profile"] for g in cluster.gpus(A100) for d in g["mig_devices"]))
    assert sorted(templates) == sorted(["gpu", "gpu-mps-4-h200"] + ["mig-%s" % p for p in profiles])
    mps = templates["gpu-mps-4-h200"]["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    memory = cluster.gpus(H200)[0]["memory_total_bytes"]
    assert mps["sharing"] == {"strategy": "MPS", "mpsConfig": {
        "defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "%dMi" % (memory // 4 // 2 ** 20)}}
    assert templates["gpu-mps-4-h200"]["metadata"]["annotations"]["gpuops.nvidia/users"] == H200

    # again: nothing changes, nothing is written, no pod restarts
    seen, events = len(cluster.api.requests), len(cluster.fake.events)
    res = cluster.site.run()
    assert res.rc == 0, res
    assert res.changed(A100) == 0 and res.changed(H200) == 0, res
    assert cluster.writes(seen) == [] and cluster.fake.events[events:] == []

    # a MIG relayout: the kubelet plugin is paused, MIG changes, the plugin comes back and republishes, the node's
    # slices are verified before the uncordon, and the MIG templates follow (the old profiles' last user left)
    events = len(cluster.fake.events)
    res = cluster.site.run(args=("--limit", A100), gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0, res
    assert _published(cluster, A100) == _promised(cluster.gpus(A100))
    assert set(p for t, p in _published(cluster, A100).values()) == {"1g.5gb"}
    new = [what for t, n, what in cluster.fake.events[events:] if n == A100]
    assert any(w.startswith("ended") and "kubelet-plugin" in w for w in new), new
    assert any(w.startswith("published") for w in new), new
    assert res.task("ResourceSlices list exactly", A100)
    assert _released(cluster.api.get("", "nodes", A100))
    assert sorted(cluster.templates()) == ["gpu", "gpu-mps-4-h200", "mig-1g.5gb"]
    seen = len(cluster.api.requests)
    res = cluster.site.run(args=("--limit", A100), gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0 and res.changed(A100) == 0, res
    assert cluster.writes(seen) == []


def test_a_device_plugin_on_a_node_is_refused_before_anything_changes(cluster):
    # NVIDIA's device plugin chart already runs on the H200: the DRA driver beside it would allocate its GPUs twice
    cluster.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nvidia-device-plugin"}})
    cluster.api.put({"apiVersion": "apps/v1", "kind": "DaemonSet",
                     "metadata": {"name": "nvdp-nvidia-device-plugin", "namespace": "nvidia-device-plugin",
                                  "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
                     "spec": {"selector": {"matchLabels": {"app": "nvdp"}}, "template": {
                         "metadata": {"labels": {"app": "nvdp"}},
                         "spec": {"nodeSelector": {"kubernetes.io/hostname": H200},
                                  "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin"}]}}}})
    node = cluster.api.get("", "nodes", H200)
    node["metadata"]["labels"]["kubernetes.io/hostname"] = H200
    cluster.api.put(node)
    before = cluster.gpus(A100)
    res = cluster.site.run()
    assert res.rc != 0
    failed = res.failures()
    assert failed and H200 in failed[0][2] and "device plugin" in failed[0][2], failed
    assert "kubelet-plugin" not in " ".join(cluster.objects("daemonsets"))
    assert cluster.templates() == {} and cluster.slices() == []
    assert cluster.gpus(A100) == before, "no node play ran"


def test_without_the_pause_the_stale_slices_fail_verification_and_the_node_stays_cordoned_until_a_rerun(converged):
    cluster = converged
    stale = _published(cluster, A100)
    # a layout change on GPUs already in MIG mode needs no reset: without the pause the kubelet plugin keeps running
    # and keeps publishing the old MIG devices (it enumerates them only when it starts)
    res = cluster.site.run(args=("--limit", A100), gpu_node_quiesce=False, gpu_node_verify_timeout=3,
                           gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc != 0
    failed = [f for f in res.failures() if f[0] == A100]
    assert failed and "does not publish exactly its devices" in failed[-1][2] and "is not published" in failed[-1][2]
    assert _published(cluster, A100) == stale != _promised(cluster.gpus(A100))
    node = cluster.api.get("", "nodes", A100)
    assert node["spec"]["unschedulable"] is True, "left cordoned: it does not serve its devices"
    # the next run (with the pause) restarts the plugin, which publishes the new devices; verified, then uncordoned
    res = cluster.site.run(args=("--limit", A100), gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0, res
    assert _published(cluster, A100) == _promised(cluster.gpus(A100))
    assert _released(cluster.api.get("", "nodes", A100))


def test_the_dcgm_exporter_beside_the_dra_driver_paused_with_its_kubelet_plugin_around_a_mig_relayout(converged):
    """The DCGM exporter with the DRA provider (issue 50 item 4), on a copy of the converged DRA lab (no lab of its
    own): the cluster play installs the exporter beside the DRA driver, pointed at the node's host engine; in the same
    run a MIG relayout of the A100 pauses the exporter's pod with the kubelet plugin's and lets both back; the exporter
    is scraped once and lists every GPU; a re-run changes and writes nothing."""
    cluster = converged
    chart = str(cluster.site.state.parent / "exporter-chart")
    shutil.copytree(os.path.join(ROOT, "tests", "fixtures", "charts", "dcgm-exporter"), chart)
    exporter = ExporterStandin(dict((n, str(cluster.site.state / ("%s.json" % n))) for n in (A100, H200)))
    cluster.api.pod_proxy = exporter
    extra = dict(gpuops_dcgm_exporter=True, cluster_dcgm_exporter_chart_path=chart,
                 cluster_dcgm_exporter_verify_timeout=60, gpu_node_mig_config_name="all-1g.5gb")
    events = len(cluster.fake.events)
    res = cluster.site.run(args=("--limit", A100), **extra)
    assert res.rc == 0, res
    ds = cluster.api.get("apps", "daemonsets", "dcgm-exporter", "nvidia-dcgm-exporter")
    spec = ds["spec"]["template"]["spec"]
    env = dict((e["name"], e.get("value")) for e in spec["containers"][0]["env"])
    assert spec["hostNetwork"] is True and env["DCGM_REMOTE_HOSTENGINE_INFO"] == "localhost:5555"
    [install] = res.task("NVIDIA's DCGM exporter", A100)
    assert install["changed"] is True
    # the DRA driver beside it, not a device plugin
    daemonsets = cluster.objects("daemonsets")
    assert [n for n in daemonsets if "kubelet-plugin" in n] and not [n for n in daemonsets if "device-plugin" in n]
    # on the A100 the exporter's pod came up, left with the kubelet plugin's while MIG changed, and came back
    new = [what for t, n, what in cluster.fake.events[events:] if n == A100]
    exporter_pods = [w.split(" ")[0] for w in new if "dcgm-exporter" in w and w.startswith(("created", "ended"))]
    assert exporter_pods == ["created", "ended", "created"], new
    assert any(w.startswith("ended") and "kubelet-plugin" in w for w in new), new
    assert set(p for t, p in _published(cluster, A100).values()) == {"1g.5gb"}
    [scrape] = res.task("The DCGM exporter on this node lists a GPU temperature", A100)
    assert scrape["missing"] == [] and sorted(scrape["temperatures"]) == sorted(
        str(g["index"]) for g in cluster.gpus(A100))
    assert exporter.served and exporter.served[-1][0] == A100
    assert _released(cluster.api.get("", "nodes", A100))

    seen, events = len(cluster.api.requests), len(cluster.fake.events)
    again = cluster.site.run(args=("--limit", A100), **extra)
    assert again.rc == 0 and again.changed(A100) == 0, again
    assert cluster.writes(seen) == [] and cluster.fake.events[events:] == []
