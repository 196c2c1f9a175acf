"""On a real GPU host: cdi_spec, runtime_mode and gpu_node_plan's ``cdi`` and ``runtime_mode`` checks, through real
ansible with the NVML backend and NVIDIA's REAL nvidia-ctk (built from NVIDIA/nvidia-container-toolkit's source, never
committed here; docs/readings/cdi-spec-real-gpu.md says how).

Runs only with GPUOPS_REAL_GPU=1 (tests/conftest.py, as every test in tests/gpu), a GPU that pynvml sees, nvidia-smi,
and GPUOPS_NVIDIA_CTK naming an nvidia-ctk binary; CI skips it. Everything it writes is under pytest's tmp_path:
the spec directories, the runtime config, the node lock. Never /etc/cdi, /var/run/cdi or
/etc/nvidia-container-runtime (the last test checks they are as they were). The only nvidia-ctk commands run are
read-only on the GPU: ``cdi generate --output=<file under /tmp>``, ``cdi list`` and ``config --in-place --set`` on
files under /tmp. No GPU setting is changed; the last test compares nvidia-smi's MIG modes, compute mode and
persistence mode before and after.

What the modules must list comes from nvidia-smi, not from the collection: for each GPU with MIG disabled its index
and its GPU UUID, for a GPU with MIG enabled its MIG devices (their MIG UUIDs, and ``<gpu>:<n>`` names, as many as it
has MIG devices), plus ``all``. With GPUOPS_REPORT_DIR set, writes cdi_real_report.json (every step's result and
duration), the spec cdi_spec wrote (cdi-spec.yaml) and the runtime config runtime_mode wrote (runtime-config.toml).
"""
import hashlib
import json
import os
import re
import subprocess
import time

import pytest

from tests.gpu.real_host import gpu_settings, why_skip

from tests.support.ansible_run import run_module

pytestmark = pytest.mark.gpu

CTK = os.environ.get("GPUOPS_NVIDIA_CTK") or ""
CDI = "gpuops.nvidia.cdi_spec"
PLAN = "gpuops.nvidia.gpu_node_plan"
MODE = "gpuops.nvidia.runtime_mode"
SETTINGS = ["index", "uuid", "mig.mode.current", "mig.mode.pending", "compute_mode", "persistence_mode"]
# The node's own CDI and runtime paths: nothing here may be touched.
SYSTEM_PATHS = ["/etc/cdi", "/var/run/cdi", "/run/cdi", "/etc/nvidia-container-runtime"]


WHY_SKIP = why_skip(CTK, "GPUOPS_NVIDIA_CTK")
if WHY_SKIP:
    pytestmark = [pytest.mark.gpu, pytest.mark.skip(reason=WHY_SKIP)]


# -- the node as nvidia-smi and nvidia-ctk see it ---------------------------------------------------------------
def _cmd(*argv):
    return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False, timeout=120)


