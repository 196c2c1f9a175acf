"""node_health: the real kubernetes client over real HTTP against the fake API server (tests/support), which merges
a Node's conditions by type, keeps spec and status apart as kube-apiserver does and validates taints."""

import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import node_health
from tests.support.modrun import run_main as run_module

pytestmark = pytest.mark.usefixtures("no_ambient_kube_credentials")

MARK = "gpuops.nvidia/cordoned-by"
OURS = "gpuops.nvidia.gpu_node"
TAINT = "gpuops.nvidia/gpu-unhealthy"
CONDITION = "GpuopsNvidiaGpuHealthy"
BURN_IN = "gpuops.nvidia/burn-in"
PASSED = {"level": "medium", "verdict": "pass", "time": "2026-11-29T10:00:00Z", "driver": "570.172.08",
          "dcgm_version": "4.2.3", "failed": []}

ROW_REMAP = {"gpu": 3, "bus_id": "00000000:47:00.0", "kind": "row_remap_pending",
             "message": "GPU 3 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot; the gate clears "
                        "when the next run finds it healthy"}
XID_79 = {"gpu": 1, "bus_id": "00000000:19:00.0", "kind": "xid_79",
          "message": "Xid 79 (GPU has fallen off the bus) since boot - reboot and check the GPU's seating and power"}
WARN = {"gpu": 0, "bus_id": "00000000:18:00.0", "kind": "ecc_corrected",
        "message": "GPU 0 (00000000:18:00.0): 12 corrected ECC errors (volatile)"}
UNHEALTHY = {"healthy": False, "blocking": [ROW_REMAP], "warnings": [WARN]}
HEALTHY = {"healthy": True, "blocking": [], "warnings": [WARN]}
ADMIN_TAINT = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}


@pytest.fixture
def node(kube_api):
    kube_api.add_node("gpu-node-1")
    kube_api.add_node("gpu-node-2")
    return "gpu-node-1"


def args(kube_api, verdict, **kw):
    base = dict(kubeconfig=kube_api.kubeconfig_path, node_name="gpu-node-1", verdict=verdict)
    base.update(kw)
    return base


def stored(kube_api, name="gpu-node-1"):
    return kube_api.get("", "nodes", name)


def spec(kube_api, name="gpu-node-1"):
    return stored(kube_api, name).get("spec") or {}


def conditions(kube_api, name="gpu-node-1"):
    return {c["type"]: c for c in stored(kube_api, name)["status"].get("conditions") or []}


def mark(kube_api, name="gpu-node-1"):
    return (stored(kube_api, name)["metadata"].get("annotations") or {}).get(MARK)


def test_unhealthy_verdict_cordons_taints_and_sets_the_condition(kube_api, node):
    res = run_module(node_health.main, args(kube_api, UNHEALTHY))
    assert res["changed"] is True and res["state"] == "unhealthy", res
    assert res["changes"] == ["cordon the node, marked %s=%s" % (MARK, OURS),
                              "add taint %s=row_remap_pending:NoSchedule" % TAINT,
                              "set condition %s=False (RowRemapPending)" % CONDITION]
    assert spec(kube_api)["unschedulable"] is True and mark(kube_api) == OURS
    assert spec(kube_api)["taints"] == [{"key": TAINT, "value": "row_remap_pending", "effect": "NoSchedule"}]
    cond = conditions(kube_api)[CONDITION]
    assert cond["status"] == "False" and cond["reason"] == "RowRemapPending"
    assert "GPU 3 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot" in cond["message"]
    assert cond["lastTransitionTime"] == cond["lastHeartbeatTime"]
    # the kubelet's own condition is kept; the other node is untouched; warnings put no mark but come back
    assert conditions(kube_api)["Ready"] == {"type": "Ready", "status": "True"}
    assert spec(kube_api, "gpu-node-2") == {} and list(conditions(kube_api, "gpu-node-2")) == ["Ready"]
    assert res["warnings_found"] == [WARN] and res["taint"]["value"] == "row_remap_pending"
    # the condition went through the status subresource as a strategic merge patch, the rest as one merge patch
    writes = [(r["path"], r["content_type"]) for r in kube_api.writes()]
    assert writes == [("/api/v1/nodes/gpu-node-1", "application/merge-patch+json"),
                      ("/api/v1/nodes/gpu-node-1/status", "application/strategic-merge-patch+json")]


