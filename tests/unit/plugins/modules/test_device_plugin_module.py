"""device_plugin module: real helm for show/template, tests/support/fake_helm.py for release commands, and the
fake API server for rollout verification."""
import json
import os
import shutil

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.modules import device_plugin
from tests.support.modrun import run_main as run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
FAKE = os.path.join(ROOT, "tests", "support", "fake_helm.py")
H200 = {"index": 0, "uuid": "GPU-h0", "name": "NVIDIA H200", "compute_capability": "9.0",
        "memory_total_bytes": 150754820096, "memory_total_mib": 143771, "mig_mode_current": "Disabled"}

pytestmark = pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")


class HelmRig(object):
    def __init__(self, tmp_path, monkeypatch):
        self.state = str(tmp_path / "helm-state.json")
        self.binary = str(tmp_path / "helm")
        with open(self.binary, "w") as handle:
            handle.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (os.path.join(ROOT, ".venv", "bin", "python"), FAKE))
        os.chmod(self.binary, 0o755)
        monkeypatch.setenv("FAKE_HELM_STATE", self.state)
        monkeypatch.setenv("FAKE_HELM_REAL", HELM)
        self.chart = str(tmp_path / "nvidia-device-plugin")
        shutil.copytree(CHART, self.chart)

    def set_chart_version(self, version):
        path = os.path.join(self.chart, "Chart.yaml")
        meta = yaml.safe_load(open(path))
        meta["version"] = meta["appVersion"] = version
        with open(path, "w") as handle:
            yaml.safe_dump(meta, handle)

    def data(self):
        with open(self.state) as handle:
            return json.load(handle)

    def verbs(self):
        return [e["argv"][0] if e["argv"][0] != "get" else "get values" for e in self.data()["log"]]

    def release(self, ns="nvidia-device-plugin", name="nvdp"):
        return self.data()["releases"].get("%s/%s" % (ns, name))

    def fail_next_upgrades(self, n):
        state = self.data() if os.path.exists(self.state) else {"releases": {}, "log": []}
        state["fail_upgrades"] = n
        with open(self.state, "w") as handle:
            json.dump(state, handle)


@pytest.fixture
def rig(tmp_path, monkeypatch):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_"):
            monkeypatch.delenv(var)
    return HelmRig(tmp_path, monkeypatch)


PROFILES = [{"name": "default"}, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4},
            {"name": "mps-4", "sharing": "mps", "replicas": 4, "rename_by_default": True}]


def args(rig, **kw):
    base = dict(binary_path=rig.binary, chart_path=rig.chart, profiles=PROFILES, default_profile="default",
                kubeconfig="/nonexistent/kubeconfig")
    base.update(kw)
    return base


MUTATING = {"upgrade", "rollback", "uninstall"}


def test_check_mode_reports_diff_and_runs_nothing_mutating(rig):
    res = run_module(device_plugin.main, args(rig), check_mode=True, diff=True)
    assert res["changed"] is True, res
    assert not MUTATING & set(rig.verbs())
    assert rig.release() is None
    assert res["diff"]["before"] == {}
    assert sorted(res["diff"]["after"]["values"]["config"]["map"]) == ["default", "mps-4", "ts-4"]
    assert res["diff"]["after"]["values"]["gfd"] == {"enabled": True}
    assert "template" in rig.verbs()       # rendered before anything else


