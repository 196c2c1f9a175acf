"""scripts/nvidia_facts/open_gpu_ids.py (issue 47, item 4): it reads NVIDIA's open-module table from the README and
the architecture of each device id from the PCI id database, and the data module shipped in the collection is exactly
what it writes. The excerpts below are written for this test in the two files' formats (a few of their real rows)."""
import importlib.util
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _nvidia_pci_ids as pci_ids

from tests.support.ansible_run import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "nvidia_facts", "open_gpu_ids.py")
_SPEC = importlib.util.spec_from_file_location("open_gpu_ids", SCRIPT)
open_gpu_ids = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(open_gpu_ids)
SHIPPED = os.path.join(ROOT, "plugins", "module_utils", "gpu", "_nvidia_pci_ids.py")

README = """# NVIDIA Linux Open GPU Kernel Module Source

| Not | A table of GPUs |

## Compatible GPUs

The NVIDIA open kernel modules can be used on any Turing or later GPU (see the
table below).

| Product Name                                             | PCI ID         |
| -------------------------------------------------------- | -------------- |
| NVIDIA TITAN RTX                                         | 1E02           |
| Quadro RTX 6000                                          | 1E30           |
| Quadro RTX 8000                                          | 1E30 1028 129E |
| NVIDIA H100 PCIe                                         | 2331 10DE 1626 |
| NVIDIA GB300                                             | 31C2 10DE 21F1 |

## Another section

| Something else                                           | 9999           |
"""

PCI_IDS = """#
#\tVersion: 2025.07.11
#\tvendor  vendor_name
0014  Loongson Technology LLC
\t7a00  Hyper Transport Bridge Controller
10de  NVIDIA Corporation
\t0020  NV4 [Riva TNT]
\t1db1  GV100GL [Tesla V100 SXM2 16GB]
\t\t10de 1212  Tesla V100 SXM2 16GB
\t1df6  GV100GL [Tesla V100S PCIe 32GB]
\t1e02  TU102 [TITAN RTX]
\t1e30  TU102GL [Quadro RTX 6000/8000]
\t229a  Orin PCIe x8 Root Complex
\t2331  GH100 [H100 PCIe]
\t2335  GH100 [H200 SXM 141GB]
\t2900  GB100 [Reserved Dev ID A]
\t2b85  GB202 [GeForce RTX 5090]
\t3340  GB120
10df  Emulex Corporation
\t1ae5  LP6000 Fibre Channel Host Adapter
C 03  Display controller
\t00  VGA compatible controller
"""


def test_the_readme_table_is_read_as_the_shipped_rows_are():
    rows = open_gpu_ids.open_table(README)
    assert rows == [(0x1E02, None, None, "NVIDIA TITAN RTX"), (0x1E30, None, None, "Quadro RTX 6000"),
                    (0x1E30, 0x1028, 0x129E, "Quadro RTX 8000"), (0x2331, 0x10DE, 0x1626, "NVIDIA H100 PCIe"),
                    (0x31C2, 0x10DE, 0x21F1, "NVIDIA GB300")]
    shipped = list(pci_ids.OPEN_TABLE)
    positions = [shipped.index(row) for row in rows]          # each a shipped row, in the README's order
    assert positions == sorted(positions)


def test_the_pci_database_gives_architecture_ranges_as_the_shipped_ones_do():
    version, devices = open_gpu_ids.pci_devices(PCI_IDS)
    assert version == "2025.07.11" and len(devices) == 11               # 10de's, no subsystem, no other vendor
    assert (0x0020, "NV4 [Riva TNT]") in devices and (0x229A, "Orin PCIe x8 Root Complex") in devices
    assert open_gpu_ids.architecture_ranges(devices) == [
        (0x0020, 0x0020, "nv4"), (0x1DB1, 0x1DF6, "volta"), (0x1E02, 0x1E30, "turing"), (0x2331, 0x2335, "hopper"),
        (0x2900, 0x3340, "blackwell")]
    for device, name in devices:
        assert shipped_architecture(device) == open_gpu_ids.chip_architecture(name), hex(device)
    assert shipped_architecture(0x1DF0) == "volta"          # not in the excerpt, between two of its Volta ids


def shipped_architecture(device):
    return next((arch for first, last, arch in pci_ids.ARCHITECTURE_RANGES if first <= device <= last), None)


