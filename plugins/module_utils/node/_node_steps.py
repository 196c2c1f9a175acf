# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_node role's node steps, each declared once (PRIVATE to gpuops.nvidia).

One ``Step`` per step of the node plan (issue 38, part 1): its options of gpuops.nvidia.gpu_node_plan (the module's
argument spec is the union of them, in this order), its node-side check with one calling convention, and its
controller-side rule (the gpu_node task file that runs it, whether it disrupts the node, which later steps its change
makes run again). The registry's order is the order the role runs the steps in (a step that another one makes run
again comes after it).

A check is ``check(module, facts, params) -> (report, reasons)``: ``params`` holds the step's own options as the
module parsed them, ``facts`` the GPUs as read (gpu_info's facts); ``report`` is None or a dict merged into the
module's result (``{"mig": ...}``), ``reasons`` a dict of step name -> list of reasons it has work (a step named
with an empty list has been checked and has none). Checks run in this order, after every step's ``validate``
(which may fail the module before anything is read) and before every step's ``settle`` (which may correct its
own step's answer from the whole result).

The files, units and packages the roles declare are one pseudo-step, ``declared``, whose entries each name the
step they belong to; it runs no tasks of its own. A step whose work is found only there (container_toolkit) has no
options and no check here. Its report says, per step, the declared packages that are not installed (``installs``):
in check mode nothing is installed, so the steps such a step makes run again cannot be planned in that run.

Planners that only some nodes need are imported inside the checks (module_utils are compiled from source on every
module run, and the MIG planner only where MIG is managed), and the other modules' option specs a step reuses inside
a function that builds its options: the gpu_node role's filter (node_step_gates) reads the registry's controller-side
rules in every run's gate task, without loading them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _gpu_holders, _node_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._gpu_holders import Holder
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Refusal, nothing_changed


class Step(object):
    """One node step: see the module docstring.

    Controller side (the gpu_node role, through gpuops.nvidia.gpu_node_plan's action and the lookup
    gpuops.nvidia.node_steps; see "Controller side" below): ``tasks`` is the gpu_node task file (under
    roles/gpu_node/tasks) that runs it, None for the pseudo-step ``declared``; ``disruptive`` says its work can disrupt
    the GPUs' users (the node is quiesced for it: its result holds ``disruptive``, the reasons; steps.yml includes
    each disruptive step by name, inside the quiesce, and every other step in one loop, in the registry's order); a step
    ``after_disruption`` runs again whenever a disruptive step changes the GPUs (a reset returns what it set);
    ``reruns`` names the later steps that run whenever this one runs (it changes what they read: the toolkit's
    install gives containerd's runtime, the runtime's mode and the CDI spec a new nvidia-ctk); ``after_change``: it
    runs whenever another step runs in a real run (the health gate reads the GPUs again after any change); ``marks``:
    ``marks(node, report)`` says whether the Kubernetes node (as read) carries the step's own marks, or lacks one
    its plan's ``report`` asks for (the step then runs, to take them off once they no longer hold, or to put them
    there). ``managed(v)`` says whether the collection manages the step on this node (who
    owns it: the GPU Operator, DRA, the collection), from the role's variables ``v`` (``RoleVars``; default: always);
    ``planned(v)`` whether the node plan checks it (default: where managed); ``inputs(v)`` its options of
    gpu_node_plan (option -> value) where planned; ``declares`` the fact its role's ``declared`` entry point sets (the
    files, units and packages the plan compares). ``needs_nvml``: its check reads the GPUs through NVML (where NVML
    cannot start yet, it waits for the driver step). ``holds_gpus``: the daemons the step runs that hold the GPUs
    (``_gpu_holders.Holder``s): the driver's unload and MIG's client stop before a GPU reset stop them first, with
    ``OTHER_GPU_HOLDERS`` (``gpu_holders``)."""

    __slots__ = ("name", "_options", "check", "validate", "settle", "tasks", "disruptive", "after_disruption",
                 "reruns", "needs_nvml", "managed", "planned", "inputs", "declares", "after_change", "marks",
                 "holds_gpus")

    def __init__(self, name, options, check=None, validate=None, settle=None, tasks=None, disruptive=False,
                 after_disruption=False, reruns=(), needs_nvml=False, managed=None, planned=None, inputs=None,
                 declares=None, after_change=False, marks=None, holds_gpus=()):
        self.name = name
        self._options = options
        self.check = check
        self.validate = validate
        self.settle = settle
        self.tasks = tasks
        self.disruptive = disruptive
        self.after_disruption = after_disruption
        self.reruns = tuple(reruns)
        self.needs_nvml = needs_nvml
        self.managed = managed if managed is not None else _always
        self.planned = planned if planned is not None else self.managed
        self.inputs = inputs
        self.declares = declares
        self.after_change = after_change
        self.marks = marks
        self.holds_gpus = tuple(holds_gpus)

    @property
    def options(self):
        """The step's options of gpu_node_plan (option -> spec). An option whose spec is another module's names a
        function that imports it, so that the controller's filters read the registry without those."""
        if any(callable(spec) for spec in self._options.values()):
            self._options = dict((option, spec() if callable(spec) else spec) for option, spec in self._options.items())
        return self._options

    @property
    def option_names(self):
        """The names of the step's options, without building their specs."""
        return list(self._options)

    def params(self, module):
        return dict((option, module.params[option]) for option in self._options)

    def given(self, module):
        """Whether the module was given this step (any of its options is not None), and asked to plan it (the
        module's ``steps``, where set)."""
        only = module.params.get("steps")
        if only is not None and self.name not in only:
            return False
        return any(module.params[option] is not None for option in self._options)


def _always(v):
    return True


