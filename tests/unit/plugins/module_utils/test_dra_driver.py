"""_dra_driver: the owned and refused chart values, and what on a node conflicts with NVIDIA's DRA driver."""
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin, _dra_driver


def _pod(owner, labels, phase="Running", namespace="ns"):
    return {"metadata": {"name": owner + "-abc", "namespace": namespace, "labels": labels,
                         "ownerReferences": [{"kind": "DaemonSet", "name": owner}]},
            "status": {"phase": phase}}


def test_build_values_sets_the_owned_keys_and_keeps_the_users():
    values = _dra_driver.build_values({"featureGates": {"Other": True}, "kubeletPlugin": {"nodeSelector": {"a": "b"}},
                                       "nvidiaDriverRoot": "/run/nvidia/driver"}, compute_domains=True)
    assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}}
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["featureGates"] == {"Other": True, "TimeSlicingSettings": True, "MPSSupport": True}
    assert values["kubeletPlugin"]["nodeSelector"] == {"a": "b"}
    assert values["kubeletPlugin"]["affinity"] == _device_plugin.pausable_affinity(None)
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"


def test_values_errors_name_each_key_once():
    errors = _dra_driver.values_errors({"resources": [], "featureGates": {"MPSSupport": False}, "namespace": "x",
                                        "nvidiaCtkPath": "/x", "kubeletPlugin": {"affinity": 3}})
    assert len(errors) == 5, errors
    assert errors[0].startswith("values.resources must be a mapping")
    assert any("values.kubeletPlugin.affinity must be a mapping" in e for e in errors)
    assert _dra_driver.values_errors({"kubeletPlugin": {"tolerations": []}, "featureGates": {"X": True}}) == []


def test_dynamic_mig_is_refused_because_the_module_turns_mps_on():
    errors = _dra_driver.values_errors({"featureGates": {"DynamicMIG": True}})
    assert len(errors) == 1 and errors[0].startswith("values.featureGates.DynamicMIG cannot be true")
    assert "MPSSupport" in errors[0]
    assert _dra_driver.values_errors({"featureGates": {"DynamicMIG": False, "NVMLDeviceHealthCheck": True}}) == []


def test_which_pods_are_device_plugins():
    chart = {"app.kubernetes.io/name": "nvidia-device-plugin"}
    assert "NVIDIA's device plugin chart" in _dra_driver.device_plugin_pod(_pod("nvdp-nvidia-device-plugin", chart))
    assert _dra_driver.device_plugin_pod(_pod("nvdp-nvidia-device-plugin-gpu-feature-discovery", chart)) is None
    assert _dra_driver.device_plugin_pod(_pod("nvdp-nvidia-device-plugin-mps-control-daemon", chart)) is None
    assert _dra_driver.device_plugin_pod(_pod("nvdp-nvidia-device-plugin", chart, phase="Succeeded")) is None
    operator = _pod("nvidia-device-plugin-daemonset", {"app": "nvidia-device-plugin-daemonset"})
    assert "GPU Operator" in _dra_driver.device_plugin_pod(operator)
    assert _dra_driver.device_plugin_pod({"metadata": {"name": "bare", "labels": chart}}) is None


def test_the_dra_kubelet_plugin_pod_and_advertised_resources():
    pod = _pod("nvidia-dra-driver-gpu-kubelet-plugin", {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"})
    assert "DRA driver kubelet plugin" in _dra_driver.dra_kubelet_plugin_pod(pod)
    assert _dra_driver.dra_kubelet_plugin_pod(_pod("nvidia-dra-driver-gpu-controller",
                                                   {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"})) is None
    node = {"status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7",
                                       "nvidia.com/gpu.shared": "16"}}}
    assert _dra_driver.advertised_plugin_resources(node) == {"nvidia.com/gpu.shared": "16",
                                                             "nvidia.com/mig-1g.10gb": "7"}
    assert _dra_driver.kubelet_plugin_daemonset({"nameOverride": "dra"}) == "dra-kubelet-plugin"
    assert _dra_driver.kubelet_plugin_daemonset({}) == "nvidia-dra-driver-gpu-kubelet-plugin"
