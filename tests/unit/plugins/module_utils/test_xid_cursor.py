"""The health sweep's cursor in the kernel log (_xid_cursor, pure): what is new since the last sweep, what stays
outstanding for the boot, a reboot, a rotated log, lines logged in the same microsecond, and cursor files that are not
cursors; and the timed kernel-log reader and the SXid parser it reads with (_xid)."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _xid
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._xid_cursor import advance, parse_cursor

BOOT = "0f1e2d3c-aaaa-4bbb-8ccc-111122223333"
OTHER_BOOT = "9a8b7c6d-aaaa-4bbb-8ccc-444455556666"
FATAL = "NVRM: Xid (PCI:0000:47:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
APP = "NVRM: Xid (PCI:0000:19:00): 13, pid=4242, name=python3, Graphics SM Warp Exception"
ROW = "NVRM: Xid (PCI:0000:19:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
# (the NVSwitch's lines of one event, in the form NVIDIA/nvtrust issue 124 shows)
SXID = "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt"
SXID_DETAIL = "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00"


def sweep(text, lines, boot=BOOT, oldest=None):
    return advance(text, boot, [list(entry) for entry in lines], oldest=oldest)


def codes(events):
    return [(e["type"], e["code"]) for e in events]


def test_no_cursor_every_line_of_this_boot_is_new_and_only_the_fatal_xid_is_kept():
    first = sweep(None, [(61.5, APP), (62.0, FATAL), (63.25, SXID), (63.25, SXID_DETAIL)])
    assert first["first"] is True and first["rebooted"] is False and first["rotated"] is False
    assert codes(first["new"]) == [("xid", 13), ("xid", 79), ("sxid", 22013)]      # the SXid's detail line is no event
    assert codes(first["cursor"]["events"]) == [("xid", 79)]
    assert first["cursor"]["last"] == {"ts": 63.25, "line": SXID_DETAIL}             # the last line seen, detail or not
    assert first["changed"] is True and json.loads(first["text"]) == first["cursor"] and first["warnings"] == []


def test_same_boot_only_the_lines_after_the_cursor_are_new_and_the_fatal_one_stays_outstanding():
    first = sweep(None, [(61.5, APP), (62.0, FATAL)])
    again = sweep(first["text"], [(61.5, APP), (62.0, FATAL)])
    assert again["new"] == [] and again["changed"] is False and again["text"] == first["text"]
    assert codes(again["outstanding"]) == [("xid", 79)]                               # kept for the rest of the boot
    later = sweep(first["text"], [(61.5, APP), (62.0, FATAL), (70.0, ROW)])
    assert codes(later["new"]) == [("xid", 63)] and later["changed"] is True
    assert codes(later["outstanding"]) == [("xid", 79), ("xid", 63)]
    assert codes(later["cursor"]["events"]) == [("xid", 79)]                          # 63 needs no reset: not kept


def test_a_new_boot_drops_the_previous_boots_events_and_takes_every_line_as_new():
    first = sweep(None, [(62.0, FATAL)])
    rebooted = sweep(first["text"], [(5.0, APP)], boot=OTHER_BOOT)
    assert rebooted["rebooted"] is True and rebooted["first"] is False and rebooted["changed"] is True
    assert codes(rebooted["new"]) == [("xid", 13)] and codes(rebooted["outstanding"]) == [("xid", 13)]
    assert rebooted["cursor"]["events"] == [] and rebooted["cursor"]["boot_id"] == OTHER_BOOT
    quiet = sweep(first["text"], [], boot=OTHER_BOOT)                                 # a new boot with no Xid yet
    assert quiet["changed"] is True and quiet["cursor"]["last"] is None and quiet["outstanding"] == []


def test_a_log_rotated_past_the_cursor_says_so_and_keeps_the_fatal_xid_blocking():
    first = sweep(None, [(61.5, APP), (62.0, FATAL)])
    rotated = sweep(first["text"], [(90.0, ROW)], oldest=80.0)
    assert rotated["rotated"] is True and "rotated" in rotated["warnings"][0]
    assert codes(rotated["new"]) == [("xid", 63)]
    assert codes(rotated["outstanding"]) == [("xid", 79), ("xid", 63)]               # the 79 is gone from the log
    # the log still reaches back before the cursor: not rotated, even though its Xid lines are gone
    kept = sweep(first["text"], [(90.0, ROW)], oldest=0.0)
    assert kept["rotated"] is False and codes(kept["new"]) == [("xid", 63)] and kept["warnings"]


def test_lines_logged_in_the_same_microsecond_are_told_apart_by_their_order():
    first = sweep(None, [(62.0, APP), (62.0, FATAL)])
    assert first["cursor"]["last"] == {"ts": 62.0, "line": FATAL}
    later = sweep(first["text"], [(62.0, APP), (62.0, FATAL), (62.0, ROW)])
    assert codes(later["new"]) == [("xid", 63)]
    # the same text twice at the same time: only the one after the cursor's (last) occurrence is new
    twice = sweep(None, [(62.0, FATAL)])
    again = sweep(twice["text"], [(62.0, FATAL), (62.0, FATAL), (62.0, APP)])
    assert codes(again["new"]) == [("xid", 13)]


@pytest.mark.parametrize("text,words", [
    ("", "is empty"),
    ("   \n", "is empty"),
    ("{not json", "is not JSON"),
    ("[]", "its top level is not an object"),
    (json.dumps({"version": 2, "boot_id": BOOT, "last": None, "events": []}), "version is 2, expected 1"),
    (json.dumps({"version": 1, "boot_id": "", "last": None, "events": []}), "boot_id is not a non-empty string"),
    (json.dumps({"version": 1, "boot_id": BOOT, "last": {"ts": "x"}, "events": []}), "last is neither null"),
    (json.dumps({"version": 1, "boot_id": BOOT, "last": None, "events": [{"ts": 1}]}), "events is not a list"),
])
def test_a_cursor_file_that_is_not_a_cursor_is_no_cursor_with_a_warning(text, words):
    assert parse_cursor(text) == (None, parse_cursor(text)[1]) and words in parse_cursor(text)[1]
    result = sweep(text, [(62.0, FATAL)])
    assert result["first"] is True and codes(result["new"]) == [("xid", 79)] and result["changed"] is True
    assert len(result["warnings"]) == 1 and words in result["warnings"][0] and "rewritten" in result["warnings"][0]


def test_the_fatal_events_kept_are_one_per_bus_and_code():
    first = sweep(None, [(62.0, FATAL), (63.0, FATAL), (64.0, FATAL)])
    assert len(first["new"]) == 3 and len(first["cursor"]["events"]) == 1


def test_keep_follows_the_policy():
    blocked = advance(None, BOOT, [[70.0, ROW]], keep=lambda e: e["type"] == "xid")
    assert codes(blocked["cursor"]["events"]) == [("xid", 63)]


def test_an_unknown_boot_id_is_taken_as_the_cursors_with_a_warning():
    first = sweep(None, [(62.0, FATAL)])
    result = advance(first["text"], None, [[62.0, FATAL]])
    assert result["rebooted"] is False and result["new"] == [] and "boot id could not be read" in result["warnings"][0]


LINES = st.lists(st.tuples(st.integers(min_value=0, max_value=5), st.sampled_from([FATAL, APP, ROW, SXID])),
                 max_size=12)


@settings(max_examples=60, deadline=None)
@given(LINES, st.integers(min_value=0, max_value=12))
def test_two_sweeps_see_each_line_once(pairs, cut):
    """A log read in two sweeps (the first seeing a prefix of it) yields every event exactly once, in order. (Each
    line's text is its own, as the driver's lines differ by pid or channel; the same text twice in the same microsecond
    across a sweep's boundary is counted once: _xid_cursor's docstring.)"""
    log, ts = [], 10.0
    for number, (step, text) in enumerate(pairs):
        ts += step / 4.0               # steps of 0 give lines in the same microsecond
        log.append((ts, "%s (n%d)" % (text, number)))
    cut = min(cut, len(log))
    whole = sweep(None, log)
    first = sweep(None, log[:cut])
    second = sweep(first["text"], log)
    assert [e["line"] for e in first["new"] + second["new"]] == [e["line"] for e in whole["new"]]
    assert second["cursor"]["events"] == whole["cursor"]["events"]
    assert second["changed"] is (cut < len(log))


# ---------------------------------------------------------------- the kernel log with timestamps, and SXid lines (_xid)

def test_sxid_lines_are_parsed_with_their_severity_link_and_switch():
    event = _xid.parse_sxid_line("[   38.178720] " + SXID)
    assert event == {"switch": "nvidia-nvswitch3", "bus_id": "0000:04:00.0", "code": 22013, "fatal": False,
                     "link": 44, "detail": False, "message": "Link 44 Minion Link DLREQ interrupt"}
    brief = _xid.parse_sxid_line(
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error")
    assert (brief["code"], brief["fatal"], brief["link"], brief["bus_id"]) == (12028, False, 32, "0000:05:00.0")
    fatal = _xid.parse_sxid_line("nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 24007, Fatal, Link 29 an error")
    assert fatal["fatal"] is True and fatal["detail"] is False
    data = _xid.parse_sxid_line("nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a}")
    assert data["detail"] is True and data["fatal"] is None and data["code"] == 12028
    assert _xid.parse_sxid_line(FATAL) is None and _xid.parse_line(SXID) is None
    assert _xid.parse_sxid_line("nvidia-nvswitch0: probe of 0000:05:00.0 failed") is None


def test_the_timed_reader_keeps_xid_and_sxid_lines_with_their_timestamps():
    journal = "\n".join([
        "-- Logs begin at Sun 2026-11-29 05:00:00 UTC. --",
        "[    0.000000] host kernel: Linux version 6.8.0",
        "[  269.517039] host kernel: " + FATAL,
        "[  270.000001] host kernel: " + SXID,
        "[  270.100000] host kernel: e1000e: link up",
    ])
    calls = []

    def run(argv):
        calls.append(argv[0])
        return 0, journal, ""
    log = _xid.read_kernel_log_timed(run)
    assert calls == ["journalctl"] and log["source"] == "journalctl" and log["oldest"] == 0.0
    assert log["lines"] == [[269.517039, FATAL], [270.000001, SXID]]


def test_the_timed_reader_goes_on_to_dmesg_and_says_why_when_neither_answers():
    def run(argv):
        if argv[0] == "journalctl":
            raise OSError(2, "No such file or directory")
        return 0, "[   12.5] NVRM: loading\n[ 269.517039] " + FATAL + "\n", ""
    log = _xid.read_kernel_log_timed(run)
    assert log["source"] == "dmesg" and log["lines"] == [[269.517039, FATAL]] and log["oldest"] == 12.5

    def refuse(argv):
        return 1, "", "%s: Operation not permitted" % argv[0]
    log = _xid.read_kernel_log_timed(refuse)
    assert log["readable"] is False and "journalctl: rc 1" in log["reason"] and "dmesg: rc 1" in log["reason"]
