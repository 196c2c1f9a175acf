"""_driver_plan: the driver's package set for apt and dnf from each source, precompiled vs DKMS, the Fabric Manager at
the driver's exact version, and every refusal (each names what to do, and the plan it refuses is what a user would
otherwise get). Devices and driver state are written in the shapes of _pci.read_nvidia_devices and _driver_state.read
(the contract of issue 34's driver layer)."""
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_plan as dp

KERNEL = "6.8.0-87-generic"
RHEL_KERNEL = "5.14.0-427.13.1.el9_4.x86_64"
UBUNTU = {"manager": "apt", "distribution": "ubuntu", "distribution_major": "24", "kernel": KERNEL,
          "architecture": "x86_64"}
RHEL = {"manager": "dnf", "distribution": "rhel", "distribution_major": "9", "kernel": RHEL_KERNEL,
        "architecture": "x86_64"}


def gpu(bus, name, arch, open_modules=True, device=0x2335):
    return {"bus_id": bus, "vendor": 0x10de, "device": device, "subsystem_vendor": 0x10de, "subsystem_device": 0x18be,
            "class": 0x030200, "kind": "gpu", "bound_driver": None, "name": name, "architecture": arch,
            "open_modules": open_modules}


H200 = [gpu("0000:%02x:00.0" % b, "NVIDIA H200", "hopper") for b in (0x18, 0x2a)]
B200 = [gpu("0000:1b:00.0", "NVIDIA B200", "blackwell", device=0x2901)]
V100 = [gpu("0000:3b:00.0", "Tesla V100-SXM2-32GB", "volta", open_modules=False, device=0x1db5)]
NVSWITCH = [{"bus_id": "0000:05:00.0", "vendor": 0x10de, "device": 0x22a3, "class": 0x068000, "kind": "nvswitch",
             "bound_driver": None, "name": None, "architecture": None, "open_modules": None}]


def state(**kw):
    out = {"kernel": KERNEL, "loaded": None, "nouveau_loaded": False, "secure_boot": False, "nvswitch": False,
           "nvlink5": False}
    out.update(kw)
    return out


def names(result, group=None):
    return [p["name"] for p in result["packages"] if group is None or p["group"] == group]


def kinds(result):
    return [r["kind"] for r in result["refusals"]]


def test_cuda_repository_ubuntu_open_is_dkms_at_nvidias_revision():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200, state())
    assert res["refusals"] == []
    assert res["module_source"] == "dkms" and res["flavour"] == "open" and res["branch"] == "580"
    assert names(res) == ["nvidia-headless-580-open", "nvidia-utils-580", "nvidia-compute-utils-580",
                          "libnvidia-compute-580", "nvidia-dkms-580-open"]
    assert set(p["version"] for p in res["packages"]) == {"580.95.05-0ubuntu1"}
    assert res["extra"] == ["linux-headers-%s" % KERNEL]
    assert res["fabric_manager"] is False and res["persistenced"] == "nvidia-compute-utils-580"
    assert [c.split(":")[0] for c in res["changes"]] == names(res)


def test_proprietary_names_drop_open():
    res = dp.plan({"version": "570.195.03", "flavour": "proprietary"}, UBUNTU, H200, state())
    assert names(res)[0] == "nvidia-headless-570" and names(res, "kernel") == ["nvidia-dkms-570"]


def test_ubuntu_archive_precompiled_for_the_running_kernel_resolved_from_the_archive():
    available = {"nvidia-headless-no-dkms-580-server-open": ["580.95.05-0ubuntu0.24.04.2", "570.195.03-0ubuntu0.24.04.1"],
                 "nvidia-utils-580-server": ["580.95.05-0ubuntu0.24.04.2", "580.82.07-0ubuntu0.24.04.1"],
                 "nvidia-compute-utils-580-server": ["580.95.05-0ubuntu0.24.04.2"],
                 "libnvidia-compute-580-server": ["580.95.05-0ubuntu0.24.04.2"],
                 "linux-modules-nvidia-580-server-open-%s" % KERNEL: ["6.8.0-87.88+1", "6.8.0-87.88"]}
    res = dp.plan({"version": "580.95.05", "package_source": "distribution"}, UBUNTU, H200, state(secure_boot=True),
                  available=available)
    assert res["refusals"] == []
    assert res["module_source"] == "precompiled", res["module_source_reason"]
    versions = dict((p["name"], p["version"]) for p in res["packages"])
    assert versions["nvidia-headless-no-dkms-580-server-open"] == "580.95.05-0ubuntu0.24.04.2"
    assert versions["nvidia-utils-580-server"] == "580.95.05-0ubuntu0.24.04.2"
    assert versions["linux-modules-nvidia-580-server-open-%s" % KERNEL] == "6.8.0-87.88+1"
    assert res["extra"] == []           # no headers: nothing is built


