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
