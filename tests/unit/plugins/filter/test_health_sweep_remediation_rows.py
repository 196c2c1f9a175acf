"""The health_sweep filters' remediation: the settings' check with the cap and the consents, and the report rows'
words for what the remediation did."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.health_sweep import (
    health_sweep_rows, health_sweep_settings_errors)

READ = {"name": "n1", "gpus": 1, "unresponsive": [],
        "verdict": {"healthy": False, "warnings": [],
                    "blocking": [{"gpu": 0, "bus_id": None, "kind": "row_remap_pending", "message": "pending"}]}}
KEEP = {"node": "n1", "action": "keep", "healthy_sweeps": 0, "quarantined_since": "2026-11-29T07:00:00Z"}


def rows(done):
    return health_sweep_rows([READ], [KEEP], [], "2026-11-29T08:00:00Z", 2, [dict(done, node="n1")])[0]["actions"]


def test_settings_check_the_cap_and_every_consent_as_text_too():
    assert health_sweep_settings_errors({"remediation_max_attempts": "2", "remediation_window_hours": "24",
                                         "remediation": {"a": "none", "b": "reboot"}}) == []
    assert health_sweep_settings_errors({"remediation_max_attempts": "101", "remediation_window_hours": -1,
                                         "remediation": {"a": "yes"}}) == [
        "remediation of node a must be one of none, reset, reboot, got 'yes'",
        "remediation_max_attempts must be a whole number from 1 to 100, got 101",
        "remediation_window_hours must be a number from 0 to 2160, got -1"]


def test_the_rows_say_what_the_remediation_did():
    plan = {"action": "reset", "gpus": [0], "attempts": 1, "consent": "reset", "reason": "reset GPU 0"}
    kept = "kept in quarantine (unhealthy again: healthy sweeps counted from 0)"
    assert rows({"plan": plan, "check_mode": True}) == [kept, "would reset GPU 0 (attempt 1)"]
    reset = {"resets": [{"index": 0, "clears": ["row_remap_pending"], "cleared": False}],
             "not_reset": [{"index": 1, "reason": "GPU 1 (x) not reset - in use"}]}
    assert rows({"plan": plan, "check_mode": False, "reset": reset}) == [
        kept, "GPU 0 reset (attempt 1): row_remap_pending still there", "attempt 1: GPU 1 (x) not reset - in use"]
    failed = rows({"plan": plan, "check_mode": False, "reset": None, "failed": "NVML said no"})
    assert failed[-1] == "the remediation failed: NVML said no"
    boot = dict(plan, action="reboot", gpus=[], attempts=2)
    assert rows({"plan": boot, "rebooted": True})[-1] == "drained and rebooted the node (attempt 2)"
    assert rows({"plan": boot, "rebooted": False, "failed": "drain timed out"})[-2:] == [
        "reboot attempt 2 not completed: the drain, the next kernel's check or the reboot failed", "the remediation failed: drain timed out"]
    operator = dict(plan, action="needs_operator", gpus=[], reason="the cap: 2 attempt(s) in 24 h, at most 2")
    assert rows({"plan": operator})[-1] == ("needs an operator (condition GpuopsNvidiaGpuRemediation=False, "
                                            "NeedsOperator): the cap: 2 attempt(s) in 24 h, at most 2")
    # no consent: nothing said; consent that cannot act: why
    assert rows({"plan": dict(plan, action="none", consent="none", reason="no consent")}) == [kept]
    assert rows({"plan": dict(plan, action="none", reason="gpu_lost needs a node reboot")})[-1] == \
        "not remediated: gpu_lost needs a node reboot"


def test_a_remediation_that_is_not_a_list_is_refused():
    with pytest.raises(AnsibleFilterError, match="must be lists"):
        health_sweep_rows([READ], [KEEP], [], "2026-11-29T08:00:00Z", 2, {"n1": {}})
