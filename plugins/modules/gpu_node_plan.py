#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_plan
short_description: Read a GPU node once and say which of the gpuops.nvidia.gpu_node role's steps have work
version_added: 0.2.0
description:
  - The first step of the gpuops.nvidia.gpu_node role, in one module run instead of one per role and per file.
    Reads the GPUs (the fact C(nvidia_gpus), as M(gpuops.nvidia.gpu_info) sets it) and answers, per step, what
    would change, from the same code the steps' own modules run. Changes nothing, in any mode.
  - B(MIG) (O(mig)) - whether MIG is managed on this node, and the plans M(gpuops.nvidia.mig_mode) and
    M(gpuops.nvidia.mig_layout) return in check mode.
  - B(Compute mode) (O(compute_mode)) - what M(gpuops.nvidia.compute_mode) would change, and its per-GPU result
    (from which the role writes its boot-time unit).
  - B(Files) (O(files)) - for every file, directory or absence a step declares, whether it is already so, by content
    (sha1) and permission bits, never following a symlink.
  - B(Units) (O(units)) - whether systemd reports each unit C(enabled) (C(systemctl is-enabled)).
  - B(Packages) (O(packages)) - whether each declared package is installed at its declared version (and, where
    declared, held), read with C(dpkg-query -W) on the Debian family or C(rpm -q) on the RHEL family (one
    read-only command per package manager).
  - B(containerd) (O(containerd)) - whether M(gpuops.nvidia.containerd_runtime)'s verified-state stamp matches
    (the files containerd loads, both binaries, the parameters and the module's code are as a full run verified
    them). Without a stamp, or on any difference, the step has work and the module runs in full.
  - B(CDI) (O(cdi)) - whether M(gpuops.nvidia.cdi_spec)'s record matches the spec and the GPUs as read.
  - B(Runtime mode) (O(runtime_mode)) - whether nvidia-container-runtime's config sets the mode
    M(gpuops.nvidia.runtime_mode) would set.
  - A step has work when any of its checks is not met; RV(steps) lists the reasons. The step C(mig) has no work
    where MIG is not managed (RV(mig.managed)), whatever its files (still reported in RV(files)). Whatever cannot be proven
    unchanged counts as work, so the step's own role decides as it always did.
  - Holds the node lock (see O(lock_timeout)) while it reads, so a plan is never read from a half-applied state.
