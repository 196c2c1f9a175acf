"""compute_mode on a real GPU, read-only in effect: declaring the current mode changes nothing, and check mode
with another mode only plans. The GPU's modes are compared before and after.

    GPUOPS_REAL_GPU=1 python -m pytest tests/gpu -m gpu
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.gpu.test_mps_real import ROOT, _ansible_cmd, _collections_dir, _gpu_modes

pytestmark = pytest.mark.gpu
OTHER = {"Default": "Prohibited", "Exclusive_Process": "Default", "Prohibited": "Default"}
SMI = {"Default": "Default", "Exclusive_Process": "Exclusive_Process", "Prohibited": "Prohibited"}


def _run(collections, args, check):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    env.pop("GPUOPS_SIMULATED_GPUS", None)
    cmd = [_ansible_cmd(), "localhost", "-i", "localhost,", "-c", "local", "-m", "gpuops.nvidia.compute_mode",
           "-a", json.dumps(args), "--diff"] + (["--check"] if check else [])
    if subprocess.run([sys.executable, "-c", "import ansible, pynvml"], capture_output=True, check=False).returncode == 0:
        cmd += ["-e", "ansible_python_interpreter=%s" % sys.executable]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    head, sep, body = r.stdout.rpartition("localhost | ")
    assert sep, r.stdout + r.stderr
    out = json.loads(body.split("=>", 1)[1])
    out["_rc"] = r.returncode
    out["_output"] = r.stdout + r.stderr
    return out


def test_current_mode_is_unchanged_and_check_mode_only_plans(capsys):
    if not shutil.which("nvidia-smi") or not _ansible_cmd():
        pytest.skip("nvidia-smi / ansible not found")
    before = _gpu_modes()
    current = before[0][2]
    if current not in SMI:
        pytest.skip("unexpected compute mode text %r" % current)
    work = tempfile.mkdtemp(prefix="gpuops-cm-", dir="/tmp")
    try:
        collections = _collections_dir(work)
        same = _run(collections, {"gpus": ["0"], "mode": current}, check=False)
        plan = _run(collections, {"gpus": ["0"], "mode": OTHER[current]}, check=True)
        after = _gpu_modes()
        with capsys.disabled():
            sys.stdout.write("\ncompute_mode on GPU 0 (%s):\n  declare current %s: rc=%s changed=%s changes=%s calls=%s\n"
                             "  check mode %s: rc=%s changed=%s changes=%s\n  modes before %s\n  modes after  %s\n"
                             % (before[0][1], current, same["_rc"], same.get("changed"), same.get("changes"),
                                same.get("calls"), OTHER[current], plan["_rc"], plan.get("changed"), plan.get("changes"), before, after))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert same["_rc"] == 0, same["_output"]
    assert same["changed"] is False and same["changes"] == [] and same["calls"] == []  # no setter called
    assert plan["_rc"] == 0, plan["_output"]
    assert plan["changed"] is True and plan["changes"][0]["compute_mode"] == [current, OTHER[current]]
    assert plan["calls"] == []
    assert after == before
