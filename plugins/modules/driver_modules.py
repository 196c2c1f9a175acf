#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_modules
short_description: Unload, load or reload the NVIDIA kernel modules on a live node, with the daemons that hold them
version_added: 0.3.0
description:
  - The kernel-module half of a live driver upgrade. O(state=unloaded) stops the daemons that hold the driver (the
    step registry's GPU holders - the DCGM exporter, DCGM's host engine, NVSM, the MPS control daemon,
    nvidia-persistenced, the Fabric Manager, NVLSM; as systemd units where one is active, else through their pid
    files as NVIDIA's driver container does) and removes C(nvidia_peermem),
    C(nvidia_uvm), C(nvidia_drm), C(nvidia_modeset), then C(nvidia) (those loaded). O(state=loaded) loads
    C(nvidia), C(nvidia_uvm), C(nvidia_modeset) (C(nvidia_drm) and C(nvidia_peermem) where they were loaded before
    or O(also_load) asks) and starts again the daemons an unload stopped. O(state=reloaded) does both when the
    loaded driver is not O(version), and only then.
  - Before anything is stopped it looks for processes holding C(/dev/nvidia*) (other than the daemons it stops) and
    for kernel modules outside the driver that use it. Either refuses the run, naming each holder (PID, command, pod
    UID and container or systemd unit from its cgroup); nothing is stopped. After the daemons are stopped it checks
    again, with the driver's own reference counts (the rule of NVIDIA's driver container, see
    docs/driver.md); if the driver is still in use, the daemons are started again and nothing is unloaded.
  - What an unload stopped and unloaded is recorded in O(record_path) before the first stop, so a later
    O(state=loaded) (after the packages changed, or after an interrupted run) knows which daemons and optional
    modules to bring back. The record is removed once they are back.
  - A reload checks first that the module file installed for the running kernel (C(modinfo -F version nvidia)) is
    O(version); otherwise nothing is stopped or unloaded. After a load the loaded version (C(/sys/module/nvidia/version))
    must be O(version) and the flavour (C(/proc/driver/nvidia/version)) O(flavour) when given.
  - Installing the driver's packages is not part of this module (see the driver role).