def _driver(module, facts, params):
    """The loaded driver against the declared pin (_driver_step: the planner and the read below NVML)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_step
    return _driver_step.check(module, facts, params)


def _driver_validate(module, params):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_step
    _driver_step.validate(module, params)


def _mig(module, facts, params):
    """MIG as gpu_node planned it with mig_mode and mig_layout in check mode: same functions, same results,
    same errors (mig_mode's first). The plans are returned when something changes (what gpu_node shows then)."""
    p = params["mig"]
    gpus = facts["gpus"]
    out = {"managed": _node_plan.mig_managed(gpus, p["manage"]), "disruptive": []}
    if not out["managed"]:
        return {"mig": out}, {"mig": []}
    # imported here: a node without MIG to manage never compiles the planner (module_utils are compiled from
    # source on every module run)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import MigBusyError
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import (
        assumed_warning, layout_entry, layout_result, plan_layouts, plan_modes)
    plan_params = {"gpus": ["all"], "enabled": None, "layout": p["layout"], "config_file": None,
                   "config_name": p["config_name"], "allow_reset": p["allow_reset"], "force": p["force"]}
    try:
        out["mode_plan"] = plan_modes(gpus, plan_params)
    except MigLayoutError as exc:
        raise Refusal(str(exc))
    try:
        resolved, plans, assumed = plan_layouts(gpus, plan_params, check_mode=True)
    except MigBusyError as exc:
        raise Refusal(str(exc), busy=exc.busy)
    except MigLayoutError as exc:
        raise Refusal(str(exc))
    if assumed:
        module.warn(assumed_warning(assumed))
    by_index = dict((g["index"], g) for g in gpus)
    out["layout_plan"] = layout_result(resolved, [layout_entry(plan, assumed, by_index[plan["index"]])
                                                  for plan in plans])
    out["disruptive"] = _node_plan.mig_disruptive(out["mode_plan"], out["layout_plan"])
    if not out["disruptive"]:
        del out["mode_plan"], out["layout_plan"]
    return {"mig": out}, {"mig": list(out["disruptive"])}


def _mig_settle(result, steps):
    """Nothing of MIG's is done on a node where it is not managed: its files are reported, not work."""
    if "mig" in result and not result["mig"]["managed"]:
        steps["mig"] = []


def _compute_mode(module, facts, params):
    """compute_mode's check-mode plan, and its boot-time unit: the role writes the unit from compute_mode's result
    for the GPUs after the change, which is this plan's ``gpus`` (so the unit is compared only where nothing else
    changes; otherwise the step has work anyway)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import (
        ComputeModeError, boot_unit, plan_settings, planned_state, report)
    p = params["compute_mode"]
    try:
        todo = plan_settings(facts["gpus"], p["settings"], p["persistence_mode"])
    except ComputeModeError as exc:
        raise Refusal(str(exc))
    out = {"changes": todo["changes"], "mode": todo["mode"], "gpus": report(planned_state(todo)),
           "modes": dict((str(k), v) for k, v in todo["modes"].items())}
    reasons = _node_plan.compute_mode_reasons(todo)
    unit = p["boot_unit"]
    if unit is not None:
        text = boot_unit(out["gpus"], bool(p["persistence_mode"]), unit["nvidia_smi"])
        reason = _node_plan.file_reason({"path": unit["path"], "mode": unit["mode"],
                                         "checksum": _node_plan.sha1(text)}, _node_plan.observe(unit["path"]))
        reasons += [reason] if reason else []
    return {"compute_mode": out}, {"compute_mode": reasons}


def _add(reasons, step, found):
    reasons.setdefault(step, []).extend(found)


def _declared_validate(module, params):
    """Refuse a relative path, a checksum that is not a sha1, a mode that is not octal, a package name or version
    that is not one (before anything is read)."""
    for entry in params["files"]:
        if not entry["path"].startswith("/"):
            raise Refusal("files: path %r must be absolute" % entry["path"])
        if entry["checksum"] is not None and (len(entry["checksum"]) != 40 or
                                              any(c not in "0123456789abcdef" for c in entry["checksum"])):
            raise Refusal("files: checksum of %s must be a sha1 in hex (40 characters 0-9a-f), got %r"
                          % (entry["path"], entry["checksum"]))
        if _node_plan.normal_mode(entry["mode"]) is False:
            raise Refusal("files: mode of %s must be octal like 0644, got %r" % (entry["path"], entry["mode"]))
    if not params["packages"]:
        return
    # imported here (and in _packages_state): a node plan without packages never compiles their code (module_utils
    # are compiled from source on every module run)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages
    for entry in params["packages"]:
        for name in entry["names"]:
            if not _packages.NAME_RE.match(name) or not _packages.VERSION_RE.match(entry["version"]):
                raise Refusal("packages: %r at %r is not a package name (a-z, 0-9, +.-) at a version "
                              "(starting with a digit; A-Z, a-z, 0-9, .+~^_:-)" % (name, entry["version"]))


def _declared(module, facts, params):
    """Every file, directory, absence, unit and package the roles declare, each under its own step."""
    reasons = {}
    report = {"files": {}}
    for entry in params["files"]:
        seen = report["files"][entry["path"]] = _node_plan.observe(entry["path"])
        reason = _node_plan.file_reason(entry, seen)
        _add(reasons, entry["step"], [reason] if reason else [])
    if params["units"]:
        systemctl = module.get_bin_path("systemctl")
        for unit in params["units"]:
            if systemctl is None:
                reason = "unit %s: systemctl not found" % unit["name"]
            else:
                rc, out, dummy = module.run_command([systemctl, "is-enabled", unit["name"]])
                reason = _node_plan.unit_reason(unit["name"], rc, out)
            _add(reasons, unit["step"], [reason] if reason else [])
    if params["packages"]:
        report["packages"], report["installs"] = _packages_state(module, params["packages"], reasons)
    return report, reasons


def _packages_state(module, packages, reasons):
    """The declared packages as the package database has them (one read per package manager), each step's
    reasons, and per step the packages it would install (not installed now). A database that cannot be read is work
    for every package it holds (the role then says why)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages
    found, installs = {}, {}
    by_manager = {}
    for entry in packages:
        for name in entry["names"]:
            by_manager.setdefault(entry["manager"], []).append(dict(entry, name=name))
    for manager, entries in sorted(by_manager.items()):
        names = [e["name"] for e in entries]
        try:
            installed = _packages.read_installed(module, manager, names)
        except _packages.PackageError as exc:
            for entry in entries:
                _add(reasons, entry["step"], ["package %s cannot be read: %s" % (entry["name"], exc)])
            continue
        for entry in entries:
            found[entry["name"]] = installed[entry["name"]]
            _add(reasons, entry["step"], _packages.reasons([entry], installed))
            if installed[entry["name"]].get("version") is None:
                _add(installs, entry["step"], [entry["name"]])
    return found, installs


def _runtime_mode(module, facts, params):
    """Whether nvidia-container-runtime's config sets the declared mode (an absent config means auto)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError, read_text
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._runtime_mode import mode_reason
    p = params["runtime_mode"]
    try:
        text = read_text(p["config_path"], "runtime config") if os.path.lexists(p["config_path"]) else None
        reason = mode_reason(text, p["config_path"], p["mode"])
    except InputFileError as exc:
        reason = str(exc)
    return None, {p["step"]: [reason] if reason else []}


def _containerd(module, facts, params):
    """containerd_runtime's verified-state stamp, checked for the tools it would run (found the way it finds them:
    a tool it would not find or run is work, and the module then fails with its own message)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._containerd_stamp import verified_state
    p = params["containerd"]
    report = _containerd_target(p)  # the containerd the kubelet talks to; k3s/RKE2 read on their own terms
    if report is not None:
        facts = {"containerd": report}
        if "distribution" in report:  # k3s/RKE2: no nvidia-ctk run, so planned in check mode before the toolkit
            facts[p["step"]] = {"needs_installs": False}
        return facts, {p["step"]: report["reasons"]}
    report, reason = verified_state(module, p)
    return {"containerd": report}, {p["step"]: [reason] if reason else []}


