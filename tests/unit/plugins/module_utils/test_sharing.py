import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._sharing import ShareError, replica_shares

H200 = {"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200", "memory_total_bytes": 150754820096,
        "memory_total_mib": 143771}
L40S_DP_EXAMPLE = {"index": 0, "uuid": "GPU-l", "name": "NVIDIA L40S", "memory_total_mib": 46068}


def test_device_plugin_l40s_example_10_replicas_gives_4606m():
    # k8s-device-plugin#764: L40S, 10 replicas -> set_default_device_pinned_mem_limit 0 4606M
    shares = replica_shares([L40S_DP_EXAMPLE], 10)
    assert shares["gpus"][0]["memory_per_replica_mib"] == 4606
    assert shares["active_thread_percentage"] == 10


def test_integer_division_like_the_daemon():
    shares = replica_shares([H200], 3)
    assert shares["gpus"][0]["memory_per_replica_mib"] == 150754820096 // 3 // (1024 * 1024)
    assert shares["active_thread_percentage"] == 33


def test_pool_spreads_total_over_gpus():
    gpus = [dict(H200, index=i, uuid="GPU-%d" % i) for i in range(4)]
    shares = replica_shares(gpus, 8, mode="pool")
    assert shares["replicas_per_gpu"] == 2
    assert shares["replicas_total"] == 8
    assert shares["active_thread_percentage"] == 50


@pytest.mark.parametrize("replicas,mode,fragment", [
    (1, "per_gpu", ">= 2"),
    (True, "per_gpu", "whole number"),
    ("4", "per_gpu", "whole number"),
    (6, "pool", "multiple of the GPU count"),
    (4, "sideways", "mode must be one of"),
])
def test_bad_input_is_refused_with_a_reason(replicas, mode, fragment):
    gpus = [dict(H200, index=i) for i in range(4)]
    with pytest.raises(ShareError, match=fragment):
        replica_shares(gpus, replicas, mode=mode)


def test_no_gpus_is_an_error():
    with pytest.raises(ShareError, match="no GPUs"):
        replica_shares([], 2)
