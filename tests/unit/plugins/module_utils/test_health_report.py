"""The fleet health sweep's report (_health_report, issue 50): totals and row order, bad rows refused by row and field,
every value escaped on the page, the plot only with earlier sweeps and one point per sweep, same input same bytes,
and which report files are loaded for the plot or pruned."""
import copy
import re

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_report as hr

TIME = "2026-11-29T06:17:10Z"
BREAKER = {"open": False, "limit": 3, "window_hours": 24, "quarantined_in_window": 1, "held": []}


def sweep(time=TIME, check_mode=False, **breaker):
    return {"time": time, "check_mode": check_mode, "id": "sweep-1", "breaker": dict(BREAKER, **breaker)}


def finding(gpu=3, kind="xid_79", action="block", message="GPU has fallen off the bus"):
    return {"gpu": gpu, "bus_id": "00000000:47:00.0", "kind": kind, "message": message, "action": action}


def row(node, state="healthy", findings=(), actions=(), since=None, seconds=None, gpus=8):
    return {"node": node, "gpus": gpus, "state": state, "findings": list(findings), "actions": list(actions),
            "quarantined_since": since, "quarantine_seconds": seconds}


ROWS = [
    row("gpu-c", "quarantined", [finding(), finding(5, "row_remap_pending")], ["quarantined"], TIME, 0),
    row("gpu-a"),
    row("gpu-e", "quarantined", [finding()], ["still quarantined"], "2026-11-28T06:17:10Z", 86400),
    row("gpu-b", "released", [], ["released after 2 healthy sweeps"]),
    row("gpu-d", "held_by_breaker", [finding(1, "ecc_volatile", "warn")], ["held: breaker open"]),
    row("gpu-f", "unresponsive", [], [], gpus=0),
]


def test_totals_and_rows_sorted_by_node():
    doc = hr.report(sweep(), ROWS)
    assert [r["node"] for r in doc["nodes"]] == ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f"]
    assert doc["totals"] == {"nodes": 6, "healthy": 1, "unhealthy": 0, "quarantined": 2, "newly_quarantined": 1, "released": 1,
                             "held_by_breaker": 1, "unresponsive": 1, "findings": 4}
    assert doc["version"] == 1 and doc["sweep"]["breaker"]["held"] == []


def test_times_are_written_in_utc_and_omitted_keys_get_their_defaults():
    doc = hr.report(sweep("2026-11-29T08:17:10.5+02:00"),
                    [{"node": "n", "gpus": 1, "state": "quarantined", "quarantined_since": "2026-11-29T01:00:00-05:00"}])
    assert doc["sweep"]["time"] == TIME
    assert doc["nodes"] == [{"node": "n", "gpus": 1, "state": "quarantined", "findings": [], "actions": [],
                             "quarantined_since": TIME.replace("06:17:10", "06:00:00"), "quarantine_seconds": None}]


@pytest.mark.parametrize("rows,words", [
    ([row("gpu-a", "sick")], "rows[0] (node gpu-a).state: 'sick' is not one of healthy, unhealthy, quarantined, released, "
                             "held_by_breaker, unresponsive"),
    ([row("gpu-a"), row("gpu-b", gpus=-1)], "rows[1] (node gpu-b).gpus: must be the node's GPU count"),
    ([row("gpu-a", findings=[finding(action="reset")])],
     "rows[0] (node gpu-a).findings[0].action: 'reset' is not one of block, warn"),
    ([row("gpu-a", findings=[finding(gpu="3")])], "rows[0] (node gpu-a).findings[0].gpu: must be a GPU index"),
    ([row("gpu-a", since="yesterday")], "rows[0] (node gpu-a).quarantined_since: 'yesterday' is not an RFC 3339"),
    ([row("gpu-a", seconds=1.5)], "rows[0] (node gpu-a).quarantine_seconds: must be an integer"),
    ([dict(row("gpu-a"), nodes="x")], "rows[0] (node gpu-a): unknown key(s) nodes (valid: node, gpus, state"),
    ([row(""), 7], "rows[0].node: must be a non-empty node name"),
    ([row("gpu-a"), row("gpu-a")], "rows[1] (node gpu-a): the node is also rows[0]; one row per node"),
    ("gpu-a", "rows: must be a list of node rows"),
])
def test_a_bad_row_is_refused_naming_the_row_and_field(rows, words):
    with pytest.raises(hr.ReportError) as err:
        hr.report(sweep(), rows)
    assert words in str(err.value), str(err.value)


