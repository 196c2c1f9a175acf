"""A fault at every mutating step of a whole site.yml converge, then a re-run ends in the declared state.

The steps are counted on a clean converge of the small fleet (tests/reliability/site_env.py): every mutating NVML
call on each node (the simulator's call log), every write the API server receives (helm's own included; dry runs
are not changes), every helm upgrade/rollback/uninstall, every validation by containerd (`config dump`). Then, for
each step, on a fresh fleet:

1. the fault is armed: the NVML call fails (UNKNOWN, IN_USE or INSUFFICIENT_RESOURCES in turn), the API server
   answers 500, helm or containerd exits 1;
2. site.yml runs and must fail, or (if the step was retried) end in the declared state;
3. nothing is corrupt: every state file loads, every file is either its old or its new whole self, TOML parses,
   every backup is the config it replaced, no node is left cordoned without our mark (which the next run releases);
4. site.yml runs again without the fault and must succeed and end exactly where the clean converge ended: GPUs,
   files, node labels, schedulability (no node cordoned), the device plugin's objects and a deployed helm release.

The steps of each kind are spread over shards so that pytest-xdist runs them on both cores.
"""
import os

import pytest

from tests.reliability.site_env import MIG_NODE, MPS_NODE, SmallSite, check_integrity, declared, differences
from tests.integration.site_helpers import HELM

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

NVML_ERRORS = ("UNKNOWN", "IN_USE", "INSUFFICIENT_RESOURCES")
SHARDS = {"nvml": 3, "api": 4, "tools": 1}


def test_the_reference_converge_has_every_kind_of_step(reference):
    steps, state = reference["steps"], reference["state"]
    # all-balanced on one H200: MIG mode + 4 GPU instances + 4 compute instances; the MPS node: its compute mode
    assert steps[MIG_NODE] == 9 and steps[MPS_NODE] == 1, steps
    assert steps["helm"] == 1 and steps["containerd"] == 4, steps   # containerd: current config and candidate
    # helm's objects and release records, the RuntimeClass, both nodes' labels, the cordon and the uncordon, the eviction
    assert steps["api"] >= 8, steps
    assert state[MIG_NODE]["gpus"][0]["devices"] == [("1g.18gb", 2), ("1g.18gb", 3), ("2g.35gb", 0), ("3g.71gb", 4)]
    assert state[MPS_NODE]["gpus"][0]["mode"] == "Default"
    assert not state[MIG_NODE]["unschedulable"] and state[MIG_NODE]["cordon_mark"] is None
    assert state["release"] == [("nvdp", "deployed")], state["release"]


def _cases(reference, kind, shard):
    steps = reference["steps"]
    if kind == "nvml":
        cases = [("nvml", node, i) for node in (MIG_NODE, MPS_NODE) for i in range(1, steps[node] + 1)]
    elif kind == "api":
        cases = [("api", None, i) for i in range(1, steps["api"] + 1)]
    else:
        cases = [(tool, None, i) for tool in ("helm", "containerd") for i in range(1, steps[tool] + 1)]
    return cases[shard::SHARDS[kind]]


def _arm(site, case):
    kind, node, i = case
    if kind == "nvml":
        site.backend(node).inject_fault(i, NVML_ERRORS[i % len(NVML_ERRORS)])
    elif kind == "api":
        site.api.fail_nth_write(i)
    else:
        site.set_tool_fault(kind, i)


def _fired(site, case):
    kind, node, i = case
    if kind == "nvml":
        return site.backend(node).raw_state()["faults"] == []
    if kind == "api":
        return any(r.get("injected") for r in site.api.requests)
    return site.tool_calls(kind) >= i


def _disarm(site, case):
    if case[0] in ("helm", "containerd"):
        site.set_tool_fault(case[0], 0)


@pytest.mark.parametrize("kind,shard", [(k, s) for k, n in sorted(SHARDS.items()) for s in range(n)])
def test_fault_at_every_step_then_rerun_converges(kind, shard, reference, tmp_path):
    want = reference["state"]
    report = []
    for case in _cases(reference, kind, shard):
        site = SmallSite(tmp_path / ("%s-%s-%d" % (case[0], case[1] or "all", case[2])))
        try:
            _arm(site, case)
            first = site.run()
            assert _fired(site, case), (case, "the fault was never reached", first)
            if first.rc == 0:
                # the step was retried and the run still converged: then it must be exactly the declared state
                assert not differences(declared(site), want), (case, differences(declared(site), want), first)
                report.append((case, "absorbed"))
                continue
            assert first.failures(), (case, first)
            behind = check_integrity(site, want)
            _disarm(site, case)
            second = site.run()
            assert second.rc == 0, (case, second)
            assert not differences(declared(site), want), (case, differences(declared(site), want))
            report.append((case, "failed, then converged (%d file(s) had stayed as before)" % len(behind)))
        finally:
            site.close()
    assert report, "no step of this kind in the reference converge"
    print("\n".join("%s: %s" % r for r in report))
