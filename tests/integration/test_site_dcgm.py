"""site.yml with DCGM declared (gpu_node_dcgm: present; issue 50 item 4) on ONE small lab node without a cluster: the
node's scratch root is an apt/dpkg root (APT_CONFIG, DPKG_ROOT) and DCGM's packages come as package files (the
air-gapped source) shaped like DCGM 4's (tests/support/dcgm_rig.py, NOT NVIDIA's), installed with Debian's real
apt-get and dpkg; the systemctl stand-in runs their unit. Check mode reports the install and changes nothing; the
converge installs DCGM at the pin and starts its host engine; a re-run changes nothing and does not run the step."""
import json
import os

import pytest
import yaml

from tests.integration.site_helpers import Site
from tests.support import apt_rig, dcgm_rig, driver_rig
from tests.support.ansible_run import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

NODE = "dcgm-node"
TASK = "Install NVIDIA DCGM at its pinned version and keep its host engine running"


def test_dcgm_check_then_converge_then_a_quiet_rerun(tmp_path):
    before = apt_rig.host_installed()
    debs = dcgm_rig.build(tmp_path / "debs", dcgm_rig.NEW)
    files = dcgm_rig.place(debs, tmp_path / "controller-files")
    state = tmp_path / "lab-state"
    root = apt_rig.Root(state / NODE)
    host = {"gpuops_simulated_machine": "h200-x1", "gpuops_repo_dir": ROOT,
            "gpu_node_containerd_initial_config": os.path.join(ROOT, "inventories", "lab-files",
                                                               "containerd-config.toml"),
            "gpuops_environment": dict(root.env, **driver_rig.lab_group_environment()),
            "gpu_node_dcgm": "present", "gpu_node_dcgm_version": dcgm_rig.NEW, "gpu_node_dcgm_package_manager": "apt",
            "gpu_node_dcgm_package_files": files,
            "gpu_node_dcgm_package_dir": "{{ gpuops_lab_root }}/var/cache/gpuops/dcgm"}
    inventory = tmp_path / "dcgm-node.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {
        "mps_nodes": {"hosts": {NODE: host}}}}}}}))
    site = Site(tmp_path, limit=(NODE,))
    args = ("-i", str(inventory))

    check = site.run(check=True, args=args)
    assert check.rc == 0, check
    (planned,) = [r for r in check.task(TASK, NODE) if not r.get("skipped")]
    assert planned["changed"] is True and [p["action"] for p in planned["packages"]] == ["install", "install"]
    assert driver_rig.installed(root, dcgm_rig.NAMES) == {} and dcgm_rig.engine_running(root.path) is None

    first = site.run(args=args)
    assert first.rc == 0, first
    assert [r.get("changed") for r in first.task(TASK, NODE)] == [True], first.task(TASK, NODE)
    assert dict((n, v) for n, (v, s) in driver_rig.installed(root, dcgm_rig.NAMES).items()) == dict(
        (n, dcgm_rig.NEW) for n in dcgm_rig.NAMES)
    with open(os.path.join(root.path, ".standin-systemd.json")) as handle:
        unit = json.load(handle)["units"][dcgm_rig.UNIT]
    assert unit["enabled"] and unit["active"]
    assert dcgm_rig.engine_running(root.path) == "version=4.5.2 port=5555"

    again = site.run(args=args)
    assert again.rc == 0 and again.changed(NODE) == 0, again
    assert again.task(TASK, NODE) == []
    plans = again.task("Read the GPUs and plan every step", NODE)
    assert plans[0]["steps"]["dcgm"] == [] and plans[0]["gates"]["dcgm"] is False
    assert apt_rig.host_installed() == before, "this machine's own package set changed"
