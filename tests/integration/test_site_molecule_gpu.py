"""The molecule gpu scenario (extensions/molecule/gpu), the one users point at real GPU hosts, run here against an
inventory of SIMULATED GPU hosts that this test writes (the lab's settings: files under tmp_path, the real containerd
binary, the nvidia-ctk stand-in): a verify step that cannot pass on a host that is as declared fails here, in
`make test`. One host declares MIG and a managed containerd, the other MIG off, a compute mode other than Default and
containerd unmanaged (verify must not look for containerd there). Then verify alone must FAIL once the simulated GPUs
differ from the declaration, naming what differs."""
import json
import os
import re
import subprocess

import pytest
import yaml

from tests.support.ansible_run import ROOT, molecule_env

MOLECULE = os.path.join(ROOT, ".venv", "bin", "molecule")
LAB_VARS = os.path.join(ROOT, "inventories", "lab", "group_vars", "gpu_nodes.yml")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(MOLECULE), reason="molecule not installed: run make setup")]


def write_inventory(base):
    """The lab's group variables with the repository and the state directory named, and two simulated hosts."""
    state = base / "state"
    with open(LAB_VARS) as handle:
        text = handle.read()
    text = text.replace("{{ (inventory_dir ~ '/../..') | ansible.builtin.realpath }}", ROOT)
    text = text.replace("{{ inventory_dir }}/../lab-files", os.path.join(ROOT, "inventories", "lab-files"))
    text = text.replace('gpuops_lab_state_dir: "{{ gpuops_repo_dir }}/lab-state"', 'gpuops_lab_state_dir: "%s"' % state)
    assert "inventory_dir" not in text and str(state) in text, "the lab's group_vars changed shape: update this test"
    inventory = base / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "group_vars" / "gpu_nodes.yml").write_text(text)
    hosts = {
        # MIG all-balanced on two H200, containerd's runtime managed (verify runs `containerd config dump`)
        "sim-mig": {"gpuops_simulated_machine": "h200-x2", "gpu_node_sharing": "mig",
                    "gpu_node_mig_config_name": "all-balanced"},
        # MIG off, Exclusive_Process, containerd NOT managed: its config is never written, and verify leaves it alone
        "sim-plain": {"gpuops_simulated_machine": "h200-x1", "gpu_node_compute_mode": "Exclusive_Process",
                      "gpu_node_manage_containerd": False},
    }
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return inventory, state


def molecule(tmp_path, inventory, *args):
    env = molecule_env(tmp_path, GPUOPS_MOLECULE_INVENTORY=str(inventory))
    proc = subprocess.run([MOLECULE] + list(args), cwd=os.path.join(ROOT, "extensions"), env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_gpu_scenario_passes_on_hosts_as_declared_and_verify_fails_when_they_differ(tmp_path):
    inventory, state = write_inventory(tmp_path)
    rc, out = molecule(tmp_path, inventory, "test", "-s", "gpu")
    assert rc == 0, out[-6000:]
    # syntax, converge, idempotence and verify ran and succeeded
    assert re.search(r"gpu\s*: actions=4\s+successful=4\s+disabled=0\s+skipped=0\s+missing=0\s+failed=0", out), \
        out[-3000:]
    assert re.search(r"sim-plain\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", out), out[-3000:]
    # containerd was checked where it is managed, and only there
    assert not (state / "sim-plain" / "etc" / "containerd").exists()
    assert (state / "sim-mig" / "etc" / "containerd" / "config.toml").exists()

    # The GPUs now differ from the declaration: one MIG device fewer on sim-mig's GPU 1, and sim-plain's GPU back in
    # Default. verify alone must fail on both hosts, saying what differs.
    with open(state / "sim-mig.json") as handle:
        mig = json.load(handle)
    gpu1 = [g for g in mig["gpus"] if g["index"] == 1][0]
    assert len(gpu1["gpu_instances"]) == 4, gpu1
    gpu1["gpu_instances"].pop()
    with open(state / "sim-mig.json", "w") as handle:
        json.dump(mig, handle)
    with open(state / "sim-plain.json") as handle:
        plain = json.load(handle)
    assert plain["gpus"][0]["compute_mode"] == "Exclusive_Process", plain["gpus"][0]
    plain["gpus"][0]["compute_mode"] = "Default"
    with open(state / "sim-plain.json", "w") as handle:
        json.dump(plain, handle)
    calls = (mig["mutating_calls"], plain["mutating_calls"])

    rc, out = molecule(tmp_path, inventory, "verify", "-s", "gpu")
    assert rc != 0, out[-4000:]
    assert "MIG differs from the declaration" in out and "MIG layout changes on GPU(s) 1" in out, out[-4000:]
    assert "Compute mode differs from the declaration (Exclusive_Process)" in out, out[-4000:]
    assert "GPU 0: compute mode Default -> Exclusive_Process" in out, out[-4000:]
    # verify changed nothing: no mutating call reached the simulated GPUs
    with open(state / "sim-mig.json") as handle:
        after_mig = json.load(handle)
    with open(state / "sim-plain.json") as handle:
        after_plain = json.load(handle)
    assert (after_mig["mutating_calls"], after_plain["mutating_calls"]) == calls
    assert len(after_mig["gpus"][1]["gpu_instances"]) == 3