def test_apply_then_idempotent_then_change(rig):
    first = run_module(device_plugin.main, args(rig), diff=True)
    assert first["changed"] is True, first
    rel = rig.release()
    assert len(rel) == 1 and rel[0]["status"] == "deployed" and rel[0]["chart"] == "nvidia-device-plugin-0.20.0"
    assert rel[0]["values"] == first["chart_values"]
    upgrade = [e["argv"] for e in rig.data()["log"] if e["argv"][0] == "upgrade"][0]
    vf = upgrade[upgrade.index("--values") + 1]
    assert upgrade == ["upgrade", "--install", "nvdp", rig.chart, "--namespace", "nvidia-device-plugin",
                       "--values", vf, "--reset-values", "--create-namespace"]
    second = run_module(device_plugin.main, args(rig))
    assert second["changed"] is False, second["changes"]
    assert len(rig.release()) == 1
    profiles = PROFILES[:2] + [dict(PROFILES[2], replicas=8)]
    third = run_module(device_plugin.main, args(rig, profiles=profiles), diff=True)
    assert third["changed"] is True and third["changes"] == ["values differ at config.map.mps-4"]
    assert "replicas: 4" in third["diff"]["before"]["values"]["config"]["map"]["mps-4"]
    assert "replicas: 8" in third["diff"]["after"]["values"]["config"]["map"]["mps-4"]
    assert len(rig.release()) == 2


def test_chart_version_change_is_a_change(rig):
    run_module(device_plugin.main, args(rig))
    rig.set_chart_version("0.20.1")
    res = run_module(device_plugin.main, args(rig))
    assert res["changed"] and "chart version 0.20.0 -> 0.20.1" in res["changes"]


def test_repo_install_argument_list_and_pinned_version_required(rig):
    res = run_module(device_plugin.main, args(rig, chart_path=None))
    assert res["failed"] and "chart_version is required" in res["msg"]
    assert not os.path.exists(rig.state)     # nothing ran at all


def test_failed_upgrade_rolls_back(rig):
    run_module(device_plugin.main, args(rig))
    rig.fail_next_upgrades(1)
    res = run_module(device_plugin.main, args(rig, profiles=PROFILES[:2]))
    assert res["failed"] and "UPGRADE FAILED" in res["msg"] and res["rolled_back_to"] == 1
    revs = rig.release()
    assert [r["status"] for r in revs] == ["superseded", "failed", "deployed"]
    assert revs[-1]["values"] == revs[0]["values"]
    rollback = [e["argv"] for e in rig.data()["log"] if e["argv"][0] == "rollback"][0]
    assert rollback == ["rollback", "nvdp", "1", "--namespace", "nvidia-device-plugin"]


def test_failed_first_install_says_there_is_nothing_to_roll_back(rig):
    rig.fail_next_upgrades(1)
    res = run_module(device_plugin.main, args(rig))
    assert res["failed"] and "no deployed revision to roll back to" in res["msg"]
    assert "rollback" not in rig.verbs()


def test_a_chart_version_that_is_not_the_charts_is_refused_with_the_commands_run(rig):
    """_helm_release's chart check raises a Refusal to the base (issue 48): the same message and commands, changed
    false, no helm write."""
    res = run_module(device_plugin.main, args(rig, chart_version="9.9.9"))
    assert res["failed"] and res["changed"] is False
    assert res["msg"] == ("chart_version 9.9.9 was given but the chart at %s is version 0.20.0; nothing changed"
                          % rig.chart)
    assert res["commands"] and res["commands"][0][1:3] == ["show", "chart"], res["commands"]
    assert not MUTATING & set(rig.verbs())


def test_failed_release_is_upgraded_again(rig):
    rig.fail_next_upgrades(1)
    run_module(device_plugin.main, args(rig))
    res = run_module(device_plugin.main, args(rig))
    assert res["changed"] and "release status is failed" in res["changes"]


def test_wait_and_timeout_flags(rig):
    run_module(device_plugin.main, args(rig, wait=True, timeout="10m"))
    upgrade = [e["argv"] for e in rig.data()["log"] if e["argv"][0] == "upgrade"][0]
    assert upgrade[-3:] == ["--wait", "--timeout", "10m"]


def test_bad_profile_refused_before_any_helm_mutation(rig):
    res = run_module(device_plugin.main, args(rig, profiles=[{"name": "default", "sharing": "mps", "replicas": 1}]))
    assert res["failed"] and "number of replicas must be >= 2" in res["msg"] and "nothing changed" in res["msg"]
    assert not MUTATING & set(rig.verbs())


