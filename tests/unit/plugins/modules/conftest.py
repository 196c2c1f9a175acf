import os

import pytest


@pytest.fixture
def no_ambient_credentials(monkeypatch, tmp_path):
    """No K8S_AUTH_* / KUBECONFIG from the environment, and a fresh HOME (no ~/.kube/config): a Kubernetes module
    test talks to the fake API server it names, or to nothing."""
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def api(tmp_path):
    """The fake API server as Kubernetes 1.34 serves resource.k8s.io/v1, with namespaces ml-a and ml-b and a kubeconfig
    (its ``kubeconfig_path``) of a read-write token: the DRA modules' tests."""
    import yaml
    from tests.conftest import KUBE_TOKEN
    from tests.support.fake_kube_api import FakeKubeApi
    fake = FakeKubeApi(tokens={KUBE_TOKEN: "rw"}, server_version="v1.34.1").start()
    fake.kubeconfig_path = str(tmp_path / "kubeconfig")
    with open(fake.kubeconfig_path, "w") as handle:
        yaml.safe_dump(fake.kubeconfig(token=KUBE_TOKEN), handle)
    for ns in ("ml-a", "ml-b"):
        fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        yield fake
    finally:
        fake.stop()
