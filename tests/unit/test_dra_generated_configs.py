"""Every GpuConfig the collection generates is one that NVIDIA's own types accepted (strict decode, Normalize, Validate
and the checks the kubelet plugin makes before it touches a GPU), as recorded in
tests/fixtures/dra/gpuconfig-verdicts-v25.8.1.json by scripts/nvidia_facts/gpuconfig_check.go against
kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1. A generator change that makes a config outside that record fails here:
run the checker again (docs/readings/dra-driver-facts.md) and record its verdict."""

import json
import os
import re

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "dra", "gpuconfig-verdicts-v25.8.1.json")
H200 = 150754820096
A100_80 = 85899345920


def _verdicts():
    with open(FIXTURE) as handle:
        return json.load(handle)["verdicts"]


def _accepted():
    return [v["input"] for v in _verdicts() if v["accepted"]]


def _generated():
    out = []
    for interval in _dra.INTERVALS:
        out.extend(t["config"] for t in _dra.fleet_templates(
            [{"name": "ts-2", "sharing": "time-slicing", "replicas": 2}], interval) if t["config"])
    for name, nbytes in (("NVIDIA H200", H200), ("NVIDIA A100-SXM4-80GB", A100_80)):
        for replicas in (2, 3, 4, 7, 8):
            gpu = {"index": 0, "uuid": "GPU-x", "name": name, "memory_total_bytes": nbytes,
                   "mig_mode_current": "Disabled"}
            out.extend(t["config"] for t in _dra.node_templates(
                {"name": "mps-%d" % replicas, "sharing": "mps", "replicas": replicas}, [gpu]))
    return out


@pytest.mark.parametrize("config", _generated(), ids=lambda c: json.dumps(c.get("sharing"), sort_keys=True)[:60])
def test_generated_config_was_accepted_by_nvidias_types(config):
    assert config in _accepted(), "not in the recorded verdicts: %s" % json.dumps(config)


def test_the_collection_refuses_what_nvidias_driver_refuses_at_prepare_time():
    # the limits that pass the driver's Validate() but fail when the claim is prepared (a GPU would be left without
    # the cap): the collection's own validation refuses them before anything is published
    by_name = dict((v["name"], v) for v in _verdicts())
    for name, item in (("mps-per-device-key-gpu0", {"per_device_pinned_memory_limit": {"gpu0": "8G"}}),
                       ("mps-per-device-index-5", {"per_device_pinned_memory_limit": {"5": "8G"}, "count": 2}),
                       ("mps-pinned-negative", {"pinned_memory_limit": "-1G"}),
                       ("mps-threads-101", {"active_thread_percentage": 101}),
                       ("mps-threads-negative", {"active_thread_percentage": -1})):
        assert by_name[name]["accepted"] is False
        with pytest.raises(_dra.DraError):
            _dra.explicit_templates([dict(item, name="w", sharing="mps")])


def test_time_slicing_always_names_its_interval():
    # NVIDIA's Validate() dereferences the interval: timeSlicingConfig without one panics (recorded as an edge case)
    for t in _dra.fleet_templates([{"name": "ts-2", "sharing": "time-slicing", "replicas": 2}]):
        if t["config"]:
            assert t["config"]["sharing"]["timeSlicingConfig"]["interval"] in _dra.INTERVALS


def _pinned(verdict):
    mps = ((verdict["input"].get("sharing") or {}).get("mpsConfig") or {})
    return mps.get("defaultPinnedDeviceMemoryLimit"), mps.get("defaultPerDevicePinnedMemoryLimit")


def test_limits_nvidias_driver_took_reach_its_daemon_as_it_computed_them():
    # every recorded config with pinned memory limits that the driver accepted: the same limits declared as an explicit
    # template are written unchanged, and the bytes the collection reads in them, in whole MiB, are the "<n>M" the
    # driver started the MPS daemon with for each device (MpsPerDevicePinnedMemoryLimit.Normalize)
    checked = 0
    for verdict in _verdicts():
        default, per_device = _pinned(verdict)
        if not verdict["accepted"] or (default is None and per_device is None):
            continue
        count = verdict["devices"]
        item = {"name": "w", "sharing": "mps", "count": count}
        if default is not None:
            item["pinned_memory_limit"] = default
        if per_device is not None:
            item["per_device_pinned_memory_limit"] = per_device
        mps = _dra.explicit_templates([item])[0]["config"]["sharing"]["mpsConfig"]
        assert mps.get("defaultPinnedDeviceMemoryLimit") == default
        assert mps.get("defaultPerDevicePinnedMemoryLimit") == per_device
        limits = (per_device or {}).values() if per_device and len(per_device) == count else [default] * count
        ours = sorted("%dM" % (_dra.quantity_bytes(q)[0] // 2 ** 20) for q in limits)
        assert ours == sorted(verdict["mps_limits"][str(count)]["limits"].values()), verdict["name"]
        checked += 1
    assert checked >= 12


def test_limits_nvidias_driver_refused_are_refused_before_anything_is_published():
    refused = [v for v in _verdicts() if not v["accepted"] and _pinned(v)[0] is not None]
    assert sorted(_pinned(v)[0] for v in refused) == ["-1Gi", "1Ki", "ten"]
    for verdict in refused:
        with pytest.raises(_dra.DraError, match=re.escape("pinned_memory_limit '%s'" % _pinned(verdict)[0])):
            _dra.explicit_templates([{"name": "w", "sharing": "mps", "pinned_memory_limit": _pinned(verdict)[0]}])
