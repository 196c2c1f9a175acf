"""gpu_health_read on simulated GPUs, in-process (tests/support/modrun.run_here): check mode reports the cursor's change
and writes nothing, apply writes it, a second apply changes nothing; Xid lines added between two runs are new in the
second only, a fatal one (a fatal NVSwitch SXid too) stays outstanding for the boot (after the log rotated too) and a
reboot clears it; a hung GPU is a blocking finding within the deadline; a corrupt cursor is a warning; bad input
changes nothing."""
import json
import os
import stat

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.support.modrun import run_here

SHAPE = "hgx-h200"
MODULE = "gpuops.nvidia.gpu_health_read"


@pytest.fixture
def sim(tmp_path):
    backend = SimulatedBackend(str(tmp_path / "state.json"), shape=SHAPE)
    backend.read_all()
    return backend


@pytest.fixture
def cursor(tmp_path):
    return str(tmp_path / "var" / "lib" / "gpuops" / "health-cursor.json")


def sweep(sim, cursor, check=False, diff=False, **args):
    env = {"GPUOPS_SIMULATED_GPUS": sim.path, "GPUOPS_SIMULATED_MACHINE": SHAPE}
    result = run_here(MODULE, dict(dict(cursor_path=cursor, deadline=5), **args), env=env, check=check, diff=diff)
    assert not result.get("failed"), result
    return result


def lines(events):
    return [e["line"] for e in events]


def test_check_mode_reports_apply_writes_and_a_second_apply_changes_nothing(sim, cursor):
    line = sim.add_xid(2, 13, "Graphics SM Warp Exception", pid=4242)
    check = sweep(sim, cursor, check=True, diff=True)
    assert check["changed"] is True and not os.path.exists(cursor) and not os.path.exists(os.path.dirname(cursor))
    assert check["diff"]["before"] == "" and json.loads(check["diff"]["after"])["last"]["line"] == line
    assert lines(check["xid"]["new"]) == [line] and check["gpus"] == 8 and check["deadline"] == 5.0
    assert check["health"]["healthy"] is True and [w["kind"] for w in check["health"]["gate"]["warnings"]] == [
        "xid_application"]

    applied = sweep(sim, cursor)
    assert applied["changed"] is True and lines(applied["xid"]["new"]) == [line]
    assert stat.S_IMODE(os.stat(cursor).st_mode) == 0o644
    with open(cursor) as handle:
        written = json.load(handle)
    assert written["version"] == 1 and written["last"]["line"] == line and written["events"] == []
    assert written["boot_id"] == sim.read_kernel_log_timed()["boot_id"]

    again = sweep(sim, cursor)
    assert again["changed"] is False and again["xid"]["new"] == [] and again["xid"]["outstanding"] == []
    assert again["health"]["warnings"] == []             # the application's Xid was reported once, by the first sweep
    again_check = sweep(sim, cursor, check=True, diff=True)
    assert again_check["changed"] is False and "diff" not in again_check


def test_new_lines_are_new_in_the_next_run_only_and_a_fatal_one_stays_until_a_reboot(sim, cursor):
    sweep(sim, cursor)
    fatal = sim.add_xid(5, 79, "GPU has fallen off the bus.")
    second = sweep(sim, cursor)
    assert second["changed"] is True and lines(second["xid"]["new"]) == [fatal]
    assert second["health"]["healthy"] is False
    assert [(b["gpu"], b["kind"]) for b in second["health"]["gate"]["blocking"]] == [(5, "xid_fatal")]

    third = sweep(sim, cursor)
    assert third["changed"] is False and third["xid"]["new"] == [] and lines(third["xid"]["outstanding"]) == [fatal]
    assert [(b["gpu"], b["kind"]) for b in third["health"]["gate"]["blocking"]] == [(5, "xid_fatal")]

    other = sim.add_xid(1, 63, "Row Remapper: New row marked for remapping, reset gpu to activate.")
    sim.rotate_kernel_log(1)                              # the 79 is no longer in the log
    rotated = sweep(sim, cursor)
    assert rotated["xid"]["rotated"] is True and any("rotated" in w for w in rotated["warnings"])
    assert lines(rotated["xid"]["new"]) == [other] and lines(rotated["xid"]["outstanding"]) == [fatal, other]
    assert [b["kind"] for b in rotated["health"]["gate"]["blocking"]] == ["xid_fatal"]      # still blocking

    # issue 50: NVSwitch SXids - a non-fatal one is reported and makes no finding; a fatal one is a node finding that
    # names the switch and the code and stays, like the fatal Xid, until the reboot
    quiet = sim.add_sxid(3, "0000:04:00.0", 22013, False, "Minion Link DLREQ interrupt", link=44)
    switch = sim.add_sxid(1, "0000:84:00.0", 24007, True, "sourcetrack timeout error", link=29)
    with_sxid = sweep(sim, cursor)
    assert lines(with_sxid["xid"]["new"]) == [quiet, switch]                          # their detail lines are no events
    assert [(e["type"], e["code"], e["fatal"]) for e in with_sxid["xid"]["new"]] == [
        ("sxid", 22013, False), ("sxid", 24007, True)]
    blocking = with_sxid["health"]["gate"]["blocking"]
    assert [(b["gpu"], b["kind"]) for b in blocking] == [(5, "xid_fatal"), (None, "sxid_fatal")]
    assert blocking[1]["bus_id"] is None                             # a node finding: the NVSwitch's is no GPU's bus
    assert "nvidia-nvswitch1 (PCI:0000:84:00.0) SXid 24007" in blocking[1]["message"]
    assert not [w for w in with_sxid["health"]["warnings"] if "22013" in w]
    kept = sweep(sim, cursor)
    assert kept["changed"] is False and lines(kept["xid"]["outstanding"]) == [fatal, switch]
    assert [b["kind"] for b in kept["health"]["gate"]["blocking"]] == ["xid_fatal", "sxid_fatal"]

    sim.reboot()
    after = sweep(sim, cursor)
    assert after["changed"] is True and after["xid"]["rebooted"] is True
    assert after["xid"]["outstanding"] == [] and after["health"]["healthy"] is True
    assert sweep(sim, cursor)["changed"] is False