options:
  mig:
    description:
      - MIG, planned only when it is managed on this node (RV(mig.managed)).
    type: dict
    suboptions:
      manage:
        description:
          - V(declared) - the node declares MIG; managed when any GPU supports MIG.
          - V(disable) - the node declares another sharing strategy; managed only when MIG is enabled (or pending)
            on a MIG-capable GPU, to disable it.
        type: str
        choices: [declared, disable]
        required: true
      layout:
        description: Inline layout, as M(gpuops.nvidia.mig_layout)'s O(gpuops.nvidia.mig_layout#module:layout).
        type: list
        elements: dict
      config_name:
        description: A named layout (C(all-balanced), C(all-disabled), ...), as mig_layout's C(config_name).
        type: str
      allow_reset:
        description: As M(gpuops.nvidia.mig_mode)'s O(gpuops.nvidia.mig_mode#module:allow_reset).
        type: bool
        default: true
      force:
        description: As M(gpuops.nvidia.mig_layout)'s O(gpuops.nvidia.mig_layout#module:force).
        type: bool
        default: false
  compute_mode:
    description: Compute mode, as M(gpuops.nvidia.compute_mode) takes it.
    type: dict
    suboptions:
      settings:
        description: Selectors and modes, as compute_mode's O(gpuops.nvidia.compute_mode#module:settings).
        type: list
        elements: dict
        required: true
        suboptions:
          gpus:
            description: Selector.
            type: list
            elements: str
            default: [all]
          mode:
            description: Compute mode.
            type: str
            required: true
      persistence_mode:
        description: As compute_mode's O(gpuops.nvidia.compute_mode#module:persistence_mode).
        type: bool
      boot_unit:
        description:
          - The boot-time unit the gpuops.nvidia.compute_mode role installs, compared with the text the filter
            P(gpuops.nvidia.compute_mode_unit#filter) builds for the GPUs read here (same code, same text).
        type: dict
        suboptions:
          path:
            description: Where the unit is.
            type: path
            required: true
          nvidia_smi:
            description: Path of nvidia-smi in the unit.
            type: path
            default: /usr/bin/nvidia-smi
          mode:
            description: Declared permission bits of the unit file, octal.
            type: str
            default: "0644"
  files:
    description: Files, directories and absences the steps declare.
    type: list
    elements: dict
    default: []
    suboptions:
      step:
        description: The step this belongs to (a key of RV(steps)).
        type: str
        required: true
      path:
        description: Absolute path on the node.
        type: path
        required: true
      state:
        description: V(file), V(directory) or V(absent).
        type: str
        choices: [file, directory, absent]
        default: file
      checksum:
        description:
          - sha1 of the declared content (what ansible.builtin.copy compares).
          - Without it the content is not compared here; RV(files) returns the one found, for the caller.
        type: str
      mode:
        description: Declared permission bits, octal (C(0644)). Not compared when omitted.
        type: str
  units:
    description: systemd units the steps enable.
    type: list
    elements: dict
    default: []
    suboptions:
      step:
        description: The step this belongs to.
        type: str
        required: true
      name:
        description: Unit name (C(gpuops-mig.service)).
        type: str
        required: true
  packages:
    description: Sets of packages the steps pin at one version (the gpuops.nvidia.container_toolkit role's declaration).
    type: list
    elements: dict
    default: []
    suboptions:
      step:
        description: The step this belongs to.
        type: str
        required: true
      manager:
        description: V(apt) (read with C(dpkg-query)) or V(dnf) (read with C(rpm)).
        type: str
        choices: [apt, dnf]
        required: true
      names:
        description: Package names.
        type: list
        elements: str
        required: true
      version:
        description:
          - The declared version of every package of the set, as the package manager writes it (C(1.20.0-1); RPM
            C(version-release)), compared in the package manager's own version order.
        type: str
        required: true
      hold:
        description: With V(apt), the packages must also be held (dpkg selection C(hold)).
        type: bool
        default: false
  containerd:
    description:
      - containerd's NVIDIA runtime, with M(gpuops.nvidia.containerd_runtime)'s parameters (same defaults).
    type: dict
    suboptions:
      step:
        description: The step this belongs to.
        type: str
        default: containerd_runtime
      config_path:
        description: As containerd_runtime's.
        type: path
        default: /etc/containerd/config.toml
      drop_in_path:
        description: As containerd_runtime's.
        type: path
        default: /etc/containerd/conf.d/99-nvidia.toml
      edit_mode:
        description: As containerd_runtime's.
        type: str
        choices: [auto, drop_in, in_place]
        default: auto
      runtime_name:
        description: As containerd_runtime's.
        type: str
        default: nvidia
      set_as_default:
        description: As containerd_runtime's.
        type: bool
        default: false
      cdi_enabled:
        description: As containerd_runtime's.
        type: bool
        default: false
      runtime_path:
        description: As containerd_runtime's.
        type: path
        default: /usr/bin/nvidia-container-runtime
      nvidia_ctk_path:
        description: As containerd_runtime's.
        type: path
      containerd_path:
        description: As containerd_runtime's.
        type: path
  cdi:
    description:
      - The node's CDI spec, with M(gpuops.nvidia.cdi_spec)'s parameters (same defaults) - whether the record cdi_spec
        keeps beside the spec matches the spec's bytes, the devices the GPUs have now (MIG devices included), the
        driver version, the nvidia-ctk binary and the parameters. Without a record, or on any difference, the step
        has work.
    type: dict
    suboptions:
      step:
        description: The step this belongs to.
        type: str
        default: cdi
      state:
        description: As cdi_spec's.
        type: str
        choices: [present, absent]
        default: present
      spec_path:
        description: As cdi_spec's.
        type: path
        default: /var/run/cdi/nvidia.yaml
      spec_dirs:
        description: As cdi_spec's.
        type: list
        elements: path
        default: [/etc/cdi, /var/run/cdi]
      device_name_strategy:
        description: As cdi_spec's.
        type: list
        elements: str
        choices: [index, uuid, type-index]
        default: [index, uuid]
      nvidia_ctk_path:
        description: As cdi_spec's.
        type: path
      backup:
        description: As cdi_spec's (not compared).
        type: bool
        default: false
  runtime_mode:
    description:
      - nvidia-container-runtime's mode, with M(gpuops.nvidia.runtime_mode)'s parameters - whether its config sets
        O(runtime_mode.mode) (an absent config or key means C(auto)).
    type: dict
    suboptions:
      step:
        description: The step this belongs to.
        type: str
        default: runtime_mode
      mode:
        description: As runtime_mode's.
        type: str
        choices: [auto, cdi, legacy]
        required: true
      config_path:
        description: As runtime_mode's.
        type: path
        default: /etc/nvidia-container-runtime/config.toml
      nvidia_ctk_path:
        description: As runtime_mode's (not used by the check).
        type: path
      backup:
        description: As runtime_mode's (not compared).
        type: bool
        default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.facts
  - gpuops.nvidia.node_lock
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
  facts:
    support: full
requirements:
  - On a real GPU host, the Python package C(nvidia-ml-py) (module C(pynvml)) and the NVIDIA driver.
seealso:
  - module: gpuops.nvidia.gpu_info
  - module: gpuops.nvidia.containerd_runtime
  - module: gpuops.nvidia.cdi_spec
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Which steps of this node have work
  gpuops.nvidia.gpu_node_plan:
    mig:
      manage: declared
      config_name: all-balanced
    compute_mode:
      settings: [{gpus: [all], mode: Default}]
      persistence_mode: true
    files:
      - {step: mig, path: /etc/gpuops/mig.json, checksum: "{{ mig_json | hash('sha1') }}", mode: "0644"}
      - {step: mig, path: /var/lib/gpuops/mig-reboot-attempted, state: absent}
    units:
      - {step: mig, name: gpuops-mig.service}
    packages:
      - {step: container_toolkit, manager: apt, names: [nvidia-container-toolkit], version: 1.20.0-1, hold: true}
    containerd: {}
  register: plan

- name: Configure containerd only where its step has work
  ansible.builtin.include_role:
    name: gpuops.nvidia.containerd_runtime
  when: plan.steps.containerd_runtime | length > 0
"""

RETURN = r"""
steps:
  description: Per step named in the options, the reasons it has work; an empty list means nothing to do.
  returned: always
  type: dict
  sample: {mig: [], compute_mode: ["GPU 0: compute mode Prohibited -> Default"], containerd_runtime: []}
mig:
  description:
    - C(managed), C(disruptive) (reasons the GPUs change, for the cordon), and when MIG is managed and something
      changes C(mode_plan) and C(layout_plan), the results M(gpuops.nvidia.mig_mode) and M(gpuops.nvidia.mig_layout)
      return in check mode.
  returned: when O(mig) is given
  type: dict
  contains:
    managed:
      description: Whether MIG is managed on this node (see O(mig.manage)).
      type: bool
      sample: true
    disruptive:
      description: Reasons the GPUs change (a reset or reboot), for the cordon; empty when nothing disruptive is due.
      type: list
      elements: str
compute_mode:
  description: C(changes), C(mode), C(modes) and C(gpus) as M(gpuops.nvidia.compute_mode) returns them in check mode.
  returned: when O(compute_mode) is given
  type: dict
files:
  description: What was found at each path of O(files) (C(state), C(mode), C(checksum)).
  returned: always
  type: dict
packages:
  description:
    - What the package database says of each package of O(packages) - C(version) (the installed version, null when
      not installed), C(held) and C(status) (dpkg's C(Status) field).
  returned: when O(packages) is given
  type: dict
  sample: {nvidia-container-toolkit: {version: 1.20.0-1, held: true, status: hold ok installed}}
containerd:
  description: C(verified) (the stamp matched) and, when it did, the recorded result.
  returned: when O(containerd) is given
  type: dict
ansible_facts:
  description: The GPUs as read.
  returned: always
  type: dict
  contains:
    nvidia_gpus:
      description: What M(gpuops.nvidia.gpu_info) returns for all GPUs.
      type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _node_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import (
    ARGUMENT_SPEC as CDI_SPEC, expected_devices, stamp_inputs, stamp_path, stamp_reason)
from ansible_collections.gpuops.nvidia.plugins.module_utils._compute_mode import (
    ComputeModeError, boot_unit, plan_settings, planned_state, report)
from ansible_collections.gpuops.nvidia.plugins.module_utils._containerd_config import (
    ARGUMENT_SPEC as CONTAINERD_SPEC, CTK_PACKAGE)
from ansible_collections.gpuops.nvidia.plugins.module_utils._containerd_stamp import verified_state
from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu_backend import read_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils._input_file import InputFileError, read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils._live_file import (
    ToolNotFound, binary_identity, file_digest, require_tool)
from ansible_collections.gpuops.nvidia.plugins.module_utils._node_lock import module_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils._runtime_mode import (
    ARGUMENT_SPEC as RUNTIME_MODE_SPEC, mode_reason)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            lock_timeout=dict(type="int"),
            mig=dict(type="dict", options=dict(
                manage=dict(type="str", choices=["declared", "disable"], required=True),
                layout=dict(type="list", elements="dict"),
                config_name=dict(type="str"),
                allow_reset=dict(type="bool", default=True),
                force=dict(type="bool", default=False),
            ), mutually_exclusive=[("layout", "config_name")], required_one_of=[("layout", "config_name")]),
            compute_mode=dict(type="dict", options=dict(
                settings=dict(type="list", elements="dict", required=True, options=dict(
                    gpus=dict(type="list", elements="str", default=["all"]),
                    mode=dict(type="str", required=True))),
                persistence_mode=dict(type="bool"),
                boot_unit=dict(type="dict", options=dict(
                    path=dict(type="path", required=True),
                    nvidia_smi=dict(type="path", default="/usr/bin/nvidia-smi"),
                    mode=dict(type="str", default="0644"))),
            )),
            files=dict(type="list", elements="dict", default=[], options=dict(
                step=dict(type="str", required=True),
                path=dict(type="path", required=True),
                state=dict(type="str", choices=list(_node_plan.FILE_STATES), default="file"),
                checksum=dict(type="str"),
                mode=dict(type="str"),
            )),
            units=dict(type="list", elements="dict", default=[], options=dict(
                step=dict(type="str", required=True),
                name=dict(type="str", required=True),
            )),
            packages=dict(type="list", elements="dict", default=[], options=dict(
                step=dict(type="str", required=True),
                manager=dict(type="str", choices=["apt", "dnf"], required=True),
                names=dict(type="list", elements="str", required=True),
                version=dict(type="str", required=True),
                hold=dict(type="bool", default=False),
            )),
            containerd=dict(type="dict", options=dict(CONTAINERD_SPEC,
                                                      step=dict(type="str", default="containerd_runtime"))),
            cdi=dict(type="dict", options=dict(CDI_SPEC, step=dict(type="str", default="cdi"))),
            runtime_mode=dict(type="dict", options=dict(RUNTIME_MODE_SPEC, step=dict(type="str", default="runtime_mode"))),
        ),
        supports_check_mode=True,
    )
    for entry in module.params["files"]:
        if not entry["path"].startswith("/"):
            module.fail_json(msg="files: path %r must be absolute" % entry["path"])
        if entry["checksum"] is not None and (len(entry["checksum"]) != 40 or
                                              any(c not in "0123456789abcdef" for c in entry["checksum"])):
            module.fail_json(msg="files: checksum of %s must be a sha1 in hex (40 characters 0-9a-f), got %r"
                             % (entry["path"], entry["checksum"]))
        if _node_plan.normal_mode(entry["mode"]) is False:
            module.fail_json(msg="files: mode of %s must be octal like 0644, got %r" % (entry["path"], entry["mode"]))
    if module.params["packages"]:
        _check_packages(module)
    with module_lock(module, "gpu_node_plan"):
        facts = _read(module)
    result = {"changed": False, "ansible_facts": {"nvidia_gpus": facts}, "files": {}, "steps": {}}
    steps = result["steps"]
    if module.params["mig"] is not None:
        result["mig"] = _mig(module, facts["gpus"])
        steps.setdefault("mig", []).extend(result["mig"]["disruptive"])
    if module.params["compute_mode"] is not None:
        result["compute_mode"], reasons = _compute_mode(module, facts["gpus"])
        steps.setdefault("compute_mode", []).extend(reasons)
    for entry in module.params["files"]:
        seen = result["files"][entry["path"]] = _node_plan.observe(entry["path"])
        reason = _node_plan.file_reason(entry, seen)
        steps.setdefault(entry["step"], []).extend([reason] if reason else [])
    if module.params["units"]:
        systemctl = module.get_bin_path("systemctl")
        for unit in module.params["units"]:
            if systemctl is None:
                reason = "unit %s: systemctl not found" % unit["name"]
            else:
                rc, out, dummy = module.run_command([systemctl, "is-enabled", unit["name"]])
                reason = _node_plan.unit_reason(unit["name"], rc, out)
            steps.setdefault(unit["step"], []).extend([reason] if reason else [])
    if module.params["packages"]:
        result["packages"] = _packages_state(module, steps)
    if module.params["containerd"] is not None:
        result["containerd"], reason = _containerd(module)
        steps.setdefault(module.params["containerd"]["step"], []).extend([reason] if reason else [])
    if module.params["cdi"] is not None:
        reason = _cdi(module, facts)
        steps.setdefault(module.params["cdi"]["step"], []).extend([reason] if reason else [])
    if module.params["runtime_mode"] is not None:
        p = module.params["runtime_mode"]
        try:
            text = read_text(p["config_path"], "runtime config") if os.path.lexists(p["config_path"]) else None
            reason = mode_reason(text, p["config_path"], p["mode"])
        except InputFileError as exc:
            reason = str(exc)
        steps.setdefault(p["step"], []).extend([reason] if reason else [])
    if "mig" in result and not result["mig"]["managed"]:
        steps["mig"] = []  # nothing of MIG's is done on this node: its files are reported, not work
    module.exit_json(**result)


def _read(module):
    try:
        return read_facts()
    except GpuBackendError as exc:
        module.fail_json(msg=str(exc))
    except NvmlError as exc:
        module.fail_json(msg="NVML error %s while reading GPUs: %s" % (exc.name, exc))


def _mig(module, gpus):
    """MIG as gpu_node planned it with mig_mode and mig_layout in check mode: same functions, same results,
    same errors (mig_mode's first). The plans are returned when something changes (what gpu_node shows then)."""
    p = module.params["mig"]
    out = {"managed": _node_plan.mig_managed(gpus, p["manage"]), "disruptive": []}
    if not out["managed"]:
        return out
    # imported here: a node without MIG to manage never compiles the planner (module_utils are compiled from
    # source on every module run)
    from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_layouts import MigLayoutError
    from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_plan import MigBusyError
    from ansible_collections.gpuops.nvidia.plugins.module_utils._mig_apply import (
        assumed_warning, layout_entry, layout_result, plan_layouts, plan_modes)
    params = {"gpus": ["all"], "enabled": None, "layout": p["layout"], "config_file": None,
              "config_name": p["config_name"], "allow_reset": p["allow_reset"], "force": p["force"]}
    try:
        out["mode_plan"] = plan_modes(gpus, params)
    except MigLayoutError as exc:
        module.fail_json(msg=str(exc))
    try:
        resolved, plans, assumed = plan_layouts(gpus, params, check_mode=True)
    except MigBusyError as exc:
        module.fail_json(msg=str(exc), busy=exc.busy, changed=False)
    except MigLayoutError as exc:
        module.fail_json(msg=str(exc), changed=False)
    if assumed:
        module.warn(assumed_warning(assumed))
    by_index = dict((g["index"], g) for g in gpus)
    out["layout_plan"] = layout_result(resolved, [layout_entry(plan, assumed, by_index[plan["index"]])
                                                  for plan in plans])
    out["disruptive"] = _node_plan.mig_disruptive(out["mode_plan"], out["layout_plan"])
    if not out["disruptive"]:
        del out["mode_plan"], out["layout_plan"]
    return out


def _compute_mode(module, gpus):
    """compute_mode's check-mode plan, and its boot-time unit: the role writes the unit from compute_mode's result
    for the GPUs after the change, which is this plan's ``gpus`` (so the unit is compared only where nothing else
    changes; otherwise the step has work anyway)."""
    p = module.params["compute_mode"]
    try:
        todo = plan_settings(gpus, p["settings"], p["persistence_mode"])
    except ComputeModeError as exc:
        module.fail_json(msg=str(exc))
    out = {"changes": todo["changes"], "mode": todo["mode"], "gpus": report(planned_state(todo)),
           "modes": dict((str(k), v) for k, v in todo["modes"].items())}
    reasons = _node_plan.compute_mode_reasons(todo)
    unit = p["boot_unit"]
    if unit is not None:
        text = boot_unit(out["gpus"], bool(p["persistence_mode"]), unit["nvidia_smi"])
        reason = _node_plan.file_reason({"path": unit["path"], "mode": unit["mode"],
                                         "checksum": _node_plan.sha1(text)}, _node_plan.observe(unit["path"]))
        reasons += [reason] if reason else []
    return out, reasons


def _check_packages(module):
    """Refuse a package name or version that is not one (before anything is read)."""
    # imported here (and in _packages_state): a node plan without packages never compiles their code (module_utils
    # are compiled from source on every module run)
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _packages
    for entry in module.params["packages"]:
        for name in entry["names"]:
            if not _packages.NAME_RE.match(name) or not _packages.VERSION_RE.match(entry["version"]):
                module.fail_json(msg="packages: %r at %r is not a package name (a-z, 0-9, +.-) at a version "
                                 "(starting with a digit; A-Z, a-z, 0-9, .+~^_:-)" % (name, entry["version"]))


def _packages_state(module, steps):
    """The declared packages as the package database has them (one read per package manager), and each step's
    reasons. A database that cannot be read is work for every package it holds (the role then says why)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _packages
    found = {}
    by_manager = {}
    for entry in module.params["packages"]:
        for name in entry["names"]:
            by_manager.setdefault(entry["manager"], []).append(dict(entry, name=name))
    for manager, entries in sorted(by_manager.items()):
        names = [e["name"] for e in entries]
        try:
            installed = _packages.read_installed(module, manager, names)
        except _packages.PackageError as exc:
            for entry in entries:
                steps.setdefault(entry["step"], []).append("package %s cannot be read: %s" % (entry["name"], exc))
            continue
        for entry in entries:
            found[entry["name"]] = installed[entry["name"]]
            steps.setdefault(entry["step"], []).extend(_packages.reasons([entry], installed))
    return found


def _containerd(module):
    """containerd_runtime's verified-state stamp, checked for the tools it would run (found the way it finds
    them: a tool it would not find or run is work, and the module then fails with its own message)."""
    return verified_state(module, module.params["containerd"])


def _cdi(module, facts):
    """cdi_spec's record, compared with the spec and the GPUs as read (the tool found the way cdi_spec finds it)."""
    p = module.params["cdi"]
    try:
        ctk = require_tool(module.get_bin_path, p, "nvidia_ctk_path", "nvidia-ctk", CTK_PACKAGE)
    except ToolNotFound as exc:
        return exc.reason
    expected = expected_devices(facts["gpus"], p["device_name_strategy"]) if p["state"] == "present" else \
        {"names": [], "counted": {}, "devices": 0}
    record = stamp_path(p["spec_path"])
    if p["state"] == "absent":
        present = [path for path in (p["spec_path"], record) if os.path.lexists(path)]
        return ("%s present (state absent)" % ", ".join(present)) if present else None
    try:
        recorded = read_text(record, "CDI spec record") if os.path.lexists(record) else None
    except InputFileError:
        recorded = ""
    inputs = stamp_inputs(p, expected, facts.get("driver_version"), binary_identity(ctk))
    return stamp_reason(recorded, inputs, file_digest(p["spec_path"]))


if __name__ == "__main__":
    main()
