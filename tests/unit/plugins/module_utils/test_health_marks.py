"""_health_marks: the gate's marks planned from a verdict (pure), and the label value made from a finding's kind."""

from hypothesis import given, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_marks as hm
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import label_value_errors, to_label_value


def finding(gpu, kind="row_remap_pending", message=None, bus_id="00000000:47:00.0"):
    return {"gpu": gpu, "bus_id": bus_id, "kind": kind, "message": message or "remapped rows pending - reset"}


def node(spec=None, conditions=None, annotations=None, rv="7"):
    return {"metadata": {"name": "n", "resourceVersion": rv, "annotations": annotations or {}},
            "spec": spec or {}, "status": {"conditions": conditions or [{"type": "Ready", "status": "True"}]}}


@given(st.text(max_size=200))
def test_to_label_value_is_always_a_valid_label_value(text):
    value = to_label_value(text, "fallback")
    assert label_value_errors("k", value) == [] and value


def test_to_label_value_keeps_a_valid_value_and_cleans_others():
    assert to_label_value("row_remap_pending", "x") == "row_remap_pending"
    assert to_label_value("  ::xid 79::  ", "x") == "xid-79"
    assert to_label_value("---", "fallback") == "fallback"
    assert len(to_label_value("a" * 100, "x")) == 63


def test_reason_is_camel_case_and_starts_with_a_letter():
    assert hm.condition_reason([finding(0, "row_remap_pending")]) == "RowRemapPending"
    assert hm.condition_reason([finding(0, "79")]) == "GpuUnhealthy79"
    assert hm.condition_reason([finding(0, "!!")]) == "GpuUnhealthy"


def test_message_names_gpu_and_bus_id_once_in_gpu_order():
    text = hm.condition_message([
        finding(5, message="GPU 5 (00000000:9a:00.0): NVLink 3 down", bus_id="00000000:9A:00.0"),
        finding(None, kind="fabric", message="fabric manager not running", bus_id=None),
        finding(1, message="uncorrected volatile ECC errors: 2", bus_id="00000000:19:00.0")])
    assert text == ("3 GPU health findings block this node: [1] GPU 1 (00000000:19:00.0): uncorrected volatile ECC "
                    "errors: 2; [2] GPU 5 (00000000:9a:00.0): NVLink 3 down; [3] fabric manager not running")


def test_reason_taint_message_and_result_take_one_order_whatever_the_verdicts():
    """A verdict listed out of order (from elsewhere than the gate): the taint, the reason, the message and the checked
    verdict all start with GPU 2's finding; node findings follow by PCI address (NVML's and sysfs's forms compared as
    one address: 0000:47 before 00000000:B7), a finding of no address last, each group in the verdict's order."""
    verdict = hm.check_verdict({"healthy": False, "blocking": [
        finding(None, "xid_fatal", "Xid 79 on a bus of no GPU", bus_id=None),
        finding(None, "gpu_missing", "GPU (PCI 00000000:B7:00.0): not listed", bus_id="00000000:B7:00.0"),
        finding(None, "gpu_missing", "GPU (PCI 0000:47:00.0): not listed", bus_id="0000:47:00.0"),
        finding(None, "xid_fatal", "GPU (PCI 0000:47:00.0): Xid 79", bus_id="0000:47:00.0"),
        finding(2, "nvlink_down", "link 3 down", bus_id="00000000:19:00.0")]})
    messages = [f["message"] for f in verdict["blocking"]]
    assert messages == ["link 3 down", "GPU (PCI 0000:47:00.0): not listed", "GPU (PCI 0000:47:00.0): Xid 79",
                        "GPU (PCI 00000000:B7:00.0): not listed", "Xid 79 on a bus of no GPU"]
    result = hm.plan(node(), verdict, "me", "t")
    condition = result["status_patch"]["status"]["conditions"][0]
    assert condition["reason"] == "NvlinkDown" and result["after"]["taints"][0]["value"] == "nvlink_down"
    assert condition["message"] == (
        "5 GPU health findings block this node: [1] GPU 2 (00000000:19:00.0): link 3 down; [2] GPU (PCI 0000:47:00.0): "
        "not listed; [3] GPU (PCI 0000:47:00.0): Xid 79; [4] GPU (PCI 00000000:B7:00.0): not listed; [5] Xid 79 on a "
        "bus of no GPU")
    # the lists as given, unchecked: the same first finding
    given = list(reversed(verdict["blocking"]))
    assert hm.condition_reason(given) == "NvlinkDown" and hm.taint_value(given) == "nvlink_down"


def test_message_is_cut_with_the_count_left_out():
    many = [finding(i, message="m" * 1000, bus_id="00000000:%02x:00.0" % i) for i in range(8)]
    text = hm.condition_message(many)
    assert len(text) <= hm.MESSAGE_LIMIT and text.endswith("... and 5 more (the run's output lists them all)")
    assert "[3] GPU 2" in text and "[4]" not in text


def test_plan_unhealthy_on_a_clean_node_then_nothing_on_the_result():
    verdict = hm.check_verdict({"healthy": False, "blocking": [finding(3)]})
    first = hm.plan(node(), verdict, "me", "2025-01-01T00:00:00Z")
    assert first["spec_patch"] == {
        "spec": {"unschedulable": True,
                 "taints": [{"key": hm.TAINT_KEY, "value": "row_remap_pending", "effect": "NoSchedule"}]},
        "metadata": {"annotations": {"gpuops.nvidia/cordoned-by": "me"}, "resourceVersion": "7"}}
    written = first["status_patch"]["status"]["conditions"][0]
    assert written["lastTransitionTime"] == written["lastHeartbeatTime"] == "2025-01-01T00:00:00Z"
    # the node as those patches leave it: nothing more to do, whatever the time
    after = node(spec=first["spec_patch"]["spec"], annotations={"gpuops.nvidia/cordoned-by": "me"},
                 conditions=[{"type": "Ready", "status": "True"}, written])
    again = hm.plan(after, verdict, "me", "2025-06-01T00:00:00Z")
    assert again["changes"] == [] and again["spec_patch"] is None and again["status_patch"] is None


def test_plan_healthy_leaves_what_is_not_ours():
    admin = {"key": "gpuops.nvidia/gpu-unhealthy", "value": "x", "effect": "NoExecute"}  # our key, not our effect
    other = {"type": "GpuopsNvidiaSomethingElse", "status": "False"}
    n = node(spec={"unschedulable": True, "taints": [admin]}, conditions=[other])
    result = hm.plan(n, hm.check_verdict({"healthy": True, "blocking": []}), "me", "t")
    assert result["changes"] == [] and result["after"] == result["before"]


def test_verdict_errors_are_all_reported_at_once():
    errors = hm.verdict_errors({"healthy": 1, "blocking": [{"gpu": -1, "bus_id": 3, "kind": "k\n", "message": ""}],
                                "warnings": "none", "x": 0})
    assert len(errors) == 7, errors
