"""gpu_node installs nvidia-ml-py for the modules' Python on real nodes, plans it in check mode, and skips it
on simulated nodes. Runs the role's nvml.yml against this machine's .venv (which already has the pinned
release), so nothing is downloaded."""
import subprocess
import sys

from tests.support.ansible_run import run_playbook


def _installed():
    out = subprocess.run([sys.executable, "-m", "pip", "show", "nvidia-ml-py"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=False).stdout
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Version:")]


def _play(tmp_path, extra):
    playbook = tmp_path / "nvml.yml"
    playbook.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuops.nvidia.gpu_node
        tasks_from: nvml.yml
""")
    return run_playbook(str(playbook), extra_vars=dict({"ansible_python_interpreter": sys.executable}, **extra),
                        check=extra.pop("_check", False))


def _task(data):
    return data["plays"][0]["tasks"][-1]["hosts"]["localhost"]


def test_installed_release_is_left_alone(tmp_path):
    data, proc = _play(tmp_path, {"gpu_node_nvml_package": "nvidia-ml-py==" + _installed()[0]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _task(data)["changed"] is False


def test_check_mode_plans_another_release_and_installs_nothing(tmp_path):
    before = _installed()
    data, proc = _play(tmp_path, {"gpu_node_nvml_package": "nvidia-ml-py==13.610.43", "_check": True})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _task(data)["changed"] is True
    assert _installed() == before


def test_simulated_nodes_skip_it(tmp_path):
    data, proc = _play(tmp_path, {"gpu_node_nvml_package": "nvidia-ml-py==13.610.43",
                                  "gpuops_environment": {"GPUOPS_SIMULATED_GPUS": str(tmp_path / "s.json")}})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _task(data)["skip_reason"] == "Conditional result was False"
