"""runtime_class: real kubernetes client over HTTP against the fake API server."""

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import runtime_class
from tests.support.modrun import run_main as run_module


# no K8S_AUTH_* / KUBECONFIG of the machine running the tests, HOME a scratch directory (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")


def rc(kube_api, name="nvidia"):
    return kube_api.get("node.k8s.io", "runtimeclasses", name)


def test_check_mode_creates_nothing(kube_api):
    res = run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path), check_mode=True, diff=True)
    assert res["changed"] and res["runtime_class"] == {"name": "nvidia", "handler": "nvidia", "scheduling": None}
    assert rc(kube_api) is None
    assert [w["query"].get("dryRun") for w in kube_api.writes()] == [["All"]]
    assert res["diff"]["before"] == {} and res["diff"]["after"]["handler"] == "nvidia"


def test_create_then_idempotent_then_update_selector(kube_api):
    a = dict(kubeconfig=kube_api.kubeconfig_path)
    assert run_module(runtime_class.main, a)["changed"] is True
    assert rc(kube_api)["handler"] == "nvidia"
    n = len(kube_api.writes())
    assert run_module(runtime_class.main, a)["changed"] is False
    assert len(kube_api.writes()) == n
    res = run_module(runtime_class.main, dict(a, node_selector={"nvidia.com/gpu.present": True}), diff=True)
    assert res["changed"] and rc(kube_api)["scheduling"] == {"nodeSelector": {"nvidia.com/gpu.present": "true"}}
    assert res["diff"]["before"]["scheduling"] is None
    assert run_module(runtime_class.main, dict(a, node_selector={"nvidia.com/gpu.present": "true"}))["changed"] is False


def test_not_needed_when_nvidia_is_containerd_default(kube_api):
    res = run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, containerd_default_runtime="nvidia"))
    assert res["changed"] is False and "already is nvidia" in res["skipped_reason"]
    assert kube_api.requests == []
    res = run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, containerd_default_runtime="runc"))
    assert res["changed"] is True and rc(kube_api)


def test_handler_change_refused_without_recreate(kube_api):
    kube_api.put({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                  "handler": "nvidia-legacy"})
    res = run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path))
    assert res["failed"] and "does not allow changing a handler in place" in res["msg"]
    assert rc(kube_api)["handler"] == "nvidia-legacy"
    res = run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, recreate=True))
    assert res["changed"] and rc(kube_api)["handler"] == "nvidia"


def test_absent(kube_api):
    run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path))
    assert run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, state="absent"),
                      check_mode=True)["changed"]
    assert rc(kube_api)
    assert run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, state="absent"))["changed"]
    assert rc(kube_api) is None
    assert run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, state="absent"))["changed"] is False


@pytest.mark.parametrize("kw,fragment", [
    (dict(handler="NVIDIA"), "a lowercase RFC 1123 label"),
    (dict(name="Bad_Name"), "a lowercase RFC 1123 subdomain"),
    (dict(node_selector={"bad key!": "x"}), "name part must consist of alphanumeric"),
])
def test_bad_input_refused_before_any_call(kube_api, kw, fragment):
    res = run_module(runtime_class.main, dict(kubeconfig=kube_api.kubeconfig_path, **kw))
    assert res["failed"] and fragment in res["msg"]
    assert kube_api.requests == []


def test_forbidden(kube_api):
    res = run_module(runtime_class.main, dict(host=kube_api.url, api_key=kube_api.ro_token))
    assert res["failed"] and res["status"] == 403 and "cannot create resource \"runtimeclasses\"" in res["msg"]
