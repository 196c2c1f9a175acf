"""The device plugin's MIG strategies and the MPS share math on the simulated Blackwell shapes (facts as gpu_info
returns them): resource names of the +gfx, -me and +me.all profiles, and per-replica memory of a 180 GB GPU."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.filter.sharing import mps_shares
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import execute_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import plan_gpu
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend


def node(tmp_path, shape, layout=None, gpus=1):
    """Facts of a simulated node; ``layout`` (MIG devices) applied on its first ``gpus`` GPUs."""
    sim = SimulatedBackend(str(tmp_path / "node.json"), shape=shape)
    for index in range(gpus if layout else 0):
        sim.set_mig_mode(index, True)
        plan = plan_gpu(sim.read_gpu(index), {"mig_enabled": True, "mig_devices": layout})
        execute_plan(sim, index, plan["operations"])
    return sim.read_all()["gpus"]


def build(profile, gpus):
    return _device_plugin.build([profile], profile["name"], chart_version="0.17.0", nodes=[{"name": "n", "gpus": gpus}])


def test_mixed_strategy_names_suffixed_profiles_as_the_device_plugin_does(tmp_path):
    gpus = node(tmp_path, "rtx-pro-6000-x8", {"2g.48gb+gfx": 1, "1g.24gb-me": 1, "1g.24gb+me.all": 1})
    out = build({"name": "m", "mig_strategy": "mixed"}, gpus)
    # '+' becomes '.' (k8s-device-plugin internal/rm/rm.go); the seven GPUs without MIG stay nvidia.com/gpu
    assert out["expected"]["n"] == {"nvidia.com/mig-2g.48gb.gfx": 1, "nvidia.com/mig-1g.24gb-me": 1,
                                    "nvidia.com/mig-1g.24gb.me.all": 1, "nvidia.com/gpu": 7}
    assert not out["warnings"]


def test_time_slicing_a_gfx_mig_resource(tmp_path):
    gpus = node(tmp_path, "rtx-pro-6000-x8", {"1g.24gb+gfx": 4}, gpus=2)
    out = build({"name": "ts", "mig_strategy": "mixed", "sharing": "time-slicing",
                 "resources": [{"name": "mig-1g.24gb.gfx", "replicas": 3}]}, gpus)
    assert out["expected"]["n"] == {"nvidia.com/mig-1g.24gb.gfx": 24, "nvidia.com/gpu": 6}


@pytest.mark.parametrize("name,fragment", [
    ("mig-1g.24gb+gfx", "incorrect format for resource name"),       # '+' is not valid in a resource name
    ("mig-1c.2g.48gb.gfx", "cannot be shared"),                       # sub-profiles get no resource
])
def test_resources_the_device_plugin_never_advertises_are_refused(name, fragment):
    with pytest.raises(_device_plugin.DevicePluginConfigError) as e:
        build({"name": "ts", "mig_strategy": "mixed", "sharing": "time-slicing",
               "resources": [{"name": name, "replicas": 2}]}, [])
    assert fragment in " | ".join(e.value.errors)


def test_mixed_strategy_warns_about_sub_profile_mig_devices(tmp_path):
    gpus = node(tmp_path, "rtx-pro-6000-x8", {"1c.2g.48gb+gfx": 2, "2g.48gb": 1})
    out = build({"name": "m", "mig_strategy": "mixed"}, gpus)
    assert out["expected"]["n"] == {"nvidia.com/mig-2g.48gb": 1, "nvidia.com/gpu": 7}
    assert "sub-profile(s) 1c.2g.48gb+gfx exist" in " ".join(out["warnings"])
    single = build({"name": "s", "mig_strategy": "single"}, gpus)
    assert single["expected"]["n"] == {"nvidia.com/gpu": 3} and not single["warnings"]


def test_single_strategy_on_hgx_b200(tmp_path):
    gpus = node(tmp_path, "hgx-b200", {"1g.23gb": 7}, gpus=8)
    assert build({"name": "s", "mig_strategy": "single"}, gpus)["expected"]["n"] == {"nvidia.com/gpu": 56}


@pytest.mark.parametrize("shape,replicas,per_replica", [
    ("hgx-b200", 4, 45839),         # 183359 MiB // 4: per-replica memory of a 180 GB GPU
    ("hgx-b200", 10, 18335),
    ("hgx-b300", 4, 68760),         # 275040 // 4
    ("rtx-pro-6000-x8", 3, 32629),  # 97887 // 3
    ("gb200-nvl", 2, 94735),        # 189471 // 2
])
def test_mps_shares_use_the_real_memory_of_blackwell_gpus(tmp_path, shape, replicas, per_replica):
    gpus = node(tmp_path, shape)
    shares = mps_shares(gpus, replicas)
    assert shares["memory_per_replica_mib_min"] == per_replica
    assert all(g["memory_per_replica_mib"] == per_replica for g in shares["gpus"])
    assert shares["active_thread_percentage"] == 100 // replicas
    out = build({"name": "mps", "sharing": "mps", "replicas": replicas}, gpus)
    assert out["shares"]["n"]["memory_per_replica_mib_min"] == per_replica and out["shares"]["n"]["enforced"]
