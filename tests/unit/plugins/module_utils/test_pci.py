"""PCI sysfs below NVML: NVIDIA functions read from a fake sysfs tree, classified and named from the catalog, and the
kernel-module flavours that can run them."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci


def _function(root, bus_id, vendor=0x10DE, device=0x2330, pci_class=0x030200, sub=(0x10DE, 0x16C1), driver=None):
    d = root / "sys/bus/pci/devices" / bus_id
    d.mkdir(parents=True)
    for name, value, digits in (("vendor", vendor, 4), ("device", device, 4), ("class", pci_class, 6),
                                ("subsystem_vendor", sub[0], 4), ("subsystem_device", sub[1], 4)):
        (d / name).write_text("0x%0*x\n" % (digits, value))
    if driver:
        target = root / "sys/bus/pci/drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(target), str(d)), str(d / "driver"))
    return d


def test_the_real_h100_reading_is_a_named_gpu_bound_to_nvidia(tmp_path):
    # Reference driver.md: 0000:00:06.0 = 0x10de 0x2330 0x030200 0x10de 0x16c1, driver -> nvidia.
    _function(tmp_path, "0000:00:06.0", driver="nvidia")
    (dev,) = _pci.read_nvidia_devices(str(tmp_path))
    assert dev == {"bus_id": "0000:00:06.0", "vendor": 0x10DE, "device": 0x2330, "subsystem_vendor": 0x10DE,
                   "subsystem_device": 0x16C1, "class": 0x030200, "kind": "gpu", "bound_driver": "nvidia",
                   "name": "NVIDIA H100 80GB HBM3", "architecture": "hopper", "open_modules": True,
                   "virtual_function": False}


def test_other_vendors_are_skipped_and_nvswitches_and_other_functions_classified(tmp_path):
    _function(tmp_path, "0000:00:01.0", vendor=0x8086, device=0x1234, pci_class=0x060400)
    _function(tmp_path, "0000:05:00.0", device=0x22A3, pci_class=0x068000, sub=(0x10DE, 0))
    _function(tmp_path, "0000:c4:00.0", device=0x1AF1, pci_class=0x068000, sub=(0x10DE, 0))
    _function(tmp_path, "0000:61:00.0", device=0x1AC2, pci_class=0x068000, sub=(0x10DE, 0))
    _function(tmp_path, "0000:65:00.1", device=0x22BA, pci_class=0x040300)          # an HD-audio function
    _function(tmp_path, "0000:66:00.0", device=0x22A8, pci_class=0x060400)          # LS10 PCI-PCI bridge function
    devs = dict((d["bus_id"], d) for d in _pci.read_nvidia_devices(str(tmp_path)))
    assert sorted(devs) == ["0000:05:00.0", "0000:61:00.0", "0000:65:00.1", "0000:66:00.0", "0000:c4:00.0"]
    assert devs["0000:05:00.0"]["kind"] == "nvswitch" and devs["0000:05:00.0"]["open_modules"] is True
    assert "third generation" in devs["0000:05:00.0"]["name"]
    assert devs["0000:c4:00.0"]["kind"] == "nvswitch" and "second generation" in devs["0000:c4:00.0"]["name"]
    assert devs["0000:61:00.0"]["kind"] == "nvswitch" and devs["0000:61:00.0"]["open_modules"] is False
    assert devs["0000:65:00.1"]["kind"] == "other" and devs["0000:65:00.1"]["name"] is None
    assert devs["0000:66:00.0"]["kind"] == "other"
    assert all(d["bound_driver"] is None for d in devs.values())


def test_vga_class_gpus_count_and_unknown_gpus_have_no_name(tmp_path):
    # 0x1E00: between the last Volta id (0x1DF6) and the first Turing id (0x1E02) of NVIDIA's PCI id database, and in
    # no row of the open-module table
    _function(tmp_path, "0000:01:00.0", device=0x1E00, pci_class=0x030000, sub=(0x1043, 0x88E2), driver="nouveau")
    (dev,) = _pci.read_nvidia_devices(str(tmp_path))
    assert dev["kind"] == "gpu" and dev["bound_driver"] == "nouveau"
    assert (dev["name"], dev["architecture"], dev["open_modules"]) == (None, None, None)


def test_a_gpu_the_catalog_does_not_know_is_named_from_nvidias_tables(tmp_path):
    # an ASUS RTX 4090: its board is not a row of the open-module table, the device id's bare row is
    _function(tmp_path, "0000:01:00.0", device=0x2684, pci_class=0x030000, sub=(0x1043, 0x88E2))
    (dev,) = _pci.read_nvidia_devices(str(tmp_path))
    assert (dev["name"], dev["architecture"], dev["open_modules"]) == ("NVIDIA GeForce RTX 4090", "ada", True)


@pytest.mark.parametrize("device,expected", [
    (0x1DB1, ("Tesla V100 SXM2 16GB", "volta", False)),
    (0x15F9, ("Tesla P100 SXM2 16GB", "pascal", False)),
    (0x1EB8, ("Tesla T4", "turing", True)),
    (0x27B8, ("NVIDIA L4", "ada", True)),
    (0x2236, ("NVIDIA A10", "ampere", True)),
    (0x2901, ("NVIDIA B200", "blackwell", True)),
])
def test_gpus_named_by_pci_id_alone(tmp_path, device, expected):
    _function(tmp_path, "0000:3b:00.0", device=device, sub=(0x10DE, 0x1212))
    (dev,) = _pci.read_nvidia_devices(str(tmp_path))
    assert (dev["name"], dev["architecture"], dev["open_modules"]) == expected


def _gpu(name, arch, open_modules, kind="gpu"):
    return {"bus_id": "0000:%s" % name[:2], "vendor": 0x10DE, "device": 0, "kind": kind, "name": name,
            "architecture": arch, "open_modules": open_modules}


def test_flavours_hopper_runs_both():
    result = _pci.flavours([_gpu("H100", "hopper", True)] * 2)
    assert result == {"open": True, "proprietary": True, "reasons": {"open": [], "proprietary": []}}


def test_flavours_blackwell_refuses_proprietary_naming_the_gpu():
    result = _pci.flavours([_gpu("H200", "hopper", True), _gpu("B200", "blackwell", True)])
    assert result["open"] is True and result["proprietary"] is False
    (reason,) = result["reasons"]["proprietary"]
    assert "B200" in reason and "Blackwell" in reason and "open kernel modules" in reason


def test_flavours_name_every_gpu_with_one_reason_in_one_sentence(tmp_path):
    buses = ["0000:%02x:00.0" % bus for bus in (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)]
    for bus in buses:
        _function(tmp_path, bus, device=0x2901, sub=(0x10DE, 0x1999))
    result = _pci.flavours(_pci.read_nvidia_devices(str(tmp_path)))
    assert result["reasons"] == {"open": [], "proprietary": [
        "8 x NVIDIA B200 at %s are Blackwell: Blackwell and later GPUs need the open kernel modules"
        % ", ".join(buses)]}
    mixed = [_gpu("V1", "volta", False), _gpu("P4", "pascal", False), _gpu("V2", "volta", False),
             dict(_gpu("Xx", None, None), name=None, device=0x9999), _gpu("B2", "blackwell", True)]
    reasons = _pci.flavours(mixed)["reasons"]
    assert reasons["open"][:2] == [
        "V1 at 0000:V1 and V2 at 0000:V2 are Volta: the open kernel modules need Turing or later",
        "P4 at 0000:P4 is Pascal: the open kernel modules need Turing or later"]
    assert reasons["open"][2].startswith("PCI device 10de:9999 at 0000:Xx: neither") and len(reasons["open"]) == 3
    assert reasons["proprietary"] == ["B2 at 0000:B2 is Blackwell: Blackwell and later GPUs need the open kernel "
                                      "modules"]


def test_flavours_volta_refuses_open_naming_the_gpu():
    result = _pci.flavours([_gpu("V100", "volta", False)])
    assert result["open"] is False and result["proprietary"] is True
    assert "V100" in result["reasons"]["open"][0] and "Turing or later" in result["reasons"]["open"][0]


def test_flavours_unknown_gpu_rules_out_open_and_old_nvswitch_too():
    unknown = {"bus_id": "0000:01:00.0", "vendor": 0x10DE, "device": 0x9999, "kind": "gpu", "name": None,
               "architecture": None, "open_modules": None}
    result = _pci.flavours([unknown])
    assert result["open"] is False and result["proprietary"] is True
    (reason,) = result["reasons"]["open"]
    assert reason.startswith("PCI device 10de:9999 at 0000:01:00.0: neither NVIDIA's open-module table")
    assert "open-module support is unknown" in reason and "580.95.05" in reason and "2025.07.11" in reason
    switch = _pci.flavours([_gpu("V100", "volta", False), _gpu("NVSwitch", None, False, kind="nvswitch")])
    assert len(switch["reasons"]["open"]) == 2
    other = _pci.flavours([_gpu("audio", None, None, kind="other")])
    assert other["open"] and other["proprietary"]


def test_flavours_of_no_device_allow_both():
    assert _pci.flavours([]) == {"open": True, "proprietary": True, "reasons": {"open": [], "proprietary": []}}


def test_unreadable_sysfs_names_the_path(tmp_path):
    with pytest.raises(_pci.PciReadError, match=str(tmp_path / "sys/bus/pci/devices")):
        _pci.read_nvidia_devices(str(tmp_path))
    d = _function(tmp_path, "0000:07:00.0")
    (d / "subsystem_device").unlink()
    with pytest.raises(_pci.PciReadError, match="cannot read .*0000:07:00.0/subsystem_device"):
        _pci.read_nvidia_devices(str(tmp_path))
    (d / "subsystem_device").write_text("garbage\n")
    with pytest.raises(_pci.PciReadError, match="subsystem_device does not hold a hexadecimal number"):
        _pci.read_nvidia_devices(str(tmp_path))


def test_catalog_has_pci_and_open_module_facts_for_every_model():
    for key, model in catalog.GPU_MODELS.items():
        found = catalog.gpu_by_pci(model["pci_device_id"] >> 16, *catalog.simulated_subsystem(key))
        assert found["key"] == key and found["name"] == model["name"], key
        assert found["open_modules"] is True and found["open_module_row"] is True, key
    assert catalog.gpu_by_pci(0x2330, 0x10DE, 0x9999)["open_module_row"] is False
    assert catalog.gpu_by_pci(0x20B0, 0x10DE, 0x1234)["open_module_row"] is True     # the bare "20B0" row
    assert catalog.gpu_by_pci(0xFFFF) is None
    assert catalog.open_modules_supported("maxwell") is False
    assert catalog.proprietary_modules_supported("blackwell") is False
    assert catalog.open_modules_supported("unknown") is None and catalog.proprietary_modules_supported("x") is None


@pytest.mark.parametrize("given,expected", [
    ("00000000:47:00.0", "0000:47:00.0"), ("0000:47:00.0", "0000:47:00.0"), ("00000000:B7:00.0", "0000:b7:00.0"),
    ("00000001:0A:1F.3", "0001:0a:1f.3"), (" 0000:c4:00.0\n", "0000:c4:00.0"),
    ("47:00.0", None), ("0000:47:00", None), ("0000:47:00.8", None), ("zzzz:47:00.0", None), (None, None), (47, None),
])
def test_sysfs_bus_id_makes_nvml_and_sysfs_addresses_comparable(given, expected):
    assert _pci.sysfs_bus_id(given) == expected


def test_bus_gpus_lists_physical_gpus_only(tmp_path):
    _function(tmp_path, "0000:19:00.0", driver="nvidia")
    _function(tmp_path, "0000:47:00.0")                                         # unbound
    _function(tmp_path, "0000:47:00.1", device=0x22BA, pci_class=0x040300)     # its audio function
    _function(tmp_path, "0000:05:00.0", device=0x22A3, pci_class=0x068000, sub=(0x10DE, 0))    # an NVSwitch
    vf = _function(tmp_path, "0000:19:00.4", driver="nvidia")                  # an SR-IOV virtual function
    os.symlink("../0000:19:00.0", str(vf / "physfn"))
    read = _pci.bus_gpus(str(tmp_path))
    assert read == {"readable": True, "root": str(tmp_path), "gpus": [
        {"bus_id": "0000:19:00.0", "name": "NVIDIA H100 80GB HBM3", "bound_driver": "nvidia"},
        {"bus_id": "0000:47:00.0", "name": "NVIDIA H100 80GB HBM3", "bound_driver": None}]}
    assert [d["virtual_function"] for d in _pci.read_nvidia_devices(str(tmp_path)) if d["kind"] == "gpu"] == [
        False, True, False]


def test_bus_gpus_says_why_sysfs_is_unreadable(tmp_path):
    read = _pci.bus_gpus(str(tmp_path / "nowhere"))
    assert read["readable"] is False and read["gpus"] == [] and "cannot list the PCI devices in" in read["reason"]
