"""The fleet health sweep's remediation with consent (health.yml, issue 50 part 2) on a fake cluster of three simulated
one-GPU nodes: the sweep resets an idle GPU's pending row remap and releases the node after two healthy sweeps, does
not reset a GPU a process holds, and stops at the cap with the NeedsOperator condition. Nothing is timed."""
import json

import pytest
import yaml

from tests.integration.test_health_sweep import Fleet
from tests.support.rigs import snapshot

pytestmark = [pytest.mark.slow]

NODES = ["remedy-0", "remedy-1", "remedy-2"]
RECORD = "gpuops.nvidia/health-remediation"
REMEDIATION = "GpuopsNvidiaGpuRemediation"
# every node may be quarantined at once (3 of 3), and each consents to a GPU reset
SETTINGS = {"gpuops_health_breaker_percent": 100, "gpu_node_health_remediation": "reset"}


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path, nodes=NODES)
    try:
        yield f
    finally:
        f.stop()


def attempts(fleet, name):
    text = (fleet.node(name)["metadata"].get("annotations") or {}).get(RECORD)
    return None if text is None else json.loads(text)["attempts"]


def remediation_condition(fleet, name):
    found = [c for c in fleet.node(name)["status"].get("conditions") or [] if c["type"] == REMEDIATION]
    return found[0] if found else None


def resets(fleet, name):
    return [c["args"]["index"] for c in fleet.sims[name].raw_state()["call_log"] if c.get("call") == "reset_gpu"]


def test_reset_with_consent_idle_only_released_after_two_healthy_sweeps_and_capped(fleet):
    idle, busy, stuck = NODES
    for name in NODES:
        fleet.sims[name].inject_health(0, "row_remap_pending")
    fleet.sims[busy].add_process(0, 4242, "python", used_memory_mib=1024)

    # bad input: refused naming what is valid, before any node is read (no read task ran); the nodes' objects, their
    # simulated GPUs and every file under the lab's state (cursors, reports) exactly as they were
    before = (snapshot(fleet.state), dict((n, fleet.node(n)) for n in NODES), fleet.api.writes(dry_run=False))
    bad = fleet.sweep(**dict(SETTINGS, gpu_node_health_remediation="yes"))
    assert bad.rc != 0 and "none, reset, reboot" in str(bad.proc.stdout), bad
    assert bad.task("read the GPUs' health") == {}
    capped = fleet.sweep(**dict(SETTINGS, gpuops_health_remediation_max_attempts=0))
    # (the errors are computed once; the refusal runs on every host, each with the same message)
    refused = capped.task("refuse invalid settings")
    assert capped.rc != 0 and sorted(refused) == NODES and all(
        "remediation_max_attempts must be a whole number from 1 to 100, got 0" in r["msg"] for r in refused.values()), \
        capped
    assert capped.task("read the GPUs' health") == {}
    assert (snapshot(fleet.state), dict((n, fleet.node(n)) for n in NODES), fleet.api.writes(dry_run=False)) == before

    # check mode: says it would reset, records and resets nothing
    check = fleet.sweep(check=True, **SETTINGS)
    assert check.rc == 0, check
    assert check.rows()[idle]["actions"] == ["quarantined", "would reset GPU 0 (attempt 1)"]
    assert [n for n in NODES if fleet.mutations(n)] == [] and fleet.api.writes(dry_run=False) == []

    # sweep 1: all three quarantined; the idle GPUs reset (each attempt recorded first), the busy one refused
    first = fleet.sweep(**SETTINGS)
    assert first.rc == 0, first
    assert fleet.quarantined() == NODES
    assert resets(fleet, idle) == [0] and resets(fleet, stuck) == [0] and resets(fleet, busy) == []
    rows = first.rows()
    assert rows[idle]["actions"] == ["quarantined", "GPU 0 reset (attempt 1): row_remap_pending cleared"]
    assert rows[busy]["actions"][1].startswith("attempt 1: GPU 0 (") and "PID 4242 python" in rows[busy]["actions"][1]
    assert [len(attempts(fleet, n)) for n in NODES] == [1, 1, 1]
    # the stuck GPU's remap is pending again (a reset that does not take)
    fleet.sims[stuck].inject_health(0, "row_remap_pending")

    # sweep 2: the idle node's first healthy sweep; the other two tried a second time
    second = fleet.sweep(**SETTINGS)
    assert second.rc == 0, second
    assert second.rows()[idle]["actions"] == ["healthy sweep 1 of 2"]
    assert resets(fleet, idle) == [0] and resets(fleet, stuck) == [0, 0] and resets(fleet, busy) == []
    assert [len(attempts(fleet, n)) for n in NODES] == [1, 2, 2]
    assert remediation_condition(fleet, stuck) is None
    fleet.sims[stuck].inject_health(0, "row_remap_pending")

    # sweep 3: the idle node released; the other two at the cap: kept quarantined, NeedsOperator, no third reset
    third = fleet.sweep(**SETTINGS)
    assert third.rc == 0, third
    assert fleet.quarantined() == [busy, stuck]
    assert third.rows()[idle]["state"] == "released"
    assert resets(fleet, stuck) == [0, 0] and resets(fleet, busy) == [] and resets(fleet, idle) == [0]
    assert [len(attempts(fleet, n)) for n in NODES] == [1, 2, 2]
    for name in (busy, stuck):
        condition = remediation_condition(fleet, name)
        assert (condition["status"], condition["reason"]) == ("False", "NeedsOperator"), condition
        assert condition["message"].startswith("2 remediation attempt(s) in 24 h") and \
            "row_remap_pending on GPU 0" in condition["message"]
        assert third.rows()[name]["actions"][1].startswith("needs an operator")
    assert remediation_condition(fleet, idle) is None
    # the GPUs were changed only by those resets
    assert [fleet.mutations(n) for n in NODES] == [["reset_gpu"], [], ["reset_gpu", "reset_gpu"]]


