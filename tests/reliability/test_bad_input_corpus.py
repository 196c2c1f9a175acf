"""The bad-input corpus (tests/reliability/bad_input_corpus.yml): every case fails, says what is wrong and what is
valid, and changes nothing.

Module cases run the module's main() in this process (fast on 2 cores); the tools they drive are real where the
project has them (containerd, helm for rendering, the kubernetes client over HTTP to the fake API server) and the
stand-ins otherwise (nvidia-ctk, nvidia-cuda-mps-control, systemctl, helm's release store). Role cases run through
real ansible-playbook, all of them in one run (one inventory host per case).

"Nothing changed" is checked on: every file under the case's directory (bytes, mtime, mode; the simulator's state file
holds call_log), the fake API server's objects and its non-dry-run writes, the helm release store and its mutating
commands. Lock files (`*.lock`) are excluded: taking a lock is not a change of configuration.
"""
import contextlib
import io
import json
import os
import shutil
import sys

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.nvidia.plugins.module_utils._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import (
    compute_mode, containerd_runtime, device_plugin, gpu_info, gpu_simulator, mig_layout, mig_mode, mps_control,
    node_labels, runtime_class)
from tests.support import ctk_env
from tests.support.ansible_run import ROOT, run_playbook

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_input_corpus.yml")
with open(CORPUS) as _handle:
    CASES = yaml.safe_load(_handle)["cases"]
MODULES = {"compute_mode": compute_mode, "gpu_info": gpu_info, "gpu_simulator": gpu_simulator,
           "mig_layout": mig_layout, "mig_mode": mig_mode, "node_labels": node_labels, "runtime_class": runtime_class}
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
FAKE_HELM = os.path.join(ROOT, "tests", "support", "fake_helm.py")
FAKE_BIN = os.path.join(ROOT, "tests", "support", "bin")
HELM_MUTATING = {"upgrade", "rollback", "uninstall", "install"}
PROFILES = [{"name": "default"}, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4},
            {"name": "mps-4", "sharing": "mps", "replicas": 4}]


def _ids(kind):
    return [pytest.param(c, id=c["id"]) for c in CASES if c["kind"] == kind]


def snapshot(directory):
    out = {}
    for dirpath, dirs, files in os.walk(str(directory)):
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            if name.endswith(".lock"):
                continue
            st = os.lstat(full)
            data = None
            if os.path.isfile(full) and not os.path.islink(full):
                with open(full, "rb") as handle:
                    data = handle.read()
            out[os.path.relpath(full, str(directory))] = (data, st.st_mtime_ns, st.st_mode)
    return out


def run_main(main, args, **internal):
    args = dict(args, _ansible_check_mode=False, _ansible_diff=True, **internal)
    buf = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(buf):
        try:
            main()
        except SystemExit:
            pass
    text = buf.getvalue()
    return json.loads(text[text.index("{"):])


def substitute(value, mapping):
    if isinstance(value, str):
        for key, repl in mapping.items():
            value = value.replace("{%s}" % key, repl)
        return value
    if isinstance(value, list):
        return [substitute(v, mapping) for v in value]
    if isinstance(value, dict):
        return dict((k, substitute(v, mapping)) for k, v in value.items())
    return value


def assert_clear_failure(case, res):
    if os.environ.get("CORPUS_SHOW"):          # CORPUS_SHOW=1 pytest -s: print every case's message for review
        print("\n[%s] %s" % (case["id"], res.get("msg")))
    assert res.get("failed") is True, "%s did not fail: %s" % (case["id"], res)
    assert not res.get("changed"), "%s reports changed" % case["id"]
    missing = [f for f in case["expect"] if f not in res["msg"]]
    assert not missing, "%s: message lacks %s:\n%s" % (case["id"], missing, res["msg"])


def test_corpus_is_big_enough():
    kinds = set(c["kind"] for c in CASES)
    assert len(CASES) >= 60 and len(set(c["id"] for c in CASES)) == len(CASES)
    assert kinds == {"sim", "containerd", "mps", "kube", "helm", "role"}
    modules = set(c.get("module") for c in CASES if c["kind"] in ("sim", "kube"))
    assert modules >= set(MODULES)


