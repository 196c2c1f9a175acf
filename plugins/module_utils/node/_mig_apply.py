# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What mig_mode, mig_layout, gpu_node_plan and the mig role's boot-time script share on the target: reading a
layout source, deciding the MIG-mode step per GPU and the layout plan (pure, so a check-mode run of either module and
gpu_node_plan compute the same plan with the same code), and the one apply path: ending processes when the user
forces destruction, then running a plan's operations through the GPU backend (``apply_layout_plans``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os
import signal

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NVML_ERROR_NAMES, select_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import (
    InputFileError, load_yaml, read_text)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import (
    NAMED_LAYOUTS,
    MigLayoutError,
    resolve_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import layout_view, plan_layout
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_profiles import gpu_label
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import wait


def load_config_file(path):
    """Read a mig-parted config file (YAML or JSON): a regular UTF-8 file of at most 16 MiB, not nested or
    aliased past _input_file's limits. Raises MigLayoutError with the reason."""
    try:
        import yaml  # only here: most runs never read a mig-parted file, and the import costs every module run
    except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
        raise MigLayoutError("PyYAML is needed to read config_file")
    try:
        return load_yaml(read_text(path, "config_file"), "config_file %s" % path, yaml)
    except InputFileError as exc:
        raise MigLayoutError(str(exc))


def name_source(params, text):
    """``text`` (an error about the declared layout), prefixed with the option the layout came from unless it
    names that option already: layout, config_file <path>, or config_name <name>."""
    if params.get("layout") is not None:
        option = "layout"
    elif params.get("config_file"):
        option = "config_file %s" % params["config_file"]
    elif params.get("config_name") is not None:
        option = "config_name %s" % params["config_name"]
    else:
        return text
    return text if option.split(" ")[0] in text else "%s: %s" % (option, text)


def resolve_from_params(gpus, params):
    """Per-GPU declared layouts from module parameters: layout | config_file (+config_name) | config_name
    alone (a named layout), narrowed by ``gpus`` (indices, UUIDs, model names). Errors name the option."""
    try:
        return _resolve(gpus, params)
    except MigLayoutError as exc:
        raise MigLayoutError(name_source(params, str(exc)))


def _resolve(gpus, params):
    selector = params.get("gpus") or ["all"]
    chosen = select_gpus(gpus, selector)
    if not chosen:
        raise MigLayoutError("gpus=%s matches no GPU on this host; it has: %s" % (
            selector, ", ".join("%d (%s, %s)" % (g["index"], g["name"], g["uuid"]) for g in gpus) or "no GPUs"))
    explicit = selector not in (["all"], "all", None)
    if params.get("layout") is not None:
        if params.get("config_file") or params.get("config_name"):
            raise MigLayoutError("give either layout, or config_file/config_name, not both")
        res = _narrow(resolve_layout(gpus, layout=params["layout"]), chosen)
    elif params.get("config_file"):
        res = _narrow(resolve_layout(gpus, config=load_config_file(params["config_file"]),
                                     config_name=params.get("config_name")), chosen)
    elif params.get("config_name"):
        res = resolve_layout(chosen, named=params["config_name"],
                             gpu_selector={"devices": [g["index"] for g in chosen] if explicit else "all"})
    else:
        raise MigLayoutError("give one of: layout, config_file (+ config_name), or config_name "
                             "(a named layout: %s)" % ", ".join(NAMED_LAYOUTS))
    return res


def _narrow(resolved, chosen):
    """Keep only the GPUs ``gpus`` selected (the layout itself is resolved against every GPU, so its own
    selectors are checked against the whole node)."""
    keep = set(g["index"] for g in chosen)
    resolved["gpus"] = dict((i, s) for i, s in resolved["gpus"].items() if i in keep)
    resolved["skipped"] = [s for s in resolved["skipped"] if s["index"] in keep]
    return resolved


def mode_step(gpu, want, allow_reset):
    """Decide what a GPU needs to reach MIG mode ``want`` (pure). Returns a dict:
    set (call SetMigMode), clear (instances to destroy first), reset (call a GPU reset), reset_required,
    reboot_required, reason, processes."""
    cur = gpu.get("mig_mode_current") == "Enabled"
    pend = gpu.get("mig_mode_pending") == "Enabled"
    procs = [{"pid": p.get("pid"), "name": p.get("name")} for p in gpu.get("processes") or []]
    out = {"set": False, "clear": [], "reset": False, "reset_required": False, "reboot_required": False,
           "reason": None, "processes": procs, "activates_without_reset": gpu.get("architecture") != "ampere"}
    if cur == want and pend == want:
        return out
    if pend != want:
        out["set"] = True
        if not want and gpu.get("gpu_instances"):
            out["clear"] = list(gpu["gpu_instances"])
    if cur == want:
        return out      # only a stale pending request to undo
    if out["activates_without_reset"]:
        # Hopper and later: the change applies at SetMigMode when the GPU is idle; with processes it stays
        # pending (MIG user guide, Enable MIG Mode:
        # https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html; the simulator's rule).
        if procs:
            out["reboot_required"] = True
            out["reason"] = ("in use by %s: the change applies when they stop (re-run then), or after a reboot "
                             "with the boot-time unit re-applying the mode" % (
                                 ", ".join("pid %s (%s)" % (p["pid"], p["name"]) for p in procs)))
        return out
    # Ampere: pending until a GPU reset; the mode then survives reboots.
    if not gpu.get("reset_supported", True):
        out["reboot_required"] = True
        out["reason"] = "this GPU exposes no reset (passthrough VM): a reboot activates the pending mode"
    elif procs:
        out["reset_required"] = True
        out["reboot_required"] = True
        out["reason"] = "reset blocked: in use by %s; stop them and reset, or reboot" % (
            ", ".join("pid %s (%s)" % (p["pid"], p["name"]) for p in procs))
    elif allow_reset:
        out["reset"] = True
    else:
        out["reset_required"] = True
        out["reason"] = "a GPU reset activates the pending mode; allow_reset is false"
    return out


def desired_modes(gpus, params):
    """mig_mode's declaration per GPU: ({index: want MIG (bool)}, skipped list), from ``enabled`` (with ``gpus``)
    or from a layout source (resolve_from_params). Raises MigLayoutError."""
    if params.get("enabled") is None:
        res = resolve_from_params(gpus, params)
        return dict((i, s["mig_enabled"]) for i, s in res["gpus"].items()), res["skipped"]
    selector = params.get("gpus") or ["all"]
    chosen = select_gpus(gpus, selector)
    if not chosen:
        raise MigLayoutError("gpus=%s matches no GPU on this host; it has: %s" % (
            selector, ", ".join("%d (%s, %s)" % (g["index"], g["name"], g["uuid"]) for g in gpus)))
    explicit = selector not in (["all"], "all")
    want, skipped = {}, []
    for gpu in chosen:
        if not gpu.get("mig_supported"):
            if explicit and params["enabled"]:
                raise MigLayoutError("%s does not support MIG; MIG-capable GPUs here: %s" % (
                    gpu_label(gpu), ", ".join(str(g["index"]) for g in gpus if g.get("mig_supported")) or "none"))
            skipped.append({"index": gpu["index"], "reason": "GPU does not support MIG"})
            continue
        want[gpu["index"]] = params["enabled"]
    if not want and params["enabled"]:
        raise MigLayoutError("none of the selected GPUs supports MIG")
    return want, skipped


def mode_problems(by_index, want, allow_reset):
    """Why the declared modes cannot be applied at all (processes on instances that disabling would destroy):
    one message, or None. Checked for every GPU before the first change."""
    problems = [p for p in (busy_clear_problem(by_index[i], mode_step(by_index[i], want[i], allow_reset))
                            for i in sorted(want)) if p]
    return "; ".join(problems) + "; nothing changed" if problems else None


def mode_result(results, skipped):
    """mig_mode's result from its per-GPU entries (apply_mode's)."""
    return dict(changed=any(r["changed"] for r in results), gpus=results, skipped_gpus=skipped,
                pending=[r["index"] for r in results if r["pending"]],
                reset_required=[r["index"] for r in results if r["reset_required"]],
                reboot_required=[r["index"] for r in results if r["reboot_required"]])


def plan_modes(gpus, params):
    """mig_mode in check mode, as a pure function of the GPU facts: its result (without diff). Raises
    MigLayoutError with the message mig_mode fails with."""
    want, skipped = desired_modes(gpus, params)
    by_index = dict((g["index"], g) for g in gpus)
    problem = mode_problems(by_index, want, params.get("allow_reset"))
    if problem:
        raise MigLayoutError(problem)
    return mode_result([apply_mode(None, by_index[i], want[i], params.get("allow_reset"), check_mode=True)
                        for i in sorted(want)], skipped)


def plan_layouts(gpus, params, check_mode):
    """mig_layout's plan: (resolved declaration, per-GPU plans, indices planned as if mig_mode had changed their
    mode first). In check mode a GPU whose MIG mode is not yet the declared one is planned with that mode and no
    instances, the state mig_mode leaves it in. Raises MigLayoutError (MigBusyError when instances in use would
    be destroyed without force)."""
    resolved = resolve_from_params(gpus, params)
    planning, assumed = [], set()
    for gpu in gpus:
        spec = resolved["gpus"].get(gpu["index"])
        want = "Enabled" if spec and spec["mig_enabled"] else "Disabled"
        if check_mode and spec and gpu.get("mig_supported") and gpu.get("mig_mode_current") != want:
            gpu = copy.deepcopy(gpu)
            gpu.update({"mig_mode_current": want, "gpu_instances": [], "mig_devices": []})
            assumed.add(gpu["index"])
        planning.append(gpu)
    return resolved, plan_layout(planning, resolved, force=params.get("force")), assumed


def assumed_warning(assumed):
    return ("MIG mode is not yet what the layout declares on GPU(s) %s: planned as if mig_mode had changed it "
            "(check mode)" % ", ".join(str(i) for i in sorted(assumed)))


def layout_entry(plan, assumed, gpu):
    """mig_layout's per-GPU result entry for a plan not (yet) executed: ``gpu`` is the GPU as read."""
    entry = dict(plan)
    entry["planned_as_enabled"] = plan["index"] in assumed and plan["mig_enabled"]
    entry["planned_after_mode_change"] = plan["index"] in assumed
    if plan["index"] in assumed:
        entry["before"] = layout_view(gpu)
    entry["mig_devices"] = devices_of(gpu)
    return entry


def layout_result(resolved, entries):
    """mig_layout's result (without diff) from its per-GPU entries."""
    return dict(changed=any(e["changed"] for e in entries), gpus=entries, config_name=resolved.get("config_name"),
                skipped_gpus=resolved["skipped"])


def terminate_processes(backend, pids, timeout=30):
    """End processes that a forced change must remove. On the simulator, the simulated process goes away;
    on a real host SIGTERM, then SIGKILL to those still alive after ``timeout`` seconds (the table's
    ``processes_exit``). Returns the pids signalled."""
    done = []
    if getattr(backend, "kind", None) == "simulated":
        for pid in pids:
            backend.remove_process(pid)
            done.append(pid)
        return done
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGTERM)
            done.append(pid)
        except OSError:
            pass
    alive = wait("processes_exit", lambda: [p for p in done if _alive(p)], timeout).seen if done else []
    for pid in alive:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    return done


