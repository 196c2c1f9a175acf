"""site.yml with driver_module_parameters (issue 52) on one small lab node whose driver is loaded at the declared
version (the image's: driver=NEW) with the module's defaults: the driver role writes the one modprobe.d file, the
node plan sees the loaded driver read other values (/proc/driver/nvidia/params, as the kmod stand-ins and the
simulated host render it: plugins/module_utils/sim/_nvreg_params.py), the driver step reloads it at the same version
(quiesce, unload, load, restore) and the values read back; a re-run changes nothing. The rig and the node are
test_site_driver.py's (the driver's packages installed with Debian's real apt and dpkg into the node's scratch root)."""
import pytest

from tests.integration.test_site_driver import NEW, driver_site, loaded, rig  # noqa: F401  pylint: disable=unused-import
from tests.support import apt_rig, driver_files

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

NODE = "drv-params"
CONF = "etc/modprobe.d/gpuops-nvidia-params.conf"
PARAMS = {"NVreg_EnableStreamMemOPs": 1, "NVreg_CoherentGPUMemoryMode": "driver"}


def test_declared_parameters_reload_a_loaded_driver_and_read_back(tmp_path, rig):  # noqa: F811
    site, args = driver_site(tmp_path, rig, {NODE: "driver=%s" % NEW},
                             host_vars={NODE: {"driver_module_parameters": PARAMS}})
    root = str(site.state / NODE)
    res = site.run(check=True, args=args)
    assert res.rc == 0, res
    boot = site.gpus(NODE)["boot_id"]
    assert driver_files.read(root, CONF) is None                       # check mode wrote nothing
    assert "EnableStreamMemOPs: 0" in driver_files.read(root, "proc/driver/nvidia/params")
    plan = res.task("Read the GPUs and plan every step", NODE)[0]
    assert plan["driver"]["action"] == "reload", plan["driver"]
    assert "NVreg_EnableStreamMemOPs: declared 1, the loaded driver reads 0" in " ".join(plan["steps"]["driver"])

    res = site.run(args=args)
    assert res.rc == 0, res
    params = driver_files.read(root, "proc/driver/nvidia/params")
    assert "EnableStreamMemOPs: 1" in params and 'CoherentGPUMemoryMode: "driver"' in params
    assert driver_files.read(root, CONF).splitlines()[-1] == (
        "options nvidia NVreg_CoherentGPUMemoryMode=driver NVreg_EnableStreamMemOPs=1")
    reload = [t for t in res.task("Load the driver (none loaded) or reload it", NODE) if not t.get("skipped")]
    assert reload and "rmmod nvidia" in reload[0]["actions"] and reload[0]["version"] == NEW, reload
    assert loaded(site, NODE) == NEW and site.gpus(NODE)["boot_id"] == boot  # reloaded, not rebooted

    again = site.run(args=args)
    assert again.rc == 0, again
    assert again.changed(NODE) == 0, again


def test_where_a_process_holds_the_driver_the_guarded_reboot_applies_them(tmp_path, rig):  # noqa: F811
    """A user's process holds /dev/nvidia0, so the driver cannot be reloaded; gpu_node_driver_allow_reboot lets the
    run reboot once, the boot's load takes the modprobe.d file, and the values are read back after the boot."""
    node = "drv-params-boot"
    site, args = driver_site(tmp_path, rig, {node: "driver=%s" % NEW}, host_vars={node: {
        "driver_module_parameters": {"NVreg_EnableStreamMemOPs": 1}, "gpu_node_driver_allow_reboot": True}})
    root = str(site.state / node)
    res = site.run(check=True, args=args)
    assert res.rc == 0, res
    boot = site.gpus(node)["boot_id"]
    driver_files.add_holder(root, 4242, ["/usr/bin/python3", "train.py"])

    res = site.run(args=args)
    assert res.rc == 0, res
    assert site.gpus(node)["boot_id"] == boot + 1                             # exactly one reboot
    assert "EnableStreamMemOPs: 1" in driver_files.read(root, "proc/driver/nvidia/params")
    checked = [t for t in res.task("After the reboot, the loaded driver must read", node) if not t.get("skipped")]
    assert checked and checked[0]["pending"] == [], checked

    again = site.run(args=args)
    assert again.rc == 0, again
    assert again.changed(node) == 0 and site.gpus(node)["boot_id"] == boot + 1, again
