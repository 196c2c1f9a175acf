"""The driver-modules planner: /proc/modules parsing, the driver container's in-use rule (with nvidia_drm), the
unload/load orders, the daemons' orders and which holders are the daemons' own."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_modules as dm
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps

# /proc/modules as a host with the driver loaded prints it (refcnt 2 on nvidia = nvidia_uvm + nvidia_modeset).
IDLE = """\
nvidia_uvm 2068480 0 - Live 0xffffffffc1a00000 (POE)
nvidia_modeset 1638400 0 - Live 0xffffffffc1800000 (POE)
nvidia 11882496 2 nvidia_uvm,nvidia_modeset, Live 0xffffffffc0a00000 (POE)
ext4 1114112 1 - Live 0xffffffffc0600000
"""


def mods(**counts):
    """{name: {"refcnt", "users"}} with users as the kernel lists them for the loaded driver modules."""
    out = {}
    for name, refcnt in counts.items():
        out[name] = {"refcnt": refcnt, "users": []}
    for user, used in dm.USES.items():
        if user in out and used in out:
            out[used]["users"].append(user)
    return out


def test_parse_proc_modules():
    parsed = dm.parse_proc_modules(IDLE)
    assert list(parsed) == ["nvidia_uvm", "nvidia_modeset", "nvidia", "ext4"]
    assert parsed["nvidia"] == {"refcnt": 2, "users": ["nvidia_uvm", "nvidia_modeset"]}
    assert parsed["nvidia_uvm"] == {"refcnt": 0, "users": []}
    assert dm.driver_loaded(parsed) == ["nvidia", "nvidia_uvm", "nvidia_modeset"]


def test_parse_proc_modules_names_a_bad_line():
    with pytest.raises(dm.DriverModulesError, match="line 2 is not .name size refcnt"):
        dm.parse_proc_modules("nvidia 1 0 - Live 0x0\ngarbage\n")


def test_idle_driver_is_not_in_use():
    assert dm.in_use(dm.parse_proc_modules(IDLE)) == []
    assert dm.in_use(mods(nvidia=3, nvidia_uvm=0, nvidia_modeset=0, nvidia_peermem=0)) == []


@pytest.mark.parametrize("counts, culprit", [
    # the driver container's rule: nvidia's refcnt above its loaded dependents ...
    (dict(nvidia=3, nvidia_uvm=0, nvidia_modeset=0), "module nvidia has 1 reference(s) beyond its loaded dependent "
                                                     "modules (nvidia_modeset, nvidia_uvm)"),
    (dict(nvidia=1), "module nvidia has 1 reference(s) beyond none expected"),
    # ... or a dependent with any reference
    (dict(nvidia=2, nvidia_uvm=1, nvidia_modeset=0), "module nvidia_uvm has 1 reference(s)"),
    (dict(nvidia=3, nvidia_uvm=0, nvidia_modeset=0, nvidia_peermem=1), "module nvidia_peermem has 1 reference(s)"),
    # nvidia_drm: one reference on nvidia_modeset is its own, one on nvidia_drm is a DRM client
    (dict(nvidia=2, nvidia_uvm=0, nvidia_modeset=2, nvidia_drm=0), "module nvidia_modeset has 1 reference(s) beyond "
                                                                   "its loaded dependent modules (nvidia_drm)"),
    (dict(nvidia=2, nvidia_uvm=0, nvidia_modeset=1, nvidia_drm=1), "module nvidia_drm has 1 reference(s)"),
])
def test_in_use(counts, culprit):
    reasons = dm.in_use(mods(**counts))
    assert len(reasons) == 1 and reasons[0].startswith(culprit), reasons


def test_nvidia_drm_loaded_is_not_in_use_by_itself():
    assert dm.in_use(mods(nvidia=2, nvidia_uvm=0, nvidia_modeset=1, nvidia_drm=0)) == []


def test_a_module_outside_the_driver_is_named():
    modules = dm.parse_proc_modules("nvidia_fs 1 0 - Live 0x0\n" + IDLE.replace(
        "nvidia 11882496 2 nvidia_uvm,nvidia_modeset,", "nvidia 11882496 3 nvidia_fs,nvidia_uvm,nvidia_modeset,"))
    assert dm.foreign_users(modules) == {"nvidia": ["nvidia_fs"]}
    assert dm.in_use(modules) == ["module nvidia is used by nvidia_fs, which is not part of the NVIDIA driver: "
                                  "unload it first"]


def test_unload_and_load_orders():
    everything = mods(nvidia=4, nvidia_uvm=0, nvidia_modeset=1, nvidia_drm=0, nvidia_peermem=0)
    assert dm.unload_plan(everything) == ["nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"]
    assert dm.unload_plan(mods(nvidia=1, nvidia_uvm=0)) == ["nvidia_uvm", "nvidia"]
    wanted = dm.wanted_modules(["nvidia", "nvidia_drm"])
    assert wanted == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    assert dm.load_plan({}, wanted) == wanted
    assert dm.load_plan(mods(nvidia=0), wanted) == ["nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    assert dm.wanted_modules([], also_load=["nvidia_peermem"]) == ["nvidia", "nvidia_uvm", "nvidia_modeset",
                                                                   "nvidia_peermem"]
    # every module is unloaded after the modules that use it, and loaded after the one it uses
    for user, used in dm.USES.items():
        assert dm.UNLOAD_ORDER.index(user) < dm.UNLOAD_ORDER.index(used)
        assert dm.LOAD_ORDER.index(user) > dm.LOAD_ORDER.index(used)


def test_daemon_orders():
    # the orders before the table came from the step registry, kept (the registry's table adds nvsm and the exporter)
    table = _node_steps.driver_daemons()
    running = [{"name": n} for n in ("nvlsm", "persistenced", "dcgm", "fabricmanager", "mps")]
    assert [d["name"] for d in dm.stop_order(running, table)] == ["dcgm", "mps", "persistenced", "fabricmanager",
                                                                  "nvlsm"]
    assert [d["name"] for d in dm.start_order(running, table)] == ["persistenced", "nvlsm", "fabricmanager", "mps",
                                                                   "dcgm"]
    assert [d["units"] for d in _node_steps.driver_daemons("my-mps.service") if d["name"] == "mps"] == [
        ("my-mps.service",)]
    # a name the table does not hold (an unload record of another release) is started last, not an error
    assert [d["name"] for d in dm.start_order([{"name": "gone"}, {"name": "dcgm"}], table)] == ["dcgm", "gone"]


def test_not_ours_keeps_only_holders_that_are_not_the_stopped_daemons():
    holders = [{"pid": 10, "unit": "nvidia-persistenced.service"}, {"pid": 11, "unit": None},
               {"pid": 12, "unit": "gpuops-mps-control.service"}, {"pid": 13, "unit": "kubelet.service"}]
    running = [{"name": "persistenced", "unit": "nvidia-persistenced.service"}, {"name": "fabricmanager", "pid": 11},
               {"name": "mps", "unit": "gpuops-mps-control.service"}]
    assert [h["pid"] for h in dm.not_ours(holders, running)] == [13]
    assert [h["pid"] for h in dm.not_ours(holders, [])] == [10, 11, 12, 13]


def test_parse_nvrm_both_flavours():
    assert dm.parse_nvrm("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                         "(dvs-builder@U22)  Thu Jan 1\nGCC version: 13\n") == ("580.159.04", "open")
    assert dm.parse_nvrm("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 2025\n") == (
        "570.172.08", "proprietary")
    assert dm.parse_nvrm("") == (None, None)


@pytest.mark.parametrize("value, ok", [("580.95.05", True), ("570.172.08", True), ("535.54", True),
                                       ("latest", False), ("580", False), ("580.95.05-1", False)])
def test_check_version(value, ok):
    if ok:
        assert dm.check_version(value) == value
    else:
        with pytest.raises(dm.DriverModulesError, match="not a driver version"):
            dm.check_version(value)


def test_check_also_load():
    assert dm.check_also_load(["nvidia_drm"]) == ["nvidia_drm"]
    with pytest.raises(dm.DriverModulesError, match="valid: nvidia_drm, nvidia_peermem"):
        dm.check_also_load(["nvidia_fs"])


def test_refusal_names_every_holder():
    holders = [{"pid": 4242, "command": "python3", "paths": ["/dev/nvidia0"], "pod_uid": "u-1",
                "container_id": "c" * 64, "unit": None}]
    text = dm.refusal(holders, ["module nvidia has 1 reference(s)"], [77])
    assert "PID 4242 python3 (pod UID u-1, container cccccccccccc) holds /dev/nvidia0" in text
    assert "module nvidia has 1 reference(s)" in text and "PID 77" in text


# A real H100 host's /proc/modules (driver 580.159.04, docs/readings/driver-health-real-gpu.md): its kernel was built
# without module unloading, so the reference counts read '-'.
REAL_NO_UNLOAD = ("nvidia_uvm 1830912 - - Live 0xffffffffc080c000 (O)\n"
                  "nvidia 14299136 - - Live 0xffffffffc0400000 (O)\n")


def test_a_kernel_without_module_unloading_reads_and_refuses_the_unload():
    modules = dm.parse_proc_modules(REAL_NO_UNLOAD)
    assert modules == {"nvidia_uvm": {"refcnt": None, "users": []}, "nvidia": {"refcnt": None, "users": []}}
    reasons = dm.in_use(modules)
    assert len(reasons) == 2 and all("without module unloading" in r and "reboot" in r for r in reasons)