def test_repeated_unhealthy_run_writes_nothing(kube_api, node):
    run_module(node_health.main, args(kube_api, UNHEALTHY))
    seen = len(kube_api.writes())
    cond = conditions(kube_api)[CONDITION]
    res = run_module(node_health.main, args(kube_api, UNHEALTHY), diff=True)
    assert res["changed"] is False and res["changes"] == [] and "diff" not in res
    assert len(kube_api.writes()) == seen and conditions(kube_api)[CONDITION] == cond   # no heartbeat-only write


def test_new_findings_update_taint_and_message_but_keep_the_transition_time(kube_api, node):
    run_module(node_health.main, args(kube_api, UNHEALTHY))
    first = conditions(kube_api)[CONDITION]
    first["lastTransitionTime"] = "2020-01-01T00:00:00Z"      # an old transition, to see it kept
    node_obj = stored(kube_api)
    node_obj["status"]["conditions"] = [c if c["type"] != CONDITION else first
                                        for c in node_obj["status"]["conditions"]]
    kube_api.put(node_obj)
    worse = {"healthy": False, "blocking": [XID_79, ROW_REMAP], "warnings": []}
    res = run_module(node_health.main, args(kube_api, worse))
    assert res["changed"] is True
    assert res["changes"] == ["set taint %s to xid_79:NoSchedule (was row_remap_pending)" % TAINT,
                              "update condition %s=False (Xid79)" % CONDITION]
    assert spec(kube_api)["taints"] == [{"key": TAINT, "value": "xid_79", "effect": "NoSchedule"}]
    cond = conditions(kube_api)[CONDITION]
    assert cond["lastTransitionTime"] == "2020-01-01T00:00:00Z" and cond["reason"] == "Xid79"
    # findings per GPU, in GPU order, each naming GPU and bus id
    assert cond["message"].startswith("2 GPU health findings block this node: [1] GPU 1 (00000000:19:00.0): Xid 79")
    assert "[2] GPU 3 (00000000:47:00.0): remapped rows pending" in cond["message"]


def test_healthy_verdict_removes_only_the_collections_marks(kube_api, node):
    run_module(node_health.main, args(kube_api, UNHEALTHY))
    # meanwhile an administrator adds a taint and another tool a condition of its own
    node_obj = stored(kube_api)
    node_obj["spec"]["taints"].insert(0, ADMIN_TAINT)
    node_obj["status"]["conditions"].append({"type": "KernelDeadlock", "status": "False"})
    kube_api.put(node_obj)
    res = run_module(node_health.main, args(kube_api, HEALTHY), diff=True)
    assert res["changed"] is True and res["state"] == "healthy"
    # in the order written: the condition first, the cordon and taint last (an interrupted run leaves the node
    # guarded), the second write on the node the first answered (no conflict with our own write)
    assert res["changes"] == ["remove condition %s" % CONDITION,
                              "release the collection's cordon (%s=%s)" % (MARK, OURS),
                              "remove taint %s=row_remap_pending:NoSchedule" % TAINT]
    assert [(r["path"], r["code"]) for r in kube_api.writes()][-2:] == [("/api/v1/nodes/gpu-node-1/status", 200),
                                                                        ("/api/v1/nodes/gpu-node-1", 200)]
    assert spec(kube_api) == {"unschedulable": False, "taints": [ADMIN_TAINT]} and mark(kube_api) is None
    assert sorted(conditions(kube_api)) == ["KernelDeadlock", "Ready"]
    assert res["diff"]["before"]["condition"]["type"] == CONDITION and res["diff"]["after"]["condition"] is None
    assert res["diff"]["after"]["taints"] == [ADMIN_TAINT] and res["diff"]["after"]["unschedulable"] is False
    seen = len(kube_api.writes())
    res = run_module(node_health.main, args(kube_api, HEALTHY))
    assert res["changed"] is False and len(kube_api.writes()) == seen


