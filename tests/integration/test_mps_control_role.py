"""The mps_control role through ansible-playbook, against the nvidia-cuda-mps-control stand-in
(tests/support/bin), with defaults computed from GPU facts and a replica count."""
import json
import os
import subprocess
import sys

import pytest

from tests.support.ansible_run import with_compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKES = os.path.join(ROOT, "tests", "support", "bin")

PLAY = """
- hosts: localhost
  gather_facts: false
  vars:
    facts:
      gpus:
        - {index: 0, uuid: GPU-0a1b2c3d-1111-2222-3333-444455556666, name: NVIDIA H200,
           memory_total_bytes: 150754820096, memory_total_mib: 143771}
  roles:
    - role: gpuops.nvidia.mps_control
      vars:
        mps_control_service_manager: none
        mps_control_pipe_directory: "{{ tmp }}/pipe"
        mps_control_log_directory: "{{ tmp }}/log"
        mps_control_replicas: 4
        mps_control_gpu_facts: "{{ facts }}"
"""


def _play(tmp, extra=()):
    play = os.path.join(str(tmp), "play.yml")
    with open(play, "w") as f:
        f.write(PLAY)
    # with the tests' start-up hooks (tests/support/compile_cache), as the other tests' ansible runs have them
    env = with_compile_cache(dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                                  PATH=FAKES + os.pathsep + os.environ["PATH"]))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "tmp=%s" % tmp, play] + list(extra)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_role_computes_device_plugin_defaults_and_is_idempotent(tmp_path):
    r = _play(tmp_path, ["--check"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / "pipe").exists()
    r = _play(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "changed=1" in r.stdout
    state = json.loads((tmp_path / "pipe" / ".fake-mps-state.json").read_text())
    # H200, 4 replicas: 25 %, 150754820096 // 4 // MiB = 35942 MiB on index 0 (device plugin's numbers)
    assert state["pct"] == 25.0 and state["limits"] == {"0": 35942}
    r = _play(tmp_path)
    assert r.returncode == 0 and "changed=0" in r.stdout, r.stdout
    r = _play(tmp_path, ["-e", "mps_control_state=stopped"])
    assert r.returncode == 0 and "changed=1" in r.stdout, r.stdout
    assert json.loads((tmp_path / "pipe" / ".fake-mps-state.json").read_text())["running"] is False