def _smi(*args):
    proc = _cmd("nvidia-smi", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _system_paths():
    """What each of the node's own CDI/runtime directories holds (name, size, mtime), or 'absent'."""
    out = {}
    for path in SYSTEM_PATHS:
        if not os.path.isdir(path):
            out[path] = "absent" if not os.path.lexists(path) else "not a directory"
            continue
        out[path] = sorted((name, os.lstat(os.path.join(path, name)).st_size,
                            os.lstat(os.path.join(path, name)).st_mtime_ns) for name in os.listdir(path))
    return out


def _smi_gpus():
    """[{index, uuid, mig (current mode is Enabled), migs: [MIG UUID]}] from nvidia-smi --query-gpu and -L."""
    gpus = {}
    for row in gpu_settings(SETTINGS):
        gpus[int(row["index"])] = {"index": int(row["index"]), "uuid": row["uuid"],
                                   "mig": row["mig.mode.current"] == "Enabled", "migs": []}
    current = None
    for line in _smi("-L").splitlines():
        gpu = re.match(r"GPU (\d+): .*\(UUID: (GPU-[0-9a-fA-F-]+)\)", line)
        mig = re.match(r"\s+MIG .*Device\s+\d+: \(UUID: (MIG-[0-9a-fA-F-]+)\)", line)
        if gpu:
            current = int(gpu.group(1))
            assert gpus[current]["uuid"] == gpu.group(2)
        elif mig:
            gpus[current]["migs"].append(mig.group(1))
    return [gpus[i] for i in sorted(gpus)]


def _devices_problems(names, gpus):
    """How a device list differs from what nvidia-smi says the node has (empty when it is exactly that)."""
    exact, counted = set(), {}
    for gpu in gpus:
        if not gpu["mig"]:
            exact.update(["%d" % gpu["index"], gpu["uuid"]])
        else:
            exact.update(gpu["migs"])
            if gpu["migs"]:
                counted["%d" % gpu["index"]] = len(gpu["migs"])
    if exact:
        exact.add("all")
    problems = ["missing %s" % n for n in sorted(exact - set(names))]
    seen = {}
    for name in names:
        if name in exact:
            continue
        match = re.match(r"^(\d+):\d+$", name)
        if match and match.group(1) in counted:
            seen[match.group(1)] = seen.get(match.group(1), 0) + 1
        else:
            problems.append("not the node's: %s" % name)
    problems += ["GPU %s: %d <gpu>:<n> names for %d MIG devices" % (g, seen.get(g, 0), n)
                 for g, n in counted.items() if seen.get(g, 0) != n]
    if len(set(names)) != len(names):
        problems.append("duplicates")
    return problems


def _device_total(gpus):
    return sum(len(g["migs"]) if g["mig"] else 1 for g in gpus)


def _ctk_list(*dirs):
    """(names, warning lines) of the real `nvidia-ctk cdi list` over ``dirs``."""
    proc = _cmd(CTK, "cdi", "list", *["--spec-dir=%s" % d for d in dirs])
    assert proc.returncode == 0, proc.stderr
    names = [line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("nvidia.com/gpu=")]
    return names, [line for line in proc.stderr.splitlines() if "level=warning" in line or "level=error" in line]


def _read(path):
    with open(path) as handle:
        return handle.read()


def _sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# -- the report -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report():
    """Every step's result and duration; written to $GPUOPS_REPORT_DIR/cdi_real_report.json at the end, whatever
    failed. Taking it first also takes the 'before' reading of the GPU settings and the system paths."""
    data = {"nvidia_ctk": CTK, "steps": [], "before": {"settings": gpu_settings(SETTINGS), "system_paths": _system_paths()}}
    version = _cmd(CTK, "--version")
    data["nvidia_ctk_version"] = (version.stdout + version.stderr).strip()
    data["driver_version"] = _smi("--query-gpu=driver_version", "--format=csv,noheader").strip().splitlines()[0]
    data["gpus"] = _smi_gpus()
    data["names"] = _smi("--query-gpu=name", "--format=csv,noheader").strip().splitlines()
    yield data
    directory = os.environ.get("GPUOPS_REPORT_DIR")
    if directory:
        with open(os.path.join(directory, "cdi_real_report.json"), "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")


KEEP = ("changed", "failed", "msg", "action", "devices", "device_count", "mode", "previous_mode", "steps",
        "warnings", "config_path", "spec_path")


def _run(report_data, label, module, args, env, check=False, diff=False):
    start = time.monotonic()
    result, proc = run_module(module, args, env=env, check=check, diff=diff)
    entry = {"step": label, "module": module, "check_mode": check, "seconds": round(time.monotonic() - start, 2)}
    entry.update((k, result[k]) for k in KEEP if k in result)
    report_data["steps"].append(entry)
    assert not result.get("failed"), "%s failed: %s\n%s" % (label, result.get("msg"), proc.stderr[-4000:])
    return result


def _save(name, text):
    directory = os.environ.get("GPUOPS_REPORT_DIR")
    if directory:
        with open(os.path.join(directory, name), "w") as handle:
            handle.write(text)


# -- the tests --------------------------------------------------------------------------------------------------
def test_cdi_spec_lists_the_real_gpus_and_the_plan_follows_it(tmp_path, report):
    gpus = _smi_gpus()
    etc, run = tmp_path / "etc" / "cdi", tmp_path / "run" / "cdi"
    etc.mkdir(parents=True)
    run.mkdir(parents=True)
    spec = str(run / "nvidia.yaml")
    args = {"spec_path": spec, "spec_dirs": [str(etc), str(run)], "nvidia_ctk_path": CTK}
    env = {"GPUOPS_NODE_LOCK": str(tmp_path / "node.lock")}
    plan = {"cdi": args}

    before_plan = _run(report, "gpu_node_plan cdi, no spec yet", PLAN, plan, env)
    assert before_plan["steps"]["cdi"] == ["no record of a verified CDI spec"], before_plan["steps"]

    check = _run(report, "cdi_spec check mode", CDI, args, env, check=True, diff=True)
    assert check["changed"] is True and check["action"] == "create", check
    assert os.listdir(str(run)) == [] and os.listdir(str(etc)) == [], "check mode wrote something"
    assert _devices_problems(check["devices"], gpus) == [], check["devices"]
    assert "kind: nvidia.com/gpu" in check["diff"]["after"] and check["diff"]["before"] == ""

    applied = _run(report, "cdi_spec apply", CDI, args, env, diff=True)
    assert applied["changed"] is True and applied["action"] == "create", applied
    assert _devices_problems(applied["devices"], gpus) == [], applied["devices"]
    assert applied["device_count"] == _device_total(gpus)
    text = _read(spec)
    _save("cdi-spec.yaml", text)
    assert text == check["diff"]["after"], "check mode's diff is not what apply wrote"
    assert oct(os.stat(spec).st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(str(run))) == [".nvidia.yaml.gpuops-verified", "nvidia.yaml"]
    record = json.loads(_read(str(run / ".nvidia.yaml.gpuops-verified")))
    assert record["spec_sha256"] == _sha256(spec) and record["driver_version"] == report["driver_version"]
    # what the real tool lists from the written spec, alone and as the node's view of both directories
    start = time.monotonic()
    listed, warnings = _ctk_list(str(run))
    report["cdi_list_seconds"] = round(time.monotonic() - start, 2)
    report["cdi_list_after_apply"] = {"names": listed, "warnings": warnings}
    assert sorted(listed) == applied["devices"] and warnings == []
    assert _ctk_list(str(etc), str(run)) == (listed, [])
    # the very bytes nvidia-ctk writes itself with its default names (index, uuid)
    direct = tmp_path / "direct" / "nvidia.yaml"
    direct.parent.mkdir()
    start = time.monotonic()
    proc = _cmd(CTK, "cdi", "generate", "--output=%s" % direct)
    report["direct_generate"] = {"rc": proc.returncode, "seconds": round(time.monotonic() - start, 2),
                                 "stderr_lines": len(proc.stderr.splitlines()),
                                 "same_bytes_as_cdi_spec": direct.exists() and _read(str(direct)) == text}
    assert proc.returncode == 0, proc.stderr
    assert _read(str(direct)) == text
    stat = os.stat(spec)

    again = _run(report, "cdi_spec again", CDI, args, env)
    assert again["changed"] is False and again["action"] == "none", again
    assert again["devices"] == applied["devices"]
    after = os.stat(spec)
    assert (after.st_ino, after.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns), "an unchanged spec was rewritten"

    clean = _run(report, "gpu_node_plan cdi after apply", PLAN, plan, env)
    assert clean["steps"]["cdi"] == [], clean["steps"]

    with open(spec, "a") as handle:
        handle.write("# edited by hand\n")
    edited = _run(report, "gpu_node_plan cdi after a hand edit", PLAN, plan, env)
    assert edited["steps"]["cdi"] == ["the CDI spec %s is not the one verified (changed or removed since)" % spec]

    restored = _run(report, "cdi_spec after a hand edit", CDI, args, env)
    assert restored["changed"] is True and restored["action"] == "replace", restored
    assert _read(spec) == text
    assert _run(report, "gpu_node_plan cdi after the restore", PLAN, plan, env)["steps"]["cdi"] == []


def test_runtime_mode_sets_cdi_with_the_real_nvidia_ctk(tmp_path, report):
    path = str(tmp_path / "nvidia-container-runtime" / "config.toml")
    args = {"config_path": path, "nvidia_ctk_path": CTK, "mode": "cdi"}
    plan = {"runtime_mode": {"config_path": path, "mode": "cdi"}}
    env = {"GPUOPS_NODE_LOCK": str(tmp_path / "node.lock")}

    todo = _run(report, "gpu_node_plan runtime_mode, no config", PLAN, plan, env)
    assert todo["steps"]["runtime_mode"] == ["nvidia-container-runtime mode auto -> cdi"], todo["steps"]

    check = _run(report, "runtime_mode check mode", MODE, args, env, check=True, diff=True)
    assert check["changed"] is True and check["previous_mode"] == "auto" and not os.path.exists(path), check
    assert 'mode = "cdi"' in check["diff"]["after"]

    applied = _run(report, "runtime_mode apply", MODE, args, env, diff=True)
    assert applied["changed"] is True and applied["previous_mode"] == "auto" and applied["mode"] == "cdi"
    text = _read(path)
    _save("runtime-config.toml", text)
    assert text == check["diff"]["after"]
    # the bytes the real tool writes itself on a missing file (under tmp_path, never the node's config)
    direct = str(tmp_path / "direct" / "config.toml")
    proc = _cmd(CTK, "config", "--in-place", "--set", "nvidia-container-runtime.mode=cdi", "--config=%s" % direct)
    report["direct_config_set"] = {"rc": proc.returncode, "same_bytes_as_runtime_mode":
                                   os.path.isfile(direct) and _read(direct) == text}
    assert proc.returncode == 0, proc.stderr
    assert _read(direct) == text
    stat = os.stat(path)

    again = _run(report, "runtime_mode again", MODE, args, env)
    assert again["changed"] is False and again["previous_mode"] == "cdi", again
    assert (os.stat(path).st_ino, os.stat(path).st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    done = _run(report, "gpu_node_plan runtime_mode after apply", PLAN, plan, env)
    assert done["steps"]["runtime_mode"] == [], done["steps"]


def test_no_gpu_setting_and_no_system_cdi_file_changed(report):
    """Last: nvidia-smi's MIG modes, compute mode and persistence mode, and the node's own CDI and runtime
    directories, are what they were before the first test."""
    report["after"] = {"settings": gpu_settings(SETTINGS), "system_paths": _system_paths()}
    assert report["after"]["settings"] == report["before"]["settings"]
    assert report["after"]["system_paths"] == report["before"]["system_paths"]
