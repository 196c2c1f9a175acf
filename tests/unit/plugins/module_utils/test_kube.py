"""_kube: client construction like kubernetes.core, requests, errors."""
import os
import shutil

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube, _kubeconfig
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import failure


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))


def params(**kw):
    base = dict((k, None) for k in _kube.AUTH_ARG_SPEC)
    base.update(kw)
    return base


def test_host_and_api_key_need_no_kubeconfig():
    cfg = _kube.build_configuration(params(host="https://api.example.com:6443/", api_key="tok", validate_certs=False))
    assert cfg.host == "https://api.example.com:6443"
    assert cfg.api_key == {"authorization": "Bearer tok"}
    assert cfg.verify_ssl is False
    assert cfg.gpuops_source == "host and credentials"


def test_kubeconfig_path_and_context(tmp_path):
    kc = {"apiVersion": "v1", "kind": "Config", "current-context": "a",
          "clusters": [{"name": "a", "cluster": {"server": "https://a:6443"}},
                       {"name": "b", "cluster": {"server": "https://b:6443"}}],
          "contexts": [{"name": "a", "context": {"cluster": "a", "user": "u"}},
                       {"name": "b", "context": {"cluster": "b", "user": "u"}}],
          "users": [{"name": "u", "user": {"token": "t"}}]}
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(kc))
    assert _kube.build_configuration(params(kubeconfig=str(path))).host == "https://a:6443"
    cfg = _kube.build_configuration(params(kubeconfig=str(path), context="b"))
    assert cfg.host == "https://b:6443"
    # parameters override the kubeconfig, as in kubernetes.core
    cfg = _kube.build_configuration(params(kubeconfig=str(path), context="b", api_key="other"))
    assert cfg.api_key == {"authorization": "Bearer other"}
    # kubeconfig as dict and as YAML text
    assert _kube.build_configuration(params(kubeconfig=kc)).host == "https://a:6443"
    assert _kube.build_configuration(params(kubeconfig=yaml.safe_dump(kc), context="b")).host == "https://b:6443"