@pytest.mark.parametrize("name,arch", [
    ("GB203M / GN22 [GeForce RTX 5090 Max-Q / Mobile]", "blackwell"), ("AD102GL [L40S]", "ada"),
    ("GA100 [A100 SXM4 40GB]", "ampere"), ("TU104GL [Tesla T4]", "turing"), ("GP102GL [Tesla P40]", "pascal"),
    ("GM204GL [Tesla M60]", "maxwell"), ("GK210GL [Tesla K80]", "kepler"), ("GF100GL [Tesla C2050]", "fermi"),
    ("GT200GL [Tesla C1060 / M1060]", "tesla"), ("G92 [GeForce 9800 GT]", "tesla"), ("G71 [GeForce 7900 GTX]", "curie"),
    ("MCP79 [GeForce 8200M G]", "tesla"), ("C51 [GeForce Go 6150]", "curie"), ("NV44A [GeForce 6200]", "curie"),
    ("NV34 [GeForce FX 5200]", "rankine"), ("NV25 [GeForce4 Ti 4400]", "kelvin"), ("NV1A [GeForce2 MX]", "celsius"),
    ("NV5 [Riva TNT2]", "nv4"), ("NV0A [Aladdin TNT2]", "nv4"), ("NV3 [Riva 128]", "nv3"), ("NV1 [NV1 Series]", "nv1"),
    ("MCP51 SMBus", None), ("Tegra PCIe x4 Bridge", None), ("nForce2 IGP2", None), ("CK804 Memory Controller", None),
])
def test_chip_names_give_architectures(name, arch):
    assert open_gpu_ids.chip_architecture(name) == arch


def test_the_shipped_module_is_exactly_what_the_script_writes():
    text = open_gpu_ids.render(pci_ids.OPEN_TABLE, pci_ids.ARCHITECTURE_RANGES, pci_ids.OPEN_TABLE_SOURCE,
                               pci_ids.PCI_IDS_SOURCE)
    with open(SHIPPED, encoding="utf-8") as handle:
        assert handle.read() == text, "regenerate it as docs/driver.md says; do not edit it"


def test_the_script_writes_a_module_from_the_two_files(tmp_path):
    (tmp_path / "README.md").write_text(README)
    (tmp_path / "default_pci.ids").write_text(PCI_IDS)
    out = tmp_path / "ids.py"
    assert open_gpu_ids.main(["--readme", str(tmp_path / "README.md"), "--readme-tag", "580.95.05", "--pci-ids",
                              str(tmp_path / "default_pci.ids"), "--pci-ids-tag", "v0.7.4", "--output", str(out)]) == 0
    data = {}
    exec(compile(out.read_text(), str(out), "exec"), data)     # pylint: disable=exec-used
    assert list(data["OPEN_TABLE"]) == open_gpu_ids.open_table(README)
    assert data["ARCHITECTURE_RANGES"][-1] == (0x2900, 0x3340, "blackwell")
    assert (data["OPEN_TABLE_SOURCE"], data["PCI_IDS_SOURCE"]) == (pci_ids.OPEN_TABLE_SOURCE, pci_ids.PCI_IDS_SOURCE)


def test_files_that_are_not_nvidias_are_refused_naming_the_line(tmp_path, capsys):
    bad = README.replace("2331 10DE 1626", "2331 10DE")
    with pytest.raises(open_gpu_ids.SourceError, match=r"README.md line 15: '2331 10DE' is not a PCI id"):
        open_gpu_ids.open_table(bad)
    with pytest.raises(open_gpu_ids.SourceError, match="has no '## Compatible GPUs' heading"):
        open_gpu_ids.open_table("# a README\n")
    with pytest.raises(open_gpu_ids.SourceError, match="no table of GPUs"):
        open_gpu_ids.open_table("## Compatible GPUs\n\nnone yet\n\n## Next\n| a | 1E02 |\n")
    with pytest.raises(open_gpu_ids.SourceError, match="no device of vendor 10de"):
        open_gpu_ids.pci_devices("0014  Loongson Technology LLC\n\t7a00  Bridge\n")
    (tmp_path / "README.md").write_text(bad)
    (tmp_path / "pci.ids").write_text(PCI_IDS)
    assert open_gpu_ids.main(["--readme", str(tmp_path / "README.md"), "--readme-tag", "x", "--pci-ids",
                              str(tmp_path / "pci.ids"), "--pci-ids-tag", "y"]) == 2
    assert "line 15" in capsys.readouterr().err


@pytest.mark.parametrize("name", ['NVIDIA "X"', "back\\slash", " padded", ""])
def test_a_name_the_text_table_cannot_hold_is_refused(name):
    with pytest.raises(open_gpu_ids.SourceError, match="cannot be written as one line"):
        open_gpu_ids.render([(0x2330, None, None, name)], [], "readme", "pci.ids")
