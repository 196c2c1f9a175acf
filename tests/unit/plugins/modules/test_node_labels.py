"""node_labels: the real kubernetes client over real HTTP against the fake API server (tests/support)."""
import json
import os
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import node_labels
from tests.support.modrun import run_main as run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


# no K8S_AUTH_* / KUBECONFIG of the machine running the tests, HOME a scratch directory (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")


@pytest.fixture
def node(kube_api):
    kube_api.add_node("gpu-node-1", hostname="gpu-node-1", internal_ip="10.0.0.11",
                      labels={"gpuops.example.com/old": "x", "other.example.com/keep": "y"})
    kube_api.add_node("cpu-node-1", internal_ip="10.0.0.12")
    return "gpu-node-1"


def args(kube_api, **kw):
    base = dict(kubeconfig=kube_api.kubeconfig_path, node_name="gpu-node-1", hostname=[], internal_ips=[])
    base.update(kw)
    return base


def test_check_mode_uses_server_dry_run_and_stores_nothing(kube_api, node):
    before = kube_api.node_labels(node)
    res = run_module(node_labels.main, args(kube_api, device_plugin_config="mps-4"), check_mode=True, diff=True)
    assert res["changed"] is True
    assert res["labels"]["nvidia.com/device-plugin.config"] == "mps-4"
    assert kube_api.node_labels(node) == before
    patches = kube_api.writes()
    assert len(patches) == 1 and patches[0]["query"]["dryRun"] == ["All"]
    assert patches[0]["content_type"] == "application/merge-patch+json"
    assert res["diff"]["after"]["labels"]["nvidia.com/device-plugin.config"] == "mps-4"
    assert "nvidia.com/device-plugin.config" not in res["diff"]["before"]["labels"]


def test_apply_then_again_is_idempotent(kube_api, node):
    a = args(kube_api, labels={"gpuops.example.com/pool": "training"}, device_plugin_config="ts-4")
    first = run_module(node_labels.main, a, diff=True)
    assert first["changed"] is True
    assert first["set"] == {"gpuops.example.com/pool": "training", "nvidia.com/device-plugin.config": "ts-4"}
    labels = kube_api.node_labels(node)
    assert labels["nvidia.com/device-plugin.config"] == "ts-4"
    assert labels["other.example.com/keep"] == "y"           # merge: untouched labels stay
    assert first["diff"]["before"]["labels"]["gpuops.example.com/old"] == "x"
    assert first["diff"]["after"]["labels"] == labels
    writes = len(kube_api.writes())
    second = run_module(node_labels.main, a)
    assert second["changed"] is False
    assert len(kube_api.writes()) == writes                  # nothing sent the second time


def test_bool_and_int_values_become_kubernetes_strings(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/on": True,
                                                              "gpuops.example.com/n": 4}))
    assert res["changed"]
    assert kube_api.node_labels(node)["gpuops.example.com/on"] == "true"
    assert kube_api.node_labels(node)["gpuops.example.com/n"] == "4"


def test_purge_prefix_removes_only_undeclared_labels_under_it(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/new": "1"},
                                            purge_prefix="gpuops.example.com"))
    assert res["removed"] == ["gpuops.example.com/old"]
    labels = kube_api.node_labels(node)
    assert "gpuops.example.com/old" not in labels
    assert labels["gpuops.example.com/new"] == "1" and labels["other.example.com/keep"] == "y"
    assert run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/new": "1"},
                                             purge_prefix="gpuops.example.com"))["changed"] is False


@pytest.mark.parametrize("prefix", ["nvidia.com", "feature.node.kubernetes.io", "k8s.io"])
def test_purge_of_foreign_prefix_is_refused(kube_api, node, prefix):
    res = run_module(node_labels.main, args(kube_api, purge_prefix=prefix))
    assert res["failed"] and "is refused" in res["msg"] and "nothing changed" in res["msg"]
    assert kube_api.requests == []


