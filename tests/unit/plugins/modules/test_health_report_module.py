"""health_report in-process (run_here): check mode returns the report and writes nothing, apply writes the four files
atomically and reports changed, again with the same sweep and rows changes nothing, older reports are pruned to keep
and drawn in the plot, and bad input is refused with nothing written."""
import json
import os

import pytest

from tests.support.modrun import run_here

TIME = "2026-11-29T06:17:10Z"
STAMP = "20261129T061710Z"
# (the id a sweep outside AWX gives: its time, so the files are named by the time alone)
SWEEP = {"time": TIME, "check_mode": False, "id": TIME,
         "breaker": {"open": False, "limit": 3, "window_hours": 24, "quarantined_in_window": 1, "held": []}}
ROWS = [{"node": "gpu-b", "gpus": 8, "state": "healthy"},
        {"node": "gpu-a", "gpus": 8, "state": "quarantined", "actions": ["quarantined"],
         "findings": [{"gpu": 3, "bus_id": "00000000:47:00.0", "kind": "xid_79", "message": "fell off the bus",
                       "action": "block"}],
         "quarantined_since": TIME, "quarantine_seconds": 0}]
FILES = sorted(["health-report-%s.json" % STAMP, "health-report-%s.html" % STAMP,
                "health-report-latest.json", "health-report-latest.html"])


def args(dest, **more):
    return dict({"dest": str(dest), "sweep": SWEEP, "rows": ROWS}, **more)


def snapshot(directory):
    out = {}
    for root, _dirs, files in os.walk(str(directory)):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, str(directory))] = (handle.read(), os.stat(path).st_mtime_ns)
    return out


def test_check_mode_returns_the_report_and_writes_nothing(tmp_path):
    dest = tmp_path / "reports"
    res = run_here("gpuops.nvidia.health_report", args(dest), check=True, diff=True)
    assert res["changed"] is True and not res.get("failed"), res
    assert [n["node"] for n in res["report"]["nodes"]] == ["gpu-a", "gpu-b"]
    assert res["report"]["totals"]["newly_quarantined"] == 1
    assert res["json_path"] == str(dest / ("health-report-%s.json" % STAMP))
    assert res["html_path"] == str(dest / ("health-report-%s.html" % STAMP))
    assert res["written"] == FILES and res["removed"] == []
    assert res["diff"]["before"] == "" and json.loads(res["diff"]["after"]) == res["report"]
    assert not dest.exists()


def test_apply_then_again(tmp_path):
    dest = tmp_path / "reports"
    applied = run_here("gpuops.nvidia.health_report", args(dest))
    assert applied["changed"] is True and not applied.get("failed"), applied
    # no temporary file left behind; the directory's lock file stays (it is the lock, not a report)
    assert sorted(os.listdir(str(dest))) == sorted(FILES + [".health-report.lock"])
    with open(applied["json_path"]) as handle:
        assert json.load(handle) == applied["report"]
    latest = snapshot(dest)
    assert latest["health-report-latest.html"][0] == latest["health-report-%s.html" % STAMP][0]
    assert b"gpu-a" in latest["health-report-latest.html"][0]
    assert oct(os.stat(applied["html_path"]).st_mode & 0o777) != oct(0o600)   # readable, not mkstemp's 0600

    again = run_here("gpuops.nvidia.health_report", args(dest), diff=True)
    assert again["changed"] is False and again["written"] == [] and again["removed"] == [], again
    assert again["diff"]["before"] == again["diff"]["after"]
    assert snapshot(dest) == latest                               # same bytes, not even rewritten
    check = run_here("gpuops.nvidia.health_report", args(dest), check=True)
    assert check["changed"] is False

    changed_rows = [dict(ROWS[0], state="unresponsive"), ROWS[1]]
    other = run_here("gpuops.nvidia.health_report", args(dest, rows=changed_rows))
    assert other["changed"] is True and other["written"] == FILES and other["report"]["totals"]["unresponsive"] == 1


def _earlier(dest, day, quarantined):
    time = "2026-11-%02dT06:00:00Z" % day
    rows = [{"node": "n%d" % i, "gpus": 8, "state": "quarantined"} for i in range(quarantined)]
    res = run_here("gpuops.nvidia.health_report", args(dest, sweep=dict(SWEEP, time=time, id=time), rows=rows))
    assert res["changed"] is True and not res.get("failed"), res
    return "health-report-202611%02dT060000Z" % day


