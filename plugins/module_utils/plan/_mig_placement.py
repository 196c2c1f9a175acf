# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement search of the MIG reconciler: which existing GPU and compute instances to keep, how to group
new MIG devices into GPU instances, and where to place the new GPU instances.

Pure functions over a _mig_profiles.Catalog and the normalised instances of _mig_plan.current_instances; no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
from collections import Counter

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import placement_mask, profile_size


# ---------------------------------------------------------------------------------------------------------
# Compute instances inside a GPU instance, as the driver places them


def _ci_first_fit(gi_slices, occupied, size):
    """Where the driver puts a new compute instance of ``size`` slices in a GI: the first run of free compute
    slices aligned to its size (the simulator's rule; NVML's CreateComputeInstance without placement).
    None if it does not fit."""
    for cand in range(0, gi_slices - size + 1, size):
        if not any(cand < s + n and s < cand + size for s, n in occupied):
            return cand
    return None


def _try_add(slot, name, cat):
    """Add MIG device ``name`` to a GI slot (kept or new) if the driver would fit it; True on success."""
    prof, ci, full = cat.devices[name]
    if slot["profile"] != prof["name"] or slot["full"]:
        return False
    if full and slot["occ"]:
        return False
    if slot["names"].count(name) + slot["add"].count(name) >= ci.get("max_instances", 99):
        return False
    start = _ci_first_fit(slot["slices"], slot["occ"], ci["slices"])
    if start is None:
        return False
    slot["occ"].append((start, ci["slices"]))
    slot["add"].append(name)
    slot["full"] = full
    return True


def _device_items(cat, demand):
    """Demanded devices, biggest GI first, full devices before sub-profiles, bigger CIs first: the order in
    which they are created (as mig-parted's Flatten sorts them, NVIDIA/mig-parted@bd7160f4:pkg/types/mig_config.go)."""
    items = []
    for name, n in demand.items():
        if n > 0:
            items.extend([name] * n)
    items.sort(key=lambda n: (-(cat.devices[n][0].get("slices") or 0), not cat.devices[n][2],
                              -(cat.devices[n][1].get("slices") or 0), n))
    return items


# ---------------------------------------------------------------------------------------------------------
# New GPU instances: grouping and placements


def group_into_instances(cat, demand, slots=None):
    """Put demanded MIG devices into GI slots: first the given (kept) slots, then new GIs packed first-fit.
    Returns the list of new GI slots, or None if a compute instance fits no GI at all."""
    slots = slots or []
    groups = []
    for name in _device_items(cat, demand):
        prof, ci, full = cat.devices[name]
        if any(_try_add(s, name, cat) for s in slots):
            continue
        if any(_try_add(g, name, cat) for g in groups):
            continue
        g = {"profile": prof["name"], "slices": prof.get("slices"), "names": [], "add": [], "occ": [], "full": False}
        if not _try_add(g, name, cat):
            return None
        groups.append(g)
    return groups


def choose_placements(cat, groups, occupied, counts=None, compute_used=0):
    """Choose placements for new GI groups in free memory slices; list of placements or None."""
    counts = Counter(counts or {})
    need = compute_used + sum(cat.gi_by_name[g["profile"]].get("slices") or 0 for g in groups)
    if cat.compute_slices and need > cat.compute_slices:
        return None
    order = sorted(range(len(groups)), key=lambda i: (-profile_size(cat.gi_by_name[groups[i]["profile"]]), i))
    chosen = [None] * len(groups)

    def rec(k, occ):
        if k == len(order):
            return True
        i = order[k]
        prof = cat.gi_by_name[groups[i]["profile"]]
        if counts[prof["name"]] >= prof.get("max_instances", 99):
            return False
        pls = list(prof.get("placements") or [])
        if profile_size(prof) == 1:
            pls.reverse()   # 1-slice GIs from the top: keep aligned pairs free for bigger ones
        for pl in pls:
            m = placement_mask(pl)
            if occ & m:
                continue
            chosen[i] = pl
            counts[prof["name"]] += 1
            if rec(k + 1, occ | m):
                return True
            counts[prof["name"]] -= 1
        return False
    return list(chosen) if rec(0, occupied) else None