def test_state_absent_removes_and_is_idempotent(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, state="absent", labels=["gpuops.example.com/old",
                                                                              "not.there/x"]), diff=True)
    assert res["changed"] and res["removed"] == ["gpuops.example.com/old"]
    assert "gpuops.example.com/old" not in kube_api.node_labels(node)
    assert res["diff"]["before"]["labels"]["gpuops.example.com/old"] == "x"
    assert run_module(node_labels.main, args(kube_api, state="absent",
                                             labels=["gpuops.example.com/old"]))["changed"] is False


def test_gpu_present_auto_only_without_nfd(kube_api):
    kube_api.add_node("nfd-node", labels={"feature.node.kubernetes.io/pci-10de.present": "true"})
    kube_api.add_node("bare-node")
    res = run_module(node_labels.main, args(kube_api, node_name="nfd-node", gpu_present="auto"))
    assert res["changed"] is False and "nvidia.com/gpu.present" not in kube_api.node_labels("nfd-node")
    res = run_module(node_labels.main, args(kube_api, node_name="bare-node", gpu_present="auto"))
    assert res["changed"] is True and kube_api.node_labels("bare-node")["nvidia.com/gpu.present"] == "true"


@pytest.mark.parametrize("nfd_label,admitted_by_chart", [
    ("feature.node.kubernetes.io/pci-10de.present", True),        # NVIDIA's charts' NFD (deviceLabelFields [vendor])
    ("feature.node.kubernetes.io/pci-0302_10de.present", False),  # NFD's default [class, vendor]: 3D controller
    ("feature.node.kubernetes.io/pci-0300_10de.present", False),  # ... VGA controller
])
def test_every_nfd_label_format_is_read_and_gpu_present_follows_the_chart_affinity(
        kube_api, nfd_label, admitted_by_chart):
    kube_api.add_node("nfd-node", labels={nfd_label: "true"})
    res = run_module(node_labels.main, args(kube_api, node_name="nfd-node", gpu_present="auto"))
    assert res["nfd_gpu_labels"] == [nfd_label]
    # the chart's affinity names only pci-10de: a node NFD labels in the class-prefixed form needs gpu.present
    assert res["changed"] is (not admitted_by_chart)
    assert ("nvidia.com/gpu.present" in kube_api.node_labels("nfd-node")) is (not admitted_by_chart)
    again = run_module(node_labels.main, args(kube_api, node_name="nfd-node", gpu_present="auto"))
    assert again["changed"] is False and again["nfd_gpu_labels"] == [nfd_label]


def test_nfd_labels_not_true_do_not_mark_a_gpu_node(kube_api):
    kube_api.add_node("odd-node", labels={"feature.node.kubernetes.io/pci-0302_10de.present": "false",
                                          "feature.node.kubernetes.io/pci-0302_1002.present": "true"})
    res = run_module(node_labels.main, args(kube_api, node_name="odd-node", gpu_present="auto"))
    assert res["nfd_gpu_labels"] == [] and kube_api.node_labels("odd-node")["nvidia.com/gpu.present"] == "true"


def test_chart_affinity_terms_and_node_labels_read_the_same_nfd_labels():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._device_plugin import CHART_AFFINITY_TERMS
    terms = [(t["matchExpressions"][0]["key"], t["matchExpressions"][0]["values"][0]) for t in CHART_AFFINITY_TERMS]
    assert dict(terms) == dict(node_labels.NFD_GPU_LABELS, **{"nvidia.com/gpu.present": "true"})
    assert len(terms) == 3      # NVIDIA's chart's own three terms, in its order (the recorded renders hold the order)


def test_mig_owner_collection_keeps_gpu_operator_mig_manager_away(kube_api, node):
    run_module(node_labels.main, args(kube_api, mig_owner="collection"))
    assert kube_api.node_labels(node)["nvidia.com/gpu.deploy.mig-manager"] == "false"
    run_module(node_labels.main, args(kube_api, mig_owner="gpu_operator"))
    assert kube_api.node_labels(node)["nvidia.com/gpu.deploy.mig-manager"] == "true"