def test_negative_pending_timeout_refused_before_helm_runs(rig):
    res = run_module(device_plugin.main, args(rig, pending_timeout=-1))
    assert res["failed"] and "pending_timeout must be a whole number of seconds from 0 to 86400 (one day), got -1" in res["msg"]
    assert "nothing changed" in res["msg"] and "commands" not in res     # refused before helm ran at all


def test_mps_refused_on_old_chart(rig):
    rig.set_chart_version("0.14.5")
    res = run_module(device_plugin.main, args(rig))
    assert res["failed"] and "MPS needs chart >= 0.15.0" in res["msg"]


def test_global_value_refused(rig):
    res = run_module(device_plugin.main, args(rig, values={"migStrategy": "mixed"}))
    assert res["failed"] and "helm value migStrategy is refused" in res["msg"]


def test_chart_path_version_mismatch(rig):
    res = run_module(device_plugin.main, args(rig, chart_version="0.17.0"))
    assert res["failed"] and "is version 0.20.0" in res["msg"]


def test_default_namespace_refused(rig):
    res = run_module(device_plugin.main, args(rig, namespace="default"))
    assert res["failed"] and "namespace 'default' is refused" in res["msg"]


def test_shares_and_node_labels_returned(rig):
    res = run_module(device_plugin.main, args(rig, nodes=[{"name": "gpu-1", "profile": "mps-4",
                                                           "gpus": {"gpus": [H200, dict(H200, index=1)]}}]),
                     check_mode=True)
    assert res["node_labels"] == {"gpu-1": "mps-4"}
    assert res["shares"]["gpu-1"]["active_thread_percentage"] == 25
    assert res["shares"]["gpu-1"]["gpus"][0]["memory_per_replica_mib"] == 35942
    assert res["expected_allocatable"] == {"gpu-1": {"nvidia.com/gpu.shared": 8}}


def test_credentials_go_through_env_not_argv(rig):
    res = run_module(device_plugin.main, args(rig, kubeconfig=None, host="https://10.0.0.1:6443",
                                              api_key="s3cr3t-token"), check_mode=True)
    assert res["changed"]
    log = rig.data()["log"]
    assert all(e["env_token"] and e["env_server"] == "https://10.0.0.1:6443" for e in log
               if e["argv"][0] in ("list", "get"))
    assert "s3cr3t-token" not in json.dumps(log) and "s3cr3t-token" not in json.dumps(res)


def test_kubeconfig_dict_is_written_to_a_private_temp_file(rig, kube_api):
    cfg = kube_api.kubeconfig(token=kube_api.token)
    res = run_module(device_plugin.main, args(rig, kubeconfig=cfg), check_mode=True)
    assert res["changed"]
    paths = {e["kubeconfig"] for e in rig.data()["log"] if e["argv"][0] == "list"}
    assert len(paths) == 1 and not os.path.exists(paths.pop())   # cleaned up after the run
    assert kube_api.token not in json.dumps(res)


def test_absent_uninstalls_and_is_idempotent(rig):
    run_module(device_plugin.main, args(rig))
    check = run_module(device_plugin.main, args(rig, state="absent"), check_mode=True)
    assert check["changed"] and rig.release()
    res = run_module(device_plugin.main, args(rig, state="absent"))
    assert res["changed"] and rig.release() is None
    assert run_module(device_plugin.main, args(rig, state="absent"))["changed"] is False


