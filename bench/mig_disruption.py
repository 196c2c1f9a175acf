"""How many running MIG devices a layout change destroys: our planner vs mig-parted's rule, vs the minimum.

mig-parted destroys every instance of a GPU whose MIG-device multiset differs in any way from the wanted one
(reference/mig.md 0.1, 1.5). Our planner keeps what it can. For a corpus of layout transitions on 7-slice GPUs
(A100-40GB, H200), this prints, per corpus part: transitions, compute instances (= MIG devices) destroyed by
mig-parted's rule and by our plan, how often ours equals the brute-force minimum (every final state that
realises the target, every distribution of its compute instances), and the planner's time per GPU.

Usage: python bench/mig_disruption.py [--random N] [--seed S]
"""
import argparse
import itertools
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "module_utils"))

from ansible_collections.gpuops.nvidia.plugins.module_utils import _mig_plan as mp  # noqa: E402
from mig_model import ModelError, SliceModel, brute_force_best, gpu_facts  # noqa: E402

MODELS = ["A100-SXM4-40GB", "H200"]
NAMED = ["all-balanced", "all-1g", "all-2g", "all-3g", "all-7g"]


def state_from_devices(model, devices):
    """A GPU in the state our planner creates for ``devices`` from empty (the usual starting point)."""
    gpu = gpu_facts(model)
    m = SliceModel([gpu])
    plan = mp.plan_gpu(m.read_all()["gpus"][0], {"mig_enabled": True, "mig_devices": devices})
    mp.execute_plan(m, 0, plan["operations"])
    return m.read_all()["gpus"][0]


def random_state(model, rng):
    gpu = gpu_facts(model)
    m = SliceModel([gpu])
    cat = mp.Catalog(gpu)
    profs = sorted(cat.gi_by_name.values(), key=lambda p: p["id"])
    for _attempt in range(rng.randint(1, 7)):
        prof = rng.choice(profs)
        try:
            gi_id = m.create_gpu_instance(0, prof["id"], rng.choice(prof["placements"])["start"])
        except ModelError:
            continue
        for _attempt in range(rng.randint(1, 2)):
            try:
                m.create_compute_instance(0, gi_id, rng.choice(prof["ci_profiles"])["id"])
            except ModelError:
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
        for name, n in mp.current_devices(gpu).items():
            k = sum(rng.random() < p_keep for _attempt in range(n))
            if k:
                keep[name] = k
        names = mp.Catalog(gpu).valid_names()
        for _attempt in range(rng.randint(0, 3)):
            cand = dict(keep)
            name = rng.choice(names)
            cand[name] = cand.get(name, 0) + 1
            try:
                mp.validate_gpu_layout(gpu, {"mig_enabled": True, "mig_devices": cand})
                keep = cand
            except mp.MigLayoutError:
                pass
        if sum(keep.values()) <= 7:
            pairs.append((gpu, keep))
    return pairs


def measure(pairs):
    rows = {"transitions": 0, "changed": 0, "cis_before": 0, "baseline": 0, "ours": 0, "minimum": 0,
            "ours_is_min": 0, "ours_zero_baseline_not": 0, "plan_s": 0.0, "plan_max_s": 0.0}
    for gpu, target in pairs:
        cur = mp.current_devices(gpu)
        n_cis = sum(cur.values())
        baseline = 0 if cur == target else n_cis
        t0 = time.perf_counter()
        plan = mp.plan_gpu(gpu, {"mig_enabled": True, "mig_devices": target}, force=True)
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
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    parts = []
    for model in MODELS:
        gpu0 = gpu_facts(model)
        named = dict((n, mp.named_layout_for(gpu0, n)["mig_devices"]) for n in NAMED)
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


def _row(name, r):
    return "| %s | %d | %d | %d | %d | %d | %d | %d (%.1f%%) | %d | %.1f / %.1f |" % (
        name, r["transitions"], r["changed"], r["cis_before"], r["baseline"], r["ours"], r["minimum"],
        r["ours_is_min"], 100.0 * r["ours_is_min"] / max(1, r["transitions"]), r["ours_zero_baseline_not"],
        1000.0 * r["plan_s"] / max(1, r["transitions"]), 1000.0 * r["plan_max_s"])


if __name__ == "__main__":
    main()