@pytest.mark.parametrize("labels,fragment", [
    ({"-bad.example.com/x": "1"}, "prefix part a lowercase RFC 1123 subdomain"),
    ({"Example.COM/x": "1"}, "prefix part a lowercase RFC 1123 subdomain"),
    ({"example.com/-x": "1"}, "name part must consist of alphanumeric characters"),
    ({"example.com/" + "a" * 64: "1"}, "name part must be no more than 63 characters"),
    ({"example.com/": "1"}, "name part must be non-empty"),
    ({"/x": "1"}, "prefix part must be non-empty"),
    ({"example.com/x": "bad value"}, "a valid label must be an empty string or consist of alphanumeric"),
    ({"example.com/x": "v" * 64}, "must be no more than 63 characters"),
    ({"example.com/x": "-v"}, "must start and end with an alphanumeric character"),
])
def test_bad_labels_refused_before_any_call(kube_api, node, labels, fragment):
    res = run_module(node_labels.main, args(kube_api, labels=labels))
    assert res["failed"] and fragment in res["msg"], res["msg"]
    assert kube_api.requests == []
    assert kube_api.node_labels(node)["gpuops.example.com/old"] == "x"


def test_empty_label_value_is_valid(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/flag": ""}))
    assert res["changed"] and kube_api.node_labels(node)["gpuops.example.com/flag"] == ""


def test_labels_must_be_a_dict_for_present(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, labels=["a/b"]))
    assert res["failed"] and "labels must be a dict" in res["msg"]


@pytest.mark.parametrize("kw,how", [
    (dict(node_name="gpu-node-1"), "name"),
    (dict(node_name=None, hostname=["gpu-node-1.cluster.example.com"]), "hostname"),
    (dict(node_name=None, hostname=["unknown-host"], internal_ips=["192.168.1.1", "10.0.0.11"]), "internal_ip"),
    (dict(node_name="not-registered", hostname=["nope"], internal_ips=["10.0.0.11"]), "internal_ip"),
])
def test_node_lookup_by_each_method(kube_api, node, kw, how):
    a = args(kube_api, labels={"gpuops.example.com/found": "yes"})
    a.update(kw)
    res = run_module(node_labels.main, a)
    assert res["node"] == "gpu-node-1" and res["matched_by"] == how, res
    assert kube_api.node_labels("gpu-node-1")["gpuops.example.com/found"] == "yes"
    assert "gpuops.example.com/found" not in kube_api.node_labels("cpu-node-1")


def test_node_lookup_by_hostname_address_when_name_differs(kube_api):
    kube_api.add_node("ip-10-0-0-20.ec2.internal", hostname="trainer-20", internal_ip="10.0.0.20")
    res = run_module(node_labels.main, args(kube_api, node_name=None, hostname=["trainer-20"],
                                            labels={"gpuops.example.com/a": "b"}))
    assert res["node"] == "ip-10-0-0-20.ec2.internal" and res["matched_by"] == "hostname"


def test_node_lookup_no_match_says_what_was_tried(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, node_name=None, hostname=["ghost"], internal_ips=["1.2.3.4"],
                                            labels={"gpuops.example.com/a": "b"}))
    assert res["failed"]
    assert "hostname ghost" in res["msg"] and "InternalIP 1.2.3.4" in res["msg"] and "gpu-node-1" in res["msg"]


def test_node_lookup_ambiguous_is_an_error(kube_api):
    kube_api.add_node("a", internal_ip="10.1.1.1")
    kube_api.add_node("b", internal_ip="10.1.1.1")
    res = run_module(node_labels.main, args(kube_api, node_name=None, internal_ips=["10.1.1.1"],
                                            labels={"gpuops.example.com/a": "b"}))
    assert res["failed"] and "2 nodes match" in res["msg"]


