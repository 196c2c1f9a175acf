"""_health_quarantine: the sweep's quarantine, flap damping and circuit breaker, planned without I/O."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_quarantine as q
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_marks import CONDITION_TYPE, TAINT_KEY

NOW = 1796000000.0      # 2026-11-29
HOUR = 3600.0
OURS = "gpuops.nvidia.gpu_node"
BAD = {"gpu": 0, "bus_id": "00000000:18:00.0", "kind": "row_remap_pending", "message": "GPU 0: remapped rows pending"}
UNHEALTHY = {"healthy": False, "blocking": [BAD], "warnings": []}
HEALTHY = {"healthy": True, "blocking": [], "warnings": []}
TAINT = {"key": TAINT_KEY, "value": "row_remap_pending", "effect": "NoSchedule"}


def node(name, quarantined=False, record=None, last=None, admin_cordon=False, taints=()):
    annotations = {}
    spec = {}
    if quarantined:
        spec["unschedulable"] = True
        spec["taints"] = [dict(TAINT)]
        annotations["gpuops.nvidia/cordoned-by"] = OURS
    if admin_cordon:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = spec.get("taints", []) + list(taints)
    if record is not None:
        annotations[q.RECORD] = record if isinstance(record, str) else q.record_text(*record)
    if last is not None:
        annotations[q.LAST] = q.format_time(last)
    return {"metadata": {"name": name, "resourceVersion": "7", "annotations": annotations}, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def fleet(count):
    return [node("n%02d" % i) for i in range(count)]


def test_breaker_limit_rounds_up_and_keeps_the_absolute_bound():
    assert q.breaker_limit(20, 10, 10) == 2
    assert q.breaker_limit(21, 10, 10) == 3            # 2.1 rounded up
    assert q.breaker_limit(30, 10, 10) == 3            # not 4 from 3.0000000000000004
    assert q.breaker_limit(200, 10, 5) == 5            # the absolute bound wins
    assert q.breaker_limit(20, 0, 10) == 0


def test_six_of_twenty_unhealthy_quarantines_two_and_opens_the_breaker():
    nodes = fleet(20)
    verdicts = dict(("n%02d" % i, UNHEALTHY if i < 6 else HEALTHY) for i in range(20))
    out = q.plan(nodes, verdicts, {}, NOW)
    actions = dict((n, d["action"]) for n, d in out["nodes"].items())
    assert [n for n, a in sorted(actions.items()) if a == q.QUARANTINE] == ["n00", "n01"]
    assert [n for n, a in sorted(actions.items()) if a == q.HELD] == ["n02", "n03", "n04", "n05"]
    assert out["breaker"]["open"] is True and out["breaker"]["limit"] == 2 and out["breaker"]["gpu_nodes"] == 20
    assert set(a for n, a in actions.items() if int(n[1:]) >= 6) == {q.HEALTHY}


def test_a_sweep_inside_the_window_quarantines_no_more():
    nodes = fleet(20)
    for i in (0, 1):
        nodes[i] = node("n%02d" % i, quarantined=True, record=(NOW - HOUR, 0), last=NOW - HOUR)
    verdicts = dict(("n%02d" % i, UNHEALTHY if i < 6 else HEALTHY) for i in range(20))
    out = q.plan(nodes, verdicts, {}, NOW)
    assert out["breaker"]["quarantined_in_window"] == ["n00", "n01"]
    assert out["breaker"]["held"] == ["n02", "n03", "n04", "n05"] and out["breaker"]["quarantined_now"] == []
    assert out["nodes"]["n00"]["action"] == q.KEEP and out["nodes"]["n00"]["since"] == NOW - HOUR
    # past the window, the earlier quarantines no longer count: two more may go
    later = q.plan(nodes, verdicts, {}, NOW + 25 * HOUR)
    assert later["breaker"]["quarantined_now"] == ["n02", "n03"] and later["breaker"]["held"] == ["n04", "n05"]
    # a released node's record keeps counting inside the window
    nodes[0] = node("n00", last=NOW - HOUR)
    assert q.plan(nodes, verdicts, {}, NOW)["breaker"]["quarantined_in_window"] == ["n00", "n01"]


def test_flap_damping_releases_after_the_set_number_of_healthy_sweeps():
    quarantined = node("a", quarantined=True, record=(NOW - HOUR, 0), last=NOW - HOUR)
    first = q.plan([quarantined], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]
    assert first == {"action": q.COUNT, "healthy_sweeps": 1, "since": NOW - HOUR}
    counted = node("a", quarantined=True, record=(NOW - HOUR, 1), last=NOW - HOUR)
    assert q.plan([counted], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]["action"] == q.RELEASE
    assert q.plan([counted], {"a": HEALTHY}, {"release_after": 3}, NOW)["nodes"]["a"]["action"] == q.COUNT
    # unhealthy again: the count starts again
    again = q.plan([counted], {"a": UNHEALTHY}, {}, NOW)["nodes"]["a"]
    assert again == {"action": q.KEEP, "healthy_sweeps": 0, "since": NOW - HOUR}


def test_a_node_the_gate_marked_is_adopted_and_not_counted_by_the_breaker():
    gate_marked = node("a", quarantined=True)
    out = q.plan([gate_marked] + fleet(9), {"a": UNHEALTHY}, {}, NOW)
    assert out["nodes"]["a"]["action"] == q.KEEP and out["breaker"]["quarantined_in_window"] == []
    assert q.plan([gate_marked], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]["action"] == q.COUNT


def test_a_record_without_the_taint_is_not_a_quarantine():
    released = node("a", record=(NOW - HOUR, 1))
    out = q.plan([released], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]
    assert out["action"] == q.HEALTHY
    writes = q.node_writes(released, HEALTHY, out, OURS, NOW, 2)
    assert writes["spec_patch"]["metadata"]["annotations"] == {q.RECORD: None}
    assert writes["changes"] == ["drop the stale quarantine record (the gate's marks were taken off by another run)"]


def test_an_unreadable_record_counts_no_healthy_sweep():
    broken = node("a", quarantined=True, record="{not json")
    assert q.record(broken) == {"since": None, "healthy_sweeps": 0}
    assert q.plan([broken], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]["healthy_sweeps"] == 1


def test_quarantine_writes_the_marks_and_records_in_one_patch_on_the_node_as_read():
    fresh = node("a")
    decision = q.plan([fresh], {"a": UNHEALTHY}, {}, NOW)["nodes"]["a"]
    writes = q.node_writes(fresh, UNHEALTHY, decision, OURS, NOW, 2)
    spec = writes["spec_patch"]
    assert spec["spec"]["unschedulable"] is True and spec["spec"]["taints"] == [TAINT]
    assert spec["metadata"]["resourceVersion"] == "7"
    assert spec["metadata"]["annotations"]["gpuops.nvidia/cordoned-by"] == OURS
    assert json.loads(spec["metadata"]["annotations"][q.RECORD]) == {"since": q.format_time(NOW), "healthy_sweeps": 0}
    assert spec["metadata"]["annotations"][q.LAST] == q.format_time(NOW)
    assert writes["status_patch"]["status"]["conditions"][0]["type"] == CONDITION_TYPE


def test_release_takes_the_marks_and_the_record_off_and_keeps_the_window_record():
    held = node("a", quarantined=True, record=(NOW - HOUR, 1), last=NOW - HOUR)
    decision = q.plan([held], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]
    writes = q.node_writes(held, HEALTHY, decision, OURS, NOW, 2)
    notes = writes["spec_patch"]["metadata"]["annotations"]
    assert notes[q.RECORD] is None and q.LAST not in notes and notes["gpuops.nvidia/cordoned-by"] is None
    assert writes["spec_patch"]["spec"]["unschedulable"] is False and writes["spec_patch"]["spec"]["taints"] is None


def test_an_administrators_marks_stay():
    admin = {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}
    theirs = node("a", admin_cordon=True, taints=[admin])
    decision = q.plan([theirs], {"a": UNHEALTHY}, {}, NOW)["nodes"]["a"]
    writes = q.node_writes(theirs, UNHEALTHY, decision, OURS, NOW, 2)
    assert "unschedulable" not in writes["spec_patch"]["spec"]          # already cordoned: theirs, left as is
    assert writes["spec_patch"]["spec"]["taints"][0] == admin
    assert "gpuops.nvidia/cordoned-by" not in writes["spec_patch"]["metadata"]["annotations"]


def test_a_healthy_node_that_was_never_quarantined_is_not_written():
    fresh = node("a")
    decision = q.plan([fresh], {"a": HEALTHY}, {}, NOW)["nodes"]["a"]
    writes = q.node_writes(fresh, HEALTHY, decision, OURS, NOW, 2)
    assert writes["spec_patch"] is None and writes["status_patch"] is None and writes["changes"] == []


def test_settings_are_checked_with_what_is_valid():
    errors = q.settings_errors({"release_after": 0, "breaker_percent": 101, "breaker_max_nodes": True,
                                "window_hours": "a day", "surprise": 1})
    assert len(errors) == 5
    assert "release_after must be a whole number from 1 to 100, got 0" in errors
    assert any(e.startswith("unknown setting surprise; valid: breaker_max_nodes") for e in errors)
    assert q.settings_errors(dict(q.DEFAULTS)) == []


def test_a_swept_node_missing_from_the_list_is_refused():
    with pytest.raises(ValueError, match="swept nodes not given: b"):
        q.plan([node("a")], {"a": HEALTHY, "b": HEALTHY}, {}, NOW)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(min_value=0, max_value=3),
                          st.sampled_from([None, 1.0, 30.0])), min_size=1, max_size=30),
       st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=12),
       st.integers(min_value=1, max_value=4))
def test_properties(shape, percent, max_nodes, release_after):
    """Whatever the fleet: no more new quarantines than the limit leaves, a held node only when the breaker is open,
    every unhealthy node quarantined, kept or held, a healthy one never newly quarantined, releases only after
    release_after healthy sweeps."""
    nodes, verdicts = [], {}
    for i, (quarantined, healthy, sweeps, hours_ago) in enumerate(shape):
        last = None if hours_ago is None else NOW - hours_ago * HOUR
        nodes.append(node("n%02d" % i, quarantined=quarantined, record=(NOW - HOUR, sweeps) if quarantined else None,
                          last=last))
        verdicts["n%02d" % i] = HEALTHY if healthy else UNHEALTHY
    config = {"breaker_percent": percent, "breaker_max_nodes": max_nodes, "release_after": release_after}
    out = q.plan(nodes, verdicts, config, NOW)
    breaker = out["breaker"]
    new = [n for n, d in out["nodes"].items() if d["action"] == q.QUARANTINE]
    assert len(new) <= max(0, breaker["limit"] - len(breaker["quarantined_in_window"]))
    assert breaker["open"] == bool(breaker["held"])
    for i, (quarantined, healthy, sweeps, dummy) in enumerate(shape):
        action = out["nodes"]["n%02d" % i]["action"]
        if healthy:
            assert action in ((q.COUNT, q.RELEASE) if quarantined else (q.HEALTHY,))
            if quarantined:
                assert (action == q.RELEASE) == (sweeps + 1 >= release_after)
        else:
            assert action in ((q.KEEP,) if quarantined else (q.QUARANTINE, q.HELD))