# ----------------------------------------------------------------------------------------------- simulated GPUs
@pytest.mark.parametrize("case", _ids("sim"))
def test_sim(case, tmp_path, monkeypatch):
    state = str(tmp_path / "state.json")
    monkeypatch.delenv("GPUOPS_SIMULATED_MACHINE", raising=False)
    monkeypatch.delenv("GPUOPS_NODE_LOCK", raising=False)
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", state)
    if "state_text" in case:
        with open(state, "w") as handle:
            handle.write(case["state_text"])
    elif case.get("state_dir"):
        os.mkdir(state)
    else:
        try:
            sim = SimulatedBackend(state, shape=case["shape"])
        except Exception:                                   # an unknown shape: the module must say so
            monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", case["shape"])
            sim = None
        if sim is not None:
            for index in case.get("enable", []):
                sim.set_mig_mode(index, True)
                if sim.read_gpu(index)["mig_mode_current"] != "Enabled":
                    sim.reset_gpu(index)
            if case.get("setup") == "busy_3g":
                gi = sim.create_gpu_instance(0, 9, 0)
                ci = sim.create_compute_instance(0, gi, 2)
                sim.add_process(0, 4242, "train", gi_id=gi, ci_id=ci)
            sim.clear_call_log()
    for name, text in (case.get("files") or {}).items():
        (tmp_path / name).write_text(text)
    before = snapshot(tmp_path)
    res = run_main(MODULES[case["module"]].main, substitute(case["args"], {"tmp": str(tmp_path)}))
    assert_clear_failure(case, res)
    assert snapshot(tmp_path) == before


# ----------------------------------------------------------------------------------------------- mps_control
@pytest.mark.parametrize("case", _ids("mps"))
def test_mps(case, tmp_path, monkeypatch):
    units = tmp_path / "units"
    units.mkdir()
    monkeypatch.setenv("PATH", FAKE_BIN + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(tmp_path / "systemd.json"))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    monkeypatch.setenv("GPUOPS_NODE_LOCK", str(tmp_path / "node.lock"))
    args = dict(service_manager="none", pipe_directory=str(tmp_path / "pipe"), log_directory=str(tmp_path / "log"),
                unit_directory=str(units), timeout=5)
    args.update(case["args"])
    before = snapshot(tmp_path)
    res = run_main(mps_control.main, args)
    assert_clear_failure(case, res)
    after = snapshot(tmp_path)
    if "systemd.json" in after and "systemd.json" not in before:      # only read-only systemctl queries allowed
        with open(str(tmp_path / "systemd.json")) as handle:
            calls = json.load(handle)["calls"]
        assert [c for c in calls if c[0] not in ("is-active", "is-enabled")] == []
        after.pop("systemd.json")
    assert after == before


# ----------------------------------------------------------------------------------------------- containerd
@pytest.mark.parametrize("case", _ids("containerd"))
def test_containerd(case, tmp_path):
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True)
    config = etc / "config.toml"
    text = case["config_text"]
    config.write_text(ctk_env.fixture_text("golden-input-v2.toml") if text == "golden" else text)
    private = tmp_path / "private"
    private.mkdir()
    ctk = ctk_env.ctk_wrapper(tmp_path / "bin", "1.20.0")
    args = dict(config_path=str(config), drop_in_path=str(etc / "conf.d" / "99-nvidia.toml"), nvidia_ctk_path=ctk,
                containerd_path=ctk_env.require_containerd())
    args.update(substitute(case["args"], {"etc": str(etc)}))
    before = snapshot(tmp_path)
    res = run_main(containerd_runtime.main, args, _ansible_tmpdir=str(private), _ansible_keep_remote_files=False)
    assert_clear_failure(case, res)
    assert snapshot(tmp_path) == before


# ----------------------------------------------------------------------------------------------- Kubernetes API
@pytest.mark.parametrize("case", _ids("kube"))
def test_kube(case, kube_api, tmp_path, monkeypatch):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    kube_api.add_node("gpu-node-1", hostname="gpu-node-1", internal_ip="10.0.0.11",
                      labels={"gpuops.example.com/old": "x"})
    kube_api.put({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "runc"},
                  "handler": "runc"})
    objects = json.dumps(sorted((list(k), v) for k, v in kube_api.objects.items()), sort_keys=True)
    args = dict(kubeconfig=kube_api.kubeconfig_path)
    if case["module"] == "node_labels":
        args.update(hostname=[], internal_ips=[])
    args.update(case["args"])
    res = run_main(MODULES[case["module"]].main, args)
    assert_clear_failure(case, res)
    assert kube_api.writes(dry_run=False) == []
    assert json.dumps(sorted((list(k), v) for k, v in kube_api.objects.items()), sort_keys=True) == objects