def test_an_administrators_cordon_is_kept_unmarked_and_never_released(kube_api, node):
    node_obj = stored(kube_api)
    node_obj["spec"] = {"unschedulable": True, "taints": [ADMIN_TAINT]}
    kube_api.put(node_obj)
    res = run_module(node_health.main, args(kube_api, UNHEALTHY))
    assert res["changed"] is True and res["unschedulable_before"] is True and res["cordoned_by"] is None
    assert not any(c.startswith("cordon") for c in res["changes"])
    assert mark(kube_api) is None and spec(kube_api)["taints"][0] == ADMIN_TAINT
    res = run_module(node_health.main, args(kube_api, HEALTHY))
    assert res["changed"] is True and res["unschedulable"] is True
    assert spec(kube_api) == {"unschedulable": True, "taints": [ADMIN_TAINT]} and mark(kube_api) is None
    assert CONDITION not in conditions(kube_api)


def test_release_cordon_false_leaves_our_cordon_for_a_later_step(kube_api, node):
    run_module(node_health.main, args(kube_api, UNHEALTHY))
    res = run_module(node_health.main, args(kube_api, HEALTHY, release_cordon=False))
    assert res["changed"] is True and res["unschedulable"] is True
    assert spec(kube_api) == {"unschedulable": True} and mark(kube_api) == OURS
    res = run_module(node_health.main, args(kube_api, HEALTHY))
    assert res["changes"] == ["release the collection's cordon (%s=%s)" % (MARK, OURS)]
    assert spec(kube_api) == {"unschedulable": False} and mark(kube_api) is None


def test_healthy_node_never_gated_is_only_read(kube_api, node):
    res = run_module(node_health.main, args(kube_api, HEALTHY))
    assert res["changed"] is False and res["condition"] is None and res["taint"] is None
    assert kube_api.writes() == []


def test_check_mode_reports_and_writes_nothing(kube_api, node):
    before = stored(kube_api)
    res = run_module(node_health.main, args(kube_api, UNHEALTHY), check_mode=True, diff=True)
    assert res["changed"] is True and len(res["changes"]) == 3 and res["unschedulable"] is True
    assert res["diff"]["before"] == {"unschedulable": False, MARK: None, BURN_IN: None, "taints": [],
                                     "condition": None}
    after = res["diff"]["after"]
    assert after["unschedulable"] is True and after[MARK] == OURS and after["condition"]["status"] == "False"
    assert after["taints"] == [{"key": TAINT, "value": "row_remap_pending", "effect": "NoSchedule"}]
    assert kube_api.writes() == [] and stored(kube_api) == before
    # and the same for taking marks off
    run_module(node_health.main, args(kube_api, UNHEALTHY))
    marked, seen = stored(kube_api), len(kube_api.writes())
    res = run_module(node_health.main, args(kube_api, HEALTHY), check_mode=True)
    assert res["changed"] is True and res["unschedulable"] is False and res["condition"] is None
    assert len(kube_api.writes()) == seen and stored(kube_api) == marked


