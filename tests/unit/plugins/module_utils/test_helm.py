"""_helm: argument lists, env-only credentials, output parsing, error hints."""
import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _helm


class Recorder(object):
    def __init__(self, answers=None):
        self.calls, self.answers = [], list(answers or [])

    def __call__(self, argv, env):
        self.calls.append((argv, dict(env)))
        return self.answers.pop(0) if self.answers else (0, "", "")


def test_release_and_values_parsing():
    listed = json.dumps([{"name": "nvdp", "namespace": "ns", "revision": "3", "status": "deployed",
                          "chart": "nvidia-device-plugin-0.15.0-rc.2", "app_version": "0.15.0-rc.2"}])
    rec = Recorder([(0, listed, ""), (0, "null\n", "")])
    helm = _helm.Helm("/usr/bin/helm", rec)
    rel = helm.release("nvdp", "ns")
    assert _helm.chart_version_of(rel, "nvidia-device-plugin") == "0.15.0-rc.2"
    assert helm.values("nvdp", "ns") == {}
    assert rec.calls[0][0] == ["/usr/bin/helm", "list", "--namespace", "ns", "--filter", "^nvdp$", "--deployed",
                               "--failed", "--pending", "--output", "json"]
    assert rec.calls[1][0] == ["/usr/bin/helm", "get", "values", "nvdp", "--namespace", "ns", "--output", "json"]


def test_release_filter_escapes_regex():
    rec = Recorder([(0, "[]", "")])
    _helm.Helm("helm", rec).release("a.b", "ns")
    assert "^a\\.b$" in rec.calls[0][0]


def test_upgrade_args_repo_and_wait():
    helm = _helm.Helm("helm", Recorder())
    args = helm.upgrade_args("nvdp", "ns", "nvidia-device-plugin", "/tmp/v.json", chart_version="0.17.0",
                             repo_url="https://nvidia.github.io/k8s-device-plugin", wait=True, timeout="5m0s")
    assert args == ["upgrade", "--install", "nvdp", "nvidia-device-plugin", "--repo",
                    "https://nvidia.github.io/k8s-device-plugin", "--version", "0.17.0", "--namespace", "ns",
                    "--values", "/tmp/v.json", "--reset-values", "--create-namespace", "--wait", "--timeout", "5m0s"]


def test_credentials_only_in_env(tmp_path):
    env, secrets, files = _helm.helm_env({"host": "https://k:6443", "api_key": "tok", "ca_cert": "/ca.pem",
                                          "validate_certs": False, "context": "c"})
    assert env == {"HELM_KUBEAPISERVER": "https://k:6443", "HELM_KUBETOKEN": "tok", "HELM_KUBECAFILE": "/ca.pem",
                   "HELM_KUBEINSECURE_SKIP_TLS_VERIFY": "true", "HELM_KUBECONTEXT": "c"}
    assert secrets == {"tok"} and files == []
    env, dummy, files = _helm.helm_env({"kubeconfig": {"clusters": []}}, tmpdir=str(tmp_path))
    assert env["KUBECONFIG"] == files[0] and oct(os.stat(files[0]).st_mode & 0o777) == "0o600"


def test_error_hints():
    rec = Recorder([(1, "", "Error: kubernetes cluster unreachable: Get \"https://x/version\": dial tcp: connection refused")])
    with pytest.raises(_helm.HelmError, match="helm cannot reach the Kubernetes API"):
        _helm.Helm("helm", rec).release("n", "ns")
    assert "401" in _helm.explain("Error: Unauthorized")
    assert "RBAC" in _helm.explain('secrets is forbidden: User "x" cannot list resource "secrets"')
    assert _helm.explain("Error: something else") == ""


def test_values_diff_paths():
    before = {"config": {"map": {"a": "1", "b": "2"}, "default": "a"}, "gfd": {"enabled": True}}
    after = {"config": {"map": {"a": "1", "b": "3"}, "default": "a"}}
    assert _helm.values_diff(before, after) == [("config.map.b", "2", "3"), ("gfd", {"enabled": True}, None)]
