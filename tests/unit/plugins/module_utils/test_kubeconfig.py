"""_kubeconfig: the light path reads a kubeconfig or the service account into the same host, headers and TLS settings
as the kubernetes client, falls back to the client for what it does not read, and does not import kubernetes."""
import base64
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube, _kubeconfig
from tests.support.ansible_run import ROOT


def _client_major():
    from importlib.metadata import version
    return int(version("kubernetes").split(".")[0])


# The light path reads as kubernetes 37 does (requirements.txt allows 24.2.0 and newer; 37 is what the EE and these
# tests install). Older clients differ where the light path follows 37: 24 verifies against certifi's bundle when a
# kubeconfig names no CA, ignores https_proxy, sends Content-Type on a DELETE without a body, and keeps the first
# file's current-context. Compared with an older client, those tables would differ by design.
LIKE_37 = pytest.mark.skipif(_client_major() < 37, reason="the light path reads kubeconfigs as kubernetes 37 does")

CA = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n"


def b64(text):
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var.lower() in ("kubeconfig", "kubernetes_service_host",
                                                          "kubernetes_service_port", "https_proxy", "http_proxy",
                                                          "all_proxy", "no_proxy"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def params(**kw):
    base = dict((k, None) for k in _kube.AUTH_ARG_SPEC)
    base.update(kw)
    return base


def kubeconfig(cluster, user, name="c", current="c", extra_contexts=()):
    return {"apiVersion": "v1", "kind": "Config", "current-context": current,
            "clusters": [{"name": "cl", "cluster": cluster}, {"name": "other", "cluster": {"server": "https://o:1"}}],
            "contexts": [{"name": name, "context": {"cluster": "cl", "user": "u"}}] + list(extra_contexts),
            "users": [{"name": "u", "user": user}]}


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def read_or_none(path):
    if not path:
        return path
    with open(path) as handle:
        return "file:" + handle.read()


def view(cfg):
    """What a request made with ``cfg`` would carry: the URL's host, the headers, the urllib3 pool (its manager, TLS
    files by content, proxy) and where the configuration came from."""
    rest = _kube.Kube(cfg).rest
    pool = rest.pool_manager if cfg.gpuops_light else rest.rest.pool_manager
    kw = dict((k, v) for k, v in pool.connection_pool_kw.items() if v is not None)     # None: urllib3's default
    for key in ("ca_certs", "cert_file", "key_file"):
        if key in kw:
            kw[key] = read_or_none(kw[key])
    proxy = getattr(pool, "proxy", None)
    headers = dict((a["key"], a["value"]) for a in cfg.auth_settings().values()
                   if a.get("in") == "header" and a.get("value"))
    return {"host": cfg.host, "headers": headers, "manager": type(pool).__name__, "pool": kw,
            "proxy": proxy.url if proxy else None, "source": cfg.gpuops_source}


def both(p):
    light = _kube.build_configuration(p)
    client = _kube.build_configuration(p, light=False)
    assert light.gpuops_light is True and client.gpuops_light is False
    return view(light), view(client)


def case_token_ca_data(tmp_path):
    return params(kubeconfig=kubeconfig({"server": "https://api:6443/", "certificate-authority-data": b64(CA)},
                                        {"token": "tok"}))


def case_token_file_relative_to_the_kubeconfig(tmp_path):
    write(tmp_path / "kc" / "token", "from-file")
    write(tmp_path / "kc" / "ca.crt", CA)
    kc = kubeconfig({"server": "https://api:6443", "certificate-authority": "ca.crt"}, {"tokenFile": "token"})
    return params(kubeconfig=write(tmp_path / "kc" / "config", yaml.safe_dump(kc)))


def case_client_cert_files(tmp_path):
    for name, text in (("ca.crt", CA), ("client.crt", CERT), ("client.key", KEY)):
        write(tmp_path / "pki" / name, text)
    kc = kubeconfig({"server": "https://api:6443", "certificate-authority": "pki/ca.crt"},
                    {"client-certificate": "pki/client.crt", "client-key": str(tmp_path / "pki" / "client.key")})
    return params(kubeconfig=write(tmp_path / "config", yaml.safe_dump(kc)))


def case_client_cert_data(tmp_path):
    return params(kubeconfig=yaml.safe_dump(kubeconfig(
        {"server": "https://api:6443", "certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)})))


def case_insecure_and_context_selection(tmp_path):
    kc = kubeconfig({"server": "https://api:6443", "insecure-skip-tls-verify": True}, {"token": "a"},
                    extra_contexts=[{"name": "b", "context": {"cluster": "other", "user": "u"}}])
    return params(kubeconfig=kc, context="c"), params(kubeconfig=kc, context="b")


def case_basic_auth_tls_server_name_and_proxy(tmp_path):
    return params(kubeconfig=kubeconfig({"server": "https://10.0.0.1:6443", "certificate-authority-data": b64(CA),
                                         "tls-server-name": "kubernetes.default", "proxy-url": "http://proxy:3128"},
                                        {"username": "admin", "password": "s3cret"}))


def case_http_server_and_empty_user(tmp_path):
    return params(kubeconfig=kubeconfig({"server": "http://api:8080", "certificate-authority": "/nope"}, {}))


def case_kubeconfig_env_with_two_files(tmp_path, monkeypatch):
    write(tmp_path / "a" / "ca.crt", CA)
    write(tmp_path / "b" / "ca.crt", "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n")
    first = {"clusters": [{"name": "cl", "cluster": {"server": "https://first:6443", "certificate-authority": "ca.crt"}}],
             "users": [{"name": "u", "user": {"token": "first"}}]}
    second = {"clusters": [{"name": "cl", "cluster": {"server": "https://second:6443"}}],
              "contexts": [{"name": "c", "context": {"cluster": "cl", "user": "u"}}], "current-context": "c"}
    paths = [write(tmp_path / "a" / "config", yaml.safe_dump(first)),
             write(tmp_path / "b" / "config", yaml.safe_dump(second))]
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(paths + [str(tmp_path / "missing")]))
    return params()


def case_parameters_override_the_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("https_proxy", "http://env-proxy:3128")
    monkeypatch.setenv("no_proxy", "skip.example")
    ca = write(tmp_path / "override-ca.crt", CA)
    kc = kubeconfig({"server": "https://api:6443", "certificate-authority-data": b64("x")}, {"token": "kc"})
    return (params(kubeconfig=kc, host="https://other:6443/", api_key="param", validate_certs=False, ca_cert=ca),
            params(host="https://skip.example:6443", api_key="direct"),
            params(host="https://api.example:6443", api_key="direct"))


def case_in_cluster(tmp_path, monkeypatch):
    from kubernetes.config import incluster_config
    token, ca = write(tmp_path / "sa" / "token", "sa-token"), write(tmp_path / "sa" / "ca.crt", CA)
    for module in (incluster_config, _kubeconfig):
        monkeypatch.setattr(module, "SERVICE_TOKEN_FILENAME", token)
        monkeypatch.setattr(module, "SERVICE_CERT_FILENAME", ca)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return params(), params(in_cluster=True)


CASES = [case_token_ca_data, case_token_file_relative_to_the_kubeconfig, case_client_cert_files,
         case_client_cert_data, case_insecure_and_context_selection, case_basic_auth_tls_server_name_and_proxy,
         case_http_server_and_empty_user, case_kubeconfig_env_with_two_files, case_parameters_override_the_kubeconfig,
         case_in_cluster]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__[5:])
@LIKE_37
def test_the_light_path_gives_the_clients_settings(case, tmp_path, monkeypatch):
    args = (tmp_path, monkeypatch) if case.__code__.co_argcount == 2 else (tmp_path,)
    given = case(*args)
    for p in given if isinstance(given, tuple) else (given,):
        light, client = both(p)
        assert light == client
        assert light["host"].startswith("http")


@LIKE_37
def test_the_table_covers_what_it_names(tmp_path, monkeypatch):
    """The cases are not all alike: the views differ in what each case is about (a table of equal defaults would
    prove nothing)."""
    seen = {}
    for case in CASES:
        args = (tmp_path / case.__name__, monkeypatch) if case.__code__.co_argcount == 2 else (tmp_path / case.__name__,)
        given = case(*args)
        seen[case.__name__] = [both(p)[0] for p in (given if isinstance(given, tuple) else (given,))]
    assert seen["case_token_ca_data"][0]["headers"] == {"authorization": "Bearer tok"}
    assert seen["case_token_ca_data"][0]["pool"]["ca_certs"] == "file:" + CA
    assert seen["case_token_file_relative_to_the_kubeconfig"][0]["headers"] == {"authorization": "Bearer from-file"}
    for name in ("case_client_cert_files", "case_client_cert_data"):
        pool = seen[name][0]["pool"]
        assert (pool["cert_file"], pool["key_file"], pool["ca_certs"]) == ("file:" + CERT, "file:" + KEY, "file:" + CA)
        assert seen[name][0]["headers"] == {}
    first, second = seen["case_insecure_and_context_selection"]
    assert first["pool"]["cert_reqs"] == 0 and first["host"] == "https://api:6443" and second["host"] == "https://o:1"
    basic = seen["case_basic_auth_tls_server_name_and_proxy"][0]
    assert basic["headers"] == {"authorization": "Basic " + b64("admin:s3cret")}
    assert basic["pool"]["server_hostname"] == "kubernetes.default"
    assert (basic["manager"], basic["proxy"]) == ("ProxyManager", "http://proxy:3128")
    plain = seen["case_http_server_and_empty_user"][0]
    assert plain["headers"] == {} and "ca_certs" not in plain["pool"]
    merged = seen["case_kubeconfig_env_with_two_files"][0]
    assert (merged["host"], merged["headers"], merged["pool"]["ca_certs"]) == (
        "https://first:6443", {"authorization": "Bearer first"}, "file:" + CA)
    override, bypassed, proxied = seen["case_parameters_override_the_kubeconfig"]
    assert override["host"] == "https://other:6443" and override["headers"] == {"authorization": "Bearer param"}
    assert override["pool"]["cert_reqs"] == 0 and override["pool"]["ca_certs"] == "file:" + CA
    assert bypassed["manager"] == "PoolManager" and bypassed["source"] == "host and credentials"
    assert (proxied["manager"], proxied["proxy"]) == ("ProxyManager", "http://env-proxy:3128")
    found, explicit = seen["case_in_cluster"]
    assert found == explicit and found["host"] == "https://[fd00::1]:443"
    assert found["headers"] == {"authorization": "bearer sa-token"}


@pytest.mark.parametrize("user", [
    {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent/credential-plugin"}},
    {"auth-provider": {"name": "azure", "config": {"access-token": "A"}}, "token": "t"},
])
def test_credential_plugins_and_auth_providers_go_to_the_client(user):
    cfg = _kube.build_configuration(params(kubeconfig=kubeconfig({"server": "https://api:6443"}, user)))
    assert cfg.gpuops_light is False and cfg.host == "https://api:6443"
    with pytest.raises(_kubeconfig.Unsupported, match="credential plugin or auth provider"):
        _kubeconfig.load_dict(kubeconfig({"server": "https://api:6443"}, user), None, _kubeconfig.Configuration())


@LIKE_37
def test_files_naming_different_current_contexts_go_to_the_client(tmp_path, monkeypatch):
    """kubernetes 37 takes the last file's current-context, older clients (and kubectl) the first's: where the files
    disagree the installed client decides; where they agree, or a context is given, the light path reads them."""
    one = kubeconfig({"server": "https://one:6443"}, {"token": "t"}, name="one", current="one")
    two = kubeconfig({"server": "https://two:6443"}, {"token": "t"}, name="two", current="two")
    two["clusters"] = [{"name": "cl2", "cluster": {"server": "https://two:6443"}}]
    two["contexts"][0]["context"]["cluster"] = "cl2"
    paths = os.pathsep.join([write(tmp_path / "one", yaml.safe_dump(one)), write(tmp_path / "two", yaml.safe_dump(two))])
    cfg = _kube.build_configuration(params(kubeconfig=paths))
    assert cfg.gpuops_light is False
    cfg = _kube.build_configuration(params(kubeconfig=paths, context="two"))
    assert cfg.gpuops_light is True and cfg.host == "https://two:6443"
    assert view(cfg) == view(_kube.build_configuration(params(kubeconfig=paths, context="two"), light=False))
    two["current-context"] = "one"
    write(tmp_path / "two", yaml.safe_dump(two))
    cfg = _kube.build_configuration(params(kubeconfig=paths))
    assert cfg.gpuops_light is True and cfg.host == "https://one:6443"


def _errors(tmp_path):
    ok = {"server": "https://api:6443"}
    write(tmp_path / "empty", "")
    return [
        params(kubeconfig=kubeconfig(ok, {"token": "t"}), context="nope"),
        params(kubeconfig=kubeconfig({"server": "https://api:6443", "certificate-authority": "/nope/ca"}, {})),
        params(kubeconfig=kubeconfig({"server": "https://api:6443", "certificate-authority-data": "abc"}, {})),
        params(kubeconfig=kubeconfig(ok, {"tokenFile": "/nope/token"})),
        params(kubeconfig=kubeconfig(ok, {"username": 1, "password": "p"})),
        params(kubeconfig=dict(kubeconfig(ok, {}), contexts=[{"name": "c"}, {"name": "c"}])),
        params(kubeconfig=str(tmp_path / "empty")),
        params(in_cluster=True),
    ]


def test_what_the_light_path_cannot_read_fails_with_the_clients_message(tmp_path):
    for p in _errors(tmp_path):
        with pytest.raises(_kube.KubeError) as light:
            _kube.build_configuration(p)
        with pytest.raises(_kube.KubeError) as client:
            _kube.build_configuration(p, light=False)
        assert light.value.msg == client.value.msg
        assert light.value.msg.startswith("cannot load Kubernetes configuration from")


PROBE = """
import json, sys
sys.path.insert(0, '.collections')
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
params = dict((k, None) for k in _kube.AUTH_ARG_SPEC)
params.update(json.loads(sys.argv[1]))
kube = _kube.Kube.from_params(params)
node = kube.get('read node gpu-1', _kube.node_path('gpu-1'))
print(json.dumps({'name': node['metadata']['name'], 'light': kube.configuration.gpuops_light,
                  'kubernetes': sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.'))}))
"""


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")
def test_the_light_path_does_not_import_kubernetes(tmp_path):
    import json
    from tests.support.fake_kube_api import FakeKubeApi
    api = FakeKubeApi(tokens={"rw-token": "rw"}).start(tls_dir=str(tmp_path))
    try:
        api.add_node("gpu-1")
        config = api.kubeconfig(token="rw-token")
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith("K8S_AUTH_"))
        seen = []
        for given in ({"kubeconfig": config},
                      {"kubeconfig": dict(config, users=[{"name": "fake-user", "user": {
                          "token": "rw-token", "exec": {"command": "/nonexistent/plugin"}}}])}):
            out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(given)], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=120, check=False)
            assert out.returncode == 0, out.stdout + out.stderr
            seen.append(json.loads(out.stdout.strip().splitlines()[-1]))
        light, fallback = seen
        assert light == {"name": "gpu-1", "light": True, "kubernetes": []}
        assert fallback["name"] == "gpu-1" and fallback["light"] is False and "kubernetes" in fallback["kubernetes"]
        # both paths sent the same request: the token over TLS, a GET of the node
        assert [(r["method"], r["path"], r["authorization"]) for r in api.requests] == [
            ("GET", "/api/v1/nodes/gpu-1", "Bearer")] * 2
    finally:
        api.stop()


@LIKE_37
@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")
def test_both_paths_send_the_same_writes_and_refuse_the_same_certificate(tmp_path):
    from tests.support.fake_kube_api import FakeKubeApi
    api = FakeKubeApi(tokens={"rw-token": "rw"}).start(tls_dir=str(tmp_path))
    try:
        api.add_node("gpu-1")
        config = api.kubeconfig(token="rw-token")
        messages = []
        for light in (True, False):
            kube = _kube.Kube(_kube.build_configuration(params(kubeconfig=config), light=light))
            kube.patch("label", _kube.node_path("gpu-1"), {"metadata": {"labels": {"a": "b"}}},
                       dry_run=True, strategic=True)
            kube.delete("delete", _kube.node_path("gpu-1"), dry_run=True)
            bad = dict(config, clusters=[{"name": "fake", "cluster": {"server": api.url}}])
            with pytest.raises(_kube.KubeError) as exc:
                _kube.Kube(_kube.build_configuration(params(kubeconfig=bad, request_timeout=5), light=light)).get(
                    "list nodes", "/api/v1/nodes")
            messages.append(exc.value.msg)
        seen = [(r["method"], r["content_type"], r["query"], r["body"]) for r in api.requests]
        assert len(seen) == 4 and seen[:2] == seen[2:]
        assert seen[0][1] == "application/strategic-merge-patch+json" and seen[1][0] == "DELETE"
        assert messages[0] == messages[1] and "CERTIFICATE_VERIFY_FAILED" in messages[0]
    finally:
        api.stop()
