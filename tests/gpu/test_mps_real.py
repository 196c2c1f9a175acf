"""MPS on a real GPU, through the mps_control module: caps hold, and the GPU's modes are left as found.

Run on a GPU host (PyTorch and ansible installed; no systemd needed):
    GPUOPS_REAL_GPU=1 python -m pytest tests/gpu -m gpu

It starts a private MPS control daemon with gpuops.nvidia.mps_control (service_manager=none, pipe and log
directories under a fresh /tmp directory), sets default limits, runs tests/gpu/mps_client.py with several
client environments, prints a table, and stops the daemon in a finally block. It never changes compute mode,
MIG mode or persistence mode (it reads them before and after and fails if they differ). GPU 0 is used.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = os.path.join(ROOT, "tests", "gpu", "mps_client.py")
SIZES = [2, 6, 12]
DAEMON_PCT = 25
DAEMON_MEM = "8G"

pytestmark = pytest.mark.gpu


def _collections_dir(tmp):
    """An ansible_collections tree pointing at this checkout (works without `make setup`)."""
    base = os.path.join(tmp, "collections")
    os.makedirs(os.path.join(base, "ansible_collections", "gpuops"))
    os.symlink(ROOT, os.path.join(base, "ansible_collections", "gpuops", "nvidia"))
    return base


def _gpu_modes():
    """Read-only: per GPU index, (compute mode, MIG mode, persistence mode, SM-independent identity)."""
    r = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,compute_mode,mig.mode.current,persistence_mode",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return [tuple(x.strip() for x in line.split(",")) for line in r.stdout.strip().splitlines()]


def _ansible_cmd():
    here = os.path.join(os.path.dirname(sys.executable), "ansible")
    return here if os.path.exists(here) else shutil.which("ansible")


def _module(collections, check=False, **args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_HOST_KEY_CHECKING="False")
    cmd = [_ansible_cmd(), "localhost", "-i", "localhost,", "-c", "local", "-m", "gpuops.nvidia.mps_control",
           "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if subprocess.run([sys.executable, "-c", "import ansible"], capture_output=True, check=False).returncode == 0:
        cmd += ["-e", "ansible_python_interpreter=%s" % sys.executable]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    head, sep, body = r.stdout.rpartition("localhost | ")
    assert sep, "ansible gave no result:\n" + r.stdout + r.stderr
    result = json.loads(body.split("=>", 1)[1])
    result["_failed"] = r.returncode != 0
    result["_output"] = r.stdout + r.stderr
    return result


def _daemon_answers(pipe, log):
    """True when a control daemon answers on `pipe` with a PID list (the module's own test of it)."""
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=log)
    try:
        r = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n", env=env, capture_output=True,
                           text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return True  # no answer in time: assume it may still be there
    return r.returncode == 0 and all(t.isdigit() for t in r.stdout.split())


def _client(env_extra, pipe):
    env = dict(os.environ)
    for k in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_VISIBLE_DEVICES"):
        env.pop(k, None)
    env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # device 0 = nvidia-smi's GPU 0
    env.update(env_extra)
    r = subprocess.run([sys.executable, CLIENT] + [str(s) for s in SIZES], env=env, capture_output=True,
                       text=True, timeout=600, check=False)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, "client printed nothing:\n" + r.stdout + r.stderr
    return json.loads(lines[-1])