def test_node_lookup_strict_name_not_found(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, node_name="ghost", node_lookup="name",
                                            labels={"gpuops.example.com/a": "b"}))
    assert res["failed"] and "node 'ghost' does not exist" in res["msg"]


def test_bad_token_gives_401_message(kube_api, node):
    res = run_module(node_labels.main, dict(host=kube_api.url, api_key="wrong-token", node_name=node,
                                            labels={"gpuops.example.com/a": "b"}))
    assert res["failed"] and res["status"] == 401
    assert "refused the credentials (401 Unauthorized)" in res["msg"]
    assert "wrong-token" not in json.dumps(res)


def test_readonly_token_gives_403_with_rbac_hint(kube_api, node):
    res = run_module(node_labels.main, dict(host=kube_api.url, api_key=kube_api.ro_token, node_name=node,
                                            labels={"gpuops.example.com/a": "b"}))
    assert res["failed"] and res["status"] == 403
    assert "403 Forbidden" in res["msg"] and "RBAC" in res["msg"] and "cannot patch resource" in res["msg"]


def test_unreachable_api_is_a_clear_error(node):
    res = run_module(node_labels.main, dict(host="http://127.0.0.1:9", api_key="x", node_name="gpu-node-1",
                                            labels={"gpuops.example.com/a": "b"}, request_timeout=2))
    assert res["failed"] and "cannot reach the Kubernetes API at http://127.0.0.1:9" in res["msg"]


def test_server_error_is_reported(kube_api, node):
    kube_api.inject_failure("PATCH", "/api/v1/nodes/gpu-node-1", code=500, message="etcdserver: request timed out")
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/a": "b"}))
    assert res["failed"] and "500" in res["msg"] and "etcdserver: request timed out" in res["msg"]
    assert "gpuops.example.com/a" not in kube_api.node_labels(node)


def test_conflict_is_retried_after_rereading(kube_api, node):
    kube_api.inject_failure("PATCH", "/api/v1/nodes/gpu-node-1", code=409, reason="Conflict",
                            message='Operation cannot be fulfilled on nodes "gpu-node-1"')
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/a": "b"}))
    assert res["changed"] and kube_api.node_labels(node)["gpuops.example.com/a"] == "b"


def test_server_side_validation_error_422_is_reported(kube_api, node):
    kube_api.inject_failure("PATCH", "/api/v1/nodes/", code=422, reason="Invalid",
                            message='Node "gpu-node-1" is invalid: denied by admission policy')
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/a": "b"}), check_mode=True)
    assert res["failed"] and "rejected the request as invalid (422)" in res["msg"]


def test_awx_bearer_token_environment(kube_api, node, monkeypatch):
    monkeypatch.setenv("K8S_AUTH_HOST", kube_api.url)
    monkeypatch.setenv("K8S_AUTH_API_KEY", kube_api.token)
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "False")
    res = run_module(node_labels.main, dict(node_name=node, labels={"gpuops.example.com/awx": "yes"}))
    assert res["changed"] and kube_api.node_labels(node)["gpuops.example.com/awx"] == "yes"
    assert all(r["authorization"] == "Bearer" for r in kube_api.requests)


def test_kubeconfig_env_and_context(kube_api, node, monkeypatch, tmp_path):
    import yaml
    cfg = kube_api.kubeconfig(token=kube_api.token, context="gpu-cluster")
    cfg["contexts"].append({"name": "other", "context": {"cluster": "nowhere", "user": "fake-user"}})
    cfg["clusters"].append({"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}})
    cfg["current-context"] = "other"
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(path))
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "gpu-cluster")
    res = run_module(node_labels.main, dict(node_name=node, labels={"gpuops.example.com/ctx": "yes"}))
    assert res["changed"], res


