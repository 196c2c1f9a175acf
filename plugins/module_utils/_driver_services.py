# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The daemons a node's NVIDIA driver needs running (PRIVATE to gpuops.nvidia): nvidia-persistenced everywhere a
driver is declared, the Fabric Manager on NVSwitch and NVLink5 systems; the systemctl calls every module makes about
them (driver_modules, driver_services, the node plan's driver step: one place); and the fabric registration every GPU
must have completed before the node is released.

Sources:
- Units: ``nvidia-persistenced.service`` and ``nvidia-fabricmanager.service`` are the units NVIDIA's packages install
  (docs/driver.md). The Fabric Manager runs only at exactly the driver's version (NVIDIA Fabric Manager user guide,
  docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/); another version exits at start with "fabric manager
  NVIDIA GPU driver interface version X don't match with driver version Y" (NVIDIA/gpu-operator issue 544).
- Which nodes need it: NVIDIA/gpu-driver-container at 06a208ca, ubuntu24.04/nvidia-driver ``_start_daemons``: an
  NVLink5 system (``_assert_nvlink5_system``: an InfiniBand device whose VPD holds SW_MNG) starts the Fabric Manager
  through ``nvidia-fabricmanager-start.sh``, which also starts NVLSM, once ``mlx5_core`` and ``ib_umad`` are loaded
  (``_ensure_nvlink5_prerequisites``); an NVSwitch system (``_assert_nvswitch_system``) starts ``nv-fabricmanager``.
  The same script starts nvidia-persistenced first, with ``--persistence-mode``.
- Fabric state: nvml.h ``nvmlGpuFabricInfo_t`` (state NOT_STARTED, IN_PROGRESS, COMPLETED; ``status`` is valid once
  COMPLETED). A GPU whose state is NOT_SUPPORTED (no NVSwitch fabric) has nothing to wait for.

Pure apart from ``unit_state``, ``is_active`` and ``unit_command``, which run systemctl through the caller's
``run(argv) -> (rc, stdout, stderr)``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PERSISTENCED_UNIT = "nvidia-persistenced.service"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
# The kernel modules NVLink5's subnet manager needs before the Fabric Manager starts (see the docstring).
NVLINK5_MODULES = ("mlx5_core", "ib_umad")
FABRIC_MANAGER_SETTINGS = ("auto", "true", "false")
FABRIC_TIMEOUT_MAX = 3600
FABRIC_LOG_HINT = "check the Fabric Manager's log: journalctl -u nvidia-fabricmanager (and /var/log/fabricmanager.log)"


class DriverServicesError(ValueError):
    """Input that cannot be used; the message says what is wrong and what is valid."""


# ------------------------------------------------------------------------------------------------ systemctl
def unit_state(run, systemctl, unit):
    """{"unit", "enabled", "active"}: what ``systemctl is-enabled`` and ``is-active`` print (``not-found`` where
    is-enabled prints nothing and fails: no such unit file)."""
    rc, out, _err = run(systemctl + ["is-enabled", unit])
    enabled = out.strip().splitlines()[0] if out.strip() else ("not-found" if rc != 0 else "unknown")
    rc, out, _err = run(systemctl + ["is-active", unit])
    active = out.strip().splitlines()[0] if out.strip() else ("inactive" if rc != 0 else "unknown")
    return {"unit": unit, "enabled": enabled, "active": active}


def is_active(run, systemctl, unit):
    rc, out, _err = run(systemctl + ["is-active", unit])
    return rc == 0 and out.strip() == "active"


def unit_command(run, systemctl, verb, unit):
    """Run ``systemctl <verb> <unit>``: None, or what failed in words."""
    rc, out, err = run(systemctl + [verb, unit])
    if rc != 0:
        return "systemctl %s %s failed (rc %d): %s" % (verb, unit, rc, (err or out).strip() or "no output")
    return None


# ------------------------------------------------------------------------------------------------ the plan
def check_setting(value):
    text = str(value).lower() if isinstance(value, (bool, str)) else value
    if text not in FABRIC_MANAGER_SETTINGS:
        raise DriverServicesError("fabric_manager %r is not one of %s" % (value, ", ".join(FABRIC_MANAGER_SETTINGS)))
    return text


def check_timeout(value, name="fabric_timeout"):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= FABRIC_TIMEOUT_MAX:
        raise DriverServicesError("%s must be 0 to %d seconds, got %r" % (name, FABRIC_TIMEOUT_MAX, value))
    return value