options:
  state:
    description:
      - V(unloaded) - no NVIDIA module loaded; the daemons that held it stopped (and recorded).
      - V(loaded) - the driver loaded; a loaded driver of another version than O(version) is refused (use
        V(reloaded)).
      - V(reloaded) - the driver loaded at O(version); unloaded and loaded again when another version is loaded.
    type: str
    choices: [unloaded, loaded, reloaded]
    required: true
  version:
    description: The driver version that must be loaded (as C(/sys/module/nvidia/version) says it, e.g. C(580.95.05)).
      Required with O(state=reloaded).
    type: str
  flavour:
    description: The kernel module flavour that must be loaded; checked after a load, and a loaded driver of the other
      flavour is reloaded by O(state=reloaded).
    type: str
    choices: [open, proprietary]
  also_load:
    description: Optional driver modules to load even when they were not loaded before.
    type: list
    elements: str
    choices: [nvidia_drm, nvidia_peermem]
    default: []
  root:
    description: The root the driver's files are read under (C(/sys), C(/proc), C(/dev), C(/lib/modules), the pid
      files). V(/) on a real node; the lab passes a node's scratch directory.
    type: path
    default: /
  record_path:
    description: Where an unload records what it stopped and unloaded. Default C(<root>/var/lib/gpuops/driver-modules.json).
    type: path
  modprobe:
    description: The modprobe command as an argument list (the lab passes its stand-in). Found in PATH when not set.
    type: list
    elements: str
  rmmod:
    description: The rmmod command as an argument list. Found in PATH when not set.
    type: list
    elements: str
  modinfo:
    description: The modinfo command as an argument list. Found in PATH when not set.
    type: list
    elements: str
  systemctl:
    description: The systemctl command as an argument list. Found in PATH when not set; without one, daemons are
      found through their pid files only.
    type: list
    elements: str
  mps_unit:
    description: The systemd unit of the MPS control daemon (M(gpuops.nvidia.mps_control)'s unit name; a name
      without C(.service) gets it).
    type: str
    default: gpuops-mps-control.service
  daemon_timeout:
    description: Seconds to wait for a daemon stopped through its pid file (SIGTERM) to exit (1 to 600).
    type: int
    default: 5
  parameters:
    description:
      - The nvidia module's C(NVreg_*) parameters as declared (M(gpuops.nvidia.driver_params) writes them to
        modprobe.d). With O(state=reloaded), a loaded driver whose C(/proc/driver/nvidia/params) reads another value
        for one of them is reloaded too (at the same version), and after any load each must read as declared, or the
        run fails naming the parameter, the declared and the read value. A parameter the driver does not print there
        is not compared.
    type: dict
    default: {}
  preflight:
    description:
      - Only say whether O(state=reloaded) could reload the driver now, changing nothing in any mode - the checks a
        reload makes before it stops anything (kernel modules outside the driver that use it, processes other than
        the daemons it stops that hold C(/dev/nvidia*), a daemon run from a pid file whose command line cannot be read,
        which could be stopped but not started again), without comparing the module installed for the running
        kernel with O(version). Run before the driver's packages are installed, so that a reload that would be
        refused is refused before anything changes. Never fails for what it finds - RV(reload), RV(blockers).
      - Needs O(state=reloaded).
    type: bool
    default: false
  preflight_pods:
    description:
      - With O(preflight), what a process inside a Kubernetes pod counts as - V(block), a blocker like any other;
        V(defer), listed in RV(deferred) only (the gpu_node role checks before it cordons the node and pauses its GPU
        pods, which ends such processes, and again after).
    type: str
    choices: [block, defer]
    default: block
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
  - A daemon run through a pid file (no active unit) is started again with the command line it ran with, read from
    C(/proc/<pid>/cmdline) before it was stopped; the command must put itself in the background, as
    nvidia-persistenced, nv-hostengine and nv-fabricmanager do.
  - A refusal leaves the node as it was. The node is cordoned and drained by the role around this module, not by it.
seealso:
  - name: NVIDIA gpu-driver-container, _unload_driver and _load_driver
    description: The rules this module follows (stop order, pid files, the in-use test, load order).
    link: https://github.com/NVIDIA/gpu-driver-container/blob/main/ubuntu24.04/nvidia-driver
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Unload the driver before its packages change
  gpuops.nvidia.driver_modules:
    state: unloaded

- name: Load the new driver and start what was running
  gpuops.nvidia.driver_modules:
    state: loaded
    version: "580.95.05"
    flavour: open

- name: Or in one step, after the packages were upgraded in place
  gpuops.nvidia.driver_modules:
    state: reloaded
    version: "580.95.05"

- name: Before the packages change, whether a reload could be made now (changes nothing)
  gpuops.nvidia.driver_modules:
    state: reloaded
    version: "580.95.05"
    preflight: true
  register: reload_preflight

- name: Stop before anything changes where it could not
  ansible.builtin.fail:
    msg: "{{ reload_preflight.msg }}"
  when: reload_preflight.blockers | length > 0
"""

RETURN = r"""
version:
  description: The loaded driver version after the run (in check mode, as it would be); null when none is loaded.
  returned: success
  type: str
  sample: 580.95.05
flavour:
  description: The loaded module flavour after the run (V(open), V(proprietary)); null when none is loaded.
  returned: success
  type: str
modules:
  description: The driver modules loaded after the run, in load order.
  returned: success
  type: list
  elements: str
previous:
  description: The same three facts before the run (version, flavour, modules).
  returned: success
  type: dict
daemons_stopped:
  description: The daemons stopped by this run (name, unit or pid).
  returned: success
  type: list
  elements: dict
daemons_started:
  description: The daemons started again by this run.
  returned: success
  type: list
  elements: dict
actions:
  description: What was done (in check mode, would be done), in order.
  returned: always
  type: list
  elements: str
holders:
  description: On a refusal, each process holding the device files, as a sentence; with O(preflight), those that
    block the reload.
  returned: failure, or with O(preflight)
  type: list
  elements: str