def test_a_hung_gpu_blocks_within_the_deadline_and_the_others_are_read(sim, cursor):
    sim.inject_health(6, "hang")
    result = sweep(sim, cursor, deadline=1)
    bus = sim.read_all()["gpus"][6]["pci_bus_id"]
    assert result["unresponsive"] == [{"gpu": 6, "bus_id": bus, "seconds": 1.0}] and result["gpus"] == 7
    blocking = result["health"]["gate"]["blocking"]
    assert [(b["gpu"], b["bus_id"], b["kind"]) for b in blocking] == [(6, bus, "gpu_unresponsive")]
    assert "the node a reboot" in blocking[0]["message"] and "1 s" in blocking[0]["message"]


def test_the_policy_decides_which_xid_events_stay_outstanding(sim, cursor):
    line = sim.add_xid(3, 63, "Row Remapper: New row marked for remapping, reset gpu to activate.")
    first = sweep(sim, cursor, policy={"xid_gpu": "block"})
    assert first["health"]["healthy"] is False
    again = sweep(sim, cursor, policy={"xid_gpu": "block"})
    assert lines(again["xid"]["outstanding"]) == [line] and again["health"]["healthy"] is False


@pytest.mark.parametrize("content", ["", "{broken", json.dumps({"version": 7})])
def test_a_cursor_file_that_is_not_a_cursor_is_a_warning_and_rewritten(sim, cursor, content):
    os.makedirs(os.path.dirname(cursor))
    with open(cursor, "w") as handle:
        handle.write(content)
    line = sim.add_xid(0, 79, "GPU has fallen off the bus.")
    result = sweep(sim, cursor)
    assert result["changed"] is True and lines(result["xid"]["new"]) == [line]
    assert any("treated as no cursor" in w for w in result["warnings"])
    with open(cursor) as handle:
        assert json.load(handle)["version"] == 1


def test_without_the_kernel_log_no_cursor_is_read_or_written(sim, cursor):
    sim.add_xid(0, 79, "GPU has fallen off the bus.")
    result = sweep(sim, cursor, kernel_log=False)
    assert result["changed"] is False and not os.path.exists(cursor) and result["xid"]["new"] == []
    assert [w["kind"] for w in result["health"]["gate"]["warnings"]] == ["kernel_log_unreadable"]


@pytest.mark.parametrize("args,words", [
    ({"policy": {"xid_fatl": "block"}}, "unknown health finding kind 'xid_fatl'"),
    ({"policy": {"gpu_unresponsive": "reboot"}}, "is not one of block, warn, ignore"),
    ({"deadline": 0}, "deadline: 0.0 is not a number of seconds more than 0"),
    ({"deadline": -3}, "deadline: -3.0 is not a number of seconds more than 0"),
    ({"cursor_path": "health-cursor.json"}, "cursor_path: 'health-cursor.json' is not an absolute path"),
])
def test_bad_input_changes_nothing(sim, cursor, args, words):
    env = {"GPUOPS_SIMULATED_GPUS": sim.path, "GPUOPS_SIMULATED_MACHINE": SHAPE}
    result = run_here(MODULE, dict(dict(cursor_path=cursor), **args), env=env)
    assert result["failed"] is True and result["changed"] is False, result
    assert result["msg"].startswith("invalid input, nothing changed: ") and words in result["msg"], result["msg"]
    assert not os.path.exists(cursor)


def test_a_cursor_path_that_is_a_directory_fails_saying_so(sim, cursor):
    os.makedirs(cursor)
    env = {"GPUOPS_SIMULATED_GPUS": sim.path, "GPUOPS_SIMULATED_MACHINE": SHAPE}
    result = run_here(MODULE, {"cursor_path": cursor}, env=env)
    assert result["failed"] is True and result["changed"] is False and "cursor_path" in result["msg"], result