@pytest.mark.parametrize("verdict, wanted", [
    ("unhealthy", "argument 'verdict' is of type str"),         # ansible-core's own type check
    ({"healthy": "no", "blocking": [ROW_REMAP]}, "verdict.healthy must be true or false"),
    ({"healthy": False, "blocking": []}, "verdict.healthy is false but verdict.blocking has 0 findings"),
    ({"healthy": True, "blocking": [ROW_REMAP]}, "verdict.healthy is true but verdict.blocking has 1 findings"),
    ({"healthy": False, "blocking": ROW_REMAP}, "verdict.blocking must be a list of findings"),
    ({"healthy": False, "blocking": [ROW_REMAP], "extra": 1}, "verdict has unknown keys extra (valid: healthy"),
    ({"healthy": False, "blocking": [dict(ROW_REMAP, gpu="3")]}, "verdict.blocking[0].gpu must be a GPU index"),
    ({"healthy": False, "blocking": [dict(ROW_REMAP, gpu=True)]}, "verdict.blocking[0].gpu must be a GPU index"),
    ({"healthy": False, "blocking": [dict(ROW_REMAP, bus_id="47:00")]}, "verdict.blocking[0].bus_id must be a PCI"),
    ({"healthy": False, "blocking": [dict(ROW_REMAP, kind="")]}, "verdict.blocking[0].kind must be a non-empty"),
    ({"healthy": False, "blocking": [dict(ROW_REMAP, message=" ")]}, "verdict.blocking[0].message must be a non-"),
    ({"healthy": False, "blocking": [{"gpu": 3, "kind": "x", "message": "m"}]}, "verdict.blocking[0] lacks bus_id"),
    ({"healthy": False, "blocking": [dict(ROW_REMAP, fix="reset")]}, "verdict.blocking[0] has unknown keys fix"),
    ({"healthy": True, "blocking": [], "warnings": [1]}, "verdict.warnings[0] must be a mapping"),
])
def test_bad_verdict_is_refused_with_nothing_read_or_written(kube_api, node, verdict, wanted):
    res = run_module(node_health.main, args(kube_api, verdict))
    assert res["failed"] and wanted in res["msg"], res
    assert "argument" in wanted or res["msg"].startswith("invalid input, nothing changed: ")
    assert kube_api.requests == []


def test_bad_owner_is_refused(kube_api, node):
    res = run_module(node_health.main, args(kube_api, UNHEALTHY, owner=""))
    assert res["failed"] and "owner must be 1 to 253 characters" in res["msg"] and kube_api.requests == []


def test_missing_node_is_a_clear_error(kube_api, node):
    res = run_module(node_health.main, args(kube_api, UNHEALTHY, node_name="gpu-node-9"))
    assert res["failed"] and "node 'gpu-node-9' does not exist in the cluster (404)" in res["msg"]
    assert res["status"] == 404 and kube_api.writes() == []


def test_api_errors_are_worded_as_node_cordons_and_say_what_was_written(kube_api, node):
    # read-only credentials: 403 on the first write, nothing written
    res = run_module(node_health.main, dict(args(kube_api, UNHEALTHY), kubeconfig=None, host=kube_api.url,
                                            api_key=kube_api.ro_token))
    assert res["failed"] and res["status"] == 403 and "lack RBAC permission" in res["msg"]
    assert res["changed"] is False and spec(kube_api) == {}
    # the condition write fails after the cordon and taint were written: changed, and which
    kube_api.fail_nth_write(2)
    res = run_module(node_health.main, args(kube_api, UNHEALTHY))
    assert res["failed"] and res["status"] == 500 and res["changed"] is True
    assert res["changes"] == ["cordon the node, marked %s=%s" % (MARK, OURS),
                              "add taint %s=row_remap_pending:NoSchedule" % TAINT]
    assert spec(kube_api)["unschedulable"] is True and CONDITION not in conditions(kube_api)
    # the next run writes only what is missing
    res = run_module(node_health.main, args(kube_api, UNHEALTHY))
    assert res["changes"] == ["set condition %s=False (RowRemapPending)" % CONDITION]