def test_ubuntu_archive_without_modules_for_this_kernel_auto_falls_back_to_dkms():
    available = {"nvidia-headless-580-server-open": ["580.95.05-0ubuntu0.24.04.2"],
                 "nvidia-dkms-580-server-open": ["580.95.05-0ubuntu0.24.04.2"],
                 "nvidia-utils-580-server": ["580.95.05-0ubuntu0.24.04.2"],
                 "nvidia-compute-utils-580-server": ["580.95.05-0ubuntu0.24.04.2"],
                 "libnvidia-compute-580-server": ["580.95.05-0ubuntu0.24.04.2"]}
    res = dp.plan({"version": "580.95.05", "package_source": "distribution"}, UBUNTU, H200, state(),
                  available=available)
    assert res["refusals"] == [] and res["module_source"] == "dkms"
    assert "no precompiled modules for kernel %s" % KERNEL in res["module_source_reason"]
    assert names(res, "kernel") == ["nvidia-dkms-580-server-open"] and res["extra"] == ["linux-headers-%s" % KERNEL]


def test_refused_precompiled_demanded_and_the_kernel_has_none():
    res = dp.plan({"version": "580.95.05", "package_source": "distribution", "module_source": "precompiled"},
                  UBUNTU, H200, state(), available={"nvidia-headless-no-dkms-580-server-open": ["580.95.05-0ubuntu0.24.04.2"]})
    assert "precompiled" in kinds(res)
    msg = [r["msg"] for r in res["refusals"] if r["kind"] == "precompiled"][0]
    assert "linux-modules-nvidia-580-server-open-%s" % KERNEL in msg and "module_source dkms" in msg


def test_refused_precompiled_from_the_cuda_repository_on_ubuntu_says_where_they_are():
    res = dp.plan({"version": "580.95.05", "module_source": "precompiled"}, UBUNTU, H200, state())
    msg = [r["msg"] for r in res["refusals"] if r["kind"] == "precompiled"][0]
    assert "package_source distribution" in msg


def test_refused_proprietary_on_blackwell_names_the_gpu_and_bus_id():
    res = dp.plan({"version": "580.95.05", "flavour": "proprietary"}, UBUNTU, H200 + B200, state())
    assert kinds(res) == ["flavour"]
    msg = res["refusals"][0]["msg"]
    assert "NVIDIA B200 at 0000:1b:00.0" in msg and "driver_flavour: open" in msg
    assert "H200" not in msg


def test_refused_proprietary_names_every_blackwell_gpu_in_one_message():
    hgx = [gpu("0000:%02x:00.0" % b, "NVIDIA B200", "blackwell", device=0x2901) for b in (0x07, 0x0f, 0x47, 0x4e)]
    mixed = hgx + [gpu("0000:b7:00.0", "NVIDIA GB300", "blackwell", device=0x31c2)]
    res = dp.plan({"version": "580.95.05", "flavour": "proprietary"}, UBUNTU, H200 + mixed, state())
    (refusal,) = res["refusals"]
    assert refusal["msg"].startswith("4 x NVIDIA B200 at 0000:07:00.0, 0000:0f:00.0, 0000:47:00.0, 0000:4e:00.0 and "
                                     "NVIDIA GB300 at 0000:b7:00.0 are Blackwell GPUs: NVIDIA's proprietary kernel "
                                     "modules do not support them; declare the open flavour")
    old = [gpu("0000:3b:00.0", "Tesla V100", "volta", open_modules=False, device=0x1db4),
           gpu("0000:3c:00.0", "Tesla P40", "pascal", open_modules=False, device=0x1b38),
           gpu("0000:3d:00.0", "Tesla V100", "volta", open_modules=False, device=0x1db4)]
    msgs = [r["msg"] for r in dp.plan({"version": "580.95.05"}, UBUNTU, old, state())["refusals"]]
    assert [m.split(" (")[0] for m in msgs] == ["2 x Tesla V100 at 0000:3b:00.0, 0000:3d:00.0 are Volta GPUs",
                                                "Tesla P40 at 0000:3c:00.0 is a Pascal GPU"]