@pytest.mark.parametrize("bad,words", [
    (dict(sweep(), time="2026-11-29 06:17:10"), "sweep.time: '2026-11-29 06:17:10' is not an RFC 3339 time"),
    (dict(sweep(), time="2026-02-30T00:00:00Z"), "sweep.time: '2026-02-30T00:00:00Z' is not a valid time"),
    (dict(sweep(), check_mode="yes"), "sweep.check_mode: must be true or false"),
    (dict(sweep(), id=""), "sweep.id: must be a non-empty string"),
    (sweep(limit=-1), "sweep.breaker.limit: must be an integer, 0 or more, not -1"),
    (sweep(window_hours=-1), "sweep.breaker.window_hours: must be a number of hours, 0 or more"),
    (sweep(held="gpu-a"), "sweep.breaker.held: must be a list of node names"),
    ([], "sweep: must be a dict"),
])
def test_a_bad_sweep_is_refused_naming_the_field(bad, words):
    with pytest.raises(hr.ReportError) as err:
        hr.report(bad, ROWS)
    assert words in str(err.value), str(err.value)


def test_every_error_is_reported_at_once():
    with pytest.raises(hr.ReportError) as err:
        hr.report(dict(sweep(), id=None), [row("a", "sick"), row("b", gpus=None)])
    assert len(err.value.errors) == 3


def test_the_page_escapes_every_value():
    hostile = row("<script>alert(1)</script>", "quarantined",
                  [finding(message='"><img src=x onerror=alert(2)>', kind="<b>k</b>")], ["<i>quarantined</i>"])
    page = hr.render_html(hr.report(dict(sweep(), id="<svg onload=x>"), [hostile]), [])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page and "&lt;b&gt;k&lt;/b&gt;" in page
    assert "&lt;i&gt;quarantined&lt;/i&gt;" in page and "&lt;svg onload=x&gt;" in page
    assert "<script" not in page and "<img" not in page and "<svg" not in page


def test_the_page_says_check_mode_the_breaker_and_the_time_in_quarantine():
    doc = hr.report(sweep(check_mode=True, open=True, held=["gpu-x"]), ROWS)
    page = hr.render_html(doc, [])
    assert "check mode: nothing was marked" in page
    assert "breaker OPEN: 1 quarantined in the last 24 h (limit 3); held back: gpu-x" in page
    assert "<td>24 h 0 min</td>" in page and "<td>0 min</td>" in page
    applied = hr.render_html(hr.report(sweep(), ROWS), [])
    assert "check mode" not in applied and "breaker closed" in applied
    assert "http" not in applied.replace('xmlns="http://www.w3.org/2000/svg"', "") and "<script" not in applied


@pytest.mark.parametrize("seconds,text", [(None, ""), (0, "0 min"), (59, "0 min"), (720, "12 min"),
                                          (11520, "3 h 12 min"), (90061, "25 h 1 min")])
def test_duration(seconds, text):
    assert hr.duration(seconds) == text


def _earlier(time, findings, quarantined):
    doc = hr.report(sweep(time), [row("n%d" % i, "quarantined", [finding()]) for i in range(quarantined)]
                    + [row("h", findings=[finding(kind="k%d" % i, action="warn") for i in range(findings - quarantined)])])
    assert (doc["totals"]["findings"], doc["totals"]["quarantined"]) == (findings, quarantined)
    return doc


def _polylines(page):
    return [p.split() for p in re.findall(r'<polyline [^>]*points="([^"]*)"', page)]


def ys(line):
    """The y of each point of a polyline (SVG's y grows downwards: a higher count is a smaller y)."""
    return [float(p.split(",")[1]) for p in line]


def test_no_plot_without_an_earlier_sweep():
    doc = hr.report(sweep(), ROWS)
    assert "<svg" not in hr.render_html(doc, [])
    # a report of this very sweep, a later one and a file that is no report are not earlier sweeps
    assert "<svg" not in hr.render_html(doc, [doc, _earlier("2026-11-30T00:00:00Z", 1, 0), {"x": 1}])


def test_the_plot_has_one_point_per_sweep_and_both_series():
    history = [_earlier("2026-11-27T06:00:00Z", 2, 1), _earlier("2026-11-28T06:00:00Z", 6, 3), {"sweep": None}]
    page = hr.render_html(hr.report(sweep(), ROWS), history)
    assert page.count("<svg") == 1
    findings, quarantined = _polylines(page)
    assert len(findings) == len(quarantined) == 3            # two earlier sweeps and this one
    assert ys(findings)[1] < ys(findings)[2] < ys(findings)[0]            # 6 findings, then 4 now, then 2 (oldest)
    assert ys(quarantined)[1] < ys(quarantined)[2] < ys(quarantined)[0]   # 3 quarantined, then 2 now, then 1 (oldest)
    xs = [float(p.split(",")[0]) for p in findings]
    assert xs == sorted(xs) and xs[0] < xs[-1]
    for label in ("findings", "quarantined nodes", "sweep time (UTC)", ">count<"):
        assert label in page