def _alive(pid):
    try:
        os.kill(int(pid), 0)
        return True
    except OSError:
        return False


def _mode(flag):
    return "Enabled" if flag else "Disabled"


def predict_mode(gpu, want, step):
    """Mode after ``step`` (check mode)."""
    cur = gpu.get("mig_mode_current") == "Enabled"
    pend = want if step["set"] else gpu.get("mig_mode_pending") == "Enabled"
    if step["set"] and step["activates_without_reset"] and not step["processes"]:
        cur = want
    if step["reset"]:
        cur = pend
    return {"current": _mode(cur), "pending": _mode(pend)}


def busy_clear_problem(gpu, step):
    """Message if disabling MIG would destroy instances that processes use; else None."""
    if not step["clear"]:
        return None
    busy = [p for p in gpu.get("processes") or [] if p.get("gi_id") is not None]
    if not busy:
        return None
    return "%s: disabling MIG destroys its GPU instances, but processes run on them: %s; stop them first" % (
        gpu_label(gpu), ", ".join("pid %s (%s)" % (p.get("pid"), p.get("name")) for p in busy))


def clear_operations(gpu_instances):
    """The operations that destroy ``gpu_instances`` (as gpu_info reads them) before MIG mode is disabled: each GPU
    instance's compute instances, then the GPU instance."""
    ops = []
    for gi in gpu_instances:
        for ci in gi.get("compute_instances") or []:
            ops.append({"op": "destroy_compute_instance", "gi_id": gi["id"], "ci_id": ci["id"],
                        "profile": ci.get("profile")})
        ops.append({"op": "destroy_gpu_instance", "gi_id": gi["id"], "profile": gi.get("profile")})
    return ops


