"""How many running MIG devices a layout change destroys: our planner vs mig-parted's rule, vs the minimum.

mig-parted destroys every instance of a GPU whose MIG-device multiset differs in any way from the wanted one
(reference/mig.md 0.1, 1.5). Our planner keeps what it can. For a corpus of layout transitions on 7-slice GPUs
(A100-40GB, H200), this prints, per corpus part: transitions, compute instances (= MIG devices) destroyed by
mig-parted's rule and by our plan, how often ours equals the brute-force minimum (every final state that
realises the target, every distribution of its compute instances), and the planner's time per GPU.

A second table covers whole 8-GPU nodes whose MIG *mode* also changes: MIG devices destroyed and GPUs reset by our
modules (mig_mode with allow_reset, then mig_layout, run for real against the simulator, counted from its call log)
versus mig-parted's rules (reference/mig.md 1.5: when any GPU's mode differs, ApplyMigMode clears every instance on
every MIG-enabled GPU, even those whose mode is right, and if any change is left pending it resets *all* GPUs;
ApplyMigConfig then destroys everything on a GPU whose device multiset differs).

Usage: python bench/mig_disruption.py [--random N] [--node-random N] [--seed S]
"""
import argparse
import itertools
import os
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "module_utils"))

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import execute_plan  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import (  # noqa: E402
    MigLayoutError,
    named_layout_for,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import (  # noqa: E402
    current_devices,
    plan_gpu,
    validate_gpu_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import Catalog  # noqa: E402
from mig_model import brute_force_best, gpu_facts, simulated  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NvmlError  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import mig_layout, mig_mode  # noqa: E402
from tests.support.modrun import run_main_ok  # noqa: E402

MODELS = ["A100-SXM4-40GB", "H200"]
NAMED = ["all-balanced", "all-1g", "all-2g", "all-3g", "all-7g"]


def state_from_devices(model, devices):
    """A GPU in the state our planner creates for ``devices`` from empty (the usual starting point)."""
    m = simulated([model])
    plan = plan_gpu(m.read_all()["gpus"][0], {"mig_enabled": True, "mig_devices": devices})
    execute_plan(m, 0, plan["operations"])
    return m.read_all()["gpus"][0]


def random_state(model, rng):
    m = simulated([model])
    cat = Catalog(m.read_gpu(0))
    profs = sorted(cat.gi_by_name.values(), key=lambda p: p["id"])
    for _attempt in range(rng.randint(1, 7)):
        prof = rng.choice(profs)
        try:
            gi_id = m.create_gpu_instance(0, prof["id"], rng.choice(prof["placements"])["start"])
        except NvmlError:
            continue
        for _attempt in range(rng.randint(1, 2)):
            try:
                m.create_compute_instance(0, gi_id, rng.choice(prof["ci_profiles"])["id"])
            except NvmlError:
                pass
    gpu = m.read_all()["gpus"][0]
    # drop GIs without compute instances: a usable state has none
    gpu["gpu_instances"] = [gi for gi in gpu["gpu_instances"] if gi["compute_instances"]]
    return gpu


def random_pairs(model, rng, count, p_keep):
    """Random current states; targets keep each current MIG device with probability p_keep, then add random
    devices that still fit (validated), at most 7 devices (brute force stays small)."""
    pairs = []
    while len(pairs) < count:
        gpu = random_state(model, rng)
        keep = {}
        for name, n in current_devices(gpu).items():
            k = sum(rng.random() < p_keep for _attempt in range(n))
            if k:
                keep[name] = k
        names = Catalog(gpu).valid_names()
        for _attempt in range(rng.randint(0, 3)):
            cand = dict(keep)
            name = rng.choice(names)
            cand[name] = cand.get(name, 0) + 1
            try:
                validate_gpu_layout(gpu, {"mig_enabled": True, "mig_devices": cand})
                keep = cand
            except MigLayoutError:
                pass
        if sum(keep.values()) <= 7:
            pairs.append((gpu, keep))
    return pairs


def measure(pairs):
    rows = {"transitions": 0, "changed": 0, "cis_before": 0, "baseline": 0, "ours": 0, "minimum": 0,
            "ours_is_min": 0, "ours_zero_baseline_not": 0, "plan_s": 0.0, "plan_max_s": 0.0}
    for gpu, target in pairs:
        cur = current_devices(gpu)
        n_cis = sum(cur.values())
        baseline = 0 if cur == target else n_cis
        t0 = time.perf_counter()
        plan = plan_gpu(gpu, {"mig_enabled": True, "mig_devices": target}, force=True)
        dt = time.perf_counter() - t0
        ours = sum(1 for d in plan["destroyed"] if d["kind"] == "compute_instance")
        best = brute_force_best(gpu, target)
        minimum = n_cis - best[1]
        rows["transitions"] += 1
        rows["changed"] += cur != target
        rows["cis_before"] += n_cis
        rows["baseline"] += baseline
        rows["ours"] += ours
        rows["minimum"] += minimum
        rows["ours_is_min"] += ours == minimum
        rows["ours_zero_baseline_not"] += ours == 0 and baseline > 0
        rows["plan_s"] += dt
        rows["plan_max_s"] = max(rows["plan_max_s"], dt)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=200, help="random transitions per model (default 200)")
    parser.add_argument("--node-random", type=int, default=20,
                        help="random whole-node transitions per machine for the mode/reset table (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_known_args()[0]
    rng = random.Random(args.seed)
    parts = []
    for model in MODELS:
        gpu0 = gpu_facts(model)
        named = dict((n, named_layout_for(gpu0, n)["mig_devices"]) for n in NAMED)
        pairs = [(state_from_devices(model, named[a]), named[b]) for a, b in itertools.permutations(NAMED, 2)]
        parts.append(("%s named->named" % model, pairs))
        for label, p_keep in (("random edits", 0.5), ("additions only", 1.0)):
            parts.append(("%s %s" % (model, label), random_pairs(model, rng, args.random, p_keep)))
    header = ("corpus", "transitions", "changed", "MIG devices before", "destroyed: mig-parted", "destroyed: ours",
              "destroyed: minimum", "ours = minimum", "ours 0 where mig-parted > 0", "plan ms mean/max")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    total = None
    for name, pairs in parts:
        r = measure(pairs)
        total = r if total is None else dict((k, (max(total[k], r[k]) if k == "plan_max_s" else total[k] + r[k]))
                                             for k in r)
        print(_row(name, r))
    print(_row("all", total))
    print()
    node_table(args)


def _row(name, r):
    return "| %s | %d | %d | %d | %d | %d | %d | %d (%.1f%%) | %d | %.1f / %.1f |" % (
        name, r["transitions"], r["changed"], r["cis_before"], r["baseline"], r["ours"], r["minimum"],
        r["ours_is_min"], 100.0 * r["ours_is_min"] / max(1, r["transitions"]), r["ours_zero_baseline_not"],
        1000.0 * r["plan_s"] / max(1, r["transitions"]), 1000.0 * r["plan_max_s"])


# ------------------------------------------------------------------------------ whole nodes, MIG mode changes
NODE_STATES = ["all-disabled", "all-balanced", "all-1g", "all-2g", "all-3g", "all-7g"]
MACHINES = [("dgx-a100-40gb", "A100-40GB (Ampere: a mode change needs a reset)"),
            ("hgx-h200", "H200 (Hopper: a mode change applies without a reset)")]


def _node_layout(gpus, names):
    return [dict({"devices": [i]}, **named_layout_for(gpus[i], n)) for i, n in enumerate(names)]


def _converge(sim, names):
    gpus = sim.read_all()["gpus"]
    layout = _node_layout(gpus, names)
    run_main_ok(mig_mode.main, {"layout": layout, "allow_reset": True})
    run_main_ok(mig_layout.main, {"layout": layout})


def mig_parted_cost(before_gpus, names, ampere):
    """(MIG devices destroyed, GPUs reset) by mig-parted's ApplyMigMode + ApplyMigConfig (reference/mig.md 1.5)."""
    want = [named_layout_for(g, n) for g, n in zip(before_gpus, names)]
    mode_differs = any((g["mig_mode_current"] == "Enabled") != w["mig_enabled"] for g, w in zip(before_gpus, want))
    destroyed, cleared = 0, set()
    if mode_differs:
        for g in before_gpus:                      # ClearMigConfig on every GPU whose mode is not Disabled
            if g["mig_mode_current"] == "Enabled":
                destroyed += len(g["mig_devices"])
                cleared.add(g["index"])
    pending = ampere and any((g["mig_mode_current"] == "Enabled") != w["mig_enabled"]
                             for g, w in zip(before_gpus, want))
    resets = len(before_gpus) if pending else 0
    for g, w in zip(before_gpus, want):            # ApplyMigConfig: destroy all where the multiset differs
        if w["mig_enabled"] and g["index"] not in cleared and g["mig_mode_current"] == "Enabled":
            have = dict(current_devices(g))
            if have != dict((k, v) for k, v in w["mig_devices"].items() if v):
                destroyed += len(g["mig_devices"])
    return destroyed, resets


def node_transitions(rng, count):
    fixed = [
        ("first converge: all disabled -> all-balanced", ["all-disabled"] * 8, ["all-balanced"] * 8),
        ("enable one more GPU", ["all-balanced"] * 7 + ["all-disabled"], ["all-balanced"] * 8),
        ("disable one GPU", ["all-balanced"] * 8, ["all-balanced"] * 7 + ["all-disabled"]),
        ("relayout two GPUs, no mode change", ["all-balanced"] * 8, ["all-1g"] * 2 + ["all-balanced"] * 6),
        ("everything back to disabled", ["all-balanced"] * 8, ["all-disabled"] * 8),
    ]
    out = list(fixed)
    for _i in range(count):
        a = [rng.choice(NODE_STATES) for _g in range(8)]
        b = [x if rng.random() < 0.6 else rng.choice(NODE_STATES) for x in a]
        out.append(("random", a, b))
    return out


def node_table(args):
    rng = random.Random(args.seed)
    transitions = node_transitions(rng, args.node_random)
    header = ("machine", "transitions", "mode changes", "MIG devices destroyed: mig-parted", "destroyed: ours",
              "GPUs reset: mig-parted", "GPUs reset: ours", "s per transition (ours, both modules)")
    detail = []
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    tmp = tempfile.mkdtemp(prefix="gpuops-disruption-")
    for shape, label in MACHINES:
        ampere = shape.startswith("dgx-a100")
        tot = dict(n=0, modes=0, mp_d=0, our_d=0, mp_r=0, our_r=0, t=0.0)
        for k, (name, start, target) in enumerate(transitions):
            path = os.path.join(tmp, "%s-%d.json" % (shape, k))
            os.environ["GPUOPS_SIMULATED_GPUS"] = path
            sim = SimulatedBackend(path, shape=shape)
            _converge(sim, start)
            sim.clear_call_log()
            before = sim.read_all()["gpus"]
            mp_d, mp_r = mig_parted_cost(before, target, ampere)
            t0 = time.perf_counter()
            _converge(sim, target)
            dt = time.perf_counter() - t0
            calls = [e["call"] for e in sim.raw_state()["call_log"] if "call" in e]
            our_d, our_r = calls.count("destroy_compute_instance"), calls.count("reset_gpu")
            after = sim.read_all()["gpus"]
            for g, n in zip(after, target):      # the benchmark is void unless ours reached the target
                w = named_layout_for(g, n)
                assert (g["mig_mode_current"] == "Enabled") == w["mig_enabled"], (shape, name, g["index"])
                assert dict(current_devices(g)) == dict((a, b) for a, b in w["mig_devices"].items() if b)
            modes = sum(1 for g, n in zip(before, target)
                        if (g["mig_mode_current"] == "Enabled") != named_layout_for(g, n)["mig_enabled"])
            tot["n"] += 1
            tot["modes"] += modes > 0
            tot["mp_d"] += mp_d
            tot["our_d"] += our_d
            tot["mp_r"] += mp_r
            tot["our_r"] += our_r
            tot["t"] += dt
            if name != "random":
                detail.append((label.split(" (", maxsplit=1)[0], name, mp_d, our_d, mp_r, our_r))
        print("| %s | %d | %d | %d | %d | %d | %d | %.2f |" % (label, tot["n"], tot["modes"], tot["mp_d"],
                                                               tot["our_d"], tot["mp_r"], tot["our_r"],
                                                               tot["t"] / max(1, tot["n"])))
    os.environ.pop("GPUOPS_SIMULATED_GPUS", None)
    print()
    print("| machine | transition | destroyed: mig-parted | destroyed: ours | reset: mig-parted | reset: ours |")
    print("|---|---|---|---|---|---|")
    for row in detail:
        print("| %s | %s | %d | %d | %d | %d |" % row)


if __name__ == "__main__":
    main()