parameters_pending:
  description: The declared O(parameters) the loaded driver read otherwise before the run (name, declared, loaded).
  returned: success
  type: list
  elements: dict
reload:
  description: With O(preflight), whether the loaded driver is not O(version) (or O(flavour)) or reads another value of
    one of O(parameters), so that a reload is due.
  returned: with O(preflight)
  type: bool
blockers:
  description: With O(preflight), why the reload would be refused now (empty - it would not); C(msg) joins them.
  returned: with O(preflight)
  type: list
  elements: str
deferred:
  description: With O(preflight) and O(preflight_pods=defer), the processes inside Kubernetes pods that hold the device
    files (they block a reload unless the pods end first).
  returned: with O(preflight)
  type: list
  elements: str
"""

import json
import os
import signal


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_modules as dm
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params as dp
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._device_holders import (
    describe_holder, device_patterns, find_holders)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import (
    InputFileError, check_shape, read_text as read_input_text)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    SYSTEM_TOOL_PACKAGES, ToolNotFound, command_program, require_tool, write_atomic)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _gpu_holders, _node_steps
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Failure, ModuleRun, Refusal, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS, wait

NOTHING = "Nothing was stopped or unloaded."
RECORD_BYTES = 1024 * 1024  # a record names a few daemons and modules: a few hundred bytes


def rooted(root, path):
    return os.path.join(root, path.lstrip("/"))


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == 1  # EPERM: it exists, owned by another user
    return True


class Run(object):
    def __init__(self, module):
        self.module = module
        p = module.params
        self.p = p
        self.root = p["root"]
        if not os.path.isdir(self.root):
            raise Refusal("root %s is not a directory; give / on a node, or the lab node's directory. %s"
                          % (self.root, NOTHING))
        try:
            self.version = dm.check_version(p["version"])
            self.also_load = dm.check_also_load(p["also_load"])
            self.declared_params = dp.check(p["parameters"], "parameters")
        except (dm.DriverModulesError, dp.DriverParamsError) as exc:
            raise Refusal("%s. %s" % (exc, NOTHING))
        if not 1 <= p["daemon_timeout"] <= 600:
            raise Refusal("daemon_timeout must be 1 to 600 seconds, got %d. %s" % (p["daemon_timeout"], NOTHING))
        self.record_path = p["record_path"] or rooted(self.root, "/var/lib/gpuops/driver-modules.json")
        try:
            self.table = _node_steps.driver_daemons(p["mps_unit"])
        except ValueError as exc:
            raise Refusal("mps_unit: %s. %s" % (exc, NOTHING))
        self.actions = []
        self.stopped = []
        self.stopped_full = []
        self.planned_stop = []
        self.started = []
        self._tools = {}

    # ---- tools and reads ----------------------------------------------------------------------------------------
    def tool(self, name, required=True):
        if name not in self._tools:
            given = self.p[name]
            if given:
                self._tools[name] = list(given)
            else:
                try:
                    self._tools[name] = [require_tool(self.module.get_bin_path, self.p, name, name,
                                                      SYSTEM_TOOL_PACKAGES[name], opt_dirs=["/usr/sbin", "/sbin"])]
                except ToolNotFound as exc:
                    if required:
                        raise Refusal("%s. %s" % (exc, NOTHING))
                    self._tools[name] = None
        return self._tools[name]

    def check_tools(self):
        """Each tool given as a command line must start with a program that can run: found after a change, a bad one
        would fail the run halfway (a daemon stopped, a module removed)."""
        for name in ("modprobe", "rmmod", "modinfo", "systemctl"):
            argv = self.p[name]
            if not argv:
                continue
            if command_program(self.module.get_bin_path, argv) is None:
                raise Refusal("%s: %r is not an executable program; give the %s command as an argument list whose "
                              "first item is the program (e.g. [/usr/sbin/%s]). %s"
                              % (name, argv[0], name, name, NOTHING))

    def run(self, argv):
        try:
            return self.module.run_command(argv, handle_exceptions=False)
        except (IOError, OSError) as exc:  # replaced or removed since check_tools
            return 127, "", "cannot run %s: %s" % (argv[0], exc)

    def modules(self):
        try:
            return dm.parse_proc_modules(read_text(rooted(self.root, "/proc/modules")) or "")
        except dm.DriverModulesError as exc:
            raise Refusal("%s. %s" % (exc, NOTHING))

    def facts(self, modules=None):
        modules = self.modules() if modules is None else modules
        version = (read_text(rooted(self.root, "/sys/module/nvidia/version")) or "").strip() or None
        _nvrm_version, flavour = dm.parse_nvrm(read_text(rooted(self.root, "/proc/driver/nvidia/version")))
        if "nvidia" not in modules:
            version, flavour = None, None
        return {"version": version, "flavour": flavour, "modules": dm.driver_loaded(modules)}

    def running_daemons(self):
        systemctl = self.tool("systemctl", required=False)
        out = []
        for entry in self.table:
            found = None
            for unit in entry["units"]:
                if systemctl:
                    if ds.is_active(self.run, systemctl, unit):
                        found = {"name": entry["name"], "label": entry["label"], "unit": unit}
                        break
            if found is None and entry["pid_file"]:
                pid_path = rooted(self.root, entry["pid_file"])
                text = (read_text(pid_path) or "").strip()
                if text.isdigit() and pid_alive(int(text)):
                    pid = int(text)
                    argv = [a for a in (read_text("/proc/%d/cmdline" % pid) or "").split("\0") if a]
                    found = {"name": entry["name"], "label": entry["label"], "pid": pid, "pid_file": pid_path,
                             "argv": argv}
            if found:
                out.append(found)
        return out

    def holders(self):
        try:
            return find_holders(proc_root=rooted(self.root, "/proc"),
                                patterns=device_patterns(rooted(self.root, "/dev")))
        except OSError as exc:
            raise Refusal("cannot look for processes holding the NVIDIA device files: %s. %s" % (exc, NOTHING))

    def installed_version(self):
        """The version of the nvidia module file modprobe would load for the running kernel."""
        rc, out, err = self.run(self.tool("modinfo") + ["-F", "version", "nvidia"])
        if rc != 0 or not out.strip():
            return None, (err or out).strip() or "modinfo printed no version"
        return out.strip().splitlines()[0], None

    # ---- the record -------------------------------------------------------------------------------------------
    def record(self):
        """The record of an earlier unload, or None. Read as a file a user named (record_path): only a regular file
        of at most RECORD_BYTES (a FIFO would block the run, a device or a huge file fill its memory), JSON of this
        module's shape (a daemon without a name would end in a traceback halfway through a load)."""
        if not os.path.lexists(self.record_path):
            return None
        try:
            text = read_input_text(self.record_path, "record_path", limit=RECORD_BYTES)
            data = json.loads(text) if text.strip() else None
            check_shape(data, "record_path %s" % self.record_path)
        except InputFileError as exc:
            raise Refusal("%s. %s" % (exc, NOTHING))
        except (ValueError, RecursionError) as exc:
            raise Refusal(self.not_a_record(exc))
        if data is None:
            return None
        problem = dm.record_problem(data)
        if problem:
            raise Refusal(self.not_a_record(problem))
        return data

    def not_a_record(self, why):
        return ("record_path %s does not read as this module's record (%s); move it away after checking which "
                "daemons should run. %s" % (self.record_path, why, NOTHING))

    def write_record(self, data):
        write_atomic(self.module, self.record_path, json.dumps(data, indent=1, sort_keys=True) + "\n")

    def remove_record(self):
        if os.path.lexists(self.record_path):
            os.unlink(self.record_path)

    # ---- failing with what is loaded now ------------------------------------------------------------------------
    def fail(self, msg, **extra):
        now = self.facts()
        loaded = ("loaded now: %s (%s, %s)" % (", ".join(now["modules"]), now["version"], now["flavour"])
                  if now["modules"] else "no NVIDIA module is loaded now")
        raise Failure("%s. The node: %s" % (msg, loaded), actions=self.actions, daemons_stopped=self.stopped,
                      daemons_started=self.started, modules=now["modules"], version=now["version"],
                      flavour=now["flavour"], changed=bool(self.actions), **extra)

    # ---- daemons ------------------------------------------------------------------------------------------------
    def stop_daemon(self, daemon):
        if daemon.get("unit"):
            error = ds.unit_command(self.run, self.tool("systemctl"), "stop", daemon["unit"])
            if error:
                return error
        else:
            try:
                os.kill(daemon["pid"], signal.SIGTERM)
            except OSError as exc:
                if exc.errno != 3:  # ESRCH: already gone
                    return "cannot signal PID %d (%s): %s" % (daemon["pid"], daemon["label"], exc)
            gone = wait("daemon_exit", lambda: pid_alive(daemon["pid"]), self.p["daemon_timeout"])
            if not gone.done:
                return "%s (PID %d) still runs %d s after SIGTERM" % (
                    daemon["label"], daemon["pid"], self.p["daemon_timeout"])
        self.actions.append("stop %s" % where(daemon))
        self.stopped.append(public(daemon))
        self.stopped_full.append(daemon)
        return None

    def start_daemon(self, daemon):
        if daemon.get("unit"):
            error = ds.unit_command(self.run, self.tool("systemctl"), "start", daemon["unit"])
            if error:
                return error
        else:
            if not daemon.get("argv"):
                return "%s ran from a pid file but its command line was not readable; start it by hand" % (
                    daemon["label"])
            rc, out, err = self.run(daemon["argv"])
            if rc != 0:
                return "%s failed (rc %d): %s" % (" ".join(daemon["argv"]), rc, (err or out).strip())
        self.actions.append("start %s" % where(daemon))
        self.started.append(public(daemon))
        return None

    def start_all(self, daemons):
        """Start ``daemons`` in start order; [errors]."""
        errors = []
        for daemon in dm.start_order(daemons, self.table):
            error = self.start_daemon(daemon)
            if error:
                errors.append(error)
        return errors

    # ---- the flows ----------------------------------------------------------------------------------------------
    def refuse(self, msg, holders=()):
        raise Refusal("%s. %s" % (msg, NOTHING), holders=[describe_holder(h) for h in holders],
                      actions=self.actions)

    def plan_unload(self, modules, check_installed):
        """The checks an unload makes before it stops anything, and its actions (``self.actions``): the daemons to
        stop, in stop order (``self.planned_stop``), and ``running``, the daemons running now."""
        if check_installed:
            installed, error = self.installed_version()
            if installed != self.version:
                self.refuse("the nvidia module installed for the running kernel is %s, not %s: install the driver's "
                            "packages for this kernel first (modinfo -F version nvidia)"
                            % (installed or "not readable (%s)" % error, self.version))
        foreign = dm.foreign_users(modules)
        if foreign:
            self.refuse("the driver cannot be unloaded: %s" % "; ".join(
                "%s is used by %s" % (m, ", ".join(u)) for m, u in sorted(foreign.items())))
        running = self.running_daemons()
        found = self.holders()
        others = dm.not_ours(found["holders"], running)
        if others:
            self.refuse("the driver cannot be unloaded: " + dm.refusal(others, [], found["unreadable"]), others)
        order = dm.stop_order(running, self.table)
        self.planned_stop = order
        unload = dm.unload_plan(modules)
        self.actions += ["stop %s" % where(d) for d in order] + ["rmmod %s" % m for m in unload]
        # the programs this flow runs (rmmod, and modprobe to load or to put back), found before a daemon stops: not
        # found afterwards, the run would fail with the daemons stopped (check mode refuses the same way)
        self.tool("rmmod")
        self.tool("modprobe")
        return running

    def unload(self, before, running):
        """Stop the daemons planned by ``plan_unload`` and unload the driver; returns the record written."""
        order = self.planned_stop
        self.actions = []
        old = self.record() or {}
        kept = [d for d in old.get("daemons", []) if d["name"] not in set(r["name"] for r in running)]
        record = {"daemons": kept + [public(d, argv=True) for d in order],
                  "modules": sorted(set(old.get("modules", [])) | set(before["modules"])),
                  "version": old.get("version") or before["version"], "flavour": old.get("flavour") or before["flavour"]}
        self.write_record(record)
        for daemon in order:
            error = self.stop_daemon(daemon)
            if error:
                self.back_out(old, "stopping %s failed: %s" % (daemon["label"], error))
        modules = self.modules()
        found = self.holders()
        reasons = dm.in_use(modules)
        if found["holders"] or reasons:
            self.back_out(old, "the driver is still in use after its daemons were stopped: "
                          + dm.refusal(found["holders"], reasons, found["unreadable"]),
                          holders=[describe_holder(h) for h in found["holders"]])
        removed = []
        for mod in dm.unload_plan(modules):
            rc, out, err = self.run(self.tool("rmmod") + [mod])
            if rc != 0:
                self.back_out(old, "rmmod %s failed (rc %d): %s" % (mod, rc, (err or out).strip()), reload=removed)
            removed.append(mod)
            self.actions.append("rmmod %s" % mod)
        return record

    def back_out(self, old, msg, reload=(), holders=None):
        """Put back what this run took away (modules removed, daemons stopped), then fail with ``msg``."""
        notes = []
        for mod in [m for m in dm.LOAD_ORDER if m in reload]:
            rc, out, err = self.run(self.tool("modprobe") + [mod])
            if rc != 0:
                notes.append("%s could not be loaded back: %s" % (mod, (err or out).strip()))
            else:
                self.actions.append("modprobe %s" % mod)
        errors = self.start_all(self.stopped_full)
        notes += ["not started again: %s" % e for e in errors]
        if not notes:
            if old:
                self.write_record(old)
            else:
                self.remove_record()
            msg += ". Backed out: the daemons this run stopped were started again%s" % (
                " and the modules it removed loaded back" if reload else "")
        else:
            msg += ". Backing out was incomplete (%s is kept for the next run): %s" % (
                self.record_path, "; ".join(notes))
        extra = {"holders": holders} if holders is not None else {}
        self.fail(msg, **extra)

    def load(self, wanted, record):
        modules = self.modules()
        for mod in dm.load_plan(modules, wanted):
            rc, out, err = self.run(self.tool("modprobe") + [mod])
            if rc != 0:
                pending = ", ".join(d["label"] for d in (record or {}).get("daemons", []))
                self.fail("modprobe %s failed (rc %d): %s%s" % (
                    mod, rc, (err or out).strip(),
                    (". Not started (recorded in %s for the next run): %s" % (self.record_path, pending))
                    if pending else ""))
            self.actions.append("modprobe %s" % mod)
        now = self.facts()
        if self.version and now["version"] != self.version:
            self.fail("after the load the nvidia module is %s, not %s" % (now["version"], self.version))
        if self.p["flavour"] and now["flavour"] != self.p["flavour"]:
            self.fail("after the load the nvidia module is the %s flavour, not %s" % (
                now["flavour"], self.p["flavour"]))
        self.check_parameters()
        running = set(d["name"] for d in self.running_daemons())
        errors = self.start_all([d for d in (record or {}).get("daemons", []) if d["name"] not in running])
        if errors:
            self.fail("the driver is loaded but daemons did not start: %s (still recorded in %s)"
                      % ("; ".join(errors), self.record_path))
        if record is not None:
            self.remove_record()

    def param_differences(self, modules=None):
        """The declared parameters the loaded driver reads otherwise ([] where none is declared or none is loaded)."""
        if not self.declared_params or "nvidia" not in (self.modules() if modules is None else modules):
            return []
        text = read_text(rooted(self.root, dp.PROC_PARAMS))
        if text is None:
            return []
        return dp.compare(self.declared_params, dp.parse_proc_params(text))[0]

    def check_parameters(self):
        """After a load: every declared parameter reads as declared, or the run fails naming it."""
        diffs = self.param_differences()
        if diffs:
            self.fail("after the load the nvidia module does not read the declared parameters (%s; check the "
                      "options lines of modprobe.d for nvidia: another file may set them too)"
                      % dp.differences_text(diffs))

    def wrong(self, before):
        """Whether the loaded driver is not the declared one (version, or flavour where declared)."""
        return bool(before["modules"]) and bool(
            (self.version and before["version"] != self.version)
            or (self.p["flavour"] and before["flavour"] != self.p["flavour"]))

    def preflight(self, modules, before):
        """The checks a reload makes before it stops anything, made now (before the packages change): what would
        refuse it. Changes nothing."""
        result = {"changed": False, "previous": before,
                  "reload": self.wrong(before) or bool(self.param_differences(modules)), "blockers": [], "holders": [],
                  "deferred": [], "actions": [], "msg": ""}
        if not result["reload"]:
            return result
        blockers = ["%s is used by %s" % (m, ", ".join(u)) for m, u in sorted(dm.foreign_users(modules).items())]
        running = self.running_daemons()
        found = self.holders()
        others = dm.not_ours(found["holders"], running)
        deferred = [h for h in others if h.get("pod_uid")] if self.p["preflight_pods"] == "defer" else []
        holding = [h for h in others if h not in deferred]
        if holding or found["unreadable"]:
            blockers.append(dm.refusal(holding, [], found["unreadable"]))
        blockers += ["%s runs from its pid file %s and its command line cannot be read: it could be stopped, not "
                     "started again" % (d["label"], d["pid_file"]) for d in running if not d.get("unit")
                     and not d.get("argv")]
        result.update(blockers=blockers, holders=[describe_holder(h) for h in holding],
                      deferred=[describe_holder(h) for h in deferred],
                      msg="the driver cannot be reloaded at %s now: %s" % (self.version, "; ".join(blockers))
                      if blockers else "")
        return result

    def finish(self, result, before, after):
        result.update(after)
        result.update({"changed": bool(self.actions), "actions": self.actions, "daemons_stopped": self.stopped,
                       "daemons_started": self.started})
        if self.module._diff:
            result["diff"] = {"before": before, "after": after}
        return result


