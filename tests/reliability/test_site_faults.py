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

Each step is its own test, so that pytest-xdist spreads them over the cores; STEPS lists them and the first test
checks that it is exactly what the clean converge makes. `make test` runs a fixed sample of the steps (the first and
last of each kind, every eighth between: site_env.sampled); GPUOPS_RELIABILITY=full runs every one.
"""
import os

import pytest

from tests.reliability.site_env import (
    MIG_NODE, MPS_NODE, SmallSite, check_integrity, declared, differences, sampled)
from tests.integration.site_helpers import HELM

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

NVML_ERRORS = ("UNKNOWN", "IN_USE", "INSUFFICIENT_RESOURCES")
# The mutating steps of a clean converge of the small fleet:
# - MIG node: all-balanced on one H200 = MIG mode + 4 GPU instances + 4 compute instances; MPS node: its compute mode;
# - API writes: the cluster lock's namespace and Lease (taken, released; its renewals are not steps), the fleet's
#   profile record, helm's release records and objects, the RuntimeClass, both nodes' labels, and on each node (the
#   MIG change; the MPS node's first MPS profile) the cordon, the pause of its GPU pods, their resume, the uncordon,
#   and the eviction;
# - one helm upgrade --install; containerd validates the current config and the candidate on each node, then, after
#   writing, the written config and its candidate again (containerd_runtime's check that the written state is a
#   fixed point before it records it as verified; a fault there leaves no record, the converge still succeeds).
STEPS = {MIG_NODE: 9, MPS_NODE: 1, "api": 24, "helm": 1, "containerd": 8}
ALL_CASES = ([("nvml", node, i) for node in (MIG_NODE, MPS_NODE) for i in range(1, STEPS[node] + 1)]
             + [(kind, None, i) for kind in ("api", "helm", "containerd") for i in range(1, STEPS[kind] + 1)])
# make test: a fixed sample of the steps (site_env.sampled); GPUOPS_RELIABILITY=full: every step
CASES = [c for c in ALL_CASES if sampled(c[2], STEPS[c[1] or c[0]])]


def test_the_reference_converge_has_every_kind_of_step(reference):
    steps, state = reference["steps"], reference["state"]
    assert steps == STEPS, ("the clean converge now makes these mutating steps: update STEPS so that a fault is "
                            "injected at every one of them", steps)
    assert state[MIG_NODE]["gpus"][0]["devices"] == [("1g.18gb", 2), ("1g.18gb", 3), ("2g.35gb", 0), ("3g.71gb", 4)]
    assert state[MPS_NODE]["gpus"][0]["mode"] == "Default"
    assert not state[MIG_NODE]["unschedulable"] and state[MIG_NODE]["cordon_mark"] is None
    assert state["release"] == [("nvdp", "deployed")], state["release"]


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


@pytest.mark.parametrize("case", CASES, ids=["%s-%s-%d" % (k, (n or "all").replace("lab-", ""), i)
                                             for k, n, i in CASES])
def test_fault_at_a_step_then_rerun_converges(case, reference, tmp_path):
    want = reference["state"]
    site = SmallSite(tmp_path / "fleet")
    try:
        _arm(site, case)
        first = site.run()
        assert _fired(site, case), (case, "the fault was never reached", first)
        if first.rc == 0:
            # the step was retried and the run still converged: then it must be exactly the declared state
            assert not differences(declared(site), want), (case, differences(declared(site), want), first)
            print("%s: absorbed (retried), declared state reached" % (case,))
            return
        assert first.failures(), (case, first)
        behind = check_integrity(site, want)
        _disarm(site, case)
        second = site.run()
        assert second.rc == 0, (case, second)
        assert not differences(declared(site), want), (case, differences(declared(site), want))
        print("%s: failed, then converged (%d file(s) had stayed as before)" % (case, len(behind)))
    finally:
        site.close()
