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
# a fatal one (24007 is in the Fabric Manager guide's "Fatal NVSwitch SXid Errors" table) and its Data line
SXID_FATAL = "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 24007, Fatal, Link 29 sourcetrack timeout error"
SXID_FATAL_DATA = "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 24007, Data {0x0000001d, 0x00005dc7}"


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


def test_a_fatal_sxid_stays_outstanding_for_the_boot_and_a_non_fatal_one_does_not():
    first = sweep(None, [(40.0, SXID), (40.0, SXID_DETAIL), (41.0, SXID_FATAL), (41.0, SXID_FATAL_DATA)])
    assert codes(first["new"]) == [("sxid", 22013), ("sxid", 24007)]          # the detail lines are no events
    assert [(e["fatal"], e["scope"]) for e in first["new"]] == [(False, None), (True, "partition")]
    assert codes(first["cursor"]["events"]) == [("sxid", 24007)]
    again = sweep(first["text"], [(40.0, SXID), (40.0, SXID_DETAIL), (41.0, SXID_FATAL), (41.0, SXID_FATAL_DATA)])
    assert again["new"] == [] and again["changed"] is False
    assert [(e["switch"], e["bus_id"], e["code"]) for e in again["outstanding"]] == [
        ("nvidia-nvswitch1", "0000:84:00.0", 24007)]
    rotated = sweep(first["text"], [(90.0, FATAL)], oldest=80.0)             # the SXid rotated out: still blocking
    assert rotated["rotated"] is True and codes(rotated["outstanding"]) == [("sxid", 24007), ("xid", 79)]
    rebooted = sweep(first["text"], [], boot=OTHER_BOOT)
    assert rebooted["rebooted"] is True and rebooted["outstanding"] == [] and rebooted["cursor"]["events"] == []


def test_keep_follows_the_policy():
    blocked = advance(None, BOOT, [[70.0, ROW]], keep=lambda e: e["type"] == "xid")
    assert codes(blocked["cursor"]["events"]) == [("xid", 63)]


def test_an_unknown_boot_id_is_taken_as_the_cursors_with_a_warning():
    first = sweep(None, [(62.0, FATAL)])
    result = advance(first["text"], None, [[62.0, FATAL]])
    assert result["rebooted"] is False and result["new"] == [] and "boot id could not be read" in result["warnings"][0]


LINES = st.lists(st.tuples(st.integers(min_value=0, max_value=5), st.sampled_from(
    [FATAL, APP, ROW, SXID, SXID_DETAIL, SXID_FATAL, SXID_FATAL_DATA])), max_size=12)


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


@pytest.mark.parametrize("line, fatal, scope", [
    # the driver's word decides (NVIDIA's NVSentinel reads it so too) ...
    (SXID, False, None),
    (SXID_FATAL, True, "partition"),
    ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up", True, "partition"),
    ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20001, Non-fatal, Link 30 TX Replay Error", False, None),
    # ... and a code the Fabric Manager guide calls always fatal is fatal to the whole fabric whatever the line says
    ("nvidia-nvswitch2: SXid (PCI:0000:06:00.0): 22003, Non-fatal, Link 3 Minion Halt", True, "fabric"),
    ("nvidia-nvswitch2: SXid (PCI:0000:06:00.0): 23005, Fatal, ingress packet burst error", True, "fabric"),
])
def test_sxid_events_are_classified_by_the_line_and_nvidias_always_fatal_codes(line, fatal, scope):
    events = _xid.sxid_events(["[  12.5] " + line, line.split(", ")[0] + ", Severity 1 Engine instance 0"])
    assert [(e["fatal"], e["scope"]) for e in events] == [(fatal, scope)]           # one event, its detail left out
    assert events[0]["line"] == "[  12.5] " + line and events[0]["switch"].startswith("nvidia-nvswitch")
    assert ("reboot the node" in events[0]["recommended"]) is fatal


def test_a_line_without_its_severity_word_falls_back_on_the_guides_tables():
    assert _xid.classify_sxid(24007, None)["fatal"] is True and _xid.classify_sxid(20001, None)["fatal"] is False
    assert _xid.classify_sxid(12020, False)["scope"] == "fabric"
    assert _xid.SXID_ALWAYS_FATAL.isdisjoint(_xid.SXID_FATAL)


def test_the_untimed_reader_keeps_sxid_lines_too():
    out = "\n".join(["Linux version 6.8.0", FATAL, SXID, SXID_DETAIL, "e1000e: link up"])
    log = _xid.read_kernel_log(lambda argv: (0, out, ""))
    assert log["lines"] == [FATAL, SXID, SXID_DETAIL]


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


# ---------------------------------------------------------------- the simulator's SXid lines (_simulator_health)

def test_the_simulated_sxid_event_reads_as_the_drivers_with_its_detail_lines():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_health as sim_health
    state = {}
    line = sim_health.add_sxid(state, 2, "0000:06:00.0", 20034, True, "LTSSM Fault Up", link=30)
    assert line == "nvidia-nvswitch2: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"
    logged = state["kernel_log"]["lines"]
    assert logged[0] == line and [_xid.parse_sxid_line(text)["detail"] for text in logged] == [False, True, True]
    assert state["kernel_log"]["ts"] == [60.0, 60.0, 60.0]          # one event: its three lines at one time
    quiet = sim_health.add_sxid(state, 0, "0000:05:00.0", 22013, False)
    assert _xid.parse_sxid_line(quiet)["fatal"] is False and state["kernel_log"]["ts"][-1] == 61.5
    for args, words in [((-1, "0000:05:00.0", 1, True), "NVSwitch number"), ((0, "05:00.0", 1, True), "bus id"),
                        ((0, "0000:05:00.0", 0, True), "SXid code"), ((0, "0000:05:00.0", True, True), "SXid code")]:
        with pytest.raises(sim_health.GpuBackendError) as refused:
            sim_health.add_sxid({}, *args)
        assert words in str(refused.value)
    with pytest.raises(sim_health.GpuBackendError, match="not before the log's last line"):
        sim_health.add_sxid(state, 0, "0000:05:00.0", 22013, False, ts=1.0)
