"""Write plugins/module_utils/gpu/_nvidia_pci_ids.py, the collection's copy of two NVIDIA facts about PCI device ids, from
NVIDIA's own files (which the user fetches; nothing is downloaded here):

- the "Compatible GPUs" table of NVIDIA/open-gpu-kernel-modules' README.md at a tag: every product (device id, or
  device id + subsystem vendor + subsystem device) that the open kernel modules run;
- the GPU architecture of every NVIDIA (10de) device id, from the chip name that the PCI id database as go-nvlib
  vendors it (pkg/pciids/default_pci.ids) writes first in each device's name ("2330  GH100 [H100 SXM5 80GB]": GH100,
  Hopper), as sorted ranges: consecutive ids (in id order) of one architecture make one range, so an id that the
  database does not list yet but that lies between two ids of one architecture gets that architecture.

Usage (docs/driver.md, "The open-module table and the architecture of a device id"):

    curl -fsSLo README.md https://raw.githubusercontent.com/NVIDIA/open-gpu-kernel-modules/580.95.05/README.md
    curl -fsSLo default_pci.ids https://raw.githubusercontent.com/NVIDIA/go-nvlib/v0.7.4/pkg/pciids/default_pci.ids
    python scripts/nvidia_facts/open_gpu_ids.py --readme README.md --readme-tag 580.95.05 \\
        --pci-ids default_pci.ids --pci-ids-tag v0.7.4 --output plugins/module_utils/gpu/_nvidia_pci_ids.py

Without --output the module is printed. Exit status 2 with a message naming the file and line when a file is not
what it should be (no table after the heading, a row whose ids are not 4 hex digits, no 10de vendor section).
"""
import argparse
import re
import sys

HEADING = "## Compatible GPUs"
_HEX4 = re.compile(r"^[0-9A-Fa-f]{4}$")
_PCI_DEVICE = re.compile(r"^\t([0-9a-f]{4})  (.+)$")
_PCI_VERSION = re.compile(r"^#\s*Version:\s*(\S+)")

# The chip name that begins a pci.ids device name -> its architecture, first match wins. NVIDIA's architecture names
# from Fermi on (GF, GK, GM, GP, GV, TU, GA, AD, GH, GB); the older families as envytools groups their chips
# (envytools/envytools at 0c9ea6be, docs/hw/gpu.rst, "The GPU families"): NV1, NV3 (RIVA), NV4 (TNT, with NV5 and
# the NV0A IGP), Celsius (NV1x), Kelvin (NV2x), Rankine (NV3x), Curie (NV4x, G7x and the C51, C61, C67, C68, C73
# IGPs), Tesla (G8x, G9x, GT2xx, and the MCP77/78/79/7A and MCP89 IGPs, C77-C79). Names starting otherwise (chipset
# functions: MCP..., CK804, nForce; Tegra SoCs) are no GPU chip and are left out.
CHIP_ARCHITECTURES = (
    (r"GB\d", "blackwell"), (r"GH\d", "hopper"), (r"AD\d", "ada"), (r"GA\d", "ampere"), (r"TU\d", "turing"),
    (r"GV\d", "volta"), (r"GP\d", "pascal"), (r"GM\d", "maxwell"), (r"GK\d", "kepler"), (r"GF\d", "fermi"),
    (r"GT\d", "tesla"), (r"G[89]\d", "tesla"), (r"C7[789]", "tesla"), (r"MCP(7[789A]|89)", "tesla"),
    (r"G7\d", "curie"), (r"C(51|61|67|68|73)", "curie"), (r"NV4[0-9A-F]", "curie"),
    (r"NV3[0-9A-F]", "rankine"), (r"NV2[0-9A-F]", "kelvin"), (r"NV1[0-9A-F]", "celsius"),
    (r"NV(4|5|0A)(?![0-9A-F])", "nv4"), (r"NV3(?![0-9A-F])", "nv3"), (r"NV1(?![0-9A-F])", "nv1"),
)
_CHIP_RULES = [(re.compile(pattern), arch) for pattern, arch in CHIP_ARCHITECTURES]


class SourceError(Exception):
    """A source file is not what it should be; the message names the file and the line."""


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def open_table(text, where="README.md"):
    """The README's Compatible GPUs rows, in its order: [(device, subsystem vendor or None, subsystem device or None,
    product name)]. SourceError when the heading, the table or a row is not as NVIDIA writes them."""
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if line.strip() == HEADING), None)
    if start is None:
        raise SourceError("%s has no %r heading" % (where, HEADING))
    rows, seen_table = [], False
    for number in range(start + 1, len(lines)):
        line = lines[number].strip()
        if not line.startswith("|"):
            if seen_table or line.startswith("#"):          # the table ended, or the section did without one
                break
            continue
        seen_table = True
        cells = _cells(line)
        if len(cells) != 2:
            raise SourceError("%s line %d: a row of the table has %d cells, not 2 (product name, PCI ID)"
                              % (where, number + 1, len(cells)))
        name, ids = cells
        if set(ids) <= set("- ") or ids == "PCI ID":        # the header and its separator
            continue
        parts = ids.split()
        if len(parts) not in (1, 3) or not all(_HEX4.match(part) for part in parts):
            raise SourceError("%s line %d: %r is not a PCI id (4 hex digits: device, or device, subsystem vendor and "
                              "subsystem device)" % (where, number + 1, ids))
        values = [int(part, 16) for part in parts]
        rows.append((values[0], values[1], values[2], name) if len(values) == 3 else (values[0], None, None, name))
    if not rows:
        raise SourceError("%s has no table of GPUs after the %r heading" % (where, HEADING))
    return rows


def chip_architecture(name):
    """The architecture of the chip that begins a pci.ids device name, or None (no GPU chip named)."""
    chip = name.split()[0] if name.split() else ""
    for pattern, arch in _CHIP_RULES:
        if pattern.match(chip):
            return arch
    return None


def pci_devices(text, where="default_pci.ids"):
    """(the database's version or None, [(device id, name)] of vendor 10de in file order)."""
    version, devices, inside = None, [], False
    for line in text.splitlines():
        found = _PCI_VERSION.match(line)
        if found and version is None:
            version = found.group(1)
        if line[:1] not in ("\t", "#", ""):          # a vendor line, or a class line ("C 03  Display controller")
            inside = line.startswith("10de ")
            continue
        match = _PCI_DEVICE.match(line) if inside else None
        if match:
            devices.append((int(match.group(1), 16), match.group(2).strip()))
    if not devices:
        raise SourceError("%s has no device of vendor 10de (NVIDIA)" % where)
    return version, devices


def architecture_ranges(devices):
    """[(first id, last id, architecture)], sorted: each range runs from an id to the last id before the next id (in
    id order) whose chip is of another architecture; ids whose name names no GPU chip neither start nor break one."""
    ranges = []
    for device, name in sorted(devices):
        arch = chip_architecture(name)
        if arch is None:
            continue
        if ranges and ranges[-1][2] == arch:
            ranges[-1][1] = device
        else:
            ranges.append([device, device, arch])
    return [tuple(r) for r in ranges]


def _hex(value):
    return "-" if value is None else "%04X" % value


def render(rows, ranges, readme_source, pci_source):
    """The data module's text: the two tables as text, one row per line, read into tuples when the module is imported.
    (As text, the module is one string literal each to ansible-core's payload builder, which parses every module_util
    a module imports on each run: about a millisecond, where tuple literals took 24 ms on the 2-core machine.)"""
    for device, sub_vendor, sub_device, name in rows:
        if not name or name != name.strip() or any(c in name for c in '\\"\n'):
            raise SourceError("product name %r of device %04X cannot be written as one line of the table" % (
                name, device))
    out = [
        "# -*- coding: utf-8 -*-",
        "# Copyright: gpuops.nvidia contributors",
        "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)",
        '"""NVIDIA\'s facts about its PCI device ids, as data (GENERATED by scripts/nvidia_facts/open_gpu_ids.py '
        "from the",
        "two sources named below; do not edit: regenerate it as docs/driver.md says).",
        "",
        "OPEN_TABLE: the README's Compatible GPUs table, the GPUs NVIDIA's open kernel modules run, one row per line "
        "of",
        "the table: (PCI device id, subsystem vendor id, subsystem device id, product name); a row with the device id",
        "alone has None for both subsystem ids and covers every board of that id.",
        "ARCHITECTURE_RANGES: (first device id, last device id, architecture), sorted and disjoint, from the chip name",
        "of every NVIDIA device of the PCI id database; ids between two ids of one architecture have it too.",
        "Both are kept below as text (hexadecimal ids, - for none) and read once when the module is imported.",
        '"""',
        "",
        "from __future__ import absolute_import, division, print_function",
        "",
        "__metaclass__ = type",
        "",
        "OPEN_TABLE_SOURCE = %r" % readme_source,
        "PCI_IDS_SOURCE = %r" % pci_source,
        "",
        '_OPEN_TABLE = """\\',
    ]
    for device, sub_vendor, sub_device, name in rows:
        out.append("%s %s %s %s" % (_hex(device), _hex(sub_vendor), _hex(sub_device), name))
    out += ['"""', "", '_ARCHITECTURE_RANGES = """\\']
    for first, last, arch in ranges:
        out.append("%s %s %s" % (_hex(first), _hex(last), arch))
    out += [
        '"""',
        "",
        "",
        "def _id(text):",
        '    return None if text == "-" else int(text, 16)',
        "",
        "",
        "OPEN_TABLE = tuple((_id(d), _id(v), _id(s), name) for d, v, s, name in",
        '                   (line.split(" ", 3) for line in _OPEN_TABLE.splitlines()))',
        "ARCHITECTURE_RANGES = tuple((int(first, 16), int(last, 16), arch) for first, last, arch in",
        "                            (line.split() for line in _ARCHITECTURE_RANGES.splitlines()))",
    ]
    return "\n".join(out) + "\n"


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--readme", required=True, help="NVIDIA/open-gpu-kernel-modules' README.md at --readme-tag")
    parser.add_argument("--readme-tag", required=True, help="the tag the README was taken at (e.g. 580.95.05)")
    parser.add_argument("--pci-ids", required=True, help="NVIDIA/go-nvlib's pkg/pciids/default_pci.ids")
    parser.add_argument("--pci-ids-tag", required=True, help="the go-nvlib tag or commit it was taken at")
    parser.add_argument("--output", help="the file to write (default: print it)")
    args = parser.parse_args(argv)
    try:
        rows = open_table(_read(args.readme), args.readme)
        version, devices = pci_devices(_read(args.pci_ids), args.pci_ids)
    except (OSError, SourceError) as exc:
        sys.stderr.write("open_gpu_ids: %s\n" % exc)
        return 2
    text = render(rows, architecture_ranges(devices),
                  "NVIDIA/open-gpu-kernel-modules at %s, README.md, Compatible GPUs" % args.readme_tag,
                  "NVIDIA/go-nvlib at %s, pkg/pciids/default_pci.ids (pci.ids version %s)"
                  % (args.pci_ids_tag, version or "not stated"))
    if not args.output:
        sys.stdout.write(text)
        return 0
    with open(args.output, "w", encoding="utf-8") as handle:     # opened only once both files were read
        handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
