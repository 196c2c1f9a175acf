"""CDI through site.yml on the lab's A100 (gpu_node_cdi: true, gpu_node_runtime_mode: cdi; the nvidia-ctk stand-in
generates the spec for the simulated GPUs): the converge writes a spec that lists exactly the GPUs' MIG devices and
sets the runtime's mode; a layout change regenerates it with exactly the new MIG devices; a re-run changes nothing
and runs no CDI step; a hand-edited spec is found by the node plan and restored; after a reboot the MIG boot unit
writes the spec again; contradictory declarations are refused before anything changes."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.integration.site_helpers import Site
from tests.support.ansible_run import ROOT, ansible_env

pytestmark = pytest.mark.slow

NODE = "lab-dgx-a100"
CTK = os.path.join(ROOT, "tests", "support", "bin", "nvidia-ctk")


def _spec_dir(site):
    return site.state / NODE / "var" / "run" / "cdi"


def _listed(site):
    proc = subprocess.run([CTK, "cdi", "list", "--spec-dir=%s" % (site.state / NODE / "etc" / "cdi"),
                           "--spec-dir=%s" % _spec_dir(site)], capture_output=True, text=True,
                          env=ansible_env({}), check=True)
    assert "level=warning" not in proc.stderr, proc.stderr
    return set(line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("nvidia.com/gpu="))


def _migs(site):
    facts = SimulatedBackend(str(site.state / ("%s.json" % NODE))).read_all()      # gpu_info's facts
    return [(g["index"], m["uuid"]) for g in facts["gpus"] for m in g["mig_devices"]]


def _expected(site):
    migs = _migs(site)
    names = {uuid for _i, uuid in migs} | {"all"}
    for index in sorted({i for i, _u in migs}):
        names |= {"%d:%d" % (index, j) for j in range(sum(1 for i, _u in migs if i == index))}
    return names


def _cdi_tasks(res):
    return [t for t in res.task("Keep the node's CDI spec true", NODE) if not t.get("skipped")]


def test_converge_change_layout_rerun_and_restore_a_hand_edited_spec(tmp_path):
    site = Site(tmp_path, limit=(NODE,))
    res = site.run()
    assert res.rc == 0, res
    assert _listed(site) == _expected(site) and len(_migs(site)) == 32       # all-balanced: 4 MIG devices per GPU
    assert 'mode = "cdi"' in site.files(NODE)["etc/nvidia-container-runtime/config.toml"].decode()
    drop_in = site.files(NODE)["etc/containerd/conf.d/99-nvidia.toml"].decode()
    assert "enable_cdi = true" in drop_in                                      # follows gpu_node_cdi

    # A new layout: the spec lists exactly the new MIG devices, the old ones are gone.
    old = {uuid for _i, uuid in _migs(site)}
    res = site.run(gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0, res
    assert len(_cdi_tasks(res)) == 1 and _cdi_tasks(res)[0]["changed"] is True
    new = {uuid for _i, uuid in _migs(site)}
    assert _listed(site) == _expected(site) and len(new) == 56
    assert old - new and not (old - new) & _listed(site)       # devices of the old layout only: gone from the spec

    # Re-run: nothing changes, and the node plan finds no CDI or runtime-mode work (no nvidia-ctk run at all).
    before = site.files(NODE)
    res = site.run(gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0 and res.changed(NODE) == 0, res
    plan = res.task("Read the GPUs and plan every step", NODE)[0]
    assert plan["steps"]["cdi"] == [] and plan["steps"]["runtime_mode"] == [], plan["steps"]
    assert _cdi_tasks(res) == [] and site.files(NODE) == before

    # A spec edited by hand is seen by the node plan and restored.
    spec = _spec_dir(site) / "nvidia.yaml"
    good = spec.read_text()
    spec.write_text(good.replace('name: "0:0"', 'name: "9:9"'))
    res = site.run(gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0 and res.changed(NODE) == 1, res
    plan = res.task("Read the GPUs and plan every step", NODE)[0]
    assert plan["steps"]["cdi"] == ["the CDI spec %s is not the one verified (changed or removed since)" % spec]
    assert spec.read_text() == good

    # A reboot: the MIG instances are gone (and /var/run is empty) until the boot unit re-creates them; it then writes
    # the spec again, before containerd starts, and the next run finds nothing to do.
    sim = SimulatedBackend(str(site.state / ("%s.json" % NODE)))
    sim.reboot()
    for name in os.listdir(str(_spec_dir(site))):
        os.unlink(str(_spec_dir(site) / name))
    lib = site.state / NODE / "usr" / "local" / "lib" / "gpuops"
    boot = subprocess.run([sys.executable, str(lib / "gpuops-mig-apply.py"), "--config",
                           str(site.state / NODE / "etc" / "gpuops" / "mig.json")],
                          env=ansible_env({"GPUOPS_SIMULATED_GPUS": str(site.state / ("%s.json" % NODE))}),
                          capture_output=True, text=True, check=False)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert json.loads(boot.stdout)["cdi"]["action"] == "create"
    assert _listed(site) == _expected(site) and len(_migs(site)) == 56
    res = site.run(gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0, res
    steps = res.task("Read the GPUs and plan every step", NODE)[0]["steps"]
    # (the compute mode's own boot unit, not run here, would have put persistence mode back: that step has work)
    assert steps["cdi"] == [] and steps["mig"] == [] and _cdi_tasks(res) == [], steps


@pytest.mark.parametrize("extra, words", [
    ({"gpu_node_cdi": False, "gpu_node_device_list_strategy": "cdi-cri"}, "gpu_node_device_list_strategy=cdi-cri"),
    ({"gpu_node_runtime_mode": "legacy", "gpu_node_device_list_strategy": "cdi-cri"}, "gpu_node_runtime_mode=legacy"),
])
def test_contradictory_declarations_are_refused_with_nothing_changed(tmp_path, extra, words):
    site = Site(tmp_path, limit=(NODE,))
    res = site.run(**extra)
    assert res.rc != 0
    messages = [msg for _host, _task, msg in res.failures()]
    assert any(words in msg and "nothing changed" in msg for msg in messages), res
    assert not site.state.exists() or not any(site.state.iterdir()), list(site.state.iterdir())