# ----------------------------------------------------------------------------------------------- device_plugin
@pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")
@pytest.mark.parametrize("case", _ids("helm"))
def test_helm(case, tmp_path, monkeypatch):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_"):
            monkeypatch.delenv(var)
    state = str(tmp_path / "helm-state.json")
    binary = str(tmp_path / "helm")
    with open(binary, "w") as handle:
        handle.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, FAKE_HELM))
    os.chmod(binary, 0o755)
    monkeypatch.setenv("FAKE_HELM_STATE", state)
    monkeypatch.setenv("FAKE_HELM_REAL", HELM)
    chart = str(tmp_path / "chart")
    shutil.copytree(CHART, chart)
    args = dict(binary_path=binary, chart_path=chart, profiles=PROFILES, default_profile="default",
                kubeconfig="/nonexistent/kubeconfig")
    for key, value in case["args"].items():
        if value is None:
            args.pop(key, None)
        else:
            args[key] = value
    res = run_main(device_plugin.main, args)
    assert_clear_failure(case, res)
    if os.path.exists(state):
        with open(state) as handle:
            data = json.load(handle)
        assert not HELM_MUTATING & set(e["argv"][0] for e in data["log"])
        assert data.get("releases", {}) == {}


# ----------------------------------------------------------------------------------------------- roles
ROLE_PLAY = """---
- name: Bad-input corpus, role cases (one host per case)
  hosts: all
  gather_facts: false
  environment: "{{ gpuops_environment }}"
  tasks:
    - name: Apply the case's role
      ansible.builtin.include_role:
        name: "gpuops.nvidia.{{ case_role }}"
"""


@pytest.fixture(scope="module")
def role_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("roles")
    hosts, dirs = {}, {}
    for case in CASES:
        if case["kind"] != "role":
            continue
        d = base / case["id"]
        d.mkdir()
        state = str(d / "state.json")
        SimulatedBackend(state, shape="hgx-h200").clear_call_log()
        config = d / "etc" / "containerd" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(ctk_env.fixture_text("golden-input-v2.toml"))
        hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "case_role": case["role"],
              "gpuops_environment": {"GPUOPS_SIMULATED_GPUS": state,
                                     "PATH": FAKE_BIN + os.pathsep + os.environ["PATH"],
                                     "FAKE_SYSTEMD_STATE": str(d / "systemd.json"),
                                     "FAKE_SYSTEMD_UNIT_DIR": str(d / "units")},
              # everything a role could write points into the case directory
              "mig_root": str(d / "root"), "mig_manage_systemd": False, "mig_manage_services": False,
              "mig_boot_python": sys.executable,
              "compute_mode_unit_directory": str(d / "units"), "compute_mode_manage_systemd": False,
              "mps_control_service_manager": "none", "mps_control_pipe_directory": str(d / "pipe"),
              "mps_control_log_directory": str(d / "log"),
              "containerd_runtime_config_path": str(config),
              "containerd_runtime_drop_in_path": str(config.parent / "conf.d" / "99-nvidia.toml"),
              "containerd_runtime_nvidia_ctk_path": ctk_env.ctk_wrapper(base / ("bin-" + case["id"])),
              "containerd_runtime_containerd_path": ctk_env.require_containerd(),
              "containerd_runtime_restart_method": "none"}
        hv.update(case["vars"])
        hosts[case["id"]] = hv
        dirs[case["id"]] = str(d)
    inventory = base / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    playbook = base / "play.yml"
    playbook.write_text(ROLE_PLAY)
    before = dict((cid, snapshot(d)) for cid, d in dirs.items())
    data, proc = run_playbook(str(playbook), inventory=str(inventory))
    assert data is not None, proc.stdout + proc.stderr
    after = dict((cid, snapshot(d)) for cid, d in dirs.items())
    return data, before, after


def _first_failure(data, host):
    for play in data["plays"]:
        for task in play["tasks"]:
            res = task["hosts"].get(host)
            if res and res.get("failed") and not res.get("skipped"):
                return res
    return {"failed": False, "msg": "no task failed for %s" % host}


@pytest.mark.slow
@pytest.mark.parametrize("case", _ids("role"))
def test_role(case, role_run):
    data, before, after = role_run
    res = _first_failure(data, case["id"])
    res.setdefault("msg", json.dumps(res.get("argument_errors") or res))
    if res.get("failed") and isinstance(res.get("argument_errors"), list):
        res["msg"] = " ".join([res["msg"]] + [e for e in res["argument_errors"] if e not in res["msg"]])
    assert_clear_failure(case, res)
    assert after[case["id"]] == before[case["id"]]
