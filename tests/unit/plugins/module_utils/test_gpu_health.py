"""The health findings and the policy: every finding kind from a health read, the defaults, overrides, bad policies."""
import copy

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_health as health
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import NOT_SUPPORTED

BUS = "00000000:47:00.0"


def healthy_gpu(index=3, bus=BUS):
    """A healthy HGX H100 GPU as the NVML backend reads it."""
    return {
        "index": index, "uuid": "GPU-x", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": bus, "architecture": "hopper",
        "lost": False,
        "ecc": {"mode_current": "Enabled", "mode_pending": "Enabled", "volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 0, "uncorrected": 0}},
        "retired_pages": NOT_SUPPORTED,
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "nvlink": [{"link": n, "active": True, "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}}
                   for n in range(18)],
        "pcie": {"generation": {"current": 5, "max": 5, "gpu_max": 5}, "width": {"current": 16, "max": 16}},
        "clock_events": health.decode_clock_events(0x1), "temperature_c": 31,
        "fabric": {"state": "completed", "status": "SUCCESS", "degraded_bandwidth": False},
    }


def read(*gpus, **log):
    return {"backend": "nvml", "gpus": list(gpus),
            "kernel_log": log or {"readable": True, "source": "journalctl", "lines": []}}


def kinds(found):
    return [f["kind"] for f in found]


def test_a_healthy_gpu_has_no_finding_and_passes():
    result = health.verdict(health.findings(read(healthy_gpu())))
    assert result == {"verdict": "pass", "healthy": True, "blocking": [], "warnings": [], "findings": []}


def test_not_supported_fields_are_no_finding():
    gpu = healthy_gpu()
    for key in ("ecc", "retired_pages", "remapped_rows", "nvlink", "clock_events", "temperature_c", "fabric"):
        gpu[key] = NOT_SUPPORTED
    gpu["pcie"] = {"generation": {"current": NOT_SUPPORTED, "max": 5, "gpu_max": 5},
                   "width": {"current": 16, "max": NOT_SUPPORTED}}
    assert health.findings(read(gpu)) == []


def _set(gpu, path, value):
    target = gpu
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return gpu


# (changes to a healthy GPU, the finding kind it gives, its default action, words its summary holds)
CASES = [
    ([(("lost",), True), (("error",), "GPU is lost")], "gpu_lost", "block", "NVML reports the GPU lost"),
    ([(("remapped_rows", "pending"), True)], "row_remap_pending", "block",
     "GPU 3 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot; the gate clears when the next run "
     "finds it healthy"),
    ([(("remapped_rows", "failure"), True)], "row_remap_failure", "block", "row remapping failed - the GPU needs service"),
    ([(("retired_pages",), {"single_bit": 0, "double_bit": 0, "pending": True})], "retired_pages_pending", "block",
     "page retirement pending"),
    ([(("ecc", "volatile", "uncorrected"), 2)], "ecc_uncorrected_volatile", "block", "2 uncorrected (volatile)"),
    ([(("fabric", "state"), "in_progress")], "fabric_incomplete", "block", "state in_progress"),
    ([(("fabric", "status"), "NOT_READY")], "fabric_incomplete", "block", "status NOT_READY"),
    ([(("nvlink", 5, "active"), False)], "nvlink_down", "block", "link 5 inactive"),
    ([(("pcie", "generation", "current"), 4)], "pcie_generation_degraded", "block", "Gen4, max Gen5"),
    ([(("pcie", "width", "current"), 8)], "pcie_width_degraded", "block", "x8, max x16"),
    ([(("ecc", "aggregate", "uncorrected"), 1)], "ecc_uncorrected_aggregate", "warn", "1 uncorrected (aggregate)"),
    ([(("ecc", "volatile", "corrected"), 7)], "ecc_corrected", "warn", "7 volatile, 0 aggregate"),
    ([(("ecc", "mode_current"), "Disabled")], "ecc_disabled", "warn", "ECC is disabled"),
    ([(("remapped_rows", "corrected"), 2)], "remapped_rows", "warn", "2 for corrected, 0 for uncorrected"),
    ([(("retired_pages",), {"single_bit": 3, "double_bit": 1, "pending": False})], "retired_pages", "warn",
     "3 single-bit, 1 double-bit"),
    ([(("nvlink", 2, "errors", "replay"), 9)], "nvlink_errors", "warn", "link 2: replay 9"),
    ([(("fabric", "degraded_bandwidth"), True)], "fabric_degraded", "warn", "degraded bandwidth"),
    ([(("clock_events",), health.decode_clock_events(0x8 | 0x80))], "hw_slowdown", "warn",
     "hw_slowdown, hw_power_brake_slowdown at 31 C"),
    ([(("clock_events",), health.decode_clock_events(0x40))], "thermal_slowdown", "warn", "hw_thermal_slowdown"),
]


@pytest.mark.parametrize("changes,kind,action,words", CASES, ids=[c[1] + "-" + c[3][:12] for c in CASES])
def test_each_finding_kind_and_its_default(changes, kind, action, words):
    gpu = healthy_gpu()
    for path, value in changes:
        _set(gpu, path, value)
    result = health.verdict(health.findings(read(gpu)))
    assert kinds(result["findings"]) == [kind]
    finding = result["findings"][0]
    assert finding["action"] == action and finding["gpu"] == 3 and finding["pci_bus_id"] == BUS
    assert words in finding["summary"] and finding["summary"].startswith("GPU 3 (00000000:47:00.0): ")
    assert result["verdict"] == action and result["healthy"] is (action != "block")


def test_a_lost_gpu_is_one_finding_and_other_gpus_are_still_judged():
    lost = {"index": 0, "pci_bus_id": "00000000:07:00.0", "lost": True, "error": "GPU is lost"}
    slow = _set(healthy_gpu(), ("pcie", "width", "current"), 8)
    assert kinds(health.findings(read(lost, slow))) == ["gpu_lost", "pcie_width_degraded"]


XID_79 = "[ 812.1] NVRM: Xid (PCI:0000:47:00): 79, GPU has fallen off the bus."
XID_13 = "NVRM: Xid (PCI:0000:47:00): 13, pid=77, name=train, Graphics SM Warp Exception"
XID_92 = "NVRM: Xid (PCI:0000:47:00): 92, pid=0, High single-bit ECC error rate"


def test_xid_kinds_and_their_defaults():
    found = health.findings(read(healthy_gpu(), readable=True, source="dmesg", lines=[XID_79, XID_13, XID_92, XID_79]))
    result = health.verdict(found)
    assert [(f["kind"], f["action"]) for f in result["findings"]] == [
        ("xid_fatal", "block"), ("xid_application", "warn"), ("xid_gpu", "warn")]
    fatal = result["findings"][0]
    assert fatal["xid"]["code"] == 79 and fatal["xid"]["action"] == "RESTART_BM" and fatal["times"] == 2
    assert "reboot the node" in fatal["summary"] and "logged 2 times" in fatal["summary"]
    assert "(pid 77, train)" in result["findings"][1]["summary"]


def test_an_xid_on_a_bus_no_gpu_has_is_a_node_finding():
    found = health.findings(read(healthy_gpu(), readable=True, source="dmesg",
                                 lines=["NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus."]))
    assert found[0]["gpu"] is None and found[0]["summary"].startswith("node (PCI 0000:99:00): a fatal Xid")
    assert "no GPU of this node has that bus id" in found[0]["summary"]


def test_an_unreadable_kernel_log_warns_and_says_why():
    found = health.findings(read(healthy_gpu(), readable=False, reason="kernel log not readable: dmesg: rc 1"))
    result = health.verdict(found)
    assert kinds(found) == ["kernel_log_unreadable"] and result["verdict"] == "warn" and result["healthy"]
    assert "dmesg: rc 1" in result["warnings"][0]


def test_the_policy_overrides_per_kind():
    gpu = _set(_set(healthy_gpu(), ("remapped_rows", "pending"), True), ("ecc", "volatile", "corrected"), 1)
    found = health.findings(read(gpu))
    assert health.verdict(found)["verdict"] == "block"
    loose = health.verdict(found, {"row_remap_pending": "warn"})
    assert loose["verdict"] == "warn" and len(loose["warnings"]) == 2
    quiet = health.verdict(found, {"row_remap_pending": "ignore", "ecc_corrected": "ignore"})
    assert quiet["verdict"] == "pass" and [f["action"] for f in quiet["findings"]] == ["ignore", "ignore"]
    strict = health.verdict(found, {"ecc_corrected": "block"})
    assert len(strict["blocking"]) == 2


def test_the_default_policy_is_the_issues():
    blocking = sorted(k for k, v in health.DEFAULT_POLICY.items() if v == "block")
    assert blocking == sorted([
        "gpu_lost", "gpu_missing", "dcgm_diag_failure", "row_remap_pending", "row_remap_failure",
        "retired_pages_pending", "ecc_uncorrected_volatile", "xid_fatal", "fabric_incomplete", "nvlink_down",
        "pcie_generation_degraded", "pcie_width_degraded",
        # issue 50: a GPU, or the node's NVML, that does not answer the sweep's read within its deadline
        "gpu_unresponsive", "nvml_unresponsive",
        # issue 50: a burn-in that failed a test keeps the node out until one passes
        "burn_in_failure",
        # issue 50: a fatal NVSwitch SXid (NVIDIA's Fabric Manager guide: a reboot or a reset of switches and GPUs)
        "sxid_fatal"])
    assert health.validate_policy(None) == health.DEFAULT_POLICY


@pytest.mark.parametrize("policy,words", [
    ({"row_remap_pendng": "warn"}, "unknown health finding kind 'row_remap_pendng' in the health policy; valid kinds: "
                                   "burn_in_failure, burn_in_unreadable, burn_in_warning, dcgm_diag_error"),
    ({"nvlink_down": "stop"}, "health policy nvlink_down: 'stop' is not one of block, warn, ignore"),
    ({"nvlink_down": True}, "health policy nvlink_down: True is not one of block, warn, ignore"),
    ({"nvlink_down": None}, "None is not one of block, warn, ignore"),
    (["nvlink_down"], "must be a mapping of finding kind to block, warn or ignore; got list"),
    ("block", "got str"),
])
def test_bad_policies_are_refused_clearly(policy, words):
    with pytest.raises(health.HealthPolicyError) as refused:
        health.verdict([], policy)
    assert words in str(refused.value)


def test_findings_do_not_change_the_read():
    gpu = _set(healthy_gpu(), ("remapped_rows", "pending"), True)
    data = read(gpu, readable=True, lines=[XID_79])
    before = copy.deepcopy(data)
    health.summary(data, {"xid_fatal": "warn"})
    assert data == before


def test_summary_reports_the_kernel_log_and_the_gpus():
    got = health.summary(read(healthy_gpu(), readable=True, source="journalctl", lines=[XID_13]))
    assert got["kernel_log"] == {"readable": True, "source": "journalctl", "reason": None, "xid_lines": 1}
    assert got["gpus"][0]["index"] == 3 and got["verdict"] == "warn"


def test_a_fatal_sxid_is_a_node_finding_naming_the_switch_and_the_code_and_a_non_fatal_one_is_none():
    """issue 50: NVSwitch SXid lines (a sweep's kernel log) - the fatal ones block the node (once per switch and code,
    with how many times they were logged), the gate names no GPU and no GPU bus id for them, the non-fatal ones and
    the detail lines make no finding; the policy can make them warn."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_marks import verdict_errors
    lines = [XID_13,
             "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
             "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 24007, Fatal, Link 29 sourcetrack timeout error",
             "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 24007, Severity 1 Engine instance 29 Sub-engine instance 00",
             "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 24007, Fatal, Link 30 sourcetrack timeout error",
             "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 22003, Fatal, Link 2 Minion Halt"]
    result = health.summary(read(healthy_gpu(), readable=True, source="journalctl", lines=lines))
    sxid = [f for f in result["findings"] if f["kind"] == "sxid_fatal"]
    assert [(f["gpu"], f["pci_bus_id"], f["sxid"]["switch"], f["sxid"]["code"], f["sxid"]["scope"]) for f in sxid] == [
        (None, None, "nvidia-nvswitch1", 24007, "partition"), (None, None, "nvidia-nvswitch0", 22003, "fabric")]
    first, second = sxid[0]["summary"], sxid[1]["summary"]
    assert first.startswith("node: a fatal NVSwitch SXid since boot (nvidia-nvswitch1 (PCI:0000:84:00.0) SXid 24007: ")
    assert "(logged 2 times)" in first and "reboot the node" in first
    assert "nvidia-nvswitch0 (PCI:0000:05:00.0) SXid 22003" in second and "whole NVSwitch fabric" in second
    assert result["blocking"] == [first, second] and result["kernel_log"]["xid_lines"] == 1
    gate = result["gate"]
    assert [(f["gpu"], f["bus_id"], f["kind"]) for f in gate["blocking"]] == [(None, None, "sxid_fatal")] * 2
    assert verdict_errors(dict((k, gate[k]) for k in ("healthy", "blocking", "warnings"))) == []
    assert not [f for f in result["findings"] if "22013" in f["summary"]]               # non-fatal: no finding
    relaxed = health.summary(read(healthy_gpu(), readable=True, lines=lines), {"sxid_fatal": "warn"})
    assert relaxed["healthy"] is True and len(relaxed["warnings"]) == 3                  # the two SXids, the Xid 13


def test_clock_event_bits_decode_and_encode():
    decoded = health.decode_clock_events(0x1 | 0x8 | 0x40 | 0x800)
    assert decoded == {"mask": "0x0000000000000849",
                       "reasons": ["gpu_idle", "hw_slowdown", "hw_thermal_slowdown", "bit_0x800"]}
    assert health.encode_clock_events(["gpu_idle", "hw_slowdown", "hw_thermal_slowdown"]) == 0x49


def test_the_gate_form_is_what_node_health_takes_and_names_the_gpus_a_reset_clears():
    """summary's ``gate``: node_health's verdict (its own check accepts it), each finding with GPU, bus id, kind and the
    summary line; an Xid on a bus id of no GPU keeps its line but no bus id node_health would refuse; reset_clears only
    the GPUs with a blocking finding that a reset clears."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health._health_marks import verdict_errors
    remap = healthy_gpu(3)
    remap["remapped_rows"]["pending"] = True
    narrow = healthy_gpu(5, "00000000:4a:00.0")
    narrow["pcie"]["width"]["current"] = 8
    corrected = healthy_gpu(6, "00000000:4b:00.0")
    corrected["ecc"]["volatile"]["corrected"] = 2
    result = health.summary(read(remap, narrow, corrected, readable=True, source="journalctl",
                                 lines=["NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus."]))
    gate = result["gate"]
    assert verdict_errors(dict((k, gate[k]) for k in ("healthy", "blocking", "warnings"))) == []
    assert gate["healthy"] is False and gate["reset_clears"] == [3]
    assert [(f["gpu"], f["bus_id"], f["kind"]) for f in gate["blocking"]] == [
        (3, BUS, "row_remap_pending"), (5, "00000000:4a:00.0", "pcie_width_degraded"), (None, None, "xid_fatal")]
    assert [f["message"] for f in gate["blocking"]] == result["blocking"]
    assert [(f["gpu"], f["kind"]) for f in gate["warnings"]] == [(6, "ecc_corrected")]
    # the policy decides what blocks, so what a reset would clear too
    gate = health.summary(read(remap), {"row_remap_pending": "warn"})["gate"]
    assert gate["healthy"] is True and gate["reset_clears"] == [] and gate["warnings"][0]["kind"] == "row_remap_pending"


def _bus(*gpus, **pci):
    """A read's "pci": the GPUs sysfs shows (bus id, name, bound driver)."""
    out = {"readable": True, "root": "/", "gpus": [{"bus_id": b, "name": "NVIDIA H100 80GB HBM3", "bound_driver": d}
                                                   for b, d in gpus]}
    out.update(pci)
    return out


def test_a_gpu_the_bus_shows_and_nvml_does_not_list_blocks_naming_its_bus_id_and_the_fix():
    """NVML's 00000000:47:00.0 is sysfs's 0000:47:00.0 (domain width and case apart): only 0000:b7:00.0 is missing."""
    data = read(healthy_gpu(3, "00000000:47:00.0"), healthy_gpu(4, "00000000:B7:00.0"))
    data["pci"] = _bus(("0000:47:00.0", "nvidia"), ("0000:b7:00.0", "nvidia"), ("0000:c7:00.0", "nvidia"))
    result = health.verdict(health.findings(data))
    assert [(f["kind"], f["gpu"], f["pci_bus_id"], f["action"]) for f in result["findings"]] == [
        ("gpu_missing", None, "0000:c7:00.0", "block")]
    assert result["blocking"] == [
        "GPU (PCI 0000:c7:00.0): on the PCI bus but not listed by NVML (NVIDIA H100 80GB HBM3, driver nvidia) - it "
        "fell off the bus or failed to initialise (look for its Xid 79 or an RmInitAdapter failure in the kernel "
        "log): reboot, and reseat or service the GPU if it stays missing; the gate clears when the next run finds it healthy"]
    assert health.missing_gpus(data) == [{"bus_id": "0000:c7:00.0", "name": "NVIDIA H100 80GB HBM3",
                                          "bound_driver": "nvidia"}]
    gate = health.gate(result["findings"])
    assert gate["blocking"][0]["bus_id"] == "0000:c7:00.0" and gate["reset_clears"] == []


@pytest.mark.parametrize("driver,words", [
    (None, "no driver is bound to it, so the nvidia driver did not take it"),
    ("vfio-pci", "it is bound to vfio-pci, not nvidia: bind it to nvidia, or where it is passed to a VM on purpose set "
                 "gpu_missing to warn or ignore"),
])
def test_the_fix_of_a_missing_gpu_follows_its_driver(driver, words):
    data = read(healthy_gpu(0, "00000000:19:00.0"))
    data["pci"] = _bus(("0000:19:00.0", "nvidia"), ("0000:47:00.0", driver))
    (found,) = health.findings(data)
    assert words in found["summary"] and found["summary"].startswith("GPU (PCI 0000:47:00.0)")
    assert ("no driver bound" if driver is None else "driver vfio-pci") in found["detail"]


def test_no_gpu_is_missing_where_the_bus_was_not_read_or_could_not_be():
    for pci in (None, _bus(("0000:c7:00.0", "nvidia"), readable=False, reason="cannot list")):
        data = read(healthy_gpu())
        data["pci"] = pci
        assert health.findings(data) == [] and health.missing_gpus(data) == []
    assert health.summary(dict(read(healthy_gpu()), pci=None))["pci"] is None
    unread = health.summary(dict(read(healthy_gpu()), pci=_bus(readable=False, reason="cannot list")))
    assert unread["pci"] == {"readable": False, "reason": "cannot list", "gpus": []}


def test_a_lost_gpu_without_a_bus_id_is_not_also_missing():
    """NVML lists 2 GPUs, one lost before its PCI info was read: of the bus's 2, the unmatched one is that lost GPU;
    with a third on the bus and not in NVML, both unmatched ones are reported (which one is lost is not known)."""
    lost = {"index": 1, "lost": True, "error": "GPU is lost"}
    data = read(healthy_gpu(0, "00000000:19:00.0"), lost)
    data["pci"] = _bus(("0000:19:00.0", "nvidia"), ("0000:47:00.0", "nvidia"))
    assert kinds(health.findings(data)) == ["gpu_lost"]
    data["pci"]["gpus"].append({"bus_id": "0000:c7:00.0", "name": None, "bound_driver": "nvidia"})
    found = health.findings(data)
    assert kinds(found) == ["gpu_lost", "gpu_missing", "gpu_missing"]
    assert "a GPU the catalog does not name" in found[2]["summary"]


FELL_OFF = "[ 9.1] NVRM: Xid (PCI:0000:47:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_the_xid_of_a_missing_gpu_is_that_gpus_and_comes_right_after_its_missing_finding():
    """The GPU at 0000:47:00.0 fell off the bus: NVML lists GPUs 0 and 1 only, the bus still shows it, and the kernel
    log has its Xid 79 (with another on a bus no GPU has). Its Xid names it (not "no GPU of this node has that bus
    id"), carries its bus id as gpu_missing does, and follows its gpu_missing; the bus of no GPU comes last."""
    data = read(healthy_gpu(0, "00000000:19:00.0"), _set(healthy_gpu(1, "00000000:b7:00.0"),
                                                         ("remapped_rows", "pending"), True),
                readable=True, source="journalctl",
                lines=["NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus.", FELL_OFF, FELL_OFF])
    data["pci"] = _bus(("0000:19:00.0", "nvidia"), ("0000:47:00.0", "nvidia"), ("0000:b7:00.0", "nvidia"))
    result = health.summary(data)
    assert [(f["kind"], f["gpu"], f["pci_bus_id"]) for f in result["findings"]] == [
        ("row_remap_pending", 1, "00000000:b7:00.0"), ("gpu_missing", None, "0000:47:00.0"),
        ("xid_fatal", None, "0000:47:00.0"), ("xid_fatal", None, "0000:99:00")]
    xid = result["findings"][2]
    assert xid["summary"].startswith("GPU (PCI 0000:47:00.0): a fatal Xid since boot (Xid 79 ROBUST_CHANNEL_GPU_HAS")
    assert "(the GPU at that bus, which NVML no longer lists) (logged 2 times)" in xid["summary"]
    assert "no GPU of this node" not in xid["summary"] and xid["times"] == 2
    assert "(no GPU of this node has that bus id)" in result["findings"][3]["summary"]
    # the gate hands node_health both findings of the GPU under its bus id, in this order
    assert [(f["gpu"], f["bus_id"], f["kind"]) for f in result["gate"]["blocking"]] == [
        (1, "00000000:b7:00.0", "row_remap_pending"), (None, "0000:47:00.0", "gpu_missing"),
        (None, "0000:47:00.0", "xid_fatal"), (None, None, "xid_fatal")]


def test_the_run_and_the_node_condition_read_the_findings_in_one_order():
    """The run's failure message joins the gate's blocking messages (roles/gpu_node/tasks/steps.yml); node_health's
    condition numbers them and takes its reason and taint from the first: the same order, whatever the findings."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_marks as hm
    data = read(healthy_gpu(0, "00000000:19:00.0"), readable=True, source="journalctl", lines=[FELL_OFF])
    data["pci"] = _bus(("0000:19:00.0", "nvidia"), ("0000:47:00.0", "nvidia"))
    gate = health.summary(data)["gate"]
    run_message = "; ".join(f["message"] for f in gate["blocking"])
    verdict = hm.check_verdict(dict((k, gate[k]) for k in ("healthy", "blocking", "warnings")))
    plan = hm.plan({"metadata": {"name": "n", "resourceVersion": "1"}, "spec": {}, "status": {}}, verdict, "me", "t")
    condition = plan["status_patch"]["status"]["conditions"][0]
    assert condition["reason"] == "GpuMissing" and plan["after"]["taints"][0]["value"] == "gpu_missing"
    assert [f["kind"] for f in verdict["blocking"]] == ["gpu_missing", "xid_fatal"]
    assert condition["message"] == "2 GPU health findings block this node: [1] %s; [2] %s" % tuple(
        f["message"] for f in gate["blocking"])
    assert run_message.index("not listed by NVML") < run_message.index("a fatal Xid")


def test_the_xid_on_the_bus_of_a_gpu_nvml_lists_only_as_lost_says_so():
    """NVML lists GPU 1 lost before its PCI info was read; the bus's unmatched 0000:47:00.0 is that GPU (no gpu_missing):
    its Xid 79 is that GPU's, under its bus id, not a bus of no GPU."""
    lost = {"index": 1, "lost": True, "error": "GPU is lost"}
    data = read(healthy_gpu(0, "00000000:19:00.0"), lost, readable=True, source="journalctl", lines=[FELL_OFF])
    data["pci"] = _bus(("0000:19:00.0", "nvidia"), ("0000:47:00.0", "nvidia"))
    found = health.findings(data)
    assert [(f["kind"], f["gpu"], f["pci_bus_id"]) for f in found] == [
        ("gpu_lost", 1, None), ("xid_fatal", None, "0000:47:00.0")]
    assert found[1]["summary"].startswith("GPU (PCI 0000:47:00.0): a fatal Xid")
    assert "(the GPU at that bus, which NVML lists only as a lost GPU without its bus id)" in found[1]["summary"]
