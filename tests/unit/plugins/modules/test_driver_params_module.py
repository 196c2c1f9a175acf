"""driver_params and driver_modules' parameters against a node root in a temporary directory: the kmod stand-ins
(tests/support/bin/modinfo, modprobe, rmmod) list the simulated nvidia module's parameters, and a load takes the
options lines of the root's modprobe.d into /proc/driver/nvidia/params (plugins/module_utils/sim/_nvreg_params.py)."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import driver_params
from tests.support import driver_files as df
from tests.support.modrun import run_main
from tests.unit.plugins.modules.test_driver_modules import FAKES, NEW, Node

CONF = "etc/modprobe.d/gpuops-nvidia-params.conf"


@pytest.fixture
def node(tmp_path, monkeypatch):
    n = Node(tmp_path, monkeypatch)
    # the declared driver's packages are installed and loaded (no modprobe.d file yet): only its parameters differ
    for mod in ("nvidia_uvm", "nvidia_modeset", "nvidia"):
        df.unload_module(n.root, mod)
    df.install_module_files(n.root, NEW)
    df.load_driver(n.root, NEW)
    n.add_unit("nvidia-persistenced.service", 900, "/usr/bin/nvidia-persistenced")
    assert n.version() == NEW and "EnableStreamMemOPs: 0" in proc(n)
    return n


def params(node, check=False, **args):
    args.setdefault("root", node.root)
    args.setdefault("path", df.path(node.root, CONF))
    args.setdefault("modinfo", [os.path.join(FAKES, "modinfo")])
    return run_main(driver_params.main, args, check_mode=check, diff=True)


def proc(node):
    return df.read(node.root, "proc/driver/nvidia/params")


WANT = {"NVreg_EnableStreamMemOPs": 1, "NVreg_CoherentGPUMemoryMode": "driver", "NVreg_DeviceFileMode": "0660"}


def test_check_mode_then_apply_then_again(node):
    before = node.snapshot()
    res = params(node, check=True, parameters=WANT)
    assert res["changed"] is True and not res.get("failed"), res
    assert "options nvidia NVreg_CoherentGPUMemoryMode=driver NVreg_DeviceFileMode=0660 NVreg_EnableStreamMemOPs=1" \
        in res["diff"]["after"]
    assert node.snapshot() == before  # check mode touched nothing
    res = params(node, parameters=WANT)
    assert res["changed"] is True and res["names_checked"] is True
    # the file takes effect at the next load: the loaded driver still reads the defaults, reported as pending
    assert sorted(p["name"] for p in res["pending"]) == sorted(WANT)
    assert df.read(node.root, CONF).splitlines()[-1].startswith("options nvidia NVreg_CoherentGPUMemoryMode=driver")
    res = params(node, parameters=WANT)
    assert res["changed"] is False and res["diff"]["before"] == res["diff"]["after"]


def test_an_unknown_name_is_refused_before_any_change_naming_the_valid_ones(node):
    before = node.snapshot()
    res = params(node, parameters={"NVreg_EnableStreamMemOps": 1, "NVreg_EnableGpuFirmware": 0})
    assert res["failed"] and res["changed"] is False
    assert "NVreg_EnableStreamMemOps is not a parameter of the installed nvidia module" in res["msg"]
    assert "NVreg_EnableStreamMemOPs" in res["msg"] and "NVreg_CoherentGPUMemoryMode" in res["msg"]
    assert node.snapshot() == before


@pytest.mark.parametrize("value, words", [("on", "is an integer parameter"), ("a b", "without spaces"),
                                          (True, "write 1 or 0"), (2 ** 32 - 1, "int range")])
def test_bad_values_are_refused_before_any_change(node, value, words):
    before = node.snapshot()
    res = params(node, parameters={"NVreg_EnableGpuFirmware": value})
    assert res["failed"] and words in res["msg"] and "NVreg_EnableGpuFirmware" in res["msg"], res
    assert node.snapshot() == before


def test_a_reload_takes_the_parameters_and_verify_reads_them_back(node):
    params(node, parameters=WANT)
    # the driver at the declared version, its parameters not: driver_modules reloads (same version) and verifies
    res = node.run(state="reloaded", version=NEW, parameters=WANT)
    assert res["changed"] is True and not res.get("failed"), res
    assert [p["name"] for p in res["parameters_pending"]] == sorted(WANT)
    assert "rmmod nvidia" in res["actions"] and "modprobe nvidia" in res["actions"]
    assert "EnableStreamMemOPs: 1" in proc(node) and 'CoherentGPUMemoryMode: "driver"' in proc(node)
    assert "DeviceFileMode: 432" in proc(node)  # 0660 octal, printed %u
    res = params(node, parameters=WANT, verify=True)
    assert res["changed"] is False and not res.get("failed") and res["pending"] == [], res
    # converged: no second reload
    res = node.run(state="reloaded", version=NEW, parameters=WANT)
    assert res["changed"] is False and res["parameters_pending"] == []


def test_verify_fails_naming_the_parameter_declared_and_read(node):
    params(node, parameters={"NVreg_EnableStreamMemOPs": 1})
    res = params(node, parameters={"NVreg_EnableStreamMemOPs": 1}, verify=True)
    assert res["failed"]
    assert "NVreg_EnableStreamMemOPs: declared 1, the loaded driver reads 0" in res["msg"]


def test_a_reload_whose_load_reads_otherwise_fails_naming_the_parameter(node):
    # another modprobe.d file sets the same parameter after ours (later file name): the load takes its value
    params(node, parameters={"NVreg_EnableStreamMemOPs": 1})
    df.write(node.root, "etc/modprobe.d/zz-site.conf", "options nvidia NVreg_EnableStreamMemOPs=0\n")
    res = node.run(state="reloaded", version=NEW, parameters={"NVreg_EnableStreamMemOPs": 1})
    assert res["failed"] and "NVreg_EnableStreamMemOPs: declared 1, the loaded driver reads 0" in res["msg"], res


def test_preflight_says_a_reload_is_due_for_parameters_alone(node):
    params(node, parameters={"NVreg_EnableStreamMemOPs": 1})
    res = node.run(state="reloaded", version=NEW, parameters={"NVreg_EnableStreamMemOPs": 1}, preflight=True)
    assert res["reload"] is True and res["changed"] is False


def test_an_empty_declaration_removes_the_file_with_a_backup(node):
    params(node, parameters=WANT)
    res = params(node, parameters={}, backup=True)
    assert res["changed"] is True and not os.path.exists(df.path(node.root, CONF))
    assert os.path.isfile(res["backup_file"])
    assert params(node, parameters={})["changed"] is False


def test_no_module_installed_fails_or_skips_the_name_check(node):
    import shutil
    shutil.rmtree(df.path(node.root, "lib/modules"))
    res = params(node, parameters={"NVreg_EnableStreamMemOPs": 1}, check=True)
    assert res["failed"] and "install the driver's packages first" in res["msg"]
    res = params(node, parameters={"NVreg_EnableStreamMemOPs": 1}, check=True, missing_module="skip")
    assert res["changed"] is True and res["names_checked"] is False
