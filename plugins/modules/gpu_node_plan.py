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
  - B(Driver) (O(driver)) - the loaded NVIDIA driver (C(/sys/module/nvidia/version), C(/proc/driver/nvidia/version)),
    nouveau and NVML's start against the declared pin (RV(driver)); the driver's packages are compared as O(packages)
    with step C(driver). When NVML cannot start (no driver yet, a driver/library version mismatch) and O(driver) is
    given, the GPUs are not read - the steps that read them (MIG, compute mode, CDI) report C(waiting) and are not
    managed in this plan, and the role plans again after the driver step. Without O(driver) NVML must start.
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
  - B(Health) (O(health)) - every GPU's health read in the same NVML session as the facts (ECC, remapped rows,
    NVLink, PCIe link, clock events, fabric, this boot's Xid events; see M(gpuops.nvidia.gpu_info)), and the policy's
    verdict in RV(health). The step C(health) has work when a finding blocks (its reasons are the blocking findings).
  - A step has work when any of its checks is not met; RV(steps) lists the reasons. The step C(mig) has no work
    where MIG is not managed (RV(mig.managed)), whatever its files (still reported in RV(files)). Whatever cannot be proven
    unchanged counts as work, so the step's own role decides as it always did.
  - Holds the node lock (see O(lock_timeout)) while it reads, so a plan is never read from a half-applied state.
