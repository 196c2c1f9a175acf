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
  The same script starts nvidia-persistenced first, with ``--persistence-mode`` (line 616, ``_start_daemons``).
- Persistence mode's one owner (docs/driver.md, "One owner for persistence mode"): NVIDIA's "Persistence Daemon" page
  (docs.nvidia.com/deploy/driver-persistence/persistence-daemon.html) recommends nvidia-persistenced, and its legacy
  persistence mode page (docs.nvidia.com/deploy/driver-persistence/legacy-persistence-mode.html) says the legacy mode
  (``nvidia-smi -pm``, nvmlDeviceSetPersistenceMode) will be deprecated. nvidia-persistenced enables persistence mode
  on every GPU unless started with ``--no-persistence-mode`` (NVIDIA/nvidia-persistenced at 580.95.05,
  option-table.h); Ubuntu's packaged unit starts it so (``ExecStart=/usr/bin/nvidia-persistenced --user
  nvidia-persistenced --no-persistence-mode --verbose``, as ``systemctl cat`` shows it on Ubuntu nodes). A drop-in
  (``persistenced_dropin``) starts it with ``--persistence-mode`` instead, whatever the package wrote.
- Fabric state: nvml.h ``nvmlGpuFabricInfo_t`` (state NOT_STARTED, IN_PROGRESS, COMPLETED; ``status`` is valid once
  COMPLETED). A GPU whose state is NOT_SUPPORTED (no NVSwitch fabric) has nothing to wait for.

Pure apart from ``unit_state``, ``is_active`` and ``unit_command``, which run systemctl through the caller's
``run(argv) -> (rc, stdout, stderr)``, and ``read_text``, which reads a unit file or the drop-in under the root.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PERSISTENCED_UNIT = "nvidia-persistenced.service"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
# The kernel modules NVLink5's subnet manager needs before the Fabric Manager starts (see the docstring).
NVLINK5_MODULES = ("mlx5_core", "ib_umad")
FABRIC_MANAGER_SETTINGS = ("auto", "true", "false")
# what ``systemctl is-enabled`` prints for a unit that needs no ``systemctl enable`` (systemctl(1), is-enabled): a
# static unit (no [Install] section, as Ubuntu's nvidia-persistenced.service) cannot be enabled at all
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated")
FABRIC_TIMEOUT_MAX = 3600
# nvidia-persistenced's drop-in (under the node's root): its ExecStart is the packaged one with --persistence-mode
PERSISTENCED_DROPIN = "etc/systemd/system/nvidia-persistenced.service.d/gpuops-persistence-mode.conf"
# where packages install units (systemd's search path; /etc's file replaces the others)
UNIT_DIRS = ("etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")
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
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _pci
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
        enable, start = state["enabled"] not in ENABLED_STATES, state["active"] != "active"
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


# ------------------------------------------------------------------------------------------------ persistence mode
def exec_start(unit_text):
    """The last non-empty ``ExecStart=`` value of a unit file's text (None where it has none)."""
    value = None
    for line in (unit_text or "").splitlines():
        key, sep, rest = line.strip().partition("=")
        if sep and key.strip() == "ExecStart" and rest.strip():
            value = rest.strip()
    return value


def persistenced_dropin(unit_text):
    """The drop-in that makes nvidia-persistenced the owner of persistence mode, from the packaged unit's text: its
    ExecStart without ``--no-persistence-mode`` and with ``--persistence-mode`` (as NVIDIA's driver container starts the
    daemon), and ``StopWhenUnneeded=false`` (Ubuntu's unit stops the daemon when nothing needs it, which would end
    persistence mode). None where the unit has no ExecStart (not installed)."""
    start = exec_start(unit_text)
    if start is None:
        return None
    words = [w for w in start.split() if w not in ("--no-persistence-mode", "--persistence-mode")]
    words.append("--persistence-mode")
    return ("# Managed by gpuops.nvidia (driver_services): nvidia-persistenced owns persistence mode on this node, so\n"
            "# it runs with --persistence-mode; compute_mode leaves persistence mode alone (docs/driver.md).\n"
            "[Unit]\nStopWhenUnneeded=false\n\n[Service]\nExecStart=\nExecStart=%s\n" % " ".join(words))


