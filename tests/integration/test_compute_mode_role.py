"""The compute_mode role through ansible-playbook on simulated GPUs: modes set, later settings win, the
boot-time re-apply unit lists every GPU by UUID, check mode writes nothing, a second run changes nothing."""
import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import run_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: gpuops.nvidia.compute_mode
      vars:
        compute_mode_settings:
          - {gpus: [all], mode: Default}
          - {gpus: ["NVIDIA H100 80GB HBM3"], mode: Exclusive_Process}
          - {gpus: ["4"], mode: prohibited}
        compute_mode_unit_directory: "{{ unit_dir }}"
        compute_mode_manage_systemd: false
"""


@pytest.mark.slow
def test_role_sets_modes_and_installs_the_boot_unit(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    state = str(tmp_path / "state.json")
    env = {"GPUOPS_SIMULATED_GPUS": state, "GPUOPS_SIMULATED_MACHINE": "mixed"}
    extra = {"unit_dir": str(tmp_path), "ansible_python_interpreter": __import__("sys").executable}
    unit = tmp_path / "gpuops-compute-mode.service"

    _data, proc = run_playbook(str(play), inventory="localhost,", extra_vars=extra, env=env, check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not unit.exists()
    assert [c for c in json.load(open(state))["call_log"] if "call" in c] == []

    _data, proc = run_playbook(str(play), inventory="localhost,", extra_vars=extra, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sim = SimulatedBackend(state)
    gpus = sim.read_all()["gpus"]
    assert [g["compute_mode"] for g in gpus] == ["Default", "Default", "Exclusive_Process", "Exclusive_Process",
                                                 "Prohibited"]
    text = unit.read_text()
    for g in gpus:
        assert "ExecStart=/usr/bin/nvidia-smi -i %s -pm 1" % g["uuid"] in text
    assert "ExecStart=/usr/bin/nvidia-smi -i %s -c EXCLUSIVE_PROCESS" % gpus[2]["uuid"] in text
    assert "ExecStart=/usr/bin/nvidia-smi -i %s -c PROHIBITED" % gpus[4]["uuid"] in text
    assert "ExecStart=/usr/bin/nvidia-smi -i %s -c DEFAULT" % gpus[0]["uuid"] in text
    assert "Type=oneshot" in text

    calls = len(json.load(open(state))["call_log"])
    mtime = os.stat(str(unit)).st_mtime
    data, proc = run_playbook(str(play), inventory="localhost,", extra_vars=extra, env=env)
    assert proc.returncode == 0
    assert data["stats"]["localhost"]["changed"] == 0, proc.stdout
    assert len(json.load(open(state))["call_log"]) == calls and os.stat(str(unit)).st_mtime == mtime
