"""The Jinja filters: the same rules as _sharing, reached from templates, errors as AnsibleFilterError."""
import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.sharing import FilterModule

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
U0 = "GPU-0a1b2c3d-1111-2222-3333-444455556666"
FACTS = {"gpus": [{"index": 0, "uuid": U0, "name": "NVIDIA H200", "memory_total_bytes": 150754820096,
                   "memory_total_mib": 143771}]}
F = FilterModule().filters()


def test_filters_are_registered():
    assert set(F) == {"mps_shares", "mps_daemon_defaults", "mps_limits"}


def test_shares_accept_facts_or_list():
    assert F["mps_shares"](FACTS, 4)["gpus"][0]["memory_per_replica_mib"] == 35942
    assert F["mps_shares"](FACTS["gpus"], 4)["active_thread_percentage"] == 25


def test_limits_render_env():
    out = F["mps_limits"]({"active_thread_percentage": 25, "pinned_device_mem_limit": {0: "8G"}},
                          gpus=FACTS, replicas=4, warn=False)
    assert out["env"][1] == {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=8G"}


@pytest.mark.parametrize("call,fragment", [
    (lambda: F["mps_limits"]({"pinned_device_mem_limit": "0=8G, 1=8G"}), "contains spaces"),
    (lambda: F["mps_limits"]({"threads": 5}), "unknown key(s) threads"),
    (lambda: F["mps_limits"]("0=8G"), "input must be a mapping"),
    (lambda: F["mps_limits"]({"active_thread_percentage": 5}, replicas=4), "replicas needs gpus"),
    (lambda: F["mps_shares"]({"nodes": []}, 4), "got a mapping with keys nodes"),
    (lambda: F["mps_shares"](FACTS, 1), ">= 2"),
    (lambda: F["mps_daemon_defaults"](FACTS, 3, "sideways"), "mode must be one of"),
])
def test_filter_errors_say_what_is_wrong(call, fragment):
    with pytest.raises(AnsibleFilterError) as err:
        call()
    assert fragment in str(err.value)


def _ansible(expr, extra_vars):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-m", "ansible.builtin.debug",
           "-a", json.dumps({"msg": "{{ %s }}" % expr}), "-e", json.dumps(extra_vars), "-e",
           "ansible_python_interpreter=%s" % sys.executable]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_filters_from_a_real_template():
    r = _ansible("{'pinned_device_mem_limit': {0: '40G'}} | gpuops.nvidia.mps_limits(gpus=facts, replicas=4)",
                 {"facts": FACTS})
    assert r.returncode == 0, r.stdout + r.stderr
    # ad-hoc output: "localhost | SUCCESS => {json}"
    msg = json.loads(r.stdout.split("=>", 1)[1])["msg"]
    assert msg["env"] == [{"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=40G"}]
    assert "35942 MiB" in msg["warnings"][0]
    r = _ansible("{'pinned_device_mem_limit': \"'0=8G'\"} | gpuops.nvidia.mps_limits", {})
    assert r.returncode != 0
    assert "quote characters" in r.stdout + r.stderr
