"""device_plugin with the REAL helm binary against the fake API server over real HTTP.

helm stores its release in a Secret (sent as protobuf, decoded by tests/support/k8s_protobuf.py) and applies the
chart's objects server-side; the fake API server keeps them, so these tests see what a cluster would hold.
Plain HTTP: client-go only sends credentials over TLS, so this server runs without token checks (auth failures are
tested with the Python client in test_node_labels.py).
"""
import base64
import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.modules import device_plugin
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.modrun import run_main as run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
NS = "nvidia-device-plugin"
H200 = {"index": 0, "uuid": "GPU-h0", "name": "NVIDIA H200", "compute_capability": "9.0",
        "memory_total_bytes": 150754820096, "memory_total_mib": 143771, "mig_mode_current": "Disabled"}

pytestmark = pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")

PROFILES = [{"name": "default"}, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4},
            {"name": "mps-4", "sharing": "mps", "replicas": 4, "rename_by_default": True}]


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var.startswith("HELM_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    api = FakeKubeApi(tokens=None).start()
    api.kubeconfig_path = str(tmp_path / "kubeconfig")
    with open(api.kubeconfig_path, "w") as handle:
        yaml.safe_dump(api.kubeconfig(), handle)
    api.chart = str(tmp_path / "nvidia-device-plugin")
    shutil.copytree(CHART, api.chart)
    try:
        yield api
    finally:
        api.stop()


def args(cluster, **kw):
    base = dict(binary_path=HELM, chart_path=cluster.chart, profiles=PROFILES, default_profile="default",
                kubeconfig=cluster.kubeconfig_path)
    base.update(kw)
    return base


def configmap(cluster):
    return cluster.get("", "configmaps", "nvdp-nvidia-device-plugin-configs", NS)


def release_secrets(cluster):
    return sorted(name for (g, plural, ns, name) in cluster.objects if plural == "secrets" and ns == NS)


def test_check_mode_writes_nothing_to_the_cluster(cluster):
    res = run_module(device_plugin.main, args(cluster), check_mode=True, diff=True)
    assert res["changed"] is True, res
    assert cluster.writes() == []
    assert res["diff"]["before"] == {}


def test_install_idempotent_upgrade(cluster):
    first = run_module(device_plugin.main, args(cluster))
    assert first["changed"] is True, first.get("msg")
    assert first["release"]["status"] == "deployed" and first["release"]["revision"] == "1"
    assert release_secrets(cluster) == ["sh.helm.release.v1.nvdp.v1"]
    cm = configmap(cluster)
    assert {k: yaml.safe_load(v) for k, v in cm["data"].items()} == first["configs"]
    ds = sorted(name for (g, plural, ns, name) in cluster.objects if plural == "daemonsets")
    assert ds == ["nvdp-nvidia-device-plugin", "nvdp-nvidia-device-plugin-gpu-feature-discovery",
                  "nvdp-nvidia-device-plugin-mps-control-daemon"]
    writes = len(cluster.writes())
    second = run_module(device_plugin.main, args(cluster))
    assert second["changed"] is False, second["changes"]
    assert len(cluster.writes()) == writes          # nothing written on the second run
    third = run_module(device_plugin.main, args(cluster, profiles=PROFILES[:2]), diff=True)
    assert third["changed"] is True and third["release"]["revision"] == "2"
    assert sorted(configmap(cluster)["data"]) == ["default", "ts-4"]
    assert "gfd" not in third["diff"]["after"]["values"]
    assert third["diff"]["before"]["values"]["gfd"] == {"enabled": True}


def _deny_next_configmap_patch(cluster):
    # A refusal helm does not retry (it retries 500s): an admission webhook denying the new ConfigMap.
    cluster.inject_failure("PATCH", "/configmaps/nvdp-nvidia-device-plugin-configs$", code=422, reason="Invalid",
                           message="admission webhook \"policy.example.com\" denied the request")


def test_failed_upgrade_is_rolled_back_with_helm_rollback(cluster):
    run_module(device_plugin.main, args(cluster))
    before = configmap(cluster)["data"]
    _deny_next_configmap_patch(cluster)
    profiles = [PROFILES[0], dict(PROFILES[1], replicas=8), PROFILES[2]]
    res = run_module(device_plugin.main, args(cluster, profiles=profiles))
    assert res["failed"] and "denied the request" in res["msg"]
    assert res["rolled_back_to"] == 1 and "rollback_error" not in res
    # the rollback was helm's last operation; the release is read once more afterwards (left pending?)
    assert [c[1:4] for c in res["commands"][-2:]] == [["rollback", "nvdp", "1"], ["list", "--namespace", NS]]
    assert configmap(cluster)["data"] == before
    assert run_module(device_plugin.main, args(cluster), check_mode=True)["changed"] is False


def test_rollback_refused_by_helm_falls_back_to_reapplying_previous_values(cluster):
    # The failed upgrade would have removed GFD; it stopped before deleting it, so the cluster holds a DaemonSet
    # the failed revision's manifest does not list, and `helm rollback` refuses ("original object ... not found").
    run_module(device_plugin.main, args(cluster))
    before = configmap(cluster)["data"]
    _deny_next_configmap_patch(cluster)
    res = run_module(device_plugin.main, args(cluster, profiles=[{"name": "default", "sharing": "time-slicing",
                                                                  "replicas": 2}]))
    assert res["failed"] and "denied the request" in res["msg"]
    assert "original object DaemonSet" in res["rollback_error"]
    assert res["rolled_back_to"] == 1 and "re-applied with helm upgrade" in res["msg"]
    assert configmap(cluster)["data"] == before
    after = run_module(device_plugin.main, args(cluster), check_mode=True)
    assert after["changed"] is False, after["changes"]


def test_verify_against_cluster_state(cluster):
    cluster.add_node("gpu-1", allocatable={"cpu": "64", "nvidia.com/gpu.shared": "8"})
    cluster.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    owner = {"kind": "DaemonSet", "name": "nvdp-nvidia-device-plugin-mps-control-daemon", "apiVersion": "apps/v1",
             "uid": "u"}
    cluster.put({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nvdp-nvidia-device-plugin-mps-control-daemon-abcde", "namespace": NS,
                     "ownerReferences": [owner]},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "mps-control-daemon-ctr", "image": "x"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    res = run_module(device_plugin.main, args(cluster, verify=True, verify_timeout=1, nodes=[
        {"name": "gpu-1", "profile": "mps-4", "gpus": [H200, dict(H200, index=1)]}]))
    assert res["changed"] and res["verified"] == {"gpu-1": {"nvidia.com/gpu.shared": "8"}}, res.get("msg")


def test_uninstall(cluster):
    run_module(device_plugin.main, args(cluster))
    res = run_module(device_plugin.main, dict(binary_path=HELM, kubeconfig=cluster.kubeconfig_path, state="absent"))
    assert res["changed"] and not res.get("failed"), res.get("msg")
    assert release_secrets(cluster) == [] and configmap(cluster) is None
    assert not [k for k in cluster.objects if k[1] == "daemonsets"]


def test_unreachable_api_is_a_clear_error(cluster, tmp_path):
    kc = cluster.kubeconfig()
    kc["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    path = tmp_path / "dead-kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    res = run_module(device_plugin.main, args(cluster, kubeconfig=str(path)), check_mode=True)
    assert res["failed"] and "helm cannot reach the Kubernetes API" in res["msg"], res["msg"]
    assert "127.0.0.1:9" in res["msg"]


needs_openssl = pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")


@pytest.fixture
def tls_cluster(tmp_path, monkeypatch):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var.startswith("HELM_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    api = FakeKubeApi(tokens={"rw-token": "rw", "ro-token": "ro"}).start(tls_dir=str(tmp_path))
    api.chart = str(tmp_path / "nvidia-device-plugin")
    shutil.copytree(CHART, api.chart)
    try:
        yield api
    finally:
        api.stop()


def tls_args(api, token, **kw):
    base = dict(binary_path=HELM, chart_path=api.chart, profiles=PROFILES, default_profile="default",
                host=api.url, api_key=token, ca_cert=api.ca_file)
    base.update(kw)
    return base


@needs_openssl
def test_https_with_token_installs(tls_cluster):
    res = run_module(device_plugin.main, tls_args(tls_cluster, "rw-token"))
    assert res["changed"] and res["release"]["status"] == "deployed", res.get("msg")
    assert all(r["authorization"] == "Bearer" for r in tls_cluster.requests if r["path"] != "/version")
    assert "rw-token" not in json.dumps(res)


@needs_openssl
def test_bad_token_gives_401_hint(tls_cluster):
    res = run_module(device_plugin.main, tls_args(tls_cluster, "wrong-token"), check_mode=True)
    assert res["failed"] and "refused the credentials (401)" in res["msg"], res["msg"]
    assert "wrong-token" not in json.dumps(res)
    assert tls_cluster.writes() == []


@needs_openssl
def test_readonly_token_gives_403_hint(tls_cluster):
    res = run_module(device_plugin.main, tls_args(tls_cluster, "ro-token"))
    assert res["failed"] and "lack RBAC permission (403)" in res["msg"], res["msg"]
    assert "is forbidden" in res["msg"]


def _set_status(cluster, revision, status):
    """Rewrite a release record as a helm process killed mid-operation leaves it (status pending-*): helm keeps the
    status both in the Secret's label and in the gzipped release document inside it."""
    key = ("", "secrets", NS, "sh.helm.release.v1.nvdp.v%d" % revision)
    secret = cluster.objects[key]
    doc = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"]))))
    doc["info"]["status"] = status
    packed = base64.b64encode(gzip.compress(json.dumps(doc).encode()))
    secret["data"]["release"] = base64.b64encode(packed).decode()
    secret["metadata"]["labels"]["status"] = status


def test_pending_release_left_by_a_dead_run_of_ours_is_rolled_back_then_upgraded(cluster):
    assert run_module(device_plugin.main, args(cluster))["changed"] is True
    record = device_plugin._helm.OperationRecord(os.path.expanduser("~/.ansible/gpuops"), NS, "nvdp")
    # a second run started `helm upgrade` (new values) and was SIGKILLed: record written, lock gone, release pending
    record.begin("upgrade --install")
    record._handle.close()
    assert run_module(device_plugin.main, args(cluster, values={"image": {"pullPolicy": "Always"}}),
                      )["changed"] is True
    _set_status(cluster, 2, "pending-upgrade")
    assert record.probe() is None       # finished runs clear the record
    record.begin("upgrade --install")
    record._handle.close()               # the killed process: its lock is gone, its record is not
    assert record.probe() == "died"

    check = run_module(device_plugin.main, args(cluster), check_mode=True)
    assert check["changed"] is True and check["recovered"].startswith("would be release was pending-upgrade")
    assert release_secrets(cluster)[-1] == "sh.helm.release.v1.nvdp.v2"            # check mode: nothing done

    res = run_module(device_plugin.main, args(cluster))
    assert res["changed"] is True, res.get("msg")
    assert "rolled back to revision 1" in res["recovered"]
    assert res["release"]["status"] == "deployed"
    assert any(c[1] == "rollback" for c in res["commands"])
    assert run_module(device_plugin.main, args(cluster))["changed"] is False


def test_pending_first_install_left_by_a_dead_run_is_uninstalled_then_installed(cluster):
    assert run_module(device_plugin.main, args(cluster))["changed"] is True
    _set_status(cluster, 1, "pending-install")
    record = device_plugin._helm.OperationRecord(os.path.expanduser("~/.ansible/gpuops"), NS, "nvdp")
    record.begin("upgrade --install")
    record._handle.close()
    res = run_module(device_plugin.main, args(cluster))
    assert res["changed"] is True, res.get("msg")
    assert "uninstalled (it never deployed)" in res["recovered"]
    assert res["release"]["status"] == "deployed"
    assert run_module(device_plugin.main, args(cluster))["changed"] is False


def test_pending_release_of_unknown_origin_is_left_alone_until_pending_timeout(cluster):
    assert run_module(device_plugin.main, args(cluster))["changed"] is True
    _set_status(cluster, 1, "pending-upgrade")
    seen = len(cluster.writes(dry_run=False))
    res = run_module(device_plugin.main, args(cluster))
    assert res["failed"] and "is pending-upgrade" in res["msg"] and "pending_timeout=900" in res["msg"], res
    assert len(cluster.writes(dry_run=False)) == seen                         # nothing touched
    res = run_module(device_plugin.main, args(cluster, pending_timeout=0))
    assert res["changed"] is True and "pending for" in res["recovered"], res.get("msg")
    assert res["release"]["status"] == "deployed"


def test_pending_release_while_our_own_operation_runs_is_refused(cluster):
    assert run_module(device_plugin.main, args(cluster))["changed"] is True
    _set_status(cluster, 1, "pending-upgrade")
    record = device_plugin._helm.OperationRecord(os.path.expanduser("~/.ansible/gpuops"), NS, "nvdp")
    os.makedirs(os.path.dirname(record.path), exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; h=open(sys.argv[1],'a+'); "
                               "fcntl.flock(h, fcntl.LOCK_EX); h.write('{\"pid\": 1}'); h.flush(); "
                               "print('held', flush=True); time.sleep(60)", record.path],
                              stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        res = run_module(device_plugin.main, args(cluster, pending_timeout=0))
        assert res["failed"] and "is running now from this controller" in res["msg"], res
    finally:
        holder.kill()
        holder.wait()


def test_lost_final_status_write_fails_the_run_and_the_next_run_recovers(cluster):
    """helm saves the release as pending-install, creates the objects, then saves it as deployed; when that last
    write fails it only logs it and exits 0 (a site.yml converge with an API 500 there once passed with the release
    stuck pending). The module must see the pending release, fail, and leave the record for the next run."""
    cluster.inject_failure("PUT", r"/secrets/sh\.helm\.release\.v1\.nvdp\.v1$")
    res = run_module(device_plugin.main, args(cluster))
    assert res["failed"] and "left pending-install" in res["msg"] and "next run recovers" in res["msg"], res
    assert any(r.get("path", "").endswith("nvdp.v1") and r["method"] == "PUT" for r in cluster.requests)
    record = device_plugin._helm.OperationRecord(os.path.expanduser("~/.ansible/gpuops"), NS, "nvdp")
    assert record.probe() == "died"            # kept: the next run knows the pending release is ours

    res = run_module(device_plugin.main, args(cluster))
    assert res["changed"] is True and "uninstalled (it never deployed)" in res["recovered"], res.get("msg")
    assert res["release"]["status"] == "deployed"
    assert record.probe() is None
    assert run_module(device_plugin.main, args(cluster))["changed"] is False


# ---- skip_xids: DP_DISABLE_HEALTHCHECKS on the plugin DaemonSet (the chart has no value for it) ---------------------
PLUGIN_DS = "nvdp-nvidia-device-plugin"
DEFAULT_POLICY_SKIPS = [8, 11, 13, 25, 31, 32, 43, 45, 63, 69, 80]


def plugin_env(cluster):
    """The plugin container's DP_DISABLE_HEALTHCHECKS (None when unset), the DaemonSet's mark, and the container's
    other variables' names."""
    ds = cluster.get("apps", "daemonsets", PLUGIN_DS, NS)
    ctr = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "nvidia-device-plugin-ctr"][0]
    value = [e.get("value") for e in ctr["env"] if e["name"] == "DP_DISABLE_HEALTHCHECKS"]
    mark = (ds["metadata"].get("annotations") or {}).get("gpuops.nvidia/dp-disable-healthchecks")
    return (value[0] if value else None), mark, [e["name"] for e in ctr["env"] if e["name"] != "DP_DISABLE_HEALTHCHECKS"]


def our_daemonset_writes(cluster):
    return [r for r in cluster.writes() if "/daemonsets/" in r["path"]
            and r["content_type"] == "application/strategic-merge-patch+json"]


def test_skip_xids_is_written_on_the_plugin_container_and_survives_helm_upgrades(cluster):
    check = run_module(device_plugin.main, args(cluster, skip_xids=DEFAULT_POLICY_SKIPS), check_mode=True)
    assert check["changed"] and cluster.writes() == []
    assert check["health_checks"]["daemonsets"] == {
        NS + "/" + PLUGIN_DS: {"action": "missing", "before": None, "after": "8,11,25,32,63,69,80"}}
    first = run_module(device_plugin.main, args(cluster, skip_xids=DEFAULT_POLICY_SKIPS), diff=True)
    assert first["changed"] and not first.get("failed"), first.get("msg")
    assert first["health_checks"]["value"] == "8,11,25,32,63,69,80"     # 13, 31, 43, 45: the plugin's own
    assert first["health_checks"]["plugin_skips_blocked"] == [68, 109]
    assert first["diff"]["after"]["DP_DISABLE_HEALTHCHECKS %s/%s" % (NS, PLUGIN_DS)] == "8,11,25,32,63,69,80"
    value, mark, others = plugin_env(cluster)
    assert value == mark == "8,11,25,32,63,69,80" and "MPS_ROOT" in others and "CONFIG_FILE" in others
    assert len(our_daemonset_writes(cluster)) == 1
    # nothing to do again
    writes = len(cluster.writes())
    again = run_module(device_plugin.main, args(cluster, skip_xids=DEFAULT_POLICY_SKIPS))
    assert again["changed"] is False and len(cluster.writes()) == writes, again.get("changes")
    # a helm upgrade (server-side apply of the plugin DaemonSet) leaves the variable this module wrote
    upgraded = run_module(device_plugin.main, args(cluster, profiles=PROFILES[:2], skip_xids=DEFAULT_POLICY_SKIPS))
    assert upgraded["changed"] and upgraded["release"]["revision"] == "2"
    assert upgraded["health_checks"]["daemonsets"][NS + "/" + PLUGIN_DS]["action"] == "none"
    assert plugin_env(cluster)[:2] == ("8,11,25,32,63,69,80",) * 2 and len(our_daemonset_writes(cluster)) == 1
    # all, then nothing beyond the plugin's own list: the variable and the mark go
    assert run_module(device_plugin.main, args(cluster, profiles=PROFILES[:2], skip_xids="all"))["changed"]
    assert plugin_env(cluster)[:2] == ("all", "all")
    gone = run_module(device_plugin.main, args(cluster, profiles=PROFILES[:2], skip_xids=[13]))
    assert gone["changed"] and gone["health_checks"]["value"] is None
    assert plugin_env(cluster)[0:2] == (None, None) and "MPS_ROOT" in plugin_env(cluster)[2]


def test_skip_xids_leaves_a_value_it_did_not_write(cluster):
    run_module(device_plugin.main, args(cluster))
    ds = cluster.get("apps", "daemonsets", PLUGIN_DS, NS)
    for ctr in ds["spec"]["template"]["spec"]["containers"]:
        if ctr["name"] == "nvidia-device-plugin-ctr":
            ctr["env"].append({"name": "DP_DISABLE_HEALTHCHECKS", "value": "xids"})
    cluster.put(ds)
    writes = len(cluster.writes())
    res = run_module(device_plugin.main, args(cluster, skip_xids=[63]))
    assert res["changed"] is False and len(cluster.writes()) == writes
    assert res["health_checks"]["daemonsets"][NS + "/" + PLUGIN_DS]["action"] == "foreign"
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in res.get("warnings", [])]
    assert any("DP_DISABLE_HEALTHCHECKS=xids" in w and "left as it is" in w for w in warnings), warnings
    assert plugin_env(cluster)[:2] == ("xids", None)


@pytest.mark.parametrize("skip_xids,fragment", [
    ("auto", "'auto' is not a valid setting"), ([0], "0 is the plugin's own word for every Xid"),
    ({"a": 1}, "a dict is not a valid setting")])
def test_a_bad_skip_xids_changes_nothing(cluster, skip_xids, fragment):
    res = run_module(device_plugin.main, args(cluster, skip_xids=skip_xids))
    assert res["failed"] and fragment in res["msg"] and "nothing changed" in res["msg"], res["msg"]
    assert cluster.writes() == []
