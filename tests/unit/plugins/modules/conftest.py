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
