"""Test support for the MIG planner's tests: GPU facts of every MIG GPU the collection models, and GPUs to apply
plans to, both from the collection's own simulator (_simulator, whose profile tables are _gpu_catalog's) with its
state kept in memory; and brute_force_best, an independent reference solver the planner's choices are checked
against."""
import contextlib
import itertools
import json
from collections import Counter

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as gpu_catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import current_instances
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import Catalog
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator_state import new_state

# Every catalog model with MIG (A100 40/80GB, A30, H100, H100 NVL, GH200, H200, B200, GB200, B300, RTX PRO 6000).
ALL_MODELS = sorted(key for key, model in gpu_catalog.GPU_MODELS.items() if model["mig"])


class MemorySimulator(SimulatedBackend):
    """The simulator, its rules and its catalog, with the state in memory instead of a state file: the
    property-based tests build thousands of GPU states. A call sees and keeps the state as the file-backed
    simulator does (kept when the call ends normally or with an NVML error, left as it was otherwise)."""

    def __init__(self, state):  # pylint: disable=super-init-not-called
        self.path = "<memory>"
        self.shape = None
        self.state = state

    @contextlib.contextmanager
    def _locked(self, write=True, create_shape=None):
        work = json.loads(json.dumps(self.state))
        keep = False
        try:
            yield work
            keep = True
        except NvmlError:
            keep = True
            raise
        finally:
            if keep and write:
                self.state = work

    def clone(self):
        return MemorySimulator(json.loads(json.dumps(self.state)))

    def calls(self):
        """The mutating calls made since the last clear_call_log(), by name."""
        return [entry["call"] for entry in self.raw_state()["call_log"] if "call" in entry]


def simulated(models, mig="Enabled"):
    """A MemorySimulator whose GPUs are the catalog models ``models`` (a list, or {index: model}), MIG mode
    ``mig`` on those with MIG. UUIDs read GPU-<model>-<index> (lower case) so tests can name them."""
    by_index = models if isinstance(models, dict) else dict(enumerate(models))
    state = new_state("h200-x1", "mig-model")
    template = state["gpus"][0]
    state["gpus"] = []
    for index in sorted(by_index):
        model = by_index[index]
        mig_mode = (mig == "Enabled") if gpu_catalog.GPU_MODELS[model]["mig"] else None
        gpu = dict(template, index=index, model=model, uuid="GPU-%s-%d" % (model.lower(), index),
                   pci_bus_id=gpu_catalog.bus_id(index), mig_current=mig_mode, mig_pending=mig_mode,
                   gpu_instances=[])
        state["gpus"].append(gpu)
    return MemorySimulator(state)


def gpu_facts(model, index=0, mig="Enabled"):
    """The facts gpu_info reads of one GPU of catalog model ``model`` at ``index``, without instances."""
    return simulated({index: model}, mig).read_gpu(index)


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