# ---------------------------------------------------------------------------------------------------------
# What to keep: the exhaustive search


def _attempt(cat, insts, choice, demand):
    """Plan for one choice: per existing GI, None (destroy) or the tuple of its CI indexes to keep."""
    demand = Counter(demand)
    slots = []
    occupied = 0
    counts = Counter()
    compute_used = 0
    for i, ch in enumerate(choice):
        if ch is None:
            continue
        gi = insts[i]
        prof = cat.gi_by_name[gi["profile"]]
        names = []
        for j in ch:
            name = gi["cis"][j]["name"]
            demand[name] -= 1
            if demand[name] < 0:
                return None
            names.append(name)
        slots.append({"gi_i": i, "profile": gi["profile"], "slices": prof.get("slices"), "names": names, "add": [],
                      "occ": [(gi["cis"][j]["start"], gi["cis"][j]["slices"]) for j in ch],
                      "full": any(cat.devices[n][2] for n in names if n in cat.devices)})
        occupied |= gi["mask"]
        counts[gi["profile"]] += 1
        compute_used += prof.get("slices") or 0
    groups = group_into_instances(cat, demand, slots)
    if groups is None:
        return None
    if any(not s["names"] and not s["add"] for s in slots):
        return None     # a kept GI would end up empty: the choice that destroys it is enumerated too
    placements = choose_placements(cat, groups, occupied, counts, compute_used)
    if placements is None:
        return None
    return {"choice": choice, "slots": slots, "groups": groups, "placements": placements}


def _score(insts, att):
    busy_kept = ci_kept = gi_kept = ops = 0
    for i, ch in enumerate(att["choice"]):
        gi = insts[i]
        if ch is None:
            ops += 1 + len(gi["cis"])
            continue
        gi_kept += 1
        ci_kept += len(ch)
        busy_kept += sum(1 for j in ch if gi["cis"][j]["procs"])
        ops += len(gi["cis"]) - len(ch)
    ops += sum(len(s["add"]) for s in att["slots"])
    ops += sum(1 + len(g["add"]) for g in att["groups"])
    return (busy_kept, ci_kept, gi_kept, -ops)


def _subsets(items):
    out = []
    for r in range(len(items), -1, -1):
        out.extend(itertools.combinations(items, r))
    return out


def best_plan(cat, insts, demand):
    """Exhaustive search: for every existing GPU instance, destroy it or keep it with any subset of its
    compute instances that the target also has. At most 7 compute slices per GPU bound this to a few
    thousand candidates; each is completed (new CIs, new GIs at explicit placements) and scored."""
    options = []
    for gi in insts:
        if gi["profile"] not in cat.gi_by_name:
            options.append([None])
            continue
        eligible = [j for j, ci in enumerate(gi["cis"]) if demand.get(ci["name"], 0) > 0]
        opts = [None]
        if any(cat.devices.get(n, (None,))[0] is cat.gi_by_name[gi["profile"]] for n in demand):
            opts.extend(_subsets(eligible))
        options.append(opts)

    def prefix(choice):
        # (busy kept, compute instances kept, GPU instances kept): known before completing the choice
        busy = kept = gis = 0
        for i, ch in enumerate(choice):
            if ch is None:
                continue
            gis += 1
            kept += len(ch)
            busy += sum(1 for j in ch if insts[i]["cis"][j]["procs"])
        return (busy, kept, gis)

    scored = sorted(((prefix(c), c) for c in itertools.product(*options)), key=lambda pc: pc[0], reverse=True)
    best = None
    for pre, choice in scored:
        if best is not None and pre < best[0][:3]:
            break       # every remaining choice keeps less: the best is found
        att = _attempt(cat, insts, choice, demand)
        if att is None:
            continue
        sc = _score(insts, att)
        if best is None or sc > best[0]:
            best = (sc, att)
    return best
