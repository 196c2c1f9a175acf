#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_services
short_description: Keep nvidia-persistenced and the NVIDIA Fabric Manager enabled and running, and wait for the NVLink fabric
version_added: 0.3.0
description:
  - Enables and starts C(nvidia-persistenced.service) (O(persistenced)) and, on NVSwitch and NVLink5 systems
    (O(fabric_manager=auto)), C(nvidia-fabricmanager.service), in that order, as NVIDIA's driver container starts
    them. On an NVLink5 system (an InfiniBand bridge whose VPD holds C(SW_MNG)) it first loads C(mlx5_core) and
    C(ib_umad), which the Fabric Manager's NVLink Subnet Manager needs.
  - The Fabric Manager runs only at exactly the driver's version; a start that fails (another version, no
    NVSwitch) fails the run with systemctl's words and where to look (C(journalctl -u nvidia-fabricmanager)).
  - Then, where the Fabric Manager runs, it waits up to O(fabric_timeout) seconds until NVML reports every GPU's
    fabric registration completed with status SUCCESS; otherwise it fails naming each GPU (index, bus id), its fabric
    state and status, and what to do. GPUs without an NVSwitch fabric (state not supported) are not waited for.
  - "nvidia-persistenced is the one owner of persistence mode on a node whose driver is managed: a systemd drop-in,
    C(/etc/systemd/system/nvidia-persistenced.service.d/gpuops-persistence-mode.conf), starts the packaged unit's
    command with C(--persistence-mode) instead of C(--no-persistence-mode) (as NVIDIA's driver container starts the
    daemon). It is written before the unit is started, and a running daemon is restarted when the drop-in changed.
    M(gpuops.nvidia.compute_mode) then leaves persistence mode alone (its option C(persistence_owner))."
  - With no NVIDIA driver loaded it enables the units and starts nothing (they start once the driver is loaded, at
    the next boot or by M(gpuops.nvidia.driver_modules)); it says so in RV(deferred).
  - Check mode reads everything and reports what it would enable, start and load, with a diff of each unit's state;
    it changes nothing and does not wait.
options:
  persistenced:
    description: Whether C(nvidia-persistenced.service) must be enabled and running with C(--persistence-mode) (the
      owner of persistence mode where the driver is managed; see docs/driver.md).
    type: bool
    default: true
  fabric_manager:
    description:
      - V(auto) - the Fabric Manager runs where the node is an NVSwitch system (C(/proc/driver/nvidia-nvswitch/devices)
        is not empty) or an NVLink5 system.
      - V(true) or V(false) - as declared.
    type: str
    choices: [auto, "true", "false"]
    default: auto
  fabric_timeout:
    description: Seconds to wait for every GPU's fabric registration after the Fabric Manager runs (0 to 3600); V(0)
      reads once.
    type: int
    default: 300
  fabric_interval:
    description: Seconds between two reads of the fabric state while waiting (0.1 to 60).
    type: float
    default: 5
  root:
    description: The root the driver's files are read under (C(/proc/modules), C(/sys/module),
      C(/proc/driver/nvidia-nvswitch), C(/sys/class/infiniband)). V(/) on a node; the lab passes a node's scratch
      directory.
    type: path
    default: /
  systemctl:
    description: The systemctl command as an argument list (the lab passes its stand-in). Found in PATH when not set.
    type: list
    elements: str
  modprobe:
    description: The modprobe command as an argument list, for the NVLink5 modules. Found in PATH when not set.
    type: list
    elements: str
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.node_lock
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - The fabric state is read with NVML (C(nvmlDeviceGetGpuFabricInfo)), as M(gpuops.nvidia.gpu_info)'s health
    section shows it; on simulated GPUs from the simulator.
seealso:
  - name: NVIDIA Fabric Manager user guide
    description: The Fabric Manager must be the driver's exact version.
    link: https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/
  - name: NVIDIA driver persistence, the persistence daemon
    description: Why nvidia-persistenced, not nvidia-smi -pm, keeps the GPUs initialised.
    link: https://docs.nvidia.com/deploy/driver-persistence/persistence-daemon.html
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: nvidia-persistenced and, on an HGX, the Fabric Manager running; the fabric registered
  gpuops.nvidia.driver_services:
    fabric_timeout: 300

- name: Only nvidia-persistenced
  gpuops.nvidia.driver_services:
    fabric_manager: "false"
"""

RETURN = r"""
units:
  description: Each managed unit's state after the run (in check mode, as it would be), as systemctl prints it.
  returned: success
  type: dict
  sample: {"nvidia-fabricmanager.service": {"unit": "nvidia-fabricmanager.service", "enabled": "enabled", "active": "active"}}
actions:
  description: What was done (in check mode, would be done), in order.
  returned: always
  type: list
  elements: str
deferred:
  description: The units enabled but not started because no NVIDIA driver is loaded.
  returned: success
  type: list
  elements: str
fabric_manager:
  description: Whether the Fabric Manager runs on this node, and why.
  returned: success
  type: dict
  sample: {"wanted": true, "reason": "NVSwitch system (/proc/driver/nvidia-nvswitch/devices is not empty)"}