def read_text(root, relative):
    """A file's text under ``root``, or None where it does not exist (or cannot be read)."""
    import os
    try:
        with open(os.path.join(root, relative)) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def packaged_unit(root, unit):
    """The text of ``unit``'s file as systemd finds it first under ``root`` (UNIT_DIRS), or None."""
    for directory in UNIT_DIRS:
        text = read_text(root, "%s/%s" % (directory, unit))
        if text is not None:
            return text
    return None


def dropin_reason(unit_text, current):
    """The node plan's reason where the drop-in is not as ``persistenced_dropin`` renders it (None: as it should be,
    or the unit is not installed, which the unit's own state says)."""
    wanted = persistenced_dropin(unit_text)
    if wanted is None or current == wanted:
        return None
    state = "missing" if current is None else "not as declared"
    return ("nvidia-persistenced does not run with --persistence-mode: its drop-in /%s is %s (nvidia-persistenced owns "
            "persistence mode where the driver is declared)" % (PERSISTENCED_DROPIN, state))


# ------------------------------------------------------------------------------------------------ the fabric
FABRIC_MANAGER_PID = "var/run/nvidia-fabricmanager/nv-fabricmanager.pid"


def fabric_manager_packages(branch):
    """The Fabric Manager's package names to look for: ``nvidia-fabricmanager`` (apt from 580, dnf) and
    ``nvidia-fabricmanager-<branch>`` (apt before 580), as _driver_plan names them."""
    return ["nvidia-fabricmanager"] + (["nvidia-fabricmanager-%s" % branch] if branch else [])


def upstream(package_version):
    """The driver version in a package version: ``580.95.05-1`` and ``3:580.95.05-1.el9`` -> ``580.95.05``."""
    return (package_version or "").split(":")[-1].split("-")[0]


def _key(version):
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return ()


def fabric_manager_check(installed, pin, allow_downgrade=False):
    """The node plan's Fabric Manager against the driver's pin (_driver_plan's rule: the Fabric Manager only at exactly
    the driver's version). ``installed``: [{"name", "version"}] (package versions), ``pin``: the declared driver
    version. Returns (reason or None, refusal or None): not installed, or installed at another version, is work
    (installing at the pin fixes it); installed newer than the pin without ``allow_downgrade`` cannot be fixed by the
    install (the driver role refuses the downgrade), so it is refused before anything changes."""
    if not pin:
        return None, None
    if not installed:
        return ("the Fabric Manager is not installed: it is installed at the driver's version %s" % pin), None
    versions = sorted(set(upstream(entry["version"]) for entry in installed))
    if versions == [pin]:
        return None, None
    have = ", ".join("%s %s" % (e["name"], e["version"]) for e in installed)
    newer = [v for v in versions if _key(v) > _key(pin)]
    if newer and not allow_downgrade:
        return None, ("the Fabric Manager is installed newer (%s) than the declared driver %s: it runs only at exactly "
                      "the driver's version, and installing the pin would downgrade it. Declare the installed version, "
                      "or allow the downgrade (driver_allow_downgrade: true); nothing changed" % (have, pin))
    return ("the Fabric Manager is installed at another version (%s) than the driver's %s: it is installed at %s (it "
            "runs only at exactly the driver's version)" % (have, pin, pin)), None


def fabric_state(health_gpus):
    """Each GPU's fabric registration, [{"index", "pci_bus_id", "state", "status"}], from a health read's GPUs
    (_gpu_health's shape; a field NVML does not support holds its words)."""
    out = []
    for gpu in health_gpus or []:
        fabric = gpu.get("fabric")
        if isinstance(fabric, dict):
            out.append({"index": gpu.get("index"), "pci_bus_id": gpu.get("pci_bus_id"), "state": fabric.get("state"),
                        "status": fabric.get("status")})
        else:
            out.append({"index": gpu.get("index"), "pci_bus_id": gpu.get("pci_bus_id"),
                        "state": "lost" if gpu.get("lost") else fabric, "status": None})
    return out


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
