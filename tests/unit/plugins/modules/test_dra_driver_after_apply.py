"""dra_driver's check after helm (its module tests run helm and a cluster: tests/integration): a DeviceClass the chart
did not create is a Failure raised to the module's base (issue 48: one way to fail), with its message and the result
so far (the base passes both to fail_json)."""
import types

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, failure
from ansible_collections.gpuops.nvidia.plugins.modules import dra_driver


def release(monkeypatch, present):
    params = {"chart_path": None, "chart_ref": "nvidia-dra-driver-gpu", "chart_repo_url": "https://charts.example",
              "namespace": "nvidia-dra-driver-gpu", "release_name": "nvidia-dra-driver-gpu"}
    run = dra_driver.DraDriverRelease(types.SimpleNamespace(params=params))
    run.result.update(changed=True, commands=["helm upgrade --install"])
    monkeypatch.setattr(_kube.Kube, "from_params", classmethod(lambda cls, params: object()))
    monkeypatch.setattr(_kube, "read_or_none",
                        lambda kube, what, path: {} if path.rsplit("/", 1)[-1] in present else None)
    return run


def test_a_device_class_the_chart_did_not_create_fails_with_the_result_so_far(monkeypatch):
    run = release(monkeypatch, present={"gpu.nvidia.com"})
    with pytest.raises(Failure) as failed:
        run.after_apply(None)
    got = failure(failed.value, run.result)
    assert got["msg"].startswith("helm installed release nvidia-dra-driver-gpu/nvidia-dra-driver-gpu, but DeviceClass "
                                 "mig.nvidia.com does not exist at %s: the chart did not create it"
                                 % _kube.DRA_API_VERSION)
    assert got["changed"] is True and got["commands"] == ["helm upgrade --install"]


def test_both_device_classes_there_is_no_failure(monkeypatch):
    run = release(monkeypatch, present={"gpu.nvidia.com", "mig.nvidia.com"})
    assert run.after_apply(None) is None