persistence_mode:
  description: Who owns persistence mode on this node (C(owner), C(nvidia-persistenced) or null when
    O(persistenced=false)), the drop-in's path (C(dropin)) and a C(note) saying how it is kept.
  returned: success
  type: dict
  sample: {"owner": "nvidia-persistenced", "dropin": "/etc/systemd/system/nvidia-persistenced.service.d/gpuops-persistence-mode.conf",
           "note": "nvidia-persistenced runs with --persistence-mode (its drop-in); no NVML persistence call"}
fabric:
  description: The wait for the fabric (where the Fabric Manager runs, outside check mode) - C(pending), the GPUs not
    registered at its end (index, pci_bus_id, state, status), and C(waited), seconds.
  returned: when waited
  type: dict
"""

import os

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_state
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import get_backend, module_runner
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    SYSTEM_TOOL_PACKAGES, ToolNotFound, command_program, require_tool, write_atomic)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS


class DriverServices(ModuleRun):
    """(node lock) read the driver state and the units; plan with _driver_services; enable, start; wait for the
    fabric (after)."""

    argument_spec = dict(
        persistenced=dict(type="bool", default=True),
        fabric_manager=dict(type="str", choices=list(ds.FABRIC_MANAGER_SETTINGS), default="auto"),
        fabric_timeout=dict(type="int", default=WAITS["fabric"].timeout),
        fabric_interval=dict(type="float", default=WAITS["fabric"].interval),
        root=dict(type="path", default="/"),
        systemctl=dict(type="list", elements="str"),
        modprobe=dict(type="list", elements="str"),
        lock_timeout=dict(type="int"),
    )

    def validate(self):
        errors = []
        try:
            ds.check_timeout(self.params["fabric_timeout"])
        except ds.DriverServicesError as exc:
            errors.append(str(exc))
        if not 0.1 <= self.params["fabric_interval"] <= 60:
            errors.append("fabric_interval must be 0.1 to 60 seconds, got %r" % self.params["fabric_interval"])
        if not os.path.isdir(self.params["root"]):
            errors.append("root %s is not a directory; give / on a node, or the lab node's directory"
                          % self.params["root"])
        for name in ("systemctl", "modprobe"):
            argv = self.params[name]
            if argv and command_program(self.module.get_bin_path, argv) is None:
                errors.append("%s: %r is not an executable program; give the command as an argument list whose "
                              "first item is the program (e.g. [/usr/bin/%s])" % (name, argv[0], name))
        return errors

    def lock(self):
        return module_lock(self.module, "driver_services")

    def run_argv(self, argv):
        try:
            return self.module.run_command(argv, handle_exceptions=False)
        except (IOError, OSError) as exc:
            return 127, "", "cannot run %s: %s" % (argv[0], exc)

    def tool(self, name):
        if self.params[name]:
            return list(self.params[name])
        try:
            found = require_tool(self.module.get_bin_path, self.params, name, name, SYSTEM_TOOL_PACKAGES[name],
                                 opt_dirs=["/usr/sbin", "/sbin", "/usr/bin"])
        except ToolNotFound as exc:
            self.refuse(str(exc))
        return [found]

    # ---- read ---------------------------------------------------------------------------------------------------
    def read(self):
        root = self.params["root"]
        try:
            state = _driver_state.read(root)
            modules = _driver_state.parse_proc_modules(
                _read(os.path.join(root, _driver_state.PROC_MODULES)) or "")
        except _driver_state.DriverStateError as exc:
            self.refuse("cannot read the driver's state: %s" % exc)
        fm, why = ds.fabric_manager_wanted(self.params["fabric_manager"], state,
                                           ds.pci_nvswitch_count(root) if state["loaded"] is None else 0)
        units = ds.wanted_units(self.params["persistenced"], fm)
        systemctl = self.tool("systemctl") if units else None
        dropin = None
        if self.params["persistenced"]:
            # the owner of persistence mode: the packaged unit, started with --persistence-mode by our drop-in
            dropin = {"path": os.path.join(root, ds.PERSISTENCED_DROPIN),
                      "wanted": ds.persistenced_dropin(ds.packaged_unit(root, ds.PERSISTENCED_UNIT)),
                      "current": ds.read_text(root, ds.PERSISTENCED_DROPIN)}
        return {"state": state, "modules": sorted(modules), "fabric_manager": fm, "fabric_manager_reason": why,
                "units": dict((u, ds.unit_state(self.run_argv, systemctl, u)) for u in units),
                "systemctl": systemctl, "dropin": dropin}

    # ---- plan ---------------------------------------------------------------------------------------------------
    def plan(self, current):
        loaded = current["state"]["loaded"]
        actions = ds.plan_units(current["units"])
        missing = ds.missing_modules(current["modules"], current["state"]["nvlink5"] and current["fabric_manager"])
        words = ["modprobe %s" % m for m in missing]
        after = dict((u, dict(s)) for u, s in current["units"].items())
        deferred = []
        dropin = current["dropin"]
        restart = False
        if dropin and dropin["wanted"] is not None and dropin["current"] != dropin["wanted"]:
            # the drop-in first: a unit started after it runs with --persistence-mode; a running one is restarted
            words.extend(["write %s" % dropin["path"], "systemctl daemon-reload"])
            restart = current["units"][ds.PERSISTENCED_UNIT]["active"] == "active"
        for action in actions:
            if action["enable"]:
                words.append("systemctl enable %s" % action["unit"])
                after[action["unit"]]["enabled"] = "enabled"
            if action["start"]:
                if loaded is None:
                    deferred.append(action["unit"])
                    continue
                words.append("systemctl start %s" % action["unit"])
                after[action["unit"]]["active"] = "active"
        if restart:
            words.append("systemctl restart %s" % ds.PERSISTENCED_UNIT)
        self.result.update(actions=words, deferred=deferred, units=after if self.module.check_mode else
                           current["units"], fabric_manager={"wanted": current["fabric_manager"],
                                                             "reason": current["fabric_manager_reason"]},
                           persistence_mode=self.persistence_report(dropin))
        before = dict(current["units"])
        if dropin:
            before["/" + ds.PERSISTENCED_DROPIN] = dropin["current"]
            after["/" + ds.PERSISTENCED_DROPIN] = dropin["wanted"] if dropin["wanted"] is not None else dropin["current"]
        self.set_diff(before, after, header="systemd units")
        return words

    def persistence_report(self, dropin):
        """Who owns persistence mode on this node, as the result says it."""
        if not dropin:
            return {"owner": None, "note": "nvidia-persistenced is not managed here (persistenced false)"}
        if dropin["wanted"] is None:
            return {"owner": "nvidia-persistenced", "dropin": dropin["path"],
                    "note": "%s is not installed yet: its drop-in (--persistence-mode) is written once the package "
                            "installed the unit" % ds.PERSISTENCED_UNIT}
        return {"owner": "nvidia-persistenced", "dropin": dropin["path"],
                "note": "nvidia-persistenced runs with --persistence-mode (its drop-in); no NVML persistence call"}

    # ---- apply --------------------------------------------------------------------------------------------------
    def apply(self, current, changes):
        done = []
        self.result["actions"] = done
        for word in changes:
            verb, target = word.rsplit(" ", 1)
            if verb == "write":
                try:
                    write_atomic(self.module, target, current["dropin"]["wanted"])
                    error = None
                except (IOError, OSError) as exc:
                    error = "cannot write %s: %s" % (target, exc)
            elif word == "systemctl daemon-reload":
                rc, out, err = self.run_argv(current["systemctl"] + ["daemon-reload"])
                error = None if rc == 0 else "systemctl daemon-reload failed (rc %d): %s" % (rc, (err or out).strip())
            elif verb == "modprobe":
                rc, out, err = self.run_argv(self.tool("modprobe") + [target])
                error = None if rc == 0 else "modprobe %s failed (rc %d): %s" % (target, rc, (err or out).strip())
            else:
                error = ds.unit_command(self.run_argv, current["systemctl"], verb.split()[-1], target)
            if error:
                hint = ""
                if target == ds.FABRIC_MANAGER_UNIT:
                    loaded = current["state"]["loaded"]
                    hint = (". The Fabric Manager runs only at exactly the driver's version (loaded: %s); %s"
                            % (loaded["version"] if loaded else "none", ds.FABRIC_LOG_HINT))
                self.fail("%s%s. Done before it: %s" % (error, hint, ", ".join(done) or "nothing"), changed=bool(done))
            done.append(word)
        units = dict((u, ds.unit_state(self.run_argv, current["systemctl"], u)) for u in current["units"])
        self.result["units"] = units
        down = [u for u, s in units.items() if s["active"] != "active" and u not in self.result["deferred"]]
        if down:
            self.fail("%s started but not running now (%s); %s" % (
                ", ".join(down), ", ".join(units[u]["active"] for u in down), ds.FABRIC_LOG_HINT
                if ds.FABRIC_MANAGER_UNIT in down else "see journalctl -u %s" % down[0]), changed=True)

    # ---- after: the fabric --------------------------------------------------------------------------------------
    def after(self, current, changes):
        if not current["fabric_manager"] or current["state"]["loaded"] is None:
            return
        if self.module.check_mode:
            self.result["fabric"] = {"pending": [], "waited": 0,
                                     "note": "a real run waits up to %d s for every GPU's fabric registration"
                                             % self.params["fabric_timeout"]}
            return
        try:
            backend = get_backend(run_command=module_runner(self.module))
            try:
                seen = self.wait("fabric", lambda: ds.fabric_pending(backend.read_health()["gpus"]),
                                 self.params["fabric_timeout"], self.params["fabric_interval"])
            finally:
                backend.close()
        except (GpuBackendError, NvmlError) as exc:
            self.fail("cannot read the GPUs' fabric state with NVML: %s" % exc)
        self.result["fabric"] = {"pending": seen.seen, "waited": round(seen.waited, 1)}
        if not seen.done:
            loaded = current["state"]["loaded"]
            self.fail(ds.fabric_message(seen.seen, seen.waited, loaded["version"] if loaded else None))


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def main():
    run_module(DriverServices)


if __name__ == "__main__":
    main()