def test_reboot_with_consent_drains_and_reboots_and_reset_consent_does_not(tmp_path):
    """A lost GPU needs a reboot: the node whose group consents to `reboot` is drained and rebooted (the simulator's
    boot), healthy again and released after two healthy sweeps; the node that consents only to `reset` is left
    quarantined, its row saying why. Per-host consent, from the inventory."""
    rebooted, reset_only = "boot-0", "boot-1"
    fleet = Fleet(tmp_path, nodes=[rebooted, reset_only])
    try:
        with open(fleet.inventory) as handle:
            inventory = yaml.safe_load(handle)
        hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
        hosts[rebooted]["gpu_node_health_remediation"] = "reboot"
        hosts[reset_only]["gpu_node_health_remediation"] = "reset"
        with open(fleet.inventory, "w") as handle:
            yaml.safe_dump(inventory, handle)
        for name in (rebooted, reset_only):
            fleet.sims[name].inject_health(0, "lost")
        boots = dict((n, fleet.sims[n].raw_state()["boot_id"]) for n in (rebooted, reset_only))
        limit = {"gpuops_health_breaker_percent": 100}

        first = fleet.sweep(**limit)
        assert first.rc == 0, first
        rows = first.rows()
        assert rows[rebooted]["actions"] == ["quarantined", "drained and rebooted the node (attempt 1)"]
        assert rows[reset_only]["actions"] == [
            "quarantined", "not remediated: gpu_lost needs a node reboot, and gpu_node_health_remediation is reset "
                           "(reboot allows it)"]
        assert fleet.sims[rebooted].raw_state()["boot_id"] == boots[rebooted] + 1
        assert fleet.sims[reset_only].raw_state()["boot_id"] == boots[reset_only]
        assert attempts(fleet, rebooted) is not None and len(attempts(fleet, rebooted)) == 1
        assert attempts(fleet, reset_only) is None
        # (drained: the eviction listing ran against the node; it has no GPU pods to evict)
        assert [r for r in fleet.api.requests if r["method"] == "GET" and r["path"] == "/api/v1/pods"]

        fleet.sweep(**limit)
        third = fleet.sweep(**limit)
        assert third.rc == 0, third
        assert fleet.quarantined() == [reset_only]
        assert third.rows()[rebooted]["state"] == "released"
        assert fleet.sims[rebooted].raw_state()["boot_id"] == boots[rebooted] + 1      # one reboot only
    finally:
        fleet.stop()