def apply_mode(backend, gpu, want, allow_reset, check_mode=False):
    """Bring one GPU to MIG mode ``want`` (or predict it in check mode). Returns the per-GPU result entry.
    NVML errors propagate (the caller reports them; a re-run continues from the state reached)."""
    index = gpu["index"]
    step = mode_step(gpu, want, allow_reset)
    before = {"current": gpu.get("mig_mode_current"), "pending": gpu.get("mig_mode_pending")}
    actions = []
    if step["clear"]:
        actions.append("destroy_instances")
    if step["set"]:
        actions.append("set_mig_mode")
    if step["reset"]:
        actions.append("reset_gpu")
    entry = {"index": index, "uuid": gpu.get("uuid"), "name": gpu.get("name"),
             "architecture": gpu.get("architecture"), "desired": _mode(want), "before": before,
             "actions": actions, "activation_status": None, "processes": step["processes"]}
    status = None
    if check_mode:
        after = predict_mode(gpu, want, step)
        final = step
    else:
        execute_plan(backend, index, clear_operations(step["clear"]))
        if step["set"]:
            status = backend.set_mig_mode(index, want)
            entry["activation_status"] = "SUCCESS" if not status else NVML_ERROR_NAMES.get(status, str(status))
        gpu_now = backend.read_gpu(index)
        if step["reset"] and gpu_now.get("mig_mode_current") != _mode(want):
            backend.reset_gpu(index)
            gpu_now = backend.read_gpu(index)
        elif step["reset"]:
            actions.remove("reset_gpu")
        after = {"current": gpu_now.get("mig_mode_current"), "pending": gpu_now.get("mig_mode_pending")}
        final = mode_step(gpu_now, want, False)
        if status == 16:   # RESET_REQUIRED: no reset exposed here (passthrough)
            final["reboot_required"] = True
            final["reason"] = "SetMigMode answered RESET_REQUIRED: this GPU exposes no reset; reboot"
    pending = after["current"] != _mode(want)
    entry.update({
        "after": after, "changed": bool(actions), "pending": pending,
        "reset_required": bool(pending and final["reset_required"]),
        "reboot_required": bool(pending and final["reboot_required"]),
        "reason": final["reason"] if pending else None,
    })
    if pending and not entry["reason"]:
        entry["reason"] = "a GPU reset activates the pending mode; allow_reset is false"
        entry["reset_required"] = True
    return entry