def test_default_kubeconfig_used_when_nothing_given(tmp_path, monkeypatch):
    kc = {"current-context": "x", "clusters": [{"name": "x", "cluster": {"server": "https://home:6443"}}],
          "contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}], "users": [{"name": "u", "user": {}}]}
    os.makedirs(str(tmp_path / ".kube"))
    (tmp_path / ".kube" / "config").write_text(yaml.safe_dump(kc))
    assert _kube.build_configuration(params()).host == "https://home:6443"


def test_in_cluster_service_account(tmp_path, monkeypatch):
    from kubernetes.config import incluster_config
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    for module in (incluster_config, _kubeconfig):     # the client's loader and the light path's (issue 49)
        monkeypatch.setattr(module, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(module, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = _kube.build_configuration(params())
    assert cfg.host == "https://10.96.0.1:443" and cfg.gpuops_source == "in-cluster service account"
    assert cfg.gpuops_light is True
    # the header every request carries (kubernetes 24 keeps the token under "authorization", 37 "BearerToken")
    assert cfg.auth_settings()["BearerToken"]["value"].lower() == "bearer sa-token"


def test_missing_kubeconfig_file_is_a_clear_error():
    with pytest.raises(_kube.KubeError, match="kubeconfig file /nope/kc does not exist"):
        _kube.build_configuration(params(kubeconfig="/nope/kc"))


def test_no_credentials_is_a_clear_error():
    with pytest.raises(_kube.KubeError, match="no Kubernetes credentials found.*K8S_AUTH_HOST"):
        _kube.build_configuration(params())


def test_env_fallbacks_are_the_awx_variables():
    spec = _kube.AUTH_ARG_SPEC
    assert spec["host"]["fallback"][1] == ["K8S_AUTH_HOST"]
    assert spec["api_key"]["fallback"][1] == ["K8S_AUTH_API_KEY"] and spec["api_key"]["no_log"] is True
    assert spec["validate_certs"]["fallback"][1] == ["K8S_AUTH_VERIFY_SSL"]
    assert spec["ca_cert"]["fallback"][1] == ["K8S_AUTH_SSL_CA_CERT"]
    assert spec["kubeconfig"]["fallback"][1] == ["K8S_AUTH_KUBECONFIG"]
    assert spec["context"]["fallback"][1] == ["K8S_AUTH_CONTEXT"]


def test_kubeconfig_secrets_found():
    kc = {"users": [{"name": "a", "user": {"token": "T1", "client-key-data": "K1"}},
                    {"name": "b", "user": {"auth-provider": {"config": {"access-token": "A1"}}}}]}
    assert _kube.kubeconfig_secrets(kc) == {"T1", "K1", "A1"}


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")
def test_requests_over_https_carry_the_token_and_check_the_certificate(tmp_path):
    from tests.support.fake_kube_api import FakeKubeApi
    api = FakeKubeApi(tokens={"rw-token": "rw"}).start(tls_dir=str(tmp_path))
    try:
        api.add_node("gpu-1")
        kube = _kube.Kube.from_params(params(kubeconfig=api.kubeconfig(token="rw-token")))
        node = kube.get("read node gpu-1", _kube.node_path("gpu-1"))
        assert node["metadata"]["name"] == "gpu-1"
        assert kube.patch("label", _kube.node_path("gpu-1"), {"metadata": {"labels": {"a": "b"}}},
                          dry_run=True)["metadata"]["labels"]["a"] == "b"
        assert [(r["method"], r["authorization"], r["query"].get("dryRun")) for r in api.requests] == [
            ("GET", "Bearer", None), ("PATCH", "Bearer", ["All"])]
        assert api.requests[1]["content_type"] == "application/merge-patch+json"
        with pytest.raises(_kube.KubeError) as exc:
            kube.get("read node nope", _kube.node_path("nope"))
        assert exc.value.status == 404 and "read node nope" in exc.value.msg
        # the same server, but a kubeconfig without its CA: the certificate is refused, nothing is sent
        config = api.kubeconfig(token="rw-token")
        del config["clusters"][0]["cluster"]["certificate-authority-data"]
        seen = len(api.requests)
        with pytest.raises(_kube.KubeError) as exc:
            _kube.Kube.from_params(params(kubeconfig=config, request_timeout=5)).get("list nodes", "/api/v1/nodes")
        assert "cannot reach the Kubernetes API" in exc.value.msg and "CERTIFICATE_VERIFY_FAILED" in exc.value.msg
        assert len(api.requests) == seen
    finally:
        api.stop()


def test_require_client_fails_naming_the_library_only_when_it_does_not_import(monkeypatch):
    class Module(object):
        failed = None

        def fail_json(self, **kwargs):
            self.failed = kwargs
            raise SystemExit(1)

    module = Module()
    _kube.require_client()                  # installed here: nothing happens
    assert module.failed is None
    monkeypatch.setattr(_kube, "HAS_KUBERNETES", False)
    monkeypatch.setattr(_kube, "KUBERNETES_IMPORT_ERROR", ImportError("No module named 'kubernetes'"))
    with pytest.raises(_kube.KubeError) as raised:     # raised to the base, which fails the module with it (issue 48)
        _kube.require_client()
    module.failed = failure(raised.value)     # what the base passes to fail_json
    assert "kubernetes" in module.failed["msg"] and "No module named" in module.failed["exception"]


def test_dra_paths_are_built_in_one_place():
    assert _kube.dra_path("resourceslices") == "/apis/resource.k8s.io/v1/resourceslices"
    assert _kube.dra_path("deviceclasses", name="gpu.nvidia.com") == \
        "/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com"
    assert _kube.dra_path("resourceclaimtemplates", "team-a") == \
        "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates"
    assert _kube.dra_path("resourceclaimtemplates", "team-a", "gpu-1g") == \
        "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates/gpu-1g"


def test_claim_templates_are_written_at_the_api_the_paths_name():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
    obj = _dra.template_object({"name": "gpu-1", "device_class": "gpu"}, "ml", "fleet")
    assert obj["apiVersion"] == _kube.DRA_API_VERSION == "%s/%s" % (_kube.DRA_GROUP, _kube.DRA_VERSION)
