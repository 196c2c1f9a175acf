"""_device_plugin: every device plugin rule with its message, the values shape, and real `helm template` renders."""
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")

H200 = {"index": 0, "uuid": "GPU-h0", "name": "NVIDIA H200", "compute_capability": "9.0",
        "memory_total_bytes": 150754820096, "memory_total_mib": 143771, "mig_mode_current": "Disabled"}
V100 = {"index": 0, "uuid": "GPU-v0", "name": "Tesla V100", "compute_capability": "7.0",
        "memory_total_mib": 32768, "mig_mode_current": None}
A100_MIG = {"index": 0, "uuid": "GPU-a0", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0",
            "memory_total_mib": 40960, "mig_mode_current": "Enabled",
            "mig_devices": [{"uuid": "MIG-1", "profile": "3g.20gb"}, {"uuid": "MIG-2", "profile": "3g.20gb"},
                            {"uuid": "MIG-3", "profile": "1g.5gb"}]}


def gpus(base, n):
    return [dict(base, index=i, uuid="%s-%d" % (base["uuid"], i)) for i in range(n)]


def build(profiles, default="default", **kw):
    kw.setdefault("chart_version", "0.17.0")
    return _device_plugin.build(profiles, default, **kw)


def errors_of(profiles, default="default", **kw):
    with pytest.raises(_device_plugin.DevicePluginConfigError) as info:
        build(profiles, default, **kw)
    return " | ".join(info.value.errors)


DEFAULT = {"name": "default"}