def test_a_taint_added_between_read_and_write_is_kept(kube_api, node):
    """Taints are written whole, on the node as read (resourceVersion): an administrator's taint added after the
    read makes the write fail 409, and the module reads again and keeps it."""
    added = []

    def admin_taints_once(record):
        if record["method"] == "PATCH" and not added:
            added.append(True)
            node_obj = kube_api.get("", "nodes", "gpu-node-1")
            node_obj["spec"]["taints"] = [ADMIN_TAINT]
            kube_api.put(node_obj)          # a new resourceVersion: the patch that arrives now is refused 409

    kube_api.on_request = admin_taints_once
    res = run_module(node_health.main, args(kube_api, UNHEALTHY))
    assert res["changed"] is True, res
    assert spec(kube_api)["taints"] == [ADMIN_TAINT, {"key": TAINT, "value": "row_remap_pending",
                                                      "effect": "NoSchedule"}]
    assert [r["code"] for r in kube_api.writes()] == [409, 200, 200]


def test_kind_is_made_a_valid_taint_value_and_reason(kube_api, node):
    odd = dict(ROW_REMAP, kind="PCIe link: x8 of x16 / " + "z" * 80)
    res = run_module(node_health.main, args(kube_api, {"healthy": False, "blocking": [odd]}))
    assert res["changed"] is True, res
    value = spec(kube_api)["taints"][0]["value"]
    assert value.startswith("PCIe-link--x8-of-x16") and len(value) <= 63 and value[-1].isalnum()
    assert conditions(kube_api)[CONDITION]["reason"].startswith("PCIeLinkX8OfX16")


def test_the_burn_in_record_is_carried_by_the_node_checked_first_then_written_then_left(kube_api, node):
    res = run_module(node_health.main, args(kube_api, HEALTHY, burn_in=PASSED), check_mode=True, diff=True)
    assert res["changed"] is True and kube_api.writes() == []
    assert res["changes"] == ["record the burn-in on the node (%s=medium: pass, driver 570.172.08)" % BURN_IN]
    assert res["diff"]["before"][BURN_IN] is None and res["burn_in"] == res["diff"]["after"][BURN_IN]
    res = run_module(node_health.main, args(kube_api, HEALTHY, burn_in=PASSED))
    value = (stored(kube_api)["metadata"].get("annotations") or {}).get(BURN_IN)
    assert res["changed"] is True and res["burn_in"] == value
    assert json.loads(value) == PASSED and spec(kube_api).get("unschedulable") is not True
    seen = len(kube_api.writes())
    res = run_module(node_health.main, args(kube_api, HEALTHY, burn_in=PASSED))
    assert res["changed"] is False and len(kube_api.writes()) == seen
    # no record given: the annotation stays as it is
    res = run_module(node_health.main, args(kube_api, HEALTHY))
    assert res["changed"] is False and res["burn_in"] == value
    # a failed burn-in: the record changes in the same write as the cordon and the taint
    failed = dict(PASSED, verdict="fail", failed=["Memory bandwidth (GPU 3)"])
    res = run_module(node_health.main, args(kube_api, UNHEALTHY, burn_in=failed))
    assert res["changed"] is True and json.loads(mark_value(kube_api, BURN_IN)) == failed
    assert spec(kube_api)["unschedulable"] is True


def mark_value(kube_api, key, name="gpu-node-1"):
    return (stored(kube_api, name)["metadata"].get("annotations") or {}).get(key)


@pytest.mark.parametrize("burn_in, wanted", [
    (dict(PASSED, level="huge"), "burn_in.level must be one of quick, medium, long, extended, got 'huge'"),
    (dict(PASSED, verdict="ok"), "burn_in.verdict must be one of pass, fail, got 'ok'"),
    (dict(PASSED, driver=570), "burn_in.driver must be a string"),
    (dict(PASSED, failed="all"), "burn_in.failed must be a list of at most 17 test names"),
    (dict(PASSED, extra=1), "burn_in has unknown keys extra (valid: level, verdict, time, driver, dcgm_version, failed)"),
])
def test_a_bad_burn_in_record_is_refused_with_nothing_read_or_written(kube_api, node, burn_in, wanted):
    res = run_module(node_health.main, args(kube_api, HEALTHY, burn_in=burn_in))
    assert res["failed"] and wanted in res["msg"], res
    assert kube_api.requests == []