def test_kubeconfig_content_secrets_are_masked(kube_api, node):
    cfg = kube_api.kubeconfig(token=kube_api.token)
    res = run_module(node_labels.main, dict(kubeconfig=cfg, node_name=node,
                                            labels={"gpuops.example.com/dict": "yes", "gpuops.example.com/t": "z"}))
    assert res["changed"]
    assert kube_api.token not in json.dumps(res)


def test_no_credentials_anywhere_is_a_clear_error(node):
    res = run_module(node_labels.main, dict(node_name="gpu-node-1", labels={"gpuops.example.com/a": "b"}))
    assert res["failed"] and "no Kubernetes credentials found" in res["msg"] and "K8S_AUTH_HOST" in res["msg"]


@pytest.mark.slow
def test_real_ansible_run_check_then_apply_then_idempotent(kube_api, node, tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), K8S_AUTH_KUBECONFIG=kube_api.kubeconfig_path)
    base = [os.path.join(ROOT, ".venv/bin/ansible"), "localhost", "-m", "gpuops.nvidia.node_labels",
            "-e", "ansible_python_interpreter=%s" % os.path.join(ROOT, ".venv/bin/python"),
            "-a", json.dumps({"node_name": node, "device_plugin_config": "mps-4", "mig_owner": "collection"})]

    def run(*extra):
        proc = subprocess.run(base + list(extra), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        return proc.returncode, proc.stdout

    rc, out = run("--check", "--diff")
    assert rc == 0 and "CHANGED" in out and "nvidia.com/device-plugin.config" in out
    assert "nvidia.com/device-plugin.config" not in kube_api.node_labels(node)
    rc, out = run()
    assert rc == 0 and "CHANGED" in out
    assert kube_api.node_labels(node)["nvidia.com/device-plugin.config"] == "mps-4"
    rc, out = run()
    assert rc == 0 and "SUCCESS" in out and "CHANGED" not in out


def test_kubeconfig_text_secrets_are_masked(kube_api, node):
    import yaml
    text = yaml.safe_dump(kube_api.kubeconfig(token=kube_api.token))
    res = run_module(node_labels.main, dict(kubeconfig=text, node_name=node,
                                            labels={"gpuops.example.com/text": "yes"}))
    assert res["changed"], res
    assert kube_api.token not in json.dumps(res)


@pytest.fixture
def tls_api(tmp_path):
    import shutil as _shutil
    if not _shutil.which("openssl"):
        pytest.skip("openssl not installed")
    from tests.support.fake_kube_api import FakeKubeApi
    api = FakeKubeApi(tokens={"tls-token-123": "rw"}).start(tls_dir=str(tmp_path))
    api.add_node("gpu-node-1")
    try:
        yield api
    finally:
        api.stop()


def test_https_with_ca_cert(tls_api):
    res = run_module(node_labels.main, dict(host=tls_api.url, api_key="tls-token-123", ca_cert=tls_api.ca_file,
                                            node_name="gpu-node-1", labels={"gpuops.example.com/tls": "yes"}))
    assert res["changed"], res
    assert tls_api.node_labels("gpu-node-1")["gpuops.example.com/tls"] == "yes"


def test_https_untrusted_certificate_is_a_clear_error(tls_api):
    res = run_module(node_labels.main, dict(host=tls_api.url, api_key="tls-token-123", node_name="gpu-node-1",
                                            labels={"gpuops.example.com/tls": "yes"}))
    assert res["failed"] and "cannot reach the Kubernetes API" in res["msg"]
    assert "CERTIFICATE_VERIFY_FAILED" in res["msg"]


def test_null_value_removes_with_state_present(kube_api, node):
    res = run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/old": None,
                                                              "gpuops.example.com/never-there": None}))
    assert res["changed"] and res["removed"] == ["gpuops.example.com/old"] and res["set"] == {}
    assert "gpuops.example.com/old" not in kube_api.node_labels(node)
    assert "gpuops.example.com/never-there" not in kube_api.node_labels(node)
    assert run_module(node_labels.main, args(kube_api, labels={"gpuops.example.com/old": None}))["changed"] is False
