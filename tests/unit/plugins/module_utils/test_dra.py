"""The DRA pure layer (plugins/module_utils/plan/_dra.py): the templates it builds, the limits it refuses, and the slice
comparison the node verify runs before a node is uncordoned."""

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra

H200_BYTES = 150754820096
A100_BYTES = 85899345920


def gpu(index, uuid, name="NVIDIA H200", nbytes=H200_BYTES, mig=None):
    out = {"index": index, "uuid": uuid, "name": name, "memory_total_bytes": nbytes,
           "mig_mode_current": "Enabled" if mig is not None else "Disabled", "mig_devices": []}
    for n, (muuid, profile) in enumerate(mig or []):
        out["mig_devices"].append({"uuid": muuid, "profile": profile, "gi_id": n, "ci_id": 0,
                                   "placement": {"start": n, "size": 1}})
    return out


MPS4 = {"name": "mps-4", "sharing": "mps", "replicas": 4}
TS2 = {"name": "ts-2-cdi-cri", "sharing": "time-slicing", "replicas": 2,
       "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}}}


def test_gpu_config_shapes():
    assert _dra.gpu_config() == {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    assert _dra.gpu_config("time-slicing", interval="Long")["sharing"] == {
        "strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
    assert _dra.gpu_config("mps", active_thread_percentage=25, pinned_memory_limit="100Mi")["sharing"] == {
        "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "100Mi"}}


def test_mps_node_template_uses_the_device_plugins_share_math_per_product():
    gpus = [gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c", "NVIDIA A100-SXM4-80GB", A100_BYTES)]
    templates = dict((t["name"], t) for t in _dra.node_templates(MPS4, gpus, "n1"))
    assert sorted(templates) == ["gpu-mps-4-a100-sxm4-80gb", "gpu-mps-4-h200"]
    h200 = templates["gpu-mps-4-h200"]
    assert h200["config"]["sharing"]["mpsConfig"] == {
        "defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "%dMi" % (H200_BYTES // 4 // 2 ** 20)}
    assert h200["selectors"] == ["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'",
                                 "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('%d')) == 0" % H200_BYTES]
    assert templates["gpu-mps-4-a100-sxm4-80gb"]["config"]["sharing"]["mpsConfig"][
        "defaultPinnedDeviceMemoryLimit"] == "20480Mi"


def test_mig_node_templates_per_profile_and_per_gpu_templates_select_uuids():
    gpus = [gpu(0, "GPU-a", mig=[("MIG-1", "1g.18gb"), ("MIG-2", "1g.18gb"), ("MIG-3", "3g.71gb")]),
            gpu(1, "GPU-b")]
    mig = {"name": "mig-mixed", "mig_strategy": "mixed"}
    templates = dict((t["name"], t) for t in _dra.node_templates(mig, gpus, "node-1", per_gpu=True))
    assert sorted(templates) == ["mig-1g.18gb", "mig-3g.71gb", "node-1-gpu1"]
    assert templates["mig-1g.18gb"]["device_class"] == "mig"
    assert templates["mig-1g.18gb"]["selectors"] == ["device.attributes['gpu.nvidia.com'].profile == '1g.18gb'"]
    assert templates["node-1-gpu1"]["selectors"] == ["device.attributes['gpu.nvidia.com'].uuid == 'GPU-b'"]


def test_fleet_templates_strip_the_device_list_suffix_and_keep_the_interval():
    names = [(t["name"], t["profile"]) for t in _dra.fleet_templates([TS2, MPS4, {"name": "default"}], "Short")]
    assert names == [("gpu", "default"), ("gpu-ts-2", "ts-2")]
    ts = _dra.fleet_templates([TS2], "Short")[1]
    assert ts["config"]["sharing"]["timeSlicingConfig"] == {"interval": "Short"}


def test_explicit_templates_per_workload_mps_limits():
    # the limits are Kubernetes quantities, written as given (tests/unit/plugins/module_utils/test_dra_quantities.py)
    out = _dra.explicit_templates([{"name": "train-small", "sharing": "mps", "active_thread_percentage": 20,
                                    "pinned_memory_limit": "16Gi", "per_device_pinned_memory_limit": {0: "8G"},
                                    "product": "NVIDIA H200"}])
    assert out[0]["config"]["sharing"]["mpsConfig"] == {
        "defaultActiveThreadPercentage": 20, "defaultPinnedDeviceMemoryLimit": "16Gi",
        "defaultPerDevicePinnedMemoryLimit": {"0": "8G"}}
    assert out[0]["selectors"] == ["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"]


@pytest.mark.parametrize("item, words", [
    ({"name": "a", "sharing": "mps", "active_thread_percentage": "25%"}, "without a % sign"),
    ({"name": "a", "sharing": "mps", "active_thread_percentage": 0}, "from 1 to 100"),
    ({"name": "a", "sharing": "mps", "active_thread_percentage": 101}, "from 1 to 100"),
    ({"name": "a", "sharing": "mps", "pinned_memory_limit": "8 G"}, "spaces"),
    ({"name": "a", "sharing": "mps", "pinned_memory_limit": "8GiB"}, "not a Kubernetes quantity"),
    ({"name": "a", "sharing": "mps", "pinned_memory_limit": 8}, "8 is 8 bytes, below 1Mi"),
    ({"name": "a", "sharing": "mps", "per_device_pinned_memory_limit": {"gpu0": "8G"}}, "neither an index"),
    ({"name": "a", "sharing": "mps", "per_device_pinned_memory_limit": {}}, "non-empty mapping"),
    ({"name": "a", "sharing": "mps", "per_device_pinned_memory_limit": {"1": "8G"}}, "not one of the claim's 1"),
    ({"name": "a", "sharing": "mps", "count": 2, "per_device_pinned_memory_limit": {"2": "8G"}}, "(0..1)"),
    ({"name": "a", "pinned_memory_limit": "8G"}, "only apply with sharing mps"),
    ({"name": "a", "sharing": "time-slicing", "interval": "VeryLong"}, "Default, Short, Medium, Long"),
    ({"name": "a", "device_class": "mig"}, "needs mig_profile"),
    ({"name": "a", "device_class": "mig", "mig_profile": "1g.10gb", "sharing": "mps"}, "takes no sharing"),
    ({"name": "A_b"}, "not a Kubernetes object name"),
    ({"name": "a", "limit": 1}, "unknown keys limit"),
    ({"name": "a", "product": "H200'; true"}, "CEL selector"),
    ({"name": "a", "count": 0}, "count"),
])
def test_explicit_templates_refuse_garbage(item, words):
    with pytest.raises(_dra.DraError) as exc:
        _dra.explicit_templates([item])
    assert words in str(exc.value)


def test_template_object_is_labelled_and_writes_the_defaults():
    decl = _dra.fleet_templates([TS2])[1]
    obj = _dra.template_object(decl, "ml", "fleet")
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuops.nvidia",
                                         "gpuops.nvidia/claim-template-set": "fleet", "gpuops.nvidia/profile": "ts-2"}
    request = obj["spec"]["spec"]["devices"]["requests"][0]
    assert request == {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                                                  "count": 1}}
    assert obj["spec"]["spec"]["devices"]["config"] == [
        {"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": decl["config"]}}]


def _slice(node, devices, generation=1, count=1, driver="gpu.nvidia.com"):
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": count},
                     "devices": devices}}


def _dev(name, uuid, kind="gpu", parent=None, profile=None):
    attrs = {"type": {"string": kind}, "uuid": {"string": uuid}}
    if parent:
        attrs.update(parentUUID={"string": parent}, profile={"string": profile})
    return {"name": name, "attributes": attrs}


def test_slices_match_exactly():
    gpus = [gpu(0, "GPU-a", mig=[("MIG-1", "1g.18gb")]), gpu(1, "GPU-b")]
    slices = [_slice("n", [_dev("gpu-0-mig-19-0-1", "MIG-1", "mig", "GPU-a", "1g.18gb"), _dev("gpu-1", "GPU-b")])]
    assert _dra.slice_problems(slices, "n", gpus) == []


def test_a_stale_slice_after_a_mig_change_is_reported():
    gpus = [gpu(0, "GPU-a", mig=[("MIG-1", "1g.18gb")])]
    stale = [_slice("n", [_dev("gpu-0", "GPU-a")])]
    problems = _dra.slice_problems(stale, "n", gpus)
    assert "MIG device MIG-1 (1g.18gb on GPU GPU-a) is not published" in problems
    assert any("GPU-a (gpu-0) is published but the node has no such device" in p and "enumerates only when it starts"
               in p for p in problems)


def test_only_the_newest_pool_generation_counts_and_other_nodes_and_drivers_are_ignored():
    gpus = [gpu(0, "GPU-a")]
    slices = [_slice("n", [_dev("gpu-0", "GPU-old")], generation=1), _slice("n", [_dev("gpu-0", "GPU-a")], 2),
              _slice("m", [_dev("gpu-0", "GPU-x")]), _slice("n", [_dev("x", "GPU-y")], driver="other.example.com")]
    assert _dra.slice_problems(slices, "n", gpus) == []


def test_missing_and_incomplete_pools():
    assert _dra.slice_problems([], "n", [gpu(0, "GPU-a")]) == ["node n has no ResourceSlice of driver gpu.nvidia.com"]
    problems = _dra.slice_problems([_slice("n", [_dev("gpu-0", "GPU-a")], count=2)], "n", [gpu(0, "GPU-a")])
    assert problems == ["pool n generation 1 has 1 of its 2 slices"]


def test_qualified_attribute_names_are_read_too():
    dev = {"name": "gpu-0", "attributes": {"gpu.nvidia.com/type": {"string": "gpu"},
                                           "gpu.nvidia.com/uuid": {"string": "GPU-a"}}}
    assert _dra.slice_problems([_slice("n", [dev])], "n", [gpu(0, "GPU-a")]) == []