def test_refused_open_on_a_pre_turing_gpu():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, V100, state())
    assert kinds(res) == ["flavour"]
    assert "Tesla V100-SXM2-32GB at 0000:3b:00.0 is a Volta GPU" in res["refusals"][0]["msg"]
    assert dp.plan({"version": "580.95.05", "flavour": "proprietary"}, UBUNTU, V100, state())["refusals"] == []


def test_refused_open_on_a_gpu_outside_nvidias_open_table():
    odd = [gpu("0000:3b:00.0", None, None, open_modules=False, device=0x1234)]
    res = dp.plan({"version": "580.95.05"}, UBUNTU, odd, state())
    assert "PCI device 10de:1234 at 0000:3b:00.0 is not in NVIDIA's open-module table" in res["refusals"][0]["msg"]


def test_refused_secure_boot_with_an_unsigned_dkms_build_unless_a_mok_signs_it():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(secure_boot=True))
    assert kinds(res) == ["secure_boot"]
    assert "dkms_signing: mok" in res["refusals"][0]["msg"] and "precompiled" in res["refusals"][0]["msg"]
    assert dp.plan({"version": "580.95.05", "dkms_signing": "mok"}, UBUNTU, H200, state(secure_boot=True))["refusals"] == []
    # Secure Boot unknown (not an EFI boot) or off: no refusal
    assert dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(secure_boot=None))["refusals"] == []


def test_fabric_manager_on_nvswitch_systems_at_exactly_the_drivers_version():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200 + NVSWITCH, state(nvswitch=True))
    assert res["fabric_manager"] is True and res["fabric_manager_reason"] == "NVSwitch system"
    fm = [p for p in res["packages"] if p["group"] == "fabric_manager"]
    assert fm == [dict(fm[0], name="nvidia-fabricmanager", version="580.95.05-1")]
    assert dp.upstream(fm[0]["version"]) == dp.upstream(res["packages"][0]["version"]) == "580.95.05"
    old = dp.plan({"version": "570.195.03"}, UBUNTU, H200, state(nvswitch=True))
    assert names(old, "fabric_manager") == ["nvidia-fabricmanager-570"]
    assert names(dp.plan({"version": "580.95.05"}, UBUNTU, H200, state()), "fabric_manager") == []
    assert dp.plan({"version": "580.95.05", "fabric_manager": True}, UBUNTU, H200, state())["fabric_manager"] is True


def test_nvlink5_adds_nvlsm():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, B200, state(nvlink5=True))
    assert res["fabric_manager"] and res["extra"][-2:] == ["nvlsm", "infiniband-diags"]


def test_refused_fabric_manager_pinned_at_another_version():
    res = dp.plan({"version": "580.95.05", "fabric_manager_version": "580.82.07"}, UBUNTU, H200, state(nvswitch=True))
    assert kinds(res) == ["fabric_manager"]
    assert "580.82.07" in res["refusals"][0]["msg"] and "exactly the driver's version" in res["refusals"][0]["msg"]


def test_fabric_manager_off_on_an_nvswitch_system_is_said():
    res = dp.plan({"version": "580.95.05", "fabric_manager": "false"}, UBUNTU, H200, state(nvswitch=True))
    assert res["fabric_manager"] is False and "NVSwitch" in res["notes"][0]


def test_refused_downgrade_unless_allowed_upgrade_planned():
    installed = {"nvidia-headless-580-open": {"version": "580.95.05-0ubuntu1", "held": True, "status": "hold ok installed"}}
    res = dp.plan({"version": "570.195.03"}, UBUNTU, H200, state(),
                  installed={"nvidia-headless-570-open": {"version": "570.200.01-0ubuntu1", "held": True}})
    assert kinds(res) == ["downgrade"] and "driver_allow_downgrade: true" in res["refusals"][0]["msg"]
    assert dp.plan({"version": "570.195.03", "allow_downgrade": True}, UBUNTU, H200, state(),
                   installed={"nvidia-headless-570-open": {"version": "570.200.01-0ubuntu1"}})["refusals"] == []
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(), installed=installed)
    assert res["refusals"] == []
    assert [p["action"] for p in res["packages"]] == ["none", "install", "install", "install", "install"]
    assert "nvidia-headless-580-open" not in " ".join(res["changes"])


