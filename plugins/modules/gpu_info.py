#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Read the state of a host's NVIDIA GPUs, MIG instances and GPU processes
version_added: 0.1.0
description:
  - Reads, for each NVIDIA GPU of the host, its identity (index, UUID, name, PCI bus and device id), memory,
    compute capability, compute mode, persistence mode, MIG support and MIG mode (current and pending), the
    GPU-instance profiles it offers (with their compute-instance profiles and possible placements), the
    existing GPU and compute instances with their MIG device UUIDs, and the processes on each GPU and MIG
    device, and its NVLink fabric (cluster UUID, clique id, probe state and status, the decoded health mask); plus
    the driver and CUDA driver versions.
  - Registers the result as the fact C(nvidia_gpus).
  - Uses NVML through pynvml on a real host. When the environment variable C(GPUOPS_SIMULATED_GPUS) names a
    state file, it reads simulated GPUs instead (see docs/simulator.md); C(GPUOPS_SIMULATED_MACHINE) names the
    machine shape used to create that file when it does not exist.
  - With O(health) (the default) it also reads every GPU's health with NVML's read-only calls (ECC, remapped rows or
    retired pages, NVLinks, PCIe link, clock event reasons, temperature, NVSwitch fabric) and this boot's Xid events
    from the kernel log (C(journalctl -k -b), else C(dmesg)), and returns the findings with the health policy's
    verdict in RV(health); see docs/health.md.
  - Reports the driver below NVML in C(driver) (see docs/driver.md), that is the loaded kernel module's version and
    flavour from C(/sys/module/nvidia/version) and C(/proc/driver/nvidia/version), the running kernel, the nvidia
    modules with their reference counts, nouveau, Secure Boot, NVSwitch and NVLink5 systems, and NVML's own driver
    version.
  - When NVML cannot start (no driver installed or loaded, or a loaded module of another version than the NVML
    library, C(Driver/library version mismatch)), the module still answers, with no GPUs from NVML, the reason in
    C(driver.nvml_error) and the GPUs and NVSwitches read from PCI sysfs in C(driver.pci). Other failures (pynvml
    missing, an unreadable simulator state) still fail the task.
  - On simulated GPUs the files below NVML are read under C(GPUOPS_SIMULATED_ROOT) (the lab node's scratch
    directory); without it nothing below NVML is read and C(driver.root) is null.
  - Changes nothing, in any mode.
options:
  gpus:
    description:
      - Which GPUs to report. C(all), or a list of GPU indices, UUIDs (C(GPU-...)) or model names
        (C(NVIDIA H200) or C(H200)).
      - A selector that matches no GPU is an error, except C(all) where NVML lists no GPU and the health read finds
        GPUs on the PCI bus that NVML does not list (the finding C(gpu_missing) in RV(health) says which).
    type: list
    elements: str
    default: [all]
  health:
    description:
      - Whether to read the GPUs' health and return RV(health).
      - The findings and the verdict cover every GPU of the node, whatever O(gpus) selects.
    type: bool
    default: true
  health_policy:
    description:
      - "What each health finding kind does to the verdict, C(block), C(warn) or C(ignore), over the defaults listed in
        docs/health.md (for example C({row_remap_pending: warn, ecc_corrected: ignore}))."
      - An unknown kind or action is an error that names the valid ones.
    type: dict
    default: {}
  health_dcgm_diag:
    description:
      - With O(health), also run DCGM's quick diagnostic, C(dcgmi diag -r 1 -j) (run level 1, no stress test; it takes
        seconds to a minute on a real node), and turn its failed tests into findings (C(dcgm_diag_failure) blocks,
        C(dcgm_diag_warning) warns; see docs/health.md). Where O(health_dcgmi) is not installed this is a note in
        RV(health.dcgm), not an error.
    type: bool
    default: false
  health_dcgmi:
    description: The C(dcgmi) command for O(health_dcgm_diag), a name looked up on C(PATH) or a path.
    type: str
    default: dcgmi
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
notes:
  - Compute-instance profiles can only be read from NVML through an existing GPU instance; for profiles with
    no instance the module reports the table derived by the rule every published C(nvidia-smi mig -lcip)
    listing follows.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.facts
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Read the GPUs of this host
  gpuops.nvidia.gpu_info:
  register: gpu