def fabric_manager_wanted(setting, state, pci_nvswitches=0):
    """(whether the Fabric Manager runs on this node, why) from the declaration (auto, true, false), the driver
    state (_driver_state.read's ``nvswitch``, ``nvlink5``) and the NVSwitch functions on the PCI bus (_pci: read where
    no driver is loaded yet, which is when /proc/driver/nvidia-nvswitch does not exist)."""
    setting = check_setting(setting)
    if setting != "auto":
        return setting == "true", "declared"
    if state.get("nvlink5"):
        return True, "NVLink5 system (an InfiniBand bridge whose VPD holds SW_MNG)"
    if state.get("nvswitch"):
        return True, "NVSwitch system (/proc/driver/nvidia-nvswitch/devices is not empty)"
    if pci_nvswitches:
        return True, "NVSwitch system (%d NVSwitch functions on the PCI bus)" % pci_nvswitches
    return False, "no NVSwitch on this node"


def pci_nvswitch_count(root):
    """The NVSwitch functions under ``root``'s PCI sysfs (0 where it cannot be read: the driver's view decides)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _pci
    try:
        return len(_pci.nvswitches(_pci.read_nvidia_devices(root)))
    except _pci.PciReadError:
        return 0


def wanted_units(persistenced, fabric_manager):
    return ([PERSISTENCED_UNIT] if persistenced else []) + ([FABRIC_MANAGER_UNIT] if fabric_manager else [])


def plan_units(states):
    """[{"unit", "enable", "start"}] for the units ({unit: unit_state}) not enabled or not running, in start order
    (persistenced before the Fabric Manager, as the driver container starts them)."""
    order = {PERSISTENCED_UNIT: 0, FABRIC_MANAGER_UNIT: 1}
    out = []
    for unit in sorted(states, key=lambda u: (order.get(u, 2), u)):
        state = states[unit]
        enable, start = state["enabled"] != "enabled", state["active"] != "active"
        if enable or start:
            out.append({"unit": unit, "enable": enable, "start": start})
    return out


def unit_reasons(states):
    """The node plan's reasons: one sentence per unit not enabled or not running."""
    out = []
    for action in plan_units(states):
        state = states[action["unit"]]
        words = []
        if action["start"]:
            words.append("not running (%s)" % state["active"])
        if action["enable"]:
            words.append("not enabled (%s)" % state["enabled"])
        out.append("%s is %s" % (action["unit"], " and ".join(words)))
    return out


def missing_modules(loaded_names, nvlink5):
    """The NVLink5 prerequisites not loaded (``loaded_names``: the loaded modules' names)."""
    return [m for m in NVLINK5_MODULES if nvlink5 and m not in loaded_names]


# ------------------------------------------------------------------------------------------------ the fabric
def fabric_pending(health_gpus):
    """The GPUs whose fabric registration is not completed with SUCCESS: [{"index", "pci_bus_id", "state",
    "status"}], from a health read's GPUs (_gpu_health's shape). A GPU without a fabric (NOT_SUPPORTED) has nothing to
    wait for; a lost GPU counts (it cannot have registered)."""
    out = []
    for gpu in health_gpus or []:
        if gpu.get("lost"):
            out.append({"index": gpu.get("index"), "pci_bus_id": gpu.get("pci_bus_id"), "state": "lost",
                        "status": "GPU_IS_LOST"})
            continue
        fabric = gpu.get("fabric")
        if not isinstance(fabric, dict):
            continue
        if fabric.get("state") != "completed" or fabric.get("status") not in (None, "SUCCESS"):
            out.append({"index": gpu.get("index"), "pci_bus_id": gpu.get("pci_bus_id"), "state": fabric.get("state"),
                        "status": fabric.get("status")})
    return out


def fabric_message(pending, waited, fabric_manager_version=None):
    """The failure after the wait: each GPU (index, bus id) with its state and status, and what to do."""
    gpus = "; ".join("GPU %s (%s): fabric state %s, status %s" % (
        p["index"], p["pci_bus_id"], p["state"], p["status"]) for p in pending)
    return ("the NVLink fabric is not ready on %d GPU(s) after %d s: %s. The node stays out of service (cordoned where "
            "it was cordoned). Check that nvidia-fabricmanager runs%s and %s; then run again"
            % (len(pending), int(round(waited)), gpus,
               " at the driver's version (%s)" % fabric_manager_version if fabric_manager_version else "",
               FABRIC_LOG_HINT))