def where(daemon):
    return daemon["unit"] if daemon.get("unit") else "%s (PID %s)" % (daemon["label"], daemon.get("pid"))


def public(daemon, argv=False):
    keys = ("name", "label", "unit", "pid", "pid_file") + (("argv",) if argv else ())
    return dict((k, daemon[k]) for k in keys if daemon.get(k) is not None)


class DriverModules(ModuleRun):
    """(node lock) read: the parameters' checks, the tools, the loaded modules and their facts, the record of an
    earlier unload. plan: preflight's report; or the flow of ``state`` (unload, reload, load) with its checks before
    anything is stopped and its actions (what check mode reports). apply: stop, unload, load, start (``Run``). after:
    the result, with the facts re-read (in check mode, as planned), on every run.

    ``validate`` is the base's (no error): every parameter check is worded "... Nothing was stopped or unloaded." and
    runs, as before, under the node lock (``Run``'s constructor, in ``read``). The failures keep ``Run``'s wording
    ("The node: ...", the holders named), raised to the base: ``Refusal`` before anything was stopped or unloaded,
    ``Failure`` after."""

    argument_spec = dict(
        state=dict(type="str", choices=["unloaded", "loaded", "reloaded"], required=True),
        version=dict(type="str"),
        flavour=dict(type="str", choices=["open", "proprietary"]),
        also_load=dict(type="list", elements="str", choices=list(dm.OPTIONAL_MODULES), default=[]),
        root=dict(type="path", default="/"),
        record_path=dict(type="path"),
        modprobe=dict(type="list", elements="str"),
        rmmod=dict(type="list", elements="str"),
        modinfo=dict(type="list", elements="str"),
        systemctl=dict(type="list", elements="str"),
        mps_unit=dict(type="str", default=_gpu_holders.DEFAULT_MPS_UNIT),
        daemon_timeout=dict(type="int", default=WAITS["daemon_exit"].timeout),
        preflight=dict(type="bool", default=False),
        preflight_pods=dict(type="str", choices=["block", "defer"], default="block"),
        parameters=dict(type="dict", default={}),
        lock_timeout=dict(type="int"),
    )
    module_options = dict(required_if=[("state", "reloaded", ("version",))])

    def lock(self):
        return module_lock(self.module, "driver_modules")

    def read(self):
        self.node = node = Run(self.module)
        node.check_tools()
        modules = node.modules()
        current = {"modules": modules, "before": node.facts(modules), "record": None}
        if self.params["preflight"]:
            if self.params["state"] != "reloaded":
                raise Refusal("preflight checks a reload: give state=reloaded (got %s). %s"
                              % (self.params["state"], NOTHING))
        else:
            current["record"] = node.record()
        return current

    def plan(self, current):
        """The flow's checks and actions (``self.node.actions``) and the facts after it (``self.planned``, what
        check mode reports); the changes for ``apply`` (falsy: nothing to stop, unload, load or start)."""
        node, p, state = self.node, self.params, self.params["state"]
        modules, before, record = current["modules"], current["before"], current["record"]
        self.planned, self.drop_record = None, False
        if p["preflight"]:
            self.result = node.preflight(modules, before)
            return None
        wanted = dm.wanted_modules(set(before["modules"]) | set((record or {}).get("modules", [])), node.also_load)
        wrong = node.wrong(before)
        self.pending = node.param_differences(modules) if state == "reloaded" else []
        if state == "loaded" and wrong:
            raise Refusal("the loaded driver is %s (%s), not %s%s: state=loaded does not replace a loaded driver; use "
                          "state=reloaded. %s"
                          % (before["version"], before["flavour"], node.version or "the declared one",
                             " (%s)" % p["flavour"] if p["flavour"] else "", NOTHING), previous=before)
        if state == "unloaded":
            self.planned = {"version": None, "flavour": None, "modules": []}
            if not before["modules"]:
                return None
            return {"flow": "unload", "running": node.plan_unload(modules, check_installed=False)}
        if wrong or self.pending:  # reloaded, another driver loaded (or the declared one with other parameters)
            running = node.plan_unload(modules, check_installed=True)
            node.actions += ["modprobe %s" % m for m in wanted]
            node.actions += ["start %s" % where(d) for d in dm.start_order(node.planned_stop, node.table)]
            self.planned = {"version": node.version, "flavour": p["flavour"] or before["flavour"], "modules": wanted}
            return {"flow": "reload", "running": running, "wanted": wanted}
        # loaded, or reloaded with the declared driver loaded: bring back what is missing
        missing = dm.load_plan(modules, wanted)
        running = set(d["name"] for d in node.running_daemons())
        to_start = [d for d in (record or {}).get("daemons", []) if d["name"] not in running]
        if missing and node.version:
            installed, error = node.installed_version()
            if installed != node.version:
                raise Refusal("the nvidia module installed for the running kernel is %s, not %s: install the "
                              "driver's packages for this kernel first. Nothing was loaded."
                              % (installed or "not readable (%s)" % error, node.version), previous=before)
        node.actions += ["modprobe %s" % m for m in missing]
        node.actions += ["start %s" % where(d) for d in dm.start_order(to_start, node.table)]
        self.planned = {"version": node.version or before["version"], "flavour": p["flavour"] or before["flavour"],
                        "modules": [m for m in dm.LOAD_ORDER if m in set(missing) | set(before["modules"])]}
        if missing or to_start:
            return {"flow": "load", "wanted": wanted}
        self.drop_record = record is not None  # everything it names is back: nothing to do, nothing to keep
        return None

    def apply(self, current, changes):
        """The actions made (``self.node.actions`` says which were); a failure says whether it changed anything
        (``Run.fail``: what was done; a Refusal: nothing), not the plan's ``changed`` that the base set."""
        node = self.node
        node.actions = []
        if changes["flow"] == "unload":
            node.unload(current["before"], changes["running"])
        elif changes["flow"] == "reload":
            written = node.unload(current["before"], changes["running"])
            node.load(changes["wanted"], written)
        else:
            node.load(changes["wanted"], current["record"])

    def after(self, current, changes):
        """The result on every run: the facts after it (re-read; in check mode, as planned), what was done."""
        if self.params["preflight"]:
            return
        node, before = self.node, current["before"]
        if self.module.check_mode:
            after = self.planned
        else:
            if self.drop_record:
                node.remove_record()
            after = node.facts()
        self.result = node.finish({"previous": before, "parameters_pending": getattr(self, "pending", [])},
                                  before, after)


def main():
    run_module(DriverModules)


if __name__ == "__main__":
    main()