def test_refused_version_the_source_lacks():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(),
                  available=dict((n, ["580.82.07-0ubuntu1"]) for n in dp.probe_names({"version": "580.95.05"}, UBUNTU)))
    assert kinds(res) == ["version"] and "it has 580.82.07-0ubuntu1" in res["refusals"][0]["msg"]


def test_branch_only_takes_the_newest_of_the_branch_the_source_has():
    available = dict((n, ["580.82.07-0ubuntu1", "580.95.05-0ubuntu1", "575.57.08-0ubuntu1"])
                     for n in dp.probe_names({"branch": "580"}, UBUNTU))
    res = dp.plan({"branch": "580"}, UBUNTU, H200, state(), available=available)
    assert res["refusals"] == [] and res["version"] == "580.95.05"
    assert set(p["version"] for p in res["packages"]) == {"580.95.05-0ubuntu1"}


def test_rhel_open_dkms_stream_and_epoch():
    res = dp.plan({"version": "580.95.05"}, RHEL, H200, state(nvswitch=True))
    assert res["refusals"] == [] and res["stream"] == "nvidia-driver:580-open" and res["module_source"] == "dkms"
    versions = dict((p["name"], p["version"]) for p in res["packages"])
    assert versions["nvidia-driver"] == "3:580.95.05-1.el9" and versions["kmod-nvidia-open-dkms"] == "3:580.95.05-1.el9"
    assert versions["nvidia-fabricmanager"] == "580.95.05-1"
    assert res["extra"] == ["kernel-devel-%s" % RHEL_KERNEL, "kernel-headers-%s" % RHEL_KERNEL]
    assert res["persistenced"] == "nvidia-persistenced"


def test_rhel_proprietary_precompiled_stream_for_the_running_kernel():
    res = dp.plan({"version": "580.95.05", "flavour": "proprietary"}, RHEL, H200, state(secure_boot=True))
    assert res["refusals"] == [] and res["module_source"] == "precompiled" and res["stream"] == "nvidia-driver:580"
    assert names(res, "kernel") == ["kmod-nvidia-580.95.05-5.14.0-427.13.1.el9_4"]
    res = dp.plan({"version": "580.95.05", "flavour": "proprietary", "module_source": "dkms"}, RHEL, H200, state())
    assert res["stream"] == "nvidia-driver:580-dkms" and names(res, "kernel") == ["kmod-nvidia-latest-dkms"]


def test_rhel_refuses_the_distribution_source_and_precompiled_open():
    assert "source" in kinds(dp.plan({"version": "580.95.05", "package_source": "distribution"}, RHEL, H200, state()))
    assert "precompiled" in kinds(dp.plan({"version": "580.95.05", "module_source": "precompiled"}, RHEL, H200, state()))


def test_nouveau_loaded_needs_a_reboot_and_says_why():
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(nouveau_loaded=True))
    assert res["reboot_needed"] is True and "nouveau" in res["reboot_reason"]
    assert dp.plan({"version": "580.95.05"}, UBUNTU, H200, state())["reboot_needed"] is False


@pytest.mark.parametrize("decl, words", [
    ({}, "give the driver's version"),
    ({"version": "580"}, "not a driver version"),
    ({"version": "580.95.05", "branch": "570"}, "not on branch 570"),
    ({"version": "580.95.05", "flavour": "closed"}, "flavour 'closed' is not one of open, proprietary"),
    ({"version": "580.95.05", "module_source": "rpm"}, "module_source 'rpm'"),
    ({"version": "580.95.05", "package_source": "ppa"}, "package_source 'ppa'"),
    ({"version": "580.95.05", "fabric_manager": "maybe"}, "fabric_manager 'maybe'"),
    ({"version": "580.95.05", "fabric_manager_version": "x"}, "fabric_manager_version 'x'"),
    ({"version": "580.95.05", "revision": "a b"}, "revision 'a b'"),
])
def test_bad_declarations_say_what_is_valid(decl, words):
    with pytest.raises(dp.DriverPlanError) as err:
        dp.plan(decl, UBUNTU, H200, state())
    assert words in str(err.value)