def execute_plan(backend, index, operations, on_step=None):
    """Run planned operations (_mig_plan.plan_gpu's ``operations``) through a device backend, in order. New GPU
    instances are referred to by ``ref`` until created. Returns the list of (op, result). Stops at the first error
    (the error propagates; a re-run re-reads state and plans again from where it stopped)."""
    refs = {}
    done = []
    for op in operations:
        kind = op["op"]
        if kind == "destroy_compute_instance":
            backend.destroy_compute_instance(index, op["gi_id"], op["ci_id"])
            res = None
        elif kind == "destroy_gpu_instance":
            backend.destroy_gpu_instance(index, op["gi_id"])
            res = None
        elif kind == "create_gpu_instance":
            res = backend.create_gpu_instance(index, op["profile_id"], op["placement"]["start"])
            refs[op["ref"]] = res
        elif kind == "create_compute_instance":
            gi_id = op["gi_id"] if "gi_id" in op else refs[op["ref"]]
            res = backend.create_compute_instance(index, gi_id, op["ci_profile_id"])
        else:
            raise MigLayoutError("unknown plan operation %r" % kind)
        done.append((op, res))
        if on_step:
            on_step(op, res)
    return done


def apply_layout_plans(backend, plans, force_timeout=30, entry_of=dict, on_step=None, on_gpu=None):
    """Execute validated per-GPU plans (from _mig_plan.plan_layout) in order: the one apply path of mig_layout, the
    mig role's boot-time script and the GPU Operator stand-in. Processes on instances that force destroys are ended
    first. Returns per-GPU entries (``entry_of(plan)``, by default a copy of the plan) with the MIG devices after.
    ``on_step(op, result)`` follows every operation done, ``on_gpu(entry)`` every GPU finished, so a caller that
    fails part way knows what changed."""
    out = []
    for plan in plans:
        index = plan["index"]
        entry = entry_of(plan)
        if plan["operations"]:
            pids = sorted(set(p["pid"] for b in plan["busy_destroyed"] for p in b["processes"]))
            if pids:
                terminate_processes(backend, pids, force_timeout)
            execute_plan(backend, index, plan["operations"], on_step=on_step)
            gpu_now = backend.read_gpu(index)
            entry["after"] = layout_view(gpu_now)
            entry["mig_devices"] = devices_of(gpu_now)
        out.append(entry)
        if on_gpu:
            on_gpu(entry)
    return out


def devices_of(gpu):
    return [{"uuid": m.get("uuid"), "gi_id": m.get("gi_id"), "ci_id": m.get("ci_id"),
             "gi_profile": m.get("gi_profile"), "profile": m.get("profile"), "placement": m.get("placement")}
            for m in gpu.get("mig_devices") or []]
