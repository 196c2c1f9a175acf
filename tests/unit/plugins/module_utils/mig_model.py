"""GPU facts for the modelled MIG GPUs, built from the profile tables in reference/mig.md 3.2-3.6, and a
small in-test device model (the backend API of _gpu.py) that enforces placement rules, so plans can be
applied without the simulator. The H200 table is the real reading (gpu-readings.md)."""
import copy
import itertools
from collections import Counter

from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_plan import current_instances
from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_profiles import Catalog

# name pattern per model: (1g, 1g+me, 1g 2-memory-slice, 2g, 3g, 4g, 7g)
MODELS = {
    "A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", "0x20B010DE", "ampere", 40960,
                       ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
    "A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", "0x20B210DE", "ampere", 81920,
                       ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "H100-80GB": ("NVIDIA H100 80GB HBM3", "0x233010DE", "hopper", 81559,
                  ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "H200": ("NVIDIA H200", "0x233510DE", "hopper", 143771,
             ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    # B200: the MIG user guide's B200 table (same 7-slice fractions as H100/H200)
    "B200": ("NVIDIA B200", "0x290110DE", "blackwell", 183359,
             ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")),
}
CI_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
CI_MAX = {7: {1: 7, 2: 3, 3: 2, 4: 1}, 4: {1: 4, 2: 2, 3: 1}, 3: {1: 3, 2: 1}, 2: {1: 2}, 1: {}}


def _ci_profiles(gi_name, slices):
    out = []
    for c, mx in sorted(CI_MAX[slices].items()):
        out.append({"name": "%dc.%s" % (c, gi_name), "id": CI_IDS[c], "slices": c, "max_instances": mx})
    out.append({"name": gi_name, "id": CI_IDS[slices], "slices": slices, "max_instances": 1})
    return out


def _gi(name, pid, slices, mem_slices, max_inst, starts):
    return {"name": name, "id": pid, "slices": slices, "memory_slices": mem_slices, "max_instances": max_inst,
            "placements": [{"start": s, "size": mem_slices} for s in starts],
            "ci_profiles": _ci_profiles(name, slices)}


def seven_slice_profiles(names):
    one, one_me, one_two, two, three, four, seven = names
    return [
        _gi(one, 19, 1, 1, 7, range(7)),
        _gi(one_me, 20, 1, 1, 1, range(7)),
        _gi(one_two, 15, 1, 2, 4, (0, 2, 4, 6)),
        _gi(two, 14, 2, 2, 3, (0, 2, 4)),
        _gi(three, 9, 3, 4, 2, (0, 4)),
        _gi(four, 5, 4, 4, 1, (0,)),
        _gi(seven, 0, 7, 8, 1, (0,)),
    ]


def a30_profiles():
    return [
        _gi("1g.6gb", 14, 1, 1, 4, range(4)),
        _gi("1g.6gb+me", 21, 1, 1, 1, range(4)),
        _gi("2g.12gb", 5, 2, 2, 2, (0, 2)),
        _gi("2g.12gb+me", 6, 2, 2, 1, (0, 2)),
        _gi("4g.24gb", 0, 4, 4, 1, (0,)),
    ]


def rtx_pro_6000_profiles():
    """The user guide's RTX PRO 6000 Blackwell table, with the ids of a published `nvidia-smi mig -lgip`: four
    memory and compute slices, and the +me, +gfx, +me.all and -me variants of 1g, 2g and 4g."""
    out = []
    for name, pid, max_inst in (("1g.24gb", 14, 4), ("1g.24gb+me", 21, 1), ("1g.24gb+gfx", 47, 4),
                                ("1g.24gb+me.all", 65, 1), ("1g.24gb-me", 67, 4)):
        out.append(_gi(name, pid, 1, 1, max_inst, range(4)))
    for name, pid, max_inst in (("2g.48gb", 5, 2), ("2g.48gb+gfx", 35, 2), ("2g.48gb+me.all", 64, 1),
                                ("2g.48gb-me", 66, 2)):
        out.append(_gi(name, pid, 2, 2, max_inst, (0, 2)))
    out.append(_gi("4g.96gb", 0, 4, 4, 1, (0,)))
    out.append(_gi("4g.96gb+gfx", 32, 4, 4, 1, (0,)))
    return out


def gpu_facts(model, index=0, mig="Enabled"):
    if model == "A30":
        name, devid, arch, mem, profiles = "NVIDIA A30", "0x20B710DE", "ampere", 24576, a30_profiles()
    elif model == "RTX-PRO-6000":
        name, devid, arch, mem, profiles = ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "0x2BB510DE", "blackwell",
                                            97887, rtx_pro_6000_profiles())
    elif model == "L40S":
        return {"index": index, "uuid": "GPU-l40s-%d" % index, "name": "NVIDIA L40S", "pci_device_id": "0x26B910DE",
                "architecture": "ada", "mig_supported": False, "mig_mode_current": None, "mig_mode_pending": None,
                "gi_profiles": [], "gpu_instances": [], "mig_devices": [], "processes": []}
    else:
        name, devid, arch, mem, names = MODELS[model]
        profiles = seven_slice_profiles(names)
    return {"index": index, "uuid": "GPU-%s-%d" % (model.lower(), index), "name": name,
            "pci_bus_id": "00000000:%02x:00.0" % (index + 7), "pci_device_id": devid, "memory_total_mib": mem,
            "architecture": arch, "mig_supported": True, "mig_mode_current": mig, "mig_mode_pending": mig,
            "gi_profiles": profiles, "gpu_instances": [], "mig_devices": [], "processes": []}


ALL_MODELS = ["A100-SXM4-40GB", "A100-SXM4-80GB", "A30", "H100-80GB", "H200", "B200", "RTX-PRO-6000"]


class ModelError(Exception):
    def __init__(self, name):
        super(ModelError, self).__init__(name)
        self.name = name


class SliceModel(object):
    """The backend calls a plan uses, enforcing what the driver enforces (placement, overlap, max counts,
    compute slices inside a GI, IN_USE for instances with processes or with compute instances)."""

    def __init__(self, gpus):
        self.gpus = {g["index"]: g for g in copy.deepcopy(gpus)}
        self.calls = []
        self._uuid = itertools.count(1)

    def read_all(self):
        return {"backend": "test-model", "gpus": [copy.deepcopy(self.gpus[i]) for i in sorted(self.gpus)]}

    def _prof(self, gpu, pid):
        for p in gpu["gi_profiles"]:
            if p["id"] == pid:
                return p
        raise ModelError("INVALID_ARGUMENT")

    def create_gpu_instance(self, index, profile_id, start):
        self.calls.append(("create_gpu_instance", index, profile_id, start))
        gpu = self.gpus[index]
        prof = self._prof(gpu, profile_id)
        pl = [p for p in prof["placements"] if p["start"] == start]
        if not pl:
            raise ModelError("INVALID_ARGUMENT")
        mask = ((1 << pl[0]["size"]) - 1) << start
        for gi in gpu["gpu_instances"]:
            m = ((1 << gi["placement"]["size"]) - 1) << gi["placement"]["start"]
            if m & mask:
                raise ModelError("INSUFFICIENT_RESOURCES")
        if sum(1 for gi in gpu["gpu_instances"] if gi["profile_id"] == profile_id) >= prof["max_instances"]:
            raise ModelError("INSUFFICIENT_RESOURCES")
        gi_id = max([gi["id"] for gi in gpu["gpu_instances"]] + [0]) + 1
        gpu["gpu_instances"].append({"id": gi_id, "profile_id": profile_id, "profile": prof["name"],
                                     "placement": dict(pl[0]), "compute_instances": []})
        return gi_id

    def create_compute_instance(self, index, gi_id, ci_profile_id):
        self.calls.append(("create_compute_instance", index, gi_id, ci_profile_id))
        gpu = self.gpus[index]
        gi = [g for g in gpu["gpu_instances"] if g["id"] == gi_id]
        if not gi:
            raise ModelError("NOT_FOUND")
        gi = gi[0]
        prof = self._prof(gpu, gi["profile_id"])
        ci = [c for c in prof["ci_profiles"] if c["id"] == ci_profile_id]
        if not ci:
            raise ModelError("INVALID_ARGUMENT")
        ci = ci[0]
        same = sum(1 for c in gi["compute_instances"] if c["profile_id"] == ci_profile_id)
        if same >= ci["max_instances"]:
            raise ModelError("INSUFFICIENT_RESOURCES")
        # driver-chosen placement: first free run aligned to the CI's size (the simulator's convention)
        size = ci["slices"]
        taken = set()
        for c in gi["compute_instances"]:
            taken.update(range(c["placement"]["start"], c["placement"]["start"] + c["placement"]["size"]))
        starts = [s for s in range(0, prof["slices"] - size + 1, size) if not taken & set(range(s, s + size))]
        if not starts:
            raise ModelError("INSUFFICIENT_RESOURCES")
        ci_id = max([c["id"] for c in gi["compute_instances"]] + [-1]) + 1
        gi["compute_instances"].append({"id": ci_id, "profile_id": ci_profile_id, "profile": ci["name"],
                                        "placement": {"start": starts[0], "size": size},
                                        "mig_uuid": "MIG-test-%d" % next(self._uuid), "processes": []})
        return ci_id

    def destroy_compute_instance(self, index, gi_id, ci_id):
        self.calls.append(("destroy_compute_instance", index, gi_id, ci_id))
        gpu = self.gpus[index]
        gi = [g for g in gpu["gpu_instances"] if g["id"] == gi_id][0]
        if any(p.get("gi_id") == gi_id and p.get("ci_id") in (ci_id, None) for p in gpu["processes"]):
            raise ModelError("IN_USE")
        gi["compute_instances"] = [c for c in gi["compute_instances"] if c["id"] != ci_id]

    def destroy_gpu_instance(self, index, gi_id):
        self.calls.append(("destroy_gpu_instance", index, gi_id))
        gpu = self.gpus[index]
        gi = [g for g in gpu["gpu_instances"] if g["id"] == gi_id][0]
        if gi["compute_instances"] or any(p.get("gi_id") == gi_id for p in gpu["processes"]):
            raise ModelError("IN_USE")
        gpu["gpu_instances"] = [g for g in gpu["gpu_instances"] if g["id"] != gi_id]

    def add_process(self, index, pid, name, gi_id=None, ci_id=None):
        self.gpus[index]["processes"].append({"pid": pid, "name": name, "used_memory_mib": 1,
                                              "gi_id": gi_id, "ci_id": ci_id})


def brute_force_best(gpu, target):
    """Max (busy kept, compute instances kept) over every final state that realises ``target``: every set
    of non-overlapping GI placements, every distribution of the target's compute instances into them."""
    cat = Catalog(gpu)
    insts = current_instances(gpu, cat)
    cur = {}
    for gi in insts:
        cur[(gi["profile"], gi["start"])] = gi
    by_prof = {}
    for name, n in target.items():
        prof, ci, full = cat.devices[name]
        by_prof.setdefault(prof["name"], []).extend([(name, full, ci["slices"], ci.get("max_instances", 99))] * n)
    profs = sorted(by_prof)
    best = [None]

    def gi_options(pname):
        items = by_prof[pname]
        fulls = sum(1 for it in items if it[1])
        subs = [it for it in items if not it[1]]
        return fulls, subs, range(fulls + (1 if subs else 0), fulls + len(subs) + 1)

    def placements_for(pname, k, occ):
        prof = cat.gi_by_name[pname]
        if k > prof["max_instances"]:
            return
        for combo in itertools.combinations(prof["placements"], k):
            m = 0
            ok = True
            for pl in combo:
                pm = ((1 << pl["size"]) - 1) << pl["start"]
                if m & pm or occ & pm:
                    ok = False
                    break
                m |= pm
            if ok:
                yield [pl["start"] for pl in combo], occ | m

    def fill(prof, fixed, names):
        """Create ``names`` (biggest first) around CIs at ``fixed`` [(start, size, name)] like the driver:
        first free run aligned to the size. True if all fit."""
        occ = [(f[0], f[1]) for f in fixed]
        have = Counter(f[2] for f in fixed)
        for n in sorted(names, key=lambda n: (-cat.devices[n][1]["slices"], n)):
            ci = cat.devices[n][1]
            if cat.devices[n][2] and occ:
                return False
            if have[n] >= ci.get("max_instances", 99):
                return False
            size = ci["slices"]
            spot = [s for s in range(0, prof["slices"] - size + 1, size)
                    if not any(s < a + b and a < s + size for a, b in occ)]
            if not spot:
                return False
            occ.append((spot[0], size))
            have[n] += 1
        return True

    def gi_best(prof, start, contents):
        """Best (busy, kept) for one final GI; None if its contents cannot be created."""
        gi = cur.get((prof["name"], start))
        cands = []
        if gi is not None:
            eligible = [c for c in gi["cis"] if c["name"] in contents]
            for r in range(len(eligible) + 1):
                cands.extend(itertools.combinations(eligible, r))
        else:
            cands = [()]
        res = None
        for keep in cands:
            rest = Counter(contents)
            rest.subtract(Counter(c["name"] for c in keep))
            if any(v < 0 for v in rest.values()):
                continue
            if not fill(prof, [(c["start"], c["slices"], c["name"]) for c in keep], list(rest.elements())):
                continue
            sc = (sum(1 for c in keep if c["procs"]), len(keep))
            if res is None or sc > res:
                res = sc
        return res

    def score_assign(pname, starts, fulls, subs):
        """Best (busy, kept) for GIs of pname at starts hosting fulls + subs."""
        prof = cat.gi_by_name[pname]
        res = None
        full_name = [it for it in by_prof[pname] if it[1]]
        for full_sel in itertools.combinations(range(len(starts)), fulls):
            rest = [i for i in range(len(starts)) if i not in full_sel]
            for assign in itertools.product(rest, repeat=len(subs)):
                contents = {i: [] for i in range(len(starts))}
                for i in full_sel:
                    contents[i].append(full_name[0][0])
                for it, i in zip(subs, assign):
                    contents[i].append(it[0])
                if any(not c for c in contents.values()):
                    continue
                total = (0, 0)
                for i, s in enumerate(starts):
                    sc = gi_best(prof, s, contents[i])
                    if sc is None:
                        total = None
                        break
                    total = (total[0] + sc[0], total[1] + sc[1])
                if total is not None and (res is None or total > res):
                    res = total
        return res

    def rec(pi, occ, acc):
        if pi == len(profs):
            if best[0] is None or acc > best[0]:
                best[0] = acc
            return
        pname = profs[pi]
        fulls, subs, ks = gi_options(pname)
        for k in ks:
            for starts, occ2 in placements_for(pname, k, occ):
                sc = score_assign(pname, starts, fulls, subs)
                if sc is None:
                    continue
                rec(pi + 1, occ2, (acc[0] + sc[0], acc[1] + sc[1]))
    rec(0, 0, (0, 0))
    return best[0]