def test_values_shape_one_config_per_profile():
    out = build([DEFAULT, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4, "rename_by_default": True,
                           "fail_requests_greater_than_one": True},
                 {"name": "mps-8", "sharing": "mps", "replicas": 8}])
    values = out["values"]
    assert sorted(values["config"]["map"]) == ["default", "mps-8", "ts-4"]
    assert values["config"]["default"] == "default"
    assert values["gfd"] == {"enabled": True}          # MPS needs GFD's nvidia.com/mps.capable
    ts = yaml.safe_load(values["config"]["map"]["ts-4"])
    assert ts == {"version": "v1", "flags": {"migStrategy": "none"},
                  "sharing": {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                              "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    mps = yaml.safe_load(values["config"]["map"]["mps-8"])
    assert mps["sharing"] == {"mps": {"renameByDefault": False,
                                      "resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}}
    assert "devices" not in values["config"]["map"]["mps-8"]
    assert yaml.safe_load(values["config"]["map"]["default"]) == {"version": "v1", "flags": {"migStrategy": "none"}}


def test_no_gfd_key_without_mps_unless_asked():
    assert "gfd" not in build([DEFAULT])["values"]
    assert build([DEFAULT], gfd=True)["values"]["gfd"] == {"enabled": True}


def test_mig_strategies_in_flags():
    out = build([DEFAULT, {"name": "mig-single", "mig_strategy": "single"},
                 {"name": "mig-mixed-ts", "mig_strategy": "mixed", "sharing": "time-slicing",
                  "resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]}])
    cfg = out["configs"]
    assert cfg["mig-single"]["flags"]["migStrategy"] == "single"
    resources = cfg["mig-mixed-ts"]["sharing"]["timeSlicing"]["resources"]
    assert resources == [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]


def test_node_labels_and_shares_per_node():
    out = build([DEFAULT, {"name": "mps-4", "sharing": "mps", "replicas": 4, "rename_by_default": True}],
                nodes=[{"name": "n1", "profile": "mps-4", "gpus": {"gpus": gpus(H200, 8)}},
                       {"name": "n2", "gpus": gpus(H200, 2)}])
    assert out["node_labels"] == {"n1": "mps-4", "n2": "default"}
    share = out["shares"]["n1"]
    assert share["active_thread_percentage"] == 25 and share["enforced"] is True
    assert share["gpus"][0]["memory_per_replica_mib"] == 150754820096 // 4 // (1024 * 1024)
    assert out["expected"]["n1"] == {"nvidia.com/gpu.shared": 32}
    assert out["expected"]["n2"] == {"nvidia.com/gpu": 2}
    assert "n2" not in out["shares"]


def test_time_slicing_share_is_marked_not_enforced():
    out = build([{"name": "ts", "sharing": "time-slicing", "replicas": 10}], "ts",
                nodes=[{"name": "n", "gpus": [{"index": 0, "memory_total_mib": 46068, "compute_capability": "8.9"}]}])
    assert out["shares"]["n"]["enforced"] is False and "not limits" in out["shares"]["n"]["note"]
    assert out["shares"]["n"]["gpus"][0]["memory_per_replica_mib"] == 4606   # k8s-device-plugin#764 (L40S/10)


def test_expected_allocatable_for_mig_strategies():
    single = build([{"name": "s", "mig_strategy": "single"}], "s", nodes=[{"name": "n", "gpus": [A100_MIG]}])
    assert single["expected"]["n"] == {"nvidia.com/gpu": 3}
    mixed = build([{"name": "m", "mig_strategy": "mixed", "sharing": "time-slicing",
                    "resources": [{"name": "mig-3g.20gb", "replicas": 2}]}], "m",
                  nodes=[{"name": "n", "gpus": [A100_MIG, dict(H200, index=1)]}])
    assert mixed["expected"]["n"] == {"nvidia.com/mig-3g.20gb": 4, "nvidia.com/mig-1g.5gb": 1, "nvidia.com/gpu": 1}


# ---- each rule, with the message quoting it ---------------------------------------------------------------------
@pytest.mark.parametrize("profile,fragment", [
    ({"name": "x", "sharing": "time-slicing", "replicas": 1}, "number of replicas must be >= 2"),
    ({"name": "x", "sharing": "mps", "replicas": 1}, "number of replicas must be >= 2 (device plugin rule, also for MPS)"),
    ({"name": "x", "sharing": "time-slicing"}, "no replicas specified"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/gpu"}]}, "no replicas specified"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"replicas": 2}]}, "no resource name specified"),
    ({"name": "x", "sharing": "time-slicing", "replicas": "4"}, "replicas must be a whole number"),
    ({"name": "x", "sharing": "mps", "replicas": 49},
     "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48"),
    ({"name": "x", "sharing": "mps", "replicas": 4, "mig_strategy": "mixed"},
     "using --mig-strategy=mixed is not supported with MPS"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/Bad_Name", "replicas": 2}]},
     "incorrect format for resource name"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/" + "g" * 60, "replicas": 2}]},
     "fully-qualified resource name must be 63 characters or less"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "example.com/gpu", "replicas": 2}]},
     "incorrect format for resource name"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/fpga", "replicas": 2}]},
     "cannot be shared: the device plugin advertises nvidia.com/gpu"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]},
     "exists only with mig_strategy mixed"),
    ({"name": "x", "sharing": "mps", "mig_strategy": "mixed",
      "resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]},
     "sharing using MPS is not supported for MIG devices"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/gpu", "replicas": 2,
                                                             "devices": [0, 1]}]},
     "the device plugin resets 'devices' to 'all'"),
    ({"name": "x", "sharing": "mps", "resources": [{"name": "nvidia.com/gpu", "replicas": 2, "devices": 2}]},
     "Customizing the 'devices' field in sharing.mps.resources is not yet supported"),
    ({"name": "x", "sharing": "time-slicing", "resources": [{"name": "nvidia.com/gpu", "replicas": 2,
                                                             "rename": "nvidia.com/tiny"}]},
     "drops a custom rename"),
    ({"name": "x", "sharing": "time-slicing", "replicas": 2, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]},
     "either replicas (for nvidia.com/gpu) or resources"),
    ({"name": "x", "sharing": "none", "replicas": 2}, "only applies to sharing time-slicing or mps"),
    ({"name": "x", "sharing": "sideways"}, "sharing must be one of none, time-slicing, mps"),
    ({"name": "x", "mig_strategy": "both"}, "mig_strategy must be one of none, single, mixed"),
    ({"name": "x", "replica": 4}, "unknown key(s) replica"),
    ({"name": "x", "flags": {"migStrategy": "single"}}, "set the MIG strategy with mig_strategy"),
    ({"name": "x", "flags": {"failOnInitErorr": True}}, "unknown flag failOnInitErorr"),
    ({"name": "x", "flags": {"plugin": {"deviceListStrategy": "volume-mounts", "bogus": 1}}}, "unknown flag plugin.bogus"),
    ({"name": "x", "flags": {"plugin": {"sharedDevicesAllocationPolicy": "packed"}}}, "needs chart >= 0.20.0"),
    ({"name": "Bad Name!"}, "must be a valid label value and ConfigMap key"),
    ({"name": "n" * 64}, "must be a valid label value and ConfigMap key"),
])
def test_each_rule_refused_with_its_message(profile, fragment):
    assert fragment in errors_of([profile], default=profile.get("name") if isinstance(profile.get("name"), str)
                                 else None)


