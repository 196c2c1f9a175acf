"""health_remediation: the real kubernetes client over real HTTP against the fake API server (tests/support), which
merges a Node's conditions by type, keeps spec and status apart and answers 409 to a stale resourceVersion."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_remediation as r
from ansible_collections.gpuops.nvidia.plugins.modules import health_remediation
from tests.support.modrun import run_main

pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")

REMAP = {"gpu": 0, "bus_id": "00000000:18:00.0", "kind": "row_remap_pending",
         "message": "GPU 0 (00000000:18:00.0): remapped rows pending - reset the GPU or reboot"}


@pytest.fixture
def nodes(kube_api):
    for name in ("gpu-00", "gpu-01"):
        kube_api.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    return kube_api


def remediate(kube_api, decisions, consent, check=False, **kw):
    args = dict(kubeconfig=kube_api.kubeconfig_path, decisions=decisions, consent=consent)
    args.update(kw)
    return run_main(health_remediation.main, args, check_mode=check)


def quarantined(name, action="keep", blocking=(REMAP,)):
    return {"node": name, "action": action, "healthy_sweeps": 0, "blocking": list(blocking), "warnings": [],
            "changes": []}


def by_node(result):
    return dict((row["node"], row) for row in result["nodes"])


def annotation(kube_api, name):
    return (kube_api.get("", "nodes", name)["metadata"].get("annotations") or {}).get(r.RECORD)


def ours(kube_api, name):
    return [c for c in kube_api.get("", "nodes", name)["status"].get("conditions") or [] if c["type"] == r.CONDITION_TYPE]


def test_check_mode_says_what_and_writes_nothing(nodes):
    result = remediate(nodes, [quarantined("gpu-00", "quarantine")], {"gpu-00": "reset"}, check=True)
    assert result["changed"] is True and by_node(result)["gpu-00"]["action"] == "reset"
    assert by_node(result)["gpu-00"]["gpus"] == [0]
    assert nodes.writes() == [] and annotation(nodes, "gpu-00") is None


def test_apply_writes_the_record_then_returns_the_action_and_the_third_attempt_is_refused(nodes):
    decisions = [quarantined("gpu-00"), quarantined("gpu-01")]
    consent = {"gpu-00": "reset"}            # gpu-01: no consent
    first = remediate(nodes, decisions, consent)
    assert first["changed"] is True
    row = by_node(first)["gpu-00"]
    assert (row["action"], row["gpus"], row["attempts"], row.get("written")) == ("reset", [0], 1, True)
    assert by_node(first)["gpu-01"]["action"] == "none" and annotation(nodes, "gpu-01") is None
    record = json.loads(annotation(nodes, "gpu-00"))
    assert len(record["attempts"]) == 1 and record["last"]["action"] == "reset" and record["last"]["gpus"] == [0]
    # the record is the only write: on the node as it was read
    writes = [w for w in nodes.writes() if w["path"].startswith("/api/v1/nodes/")]
    assert [w["path"] for w in writes] == ["/api/v1/nodes/gpu-00"]

    second = remediate(nodes, decisions, consent)
    assert by_node(second)["gpu-00"]["action"] == "reset" and by_node(second)["gpu-00"]["attempts"] == 2
    assert len(json.loads(annotation(nodes, "gpu-00"))["attempts"]) == 2

    third = remediate(nodes, decisions, consent)
    row = by_node(third)["gpu-00"]
    assert row["action"] == "needs_operator" and row["gpus"] == [] and row["attempts"] == 2
    assert len(json.loads(annotation(nodes, "gpu-00"))["attempts"]) == 2        # no third attempt recorded
    condition = ours(nodes, "gpu-00")
    assert len(condition) == 1 and condition[0]["status"] == "False" and condition[0]["reason"] == "NeedsOperator"
    assert "2 remediation attempt(s) in 24 h" in condition[0]["message"]
    assert "row_remap_pending on GPU 0" in condition[0]["message"]
    # at the cap, the same again writes nothing
    count = len(nodes.writes())
    assert remediate(nodes, decisions, consent)["changed"] is False and len(nodes.writes()) == count

    # released: the condition goes, the record stays (the window still counts its attempts)
    released = remediate(nodes, [quarantined("gpu-00", "release", [])], consent)
    assert released["changed"] is True and ours(nodes, "gpu-00") == []
    assert len(json.loads(annotation(nodes, "gpu-00"))["attempts"]) == 2


def test_a_conflict_is_read_and_decided_again(nodes):
    nodes.inject_failure("PATCH", r"^/api/v1/nodes/gpu-00$", code=409, reason="Conflict")
    result = remediate(nodes, [quarantined("gpu-00")], {"gpu-00": "reset"})
    patches = [w for w in nodes.writes() if w["path"] == "/api/v1/nodes/gpu-00"]
    assert [w.get("code") for w in patches] == [409, 200]
    assert by_node(result)["gpu-00"]["action"] == "reset"
    assert len(json.loads(annotation(nodes, "gpu-00"))["attempts"]) == 1


def test_bad_input_is_refused_before_anything_is_read(nodes):
    result = remediate(nodes, [quarantined("Not_A_Node"), {"node": "gpu-00", "action": "maybe"}],
                       {"gpu-00": "always"}, max_attempts=0, window_hours=3000)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("invalid input, nothing changed: ")
    for words in ("max_attempts must be a whole number from 1 to 100, got 0",
                  "window_hours must be a number from 0 to 2160, got 3000",
                  "remediation of node gpu-00 must be one of none, reset, reboot, got 'always'",
                  "decisions[0].node 'Not_A_Node'", "decisions[1].action must be one of quarantine, keep"):
        assert words in result["msg"], result["msg"]
    assert nodes.requests == []
