"""_health_remediation: the sweep's remediation with consent, its record and its cap, planned without I/O."""
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_remediation as r
from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_quarantine import format_time

NOW = 1796000000.0      # 2026-11-29
HOUR = 3600.0
REMAP = {"gpu": 2, "bus_id": "00000000:19:00.0", "kind": "row_remap_pending", "message": "GPU 2: remapped rows pending"}
PAGES = {"gpu": 5, "bus_id": "00000000:47:00.0", "kind": "retired_pages_pending", "message": "GPU 5: pages pending"}
LOST = {"gpu": 1, "bus_id": "00000000:18:00.0", "kind": "gpu_lost", "message": "GPU 1: lost"}
XID = {"gpu": 3, "bus_id": None, "kind": "xid_fatal", "message": "GPU 3: Xid 79 - NVIDIA: RESTART_BM"}
# a fatal NVSwitch SXid is a node finding (no GPU, no GPU bus id)
SXID = {"gpu": None, "bus_id": None, "kind": "sxid_fatal",
        "message": "node: a fatal NVSwitch SXid since boot (nvidia-nvswitch1 (PCI:0000:84:00.0) SXid 24007: ...)"}
FAILED = {"gpu": 4, "bus_id": None, "kind": "row_remap_failure", "message": "GPU 4: row remapping failed"}
SETTINGS = {"max_attempts": 2, "window_hours": 24}


def node(attempts=(), last=None, condition=None, raw=None):
    annotations = {}
    if raw is not None:
        annotations[r.RECORD] = raw
    elif attempts or last:
        annotations[r.RECORD] = r.record_text(list(attempts), last)
    conditions = [{"type": "Ready", "status": "True"}]
    if condition:
        conditions.append(dict({"type": r.CONDITION_TYPE, "status": "False", "reason": r.NEEDS_OPERATOR,
                                "message": "m"}, **condition))
    return {"metadata": {"name": "n", "resourceVersion": "7", "annotations": annotations},
            "status": {"conditions": conditions}}


def decide(action="quarantine", consent="reset", blocking=(REMAP,), at=None, now=NOW, **kw):
    return r.decide(action, consent, list(blocking), at if at is not None else node(), dict(SETTINGS, **kw), now)


def test_no_consent_does_nothing():
    out = decide(consent="none", blocking=[REMAP, LOST])
    assert out["action"] == r.NONE and out["record"] is None and out["condition"] is None
    assert "no consent" in out["reason"]
    assert r.node_writes(node(), out, NOW)["changes"] == []


def test_reset_consent_resets_exactly_the_gpus_a_reset_clears():
    out = decide(blocking=[REMAP, PAGES, dict(REMAP, message="again")])
    assert out["action"] == r.RESET and out["gpus"] == [2, 5] and out["attempts"] == 1
    writes = r.node_writes(node(), out, NOW)
    record = json.loads(writes["spec_patch"]["metadata"]["annotations"][r.RECORD])
    assert record == {"attempts": [format_time(NOW)], "last": {"action": "reset", "at": format_time(NOW),
                                                               "gpus": [2, 5]}}
    assert writes["spec_patch"]["metadata"]["resourceVersion"] == "7" and writes["status_patch"] is None
    # reboot consent allows the reset first
    assert decide(consent="reboot")["action"] == r.RESET


def test_a_reboot_needing_finding_with_only_reset_consent_is_left_with_a_reason():
    for finding in (LOST, XID, SXID):
        out = decide(blocking=[REMAP, finding])
        assert out["action"] == r.NONE and out["record"] is None and out["gpus"] == []
        assert out["reason"] == "%s needs a node reboot, and gpu_node_health_remediation is reset (reboot allows " \
                                "it)" % finding["kind"]
        rebooted = decide(consent="reboot", blocking=[REMAP, finding])
        assert rebooted["action"] == r.REBOOT and rebooted["gpus"] == [] and rebooted["record"]["last"]["action"] == \
            "reboot"


def test_a_finding_no_rung_clears_needs_an_operator_and_nothing_is_tried():
    out = decide(consent="reboot", blocking=[REMAP, FAILED])
    assert out["action"] == r.NONE and out["record"] is None
    assert out["reason"] == "no remediation clears row_remap_failure: an operator must act"


def test_only_a_quarantined_node_is_remediated():
    for action in ("held", "count", "healthy", "release"):
        out = decide(action=action, consent="reboot", blocking=[REMAP, LOST])
        assert out["action"] == r.NONE and out["record"] is None, action
    assert "circuit breaker" in decide(action="held")["reason"]
    assert decide(action="keep")["action"] == r.RESET


def test_the_cap_sets_needs_operator_and_records_nothing_more():
    at = node(attempts=[NOW - 3 * HOUR, NOW - HOUR], last={"action": "reset", "at": NOW - HOUR, "gpus": [2]})
    out = decide(at=at, action="keep")
    assert out["action"] == r.OPERATOR and out["record"] is None and out["condition"] == "set"
    assert out["attempts"] == 2 and out["reason"] == "the cap: 2 attempt(s) in 24 h, at most 2"
    writes = r.node_writes(at, out, NOW)
    assert writes["spec_patch"] is None
    written = writes["status_patch"]["status"]["conditions"][0]
    assert (written["type"], written["status"], written["reason"]) == (r.CONDITION_TYPE, "False", r.NEEDS_OPERATOR)
    assert written["message"].startswith("2 remediation attempt(s) in 24 h (at %s, %s; the last a reset) did not "
                                         "clear: row_remap_pending on GPU 2; the cap is 2" % (
                                             format_time(NOW - 3 * HOUR), format_time(NOW - HOUR)))
    # the same condition again: not written again
    again = dict(at, status={"conditions": [written]})
    assert decide(at=again, action="keep")["condition"] is None


