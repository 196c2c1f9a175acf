# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layout plans: validate a declared per-GPU layout against the GPU, read the instances it holds now, and
reconcile the two with least disruption into an ordered list of operations.

Pure functions over GPU facts (the ``gpus`` list that ``gpu_info`` returns); no I/O and no backend calls: the plan
is carried out by _mig_apply.

Like mig-parted, a GPU is at its layout when it holds the declared multiset of MIG devices; unlike mig-parted, the
reconciler keeps every existing instance it can (busy ones first) and places new GPU instances explicitly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import Counter

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_placement import (
    best_plan,
    choose_placements,
    group_into_instances,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import (
    Catalog,
    format_placements,
    format_profile_name,
    gpu_label,
    name_sort_key,
    parse_profile_name,
    placement_mask,
    profile_size,
)


class MigBusyError(MigLayoutError):
    """The layout needs to destroy instances that processes are using (and force is off)."""

    def __init__(self, message, busy=None):
        super(MigBusyError, self).__init__(message)
        self.busy = busy or []


# ---------------------------------------------------------------------------------------------------------
# Current state


def _procs_by_instance(gpu):
    by_ci, by_gi = {}, {}
    for p in gpu.get("processes") or []:
        if p.get("gi_id") is None:
            continue
        if p.get("ci_id") is None:
            by_gi.setdefault(p["gi_id"], []).append(p)
        else:
            by_ci.setdefault((p["gi_id"], p["ci_id"]), []).append(p)
    return by_ci, by_gi


def current_instances(gpu, cat=None):
    """Normalised current GPU instances: [{id, profile, start, size, mask, busy_procs, cis: [...]}]."""
    cat = cat or Catalog(gpu)
    by_ci, by_gi = _procs_by_instance(gpu)
    out = []
    for gi in gpu.get("gpu_instances") or []:
        prof = cat.gi_by_id.get(gi.get("profile_id")) or cat.gi_by_name.get(gi.get("profile"))
        pl = gi.get("placement") or {}
        gi_procs = list(by_gi.get(gi["id"], []))
        cis = []
        for ci in gi.get("compute_instances") or []:
            name = ci.get("profile")
            if prof is not None:
                name = cat.ci_name_of(prof, ci.get("profile_id"), name)
            procs = list(ci.get("processes") or []) + by_ci.get((gi["id"], ci["id"]), [])
            seen, uniq = set(), []
            for p in procs + gi_procs:
                if p.get("pid") not in seen:
                    seen.add(p.get("pid"))
                    uniq.append(p)
            cpl = ci.get("placement") or {}
            slices = cpl.get("size") or (cat.devices[name][1].get("slices", 1) if name in cat.devices else 1)
            cis.append({"id": ci["id"], "name": name, "profile_id": ci.get("profile_id"), "slices": slices,
                        "start": cpl.get("start", 0), "mig_uuid": ci.get("mig_uuid"), "procs": uniq})
        out.append({"id": gi["id"], "profile": prof["name"] if prof else gi.get("profile"),
                    "profile_id": gi.get("profile_id"), "start": pl.get("start", 0), "size": pl.get("size", 0),
                    "mask": placement_mask({"start": pl.get("start", 0), "size": pl.get("size", 0)}),
                    "gi_procs": gi_procs, "cis": cis})
    return out


def current_devices(gpu, cat=None):
    """Multiset of MIG-device names on the GPU now (mig-parted's notion of 'the current config')."""
    c = Counter()
    for gi in current_instances(gpu, cat):
        for ci in gi["cis"]:
            c[ci["name"]] += 1
    return dict(c)


def describe_gi(gi_name, start, size, ci_names):
    return "%s@%d:%d [%s]" % (gi_name, start, size, ", ".join(sorted(ci_names, key=name_sort_key)))


def layout_view(gpu, cat=None):
    """Before/after view for diffs: mode, MIG-device counts, GPU instances with placements."""
    insts = current_instances(gpu, cat)
    return {"mig_mode": gpu.get("mig_mode_current"),
            "mig_devices": dict(sorted(current_devices(gpu, cat).items(), key=lambda kv: name_sort_key(kv[0]))),
            "gpu_instances": sorted(describe_gi(g["profile"], g["start"], g["size"], [c["name"] for c in g["cis"]])
                                    for g in insts)}


# ---------------------------------------------------------------------------------------------------------
# Validation against one GPU


def validate_gpu_layout(gpu, spec, cat=None):
    """Raise MigLayoutError if ``spec`` cannot be applied to ``gpu`` (names, counts, mode); return the
    canonical mig_devices map."""
    cat = cat or Catalog(gpu)
    label = gpu_label(gpu)
    if not gpu.get("mig_supported"):
        if spec.get("mig_enabled"):
            raise MigLayoutError("%s does not support MIG" % label)
        return {}
    if not spec.get("mig_enabled"):
        return {}
    devices = {}
    for name, count in (spec.get("mig_devices") or {}).items():
        found = cat.lookup(name)
        if found is None:
            parsed = parse_profile_name(name)
            hint = ""
            if parsed and parsed[0] != parsed[1]:
                gi_name = cat.lookup(format_profile_name((parsed[1],) + parsed[1:]))
                if gi_name in cat.gi_by_name:
                    subs = [n for n in cat.valid_names() if n.endswith("." + gi_name) and "c." in n]
                    hint = "; compute-instance sub-profiles of %s here: %s" % (gi_name, ", ".join(subs) or "none")
            raise MigLayoutError("%s: unknown MIG profile %r%s; valid on this GPU: %s"
                                 % (label, name, hint, ", ".join(cat.valid_names())))
        canon = cat.canonical(found)
        devices[canon] = devices.get(canon, 0) + count
    total = sum(devices.values())
    if cat.compute_slices and total > cat.compute_slices:
        # Checked before planning, which works per MIG device: a count of 10**12 must not become 10**12 items.
        # Every MIG device is a compute instance, and compute instances take at least one compute slice each.
        raise MigLayoutError("%s: %s cannot fit: %d MIG devices, but this GPU holds at most %d (each takes at least "
                             "one of its %d compute slices)" % (label, _fmt_counts(devices), total, cat.compute_slices,
                                                                cat.compute_slices))
    groups = group_into_instances(cat, devices)
    if groups is None:
        raise MigLayoutError("%s: %s cannot fit: %s" % (label, _fmt_devices(devices), explain_unfit(cat, devices)))
    per_prof = Counter(g["profile"] for g in groups)
    for pname, n in per_prof.items():
        prof = cat.gi_by_name[pname]
        fit = cat.max_fit(prof)
        if n > fit:
            raise MigLayoutError(
                "%s: %s cannot fit: it needs %d %s GPU instance%s but at most %d fit%s (%s can %s)" % (
                    label, _fmt_devices(devices), n, pname, "" if n == 1 else "s", fit,
                    "" if fit != 1 else "s", pname, format_placements(prof)))
    if choose_placements(cat, groups, 0) is None:
        raise MigLayoutError("%s: %s cannot fit: %s" % (label, _fmt_devices(devices), explain_unfit(cat, devices)))
    return devices


def _fmt_counts(devices):
    return "{%s}" % ", ".join("%s: %d" % kv for kv in sorted(devices.items()))


def _fmt_devices(devices):
    return "{%s}" % ", ".join("%s: %d" % (k, v)
                              for k, v in sorted(devices.items(), key=lambda kv: name_sort_key(kv[0])))


def explain_unfit(cat, devices):
    groups = group_into_instances(cat, devices)
    if groups is None:
        return "a compute instance is larger than its GPU instance"
    need = 0
    parts = []
    for pname, n in sorted(Counter(g["profile"] for g in groups).items(), key=lambda kv: name_sort_key(kv[0])):
        prof = cat.gi_by_name[pname]
        need += n * profile_size(prof)
        parts.append("%d x %s (%s)" % (n, pname, format_placements(prof)))
    if need > cat.memory_slices:
        return "needs %d memory slices, the GPU has %d: %s" % (need, cat.memory_slices, "; ".join(parts))
    return "no set of non-overlapping placements exists for %s" % "; ".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Reconcile


def _proc_desc(procs):
    return ", ".join("pid %s (%s)" % (p.get("pid"), p.get("name")) for p in procs)


def plan_gpu(gpu, spec, force=False):
    """Plan one GPU. ``spec`` = {"mig_enabled", "mig_devices"} (names validated here).

    Returns a dict: index, uuid, name, changed, desired (canonical mig_devices), operations (ordered),
    kept, destroyed, created, busy_destroyed (processes on what gets destroyed; only with force), before,
    after (views for diff), reason (when nothing is planned because e.g. MIG mode is off).
    Raises MigLayoutError / MigBusyError.
    """
    cat = Catalog(gpu)
    label = gpu_label(gpu)
    desired = validate_gpu_layout(gpu, spec, cat)
    before = layout_view(gpu, cat)
    base = {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "name": gpu.get("name"), "desired": desired,
            "mig_enabled": bool(spec.get("mig_enabled")), "operations": [], "kept": [], "destroyed": [],
            "created": [], "busy_destroyed": [], "before": before, "after": before, "changed": False}
    if not spec.get("mig_enabled"):
        if gpu.get("mig_mode_current") == "Enabled":
            raise MigLayoutError("%s: the layout wants MIG disabled but MIG mode is Enabled; disable it with "
                                 "gpuops.nvidia.mig_mode (or the mig role) first" % label)
        return base
    if gpu.get("mig_mode_current") != "Enabled":
        raise MigLayoutError("%s: MIG mode is %s (pending %s) but the layout needs it Enabled; enable it with "
                             "gpuops.nvidia.mig_mode (or the mig role) first" % (
                                 label, gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")))
    insts = current_instances(gpu, cat)
    unknown = [g for g in insts if g["profile"] not in cat.gi_by_name]
    if unknown:
        raise MigLayoutError("%s: existing GPU instance(s) with profile(s) not in this GPU's profile list: %s"
                             % (label, ", ".join("%s (id %s)" % (g["profile"], g["id"]) for g in unknown)))
    found = best_plan(cat, insts, desired)
    if found is None:   # cannot happen after validation (keeping nothing always fits); be explicit anyway
        raise MigLayoutError("%s: no plan reaches %s" % (label, _fmt_devices(desired)))
    score, att = found
    ops, kept, destroyed, created, busy = [], [], [], [], []
    destroy_cis, destroy_gis = [], []
    for i, gi in enumerate(insts):
        ch = att["choice"][i]
        if ch is None:
            destroy_cis.extend((gi, ci) for ci in gi["cis"])
            destroy_gis.append(gi)
            continue
        kept_entry = {"gi_id": gi["id"], "profile": gi["profile"],
                      "placement": {"start": gi["start"], "size": gi["size"]}, "compute_instances": []}
        for j, ci in enumerate(gi["cis"]):
            if j in ch:
                kept_entry["compute_instances"].append({"ci_id": ci["id"], "profile": ci["name"],
                                                        "mig_uuid": ci["mig_uuid"]})
            else:
                destroy_cis.append((gi, ci))
        kept.append(kept_entry)
    for gi, ci in destroy_cis:
        if ci["procs"]:
            busy.append({"gi_id": gi["id"], "ci_id": ci["id"], "profile": ci["name"], "mig_uuid": ci["mig_uuid"],
                         "placement": {"start": gi["start"], "size": gi["size"]},
                         "processes": [{"pid": p.get("pid"), "name": p.get("name")} for p in ci["procs"]]})
    for gi in destroy_gis:
        if gi["gi_procs"] and not any(b["gi_id"] == gi["id"] for b in busy):
            busy.append({"gi_id": gi["id"], "ci_id": None, "profile": gi["profile"], "mig_uuid": None,
                         "placement": {"start": gi["start"], "size": gi["size"]},
                         "processes": [{"pid": p.get("pid"), "name": p.get("name")} for p in gi["gi_procs"]]})
    if busy and not force:
        raise MigBusyError(
            "%s: reaching %s needs to destroy instance(s) in use; nothing changed. %s. Stop those processes "
            "or set force: true to destroy them." % (label, _fmt_devices(desired), "; ".join(
                "%s (GI %s at %d:%d%s%s) used by %s" % (
                    b["profile"], b["gi_id"], b["placement"]["start"], b["placement"]["size"],
                    "" if b["ci_id"] is None else ", CI %s" % b["ci_id"],
                    ", %s" % b["mig_uuid"] if b["mig_uuid"] else "", _proc_desc(b["processes"])) for b in busy)),
            busy=busy)
    for gi, ci in destroy_cis:
        ops.append({"op": "destroy_compute_instance", "gi_id": gi["id"], "ci_id": ci["id"], "profile": ci["name"]})
        destroyed.append({"kind": "compute_instance", "gi_id": gi["id"], "ci_id": ci["id"], "profile": ci["name"],
                          "mig_uuid": ci["mig_uuid"],
                          "processes": [{"pid": p.get("pid"), "name": p.get("name")} for p in ci["procs"]]})
    for gi in destroy_gis:
        ops.append({"op": "destroy_gpu_instance", "gi_id": gi["id"], "profile": gi["profile"],
                    "placement": {"start": gi["start"], "size": gi["size"]}})
        destroyed.append({"kind": "gpu_instance", "gi_id": gi["id"], "profile": gi["profile"],
                          "placement": {"start": gi["start"], "size": gi["size"]}})
    new_order = sorted(range(len(att["groups"])), key=lambda k: (att["placements"][k]["start"], k))
    refs = {}
    for n, k in enumerate(new_order):
        g = att["groups"][k]
        pl = att["placements"][k]
        prof = cat.gi_by_name[g["profile"]]
        ref = "new%d" % n
        refs[k] = ref
        ops.append({"op": "create_gpu_instance", "ref": ref, "profile": g["profile"], "profile_id": prof["id"],
                    "placement": {"start": pl["start"], "size": pl["size"]}})
        created.append({"kind": "gpu_instance", "ref": ref, "profile": g["profile"],
                        "placement": {"start": pl["start"], "size": pl["size"]}})
    after_gis = []
    for slot in att["slots"]:
        gi = insts[slot["gi_i"]]
        for name in slot["add"]:
            prof, ci, full = cat.devices[name]
            ops.append({"op": "create_compute_instance", "gi_id": gi["id"], "profile": name,
                        "ci_profile_id": ci.get("id"), "gi_profile": prof["name"]})
            created.append({"kind": "compute_instance", "gi_id": gi["id"], "profile": name})
        after_gis.append(describe_gi(gi["profile"], gi["start"], gi["size"], slot["names"] + slot["add"]))
    for k in new_order:
        g = att["groups"][k]
        for name in g["add"]:
            prof, ci, full = cat.devices[name]
            ops.append({"op": "create_compute_instance", "ref": refs[k], "profile": name,
                        "ci_profile_id": ci.get("id"), "gi_profile": prof["name"]})
            created.append({"kind": "compute_instance", "ref": refs[k], "profile": name})
        pl = att["placements"][k]
        after_gis.append(describe_gi(g["profile"], pl["start"], pl["size"], g["add"]))
    base.update({
        "operations": ops, "kept": kept, "destroyed": destroyed, "created": created, "busy_destroyed": busy,
        "changed": bool(ops),
        "after": {"mig_mode": gpu.get("mig_mode_current"),
                  "mig_devices": dict(sorted(desired.items(), key=lambda kv: name_sort_key(kv[0]))),
                  "gpu_instances": sorted(after_gis)},
    })
    return base


def _from_source(spec, error):
    """The error, prefixed with the part of the declaration it comes from (layout[0], mig-configs.a[0], a named
    layout) unless it already starts with it."""
    source = spec.get("source")
    text = str(error)
    return text if not source or text.startswith(str(source)) else "%s: %s" % (source, text)


def plan_layout(gpus, resolved, force=False):
    """Plan every GPU in ``resolved['gpus']``. Validates all GPUs before returning anything (all or nothing):
    errors from several GPUs are reported together."""
    by_index = dict((g["index"], g) for g in gpus)
    plans, errors, busy = [], [], []
    for index in sorted(resolved["gpus"]):
        spec = resolved["gpus"][index]
        try:
            plans.append(plan_gpu(by_index[index], spec, force=force))
        except MigBusyError as e:
            errors.append(_from_source(spec, e))
            busy.extend(dict(b, index=index) for b in e.busy)
        except MigLayoutError as e:
            errors.append(_from_source(spec, e))
    if errors:
        if busy and len(busy) and all(isinstance(x, str) for x in errors):
            err = MigBusyError(" | ".join(errors), busy=busy)
        else:
            err = MigLayoutError(" | ".join(errors))
        raise err
    return plans