def _containerd_target(p):
    """None for a plain containerd that serves the kubelet (its stamp decides); else the report: a declaration aimed
    at a containerd that does not serve the kubelet (refused, naming both), or k3s/RKE2's files and restart."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _containerd_distribution as dist
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import ContainerdConfigError
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_target import TargetError
    try:
        kind, target = dist.target(p)
        if kind == "containerd":
            return None
        planned = dist.plan_distribution(kind, p, dist.node_root())
    except (TargetError, ContainerdConfigError) as exc:
        return {"refused": str(exc), "reasons": [str(exc)]}
    reasons = ["%s %s" % (item["path"], item["action"]) for item in planned.plan if item["action"] != "none"]
    reasons += [r for r in planned.restart_reasons if not r.endswith(" changes")]
    return dict(planned.fields, config=target.config, socket=target.socket, reasons=reasons)


def _cdi(module, facts, params):
    """cdi_spec's record, compared with the spec and the GPUs as read (nvidia-ctk found the way cdi_spec finds
    it: not found is work, and cdi_spec then fails with its own message); with state absent, whether the spec or
    its record is still there."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi import (
        expected_devices, stamp_inputs, stamp_path, stamp_reason)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import CTK_PACKAGE
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import InputFileError, read_text
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
        ToolNotFound, binary_identity, file_digest, require_tool)
    p = params["cdi"]
    try:
        ctk = require_tool(module.get_bin_path, p, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
    except ToolNotFound as exc:
        return None, {p["step"]: [exc.reason]}
    record = stamp_path(p["spec_path"])
    if p["state"] == "absent":
        present = [path for path in (p["spec_path"], record) if os.path.lexists(path)]
        return None, {p["step"]: ["%s present (state absent)" % ", ".join(present)] if present else []}
    try:
        recorded = read_text(record, "CDI spec record") if os.path.lexists(record) else None
    except InputFileError:
        recorded = ""
    inputs = stamp_inputs(p, expected_devices(facts["gpus"], p["device_name_strategy"]), facts.get("driver_version"),
                          binary_identity(ctk))
    reason = stamp_reason(recorded, inputs, file_digest(p["spec_path"]))
    return None, {p["step"]: [reason] if reason else []}


def _dev_char(module, facts, params):
    """The /dev/char links nvidia-ctk's --create-all dry run names, and the udev rule (node/_dev_char: the module's own
    read, the links from its stamp where nothing they depend on changed; nvidia-ctk found the way dev_char_symlinks
    finds it: not found is work, and the module then fails with its own message)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _dev_char
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._containerd_distribution import node_root
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import CTK_PACKAGE
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import ToolNotFound, require_tool
    p = params["dev_char"]
    try:
        ctk = require_tool(module.get_bin_path, p, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
    except ToolNotFound as exc:
        return None, {p["step"]: [exc.reason]}
    problems = _dev_char.path_problems(p) + _dev_char.place_problems(p)
    return None, {p["step"]: problems or _dev_char.check(module.run_command, ctk, p, root=node_root())}


def _dcgm_validate(module, params):
    """Refuse a version, CUDA major, unit name or package file path that is not one (before anything is read)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_plan
    errors = _dcgm_plan.validate(params["dcgm"])
    if errors:
        raise Refusal(nothing_changed("dcgm: %s" % "; ".join(errors)))


def _dcgm_check(module, facts, params):
    """DCGM's packages against the pin and its host engine's unit (enabled, running), read and planned as
    dcgm_host_engine reads and plans them (node/_dcgm_node, plan/_dcgm_plan). What cannot be read or planned (no
    package manager, a downgrade not allowed) is work: the module then fails with its own message."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._dcgm_node import find_systemctl, read_node
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_plan, _packages
    p = params["dcgm"]
    try:
        current = read_node(module, p, find_systemctl(module, p["systemctl"]))
        todo = _dcgm_plan.plan(p["state"], current["manager"], current["names"], p["version"], current["installed"],
                               current["unit"], p["allow_downgrade"], hold=p["hold"], pin=current["pin"])
    except (_dcgm_plan.DcgmPlanError, _packages.PackageError) as exc:
        return None, {"dcgm": [str(exc)]}
    return {"dcgm": {"packages": todo["packages"], "service": todo["service"]}}, {"dcgm": todo["reasons"]}


def _dcgm_managed(v):
    """Where the node declares DCGM (present or absent), except on a GPU Operator cluster: the operator runs its own
    DCGM (and dcgm-exporter) there, and a second host engine on the node would compete with it for the GPUs'
    profiling counters (NVIDIA/dcgm-exporter issues 22 and 707)."""
    return v("gpu_node_dcgm", "unmanaged") != "unmanaged" and not (_kube(v) and _provider(v) == "gpu_operator")


def _dcgm_inputs(v):
    return {"dcgm": {"state": v("gpu_node_dcgm"), "version": v.text("gpu_node_dcgm_version"),
                     "cuda": int(v("gpu_node_dcgm_cuda", 12)), "proprietary": v.flag("gpu_node_dcgm_proprietary"),
                     "package_manager": v("gpu_node_dcgm_package_manager", "auto"),
                     "allow_downgrade": v.flag("gpu_node_dcgm_allow_downgrade"),
                     "hold": v.flag("gpu_node_dcgm_hold", True),
                     "service": v("gpu_node_dcgm_service", "nvidia-dcgm.service"),
                     "systemctl": v("gpu_node_driver_systemctl") or None}}


def _burn_in_check(module, facts, params):
    """The node's burn-in record against the loaded driver and the declared level (_burn_in.reasons)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _burn_in
    p = params["burn_in"]
    record = _burn_in.read_record(_burn_in.record_path())
    return None, {"burn_in": _burn_in.reasons(record, p["level"], facts.get("driver_version") or "")}


def _health_validate(module, params):
    """Refuse a policy naming a finding kind or an action that is not one (before anything is read)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
        HealthPolicyError, validate_policy)
    try:
        validate_policy(params["health"]["policy"] or None)
    except HealthPolicyError as exc:
        raise Refusal(nothing_changed("health.policy: %s" % exc))


def _health(module, facts, params):
    """The GPUs' health, read in the plan's one read (``facts["health_read"]``: the backend's read_health, from the
    same session as the facts), with the policy's verdict: the report is gpu_info's health section without each
    GPU's read fields (gpu_info shows them), the reasons are the blocking findings. A read, never disruptive."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import summary
    read = facts["health_read"]
    if params["health"]["dcgm_diag"]:
        # DCGM's diagnostic (optional, off by default: it takes time on a real node); dcgmi missing is a note
        from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._dcgm import run_for_module
        read = dict(read, dcgm=run_for_module(module, params["health"]["dcgmi"]))
    report = summary(read, params["health"]["policy"] or None, gpus=False)
    return {"health": report}, {"health": list(report["blocking"])}


def _host_imex_validate(module, params):
    """Refuse a state, unit name or record path that is not one (before anything is read)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _host_imex
    problems = _host_imex.validate(params["host_imex"])
    if problems:
        raise Refusal(nothing_changed("host_imex: %s" % "; ".join(problems)))


def _host_imex_check(module, facts, params):
    """ComputeDomains on this node (node/_host_imex): the host's IMEX units masked (or given back what they were once
    the declaration went away: work once, from the collection's record), and, where declared, what the node offers
    the DRA driver - the IMEX channels' major, the driver branch, the clique label as GFD computes it
    (plan/_nvlink_rack). Only the units are work; the rest is reported (``problems``) for the rack check of the
    cluster play, which writes the clique label on the nodes of a ready rack (roles/cluster/tasks/nvl_racks.yml)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _host_imex
    p = params["host_imex"]
    try:
        systemctl = _host_imex.systemctl_argv(module.get_bin_path, p["systemctl"])
        record = _host_imex.read_record(p["record"])
    except _host_imex.HostImexError as exc:
        return {"host_imex": {"state": p["state"], "refused": str(exc)}}, {"host_imex": [str(exc)]}
    names = list(p["units"]) + [u for u in sorted(record or {}) if u not in p["units"]]
    units = _host_imex.read_units(module.run_command, systemctl, names) if p["state"] == "masked" or record else {}
    todo = _host_imex.plan(p["state"], names, units, record)
    report = {"state": p["state"], "units": units}
    if p["state"] == "masked":
        from ansible_collections.gpuops.nvidia.plugins.module_utils.node._containerd_distribution import node_root
        from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._nvlink_rack import clique_label
        channels = _host_imex.channels(node_root())
        label = clique_label(facts["gpus"])
        report.update(channels=channels,
                      driver_version=facts.get("driver_version"), clique=label["value"],
                      problems=(_host_imex.driver_problems(facts.get("driver_version")) + channels["problems"]
                                + ([] if label["value"] else ["no nvidia.com/gpu.clique: %s" % label["reason"]])))
    return {"host_imex": report}, {"host_imex": todo["reasons"]}


def _host_imex_inputs(v):
    return {"host_imex": {"state": "masked" if v.flag("gpu_node_dra_compute_domains") else "unmasked",
                          "units": v("gpu_node_host_imex_units"), "record": v("gpu_node_host_imex_record"),
                          "systemctl": v("gpu_node_driver_systemctl") or None}}


def _with_step(spec, step):
    """A step's own module's argument spec, plus the step its reasons go to."""
    return dict(spec, step=dict(type="str", default=step))


def _containerd_spec():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import ARGUMENT_SPEC
    return dict(type="dict", options=_with_step(ARGUMENT_SPEC, "containerd_runtime"))


def _cdi_spec():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi import ARGUMENT_SPEC
    return dict(type="dict", options=_with_step(ARGUMENT_SPEC, "cdi"))


def _dev_char_spec():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._dev_char import ARGUMENT_SPEC
    return dict(type="dict", options=_with_step(ARGUMENT_SPEC, "dev_char"))


def _runtime_mode_spec():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._runtime_mode import ARGUMENT_SPEC
    return dict(type="dict", options=_with_step(ARGUMENT_SPEC, "runtime_mode"))


# Controller side: what the gpu_node role's variables make of each step. These run on the controller only (the lookup
# gpuops.nvidia.node_steps and gpuops.nvidia.gpu_node_plan's action), never in the module: they read the role's
# variables (defaults/main.yml, the inventory, the roles' declarations) through ``RoleVars``.

class RoleVars(object):
    """The role's variables for the rules below: ``get(name)`` returns a variable's value as ansible-core templates
    it and raises KeyError where it is not defined; each is templated once."""

    _MISSING = object()

    def __init__(self, get):
        self._get = get
        self._seen = {}

    def __call__(self, name, default=None):
        """The variable's value; ``default`` where it is not defined (Jinja's ``default``)."""
        if name not in self._seen:
            try:
                self._seen[name] = self._get(name)
            except KeyError:
                self._seen[name] = self._MISSING
        value = self._seen[name]
        return default if value is self._MISSING else value

    def flag(self, name, default=False):
        """A boolean variable as Jinja's ``bool`` filter reads it (ansible-core's own conversion)."""
        value = self(name, default)
        return bool(value) if isinstance(value, bool) else boolean(value, strict=False)

    def text(self, name):
        """A variable as text, empty where it is not defined or null (``default('') | string``)."""
        value = self(name, "")
        return "" if value is None else str(value)


def _provider(v):
    return v("gpu_node_device_plugin_provider")


def _kube(v):
    return v.flag("gpu_node_kubernetes")


def _driver_managed(v):
    """Only where the node declares a driver (the driver role's version or branch)."""
    return len(v.text("driver_version")) > 0 or len(v.text("driver_branch")) > 0


def _mig_manage(v):
    """``declared`` where the node declares MIG, ``disable`` where another sharing strategy must turn it off where it
    is on (decided by the node plan from the GPUs), else empty: MIG is not planned."""
    if v("gpu_node_sharing") == "mig":
        return "declared"
    return "disable" if v.flag("gpu_node_disable_mig") else ""


def _mig_managed(v):
    """MIG is the collection's unless, on a cluster, the GPU Operator's MIG manager owns it (the node plan still plans
    it; the gate leaves it alone)."""
    return not (_kube(v) and v("gpu_node_mig_owner") == "gpu_operator")


def _mig_resolved(v):
    """What the mig role is given (its boot files declared, its tasks run): the layout, the named config, and the CDI
    spec's parameters for its boot unit (which writes the spec again once it re-created the instances)."""
    mig = v("gpu_node_sharing") == "mig"
    layout = (v("gpu_node_mig_layout") or []) if mig else []
    if not mig:
        config_name = "all-disabled"
    else:
        config_name = "" if len(layout) > 0 else v("gpu_node_mig_config_name")
    cdi = {}
    if _cdi_managed(v):
        cdi = dict((k, val) for k, val in v("__gpu_node_cdi").items() if k != "state")
    return {"manage": _mig_manage(v), "layout": layout, "config_name": config_name, "cdi": cdi,
            "blockers": _mig_blockers(v)}


def _mig_blockers(v):
    """The units the mig role stops before a reset: the registry's GPU holders (``reset_blockers``), the MPS control
    daemon's unit as the mps_control role names it, after any other unit that ``mig_blocker_services`` names (the
    inventory's: gpu_node imports the mig role, so the variable is defined even where only the role's default, which
    is the registry's list, sets it). A unit the registry holds cannot be left out this way (mig_manage_services:
    false stops none)."""
    derived = reset_blockers(mps_unit=v.text("mps_control_service_name") or _gpu_holders.DEFAULT_MPS_UNIT)
    given = v("mig_blocker_services") or []
    if not isinstance(given, list) or not all(isinstance(u, str) for u in given):
        raise ValueError("mig_blocker_services must be a list of systemd unit names, got %r" % (given,))
    extra = [u for u in given if u not in derived and u + ".service" not in derived]
    return extra + derived


def _mig_inputs(v):
    mig = _mig_resolved(v)
    out = {"manage": mig["manage"], "allow_reset": v("mig_allow_reset", True), "force": v("mig_force", False)}
    if len(mig["layout"]) > 0:
        out["layout"] = mig["layout"]
    else:
        out["config_name"] = mig["config_name"]
    return {"mig": out}


def _compute_mode_managed(v):
    """Not with DRA, whose driver sets the compute mode per claim (EXCLUSIVE_PROCESS while an MPS claim is prepared,
    DEFAULT for time-slicing: kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1 cmd/gpu-kubelet-plugin/sharing.go); setting
    it back would break a running MPS workload. Validation refuses a declared mode other than Default there."""
    return _provider(v) != "dra"


def _compute_mode_inputs(v):
    declared = v("__compute_mode_declared")
    return {"compute_mode": dict((key, declared.get(key)) for key in ("settings", "persistence_mode", "boot_unit"))}


def _containerd_managed(v):
    """containerd's runtime is the collection's where gpu_node_manage_containerd says so, except on a node of a GPU
    Operator cluster whose container toolkit writes it (the cluster step's containerd_owners)."""
    if not v.flag("gpu_node_manage_containerd"):
        return False
    if _kube(v) and _provider(v) == "gpu_operator":
        owners = (v("cluster_gpu_operator") or {}).get("containerd_owners") or {}
        return owners.get(v("gpu_node_kube_node_name"), "collection") != "gpu_operator"
    return True


def _toolkit_managed(v):
    """The NVIDIA Container Toolkit only where containerd's runtime is the collection's."""
    return _containerd_managed(v) and v.flag("gpu_node_install_container_toolkit")


def _runtime_mode_managed(v):
    """Where CDI is on or a mode other than the default is declared (an absent config means auto, and a node that
    declares neither is never touched); never under the GPU Operator, whose toolkit writes the runtime's config."""
    return ((v.flag("gpu_node_cdi") or v("gpu_node_runtime_mode") != "auto")
            and _provider(v) != "gpu_operator")


def _dev_char_managed(v):
    """gpu_node_dev_char_symlinks: ``always``; ``unmanaged`` never; ``auto`` where the runtime is not in CDI mode (mode
    not cdi, and the device plugin passing device lists rather than CDI names, which the runtime's auto mode would
    inject from the spec) and containerd's runtime is the collection's (nvidia-ctk comes with its toolkit). Never
    under the GPU Operator: its driver validator makes the links itself (its DISABLE_DEV_CHAR_SYMLINK_CREATION
    turns that off; NVIDIA/gpu-operator#1015). In CDI mode ``auto`` leaves the node's links and rule as they are
    (neither made nor removed): the GPU Operator's validator makes them whatever the runtime's mode
    (NVIDIA/gpu-operator at 92f404ce, cmd/nvidia-validator/main.go: Driver.validate -> createDevCharSymlinks), they
    harm no CDI container, and a node switched to CDI may still run containers started without it."""
    setting = v("gpu_node_dev_char_symlinks", "auto")
    if setting == "unmanaged" or _provider(v) == "gpu_operator":
        return False
    if setting == "always":
        return True
    return (_containerd_managed(v) and v("gpu_node_runtime_mode") != "cdi"
            and not str(v("gpu_node_device_list_strategy", "envvar")).startswith("cdi"))


def _cdi_managed(v):
    """Only where the collection owns the node's container runtime: under the GPU Operator its toolkit writes the spec
    (validation refuses gpu_node_cdi there)."""
    return v.flag("gpu_node_cdi") and _provider(v) != "gpu_operator"


def _driver_inputs(v):
    return {"driver": {
        "version": v.text("driver_version"), "branch": v.text("driver_branch"),
        "flavour": v("driver_flavour", "open"), "root": v("driver_root") or None,
        "fabric_manager": v.text("driver_fabric_manager").lower() or "auto",
        "persistenced": v.flag("driver_start_persistenced", True),
        "systemctl": v("gpu_node_driver_systemctl") or None,
        "fabric_timeout": int(v("gpu_node_driver_fabric_timeout")),
        "fabric_manager_version": v.text("driver_fabric_manager_version"),
        "allow_downgrade": v.flag("driver_allow_downgrade", False),
        "modinfo": v("driver_modinfo") or v("gpu_node_driver_modinfo") or None, "dkms": v("driver_dkms") or None,
        "module_parameters": v("driver_module_parameters") or {}}}


def _health_inputs(v):
    return {"health": {"policy": v("gpu_node_health_policy"), "dcgm_diag": v.flag("gpu_node_health_dcgm_diag"),
                       "dcgmi": v("gpu_node_health_dcgmi")}}


def _health_marks(node, report):
    """The health gate's own marks on the Kubernetes node (node_cordon's query): its taint or its condition; or a
    burn-in record (the plan's health read) that the node does not carry as it is (the annotation node_health
    writes): a node burned in before the annotation existed, or whose annotation someone changed."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._burn_in import annotation_value
    burn_in = (report.get("health") or {}).get("burn_in")
    return (any(t.get("key") == "gpuops.nvidia/gpu-unhealthy" for t in node.get("taints") or [])
            or any(c.get("type") == "GpuopsNvidiaGpuHealthy" for c in node.get("conditions") or [])
            or (isinstance(burn_in, dict) and node.get("burn_in") != annotation_value(burn_in)))


# The daemons that hold the GPUs that no node step runs, but that the driver's unload and a GPU reset must stop first
# (where they run): NVIDIA's DCGM host engine (nvidia-dcgm.service, DCGM documentation "Customizing the systemd
# Service"; its pid file the default of nv-hostengine --pid, NVIDIA/DCGM hostengine/src/HostEngineCommandLine.cpp),
# its Prometheus exporter and NVSM (DGX systems; the host services NVIDIA's MIG manager stops before a mode change,
# NVIDIA/mig-parted at bd7160f4 deployments/systemd/hooks.sh), and the MPS control daemon of the mps_control role
# (not a step of gpu_node; its unit is the role's mps_control_service_name). A step that runs such a daemon names it
# in its ``holds_gpus`` instead. Ranks: _gpu_holders.Holder (clients of the driver: stopped before the driver's own
# daemons, started after them; the exporter stops first and starts last, as it reads DCGM).
OTHER_GPU_HOLDERS = (
    Holder("dcgm_exporter", "DCGM exporter (dcgm-exporter)", ("dcgm-exporter.service",), stop=10, start=90),
    Holder("nvsm", "NVIDIA System Management (nvsm)", ("nvsm.service",), stop=30, start=70),
    Holder("mps", "MPS control daemon (nvidia-cuda-mps-control)", (_gpu_holders.DEFAULT_MPS_UNIT,), stop=40,
           start=60),
)

STEPS = (
    # first: a driver change loses MIG's instances and the compute mode and changes the files the CDI spec lists
    Step("driver", {"driver": dict(type="dict", options=dict(
        version=dict(type="str", default=""),
        branch=dict(type="str", default=""),
        flavour=dict(type="str", choices=["open", "proprietary"], default="open"),
        root=dict(type="path"),
        fabric_manager=dict(type="str", default="auto"),
        persistenced=dict(type="bool", default=False),
        systemctl=dict(type="list", elements="str"),
        fabric_timeout=dict(type="int", default=300),
        fabric_manager_version=dict(type="str", default=""),
        allow_downgrade=dict(type="bool", default=False),
        # the next boot's kernel and its modules (_driver_kernel; the driver role's driver_next_kernel acts on them)
        modinfo=dict(type="list", elements="str"),
        dkms=dict(type="list", elements="str"),
        # the nvidia module's NVreg_ parameters (_driver_params): a loaded driver reading others is reloaded
        module_parameters=dict(type="dict", default={}),
    ))}, check=_driver, validate=_driver_validate, tasks="driver.yml", disruptive=True,
        reruns=("mig", "compute_mode", "cdi", "dev_char"), managed=_driver_managed, inputs=_driver_inputs,
        declares="__driver_declared",
        # the daemons driver_services starts with the driver (NVIDIA/gpu-driver-container's nvidia-driver: stopped in
        # this order through their pid files, persistenced started first; the fabric manager's start script starts
        # NVLSM on NVLink5 systems, whose nvidia-nvlsm.service is not confirmed by an NVIDIA source: its pid file
        # decides where no such unit runs)
        holds_gpus=(
            Holder("persistenced", "nvidia-persistenced", ("nvidia-persistenced.service",),
                   pid_file="/var/run/nvidia-persistenced/nvidia-persistenced.pid", stop=80, start=10),
            Holder("fabricmanager", "NVIDIA Fabric Manager (nv-fabricmanager)", ("nvidia-fabricmanager.service",),
                   pid_file="/var/run/nvidia-fabricmanager/nv-fabricmanager.pid", stop=85, start=30),
            Holder("nvlsm", "NVLink Subnet Manager (nvlsm)", ("nvidia-nvlsm.service",),
                   pid_file="/var/run/nvidia-fabricmanager/nvlsm.pid", stop=90, start=20))),
    Step("mig", {"mig": dict(type="dict", options=dict(
        manage=dict(type="str", choices=["declared", "disable"], required=True),
        layout=dict(type="list", elements="dict"),
        config_name=dict(type="str"),
        allow_reset=dict(type="bool", default=True),
        force=dict(type="bool", default=False),
    ), mutually_exclusive=[("layout", "config_name")], required_one_of=[("layout", "config_name")])},
        check=_mig, settle=_mig_settle, tasks="mig.yml", disruptive=True, needs_nvml=True, managed=_mig_managed,
        planned=lambda v: len(_mig_manage(v)) > 0, inputs=_mig_inputs, declares="__mig_declared"),
    Step("compute_mode", {"compute_mode": dict(type="dict", options=dict(
        settings=dict(type="list", elements="dict", required=True, options=dict(
            gpus=dict(type="list", elements="str", default=["all"]),
            mode=dict(type="str", required=True))),
        persistence_mode=dict(type="bool"),
        boot_unit=dict(type="dict", options=dict(
            path=dict(type="path", required=True),
            nvidia_smi=dict(type="path", default="/usr/bin/nvidia-smi"),
            mode=dict(type="str", default="0644"))),
    ))}, check=_compute_mode, tasks="compute_mode.yml", after_disruption=True, needs_nvml=True,
        managed=_compute_mode_managed, inputs=_compute_mode_inputs, declares="__compute_mode_declared"),
    Step("declared", {
        "files": dict(type="list", elements="dict", default=[], options=dict(
            step=dict(type="str", required=True),
            path=dict(type="path", required=True),
            state=dict(type="str", choices=list(_node_plan.FILE_STATES), default="file"),
            checksum=dict(type="str"),
            mode=dict(type="str"),
        )),
        "units": dict(type="list", elements="dict", default=[], options=dict(
            step=dict(type="str", required=True),
            name=dict(type="str", required=True),
        )),
        "packages": dict(type="list", elements="dict", default=[], options=dict(
            step=dict(type="str", required=True),
            manager=dict(type="str", choices=["apt", "dnf"], required=True),
            names=dict(type="list", elements="str", required=True),
            version=dict(type="str", required=True),
            hold=dict(type="bool", default=False),
        )),
    }, check=_declared, validate=_declared_validate),
    # its packages ship the nvidia-ctk that the three steps after it run (and nvidia-container-runtime's config)
    Step("container_toolkit", {}, tasks="toolkit.yml", reruns=("containerd_runtime", "runtime_mode", "cdi", "dev_char"),
         managed=_toolkit_managed, declares="__container_toolkit_declared"),
    # (its declaration: what gpu_node itself writes where the host has no containerd config yet, vars/main.yml)
    Step("containerd_runtime", {"containerd": _containerd_spec}, check=_containerd, tasks="containerd.yml",
         managed=_containerd_managed, inputs=lambda v: {"containerd": v("__containerd_runtime_declared")},
         declares="__gpu_node_containerd_seed"),
    Step("runtime_mode", {"runtime_mode": _runtime_mode_spec}, check=_runtime_mode, tasks="runtime_mode.yml",
         managed=_runtime_mode_managed, inputs=lambda v: {"runtime_mode": v("__gpu_node_runtime")}),
    # after MIG: the spec lists the MIG devices as they are after any change
    Step("cdi", {"cdi": _cdi_spec}, check=_cdi, tasks="cdi.yml", after_disruption=True, needs_nvml=True,
         managed=_cdi_managed, inputs=lambda v: {"cdi": v("__gpu_node_cdi")}),
    # the /dev/char links of the NVIDIA nodes where the runtime is not in CDI mode (after the driver, whose reload can
    # give nvidia-uvm another major, and the toolkit, whose nvidia-ctk makes them)
    Step("dev_char", {"dev_char": _dev_char_spec}, check=_dev_char, tasks="dev_char.yml", needs_nvml=True,
         managed=_dev_char_managed, inputs=lambda v: {"dev_char": v("__gpu_node_dev_char")}),
    # NVIDIA DCGM and its host engine (nvidia-dcgm.service): before the burn-in and the health gate, whose dcgmi
    # talks to this engine
    Step("dcgm", {"dcgm": dict(type="dict", options=dict(
        state=dict(type="str", choices=["present", "absent"], required=True),
        version=dict(type="str", required=True),
        cuda=dict(type="int", default=12),
        proprietary=dict(type="bool", default=False),
        package_manager=dict(type="str", choices=["apt", "dnf", "auto"], default="auto"),
        allow_downgrade=dict(type="bool", default=False),
        hold=dict(type="bool", default=True),
        service=dict(type="str", default="nvidia-dcgm.service"),
        systemctl=dict(type="list", elements="str"),
    ))}, check=_dcgm_check, validate=_dcgm_validate, tasks="dcgm.yml", managed=_dcgm_managed, inputs=_dcgm_inputs,
        # its host engine holds the GPUs (a node whose image brings DCGM runs the same unit: quiesced either way)
        holds_gpus=(Holder("dcgm", "DCGM host engine (nv-hostengine)", ("nvidia-dcgm.service",),
                           pid_file="/var/run/nvhostengine.pid", stop=20, start=80),)),
    # ComputeDomains (NVIDIA's DRA driver): the host's own IMEX service masked (docs/dra.md)
    Step("host_imex", {"host_imex": dict(type="dict", options=dict(
        state=dict(type="str", choices=["masked", "unmasked"], required=True),
        units=dict(type="list", elements="str", default=["nvidia-imex.service", "nvidia-imex-ctl.service"]),
        record=dict(type="path", default="/var/lib/gpuops/host-imex.json"),
        systemctl=dict(type="list", elements="str"),
    ))}, check=_host_imex_check, validate=_host_imex_validate, tasks="host_imex.yml", needs_nvml=True,
        managed=lambda v: _provider(v) == "dra", inputs=_host_imex_inputs),
    # the node's burn-in (DCGM's diagnostic, once per driver version and level; its record is read by the health gate
    # after it, which keeps the node out where it failed)
    Step("burn_in", {"burn_in": dict(type="dict", options=dict(level=dict(type="str", required=True,
                                                                          choices=["quick", "medium", "long",
                                                                                   "extended"]),
                                                               dcgmi=dict(type="str", default="dcgmi"),
                                                               nvbandwidth=dict(type="str", default="nvbandwidth")))},
         check=_burn_in_check, tasks="burn_in.yml", needs_nvml=True,
         managed=lambda v: v("gpu_node_burn_in", "none") != "none",
         inputs=lambda v: {"burn_in": {"level": v("gpu_node_burn_in"), "dcgmi": v("gpu_node_burn_in_dcgmi"),
                                       "nvbandwidth": v("gpu_node_burn_in_nvbandwidth")}}),
    # last: the gate before the node's release reads the GPUs as every step left them (again after a disruptive change)
    Step("health", {"health": dict(type="dict", options=dict(policy=dict(type="dict", default={}),
                                                             dcgm_diag=dict(type="bool", default=False),
                                                             dcgmi=dict(type="str", default="dcgmi")))},
         check=_health, validate=_health_validate, tasks="health.yml", after_disruption=True, needs_nvml=True,
         managed=lambda v: v.flag("gpu_node_health_gate"), inputs=_health_inputs, after_change=True,
         marks=_health_marks),
)

BY_NAME = dict((step.name, step) for step in STEPS)


def registry_problems(steps):
    """What is wrong with a registry (an error in the collection): a name used twice, a step that reruns one that
    does not come after it (the role runs the steps in registry order, so it could not run again), a disruptive step
    after one that runs again after a disruption (it would run before the change it follows)."""
    problems, seen = [], []
    for step in steps:
        if step.name in seen:
            problems.append("step %s is declared twice" % step.name)
        seen.append(step.name)
    names = [step.name for step in steps]
    by_name = dict((step.name, step) for step in steps)
    for index, step in enumerate(steps):
        if step.option_names and step.check is None:
            problems.append("step %s has options but no check" % step.name)
        for later in step.reruns:
            if later not in names[index + 1:] or by_name[later].tasks is None:
                problems.append("step %s reruns %s, which is not a node step after it" % (step.name, later))
        if step.option_names and step.check is not None and step.inputs is None and step.declares is None \
                and step.name != "declared":
            problems.append("step %s has options but no inputs (what the role gives its check)" % step.name)
        if step.disruptive and any(s.after_disruption for s in steps[:index]):
            problems.append("disruptive step %s comes after %s, which runs again after a disruptive change"
                            % (step.name, ", ".join(s.name for s in steps[:index] if s.after_disruption)))
    problems.extend(_gpu_holders.problems(gpu_holders(steps)))
    return problems


def gpu_holders(steps=None, others=None):
    """Every daemon that holds the GPUs: each step's ``holds_gpus`` in registry order, then ``others`` (default
    ``OTHER_GPU_HOLDERS``). The one table the driver's unload and MIG's client stop are made from
    (``_gpu_holders.driver_table`` and ``reset_blockers``)."""
    steps = STEPS if steps is None else steps
    others = OTHER_GPU_HOLDERS if others is None else others
    return [holder for step in steps for holder in step.holds_gpus] + list(others)


def driver_daemons(mps_unit=_gpu_holders.DEFAULT_MPS_UNIT, steps=None):
    """What gpuops.nvidia.driver_modules stops before an unload and starts after a load: ``_gpu_holders.driver_table``
    of every holder, the MPS control daemon run by ``mps_unit``."""
    return _gpu_holders.driver_table(gpu_holders(steps), {"mps": (mps_unit,)})


def reset_blockers(mps_unit=_gpu_holders.DEFAULT_MPS_UNIT, steps=None):
    """The units the mig role stops before a MIG-mode change that needs a GPU reset (``mig_blocker_services``):
    ``_gpu_holders.reset_blockers`` of every holder, the MPS control daemon run by ``mps_unit``."""
    return _gpu_holders.reset_blockers(gpu_holders(steps), {"mps": (mps_unit,)})


def node_steps():
    """The names of the steps that run tasks on the node (every step but the pseudo-step ``declared``), in order."""
    return [step.name for step in STEPS if step.tasks is not None]


def gates(plan, managed, check_mode=False, steps=None, after_change=False, node=None):
    """Controller side: from gpu_node_plan's result and ``managed`` (node step -> whether the controller manages
    it on this node), each node step -> whether it runs, and ``disruptive`` (whether a disruptive step changes the
    GPUs). A step runs where it is managed (and, where its result says ``managed``, the plan agrees) and has work,
    runs again after a disruptive change (``after_disruption``), or runs because an earlier step that runs names it in
    ``reruns``. In check mode the earlier step changes nothing, so it makes nothing run; and where it would install
    packages (``installs`` of the plan) the steps it names do not run at all: what they run is not there yet, so they
    cannot be planned in this run (except a step whose report says ``needs_installs`` False: containerd_runtime on
    k3s/RKE2, whose module runs no nvidia-ctk). ``after_change``: the plan was made again after a change of this run (the driver's,
    the GPU Operator's MIG change), which counts as a disruptive change. A step ``after_change`` runs whenever another
    one runs (or the run is disruptive) outside check mode; a step with ``marks`` runs where ``node`` (the Kubernetes
    node as read, or None off a cluster) carries them. ``steps`` is the registry (a test's own).
    Raises ValueError on input that is not that."""
    steps = STEPS if steps is None else steps
    problems = registry_problems(steps)
    if problems:
        raise ValueError("the step registry is wrong: %s" % "; ".join(problems))
    names = [step.name for step in steps if step.tasks is not None]
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), dict):
        raise ValueError("expects gpu_node_plan's result (a dict with steps), got %s" % _kind(plan))
    if not isinstance(managed, dict) or set(managed) != set(names):
        raise ValueError("expects, for each node step (%s), whether it is managed on this node; got %s"
                         % (", ".join(names), ", ".join(sorted(str(k) for k in managed)) if isinstance(managed, dict)
                            else _kind(managed)))
    installs = plan.get("installs") or {}
    if not isinstance(installs, dict):
        raise ValueError("installs must be the packages each step would install (a dict), got %s" % _kind(installs))
    check_mode = _truth(check_mode, "check_mode", "check mode")
    after_change = _truth(after_change, "after_change", "after_change")
    if node is not None and not isinstance(node, dict):
        raise ValueError("node must be the Kubernetes node as read (a dict) or None, got %s" % _kind(node))
    work, on, disruptive = {}, {}, after_change
    for step in steps:
        if step.tasks is None:
            continue
        found = plan["steps"].get(step.name)
        if found is not None and not isinstance(found, list):
            raise ValueError("steps.%s must be the list of reasons the plan found, got %s" % (step.name, _kind(found)))
        work[step.name] = bool(found)
        report = plan.get(step.name)
        if report is not None and not isinstance(report, dict):
            raise ValueError("%s must be the plan's result for the step (a dict), got %s" % (step.name, _kind(report)))
        report = report or {}
        on[step.name] = _truth(managed[step.name], step.name) and report.get("managed", True) is True
        if step.disruptive and on[step.name]:
            reasons = report.get("disruptive") or []
            if not isinstance(reasons, list):
                raise ValueError("%s.disruptive must be a list of reasons, got %s" % (step.name, _kind(reasons)))
            disruptive = disruptive or len(reasons) > 0
    out, rerun, held = {}, set(), set()
    for step in steps:
        if step.tasks is None:
            continue
        out[step.name] = on[step.name] and step.name not in held and (
            work[step.name] or (step.after_disruption and disruptive) or step.name in rerun)
        if out[step.name] and not check_mode:
            rerun.update(step.reruns)
        elif out[step.name] and installs.get(step.name):
            # not where the later step's report says it runs nothing those packages bring (containerd_runtime on k3s)
            held.update(name for name in step.reruns if (plan.get(name) or {}).get("needs_installs", True) is not False)
    for step in steps:
        if step.tasks is None or not on[step.name] or out[step.name]:
            continue
        others = any(out[name] for name in names if name != step.name) or disruptive
        out[step.name] = bool((step.after_change and not check_mode and others)
                              or (step.marks is not None and node is not None
                                  and step.marks(node, plan.get(step.name) or {})))
    out["disruptive"] = disruptive
    return out


def runs(gate_map, steps=None):
    """The steps that are not disruptive and run (``gates``' answer), in the registry's order, each as its ``name``, its
    task file (``tasks``) and the names of the steps that run before it in this list (``after``): what steps.yml's one
    loop includes after the disruptive steps (each by name, inside the quiesce).

    Why ``after``: ansible-core runs one loop of ``include_tasks`` over a batch of hosts by merging the includes of
    equal file and loop item across hosts (playbook/included_file.py, ``IncludedFile.__eq__`` and
    ``process_include_results``, ansible-core 2.16 to 2.21) and gives every host its includes in the order the merged
    list first saw them, not in the order of its own loop: a host whose loop is [burn_in, health], after a host whose
    loop is [health] alone, would run health first. With the steps before it in the item, an include merges only with
    those of hosts whose loop is the same up to it, and each host keeps the registry's order."""
    steps = STEPS if steps is None else steps
    out = []
    for step in steps:
        if step.tasks is not None and not step.disruptive and gate_map.get(step.name):
            out.append({"name": step.name, "tasks": step.tasks, "after": [r["name"] for r in out]})
    return out


def resolve(v, steps=None):
    """What the gpu_node role decides from its variables alone (``RoleVars``), once per run, before the node plan:
    per step whether the collection manages it here (``managed``) and whether the plan checks it (``planned``), the
    cluster's part (``kube``; ``standalone``: the device plugin chart or the DRA driver is this collection's, so its
    pods are ours to pause) and what the mig role is given (``mig``)."""
    steps = STEPS if steps is None else steps
    kube = _kube(v)
    managed = dict((step.name, bool(step.managed(v))) for step in steps if step.name != "declared")
    planned = dict((step.name, bool(step.planned(v))) for step in steps if step.name != "declared")
    return {"kube": kube,
            "standalone": kube and _provider(v) in ("chart", "dra") and v.flag("gpu_node_device_plugin_managed"),
            "managed": managed, "planned": planned,
            "mig": _mig_resolved(v)}


def role_inputs(v, planned, steps=None):
    """The node plan's inputs from the role's variables: each step with options -> its options where ``planned``
    says so (else None), and ``declared`` -> [[step, its role's declaration], ...] of the planned steps that declare
    one (the filter node_plan_checks turns it into the files, units and packages options)."""
    steps = STEPS if steps is None else steps
    inputs = {}
    for step in steps:
        if step.option_names and step.name != "declared":
            value = step.inputs(v) if planned.get(step.name) else None
            if value is not None and len(step.option_names) == 1:
                value = value[step.option_names[0]]     # (plan_args takes a single option's value alone)
            inputs[step.name] = value
    inputs["declared"] = [[step.name, v(step.declares)] for step in steps
                          if step.declares is not None and planned.get(step.name)]
    return inputs


def plan_args(inputs, only=None):
    """gpu_node_plan's arguments from ``inputs``: each step with options (every one, and no other) -> its options'
    values, or None (or an empty string: what ``{{ none }}`` renders to before ansible-core 2.19) where the step is not
    planned on this node. A step with a single option may give its value
    alone (``{"cdi": {...}}`` for ``{"cdi": {"cdi": {...}}}``). ``only``: the steps to give the module (the others
    left out). Raises ValueError on input that is not that."""
    with_options = [step.name for step in STEPS if step.option_names]
    if not isinstance(inputs, dict) or set(inputs) != set(with_options):
        raise ValueError("expects, for each step of the node plan (%s), its options or none; got %s"
                         % (", ".join(with_options), ", ".join(sorted(str(k) for k in inputs))
                            if isinstance(inputs, dict) else _kind(inputs)))
    only = with_options if only is None else only
    if not isinstance(only, list) or not all(isinstance(o, str) for o in only) or not set(only) <= set(with_options):
        raise ValueError("only must be a list of steps of the node plan (%s), got %r" % (", ".join(with_options), only))
    args = {}
    for name in only:
        value, options = inputs[name], BY_NAME[name].option_names
        if value is None or (isinstance(value, str) and not value.strip()):
            continue        # (ansible-core before 2.19 renders a template's none as an empty string)
        if len(options) == 1:
            value = {list(options)[0]: value}
        if not isinstance(value, dict) or not set(value) <= set(options):
            raise ValueError("step %s: expects its options (%s), got %r" % (name, ", ".join(sorted(options)), value))
        args.update((option, option_value) for option, option_value in value.items() if option_value is not None)
    return args


def _kind(value):
    return type(value).__name__


def _truth(value, name, what=None):
    """A managed flag as Jinja's ``bool`` reads it (ansible-core's own conversion); an empty value is False."""
    if isinstance(value, str) and not value.strip():
        return False
    try:
        return boolean(value.strip() if isinstance(value, str) else value, strict=True)
    except TypeError:
        raise ValueError("%s must be a boolean, got %r" % (what or "whether step %s is managed" % name, value))


def argument_spec(**extra):
    """gpu_node_plan's argument spec: ``extra`` (the module's own options), then every step's options in order."""
    spec = dict(extra)
    for step in STEPS:
        for option, option_spec in step.options.items():
            if option in spec:
                raise ValueError("option %s declared twice (step %s)" % (option, step.name))
            spec[option] = option_spec
    return spec


def plan(module, facts, result, refused=None):
    """Run every given step's check (``validate`` is run by ``validate``, before the read) and every step's
    ``settle``, filling ``result`` (which holds ``steps``). Returns the refusal that ends the plan, or None: ``refused``
    (a step's input check already refused it), else the first check that raises ``Refusal`` (its step is put in the
    refusal's ``fields`` as ``refused_step``). After a refusal only the health step is checked: the node is not
    changed in a refused run, but a blocking finding of its health read must still reach the gate that marks it."""
    steps = result["steps"]
    waiting = facts.get("nvml_error")
    lost = facts.get("lost_gpus") or []
    missing = facts.get("missing_gpus") or []
    for step in STEPS:
        if not step.option_names or not step.given(module):
            continue
        if refused is not None and step.check is not _health:
            continue
        if waiting is not None and step.needs_nvml:
            # not checked: NVML cannot read the GPUs until the driver step has run (not run in this pass)
            result[step.name] = {"managed": False, "waiting": "driver", "disruptive": []}
            _add(steps, step.name, ["waits for the driver (NVML: %s)" % waiting["message"]])
            continue
        if lost and step.needs_nvml and step.check is not _health:
            # not checked, and not run (managed False): its planner would plan the node without the lost GPU, and its
            # tasks read every GPU. The health step names the lost GPU as a blocking finding, so the gate marks the node.
            result[step.name] = {"managed": False, "lost_gpus": [g["index"] for g in lost], "disruptive": []}
            _add(steps, step.name, ["cannot plan GPU %d: NVML reports it lost (GPU_IS_LOST); this step waits for a run "
                                    "that finds every GPU" % g["index"] for g in lost])
            continue
        if missing and step.needs_nvml and step.check is not _health:
            # the same for a GPU the PCI bus shows and NVML does not list (NVML numbers the GPUs it lists without it)
            result[step.name] = {"managed": False, "missing_gpus": [g["bus_id"] for g in missing], "disruptive": []}
            _add(steps, step.name, ["cannot plan the GPU at PCI %s: the bus shows it, NVML does not list it; this step "
                                    "waits for a run that finds every GPU" % g["bus_id"] for g in missing])
            continue
        try:
            report, reasons = step.check(module, facts, step.params(module))
        except Refusal as exc:
            exc.fields.setdefault("refused_step", step.name)
            refused = exc
            continue
        result.update(report or {})
        for name, found in reasons.items():
            _add(steps, name, found)
    if refused is None:
        for step in STEPS:
            if step.settle is not None:
                step.settle(result, steps)
    return refused


def validate(module):
    """Every given step's input checks, before anything is read (a refusal changes nothing). Returns the first
    refusal (``Refusal``, its step as ``refused_step``), or None; the health step's own refusal is raised (without a
    valid policy there is no verdict to act on)."""
    refused = None
    for step in STEPS:
        if step.validate is not None and step.given(module):
            try:
                step.validate(module, step.params(module))
            except Refusal as exc:
                if step.check is _health:
                    raise
                exc.fields.setdefault("refused_step", step.name)
                refused = refused or exc
    return refused
