# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node plan's ``driver`` step (PRIVATE to gpuops.nvidia): the loaded NVIDIA driver against the declared pin.

``plan_driver`` is pure (the driver state as _driver_state.read returns it, NVML's start error, the pin in; the
step's report and its reasons out); ``check`` is the registry's check (_node_steps), which reads the node below NVML
once. The packages themselves are compared by the registry's ``declared`` step (the driver role's declared packages,
each under step ``driver``), so this step says only what the kernel and NVML show:

- no NVIDIA module loaded (a fresh node, or packages installed and never loaded): the driver is loaded, which
  disrupts nothing (no GPU is usable yet);
- a loaded module of another version or flavour than declared: an upgrade or downgrade, which unloads the running
  driver: disruptive (the node is quiesced for it);
- NVML failing with LIB_RM_VERSION_MISMATCH ("Driver/library version mismatch": the packages were changed under a
  loaded module): repaired by the same reload, disruptive;
- the declared module parameters (``module_parameters``, the driver role's driver_module_parameters) read otherwise
  in the loaded driver's /proc/driver/nvidia/params: the same reload (at the loaded version) takes them, disruptive;
- nouveau loaded: it holds the GPUs until the node boots with it blacklisted, so a reboot is needed (disruptive: a
  reboot stops every pod of the node).

Sources: NVIDIA/gpu-driver-container (ubuntu24.04/nvidia-driver: ``_unload_driver`` unloads before a new driver is
loaded; a loaded module is never replaced in place), NVML's nvmlReturn_t (NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
nvml.h of the CUDA toolkit), docs/driver.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Refusal, nothing_changed

# The NVML start errors that mean "the driver is not there yet" (the GPU steps then wait for the driver step).
WAITING_ERRORS = ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH")


def _branch(version):
    return (version or "").split(".")[0]


def plan_driver(state, nvml_error, pin):
    """(report, reasons) of the driver step. ``state``: _driver_state.read's result; ``nvml_error``: None or
    {"name", "message"} (NVML could not start); ``pin``: {"version", "branch", "flavour"} as declared (version may be
    empty where only a branch is declared). ``report``: loaded version/flavour, nouveau, Secure Boot, the NVML error,
    ``action`` (none, load, reload or reboot), ``disruptive`` (reasons the node's GPU users are disrupted) and
    ``reboot_needed``."""
    loaded = state.get("loaded")
    version, branch, flavour = pin.get("version") or "", pin.get("branch") or "", pin.get("flavour") or "open"
    want = version or ("branch %s" % branch)
    reasons, disruptive, action = [], [], "none"
    if state.get("nouveau_loaded"):
        action = "reboot"
        reason = ("nouveau is loaded: it holds the GPUs until the node boots with it blacklisted (a reboot is needed "
                  "before driver %s can load)" % want)
        reasons.append(reason)
        disruptive.append(reason)
    elif loaded is None:
        action = "load"
        reasons.append("no NVIDIA driver is loaded: driver %s (%s modules) will be loaded" % (want, flavour))
    else:
        differs = []
        if (version and loaded["version"] != version) or (not version and _branch(loaded["version"]) != branch):
            differs.append("driver %s is loaded, %s is declared" % (loaded["version"], want))
        if loaded["flavour"] != flavour:
            differs.append("the loaded modules are %s, %s are declared" % (loaded["flavour"], flavour))
        if nvml_error is not None and nvml_error.get("name") == "LIB_RM_VERSION_MISMATCH":
            differs.append("NVML reports a driver/library version mismatch (the packages changed under loaded module "
                           "%s): the module is reloaded" % loaded["version"])
        if differs:
            action = "reload"
            reasons.extend(differs)
            disruptive.extend(differs)
    report = {
        "loaded_version": loaded["version"] if loaded else None,
        "loaded_flavour": loaded["flavour"] if loaded else None,
        "nouveau_loaded": bool(state.get("nouveau_loaded")),
        "secure_boot": state.get("secure_boot"),
        "kernel": state.get("kernel"),
        "nvswitch": bool(state.get("nvswitch")),
        "nvlink5": bool(state.get("nvlink5")),
        "nvml_error": nvml_error,
        "action": action,
        "reboot_needed": action == "reboot",
        "disruptive": disruptive,
    }
    return report, reasons


