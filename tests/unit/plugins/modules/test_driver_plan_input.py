"""driver_plan given bad input (found by the input fuzzer, tests/reliability/test_fuzz_inputs.py): a clear failure
naming the option, never a traceback or a hang. On the fuzz rig's node root and throwaway apt root
(tests/support/rigs.DriverRig), so nothing of this machine is read."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_plan
from ansible_collections.gpuops.nvidia.plugins.modules import driver_plan
from tests.support import fuzz_values, rigs
from tests.support.modrun import run_main


@pytest.fixture
def rig(tmp_path, monkeypatch):
    r = rigs.DriverRig(str(tmp_path / "rig"), module="driver_plan")
    rigs.apply_env(r.env, monkeypatch.setenv, lambda key: monkeypatch.delenv(key, raising=False))
    yield r
    r.close()


def run(rig, **args):
    return run_main(driver_plan.main, dict(rig.args, manager="apt", declaration={"version": rigs.DRIVER_NEW}, **args),
                    **rig.internal)


def test_the_rig_plans(rig):
    res = run(rig)
    assert not res.get("failed"), res
    assert res["plan"]["version"] == rigs.DRIVER_NEW and res["installed_driver"] == rigs.DRIVER_OLD


@pytest.mark.parametrize("make", ["empty-dir", "file"])
def test_a_root_without_the_nodes_files_is_a_read_failure(rig, tmp_path, make):
    # before: _pci's PciReadError (and _driver_state's DriverStateError) escaped as a traceback
    root = str(tmp_path / "not-a-root")
    if make == "empty-dir":
        os.mkdir(root)
    else:
        with open(root, "w") as handle:
            handle.write("x\n")
    res = run(rig, root=root)
    assert res.get("failed") and res["kind"] == "read", res
    assert "below root %s" % root in res["msg"], res["msg"]


def test_a_root_whose_gpu_lacks_an_attribute_names_the_file(rig):
    os.unlink(os.path.join(rig.root, "sys/bus/pci/devices", rigs.DRIVER_GPU, "subsystem_vendor"))
    res = run(rig)
    assert res.get("failed") and res["kind"] == "read", res
    assert "subsystem_vendor" in res["msg"], res["msg"]


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_package_files_that_are_not_regular_files_are_refused(rig, tmp_path, kind):
    # before: dpkg-deb --show on a FIFO waited for ever for a writer
    path = fuzz_values.make_special(str(tmp_path / ("pkg-" + kind)), kind)
    res = run(rig, package_files=[path])
    assert res.get("failed") and res["kind"] == "files", res
    assert "package_files" in res["msg"] and "must be a regular file" in res["msg"], res["msg"]


@pytest.mark.parametrize("key,value", [("version", 580.95), ("fabric_manager_version", 9223372036854775807),
                                       ("revision", ["0ubuntu1"])])
def test_a_declaration_value_that_is_not_text_is_refused(key, value):
    # before: the version patterns were matched against a number or a list: TypeError (a traceback in the driver role's
    # driver_packages filter and in this module)
    declaration = {"version": "580.95.05", key: value}
    with pytest.raises(_driver_plan.DriverPlanError) as raised:
        _driver_plan.validate(declaration)
    assert "%s %r is a %s; give it as text" % (key, value, type(value).__name__) in str(raised.value)


NEXT = "6.8.0-90-generic"


def boot_loader(root, default_kernel):
    """A grub.cfg whose default entry (0) boots ``default_kernel``, the running one second."""
    os.makedirs(os.path.join(root, "boot/grub"), exist_ok=True)
    with open(os.path.join(root, "boot/grub/grub.cfg"), "w") as handle:
        handle.write('set default="0"\n'
                     "menuentry 'Ubuntu' $menuentry_id_option 'gnulinux-simple' {\n"
                     "  linux /boot/vmlinuz-%s root=UUID=1 ro\n}\n"
                     "menuentry 'Ubuntu, with Linux %s' {\n  linux /boot/vmlinuz-%s root=UUID=1 ro\n}\n"
                     % (default_kernel, rigs.DRIVER_KERNEL, rigs.DRIVER_KERNEL))


def test_the_next_kernel_without_modules_is_read_and_named(rig):
    # the boot loader's default is a newer kernel; the modules exist only for the running one
    boot_loader(rig.root, NEXT)
    res = run(rig, modinfo=[rig.tools["modinfo"]])
    assert not res.get("failed"), res
    nk = res["plan"]["next_kernel"]
    assert (nk["running"], nk["next"]) == (rigs.DRIVER_KERNEL, NEXT) and nk["next_differs"]
    assert "grub.cfg set default=0" in nk["next_source"]
    assert nk["next_modules"]["present"] is False and "Module nvidia not found" in nk["next_modules"]["detail"]
    assert nk["action"] == "build" and nk["packages"] == ["linux-headers-%s" % NEXT]
    assert nk["dkms"] == {"module": "nvidia", "version": rigs.DRIVER_NEW, "kernel": NEXT}
    refused = run(rig, modinfo=[rig.tools["modinfo"]], next_kernel="refuse")["plan"]["next_kernel"]
    assert refused["action"] == "refuse" and "kernel %s" % NEXT in refused["msg"]
    # once the modules are there for it (what ensure's build leaves), nothing to do
    from tests.support import driver_files as df
    df.install_module_files(rig.root, rigs.DRIVER_NEW, kernel=NEXT, subdir="updates/dkms")
    nk = run(rig, modinfo=[rig.tools["modinfo"]], next_kernel="refuse")["plan"]["next_kernel"]
    assert nk["next_modules"]["present"] and nk["action"] == "none", nk


def test_no_boot_loader_files_is_unknown_and_this_hosts_tools_are_not_used(rig):
    # the rig's root has no /boot: the next kernel is unknown (never guessed), and no modinfo was given for a lab
    # root, so none from PATH is run against it
    nk = run(rig)["plan"]["next_kernel"]
    assert nk["next"] is None and nk["action"] == "unknown" and "no grub.cfg" in nk["next_source"], nk
