"""The driver's state read from files, no NVML: the parsers with real lines, and read() on fake trees (every branch,
every error naming its file)."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_state as ds

# Real lines. Open: the H100 of the reference (driver.md, driver 580.159.04; its build-host tail elided there), and a
# whole one quoted in github.com/nix-community/nixGL issue 186 (565.57.01). Proprietary: quoted in
# github.com/oddmario/NVIDIA-Ubuntu-Driver-Guide issue 4 (550.90.07) and zzzhouuu/truenas-nvidia-drivers issue 19.
OPEN_LINE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (...)\n"
OPEN_565 = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
            "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
PROPRIETARY_LINE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
PROPRIETARY_580 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
                   "GCC version:  gcc version 14.2.0 (Ubuntu 14.2.0-4ubuntu2~24.04.1)\n")
# lsmod as /proc/modules writes it (a 515 host's modules, public lsmod output).
MODULES = ("nvidia_uvm 1126400 0 - Live 0x0000000000000000\n"
           "nvidia_drm 61440 0 - Live 0x0000000000000000\n"
           "nvidia_modeset 1142784 1 nvidia_drm, Live 0x0000000000000000\n"
           "nvidia 40812544 16 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
           "drm 495616 4 drm_kms_helper,nvidia,nvidia_drm, Live 0x0000000000000000\n")


@pytest.mark.parametrize("text,expected", [
    (OPEN_LINE, ("580.159.04", "open")),
    (OPEN_565, ("565.57.01", "open")),
    (PROPRIETARY_LINE, ("550.90.07", "proprietary")),
    (PROPRIETARY_580, ("580.173.02", "proprietary")),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  515.76  Mon Sep 12 19:21:56 UTC 2022\n", ("515.76", "proprietary")),
])
def test_nvrm_version_line(text, expected):
    assert ds.parse_nvrm_version(text) == expected


@pytest.mark.parametrize("text", ["", "garbage\n", "NVRM version: NVIDIA UNIX Kernel Module 1\n",
                                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module  abc  \n"])
def test_nvrm_version_rejects_other_text_naming_the_file(text):
    with pytest.raises(ds.DriverStateError, match="/x/version does not start with an NVIDIA driver's version line"):
        ds.parse_nvrm_version(text, "/x/version")


def test_module_version_and_proc_modules():
    assert ds.parse_module_version("580.159.04\n") == "580.159.04"
    with pytest.raises(ds.DriverStateError, match="does not hold a driver version"):
        ds.parse_module_version("\n")
    mods = ds.parse_proc_modules(MODULES + "\n")
    assert mods["nvidia"] == {"size": 40812544, "refcnt": 16, "deps": ["nvidia_uvm", "nvidia_modeset"], "state": "Live"}
    assert mods["nvidia_uvm"]["deps"] == []
    assert ds.nvidia_modules(mods) == {"nvidia_uvm": 0, "nvidia_drm": 0, "nvidia_modeset": 1, "nvidia": 16}
    assert ds.parse_proc_modules("builtin 100 - - Live 0x0\n")["builtin"]["refcnt"] is None
    with pytest.raises(ds.DriverStateError, match="line 2 is not"):
        ds.parse_proc_modules("a 1 0 - Live 0x0\nb 1\n")
    with pytest.raises(ds.DriverStateError, match="line 1 has a size or refcnt that is not a number"):
        ds.parse_proc_modules("a x 0 - Live 0x0\n")


def test_in_use_follows_the_driver_container_rule():
    assert not ds.in_use({})
    assert not ds.in_use({"nvidia": 1, "nvidia_uvm": 0})             # only nvidia_uvm uses it
    assert ds.in_use({"nvidia": 2, "nvidia_uvm": 0})                 # one more: a process holds a device file
    assert ds.in_use({"nvidia": 2, "nvidia_uvm": 1, "nvidia_modeset": 0})
    assert not ds.in_use({"nvidia": 2, "nvidia_uvm": 0, "nvidia_modeset": 0, "nvidia_drm": 0})
    assert ds.in_use({"nvidia": 2, "nvidia_uvm": 0, "nvidia_modeset": 1, "nvidia_drm": 0})   # a DRM client


def test_secure_boot_bytes():
    assert ds.parse_secure_boot(None) is None
    assert ds.parse_secure_boot(b"\x06\x00\x00\x00\x01") is True
    assert ds.parse_secure_boot(b"\x06\x00\x00\x00\x00") is False
    with pytest.raises(ds.DriverStateError, match="holds 3 bytes"):
        ds.parse_secure_boot(b"\x06\x00\x00")
    with pytest.raises(ds.DriverStateError, match="has value 7"):
        ds.parse_secure_boot(b"\x06\x00\x00\x00\x07")


def _tree(root, kernel="6.8.0-87-generic\n", modules=MODULES, sys_version="580.159.04\n", nvrm=OPEN_LINE,
          secure_boot=None):
    def put(rel, data):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    if kernel is not None:
        put(ds.KERNEL_RELEASE, kernel)
    if modules is not None:
        put(ds.PROC_MODULES, modules)
    if sys_version is not None:
        put(ds.MODULE_VERSION, sys_version)
    if nvrm is not None:
        put(ds.NVRM_VERSION, nvrm)
    if secure_boot is not None:
        put(ds.SECURE_BOOT_VAR, secure_boot)
    return put


def test_read_a_loaded_open_driver(tmp_path):
    _tree(tmp_path)
    assert ds.read(str(tmp_path)) == {
        "kernel": "6.8.0-87-generic",
        "loaded": {"version": "580.159.04", "flavour": "open",
                   "modules": {"nvidia_uvm": 0, "nvidia_drm": 0, "nvidia_modeset": 1, "nvidia": 16}},
        "nouveau_loaded": False, "secure_boot": None, "nvswitch": False, "nvlink5": False}


def test_read_a_proprietary_driver_and_secure_boot_on(tmp_path):
    _tree(tmp_path, sys_version="550.90.07\n", nvrm=PROPRIETARY_LINE, secure_boot=b"\x06\x00\x00\x00\x01")
    state = ds.read(str(tmp_path))
    assert state["loaded"]["flavour"] == "proprietary" and state["loaded"]["version"] == "550.90.07"
    assert state["secure_boot"] is True


def test_read_a_node_without_driver_with_nouveau(tmp_path):
    _tree(tmp_path, modules="nouveau 3096576 0 - Live 0x0\ndrm 1 1 nouveau, Live 0x0\n", sys_version=None, nvrm=None,
          secure_boot=b"\x06\x00\x00\x00\x00")
    state = ds.read(str(tmp_path))
    assert state["loaded"] is None and state["nouveau_loaded"] is True and state["secure_boot"] is False


def test_nvswitch_and_nvlink5_marks(tmp_path):
    put = _tree(tmp_path)
    (tmp_path / ds.NVSWITCH_DEVICES).mkdir(parents=True)
    assert ds.read(str(tmp_path))["nvswitch"] is False               # present but empty: not an NVSwitch system
    put(ds.NVSWITCH_DEVICES + "/0000:c4:00.0", "x")
    put("sys/class/infiniband/mlx5_0/device/vpd", b"\x82\x10PN:MCX;SMDL:FC")
    assert ds.read(str(tmp_path))["nvswitch"] is True and ds.read(str(tmp_path))["nvlink5"] is False
    put("sys/class/infiniband/mlx5_1/device/vpd", b"\x82\x10PN:MCX;SMDL:SW_MNG")
    assert ds.read(str(tmp_path))["nvlink5"] is True


def test_version_files_that_disagree_say_which_said_what(tmp_path):
    _tree(tmp_path, sys_version="580.95.05\n")
    with pytest.raises(ds.DriverStateError) as err:
        ds.read(str(tmp_path))
    assert "sys/module/nvidia/version says 580.95.05" in str(err.value)
    assert "proc/driver/nvidia/version says 580.159.04" in str(err.value)


@pytest.mark.parametrize("missing,said,absent", [
    ("sys_version", ds.NVRM_VERSION, ds.MODULE_VERSION),
    ("nvrm", ds.MODULE_VERSION, ds.NVRM_VERSION),
])
def test_one_version_file_alone_is_an_error(tmp_path, missing, said, absent):
    _tree(tmp_path, **{missing: None})
    with pytest.raises(ds.DriverStateError) as err:
        ds.read(str(tmp_path))
    assert str(err.value) == "%s says driver 580.159.04 is loaded, but %s does not exist" % (
        tmp_path / said, tmp_path / absent)


def test_unreadable_required_files_name_the_path(tmp_path):
    with pytest.raises(ds.DriverStateError, match="cannot read %s" % (tmp_path / ds.KERNEL_RELEASE)):
        ds.read(str(tmp_path))
    _tree(tmp_path, modules=None, sys_version=None, nvrm=None)      # a kernel without loadable modules
    assert ds.read(str(tmp_path))["loaded"] is None and ds.read(str(tmp_path))["nouveau_loaded"] is False
    (tmp_path / ds.PROC_MODULES).mkdir(parents=True)                    # there, but unreadable
    with pytest.raises(ds.DriverStateError, match="cannot read %s" % (tmp_path / ds.PROC_MODULES)):
        ds.read(str(tmp_path))
    (tmp_path / ds.PROC_MODULES).rmdir()
    _tree(tmp_path, kernel="\n")
    with pytest.raises(ds.DriverStateError, match="osrelease is empty"):
        ds.read(str(tmp_path))
    _tree(tmp_path)
    (tmp_path / ds.MODULE_VERSION).unlink()
    (tmp_path / ds.MODULE_VERSION).mkdir()          # exists, cannot be read as a file
    with pytest.raises(ds.DriverStateError, match="cannot read .*sys/module/nvidia/version"):
        ds.read(str(tmp_path))


def test_a_kernel_without_module_unloading_counts_as_held():
    # a real H100 host's /proc/modules (docs/readings/driver-health-real-gpu.md): refcnt '-' on every module
    modules = ds.parse_proc_modules("nvidia_uvm 1830912 - - Live 0xffffffffc080c000 (O)\n"
                                    "nvidia 14299136 - - Live 0xffffffffc0400000 (O)\n")
    refcnts = ds.nvidia_modules(modules)
    assert refcnts == {"nvidia_uvm": None, "nvidia": None}
    assert ds.in_use(refcnts) is True