def node_root(params_root):
    """Where the files below NVML are read: the step's ``root`` when given; else the simulated node's root on
    simulated GPUs (GPUOPS_SIMULATED_ROOT; gpu_info reads the same), else "/"."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import ENV_ROOT, simulated
    if params_root:
        return params_root
    if simulated():
        return os.environ.get(ENV_ROOT) or "/"
    return "/"


def services(module, state, p, root):
    """The daemons the driver needs (_driver_services: nvidia-persistenced where ``persistenced``, the Fabric Manager
    where ``fabric_manager`` says so for this node) as systemctl reports them: (report, reasons). A unit not enabled
    or not running is work of the driver step (never disruptive: it starts a daemon)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
    fm, why = ds.fabric_manager_wanted(p.get("fabric_manager") or "auto", state,
                                       ds.pci_nvswitch_count(root) if state.get("loaded") is None else 0)
    units = ds.wanted_units(p.get("persistenced"), fm)
    report = {"fabric_manager": {"wanted": fm, "reason": why}, "services": {}}
    if not units:
        return report, []
    systemctl = list(p.get("systemctl") or []) or [module.get_bin_path("systemctl")]
    if systemctl[0] is None:
        return report, ["%s: systemctl not found, so it cannot be checked" % ", ".join(units)]

    def run(argv):
        try:
            return module.run_command(argv, handle_exceptions=False)
        except (IOError, OSError) as exc:
            return 127, "", str(exc)
    states = dict((unit, ds.unit_state(run, systemctl, unit)) for unit in units)
    report["services"] = states
    reasons = ds.unit_reasons(states)
    if fm:
        reasons.extend(fabric_manager_package(module, p, report, state))
    if p.get("persistenced"):
        # the one owner of persistence mode: nvidia-persistenced with --persistence-mode (its drop-in)
        dropin = ds.dropin_reason(ds.packaged_unit(root, ds.PERSISTENCED_UNIT), ds.read_text(root, ds.PERSISTENCED_DROPIN))
        report["persistence_mode"] = {"owner": "nvidia-persistenced", "dropin": "/" + ds.PERSISTENCED_DROPIN}
        if dropin:
            reasons.insert(0, dropin)
    return report, reasons