# ---- rollout verification against the fake API server -------------------------------------------------------------
def _mps_pod(kube_api, node, ready):
    owner = {"kind": "DaemonSet", "name": "nvdp-nvidia-device-plugin-mps-control-daemon", "apiVersion": "apps/v1",
             "uid": "x"}
    kube_api.put({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nvdp-nvidia-device-plugin-mps-control-daemon-%s" % node,
                     "namespace": "nvidia-device-plugin", "ownerReferences": [owner]},
        "spec": {"nodeName": node, "containers": [{"name": "mps", "image": "x"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def test_verify_passes_when_allocatable_matches_and_mps_daemon_ready(rig, kube_api):
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nvidia-device-plugin"}})
    kube_api.add_node("gpu-1", allocatable={"cpu": "64", "nvidia.com/gpu.shared": "8"})
    kube_api.add_node("gpu-2", allocatable={"cpu": "64", "nvidia.com/gpu": "2"})
    _mps_pod(kube_api, "gpu-1", ready=True)
    res = run_module(device_plugin.main, args(
        rig, kubeconfig=kube_api.kubeconfig_path, verify=True, verify_timeout=1,
        nodes=[{"name": "gpu-1", "profile": "mps-4", "gpus": [H200, dict(H200, index=1)]},
               {"name": "gpu-2", "profile": "default", "gpus": [H200, dict(H200, index=1)]}]))
    assert res["changed"] and res["verified"]["gpu-1"] == {"nvidia.com/gpu.shared": "8"}, res


def test_verify_fails_with_what_differs(rig, kube_api):
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nvidia-device-plugin"}})
    kube_api.add_node("gpu-1", allocatable={"cpu": "64", "nvidia.com/gpu": "2"})
    _mps_pod(kube_api, "gpu-1", ready=False)
    res = run_module(device_plugin.main, args(
        rig, kubeconfig=kube_api.kubeconfig_path, verify=True, verify_timeout=0,
        nodes=[{"name": "gpu-1", "profile": "mps-4", "gpus": [H200, dict(H200, index=1)]}]))
    assert res["failed"]
    assert "node gpu-1 advertises nvidia.com/gpu.shared=0, expected 8" in res["msg"]
    assert "MPS control daemon pod is not ready" in res["msg"]


class _ConflictingKube(object):
    """A client whose DaemonSet another writer changes between this run's read and its first patch: the first patch
    is answered 409 Conflict; ``conflicts`` of them in all."""

    def __init__(self, conflicts):
        self.conflicts, self.patches, self.reads = conflicts, [], 0

    def get(self, what, path):
        self.reads += 1
        return {"metadata": {"name": "nvidia-device-plugin", "resourceVersion": str(self.reads), "annotations": {}},
                "spec": {"template": {"spec": {"containers": [{"name": "nvidia-device-plugin-ctr", "env": []}]}}}}

    def patch(self, what, path, body, strategic=False):
        if self.conflicts > 0:
            self.conflicts -= 1
            raise device_plugin._kube.KubeError("conflict", status=409, reason="Conflict")
        self.patches.append(body)


class _Module(object):
    check_mode, _diff = False, False

    def warn(self, msg):
        raise AssertionError("no warning expected: %s" % msg)


def _health_env(kube):
    run = device_plugin.DevicePluginRelease.__new__(device_plugin.DevicePluginRelease)
    run.module, run.result = _Module(), {"changed": False}
    return run, run.health_env(kube, "nvidia-device-plugin", "nvidia-device-plugin", "79,48")


def test_skip_xids_write_that_meets_a_conflict_is_read_planned_and_written_again_once():
    kube = _ConflictingKube(conflicts=1)
    run, plan = _health_env(kube)
    assert plan["action"] == "set" and run.result["changed"] is True
    assert kube.reads == 2 and len(kube.patches) == 1
    # the write carries the resourceVersion of the second read, not of the one the conflict answered
    assert kube.patches[0]["metadata"]["resourceVersion"] == "2"
    assert kube.patches[0]["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "DP_DISABLE_HEALTHCHECKS", "value": "79,48"}]


def test_skip_xids_write_that_meets_a_second_conflict_fails_with_it():
    kube = _ConflictingKube(conflicts=2)
    with pytest.raises(device_plugin._kube.KubeError) as failed:
        _health_env(kube)
    assert failed.value.status == 409 and kube.reads == 2 and kube.patches == []