def test_devices_all_is_accepted_and_omitted():
    out = build([{"name": "x", "sharing": "time-slicing",
                  "resources": [{"name": "gpu", "replicas": 2, "devices": "all"}]}], "x")
    assert out["configs"]["x"]["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]


def test_mps_replica_limit_16_below_compute_capability_7_5():
    msg = errors_of([{"name": "mps", "sharing": "mps", "replicas": 17}], "mps",
                    nodes=[{"name": "old", "gpus": gpus(V100, 2)}])
    assert "invalid device maximum allowed replicas exceeded: 17 > 16" in msg and "compute capability 7.0" in msg
    assert build([{"name": "mps", "sharing": "mps", "replicas": 16}], "mps", nodes=[{"name": "old", "gpus": [V100]}])
    assert build([{"name": "mps", "sharing": "mps", "replicas": 48}], "mps", nodes=[{"name": "new", "gpus": [H200]}])


def test_mps_refused_on_mig_enabled_gpus():
    msg = errors_of([{"name": "mps", "sharing": "mps", "replicas": 2}], "mps",
                    nodes=[{"name": "a100", "gpus": [A100_MIG]}])
    assert "sharing using MPS is not supported for MIG devices" in msg and "a100" in msg


def test_mps_needs_chart_0_15():
    msg = errors_of([{"name": "mps", "sharing": "mps", "replicas": 2}], "mps", chart_version="0.14.5")
    assert "MPS needs chart >= 0.15.0 (sharing.mps was added in v0.15.0)" in msg
    assert "MPS needs chart" in errors_of([{"name": "mps", "sharing": "mps", "replicas": 2}], "mps",
                                          chart_version="0.15.0-rc.2")
    assert build([{"name": "mps", "sharing": "mps", "replicas": 2}], "mps", chart_version="0.15.0")


def test_mps_fail_flag_false_needs_chart_0_20():
    prof = {"name": "mps", "sharing": "mps", "replicas": 2, "fail_requests_greater_than_one": False}
    assert "v0.15.0 to v0.19.x force it to true" in errors_of([prof], "mps", chart_version="0.19.3")
    out = build([prof], "mps", chart_version="0.20.0")
    assert out["configs"]["mps"]["sharing"]["mps"]["failRequestsGreaterThanOne"] is False


@pytest.mark.parametrize("key,env", sorted((k, v[0]) for k, v in _device_plugin.GLOBAL_OVERRIDES.items()))
def test_global_values_that_override_per_node_configs_are_refused(key, env):
    msg = errors_of([DEFAULT], extra_values={key: "x"})
    assert "helm value %s is refused" % key in msg and env in msg and "flag > environment > config file" in msg


def test_config_name_and_owned_keys_refused():
    msg = errors_of([DEFAULT], extra_values={"config": {"name": "my-cm", "map": {}, "default": "x"}})
    assert "Only one of 'config.name' or 'config.map' should ever be set" in msg
    assert "config.map is refused" in msg and "config.default is refused" in msg


def test_gfd_false_with_mps_refused():
    prof = {"name": "mps", "sharing": "mps", "replicas": 2}
    assert "nvidia.com/mps.capable=true" in errors_of([prof], "mps", gfd=False)
    assert "nvidia.com/mps.capable=true" in errors_of([prof], "mps", extra_values={"gfd": {"enabled": False}})


def test_default_profile_rules():
    assert "default_profile is required" in errors_of([{"name": "a"}, {"name": "b"}], default=None)
    assert "specified config nope does not exist" in errors_of([{"name": "a"}], default="nope")
    assert build([{"name": "default"}, {"name": "b"}], None)["values"]["config"]["default"] == "default"
    assert build([{"name": "only"}], None)["values"]["config"]["default"] == "only"


def test_node_with_unknown_profile_refused():
    assert "specified config ghost does not exist" in errors_of([DEFAULT], nodes=[{"name": "n", "profile": "ghost"}])


def test_duplicate_profile_and_empty_list():
    assert "declared twice" in errors_of([DEFAULT, DEFAULT])
    assert "no profiles given" in errors_of([], default=None)


def test_all_errors_reported_together():
    with pytest.raises(_device_plugin.DevicePluginConfigError) as info:
        build([{"name": "a", "sharing": "mps", "replicas": 1, "mig_strategy": "mixed"}], "a",
              extra_values={"migStrategy": "single"})
    assert len(info.value.errors) == 3


def test_version_ordering():
    assert _device_plugin.version_at_least("0.15.0", "0.15.0")
    assert not _device_plugin.version_at_least("0.15.0-rc.2", "0.15.0")
    assert _device_plugin.version_at_least("v0.20.0", "0.15.0")
    assert not _device_plugin.version_at_least("0.9.0", "0.15.0")


# ---- the values render in a chart with NVIDIA's values interface, through the real helm ---------------------------
needs_helm = pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")


def helm_template(values, tmp_path, chart=CHART):
    vf = tmp_path / "values.yaml"
    vf.write_text(yaml.safe_dump(values))
    proc = subprocess.run([HELM, "template", "nvdp", chart, "--namespace", "nvidia-device-plugin", "--values",
                           str(vf)], capture_output=True, text=True, timeout=60, check=False)
    return proc


@needs_helm
def test_helm_template_renders_configmap_and_gfd(tmp_path):
    out = build([DEFAULT, {"name": "ts-4", "sharing": "time-slicing", "replicas": 4},
                 {"name": "mps-4", "sharing": "mps", "replicas": 4}])
    proc = helm_template(out["values"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
    assert cm["metadata"]["name"] == "nvdp-nvidia-device-plugin-configs"
    assert {k: yaml.safe_load(v) for k, v in cm["data"].items()} == out["configs"]
    names = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet")
    assert names == ["nvdp-nvidia-device-plugin", "nvdp-nvidia-device-plugin-gpu-feature-discovery",
                     "nvdp-nvidia-device-plugin-mps-control-daemon"]
    plugin = [d for d in docs if d["metadata"]["name"] == "nvdp-nvidia-device-plugin"][0]
    env = {e["name"]: e.get("value") for e in plugin["spec"]["template"]["spec"]["initContainers"][0]["env"]}
    assert env["DEFAULT_CONFIG"] == "default" and env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    main_env = {e["name"] for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "MIG_STRATEGY" not in main_env        # no global override of the per-node configs


@needs_helm
def test_chart_refuses_what_the_module_refuses(tmp_path):
    # The chart's own check (templates/validation.yml): several configs and no default.
    proc = helm_template({"config": {"map": {"a": "version: v1", "b": "version: v1"}, "default": "",
                                     "fallbackStrategies": ["single"]}}, tmp_path)
    assert proc.returncode != 0 and "A default config must be provided" in proc.stderr
    # ...which the module refuses before helm runs.
    assert "default_profile is required" in errors_of([{"name": "a"}, {"name": "b"}], default=None)


@needs_helm
def test_global_value_would_reach_every_node_as_env(tmp_path):
    # Why migStrategy is refused: the chart puts it on every plugin pod as MIG_STRATEGY.
    proc = helm_template({"migStrategy": "single"}, tmp_path)
    plugin = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "DaemonSet"][0]
    env = {e["name"]: e.get("value") for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MIG_STRATEGY"] == "single"


# ---- with GPU facts from the collection's simulator (the gpu_info facts shape) -----------------------------------
def _sim(tmp_path, shape):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
    return SimulatedBackend(str(tmp_path / "state.json"), shape=shape)


def _mig_enable_with_one_instance(sim, index):
    sim.set_mig_mode(index, True)
    gpu = sim.read_all()["gpus"][index]
    if gpu["mig_mode_current"] != "Enabled":
        sim.reset_gpu(index)
        gpu = sim.read_all()["gpus"][index]
    assert gpu["mig_mode_current"] == "Enabled"
    smallest = min(gpu["gi_profiles"], key=lambda p: p["slices"])
    gi_id = sim.create_gpu_instance(index, smallest["id"], smallest["placements"][0]["start"])
    sim.create_compute_instance(index, gi_id, smallest["ci_profiles"][0]["id"])
    return smallest["name"]


def test_simulated_hgx_h100_mps_shares_from_gpu_info_facts(tmp_path):
    facts = _sim(tmp_path, "hgx-h100-80gb").read_all()
    out = build([DEFAULT, {"name": "mps-4", "sharing": "mps", "replicas": 4, "rename_by_default": True}],
                nodes=[{"name": "h100-node", "profile": "mps-4", "gpus": facts}])
    gpu0 = facts["gpus"][0]
    assert out["expected"]["h100-node"] == {"nvidia.com/gpu.shared": 4 * len(facts["gpus"])}
    assert out["shares"]["h100-node"]["gpus"][0]["memory_per_replica_mib"] == \
        gpu0["memory_total_bytes"] // 4 // (1024 * 1024)
    assert out["shares"]["h100-node"]["active_thread_percentage"] == 25


def test_simulated_mig_enabled_gpu_refuses_mps_and_counts_mig_devices(tmp_path):
    sim = _sim(tmp_path, "hgx-h100-80gb")
    profile = _mig_enable_with_one_instance(sim, 0)
    facts = sim.read_all()
    msg = errors_of([{"name": "mps", "sharing": "mps", "replicas": 2}], "mps",
                    nodes=[{"name": "n", "gpus": facts}])
    assert "sharing using MPS is not supported for MIG devices" in msg and "GPU(s) 0" in msg
    mixed = build([{"name": "mixed", "mig_strategy": "mixed"}], "mixed", nodes=[{"name": "n", "gpus": facts}])
    assert mixed["expected"]["n"] == {"nvidia.com/mig-%s" % profile: 1,
                                      "nvidia.com/gpu": len(facts["gpus"]) - 1}
