"""The health gate's remediation planner (_health_reset): which GPUs a reset would clear, and which may be reset."""
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_reset as hr
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import findings, verdict

BUS = "00000000:47:00.0"


def _decided(gpus, policy=None):
    health = {"gpus": gpus, "kernel_log": {"readable": True, "lines": []}}
    return verdict(findings(health), policy)["findings"]


def _gpu(index, **health):
    entry = {"index": index, "pci_bus_id": "00000000:%02X:00.0" % (0x40 + index), "lost": False,
             "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}}
    entry["remapped_rows"].update(health)
    return entry


def _facts(index, **over):
    out = {"index": index, "pci_bus_id": "00000000:%02X:00.0" % (0x40 + index), "mig_mode_current": "Disabled",
           "reset_supported": True, "processes": []}
    out.update(over)
    return out


def test_only_blocking_findings_a_reset_clears_make_a_candidate():
    decided = _decided([_gpu(0), _gpu(1, pending=True), _gpu(2, failure=True), _gpu(3, pending=True, failure=True)])
    assert hr.candidates(decided) == {1: ["row_remap_pending"], 3: ["row_remap_pending"]}
    assert hr.candidates(decided, only={3}) == {3: ["row_remap_pending"]}
    # a policy that only warns on a pending remap gives no reason to reset
    assert hr.candidates(_decided([_gpu(1, pending=True)], {"row_remap_pending": "warn"})) == {}


def test_an_idle_gpu_is_reset_and_a_busy_one_is_not_with_the_holders_named():
    decided = _decided([_gpu(1, pending=True), _gpu(2, pending=True), _gpu(3, pending=True)])
    holder = {"pid": 4242, "command": "python3 train.py", "paths": ["/dev/nvidia2", "/dev/nvidiactl"],
              "pod_uid": None, "container_id": None, "unit": None}
    own = {"pid": 99, "command": "python3 ansible", "paths": ["/dev/nvidia1", "/dev/nvidiactl"],
           "pod_uid": None, "container_id": None, "unit": None}
    shared_only = {"pid": 7, "command": "nvidia-persistenced", "paths": ["/dev/nvidiactl"],
                   "pod_uid": None, "container_id": None, "unit": None}
    plan = hr.plan(decided, {1: _facts(1), 2: _facts(2), 3: _facts(3, processes=[{"pid": 555, "name": "vllm"}])},
                   {1: {"holders": [own, shared_only]}, 2: {"holders": [holder]}, 3: {"holders": []}}, own_pid=99)
    assert [(d["index"], d["reset"]) for d in plan] == [(1, True), (2, False), (3, False)]
    assert plan[0]["reason"] is None and plan[0]["clears"] == ["row_remap_pending"]
    assert plan[1]["reason"].startswith("GPU 2 (00000000:42:00.0) not reset - in use: PID 4242 python3 train.py holds")
    assert "PID 555 vllm" in plan[2]["reason"]


def test_mig_enabled_passthrough_and_unreadable_gpus_are_not_reset():
    decided = _decided([_gpu(0, pending=True), _gpu(1, pending=True), _gpu(2, pending=True)])
    plan = hr.plan(decided, {0: _facts(0, mig_mode_current="Enabled"), 1: _facts(1, reset_supported=False)}, {})
    assert [d["reset"] for d in plan] == [False, False, False]
    assert "MIG mode is enabled" in plan[0]["reason"]
    assert "exposes no GPU reset" in plan[1]["reason"]
    assert plan[2]["reason"] == "GPU 2 not reset - NVML could not read it"


def test_the_diff_predicts_what_the_reset_leaves():
    decided = _decided([_gpu(1, pending=True, failure=True), _gpu(2, pending=True)])
    plan = hr.plan(decided, {1: _facts(1), 2: _facts(2, processes=[{"pid": 1, "name": "x"}])}, {})
    assert hr.blocking_view(decided) == {"GPU 1": ["row_remap_pending", "row_remap_failure"],
                                         "GPU 2": ["row_remap_pending"]}
    assert hr.predicted(decided, plan) == {"GPU 1": ["row_remap_failure"], "GPU 2": ["row_remap_pending"]}