def test_attempts_outside_the_window_are_not_counted():
    at = node(attempts=[NOW - 30 * HOUR, NOW - 25 * HOUR],
              last={"action": "reset", "at": NOW - 25 * HOUR, "gpus": [2]})
    out = decide(at=at)
    assert out["action"] == r.RESET and out["attempts"] == 1
    assert out["record"]["attempts"] == [NOW]            # the old ones pruned
    # inside a longer window they count
    assert decide(at=at, window_hours=48)["action"] == r.OPERATOR


def test_reboot_consent_escalates_a_reset_that_did_not_clear():
    at = node(attempts=[NOW - HOUR], last={"action": "reset", "at": NOW - HOUR, "gpus": [2]})
    out = decide(at=at, consent="reboot", action="keep")
    assert out["action"] == r.REBOOT and out["attempts"] == 2 and "a reset did not clear GPU 2" in out["reason"]
    # with reset consent only: the reset again
    assert decide(at=at, action="keep")["action"] == r.RESET


def test_release_drops_the_condition_and_keeps_the_record():
    at = node(attempts=[NOW - HOUR], last={"action": "reset", "at": NOW - HOUR, "gpus": [2]},
              condition={"message": "x"})
    out = decide(at=at, action="release", blocking=[])
    assert out["condition"] == "drop" and out["record"] is None
    writes = r.node_writes(at, out, NOW)
    assert writes["status_patch"] == {"status": {"conditions": [{"type": r.CONDITION_TYPE, "$patch": "delete"}]}}
    assert writes["spec_patch"] is None
    assert decide(action="release", blocking=[])["condition"] is None     # no condition: nothing to drop


def test_an_unreadable_record_reads_as_no_attempt():
    for raw in ("{", "[]", json.dumps({"attempts": "x", "last": {"action": "format"}}),
                json.dumps({"attempts": ["not a time", 3], "last": None})):
        assert r.record(node(raw=raw)) == {"attempts": [], "last": None}


def test_settings_and_consent_errors_name_what_is_valid():
    assert r.settings_errors({"max_attempts": 0, "window_hours": -1, "other": 1}) == [
        "max_attempts must be a whole number from 1 to 100, got 0", "unknown setting other; valid: max_attempts, "
        "window_hours", "window_hours must be a number from 0 to 2160, got -1"]
    assert r.settings_errors({"max_attempts": True}) == ["max_attempts must be a whole number from 1 to 100, got True"]
    assert r.settings_errors(SETTINGS) == []
    assert r.consent_errors({"a": "reset", "b": "yes"}) == [
        "remediation of node b must be one of none, reset, reboot, got 'yes'"]


FINDINGS = st.lists(st.sampled_from([REMAP, PAGES, LOST, XID, FAILED]), max_size=3)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["quarantine", "keep", "count", "held", "healthy", "release"]),
                                st.sampled_from(r.CONSENTS), FINDINGS,
                                st.integers(min_value=0, max_value=30 * 3600)), max_size=12),
       max_attempts=st.integers(min_value=1, max_value=4), window=st.sampled_from([0, 1, 6, 24, 48]))
def test_property_never_more_than_the_cap_never_without_consent_never_on_a_held_node(steps, max_attempts, window):
    """Sweeps over one node, time moving forward, the record carried from each write to the next: every action has
    the consent it needs and a quarantined node; no window ever holds more attempts than the cap; each attempt is in
    the record written before it is returned."""
    at = node()
    now = NOW
    done = []
    conf = {"max_attempts": max_attempts, "window_hours": window}
    for action, consent, blocking, gap in steps:
        now += gap
        out = r.decide(action, consent, blocking, at, conf, now)
        if out["action"] in (r.RESET, r.REBOOT):
            assert action in ("quarantine", "keep")
            assert consent == "reboot" or (consent == "reset" and out["action"] == r.RESET)
            assert out["record"] is not None and out["record"]["attempts"][-1] == now
            if out["action"] == r.RESET:
                assert out["gpus"] and set(out["gpus"]) <= set(f["gpu"] for f in blocking if f["kind"] in
                                                               ("row_remap_pending", "retired_pages_pending"))
            done.append(int(now))
        else:
            assert out["record"] is None and out["gpus"] == []
        if consent == "none" or action not in ("quarantine", "keep"):
            assert out["action"] in (r.NONE,)
        writes = r.node_writes(at, out, now)
        annotations = dict(at["metadata"]["annotations"])
        if writes["spec_patch"]:
            annotations.update(writes["spec_patch"]["metadata"]["annotations"])
        conditions = [c for c in at["status"]["conditions"] if c["type"] != r.CONDITION_TYPE]
        if writes["status_patch"] and "$patch" not in writes["status_patch"]["status"]["conditions"][0]:
            conditions.append(writes["status_patch"]["status"]["conditions"][0])
        elif not writes["status_patch"]:
            conditions = at["status"]["conditions"]
        at = {"metadata": {"name": "n", "resourceVersion": "7", "annotations": annotations},
              "status": {"conditions": conditions}}
    for i, start in enumerate(done):
        assert len([t for t in done[i:] if t - start <= window * HOUR]) <= max_attempts, (done, window)
