"""Playbook-level: node_labels, runtime_class and device_plugin in one play, through ansible-playbook, against the
fake API server (real HTTP) with the real helm binary: --check --diff first, then apply, then a second run that
changes nothing. The action group gpuops.nvidia.k8s carries the kubeconfig for all three modules."""
import json
import os
import shutil
import subprocess

import pytest
import yaml

from tests.support.ansible_run import with_compile_cache
from tests.support.fake_kube_api import FakeKubeApi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

PLAY = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/gpuops.nvidia.k8s:
      kubeconfig: "{{ kubeconfig }}"
  vars:
    gpus:
      - {index: 0, uuid: GPU-0, name: NVIDIA H200, compute_capability: "9.0", memory_total_mib: 143771,
         mig_mode_current: Disabled}
      - {index: 1, uuid: GPU-1, name: NVIDIA H200, compute_capability: "9.0", memory_total_mib: 143771,
         mig_mode_current: Disabled}
  tasks:
    - name: Device plugin with three profiles
      gpuops.nvidia.device_plugin:
        binary_path: "{{ helm }}"
        chart_path: "{{ chart }}"
        default_profile: default
        profiles:
          - {name: default}
          - {name: ts-4, sharing: time-slicing, replicas: 4}
          - {name: mps-4, sharing: mps, replicas: 4, rename_by_default: true}
        nodes:
          - {name: gpu-node-1, profile: mps-4, gpus: "{{ gpus }}"}
        values:
          runtimeClassName: nvidia
      register: dp

    - name: Label the node with the profile the module chose
      gpuops.nvidia.node_labels:
        node_name: gpu-node-1
        hostname: []
        internal_ips: []
        device_plugin_config: "{{ dp.node_labels['gpu-node-1'] }}"
        gpu_present: auto
        mig_owner: collection

    - name: RuntimeClass nvidia
      gpuops.nvidia.runtime_class:
        containerd_default_runtime: runc

    - name: Show what each replica gets
      ansible.builtin.debug:
        msg: "{{ dp.shares['gpu-node-1'].active_thread_percentage }}% SMs, {{ dp.shares['gpu-node-1'].memory_per_replica_mib_min }} MiB"
"""


@pytest.fixture
def env(tmp_path):
    api = FakeKubeApi(tokens=None).start()
    api.add_node("gpu-node-1", internal_ip="10.0.0.11")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
    chart = tmp_path / "chart"
    shutil.copytree(CHART, str(chart))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    # with the tests' start-up hooks (tests/support/compile_cache), as the other tests' ansible runs have them
    environ = with_compile_cache(dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), HOME=str(tmp_path),
                                      ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_NOCOLOR="1"))
    for var in list(environ):
        if var.startswith("K8S_AUTH_") or var == "KUBECONFIG":
            environ.pop(var)
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
           "-e", "ansible_python_interpreter=%s" % os.path.join(ROOT, ".venv", "bin", "python"),
           "-e", json.dumps({"kubeconfig": str(kubeconfig), "helm": HELM, "chart": str(chart)})]

    def run(*extra):
        proc = subprocess.run(cmd + list(extra), cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300, check=False)
        return proc.returncode, proc.stdout + proc.stderr

    try:
        yield api, run
    finally:
        api.stop()


def _recap(out):
    line = [l for l in out.splitlines() if l.startswith("localhost")][-1]
    return dict(part.split("=") for part in line.split()[2:])


def test_check_then_apply_then_nothing_to_do(env):
    api, run = env
    rc, out = run("--check", "--diff")
    assert rc == 0, out
    assert _recap(out)["changed"] == "3", out
    assert "nvidia.com/device-plugin.config" in out and "mps-4" in out
    assert api.writes(dry_run=False) == []          # check mode wrote nothing (dry runs only)
    rc, out = run()
    assert rc == 0, out
    assert _recap(out)["changed"] == "3", out
    labels = api.node_labels("gpu-node-1")
    assert labels["nvidia.com/device-plugin.config"] == "mps-4"
    assert labels["nvidia.com/gpu.present"] == "true" and labels["nvidia.com/gpu.deploy.mig-manager"] == "false"
    assert api.get("node.k8s.io", "runtimeclasses", "nvidia")["handler"] == "nvidia"
    assert api.get("", "configmaps", "nvdp-nvidia-device-plugin-configs", "nvidia-device-plugin")
    assert "25% SMs, 35942 MiB" in out
    rc, out = run()
    assert rc == 0 and _recap(out)["changed"] == "0", out
