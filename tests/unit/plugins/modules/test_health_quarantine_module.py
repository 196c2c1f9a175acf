"""health_quarantine: the real kubernetes client over real HTTP against the fake API server (tests/support), which
merges a Node's conditions by type, keeps spec and status apart and answers 409 to a stale resourceVersion."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_quarantine as q
from ansible_collections.gpuops.nvidia.plugins.modules import health_quarantine
from tests.support.modrun import run_main

pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")

GPU = {"nvidia.com/gpu.present": "true"}
TAINT = "gpuops.nvidia/gpu-unhealthy"
CONDITION = "GpuopsNvidiaGpuHealthy"
BAD = {"gpu": 0, "bus_id": "00000000:18:00.0", "kind": "row_remap_pending",
       "message": "GPU 0 (00000000:18:00.0): remapped rows pending - reset the GPU or reboot"}
UNHEALTHY = {"healthy": False, "blocking": [BAD], "warnings": []}
HEALTHY = {"healthy": True, "blocking": [], "warnings": []}


@pytest.fixture
def fleet(kube_api):
    for i in range(20):
        kube_api.add_node("gpu-%02d" % i, labels=dict(GPU))
    kube_api.add_node("cpu-00")         # not a GPU node: not in the breaker's denominator
    return ["gpu-%02d" % i for i in range(20)]


def sweep(kube_api, verdicts, check=False, **kw):
    args = dict(kubeconfig=kube_api.kubeconfig_path, verdicts=verdicts)
    args.update(kw)
    return run_main(health_quarantine.main, args, check_mode=check, diff=True)


def stored(kube_api, name):
    return kube_api.get("", "nodes", name)


def quarantined(kube_api, names):
    out = []
    for name in names:
        node = stored(kube_api, name)
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == TAINT]
        if taints:
            out.append(name)
    return out


def by_node(result):
    return dict((row["node"], row) for row in result["nodes"])


def test_check_then_apply_then_again(kube_api, fleet):
    verdicts = dict((n, HEALTHY) for n in fleet)
    verdicts["gpu-03"] = UNHEALTHY
    check = sweep(kube_api, verdicts, check=True)
    assert check["changed"] is True and by_node(check)["gpu-03"]["action"] == "quarantine"
    assert kube_api.writes() == [] and quarantined(kube_api, fleet) == []
    assert "gpu-03" in check["diff"]["after"]

    applied = sweep(kube_api, verdicts)
    assert applied["changed"] is True and quarantined(kube_api, fleet) == ["gpu-03"]
    node = stored(kube_api, "gpu-03")
    record = json.loads(node["metadata"]["annotations"][q.RECORD])
    assert record["healthy_sweeps"] == 0 and node["metadata"]["annotations"][q.LAST] == record["since"]
    assert node["spec"]["unschedulable"] is True
    assert [c["status"] for c in node["status"]["conditions"] if c["type"] == CONDITION] == ["False"]
    assert applied["breaker"]["gpu_nodes"] == 20 and applied["breaker"]["quarantined_now"] == ["gpu-03"]

    writes = len(kube_api.writes())
    again = sweep(kube_api, verdicts)
    assert again["changed"] is False and len(kube_api.writes()) == writes
    assert by_node(again)["gpu-03"]["action"] == "keep"


def test_released_after_two_healthy_sweeps(kube_api, fleet):
    verdicts = dict((n, HEALTHY) for n in fleet)
    sweep(kube_api, dict(verdicts, **{"gpu-05": UNHEALTHY}))
    first = sweep(kube_api, verdicts)
    assert by_node(first)["gpu-05"]["action"] == "count" and quarantined(kube_api, fleet) == ["gpu-05"]
    assert by_node(first)["gpu-05"]["changes"] == [
        "record the quarantine: since %s, healthy sweeps 1 of 2" % by_node(first)["gpu-05"]["quarantined_since"]]
    second = sweep(kube_api, verdicts)
    assert by_node(second)["gpu-05"]["action"] == "release" and quarantined(kube_api, fleet) == []
    node = stored(kube_api, "gpu-05")
    assert not node["spec"].get("unschedulable")
    assert q.RECORD not in node["metadata"]["annotations"] and q.LAST in node["metadata"]["annotations"]
    assert [c for c in node["status"]["conditions"] if c["type"] == CONDITION] == []
    # released: the condition went first, the cordon and taint last (the node stays guarded until its last write)
    paths = [w["path"] for w in kube_api.writes() if w["path"].startswith("/api/v1/nodes/gpu-05")][-2:]
    assert paths == ["/api/v1/nodes/gpu-05/status", "/api/v1/nodes/gpu-05"]
    assert sweep(kube_api, verdicts)["changed"] is False


def test_the_breaker_quarantines_two_of_six_fails_and_holds_the_line(kube_api, fleet):
    verdicts = dict((n, UNHEALTHY if i < 6 else HEALTHY) for i, n in enumerate(fleet))
    result = sweep(kube_api, verdicts)
    assert result["failed"] is True
    assert result["msg"].startswith("circuit breaker open: 6 unhealthy nodes were to be newly quarantined, and at "
                                    "most 2 may be in 24 h (10 % of 20 GPU nodes, at most 10; 0 already")
    assert "quarantined: gpu-00, gpu-01" in result["msg"]
    assert "left in service with their findings reported: gpu-02, gpu-03, gpu-04, gpu-05" in result["msg"]
    assert quarantined(kube_api, fleet) == ["gpu-00", "gpu-01"]
    assert by_node(result)["gpu-04"]["action"] == "held" and by_node(result)["gpu-04"]["blocking"] == [BAD]
    # a sweep inside the same window quarantines no more, and says so again
    later = sweep(kube_api, verdicts)
    assert later["failed"] is True and "2 already in this window: gpu-00, gpu-01" in later["msg"]
    assert quarantined(kube_api, fleet) == ["gpu-00", "gpu-01"]
    # check mode warns instead of failing
    check = sweep(kube_api, verdicts, check=True)
    assert not check.get("failed") and check["breaker"]["open"] is True
    warned = [w["event"]["msg"] if isinstance(w, dict) else w for w in check.get("warnings", [])]
    assert any(w.startswith("circuit breaker open") for w in warned), warned


def test_an_administrators_marks_are_kept(kube_api, fleet):
    admin = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
    node = stored(kube_api, "gpu-07")
    node["spec"].update(unschedulable=True, taints=[admin])
    kube_api.put(node)
    sweep(kube_api, {"gpu-07": UNHEALTHY})
    sweep(kube_api, {"gpu-07": HEALTHY})
    sweep(kube_api, {"gpu-07": HEALTHY})
    after = stored(kube_api, "gpu-07")
    assert after["spec"]["unschedulable"] is True and after["spec"]["taints"] == [admin]
    assert "gpuops.nvidia/cordoned-by" not in (after["metadata"].get("annotations") or {})


def test_a_conflict_is_read_and_planned_again(kube_api, fleet):
    """The node changed between the sweep's read and its write (409 Conflict, as the API server answers a stale
    resourceVersion): the node is read again and the marks go onto what is there now."""
    kube_api.inject_failure("PATCH", r"^/api/v1/nodes/gpu-09$", code=409, reason="Conflict")
    result = sweep(kube_api, {"gpu-09": UNHEALTHY})
    assert result["changed"] is True, result
    patches = [w for w in kube_api.writes() if w["path"] == "/api/v1/nodes/gpu-09"]
    assert [w.get("code") for w in patches] == [409, 200]
    reads = [r for r in kube_api.requests if r["method"] == "GET" and r["path"] == "/api/v1/nodes/gpu-09"]
    assert len(reads) == 1          # the read again after the conflict (the first read was the list)
    assert quarantined(kube_api, ["gpu-09"]) == ["gpu-09"]


def test_bad_input_is_refused_before_anything_is_read(kube_api, fleet):
    result = sweep(kube_api, {"Not_A_Node": HEALTHY, "gpu-01": {"healthy": "yes"}}, release_after=0,
                   breaker_percent=150)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("invalid input, nothing changed: ")
    for words in ("release_after must be a whole number from 1 to 100, got 0",
                  "breaker_percent must be a number from 0 to 100, got 150", "node name 'Not_A_Node'",
                  "verdicts[gpu-01]: "):
        assert words in result["msg"]
    assert kube_api.requests == []


def test_a_swept_node_the_cluster_lacks_is_named(kube_api, fleet):
    result = sweep(kube_api, {"gpu-99": HEALTHY})
    assert result["failed"] is True and "node gpu-99, which the sweep read, does not exist" in result["msg"]