def test_same_input_same_bytes():
    history = [_earlier("2026-11-28T06:00:00Z", 2, 1)]
    first = hr.render_html(hr.report(sweep(), ROWS), history)
    rows = copy.deepcopy(list(reversed(ROWS)))
    assert hr.render_html(hr.report(sweep(), rows), copy.deepcopy(history)) == first
    assert hr.render_html(hr.report(sweep(), rows), copy.deepcopy(history) + [{"broken": 1}]) == first
    assert hr.render_html(hr.report(sweep(check_mode=True), rows), history) != first


NAMES = ["health-report-20261127T060000Z.json", "health-report-20261127T060000Z.html",
         "health-report-20261129T060000Z.json", "health-report-20261128T060000Z.json",
         "health-report-20261128T060000Z.html", "health-report-latest.json", "health-report-latest.html",
         ".health-report-20261126T060000Z.json.abc.tmp", "health-report-20261126T060000Z.json.bak", "notes.txt"]


def test_history_files_are_the_last_n_by_their_stamped_names():
    assert hr.history_files(NAMES) == ["health-report-20261127T060000Z.json", "health-report-20261128T060000Z.json",
                                       "health-report-20261129T060000Z.json"]
    assert hr.history_files(NAMES, 2, before="20261129T060000Z") == [
        "health-report-20261127T060000Z.json", "health-report-20261128T060000Z.json"]
    assert hr.history_files(NAMES, 1) == ["health-report-20261129T060000Z.json"]
    assert hr.history_files(NAMES, 0) == []


def test_prune_files_removes_the_oldest_reports_beyond_keep():
    assert hr.prune_files(NAMES, 2, "20261130T060000Z") == [
        "health-report-20261127T060000Z.html", "health-report-20261127T060000Z.json",
        "health-report-20261128T060000Z.html", "health-report-20261128T060000Z.json"]
    assert hr.prune_files(NAMES, 3, "20261129T060000Z") == []
    assert hr.prune_files(NAMES, 1, "20261127T060000Z") == [         # the current report is never removed
        "health-report-20261128T060000Z.html", "health-report-20261128T060000Z.json",
        "health-report-20261129T060000Z.json"]


def test_stamps():
    assert hr.stamp("2026-11-29T08:17:10+02:00") == "20261129T061710Z"
    assert hr.report_files(TIME) == ("health-report-20261129T061710Z.json", "health-report-20261129T061710Z.html")
    assert hr.stamp_of("health-report-20261129T061710Z.html") == "20261129T061710Z"
    assert hr.stamp_of("health-report-latest.json") is None


def test_the_quarantine_breaker_as_health_quarantine_returns_it_and_no_cluster():
    """health_quarantine's breaker (the nodes in the window by name, and what it also says) is taken as it comes; a
    sweep without a cluster has no breaker and rows in state unhealthy."""
    given = {"open": True, "limit": 2, "window_hours": 24.0, "quarantined_in_window": ["gpu-a", "gpu-b"],
             "held": ["gpu-c"], "gpu_nodes": 20, "percent": 10.0, "max_nodes": 10, "quarantined_now": []}
    doc = hr.report(sweep(**given), [row("gpu-c", "held_by_breaker")])
    assert doc["sweep"]["breaker"]["quarantined_in_window"] == 2 and doc["sweep"]["breaker"]["gpu_nodes"] == 20
    assert "breaker OPEN: 2 quarantined in the last 24 h (limit 2 of 20 GPU nodes); held back: gpu-c" in \
        hr.render_html(doc, [])
    alone = hr.report(dict(sweep(), breaker=None), [row("gpu-a", "unhealthy")])
    assert alone["sweep"]["breaker"] is None and alone["totals"]["unhealthy"] == 1
    assert "no cluster: the findings are reported, no node was marked" in hr.render_html(alone, [])
    with pytest.raises(hr.ReportError, match="sweep.breaker: unknown key"):
        hr.report(sweep(surprise=1), [])


def test_a_sweep_id_that_is_not_its_time_names_its_files():
    """Two job slices sweeping in the same second keep a report each: the AWX job id is in the file name, made safe."""
    assert hr.report_files(TIME, "6101") == ("health-report-20261129T061710Z-6101.json",
                                             "health-report-20261129T061710Z-6101.html")
    assert hr.report_files(TIME, TIME) == hr.report_files(TIME)
    assert hr.key(TIME, "job 7/../x") == "20261129T061710Z-job_7____x"
    assert hr.stamp_of("health-report-20261129T061710Z-6101.json") == "20261129T061710Z-6101"
    names = ["health-report-20261129T061710Z-6102.json", "health-report-20261129T061710Z-6101.json",
             "health-report-20261128T061710Z.json"]
    assert hr.history_files(names) == ["health-report-20261128T061710Z.json", "health-report-20261129T061710Z-6101.json",
                                       "health-report-20261129T061710Z-6102.json"]