def test_earlier_reports_are_plotted_and_pruned_to_keep(tmp_path):
    dest = tmp_path / "reports"
    dest.mkdir()
    (dest / "notes.txt").write_text("not a report")
    (dest / "health-report-20261101T000000Z.json.bak").write_text("not one either")
    earlier = [_earlier(dest, day, day - 20) for day in (21, 22, 23, 24)]
    first = run_here("gpuops.nvidia.health_report", args(dest))
    assert first["written"] == FILES and first["removed"] == []
    with open(first["html_path"]) as handle:
        page = handle.read()
    assert page.count("<polyline") == 2
    points = page.split('points="')[1].split('"')[0].split()
    assert len(points) == 5                                       # four earlier sweeps and this one

    pruned = run_here("gpuops.nvidia.health_report", args(dest, keep=3, history=1))
    assert pruned["changed"] is True
    assert pruned["removed"] == sorted(n + ext for n in earlier[:2] for ext in (".html", ".json"))
    names = sorted(n for n in os.listdir(str(dest)) if n != ".health-report.lock")
    assert names == sorted(["notes.txt", "health-report-20261101T000000Z.json.bak"] + FILES
                           + [n + ext for n in earlier[2:] for ext in (".json", ".html")])
    with open(pruned["html_path"]) as handle:
        assert len(handle.read().split('points="')[1].split('"')[0].split()) == 2   # history=1: one earlier sweep

    again = run_here("gpuops.nvidia.health_report", args(dest, keep=3, history=1))
    assert again["changed"] is False and sorted(n for n in os.listdir(str(dest)) if n != ".health-report.lock") == names


def test_an_older_sweep_leaves_latest_to_the_newest(tmp_path):
    dest = tmp_path / "reports"
    run_here("gpuops.nvidia.health_report", args(dest))
    old = run_here("gpuops.nvidia.health_report", args(dest, sweep=dict(SWEEP, time="2026-11-20T00:00:00Z", id="2026-11-20T00:00:00Z")))
    assert old["written"] == ["health-report-20261120T000000Z.html", "health-report-20261120T000000Z.json"]
    assert any("newer than this sweep" in w for w in old["warnings"])
    with open(str(dest / "health-report-latest.json")) as handle:
        assert json.load(handle)["sweep"]["time"] == TIME


def test_an_unreadable_earlier_report_is_left_out_with_a_warning(tmp_path):
    dest = tmp_path / "reports"
    dest.mkdir()
    (dest / "health-report-20261120T000000Z.json").write_text("{not json")
    res = run_here("gpuops.nvidia.health_report", args(dest))
    assert not res.get("failed") and any("is left out of the plot" in w for w in res["warnings"]), res
    with open(res["html_path"]) as handle:
        assert "<svg" not in handle.read()


@pytest.mark.parametrize("more,words", [
    ({"rows": [dict(ROWS[0], state="broken")]},
     "rows[0] (node gpu-b).state: 'broken' is not one of healthy, unhealthy, quarantined, released, held_by_breaker, "
     "unresponsive"),
    ({"sweep": dict(SWEEP, time="now")}, "sweep.time: 'now' is not an RFC 3339 time"),
    ({"keep": 0}, "keep: 0 is not a number of reports to keep (1 to 100000)"),
    ({"history": -1}, "history: -1 is not a number of earlier reports (0 to 10000)"),
])
def test_bad_input_writes_nothing(tmp_path, more, words):
    dest = tmp_path / "reports"
    res = run_here("gpuops.nvidia.health_report", args(dest, **more))
    assert res.get("failed") and res["changed"] is False and words in res["msg"], res
    assert res["msg"].startswith("invalid input, nothing changed: ")
    assert not dest.exists()


def test_a_dest_that_is_a_file_is_refused(tmp_path):
    dest = tmp_path / "reports"
    dest.write_text("x")
    res = run_here("gpuops.nvidia.health_report", args(dest))
    assert res.get("failed") and "dest: %s exists and is not a directory" % dest in res["msg"], res
    assert dest.read_text() == "x" and sorted(os.listdir(str(tmp_path))) == ["reports"]


def test_two_slices_in_the_same_second_keep_both_reports_and_latest_is_the_later(tmp_path):
    dest = tmp_path / "reports"
    first = run_here("gpuops.nvidia.health_report", dict(dest=str(dest), sweep=dict(SWEEP, id="6101"), rows=ROWS))
    second = run_here("gpuops.nvidia.health_report", dict(dest=str(dest), sweep=dict(SWEEP, id="6102"), rows=ROWS))
    assert not first.get("failed") and not second.get("failed"), (first, second)
    assert first["json_path"] != second["json_path"]
    assert os.path.exists(first["json_path"]) and os.path.exists(second["json_path"])
    with open(str(dest / "health-report-latest.json")) as handle:
        assert json.load(handle)["sweep"]["id"] == "6102"
