"""site.yml with NVIDIA's DRA driver and ComputeDomains on (``cluster_dra_compute_domains``; docs/dra.md, issue 52) on
two compute trays of a simulated GB200 NVL72 rack (shape ``gb200-nvl``, both in rack ``rack-a``: one NVLink cluster
and clique), on the fake Kubernetes 1.34 cluster with the stand-in of NVIDIA's chart and its fake kubelet plugin (as
tests/integration/test_site_dra.py). Two trays, not eighteen: what is asserted here is per node; the rack's GPU count
is the rack check's (tests/unit/plugins/module_utils/test_nvlink_rack.py).

Each tray has the host's own IMEX service installed, enabled and running (NVIDIA's nvidia-imex package: its unit runs
/usr/bin/nvidia-imex, a stand-in script here), as a GB200 host image ships it. The systemctl stand-in
(tests/support/systemctl_standin.py) keeps the units' state, with systemd's mask.
"""
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._nvlink_rack import clique_label
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.integration.site_helpers import HELM, Site
from tests.support.ansible_run import ROOT
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

TRAYS = ("lab-gb200-tray1", "lab-gb200-tray2")
RACK = "rack-a"
DRA_CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
SYSTEMCTL = os.path.join(ROOT, "tests", "support", "bin", "systemctl")
CLIQUE = "nvidia.com/gpu.clique"
# the ComputeDomain the rack's workloads join (docs/dra.md "ComputeDomain objects")
COMPUTE_DOMAIN = {"name": "rack-a-train", "namespace": "ml", "num_nodes": 0}
IMEX_UNIT = """[Unit]
Description=NVIDIA IMEX service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg

[Install]
WantedBy=multi-user.target
"""