def fabric_manager_package(module, p, report, state):
    """The Fabric Manager's installed package against the pin (_driver_services.fabric_manager_check): reported in
    ``report["fabric_manager"]`` (``installed``, ``pinned``); a mismatch the install fixes is a reason, one it cannot
    fix (a downgrade not allowed) fails the plan before anything changes. Only where the pin is an exact version."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages
    pin = p.get("version") or ""
    if not pin:
        return []
    manager = "apt" if module.get_bin_path("dpkg-query") else ("dnf" if module.get_bin_path("rpm") else None)
    if manager is None:
        return ["the Fabric Manager's package cannot be checked: no package database (neither dpkg-query nor rpm)"]
    # the pin's branch and the loaded driver's (before 580 the name carries the branch: an upgrade from 570 finds it)
    loaded = _branch((state.get("loaded") or {}).get("version"))
    names = ds.fabric_manager_packages(_branch(pin)) + (
        ["nvidia-fabricmanager-%s" % loaded] if loaded and loaded != _branch(pin) else [])
    try:
        found = _packages.read_installed(module, manager, names)
    except _packages.PackageError as exc:
        return ["the Fabric Manager's package cannot be checked: %s" % exc]
    installed = [{"name": n, "version": found[n]["version"]} for n in names if found[n]["version"]]
    report["fabric_manager"].update(installed=installed, pinned=pin)
    reason, refusal = ds.fabric_manager_check(installed, pin, bool(p.get("allow_downgrade")))
    if refusal:
        raise Refusal("driver: %s" % refusal, driver=report)
    return [reason] if reason else []


def fabric_disruptive(report):
    """A Fabric Manager that must start is disruptive: until every GPU's fabric is registered the node cannot serve, so
    it is kept out of service (quiesced, and left cordoned when the fabric does not come up)."""
    fm = (report.get("services") or {}).get("nvidia-fabricmanager.service")
    if fm and fm["active"] != "active":
        return ["the Fabric Manager is not running (%s): the GPUs' NVLink fabric is not registered, so the node is kept "
                "out of service until it is" % fm["active"]]
    return []


def next_kernel(module, state, p, root):
    """The running kernel, the kernel the next boot runs (the boot loader's default) and whether the declared driver's
    modules exist for it (_driver_kernel.read): a reading, not work of this step (the driver role's
    driver_next_kernel acts on it before a reboot the collection makes). A lab root is read with the tools given
    for it only, never with this host's."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_kernel

    def run(argv):
        try:
            return module.run_command(argv, environ_update={"LANG": "C", "LC_ALL": "C"}, handle_exceptions=False)
        except (IOError, OSError) as exc:
            return 127, "", str(exc)

    def tool(name):
        if p.get(name):
            return list(p[name])
        found = module.get_bin_path(name) if root in ("/", "") else None
        return [found] if found else None
    pin = {"version": p.get("version") or "", "branch": p.get("branch") or "", "flavour": p.get("flavour") or "open"}
    try:
        return _driver_kernel.read(run, root, state.get("kernel"), pin, {
            "grubby": module.get_bin_path("grubby") if root in ("/", "") else None,
            "modinfo": tool("modinfo"), "dkms": tool("dkms")})
    except _driver_kernel.KernelReadError as exc:
        return {"running": state.get("kernel"), "next": None, "next_source": str(exc), "next_modules": None}


def module_parameters(state, p, root, report):
    """The declared NVreg_ parameters against the loaded driver's /proc/driver/nvidia/params (_driver_params): a
    loaded driver that reads another value is reloaded (disruptive, like an upgrade); nothing loaded, or a reload
    already planned, takes them with that load. ``report["module_parameters"]``: pending and unreadable names."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params as dp
    values = dp.check(p.get("module_parameters") or {})
    if not values or state.get("loaded") is None:
        return []
    try:
        with open(os.path.join(root, dp.PROC_PARAMS.lstrip("/"))) as handle:
            loaded = dp.parse_proc_params(handle.read(1024 * 1024))
    except (IOError, OSError):
        loaded = None
    diffs, unreadable = dp.compare(values, loaded)
    report["module_parameters"] = {"pending": diffs, "unreadable": unreadable if loaded is not None else []}
    if not diffs:
        return []
    reason = ("the loaded driver's module parameters differ from driver_module_parameters (%s): the driver is "
              "reloaded to take them" % dp.differences_text(diffs))
    if report["action"] == "none":
        report["action"] = "reload"
    if report["action"] == "reload":
        report["disruptive"].append(reason)
    return [reason]


def check(module, facts, params):
    """The registry's check of step ``driver`` (see the module docstring), and the daemons it needs (``services``)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_state
    p = params["driver"]
    root = node_root(p.get("root"))
    try:
        state = _driver_state.read(root)
    except _driver_state.DriverStateError as exc:
        raise Refusal("the driver step cannot read the node below NVML: %s" % exc)
    report, reasons = plan_driver(state, facts.get("nvml_error"), p)
    reasons = reasons + module_parameters(state, p, root, report)
    report["root"] = root
    report["next_kernel"] = next_kernel(module, state, p, root)
    daemons, daemon_reasons = services(module, state, p, root)
    report.update(daemons)
    report["disruptive"] = report["disruptive"] + fabric_disruptive(report)
    return {"driver": report}, {"driver": reasons + daemon_reasons}


def validate(module, params):
    """A declared pin that is not one: refused before anything is read."""
    p = params["driver"]
    version, branch = p.get("version") or "", p.get("branch") or ""
    if not version and not branch:
        raise Refusal("driver: declare version (like 580.95.05) or branch (like 580)")
    parts = version.split(".")
    if version and (len(parts) < 2 or not all(part.isdigit() for part in parts)):
        raise Refusal("driver: version %r is not a driver version (digits and dots, like 580.95.05)" % version)
    if branch and not branch.isdigit():
        raise Refusal("driver: branch %r is not a driver branch (digits, like 580)" % branch)
    if version and branch and _branch(version) != branch:
        raise Refusal("driver: version %s is not of branch %s" % (version, branch))
    fm_version = p.get("fabric_manager_version") or ""
    if fm_version and version and fm_version != version:
        # _driver_plan's rule, before anything is read
        raise Refusal(nothing_changed("driver: the Fabric Manager is pinned at %s and the driver at %s: NVIDIA's "
                                      "Fabric Manager runs only at exactly the driver's version. Pin both at one "
                                      "version (or leave driver_fabric_manager_version empty)" % (fm_version, version)))
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params as dp
    try:
        dp.check(p.get("module_parameters") or {}, "driver_module_parameters")
    except dp.DriverParamsError as exc:
        raise Refusal(nothing_changed(str(exc)))
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
    try:
        ds.check_setting(p.get("fabric_manager") or "auto")
        ds.check_timeout(p.get("fabric_timeout", 300), "fabric_timeout (gpu_node_driver_fabric_timeout)")
    except ds.DriverServicesError as exc:
        raise Refusal(nothing_changed("driver: %s" % exc))