options:
  driver:
    description:
      - The NVIDIA driver the node declares (the gpuops.nvidia.driver role's C(driver_version), C(driver_branch),
        C(driver_flavour)). Not given - the driver is not read and NVML must start.
    type: dict
    suboptions:
      version:
        description: The declared driver version (like C(580.95.05)); empty where only O(driver.branch) is declared.
        type: str
        default: ""
      branch:
        description: The declared branch (like C(580)); the loaded driver must be of it where no version is declared.
        type: str
        default: ""
      flavour:
        description: The declared kernel module flavour.
        type: str
        choices: [open, proprietary]
        default: open
      root:
        description: The root the files below NVML are read under; default C(/), on simulated GPUs the simulated node's
          root (C(GPUOPS_SIMULATED_ROOT)).
        type: path
      fabric_manager:
        description: Whether the Fabric Manager must run (V(auto) - on NVSwitch and NVLink5 systems, V(true),
          V(false)); a C(nvidia-fabricmanager.service) not enabled or not running is work of the driver step.
        type: str
        default: auto
      persistenced:
        description: Whether C(nvidia-persistenced.service) must be enabled and running (work of the driver step
          where it is not; gpu_node passes C(driver_start_persistenced)).
        type: bool
        default: false
      systemctl:
        description: The systemctl command as an argument list; found in PATH when not set.
        type: list
        elements: str
      fabric_timeout:
        description: The seconds the driver step will wait for the fabric (checked here, 0 to 3600, before anything
          changes).
        type: int
        default: 300
      fabric_manager_version:
        description: The Fabric Manager's declared pin (empty - the driver's version); another version than the
          driver's is refused before anything is read (it runs only at exactly the driver's version).
        type: str
        default: ""
      allow_downgrade:
        description: Whether the driver role may downgrade; without it a Fabric Manager installed newer than the
          declared driver is refused here, before anything changes (installing the pin could not fix it).
        type: bool
        default: false
      modinfo:
        description: The modinfo command as an argument list (the next boot's kernel's modules, C(next_kernel)); found
          in PATH when not set and O(driver.root) is C(/).
        type: list
        elements: str
      dkms:
        description: The dkms command as an argument list (C(dkms status)); found in PATH when not set and
          O(driver.root) is C(/).
        type: list
        elements: str
      module_parameters:
        description: The nvidia module's C(NVreg_*) parameters as declared (the driver role's C(driver_module_parameters)).
          A loaded driver whose C(/proc/driver/nvidia/params) reads another value for one of them is reloaded (the
          step's work, disruptive).
        type: dict
        default: {}
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
      distribution:
        description:
          - As containerd_runtime's. The step first reads which containerd the kubelet talks to; a declaration aimed
            at another one is reported (C(refused), naming both) as the step's work. On k3s and RKE2 it reads the
            distribution's files and the config its agent generated last instead of the verified-state stamp.
        type: str
        choices: [auto, containerd, k3s, rke2]
        default: auto
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
  dev_char:
    description:
      - The /dev/char links of the NVIDIA device nodes, with M(gpuops.nvidia.dev_char_symlinks)'s parameters - the step
        C(dev_char) has work where a link that C(nvidia-ctk system create-dev-char-symlinks --create-all --dry-run)
        names is missing, or the udev rule file differs.
    type: dict
    suboptions:
      step:
        description: The step this belongs to.
        type: str
        default: dev_char
      dev_char_path:
        description: As dev_char_symlinks'.
        type: path
        default: /dev/char
      udev_rule:
        description: As dev_char_symlinks'.
        type: bool
        default: true
      udev_rule_path:
        description: As dev_char_symlinks'.
        type: path
        default: /lib/udev/rules.d/71-nvidia-dev-char.rules
      nvidia_ctk_path:
        description: As dev_char_symlinks'.
        type: path
  dcgm:
    description:
      - NVIDIA DCGM on the node, as M(gpuops.nvidia.dcgm_host_engine) takes it - the step C(dcgm) has work where its
        packages are not at O(dcgm.version) or its host engine's unit is not enabled and running (with
        O(dcgm.state=absent), where any of them is still there).
    type: dict
    suboptions:
      state:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:state).
        type: str
        required: true
        choices: [present, absent]
      version:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:version).
        type: str
        required: true
      cuda:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:cuda).
        type: int
        default: 12
      proprietary:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:proprietary).
        type: bool
        default: false
      package_manager:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:package_manager).
        type: str
        choices: [apt, dnf, auto]
        default: auto
      allow_downgrade:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:allow_downgrade).
        type: bool
        default: false
      hold:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:hold) - on apt, a missing dpkg hold
          or preferences pin is work for the step.
        type: bool
        default: true
      service:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:service).
        type: str
        default: nvidia-dcgm.service
      systemctl:
        description: As dcgm_host_engine's O(gpuops.nvidia.dcgm_host_engine#module:systemctl).
        type: list
        elements: str
  host_imex:
    description:
      - ComputeDomains (NVIDIA's DRA driver), as M(gpuops.nvidia.host_imex) takes it - the step C(host_imex) has work
        where a host IMEX unit that is installed is not masked and stopped (O(host_imex.state=masked)), or where the
        collection's record names units it masked for a declaration that went away (O(host_imex.state=unmasked)).
      - With V(masked) the result's C(host_imex) also reports what the node offers the DRA driver - the IMEX channels'
        major in C(/proc/devices), the loaded driver against the minimum (570.158.01), the C(nvidia.com/gpu.clique)
        value as GPU Feature Discovery computes it (C(clique)) - and its C(problems), which are not work of this step.
    type: dict
    suboptions:
      state:
        description: As host_imex's O(gpuops.nvidia.host_imex#module:state).
        type: str
        required: true
        choices: [masked, unmasked]
      units:
        description: As host_imex's O(gpuops.nvidia.host_imex#module:units).
        type: list
        elements: str
        default: [nvidia-imex.service, nvidia-imex-ctl.service]
      record:
        description: As host_imex's O(gpuops.nvidia.host_imex#module:record).
        type: path
        default: /var/lib/gpuops/host-imex.json
      systemctl:
        description: As host_imex's O(gpuops.nvidia.host_imex#module:systemctl).
        type: list
        elements: str
  burn_in:
    description:
      - The node's burn-in, as M(gpuops.nvidia.gpu_burn_in) takes it - the step C(burn_in) has work where the node's
        record does not cover the loaded driver at O(burn_in.level) (never burned in, another driver, a lower level,
        a failed burn-in).
    type: dict
    suboptions:
      level:
        description: As gpu_burn_in's O(gpuops.nvidia.gpu_burn_in#module:level).
        type: str
        required: true
        choices: [quick, medium, long, extended]
      dcgmi:
        description: As gpu_burn_in's O(gpuops.nvidia.gpu_burn_in#module:dcgmi) (not used by the check).
        type: str
        default: dcgmi
      nvbandwidth:
        description: As gpu_burn_in's O(gpuops.nvidia.gpu_burn_in#module:nvbandwidth) (not used by the check).
        type: str
        default: nvbandwidth
  health:
    description:
      - The GPUs' health, read with the facts (the same read as M(gpuops.nvidia.gpu_info)'s O(gpuops.nvidia.gpu_info#module:health)),
        judged by O(health.policy).
    type: dict
    suboptions:
      policy:
        description:
          - What each finding kind does to the verdict, C(block), C(warn) or C(ignore), over the defaults (docs/health.md),
            as gpu_info's O(gpuops.nvidia.gpu_info#module:health_policy). An unknown kind or action is refused before
            anything is read.
        type: dict
        default: {}
      dcgm_diag:
        description:
          - Also run DCGM's quick diagnostic (C(dcgmi diag -r 1 -j)) and judge its failed tests, as gpu_info's
            O(gpuops.nvidia.gpu_info#module:health_dcgm_diag); a node without dcgmi gets a note, no finding.
        type: bool
        default: false
      dcgmi:
        description: The C(dcgmi) command, a name looked up on C(PATH) or a path.
        type: str
        default: dcgmi
  steps:
    description:
      - The steps to plan, by name (V(declared) for O(files), O(units) and O(packages)); the options of any other step
        are not read. Default - every step whose options are given.
      - In the gpuops.nvidia.gpu_node role (after the lookup P(gpuops.nvidia.node_steps#lookup) has decided its steps,
        the fact C(__gpu_node)), a task that gives no step's options is given each planned step's options from the
        role's variables by the step registry, and its result holds the role's gates (RV(gates), RV(runs)).
    type: list
    elements: str
    choices: [driver, mig, compute_mode, declared, containerd_runtime, runtime_mode, cdi, dev_char, dcgm, host_imex, burn_in,
      health]
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
gates:
  description:
    - In the gpuops.nvidia.gpu_node role only (see O(steps)) - each of the role's node steps -> whether it runs in this
      run, and C(disruptive) (whether a disruptive step changes the GPUs), decided by the step registry.
  returned: in the gpu_node role, when the plan succeeds
  type: dict
  sample: {driver: false, mig: false, compute_mode: true, container_toolkit: false, containerd_runtime: false,
           runtime_mode: false, cdi: false, dev_char: false, health: true, disruptive: false}
runs:
  description:
    - In the gpuops.nvidia.gpu_node role only - the steps that are not disruptive and run, in order, each as its
      C(name) and its task file in the role (C(tasks)).
  returned: in the gpu_node role, when the plan succeeds
  type: list
  elements: dict
  sample: [{name: compute_mode, tasks: compute_mode.yml}, {name: health, tasks: health.yml}]
steps:
  description: Per step named in the options, the reasons it has work; an empty list means nothing to do.
  returned: always
  type: dict
  sample: {mig: [], compute_mode: ["GPU 0: compute mode Prohibited -> Default"], containerd_runtime: []}
driver:
  description:
    - The loaded driver against the pin - C(loaded_version), C(loaded_flavour) (null when none is loaded),
      C(nouveau_loaded), C(secure_boot), C(kernel), C(nvswitch), C(nvlink5), C(nvml_error) (null, or NVML's C(name) and
      C(message) when it could not start), C(action) (C(none), C(load), C(reload) or C(reboot)), C(reboot_needed),
      C(disruptive) (reasons the node's GPU users are disrupted) and C(root); C(fabric_manager) (C(wanted) and
      C(reason), and where the pin is an exact version C(installed), the Fabric Manager's installed packages, and
      C(pinned)), C(services), each managed unit's C(enabled) and C(active) as systemctl prints them, and
      C(persistence_mode) (its C(owner), nvidia-persistenced, and its C(dropin)) where nvidia-persistenced is managed.
    - C(next_kernel) - C(running) (C(uname -r)), C(next) (the boot loader's default entry's kernel; null where the boot
      loader does not say, C(next_source) saying how it was read or why not), C(next_differs), C(next_modules)
      (C(present), C(version), C(flavour), C(how), C(detail) - the declared driver's modules for that kernel) and
      C(dkms) (C(dkms status), parsed). A reading, not work of the step - the driver role's C(driver_next_kernel)
      acts on it before a reboot the collection makes.
    - C(module_parameters) where O(driver.module_parameters) is declared and a driver is loaded - C(pending) (name,
      declared, loaded - the parameters the loaded driver reads otherwise; the step then reloads it) and C(unreadable)
      (declared parameters C(/proc/driver/nvidia/params) does not print).
  returned: when O(driver) is given
  type: dict
  sample: {loaded_version: 570.195.03, loaded_flavour: open, action: reload, reboot_needed: false,
           disruptive: ["driver 570.195.03 is loaded, 580.95.05 is declared"]}
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
installs:
  description:
    - Per step, the packages of O(packages) that are not installed (the step would install them). In check mode
      nothing is installed, so the steps that run the tools they ship cannot be planned in that run (not
      containerd_runtime on k3s/RKE2, RV(containerd_runtime)).
  returned: when O(packages) is given
  type: dict
  sample: {container_toolkit: [nvidia-container-toolkit, nvidia-container-toolkit-base]}
containerd:
  description:
    - C(verified) (the stamp matched) and, when it did, the recorded result. Where the declaration targets k3s or RKE2
      (or is refused, naming the containerd that serves the kubelet), what the distribution needs instead
      (C(distribution), C(template_path), C(restart_service), C(reasons); C(refused)).
  returned: when O(containerd) is given
  type: dict
containerd_runtime:
  description:
    - C(needs_installs) false where the declaration targets k3s or RKE2 - the step runs no nvidia-ctk there, so the
      gates plan it in check mode although the toolkit is not installed yet.
  returned: when O(containerd) is given and targets k3s or RKE2
  type: dict
  sample: {needs_installs: false}
health:
  description:
    - The GPUs' health (with O(health)) - gpu_info's RV(gpuops.nvidia.gpu_info#module:health) without each GPU's read
      fields - C(verdict), C(healthy), C(blocking) and C(warnings) (one line each, naming the GPU, its bus id, the
      finding and its fix), C(findings), C(kernel_log), C(pci) (the GPUs the PCI bus shows), and C(gate) - the
      verdict as M(gpuops.nvidia.node_health) takes it (C(healthy), C(blocking), C(warnings)) with
      C(reset_clears), the GPUs whose blocking findings a GPU reset clears.
    - Also in a failed result where a step refuses the plan (RV(refused_step)) after the GPUs were read, so that the
      caller can still mark a node whose health blocks (the gpu_node role does).
  returned: when O(health) is given
  type: dict
refused_step:
  description:
    - On a failure, the step whose input check or check refused the plan (C(driver), C(mig), ...). Where O(health)
      is given the GPUs are still read and their health checked (RV(health)); no other step is checked after a
      refusal.
  returned: failure
  type: str
  sample: driver
ansible_facts:
  description: The GPUs as read.
  returned: always
  type: dict
  contains:
    nvidia_gpus:
      description:
        - What M(gpuops.nvidia.gpu_info) returns for all GPUs. With O(health), C(lost_gpus) names the GPUs NVML reports
          lost and C(missing_gpus) those the PCI bus shows and NVML does not list (C(bus_id), C(name),
          C(bound_driver)); the steps that read the GPUs wait while either is not empty (C(managed) false).
      type: dict
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import NvmlInitError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_run import GpuRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock


class NodePlan(GpuRun):
    """Read the node once (read_gpus, with the health read where the health step is given) -> plan: every given
    step's check (the options, the input checks and the checks are the steps' own: _node_steps.STEPS, in order).
    Changes nothing in any mode."""

    argument_spec = _node_steps.argument_spec(
        lock_timeout=dict(type="int"),
        steps=dict(type="list", elements="str", choices=[step.name for step in _node_steps.STEPS if step.option_names]))

    refused = None

    def validate(self):
        # each step's own input checks, in their own words; a refusal ends the run below, after the health read
        self.refused = _node_steps.validate(self.module)
        return []

    def lock(self):
        return module_lock(self.module, "gpu_node_plan")

    def read(self):
        """(facts, health read or None, the health step's options)."""
        health = _node_steps.BY_NAME["health"].given(self.module)
        if self.refused is not None and not health:
            raise self.refused          # nothing read: no health verdict is asked for
        try:
            facts, health_read = self.read_gpus(health=bool(health))
        except NvmlInitError as exc:
            # No driver yet, or a version mismatch: where the node declares its driver, the plan still answers (the
            # driver step has the work; the steps that read the GPUs wait for it). Elsewhere NVML must start.
            if self.params["driver"] is None:
                raise Failure(str(exc)) from exc
            facts, health_read = {"backend": None, "driver_version": None, "cuda_driver_version": None,
                                  "nvml_version": None, "gpus": [],
                                  "nvml_error": {"name": exc.name, "message": str(exc)}}, None
        return facts, health_read, health

    def plan(self, current):
        facts, health_read, health = current
        self.result.update({"changed": False, "ansible_facts": {"nvidia_gpus": facts}, "files": {}, "steps": {}})
        # the health read goes to the checks only (its step reports the verdict), not into the node's facts
        refused = _node_steps.plan(self.module, dict(facts, health_read=health_read) if health else facts, self.result,
                                   refused=self.refused)
        if refused is not None:
            # a step refuses the plan: the run fails with its message, and with the health verdict of the read (RV
            # health), so that the role still marks a node whose GPUs have a blocking finding (issue 47)
            raise refused
        return None


def main():
    run_module(NodePlan)


if __name__ == "__main__":
    main()