class Rack(object):
    """Two GB200 trays of one rack on the fake cluster, all under ``tmp_path``."""

    def __init__(self, tmp_path, tray_vars=None):
        tmp_path = pathlib.Path(str(tmp_path))
        self.api = FakeKubeApi(tokens=None, server_version="v1.34.1").start()
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        for i, node in enumerate(TRAYS):
            self.api.add_node(node, internal_ip="10.0.1.%d" % (11 + i), labels={"nvidia.com/gpu.present": "true"})
        self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        chart = str(tmp_path / "dra-chart")
        shutil.copytree(DRA_CHART, chart)
        inventory = tmp_path / "rack.yml"
        hosts = dict((node, dict({"gpuops_simulated_machine": "gb200-nvl", "gpuops_simulated_rack": RACK,
                                  # (the lab's group_vars find the repository from the inventory's directory)
                                  "gpuops_repo_dir": ROOT, "gpu_node_containerd_initial_config": os.path.join(
                                      ROOT, "inventories", "lab-files", "containerd-config.toml")},
                                 **(tray_vars or {}).get(node, {}))) for node in TRAYS)
        # the rack as the inventory declares it: its group sets the rack's name and GPU count (two trays here)
        inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {"rack_a": {
            "hosts": hosts, "vars": {"gpu_node_nvl_rack": RACK, "gpu_node_nvl_rack_gpus": 8}}}}}}}))
        self.site = Site(tmp_path, limit=TRAYS, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpuops_device_plugin_provider="dra", cluster_dra_chart_path=chart, gpuops_dra_namespaces=["ml"],
                         cluster_dra_compute_domains=True, cluster_dra_compute_domain_objects=[COMPUTE_DOMAIN],
                         gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60)
        self.site.inventory = str(inventory)
        self.site.state.mkdir(parents=True)
        for node in TRAYS:
            # the tray as its image brings it: GPUs of rack-a, the driver loaded, NVIDIA's IMEX service running
            SimulatedBackend(self.state_file(node), shape="gb200-nvl", root=str(self.root(node)), rack=RACK).read_all()
            self._install_imex(node)
        self.fake = FakeDaemonSets(self.api, dict((n, (self.state_file(n), "gb200-nvl")) for n in TRAYS))
        self.fake.start()

    def root(self, node):
        return self.site.state / node

    def state_file(self, node):
        return str(self.site.state / ("%s.json" % node))

    def _install_imex(self, node):
        root = self.root(node)
        (root / "lib" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
        (root / "lib" / "systemd" / "system" / "nvidia-imex.service").write_text(IMEX_UNIT)
        (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        (root / "usr" / "bin" / "nvidia-imex").write_text("#!/bin/sh\nexit 0\n")
        os.chmod(str(root / "usr" / "bin" / "nvidia-imex"), 0o755)
        for verb in ("enable", "start"):
            self.systemctl(node, verb, "nvidia-imex.service")

    def systemctl(self, node, *args):
        env = dict(os.environ, GPUOPS_SIMULATED_ROOT=str(self.root(node)), GPUOPS_SIMULATED_GPUS=self.state_file(node))
        for var in ("FAKE_SYSTEMD_STATE", "FAKE_SYSTEMD_UNIT_DIR"):
            env.pop(var, None)
        return subprocess.run([SYSTEMCTL] + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)

    def imex(self, node):
        """The host IMEX unit as the stand-in keeps it: (is-enabled's word, is-active's word)."""
        return (self.systemctl(node, "is-enabled", "nvidia-imex.service").stdout.strip(),
                self.systemctl(node, "is-active", "nvidia-imex.service").stdout.strip())

    def record(self, node):
        return self.root(node) / "var" / "lib" / "gpuops" / "host-imex.json"

    def label(self, node):
        return (self.api.get("", "nodes", node)["metadata"].get("labels") or {}).get(CLIQUE)

    def expected_clique(self, node):
        """The clique label computed from the tray's simulated GPUs, read independently of the node plan."""
        gpus = SimulatedBackend(self.state_file(node), root=str(self.root(node))).read_all()["gpus"]
        return clique_label(gpus)["value"]

    def stop(self):
        self.fake.stop()
        self.api.stop()


def _rack(tmp_path, monkeypatch, tray_vars=None):
    r = Rack(tmp_path, tray_vars)
    original = r.site._call

    def call(check, diff, args, extra):      # (the rack's inventory beside the lab's: its group_vars apply)
        out = original(check, diff, args, extra)
        out["args"] = ("-i", r.site.inventory) + tuple(out["args"])
        return out
    monkeypatch.setattr(r.site, "_call", call)
    return r


@pytest.fixture
def rack(tmp_path, monkeypatch):
    r = _rack(tmp_path, monkeypatch)
    try:
        yield r
    finally:
        r.stop()


def _plan(res, node):
    return res.task("Read the GPUs and plan every step", node)[0]


def test_a_fresh_rack_converges_to_compute_domain_ready_and_removing_the_declaration_unmasks(rack):
    assert [rack.imex(n) for n in TRAYS] == [("enabled", "active")] * 2
    # check mode: the plan names the host IMEX service on each tray, nothing changes
    res = rack.site.run(check=True, diff=True)
    assert res.rc == 0, res
    for node in TRAYS:
        plan = _plan(res, node)
        assert any("nvidia-imex.service is enabled, running" in r for r in plan["steps"]["host_imex"]), plan["steps"]
        assert plan["host_imex"]["clique"] == rack.expected_clique(node) and plan["host_imex"]["problems"] == []
        assert rack.imex(node) == ("enabled", "active") and not rack.record(node).exists()
        assert rack.label(node) is None
    assert rack.api.get("resource.nvidia.com", "computedomains", "rack-a-train", namespace="ml") is None

    # converge: host IMEX stopped, disabled, masked; the record of what it was; the rack checked and ready, and its
    # trays labelled with the clique as GFD computes it
    res = rack.site.run()
    assert res.rc == 0, res
    cliques = set()
    for node in TRAYS:
        assert rack.imex(node) == ("masked", "inactive")
        recorded = json.loads(rack.record(node).read_text())
        assert recorded == {"nvidia-imex.service": {"enabled": "enabled", "active": True}}
        assert rack.expected_clique(node) is not None and rack.label(node) == rack.expected_clique(node)
        cliques.add(rack.label(node))
        plan = _plan(res, node)
        assert plan["host_imex"]["channels"]["major"] == 234 and plan["host_imex"]["problems"] == []
    assert len(cliques) == 1, "one rack, one clique"
    # the declared ComputeDomain, as NVIDIA's CRD keeps it (the fake serves it from the chart's schema)
    domain = rack.api.get("resource.nvidia.com", "computedomains", "rack-a-train", namespace="ml")
    assert domain["spec"] == {"numNodes": 0, "channel": {"allocationMode": "Single",
                                                         "resourceClaimTemplate": {"name": "rack-a-train-channel"}}}

    # a re-run changes nothing
    res = rack.site.run()
    assert res.rc == 0, res
    for node in TRAYS:
        assert res.changed(node) == 0, res
        assert _plan(res, node)["steps"]["host_imex"] == []

    # the declaration goes away: the host service is given back as it was (unmasked, enabled, running), once
    res = rack.site.run(cluster_dra_compute_domains=False, cluster_dra_compute_domain_objects=[])
    assert res.rc == 0, res
    for node in TRAYS:
        assert rack.imex(node) == ("enabled", "active") and not rack.record(node).exists()
    res = rack.site.run(cluster_dra_compute_domains=False, cluster_dra_compute_domain_objects=[])
    assert res.rc == 0, res
    for node in TRAYS:
        assert res.changed(node) == 0, res
        assert _plan(res, node)["steps"]["host_imex"] == []


def _inject_in_progress(r):
    SimulatedBackend(r.state_file(TRAYS[1]), root=str(r.root(TRAYS[1]))).inject_health(1, "fabric_state", "in_progress")


def _inject_other_clique(r):
    # every GPU of the second tray in clique 32767 (the rack's is 32766: a tie of four GPUs each goes to the smaller)
    backend = SimulatedBackend(r.state_file(TRAYS[1]), root=str(r.root(TRAYS[1])))
    for index in range(4):
        backend.inject_health(index, "fabric_clique_id", 32767)


@pytest.mark.parametrize("fault, tray_vars, words", [
    (_inject_other_clique, None, ["GPUs 0, 1, 2, 3: in clique 32767, the rack's is 32766", "NVLink partition"]),
    # (the health gate blocks such a node by default, and the run stops at it: here the group lets the tray serve
    # single-node work, gpu_node_health_policy warns, and the rack check keeps ComputeDomains off for the rack)
    (_inject_in_progress, {TRAYS[1]: {"gpu_node_health_policy": {"fabric_incomplete": "warn"}}},
     ["GPU 1: fabric state in_progress, not completed", "reset the GPU"]),
    # the tray's own declaration leaves ComputeDomains off: its host IMEX keeps running
    (None, {TRAYS[1]: {"gpu_node_dra_compute_domains": False}},
     ["the host's IMEX service is not masked: nvidia-imex.service (enabled, running)",
      "set gpu_node_dra_compute_domains: true for the node"]),
], ids=["another-clique", "fabric-in-progress", "host-imex-running"])
def test_a_rack_that_disagrees_keeps_compute_domains_off_naming_the_node(tmp_path, monkeypatch, fault, tray_vars,
                                                                         words):
    r = _rack(tmp_path, monkeypatch, tray_vars)
    try:
        if fault is not None:
            fault(r)
        res = r.site.run()
        assert res.rc != 0
        failed = [f for f in res.failures() if "rack is not ready" in f[1]]
        assert len(failed) == 1, res.failures()
        message = failed[0][2]
        assert "ComputeDomains stay off for rack(s) %s" % RACK in message
        for text in words:
            assert "node %s: " % TRAYS[1] in message and text in message, message
        assert "node %s: " % TRAYS[0] not in message, message
        # off: neither tray carries the clique label (no ComputeDomain daemon or workload is placed on the rack)
        assert [r.label(n) for n in TRAYS] == [None, None]
    finally:
        r.stop()