def _table(rows):
    head = ["case", "client environment", "SMs", "total GiB", "free GiB"] + ["%d GiB" % s for s in SIZES] + ["holds"]
    body = [[r["case"], r["env"], str(r["sms"]), "%.2f" % r["total_gib"], "%.2f" % r["free_gib"]]
            + [r["allocations"][str(float(s))] for s in SIZES] + ["yes" if r["ok"] else "NO"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = " | ".join("%%-%ds" % w for w in widths)
    return "\n".join([fmt % tuple(head), "-+-".join("-" * w for w in widths)] + [fmt % tuple(b) for b in body])


def test_mps_caps_hold_through_the_module(capsys):
    pytest.importorskip("torch")
    if not shutil.which("nvidia-cuda-mps-control") or not shutil.which("nvidia-smi"):
        pytest.skip("nvidia-cuda-mps-control / nvidia-smi not found")
    if not _ansible_cmd():
        pytest.skip("ansible not found")
    modes_before = _gpu_modes()
    if modes_before[0][3] == "Enabled":
        pytest.skip("GPU 0 is MIG-enabled; this test needs a whole GPU (it never changes MIG mode)")

    work = tempfile.mkdtemp(prefix="gpuops-mps-", dir="/tmp")
    collections = _collections_dir(work)
    sys.path.insert(0, collections)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._sharing import workload_limits

    pipe, log = os.path.join(work, "pipe"), os.path.join(work, "log")
    no_daemon_pipe = os.path.join(work, "no-daemon")
    os.makedirs(no_daemon_pipe)
    args = dict(service_manager="none", pipe_directory=pipe, log_directory=log,
                default_active_thread_percentage=DAEMON_PCT, default_pinned_device_mem_limit={"0": DAEMON_MEM})
    rows = []
    started = None
    try:
        planned = _module(collections, check=True, **args)
        assert not planned["_failed"] and planned["changed"] is True, planned["_output"]
        assert not _daemon_answers(pipe, log), "check mode started a daemon"
        started = _module(collections, **args)
        assert not started["_failed"], started["_output"]
        assert started["changed"] is True
        assert started["limits"]["active_thread_percentage"] == float(DAEMON_PCT)
        assert started["limits"]["pinned_device_mem_limit"]["0"] == DAEMON_MEM
        again = _module(collections, **args)
        assert not again["_failed"] and again["changed"] is False, again["_output"]

        baseline = _client({}, no_daemon_pipe)
        full_sms = baseline["sms"]
        cases = [
            ("no MPS daemon", {}, no_daemon_pipe,
             lambda r: r["sms"] == full_sms and r["allocations"]["12.0"] == "ok"),
            ("daemon defaults (25 %, 0=8G)", {}, pipe,
             lambda r: r["sms"] < full_sms and r["sms"] <= full_sms * 0.3 and r["free_gib"] < 8.5
             and r["allocations"]["2.0"] == "ok" and r["allocations"]["6.0"] == "ok"
             and r["allocations"]["12.0"] == "OOM"),
        ]
        lowered = workload_limits(active_thread_percentage=10, pinned_device_mem_limit={0: "4G"})
        env_mem = dict(e for e in [(x["name"], x["value"]) for x in lowered["env"]]
                       if e[0] == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        env_pct = dict(e for e in [(x["name"], x["value"]) for x in lowered["env"]]
                       if e[0] == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
        uuid0 = modes_before[0][1]
        by_uuid = workload_limits(pinned_device_mem_limit={uuid0: "4G"},
                                  gpus=[{"index": 0, "uuid": uuid0, "name": "GPU 0", "memory_total_mib": 1}])
        env_uuid = dict((x["name"], x["value"]) for x in by_uuid["env"])
        cases += [
            ("client lowers memory", env_mem, pipe,
             lambda r: r["free_gib"] < 4.5 and r["allocations"]["2.0"] == "ok" and r["allocations"]["6.0"] == "OOM"),
            ("client lowers memory by UUID", env_uuid, pipe,
             lambda r: r["free_gib"] < 4.5 and r["allocations"]["2.0"] == "ok" and r["allocations"]["6.0"] == "OOM"),
            ("client lowers threads", env_pct, pipe,
             lambda r: r["sms"] < full_sms * 0.2 and r["allocations"]["12.0"] == "OOM"),
        ]
        for name, env, pipe_dir, expect in cases:
            r = baseline if (name == "no MPS daemon") else _client(env, pipe_dir)
            r.update(case=name, env=",".join("%s=%s" % kv for kv in env.items()) or "(none)", ok=bool(expect(r)))
            rows.append(r)
        # under MPS the total a client sees stays the whole GPU: only free memory and allocation reflect the cap
        for r in rows[1:]:
            assert abs(r["total_gib"] - baseline["total_gib"]) < 0.5
    finally:
        # Every step on its own: the daemon must be stopped and the report written whatever failed before.
        problems = []
        stop = {"_failed": True, "_output": "the stop did not run"}
        try:
            stop = _module(collections, state="stopped", force=True, **dict(
                (k, v) for k, v in args.items() if k in ("service_manager", "pipe_directory", "log_directory")))
        except Exception as e:  # pylint: disable=broad-exception-caught
            problems.append("stop through the module: %r" % e)
        still_running = _daemon_answers(pipe, log)
        if still_running:  # the module could not stop it: do it by hand, never leave it behind
            try:
                subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", capture_output=True, text=True,
                               timeout=30, check=False,
                               env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=log))
            except Exception as e:  # pylint: disable=broad-exception-caught
                problems.append("quit by hand: %r" % e)
        try:
            modes_after = _gpu_modes()
        except Exception as e:  # pylint: disable=broad-exception-caught
            modes_after = "unreadable: %r" % e
        report = _table(rows) if rows else "(no readings)"
        if started and not started.get("_failed"):
            report += "\n\nmps_control reported in force: %s" % json.dumps(started.get("limits"))
        report += "\n\nGPU modes before: %s\nGPU modes after:  %s\nstop: changed=%s failed=%s%s" % (
            modes_before, modes_after, stop.get("changed"), stop["_failed"],
            ("\nproblems: %s" % "; ".join(problems)) if problems else "")
        out_dir = os.environ.get("OUT") or os.environ.get("GPUOPS_GPU_REPORT_DIR")
        if out_dir:
            with open(os.path.join(out_dir, "mps_real.txt"), "w") as f:
                f.write(report + "\n")
        with capsys.disabled():
            sys.stdout.write("\n" + report + "\n")
        shutil.rmtree(work, ignore_errors=True)
    assert not stop["_failed"], stop["_output"]
    assert not still_running, "the MPS daemon still answered after the module stopped it"
    assert modes_after == modes_before, "GPU modes changed: %s -> %s" % (modes_before, modes_after)
    assert all(r["ok"] for r in rows), "\n" + _table(rows)
