"""site.yml on Blackwell nodes through real ansible-playbook: the lab's HGX B200 (MIG all-balanced) and an RTX PRO
6000 Blackwell Server Edition node (8 GPUs, mig-parted's named layout all-1g.24gb.gfx), converged together from
scratch, then run again: the re-run changes nothing and makes no GPU call, and no GPU was ever reset (Blackwell
needs none). One converge and one re-run keep this module to about two site runs."""
import os

import pytest
import yaml

from tests.integration.site_helpers import BLACKWELL_NODE, Site
from tests.support.ansible_run import ROOT

pytestmark = pytest.mark.slow

RTX_NODE = "lab-rtx-pro-6000"


def rtx_inventory(tmp_path):
    """A second inventory source adding an RTX PRO 6000 node to the lab's mig_nodes (the lab's group_vars apply;
    the variables that the lab derives from inventory_dir are given here)."""
    path = tmp_path / "rtx-pro.yml"
    host = {"gpuops_simulated_machine": "rtx-pro-6000-x8", "gpuops_repo_dir": ROOT,
            "gpu_node_containerd_initial_config": os.path.join(ROOT, "inventories", "lab-files",
                                                               "containerd-config.toml"),
            "gpu_node_mig_config_name": "all-1g.24gb.gfx"}
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {
        "mig_nodes": {"hosts": {RTX_NODE: host}}}}}}}))
    return str(path)


def _calls(site, node):
    return [e for e in site.gpus(node)["call_log"] if "call" in e]


def test_converge_and_rerun_on_hgx_b200_and_rtx_pro_6000(tmp_path):
    nodes = (BLACKWELL_NODE, RTX_NODE)
    site = Site(tmp_path, limit=nodes, gpuops_serial="100%")
    args = ("-i", rtx_inventory(tmp_path))

    res = site.run(args=args)
    assert res.rc == 0, res
    plan = res.task("Show what MIG would change", BLACKWELL_NODE)[0]["msg"]
    assert plan[0] == "GPU0 B200: MIG Disabled -> Enabled (set_mig_mode); create 2g.45gb@0, 1g.23gb@2, 1g.23gb@3, " \
                      "3g.90gb@4", plan
    for gpu in site.gpus(BLACKWELL_NODE)["gpus"]:
        assert gpu["mig_current"] is True, gpu
        assert sorted(gi["start"] for gi in gpu["gpu_instances"]) == [0, 2, 3, 4], gpu
        assert [len(gi["compute_instances"]) for gi in gpu["gpu_instances"]] == [1, 1, 1, 1], gpu
    for gpu in site.gpus(RTX_NODE)["gpus"]:
        assert gpu["mig_current"] is True, gpu
        # four 1g.24gb+gfx GPU instances (profile id 47 in the published listing), one per memory slice
        assert sorted((gi["profile_id"], gi["start"]) for gi in gpu["gpu_instances"]) == [(47, s) for s in range(4)]
    calls = dict((n, _calls(site, n)) for n in nodes)
    for node in nodes:
        assert calls[node] and not [c for c in calls[node] if c["call"] == "reset_gpu" or c.get("error")], node
        assert "etc/systemd/system/gpuops-mig.service" in site.files(node)

    before = dict((n, site.files(n)) for n in nodes)
    boots = dict((n, site.gpus(n)["boot_id"]) for n in nodes)
    again = site.run(args=args)
    assert again.rc == 0, again
    for node in nodes:
        assert again.changed(node) == 0, again
        assert _calls(site, node) == calls[node], node          # no new mutating call
        assert site.files(node) == before[node], node
        assert site.gpus(node)["boot_id"] == boots[node], node