- name: Show each GPU's MIG mode
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} {{ item.name }}: MIG {{ item.mig_mode_current }}"
  loop: "{{ ansible_facts.nvidia_gpus.gpus }}"

- name: Only the H200s
  gpuops.nvidia.gpu_info:
    gpus: [H200]

- name: Read the GPUs' health, with a pending row remap only a warning
  gpuops.nvidia.gpu_info:
    health_policy:
      row_remap_pending: warn
  register: gpu

- name: Show what blocks this node
  ansible.builtin.debug:
    msg: "{{ gpu.health.blocking }}"
  when: not gpu.health.healthy
"""

RETURN = r"""
backend:
  description: C(nvml) for real GPUs, C(simulated) for the simulator.
  returned: always
  type: str
  sample: nvml
driver_version:
  description: NVIDIA driver version.
  returned: always
  type: str
  sample: "580.159.04"
cuda_driver_version:
  description: Highest CUDA version the driver supports.
  returned: always
  type: str
  sample: "13.0"
nvml_version:
  description: NVML library version.
  returned: always
  type: str
  sample: "13.580.159.04"
gpus:
  description: One entry per selected GPU, in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: NVML index., type: int, returned: always}
    uuid: {description: GPU UUID., type: str, returned: always, sample: GPU-d657c65c-0f2d-750f-1992-921db613127c}
    name: {description: NVML product name., type: str, returned: always, sample: NVIDIA H200}
    pci_bus_id: {description: PCI bus id as NVML writes it., type: str, returned: always, sample: "00000000:00:06.0"}
    pci_device_id: {description: Packed PCI device and vendor id (mig-parted's device-filter form)., type: str,
                    returned: always, sample: "0x233510DE"}
    memory_total_mib: {description: Total memory in MiB., type: int, returned: always, sample: 143771}
    memory_total_bytes: {description: Total memory in bytes., type: int, returned: always}
    compute_capability: {description: CUDA compute capability., type: str, returned: always, sample: "9.0"}
    architecture: {description: "GPU architecture (C(ampere), C(ada), C(hopper), C(blackwell), ...).", type: str,
                   returned: always, sample: hopper}
    compute_mode: {description: "C(Default), C(Exclusive_Process) or C(Prohibited).", type: str, returned: always}
    persistence_mode: {description: Whether persistence mode is on., type: bool, returned: always}
    mig_supported: {description: Whether the GPU supports MIG., type: bool, returned: always}
    mig_mode_current: {description: "C(Enabled), C(Disabled), or null without MIG support.", type: str, returned: always}
    mig_mode_pending: {description: The MIG mode after the next reset or reboot., type: str, returned: always}
    reset_supported: {description: Whether a per-GPU reset is exposed (false in passthrough VMs)., type: bool,
                      returned: always}
    gi_profiles:
      description: GPU-instance profiles (name, id, nvml_index, slices, memory_slices, max_instances, memory_mib,
        sms, placements, ci_profiles), including Blackwell's C(+gfx), C(-me) and C(+me.all) variants.
      type: list
      elements: dict
      returned: always
    gpu_instances:
      description: Existing GPU instances (id, profile_id, profile, placement, compute_instances with id,
        profile, placement, mig_uuid and processes).
      type: list
      elements: dict
      returned: always
    mig_devices:
      description: The MIG devices CUDA sees, one per compute instance (uuid, gi_id, ci_id, profile, placement,
        processes).
      type: list
      elements: dict
      returned: always
    processes:
      description: Processes on the GPU (pid, name, used_memory_mib, gi_id, ci_id).
      type: list
      elements: dict
      returned: always
    fabric:
      description:
        - The GPU's NVLink fabric as NVML's GPU fabric info gives it (nvmlDeviceGetGpuFabricInfoV with the v2 struct,
          else nvmlDeviceGetGpuFabricInfo), or C(not supported) where the GPU has no NVSwitch fabric.
        - C(state) (C(not_started), C(in_progress) or C(completed)), C(status) (C(SUCCESS) or the NVML error name the
          probe ended with; it counts only once the state is completed), C(cluster_uuid) (lower case; all zero on a
          single-node NVSwitch baseboard), C(clique_id), C(health_mask) (C(0x%08x); C(not supported) without the v2
          struct) and C(health), the mask decoded into C(degraded_bandwidth), C(route_recovery_in_progress),
          C(route_unhealthy), C(access_timeout_recovery), C(partition_assigned) (true/false),
          C(incorrect_configuration) (C(none) or what is wrong), C(gfm_state) (C(connected)/C(disconnected)), each
          C(not supported) where the driver does not report it, and C(unknown_bits) where bits no field names are set.
        - The node's C(nvidia.com/gpu.clique) label, as GPU Feature Discovery writes it, is
          C(<cluster_uuid>.<clique_id>) of its GPUs that completed with C(SUCCESS) and a cluster UUID, where they all
          agree (docs/gpu-info.md).
      type: raw
      returned: always
      sample: {state: completed, status: SUCCESS, cluster_uuid: 6a130f54-faaa-4b8f-847f-be44ab70f917,
               clique_id: 32766, health_mask: "0x000000aa",
               health: {degraded_bandwidth: false, route_recovery_in_progress: false, route_unhealthy: false,
                        access_timeout_recovery: false, incorrect_configuration: not supported,
                        partition_assigned: not supported, gfm_state: not supported}}
health:
  description: The GPUs' health (with O(health)) - the findings, the policy's verdict, the kernel log's source and
    each GPU's health read. Not part of C(nvidia_gpus).
  returned: when O(health) is true
  type: dict
  contains:
    verdict: {description: "C(block) (a finding blocks), C(warn) (only warnings) or C(pass).", type: str,
              returned: always, sample: block}
    healthy: {description: Whether no finding blocks., type: bool, returned: always}
    blocking:
      description: One line per blocking finding, naming the GPU, its bus id, the finding and what fixes it.
      type: list
      elements: str
      returned: always
      sample: ["GPU 3 (00000000:47:00.0): remapped rows pending - reset the GPU or reboot; the gate clears when the
                next run finds it healthy"]
    warnings: {description: One line per warning finding., type: list, elements: str, returned: always}
    findings:
      description: Each finding (kind, gpu, pci_bus_id, detail, fix, summary, action; Xid findings add xid with code,
        mnemonic, cause, action, recommended and line, and times).
      type: list
      elements: dict
      returned: always
    kernel_log:
      description: Whether this boot's kernel log could be read (readable), from where (source, C(journalctl) or
        C(dmesg)), why not (reason) and how many Xid lines it held (xid_lines).
      type: dict
      returned: always
    dcgm:
      description:
        - With O(health_dcgm_diag), DCGM's diagnostic - C(ran), C(version), C(results) (how many result entries it
          gave), and C(note) (dcgmi not installed; no finding), C(error) or C(runtime_error) (it could not run; the
          finding C(dcgm_diag_error)). Null without O(health_dcgm_diag).
      type: dict
      returned: always
    pci:
      description:
        - The GPUs the PCI bus shows (C(gpus), their sysfs bus ids; NVSwitches, other functions and SR-IOV virtual
          functions left out), compared with those NVML lists - a GPU on the bus that NVML does not list is the
          blocking finding C(gpu_missing) - or, where sysfs could not be read, C(readable) false and the C(reason)
          (no finding). Null where the bus is not read (simulated GPUs without C(GPUOPS_SIMULATED_ROOT)).
      type: dict
      returned: always
    burn_in:
      description:
        - The node's burn-in record in short (C(level), C(verdict), C(time), C(driver), C(dcgm_version), and
          C(failed), each failed test with its GPU), as M(gpuops.nvidia.node_health) carries it on the Node (its option
          O(gpuops.nvidia.node_health#module:burn_in)); null where the node has no usable record.
      type: dict
      returned: always
    gate:
      description:
        - The verdict as M(gpuops.nvidia.node_health) takes it - C(healthy), C(blocking) and C(warnings), each finding
          a mapping of C(gpu), C(bus_id), C(kind) and C(message) (the line of RV(health.blocking)) - and
          C(reset_clears), the indexes of the GPUs with a blocking finding that a GPU reset clears (a pending row remap
          or page retirement), for gpuops.nvidia.gpu_node's optional remediation.
      type: dict
      returned: always
    gpus:
      description: Each GPU's health read (index, uuid, name, pci_bus_id, architecture, lost, ecc, retired_pages,
        remapped_rows, nvlink, pcie, clock_events, temperature_c, fabric); a field NVML answers NOT_SUPPORTED for
        holds C(not supported).
      type: list
      elements: dict
      returned: always
driver:
  description:
    - The NVIDIA driver as NVML and the kernel show it. The fields read below NVML are null when C(root) is null
      (simulated GPUs without a simulated host).
  returned: always
  type: dict
  contains:
    root: {description: "Where the files below NVML were read (C(/) on a host); null when none were.", type: str,
           returned: always, sample: /}
    nvml_driver_version: {description: NVML's driver version (nvmlSystemGetDriverVersion); null when NVML could not
                            start., type: str, returned: always, sample: "580.159.04"}
    nvml_error:
      description: Why NVML could not start (C(name) as NVML names it, for example C(DRIVER_NOT_LOADED),
        C(LIBRARY_NOT_FOUND) or C(LIB_RM_VERSION_MISMATCH), and C(message)); null when it started.
      type: dict
      returned: always
    loaded_version: {description: "The loaded nvidia module's version (C(/sys/module/nvidia/version)); null when no
                       driver is loaded.", type: str, returned: always, sample: "580.159.04"}
    flavour: {description: "C(open) or C(proprietary), from the wording of C(/proc/driver/nvidia/version); null when
                no driver is loaded.", type: str, returned: always, sample: open}
    modules: {description: "The loaded nvidia* modules and their reference counts (C(/proc/modules)).", type: dict,
              returned: always, sample: {nvidia: 1, nvidia_uvm: 0}}
    in_use: {description: "Whether something holds the loaded driver (it could not be unloaded now).", type: bool,
             returned: always}
    kernel: {description: The running kernel (C(uname -r))., type: str, returned: always, sample: 6.8.0-87-generic}
    nouveau_loaded: {description: Whether the nouveau module is loaded., type: bool, returned: always}
    secure_boot: {description: "Secure Boot from its EFI variable; null when unknown (not an EFI boot).",
                  type: bool, returned: always}
    nvswitch: {description: "Whether the node is an NVSwitch system (C(/proc/driver/nvidia-nvswitch/devices) not
                 empty).", type: bool, returned: always}
    nvlink5: {description: "Whether the node is an NVLink5 system (an InfiniBand device whose VPD names
                C(SW_MNG)).", type: bool, returned: always}
    read_error: {description: "Why the files below NVML could not be read; null when they could.", type: str,
                 returned: always}
    fabric_manager:
      description:
        - The NVIDIA Fabric Manager - C(installed), its package(s) and version(s) from the package database
          (C(nvidia-fabricmanager), C(nvidia-fabricmanager-<branch>); empty when none, null when the database could
          not be read, C(read_error) then says why), C(running) (its pid file names a live process; on simulated GPUs
          the simulated Fabric Manager) and C(running_version), the running daemon's version where it says so (the
          simulated one; null on a real node, whose daemon does not say it).
      type: dict
      returned: when C(root) is not null
      sample: {installed: [{name: nvidia-fabricmanager, version: 580.95.05-1}], running: true, running_version: null}
    fabric:
      description: Each GPU's NVLink fabric registration (C(index), C(pci_bus_id), C(state), C(status)), from the
        health read (nvmlDeviceGetGpuFabricInfo); C(not supported) where the GPU has no NVSwitch fabric.
      type: list
      elements: dict
      returned: when O(health) is true and NVML started
      sample: [{index: 0, pci_bus_id: "00000000:18:00.0", state: completed, status: SUCCESS}]
    pci:
      description:
        - Only when NVML could not start. C(gpus) and C(nvswitches) read from PCI sysfs (bus_id, device, subsystem,
          name, architecture, open_modules, bound_driver, virtual_function (an SR-IOV VF); ids as hex strings) and
          C(flavours), the kernel-module flavours that can run them (C(open), C(proprietary), C(reasons)).
        - A GPU's name and architecture are the collection's catalog's, else from NVIDIA's open-module table and PCI
          id database (shipped with the collection); C(open_modules) is true for every GPU of that table, false for
          one older than Turing, null when neither source knows its device id.
      type: dict
      returned: when NVML could not start
ansible_facts:
  description: The same data as C(nvidia_gpus).
  returned: always
  type: dict
  contains:
    nvidia_gpus:
      description: C(backend), C(driver_version), C(cuda_driver_version), C(nvml_version), C(gpus) and C(driver).
      type: dict
      returned: always
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_state
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import (
    ENV_ROOT,
    NvmlInitError,
    select_gpus,
    simulated,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._dcgm import run_for_module as run_dcgm_diag
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
    HealthPolicyError, summary, validate_policy)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_run import GpuRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Done, Failure, run_module


def _pci_record(device):
    out = dict(device)
    for key in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
        out[key] = "0x%04x" % device[key]
    out["class"] = "0x%06x" % device["class"]
    return out


def driver_section(root, nvml_version, nvml_error):
    """The ``driver`` report: NVML's answer (its version, or why it could not start) next to what the kernel shows
    under ``root`` (None: nothing below NVML is read); with NVML down, the PCI view too."""
    section = {"root": root, "nvml_driver_version": nvml_version,
               "nvml_error": None if nvml_error is None else {"name": nvml_error.name, "message": str(nvml_error)},
               "loaded_version": None, "flavour": None, "modules": {}, "in_use": False, "kernel": None,
               "nouveau_loaded": None, "secure_boot": None, "nvswitch": None, "nvlink5": None, "read_error": None}
    if root is None:
        return section
    try:
        state = _driver_state.read(root)
        loaded = state["loaded"] or {}
        section.update(loaded_version=loaded.get("version"), flavour=loaded.get("flavour"),
                       modules=loaded.get("modules", {}), in_use=_driver_state.in_use(loaded.get("modules", {})),
                       kernel=state["kernel"], nouveau_loaded=state["nouveau_loaded"],
                       secure_boot=state["secure_boot"], nvswitch=state["nvswitch"], nvlink5=state["nvlink5"])
        if nvml_error is not None:
            devices = _pci.read_nvidia_devices(root)
            section["pci"] = {"gpus": [_pci_record(d) for d in _pci.gpus(devices)],
                              "nvswitches": [_pci_record(d) for d in _pci.nvswitches(devices)],
                              "flavours": _pci.flavours(devices)}
    except (_driver_state.DriverStateError, _pci.PciReadError) as exc:
        section["read_error"] = str(exc)
    return section


def fabric_manager_section(module, root, version):
    """The Fabric Manager: its installed package(s) (the package database: dpkg-query, else rpm) and whether the
    daemon runs, with its version where the daemon says so (the simulated one does; the real one's pid file only says
    that it runs)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages
    out = {"installed": None, "running": None, "running_version": None, "read_error": None}
    names = ds.fabric_manager_packages((version or "").split(".")[0])
    manager = "apt" if module.get_bin_path("dpkg-query") else ("dnf" if module.get_bin_path("rpm") else None)
    if manager is None:
        out["read_error"] = "no package database (neither dpkg-query nor rpm found)"
    else:
        try:
            found = _packages.read_installed(module, manager, names)
            out["installed"] = [{"name": n, "version": found[n]["version"]} for n in names if found[n]["version"]]
        except _packages.PackageError as exc:
            out["read_error"] = str(exc)
    if simulated():
        from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host
        out["running_version"] = _simulator_host.fabric_manager_version(root)
        out["running"] = out["running_version"] is not None
    else:
        pid = ds.read_text(root, ds.FABRIC_MANAGER_PID)
        out["running"] = bool(pid and pid.strip().isdigit() and os.path.isdir("/proc/%s" % pid.strip()))
    return out


def driver_root():
    """Where the files below NVML are: the simulated node's root on simulated GPUs (None without one), else "/"."""
    if simulated():
        return os.environ.get(ENV_ROOT) or None
    return "/"


class GpuInfo(GpuRun):
    """Read the GPUs (and their health, and the driver below NVML) -> plan: the GPUs selected; changes nothing in
    any mode."""

    argument_spec = dict(gpus=dict(type="list", elements="str", default=["all"]),
                         health=dict(type="bool", default=True),
                         health_policy=dict(type="dict", default={}),
                         health_dcgm_diag=dict(type="bool", default=False),
                         health_dcgmi=dict(type="str", default="dcgmi"))

    def validate(self):
        try:
            self.policy = validate_policy(self.params["health_policy"] or None)
        except HealthPolicyError as exc:
            raise Failure(str(exc)) from exc
        return []

    def read(self):
        """(facts, health summary or None): the GPUs, their health, the driver; without NVML (no driver yet, or a
        version mismatch) the node is answered from below NVML, and the run is done there."""
        module = self.module
        nvml_error = health = None
        try:
            facts, read = self.read_gpus(health=self.params["health"])
        except NvmlInitError as exc:
            nvml_error, read = exc, None
            facts = {"backend": "simulated" if simulated() else "nvml", "driver_version": None,
                     "cuda_driver_version": None, "nvml_version": None, "gpus": []}
        if read is not None:
            if self.params["health_dcgm_diag"]:
                read["dcgm"] = run_dcgm_diag(module, self.params["health_dcgmi"])
            health = summary(read, self.policy)
        lost = facts.pop("lost_gpus", None)
        facts.pop("missing_gpus", None)        # (a finding of the health read: gpu_missing)
        if lost:
            # NVML cannot read a lost GPU's facts; its health says which GPU and what to do.
            raise Failure("NVML error GPU_IS_LOST while reading GPUs: %s; %s" % (
                lost[0]["error"], "; ".join(health["blocking"])), health=health)

        facts["driver"] = driver_section(driver_root(), facts["driver_version"], nvml_error)
        if facts["driver"]["root"] is not None:
            facts["driver"]["fabric_manager"] = fabric_manager_section(
                module, facts["driver"]["root"], facts["driver"]["loaded_version"] or facts["driver_version"])
        if health is not None:
            from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
            facts["driver"]["fabric"] = ds.fabric_state(health.get("gpus"))
        if nvml_error is not None:
            if facts["driver"]["read_error"]:
                raise Failure("NVML could not start (%s) and the node could not be read below NVML either: %s"
                              % (nvml_error, facts["driver"]["read_error"]), driver=facts["driver"]) from nvml_error
            raise Done(ansible_facts={"nvidia_gpus": facts}, **facts)
        return facts, health

    def plan(self, current):
        facts, health = current
        selector = self.params["gpus"]
        chosen = select_gpus(facts["gpus"], selector)
        # every GPU NVML lists is none, but the PCI bus shows GPUs NVML does not list: the health read says which
        # (gpu_missing), which is the answer, not a bad selector
        missing = health is not None and any(f["kind"] == "gpu_missing" for f in health["findings"])
        if not chosen and not (missing and selector == ["all"]):
            raise Failure("gpus=%s matches no GPU on this host; it has: %s" % (
                selector, ", ".join("%d (%s, %s)" % (g["index"], g["name"], g["uuid"]) for g in facts["gpus"])
                or "no GPUs"))
        facts["gpus"] = chosen
        self.result.update(facts, ansible_facts={"nvidia_gpus": facts})
        if health is not None:
            self.result["health"] = health
        return None


def main():
    run_module(GpuInfo)


if __name__ == "__main__":
    main()
