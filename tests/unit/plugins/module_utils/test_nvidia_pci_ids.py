"""NVIDIA's PCI id facts shipped in _nvidia_pci_ids (the open kernel modules' Compatible GPUs table, and the
architecture of every device id from NVIDIA's PCI id database), and the flavour rules _pci and _driver_plan draw from
them: every GPU of the table can run the open modules, every Blackwell id refuses the proprietary ones and every
pre-Turing id refuses the open ones, whether the catalog knows the GPU or not (issue 47, item 4)."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_plan as dp
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _nvidia_pci_ids as pci_ids
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci

TURING = catalog.ARCHITECTURE_ORDER.index("turing")
BLACKWELL = catalog.ARCHITECTURE_ORDER.index("blackwell")
# a board whose subsystem no row of the table names
OTHER_BOARD = (0x1234, 0x5678)


def record(device, subsystem=OTHER_BOARD, bus_id="0000:3b:00.0"):
    attributes = {"vendor": 0x10DE, "device": device, "class": 0x030200, "subsystem_vendor": subsystem[0],
                  "subsystem_device": subsystem[1]}
    return _pci.parse_device(bus_id, attributes, None)


def range_ids(keep):
    """Every device id of the architecture ranges whose architecture ``keep`` accepts (rank in ARCHITECTURE_ORDER)."""
    return [device for first, last, arch in pci_ids.ARCHITECTURE_RANGES if keep(catalog.ARCHITECTURE_ORDER.index(arch))
            for device in range(first, last + 1)]


def test_every_row_of_the_open_table_reports_open_support():
    for device, sub_vendor, sub_device, name in pci_ids.OPEN_TABLE:
        boards = [OTHER_BOARD] if sub_vendor is None else [(sub_vendor, sub_device)]
        for board in boards + [(0x10DE, 0x0000)]:
            dev = record(device, board)
            assert dev["open_modules"] is True, (hex(device), board)
            assert _pci.flavours([dev])["open"] is True and dp.flavour_refusals("open", [dev]) == [], hex(device)
        exact = record(device, boards[0])
        assert exact["name"] in (name, (catalog.gpu_by_pci(device, *boards[0]) or {}).get("name")), hex(device)
        assert catalog.architecture_rank(exact["architecture"]) >= TURING, hex(device)


def test_a_row_of_the_table_suffices_without_an_architecture(monkeypatch):
    # a GPU of a newer README than the PCI database: its row alone says it runs the open modules
    monkeypatch.setattr(_pci, "architecture_by_id", lambda device: None)
    for device, sub_vendor, sub_device, _name in pci_ids.OPEN_TABLE:
        board = OTHER_BOARD if sub_vendor is None else (sub_vendor, sub_device)
        assert record(device, board)["open_modules"] is True, hex(device)
    assert record(0x2331, OTHER_BOARD)["open_modules"] is None        # H100 PCIe: only boards with a row


def test_every_blackwell_id_refuses_proprietary():
    ids = range_ids(lambda rank: rank >= BLACKWELL)
    assert len(ids) > 40 and 0x31C2 in ids and 0x2901 in ids
    assert set(row[0] for row in pci_ids.OPEN_TABLE if row[0] >= 0x2900) <= set(ids)
    for device in ids:
        dev = record(device)
        found = _pci.flavours([dev])
        assert found["proprietary"] is False, hex(device)
        assert "Blackwell and later GPUs need the open kernel modules" in found["reasons"]["proprietary"][0]
        assert "declare the open flavour" in dp.flavour_refusals("proprietary", [dev])[0], hex(device)


def test_every_pre_turing_id_of_nvidias_pci_database_refuses_open():
    ids = range_ids(lambda rank: rank < TURING)
    assert 0x1DB1 in ids and 0x13F2 in ids and 0x0020 in ids
    for device in ids:
        dev = record(device)
        assert dev["open_modules"] is False, hex(device)
        found = _pci.flavours([dev])
        assert found["open"] is False and "the open kernel modules need Turing or later" in found["reasons"]["open"][0]
        assert "declare the proprietary flavour" in dp.flavour_refusals("open", [dev])[0], hex(device)


@pytest.mark.parametrize("device,name,arch", [
    (0x2331, "NVIDIA H100 PCIe", "hopper"), (0x233B, "NVIDIA H200 NVL", "hopper"),
    (0x20F1, "NVIDIA A100-PCIE-40GB", "ampere"), (0x20B5, "NVIDIA A100 80GB PCIe", "ampere"),
    (0x2235, "NVIDIA A40", "ampere"), (0x2237, "NVIDIA A10G", "ampere"), (0x26B5, "NVIDIA L40", "ada"),
])
def test_the_issues_gpus_outside_the_catalog_run_the_open_modules(device, name, arch):
    assert catalog.gpu_by_pci(device) is None
    board = next((row[1], row[2]) for row in pci_ids.OPEN_TABLE if row[0] == device)
    dev = record(device, board if board[0] is not None else OTHER_BOARD)
    assert (dev["name"], dev["architecture"], dev["open_modules"]) == (name, arch, True)
    assert _pci.flavours([dev])["open"] is True


@pytest.mark.parametrize("device,name", [
    (0x31C2, "NVIDIA GB300"), (0x2BB1, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
    (0x2B85, "NVIDIA GeForce RTX 5090"),
])
def test_the_issues_blackwell_gpus_outside_the_catalog_refuse_proprietary(device, name):
    dev = record(device, bus_id="0000:07:00.0")
    found = _pci.flavours([dev])
    assert found["proprietary"] is False
    assert found["reasons"]["proprietary"] == [
        "%s at 0000:07:00.0 is Blackwell: Blackwell and later GPUs need the open kernel modules" % name]
    res = dp.plan({"version": "580.95.05", "flavour": "proprietary"}, {
        "manager": "apt", "distribution": "ubuntu", "distribution_major": "24", "kernel": "6.8.0-87-generic",
        "architecture": "x86_64"}, [dev], {})
    assert [r["kind"] for r in res["refusals"]] == ["flavour"]


@pytest.mark.parametrize("device,arch", [(0x1DF6, "volta"), (0x1B38, "pascal"), (0x1BB3, "pascal"),
                                         (0x13F2, "maxwell")])
def test_the_issues_pre_turing_gpus_outside_the_catalog_refuse_open(device, arch):
    assert catalog.gpu_by_pci(device) is None
    dev = record(device)
    assert (dev["name"], dev["architecture"], dev["open_modules"]) == (None, arch, False)
    found = _pci.flavours([dev])
    assert found["open"] is False and found["proprietary"] is True
    assert found["reasons"]["open"] == ["PCI device 10de:%04x at 0000:3b:00.0 is %s: the open kernel modules need "
                                        "Turing or later" % (device, arch.capitalize())]
    assert "is a %s GPU" % arch.capitalize() in dp.flavour_refusals("open", [dev])[0]


def test_the_architecture_ranges_are_sorted_disjoint_and_known_to_the_catalog():
    previous = -1
    for first, last, arch in pci_ids.ARCHITECTURE_RANGES:
        assert previous < first <= last <= 0xFFFF, (hex(first), hex(last))
        assert catalog.architecture_rank(arch) is not None, arch
        previous = last
    assert _pci.architecture_by_id(0x0000) is None and _pci.architecture_by_id(0xFFFF) is None
    assert _pci.architecture_by_id(0x1E00) is None          # between Volta's last id and Turing's first


def test_the_catalog_agrees_with_nvidias_tables():
    assert catalog.OPEN_TABLE_SOURCE == pci_ids.OPEN_TABLE_SOURCE      # one README, at one tag
    assert "580.95.05" in pci_ids.OPEN_TABLE_SOURCE and "2025.07.11" in pci_ids.PCI_IDS_SOURCE
    rows = set((device, sub_vendor, sub_device) for device, sub_vendor, sub_device, _name in pci_ids.OPEN_TABLE)
    models = [(key, m["pci_device_id"] >> 16, m["architecture"], catalog.OPEN_MODULE_ROWS[key])
              for key, m in catalog.GPU_MODELS.items()]
    models += [(key, m["device_id"], m["architecture"], m["open_rows"]) for key, m in catalog.PCI_ONLY_MODELS.items()]
    for key, device, arch, open_rows in models:
        assert _pci.architecture_by_id(device) == arch, key
        for row in open_rows:
            assert ((device, None, None) if row is None else (device,) + tuple(row)) in rows, (key, row)