def test_bad_node_is_refused():
    with pytest.raises(dp.DriverPlanError):
        dp.plan({"version": "580.95.05"}, dict(UBUNTU, kernel="../x y"), H200, state())
    with pytest.raises(dp.DriverPlanError):
        dp.plan({"version": "580.95.05"}, dict(UBUNTU, manager="zypper"), H200, state())


@settings(max_examples=60, deadline=None)
@given(minor=st.integers(0, 300), patch=st.integers(0, 99), branch=st.sampled_from(["550", "570", "575", "580"]),
       manager=st.sampled_from(["apt", "dnf"]), flavour=st.sampled_from(["open", "proprietary"]),
       nvswitch=st.booleans())
def test_property_every_pinned_package_carries_the_drivers_version(minor, patch, branch, manager, flavour, nvswitch):
    version = "%s.%d.%02d" % (branch, minor, patch)
    node = UBUNTU if manager == "apt" else RHEL
    res = dp.plan({"version": version, "flavour": flavour, "dkms_signing": "mok"}, node, H200,
                  state(nvswitch=nvswitch, secure_boot=True))
    assert res["refusals"] == []
    assert res["fabric_manager"] is nvswitch
    for p in res["packages"]:
        if not p["name"].startswith("kmod-nvidia-%s" % version):
            assert dp.upstream(p["version"]) == version, p
    assert len(set(names(res))) == len(res["packages"])


def test_declared_packages_are_the_plans_where_the_versions_follow_from_the_declaration():
    for decl, node, st_ in (({"version": "580.95.05"}, dict(UBUNTU, nvswitch=True), state(nvswitch=True)),
                            ({"version": "570.195.03", "flavour": "proprietary"}, RHEL, state())):
        declared = dp.declared_packages(decl, node)
        res = dp.plan(decl, node, H200, st_)
        assert sorted((n, e["version"]) for e in declared for n in e["names"]) == \
            sorted((p["name"], p["version"]) for p in res["packages"])
    assert dp.declared_packages({"version": "580.95.05", "package_source": "distribution"}, UBUNTU) == []
    assert [e["hold"] for e in dp.declared_packages({"version": "580.95.05"}, UBUNTU)] == [True]


def test_refused_downgrade_to_another_branch_whose_packages_have_other_names():
    res = dp.plan({"version": "570.195.03"}, UBUNTU, H200, state(), installed={}, installed_driver="580.95.05")
    assert kinds(res) == ["downgrade"] and "580.95.05" in res["refusals"][0]["msg"]
    assert dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(), installed_driver="570.195.03")["refusals"] == []
    assert dp.version_key("580.95.05") > dp.version_key("580.82.07")


def test_a_branch_upgrade_removes_the_installed_branchs_held_packages_in_its_transaction():
    # 570's packages as this role leaves them (held): apt would not remove them for 580's Conflicts by itself
    held = dict((n, {"version": "570.195.03-0ubuntu1", "held": True}) for n in (
        "nvidia-headless-570-open", "nvidia-dkms-570-open", "nvidia-utils-570", "nvidia-compute-utils-570",
        "libnvidia-compute-570"))
    assert set(held) <= set(dp.replaced_names({"version": "580.95.05"}, UBUNTU, "570.195.03"))
    res = dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(), installed=held, installed_driver="570.195.03")
    assert res["refusals"] == [] and sorted(res["remove"]) == sorted(held)
    assert "nvidia-headless-570-open: 570.195.03-0ubuntu1 -> removed (branch 580 replaces it)" in res["changes"]
    # the same branch, dnf (one set of names), or no driver installed: nothing to remove
    assert dp.replaced_names({"version": "580.95.05"}, UBUNTU, "580.82.07") == []
    assert dp.replaced_names({"version": "580.95.05"}, RHEL, "570.195.03") == []
    assert dp.plan({"version": "580.95.05"}, UBUNTU, H200, state(), installed={})["remove"] == []
    # 580 -> 590: the Fabric Manager's name has no branch from 580 on, so it is kept, not removed
    assert "nvidia-fabricmanager" not in dp.replaced_names({"version": "590.44.01"}, UBUNTU, "580.95.05")
