"""On a real GPU host (GPUOPS_REAL_GPU=1), read-only: the health sweep's node read (gpu_health_read) against nvidia-smi.

- check mode, then apply, then again, with the cursor in a scratch directory: check mode writes no cursor, apply writes
  it there, the next sweep reports no change (unless the kernel logged an Xid between the two);
- the sweep's verdict (its findings through the deadline reads in child processes) is the verdict of the collection's
  one in-process read (_nvml_backend.read_health), and that read agrees with `nvidia-smi -q -x` field by field
  (tests/gpu/health_vs_smi.py);
- no mutating NVML call is made: the backend's mutating calls are logged (GPUOPS_NVML_CALL_LOG) and refused
  (GPUOPS_NVML_READ_ONLY=1), and every pynvml function that changes a GPU is replaced, in this process and so in the
  read's forked children, by one that records its name in a file and refuses;
- whether the host has a real dcgmi is said (the report), not assumed.

Writes its readings to $GPUOPS_REPORT_DIR when set."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support.modrun import run_here

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pynvml's calls that change a GPU (names start so): what the read must never reach
MUTATING_PREFIXES = ("nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear", "nvmlDeviceCreate", "nvmlDeviceRemove",
                     "nvmlDeviceModify", "nvmlGpuInstanceCreate", "nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy",
                     "nvmlDeviceRegister", "nvmlUnitSet", "nvmlSystemSet", "nvmlDeviceDiscover")


def _report(name, data):
    directory = os.environ.get("GPUOPS_REPORT_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, name), "w") as handle:
            handle.write(data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True, default=str))


@pytest.fixture
def guarded(tmp_path, monkeypatch):
    """pynvml with every mutating function replaced by a refusal recorded in a file (forked children inherit it)."""
    import pynvml
    record = str(tmp_path / "pynvml-mutations.log")

    def refuse(name):
        def call(*args, **kwargs):
            with open(record, "a") as handle:
                handle.write(name + "\n")
            raise RuntimeError("read-only test: %s refused" % name)
        return call
    wrapped = [n for n in dir(pynvml) if n.startswith(MUTATING_PREFIXES) and callable(getattr(pynvml, n))]
    for name in wrapped:
        monkeypatch.setattr(pynvml, name, refuse(name))
    monkeypatch.setenv("GPUOPS_NVML_READ_ONLY", "1")
    monkeypatch.setenv("GPUOPS_NVML_CALL_LOG", str(tmp_path / "backend-mutations.log"))
    return {"record": record, "backend": str(tmp_path / "backend-mutations.log"), "wrapped": wrapped}


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [line for line in handle.read().splitlines() if line.strip()]


def test_sweep_read_is_read_only_and_agrees_with_the_in_process_read_and_nvidia_smi(tmp_path, guarded):
    cursor = str(tmp_path / "scratch" / "health-cursor.json")
    args = {"cursor_path": cursor, "deadline": 30}
    check = run_here("gpuops.nvidia.gpu_health_read", args, check=True, diff=True)
    assert not check.get("failed"), check
    assert not os.path.exists(cursor) and not os.path.exists(os.path.dirname(cursor))
    applied = run_here("gpuops.nvidia.gpu_health_read", args)
    assert not applied.get("failed"), applied
    assert os.path.exists(cursor)
    again = run_here("gpuops.nvidia.gpu_health_read", args)
    assert not again.get("failed"), again
    assert again["changed"] is False or again["xid"]["new"], again      # only an Xid logged between the two
    assert applied["unresponsive"] == [] and again["unresponsive"] == []

    # the same verdict as the collection's one in-process read of the same GPUs
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend
    backend = get_backend(run_command=_run)
    try:
        read = backend.read_health()
    finally:
        backend.close()
    direct = _gpu_health.summary(read, {}, gpus=False)["gate"]
    assert again["gpus"] == len(read["gpus"])
    swept = again["health"]["gate"]

    def kinds(gate):
        return sorted((f["gpu"], f["kind"]) for f in gate["blocking"] + gate["warnings"])

    # (the in-process read counts this boot's Xid lines; the sweep counts the blocking ones it kept and the new ones)
    assert [k for k in kinds(swept) if not k[1].startswith("xid")] == \
        [k for k in kinds(direct) if not k[1].startswith("xid")], (swept, direct)

    # that read agrees with nvidia-smi, field by field
    smi = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu", "health_vs_smi.py"), "--out",
                          str(tmp_path / "health_vs_smi.json")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, check=False, timeout=300)
    assert smi.returncode == 0, smi.stdout[-4000:]

    # no mutating NVML call, by the backend or by pynvml directly, in this process or a read's child
    assert _lines(guarded["record"]) == [] and _lines(guarded["backend"]) == []
    dcgmi = shutil.which("dcgmi")
    _report("health_sweep_real.json", {
        "check": {k: check[k] for k in ("changed", "gpus", "deadline", "unresponsive")},
        "applied": {k: applied[k] for k in ("changed", "gpus", "unresponsive", "xid")},
        "again": {k: again[k] for k in ("changed", "gpus", "unresponsive", "xid", "health")},
        "in_process_gate": direct, "nvidia_smi_comparison_rc": smi.returncode,
        "pynvml_functions_guarded": len(guarded["wrapped"]), "mutating_calls": 0,
        "dcgmi": dcgmi or "none on this host"})
    _report("health_vs_smi.txt", smi.stdout)


def _run(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr
