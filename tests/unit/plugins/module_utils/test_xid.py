"""The Xid parser, the catalog's classification and the kernel-log reader's fallbacks (real line formats)."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _xid

GPUS = [{"index": 0, "pci_bus_id": "00000000:07:00.0"}, {"index": 3, "pci_bus_id": "00000000:47:00.0"}]


@pytest.mark.parametrize("line,expected", [
    # open-gpu-kernel-modules issue 1151 (no pid)
    ("May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
     {"bus_id": "0000:2b:00", "code": 79, "pid": None, "process": None, "message": "GPU has fallen off the bus."}),
    # a pid and a message (stas00/ml-engineering)
    ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
     {"bus_id": "0000:10:1c", "code": 63, "pid": 1896, "process": None,
      "message": "Row Remapper: New row marked for remapping, reset gpu to activate."}),
    # quoted unknown pid and a name field, with dmesg's timestamp prefix
    ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
     "Exception on (GPC 7, TPC 1, SM 0)",
     {"bus_id": "0000:cb:00", "code": 13, "pid": None, "process": None,
      "message": "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0)"}),
    ("[  12.5] NVRM: Xid (PCI:0000:47:00): 31, pid=4242, name=python3, Ch 00000008, intr 10000000. MMU Fault",
     {"bus_id": "0000:47:00", "code": 31, "pid": 4242, "process": "python3",
      "message": "Ch 00000008, intr 10000000. MMU Fault"}),
    # older drivers: no PCI: prefix
    ("[ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff",
     {"bus_id": "0000:01:00", "code": 3, "pid": None, "process": None,
      "message": "C 00000005 SC 00000007 M 00001ffc Data ffffffff"}),
])
def test_parses_the_published_line_forms(line, expected):
    assert _xid.parse_line(line) == expected


@pytest.mark.parametrize("line", [
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build",
    "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.", "", "NVRM: Xid (PCI:zz:00): 79, x",
])
def test_other_lines_are_not_xid_events(line):
    assert _xid.parse_line(line) is None


def test_events_map_to_the_gpu_by_bus_id_and_keep_unknown_buses():
    lines = ["NVRM: Xid (PCI:0000:47:00): 48, pid=1, name=train, An uncorrectable double bit error",
             "NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus.", "unrelated"]
    first, second = _xid.xid_events(lines, GPUS)
    assert (first["gpu"], first["pci_bus_id"], first["code"], first["fatal"], first["cause"]) == (
        3, "00000000:47:00.0", 48, True, "gpu")
    assert (second["gpu"], second["pci_bus_id"]) == (None, "0000:99:00")


@pytest.mark.parametrize("code,cause,fatal,action", [
    (13, "application", False, "RESTART_APP"), (31, "application", False, "RESTART_APP"),
    (43, "application", False, "IGNORE"), (45, "application", False, "WORKFLOW_XID_45"),
    (48, "gpu", True, "WORKFLOW_XID_48"), (63, "gpu", False, "IGNORE"), (64, "gpu", True, "RESET_GPU"),
    (74, "gpu", True, "WORKFLOW_NVLINK_ERR"), (79, "gpu", True, "RESTART_BM"), (92, "gpu", False, "IGNORE"),
    (94, "gpu", False, "RESTART_APP"), (95, "gpu", True, "RESET_GPU"), (119, "gpu", True, "RESET_GPU"),
    (120, "gpu", True, "RESET_GPU"), (168, "gpu", True, None), (9999, "unknown", True, None),
    (1, "unknown", True, None),    # "Unused" in the catalog: as unknown
])
def test_classification_follows_the_catalog(code, cause, fatal, action):
    got = _xid.classify(code)
    assert (got["cause"], got["fatal"], got["action"]) == (cause, fatal, action)
    assert got["recommended"]


def test_xid_154_is_fatal_unless_the_recovery_action_is_none():
    assert _xid.classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")["fatal"]
    assert not _xid.classify(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")["fatal"]


def test_bus_keys_match_across_forms():
    assert _xid.bus_key("00000000:47:00.0") == _xid.bus_key("0000:47:00") == _xid.bus_key("0000:47:00.0") == (0, 0x47, 0)
    assert _xid.bus_key("garbage") is None


def _runner(answers, calls):
    def run(argv):
        calls.append(argv[0])
        answer = answers[argv[0]]
        if isinstance(answer, Exception):
            raise answer
        return answer
    return run


XID = "NVRM: Xid (PCI:0000:47:00): 79, GPU has fallen off the bus."


def test_reader_uses_journalctl_and_keeps_only_xid_lines():
    calls = []
    got = _xid.read_kernel_log(_runner({"journalctl": (0, "Linux version 6.8\n%s\n" % XID, "")}, calls))
    assert got == {"readable": True, "source": "journalctl", "lines": [XID]}
    assert calls == ["journalctl"]


@pytest.mark.parametrize("journal", [
    FileNotFoundError(2, "No such file or directory: 'journalctl'"), (1, "", "Failed to open journal"),
    (0, "-- No entries --\n", ""), (0, "", ""),
])
def test_reader_falls_back_to_dmesg(journal):
    calls = []
    got = _xid.read_kernel_log(_runner({"journalctl": journal, "dmesg": (0, "[ 1.0] %s\n" % XID, "")}, calls))
    assert got["readable"] and got["source"] == "dmesg" and got["lines"] == ["[ 1.0] %s" % XID]
    assert calls == ["journalctl", "dmesg"]


def test_an_unreadable_log_is_said_not_raised():
    got = _xid.read_kernel_log(_runner({
        "journalctl": FileNotFoundError(2, "No such file or directory: 'journalctl'"),
        "dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")}, []))
    assert got["readable"] is False and got["lines"] == []
    assert got["reason"].startswith("kernel log not readable: journalctl: ")
    assert "dmesg: rc 1: dmesg: read kernel buffer failed: Operation not permitted" in got["reason"]
    assert _xid.read_kernel_log(None)["readable"] is False


def test_a_module_on_a_node_without_journalctl_reads_dmesg(tmp_path, monkeypatch):
    # A real AnsibleModule's run_command through _gpu_backend.module_runner, on a PATH where journalctl does not exist
    # and dmesg is a script: the reader goes on to dmesg. AnsibleModule's default (handle_exceptions) would have ended
    # the module with "Error executing command." - what a lent GPU machine without systemd showed.
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import module_runner

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text("#!/bin/sh\necho '[ 12.5] NVRM: Xid (PCI:0000:47:00): 79, pid=0, GPU has fallen off the bus.'\n")
    dmesg.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with patch_module_args({}):
        module = basic.AnsibleModule(argument_spec={})
    log = _xid.read_kernel_log(module_runner(module))
    assert log["readable"] is True and log["source"] == "dmesg", log
    assert len(log["lines"]) == 1 and "79" in log["lines"][0]
