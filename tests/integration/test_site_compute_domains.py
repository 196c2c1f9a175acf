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

    def __init__(self, tmp_path):
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
        inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {"rack_a": {"hosts": dict(
            (node, {"gpuops_simulated_machine": "gb200-nvl", "gpuops_simulated_rack": RACK,
                   # (the lab's group_vars find the repository from the inventory's directory: this one is elsewhere)
                   "gpuops_repo_dir": ROOT, "gpu_node_containerd_initial_config": os.path.join(
                       ROOT, "inventories", "lab-files", "containerd-config.toml")}) for node in TRAYS)}}}}}}))
        self.site = Site(tmp_path, limit=TRAYS, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpuops_device_plugin_provider="dra", cluster_dra_chart_path=chart, gpuops_dra_namespaces=["ml"],
                         cluster_dra_compute_domains=True, gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60)
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


@pytest.fixture
def rack(tmp_path, monkeypatch):
    r = Rack(tmp_path)
    original = r.site._call

    def call(check, diff, args, extra):      # (the rack's inventory beside the lab's: its group_vars apply)
        out = original(check, diff, args, extra)
        out["args"] = ("-i", r.site.inventory) + tuple(out["args"])
        return out
    monkeypatch.setattr(r.site, "_call", call)
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

    # converge: host IMEX stopped, disabled, masked; the record of what it was; the clique label as GFD computes it
    res = rack.site.run()
    assert res.rc == 0, res
    cliques = set()
    for node in TRAYS:
        assert rack.imex(node) == ("masked", "inactive")
        assert json.loads(rack.record(node).read_text()) == {"nvidia-imex.service": {"enabled": "enabled",
                                                                                       "active": True}}
        assert rack.label(node) == rack.expected_clique(node) is not None
        cliques.add(rack.label(node))
        plan = _plan(res, node)
        assert plan["host_imex"]["channels"]["major"] == 234 and plan["host_imex"]["problems"] == []
    assert len(cliques) == 1, "one rack, one clique"

    # a re-run changes nothing
    res = rack.site.run()
    assert res.rc == 0, res
    for node in TRAYS:
        assert res.changed(node) == 0, res
        assert _plan(res, node)["steps"]["host_imex"] == []

    # the declaration goes away: the host service is given back as it was (unmasked, enabled, running), once
    res = rack.site.run(cluster_dra_compute_domains=False)
    assert res.rc == 0, res
    for node in TRAYS:
        assert rack.imex(node) == ("enabled", "active") and not rack.record(node).exists()
    res = rack.site.run(cluster_dra_compute_domains=False)
    assert res.rc == 0, res
    for node in TRAYS:
        assert res.changed(node) == 0, res
        assert _plan(res, node)["steps"]["host_imex"] == []
