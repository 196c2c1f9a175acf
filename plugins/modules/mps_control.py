#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mps_control
short_description: Run the NVIDIA CUDA MPS control daemon with declared default limits
version_added: 0.1.0
author:
  - gpuops.nvidia developers (@gpuops)
description:
  - Runs C(nvidia-cuda-mps-control) as a systemd service (or, with O(service_manager=none), as a plain
    background daemon) with its own pipe and log directories, and sets the daemon's default active-thread
    percentage and default pinned device-memory limit per GPU index.
  - Idempotent. It asks the running daemon what is in force (C(get_default_active_thread_percentage),
    C(get_default_device_pinned_mem_limit <index>), C(get_server_list), C(get_client_list <pid>)) and only
    sends the commands that change something. Every command goes to the daemon on stdin, never through a shell.
  - New defaults only apply to MPS servers started after the change; a server already running keeps the
    limits it started with (NVIDIA MPS docs). The module says so in a warning when servers are running.
  - With systemd the defaults are also written into the unit (C(ExecStartPost)), so a restart or a reboot
    brings them back before clients connect. The daemon itself forgets them when it stops.
  - Never stops or restarts a daemon with connected clients unless O(force=true), because that would break running
    workloads. When the unit would need a restart (other directories or executable) while clients are
    connected, nothing changes and RV(restart_pending) is true; a later run restarts it once the clients are
    gone. A restart stops the daemon with the unit that started it, then starts it with the new one.
  - MPS runs in the C(Default) compute mode; this module does not change compute mode, MIG mode or
    persistence mode.
options:
  state:
    description: Whether the daemon runs.
    type: str
    choices: [started, stopped]
    default: started
  service_manager:
    description:
      - C(systemd) writes C(<unit_directory>/<name>.service), enables it (see O(enabled)) and starts it.
      - C(none) starts C(nvidia-cuda-mps-control -d) directly with C(CUDA_MPS_PIPE_DIRECTORY) and
        C(CUDA_MPS_LOG_DIRECTORY) set, and stops it with C(quit). Nothing brings it back after a reboot.
    type: str
    choices: [systemd, none]
    default: systemd
  name:
    description: systemd unit name, without C(.service).
    type: str
    default: gpuops-mps-control
  pipe_directory:
    description:
      - The daemon's C(CUDA_MPS_PIPE_DIRECTORY). Clients must use the same value (C(/tmp/nvidia-mps) is the
        one CUDA uses when the variable is unset).
    type: path
    default: /tmp/nvidia-mps
  log_directory:
    description: The daemon's C(CUDA_MPS_LOG_DIRECTORY).
    type: path
    default: /var/log/nvidia-mps
  default_active_thread_percentage:
    description:
      - Default active-thread percentage (whole number 1..100) for MPS servers the daemon starts.
      - Left as it is when not given.
    type: raw
  default_pinned_device_mem_limit:
    description:
      - >-
        Default pinned device-memory limit per GPU index, as a mapping (index to limit, for example C({0: 8G, 1: 4096M})) or as the string
        C(0=8G,1=4096M). Units C(M), C(MB), C(G), C(GB); no spaces or quotes. GPU UUIDs are refused because the
        daemon's per-device defaults are set by index.
      - Indices are the ordinals a client sees; a client with C(CUDA_VISIBLE_DEVICES) set sees its first
        GPU as index 0 (measured on H200), so on nodes with GPUs of different sizes set the same limit on
        every index.
      - Indices not given are left as they are.
    type: raw
  enabled:
    description: With systemd, whether the unit starts at boot.
    type: bool
    default: true
  executable:
    description: Path of C(nvidia-cuda-mps-control); found on C(PATH) when not given.
    type: path
  unit_directory:
    description: Where the systemd unit is written.
    type: path
    default: /etc/systemd/system
  backup:
    description: Keep a timestamped copy of the unit file before replacing it.
    type: bool
    default: false
  force:
    description: Stop or restart the daemon even when clients are connected to its servers.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for the daemon to answer after a start, or to go away after a stop (1 to 86400).
    type: int
    default: 30
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
  - Per-workload limits (C(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), C(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) in a
    client's environment) can only lower these defaults. Validate and render them with the
    P(gpuops.nvidia.mps_limits#filter) filter.
seealso:
  - name: NVIDIA Multi-Process Service
    description: MPS documentation.
    link: https://docs.nvidia.com/deploy/mps/index.html
"""

EXAMPLES = r"""
- name: MPS for 4 workloads per H200, as a systemd service
  gpuops.nvidia.mps_control:
    default_active_thread_percentage: 25
    default_pinned_device_mem_limit: {0: 35942M, 1: 35942M}

- name: Same, computed from GPU facts
  gpuops.nvidia.mps_control: "{{ gpu_facts | gpuops.nvidia.mps_daemon_defaults(4) }}"

- name: A private daemon without systemd (e.g. in a container)
  gpuops.nvidia.mps_control:
    service_manager: none
    pipe_directory: /tmp/my-mps/pipe
    log_directory: /tmp/my-mps/log
    default_active_thread_percentage: 25
    default_pinned_device_mem_limit: "0=8G"

- name: Stop it
  gpuops.nvidia.mps_control:
    service_manager: none
    pipe_directory: /tmp/my-mps/pipe
    log_directory: /tmp/my-mps/log
    state: stopped
"""

RETURN = r"""
running:
  description: Whether the daemon answers on O(pipe_directory) after the run (in check mode, would answer).
  returned: always
  type: bool
enabled:
  description: Whether the systemd unit is enabled (systemd only).
  returned: when service_manager is systemd
  type: bool
limits:
  description: Defaults in force as the daemon reports them (in check mode, as they would be).
  returned: always
  type: dict
  contains:
    active_thread_percentage:
      description: Default active-thread percentage, or null when the daemon is not running.
      type: float
    pinned_device_mem_limit:
      description: Index -> limit (C(8G), C(4606M)), null for an index with no limit.
      type: dict
  sample: {"active_thread_percentage": 25.0, "pinned_device_mem_limit": {"0": "8G"}}
servers:
  description: MPS servers the daemon runs, each with its client PIDs.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "clients": [4300, 4301]}]
commands:
  description: Control commands sent to the daemon (in check mode, that would be sent).
  returned: always
  type: list
  elements: str
actions:
  description: What was done (or would be), in order.
  returned: always
  type: list
  elements: str
restart_pending:
  description: The unit needs a restart (other directories or executable) that was not done (nothing changed)
    because clients are connected.
  returned: always
  type: bool
unit_path:
  description: Path of the unit file.
  returned: when service_manager is systemd
  type: str
"""

import os


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_lock import module_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    NOTHING_CHANGED, Failure, ModuleRun, Refusal, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import (
    SYSTEM_TOOL_PACKAGES, ToolNotFound, require_tool)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS, wait

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mps import (
    CONTROL_PACKAGE, MpsError, check_path, check_service_name, default_commands, mib_text, normalize_defaults,
    parse_mem_answer, parse_percentage_answer, parse_pid_list, plan_defaults, render_unit, restart_relevant,
    unit_setting)


class Daemon(object):
    """Talks to one control daemon through its pipe directory; every command on stdin."""

    def __init__(self, module, executable, pipe_directory, log_directory):
        self.module = module
        self.executable = executable
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_directory, "CUDA_MPS_LOG_DIRECTORY": log_directory}
        self.sent = []

    def ask(self, command):
        return self.module.run_command([self.executable], data=command, environ_update=self.env)

    def must(self, command):
        rc, out, err = self.ask(command)
        if rc != 0:
            # changed=False also after a change (as before issue 48), not the base's result so far
            raise Failure("nvidia-cuda-mps-control refused %r (rc %d): %s" % (command, rc, (err or out).strip()),
                          commands=self.sent, changed=False)
        return out

    def send(self, command):
        self.sent.append(command)
        return self.must(command)

    def running(self):
        """A daemon answers on the pipe: exit status 0 and a PID list (not an error text printed with 0)."""
        rc, out, err = self.ask("get_server_list")
        if rc != 0:
            return False
        try:
            parse_pid_list(out)
        except MpsError:
            return False
        return True

    def wait(self, up, timeout):
        return wait("mps_up" if up else "mps_down", self.running, timeout).done

    def read(self, indices):
        """What is in force: percentage, {index: MiB|None}, raw answers that could not be read, servers."""
        pct = parse_percentage_answer(self.must("get_default_active_thread_percentage"))
        limits, unreadable = {}, {}
        for index in sorted(indices):
            rc, out, err = self.ask("get_default_device_pinned_mem_limit %d" % index)
            try:
                if rc != 0:
                    raise MpsError(err or out)
                limits[index] = parse_mem_answer(out)
            except MpsError:
                # What a daemon prints for an index with no limit is not documented: treated as no limit,
                # reported raw, and checked again after a set.
                limits[index] = None
                unreadable[index] = (out or err).strip()
        servers = []
        for pid in parse_pid_list(self.must("get_server_list")):
            # Unknown clients are never taken for none: stop/restart decisions depend on this list.
            rc, out, err = self.ask("get_client_list %d" % pid)
            if rc != 0:
                raise MpsError("cannot list the clients of MPS server %d (rc %d): %s"
                               % (pid, rc, (err or out).strip()))
            clients = parse_pid_list(out, "get_client_list %d" % pid)
            servers.append({"pid": pid, "clients": clients})
        return pct, limits, unreadable, servers


def gpu_indices_on_host():
    """Indices 0..n-1 for the GPUs the driver lists (/proc/driver/nvidia/gpus), or none when unreadable."""
    try:
        return set(range(len(os.listdir("/proc/driver/nvidia/gpus"))))
    except OSError:
        return set()


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except IOError:
        return None


def write_unit(module, path, text, backup):
    backup_file = None
    if backup and os.path.exists(path):
        backup_file = module.backup_local(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    tmp = os.path.join(directory, ".%s.gpuops-tmp" % os.path.basename(path))
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)
    return backup_file


def limits_report(pct, limits):
    return {"active_thread_percentage": pct,
            "pinned_device_mem_limit": dict((str(i), mib_text(v)) for i, v in sorted(limits.items()))}


def busy_clients(servers):
    return sorted(c for s in servers for c in s["clients"])


def tool(module, name, option=None, package=None):
    """A program the unit runs: the path ``option`` gives, else the one in PATH (only there: a unit keeps the paths it
    was written with); not found: ToolNotFound, naming the package, which the module's base turns into the failure."""
    return require_tool(module.get_bin_path, module.params, option, name, package or SYSTEM_TOOL_PACKAGES[name],
                        opt_dirs=())


class MpsControl(ModuleRun):
    """(node lock) read: the paths and defaults as declared, the unit and the daemon in force; plan: the actions and
    the daemon's commands (_mps); apply: write the unit, start/stop/restart, set the defaults, re-read and verify.
    Failures are raised to the base: ``Refusal`` before anything changed, ``Failure`` after, the latter with
    changed=False as before issue 48 (they had no changed key), not the base's result so far."""

    argument_spec = dict(
        lock_timeout=dict(type="int"),
        state=dict(type="str", choices=["started", "stopped"], default="started"),
        service_manager=dict(type="str", choices=["systemd", "none"], default="systemd"),
        name=dict(type="str", default="gpuops-mps-control"),
        pipe_directory=dict(type="path", default="/tmp/nvidia-mps"),
        log_directory=dict(type="path", default="/var/log/nvidia-mps"),
        default_active_thread_percentage=dict(type="raw"),
        default_pinned_device_mem_limit=dict(type="raw"),
        enabled=dict(type="bool", default=True),
        executable=dict(type="path"),
        unit_directory=dict(type="path", default="/etc/systemd/system"),
        backup=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        timeout=dict(type="int", default=WAITS["mps_up"].timeout),
    )
    errors = (ToolNotFound,)

    def lock(self):
        return module_lock(self.module, "mps_control")

    def declared(self):
        """The paths, the defaults and the executable as declared (checked, nothing read yet); returns the unit's
        name."""
        p = self.params
        try:
            pipe_dir = check_path("pipe_directory", p["pipe_directory"])
            log_dir = check_path("log_directory", p["log_directory"])
            for option, directory in (("pipe_directory", pipe_dir), ("log_directory", log_dir)):
                if os.path.lexists(directory) and not os.path.isdir(directory):
                    raise MpsError("%s %s exists and is not a directory; give a directory (created when missing)"
                                   % (option, directory))
            name = check_service_name(p["name"])
            pct, limits = normalize_defaults(p["default_active_thread_percentage"],
                                             p["default_pinned_device_mem_limit"])
            error = seconds_error("timeout", p["timeout"], minimum=1)
            if error:
                raise MpsError(error)
            executable = tool(self.module, "nvidia-cuda-mps-control", "executable", CONTROL_PACKAGE)
            check_path("executable", executable)
        except MpsError as e:
            raise Refusal(str(e))
        self.pipe_dir, self.log_dir, self.executable = pipe_dir, log_dir, executable
        self.pct, self.limits = pct, limits
        return name

    def read(self):
        """The unit (with systemd) and the daemon in force: (percentage, {index: MiB|None}, raw answers, servers)."""
        module, p = self.module, self.params
        name = self.declared()
        pipe_dir, log_dir, executable = self.pipe_dir, self.log_dir, self.executable
        self.systemd = p["service_manager"] == "systemd"
        self.daemon = Daemon(module, executable, pipe_dir, log_dir)  # the daemon as declared
        self.live = self.daemon  # the daemon in force now (with systemd: as the active unit started it)
        self.warnings = []
        self.indices = set(self.limits) | gpu_indices_on_host()
        self.unit_path = self.old_unit = self.new_unit = self.systemctl = self.unit = None
        self.active = self.enabled = False
        if self.systemd:
            self.systemctl = tool(module, "systemctl")
            self.unit = unit = name + ".service"
            self.unit_path = os.path.join(p["unit_directory"], unit)
            self.old_unit = old_unit = read_text(self.unit_path)
            self.active = module.run_command([self.systemctl, "is-active", unit])[1].strip() == "active"
            self.enabled = module.run_command([self.systemctl, "is-enabled", unit])[1].strip() == "enabled"
            self.new_unit = render_unit(executable, pipe_dir, log_dir, self.pct, self.limits,
                                        mkdir=tool(module, "mkdir"), sh=tool(module, "sh"))
            old_pipe = unit_setting(old_unit, "CUDA_MPS_PIPE_DIRECTORY")
            if self.active and old_pipe and old_pipe != pipe_dir:
                self.live = Daemon(module, unit_setting(old_unit, "ExecStart") or executable, old_pipe,
                                   unit_setting(old_unit, "CUDA_MPS_LOG_DIRECTORY") or log_dir)
            if not self.active and self.daemon.running():
                raise Refusal("an MPS control daemon that %s did not start already answers on %s; stop it (echo quit "
                              "| nvidia-cuda-mps-control with CUDA_MPS_PIPE_DIRECTORY=%s) or choose another "
                              "pipe_directory" % (unit, pipe_dir, pipe_dir))
            self.running = self.active and self.live.running()
        else:
            self.running = self.daemon.running()
        current = (None, dict((i, None) for i in self.indices), {}, [])
        if self.running:
            try:
                current = self.live.read(self.indices)
            except MpsError as e:
                raise Refusal(str(e))
        return current

    def plan(self, current):
        """The actions (unit, service, daemon) and the daemon's commands; the state after them (``self.planned``)."""
        p, systemd, unit, running = self.params, self.systemd, self.unit, self.running
        pct, limits, indices = self.pct, self.limits, self.indices
        servers = current[3]
        clients = busy_clients(servers)
        before = {"running": running}
        before.update(limits_report(current[0], current[1]))
        if systemd:
            before["enabled"] = self.enabled
        actions = []
        commands = []
        after = dict(before)
        write = restart_pending = False
        if p["state"] == "stopped":
            if running or (systemd and self.active):
                if clients and not p["force"]:
                    raise Refusal("not stopping the MPS control daemon on %s: %d client process(es) are connected "
                                  "(PIDs %s); stopping it would break them. Stop them first, or set force=true"
                                  % (self.live.env["CUDA_MPS_PIPE_DIRECTORY"], len(clients),
                                     ", ".join(map(str, clients))), servers=servers)
                actions.append("stop %s" % (unit if systemd else "daemon (quit)"))
            if systemd and self.enabled:
                actions.append("disable %s" % unit)
            after = {"running": False, "active_thread_percentage": None, "pinned_device_mem_limit": {}}
            if systemd:
                after["enabled"] = False
        else:
            # A restart is needed when the active unit runs with other paths than declared, or does not answer.
            restart = systemd and self.active and (
                not running or restart_relevant(self.old_unit) != restart_relevant(self.new_unit))
            if restart and clients and not p["force"]:
                # Change nothing: the unit keeps describing the daemon in force, and the next run restarts it.
                restart_pending = True
                self.warnings.append("%s needs a restart (its directories or executable change) but %d client "
                                     "process(es) are connected (PIDs %s); %s. Run again when they are done, or with "
                                     "force=true" % (unit, len(clients), ", ".join(map(str, clients)),
                                                     NOTHING_CHANGED))
            else:
                write = systemd and self.old_unit != self.new_unit
                if write:
                    actions += ["write %s" % self.unit_path, "systemctl daemon-reload"]
                if systemd and p["enabled"] != self.enabled:
                    actions.append("%s %s" % ("enable" if p["enabled"] else "disable", unit))
                if restart:
                    actions.append("restart %s" % unit)
                    commands = default_commands(pct, limits)  # the unit's ExecStartPost sets them
                elif not running:
                    actions.append("start %s" % (unit if systemd else "daemon (-d)"))
                    commands = default_commands(pct, limits)
                else:
                    commands = plan_defaults(pct, limits, current[0], current[1])
                    if commands and servers:
                        self.warnings.append("%d MPS server(s) already run (PIDs %s): they keep the limits they "
                                             "started with; new defaults apply to servers started after their "
                                             "clients exit" % (len(servers), ", ".join(str(s["pid"]) for s in servers)))
                fresh = restart or not running
                after["running"] = True
                want_pct = pct if pct is not None else (100.0 if fresh else current[0])
                want_limits = dict((i, None) for i in indices) if fresh else dict(current[1])
                want_limits.update(dict((i, int(v[:-1]) * (1024 if v.endswith("G") else 1))
                                        for i, v in limits.items()))
                after.update(limits_report(float(want_pct) if want_pct is not None else None, want_limits))
                if systemd:
                    after["enabled"] = p["enabled"]
        self.write, self.planned = write, after
        self.result.update(actions=actions, commands=commands, restart_pending=restart_pending)
        if systemd:
            self.result["unit_path"] = self.unit_path

        diff = []
        if write:
            diff.append({"before_header": self.unit_path, "after_header": self.unit_path,
                         "before": self.old_unit or "", "after": self.new_unit})
        if before != after:
            header = "MPS daemon on %s" % self.pipe_dir
            diff.append({"before_header": header, "after_header": header, "before": before, "after": after})
        if self.module._diff:
            self.result["diff"] = diff
        return dict(actions=actions, commands=commands) if actions or commands else None

    def systemctl_do(self, *args):
        rc, out, err = self.module.run_command([self.systemctl] + list(args))
        if rc != 0:
            raise Failure("systemctl %s failed (rc %d): %s" % (" ".join(args), rc, (err or out).strip()),
                          actions=self.result["actions"], changed=False)

    def stopped(self):
        """Wait for the daemon in force to stop answering."""
        if not self.live.wait(False, self.params["timeout"]):
            raise Failure("the MPS control daemon on %s still answers %d s after the stop"
                          % (self.live.env["CUDA_MPS_PIPE_DIRECTORY"], self.params["timeout"]),
                          actions=self.result["actions"], changed=False)

    def apply(self, current, changes):
        module, p, result = self.module, self.params, self.result
        systemd, unit, daemon, actions = self.systemd, self.unit, self.daemon, changes["actions"]
        pipe_dir, log_dir, pct, limits = self.pipe_dir, self.log_dir, self.pct, self.limits
        if p["state"] == "stopped":
            if self.running or (systemd and self.active):
                if systemd:
                    self.systemctl_do("stop", unit)
                else:
                    daemon.send("quit")
                self.stopped()
            if systemd and self.enabled:
                self.systemctl_do("disable", unit)
        else:
            if systemd:
                restart = "restart %s" % unit in actions
                if restart:
                    # Stop with the unit that started the daemon (its ExecStop knows the old pipe), then start anew.
                    self.systemctl_do("stop", unit)
                    self.stopped()
                if self.write:
                    result["backup_file"] = write_unit(module, self.unit_path, self.new_unit, p["backup"])
                    self.systemctl_do("daemon-reload")
                if p["enabled"] != self.enabled:
                    self.systemctl_do("enable" if p["enabled"] else "disable", unit)
                if restart or not self.running:
                    self.systemctl_do("start", unit)
            elif not self.running:
                for d in (pipe_dir, log_dir):
                    if not os.path.isdir(d):
                        os.makedirs(d, 0o755)
                # cwd=/: the module runs in a temporary directory that is deleted when it ends
                rc, out, err = module.run_command([self.executable, "-d"], environ_update=daemon.env, cwd="/")
                if rc != 0:
                    raise Failure("nvidia-cuda-mps-control -d failed (rc %d): %s" % (rc, (err or out).strip()),
                                  changed=False)
            if not daemon.wait(True, p["timeout"]):
                raise Failure("the MPS control daemon on %s does not answer %d s after the start; see %s"
                              % (pipe_dir, p["timeout"], log_dir), actions=actions, changed=False)
            # On a systemd start the unit's ExecStartPost has set the defaults; only what differs is sent.
            try:
                now = daemon.read(self.indices)
            except MpsError as e:
                raise Failure(str(e), changed=False)
            for cmd in plan_defaults(pct, limits, now[0], now[1]):
                daemon.send(cmd)

        # ---- re-read ----------------------------------------------------------------------------------------------
        result["running"] = daemon.running()
        result["commands"] = changes["commands"] if not daemon.sent else daemon.sent
        if result["running"]:
            try:
                pct_now, limits_now, unreadable, servers_now = daemon.read(self.indices)
            except MpsError as e:
                raise Failure(str(e), changed=False)
            leftover = plan_defaults(pct, limits, pct_now, limits_now)
            if leftover:
                raise Failure("the daemon does not report the declared defaults after setting them; still differing: "
                              "%s; raw answers: %s" % (", ".join(leftover), unreadable), commands=daemon.sent,
                              changed=False)
            result["limits"] = limits_report(pct_now, limits_now)
            result["servers"] = servers_now
        else:
            result["limits"] = {"active_thread_percentage": None, "pinned_device_mem_limit": {}}
            result["servers"] = []
        if p["state"] == "started" and not result["running"]:
            raise Failure("the MPS control daemon on %s is not running after the start" % pipe_dir, changed=False)
        if systemd:
            result["enabled"] = module.run_command([self.systemctl, "is-enabled", unit])[1].strip() == "enabled"

    def after(self, current, changes):
        """In check mode and when nothing changes: the state planned; warnings."""
        if self.module.check_mode or not changes:
            after = self.planned
            self.result.update({"running": after["running"], "servers": current[3],
                                "limits": dict((k, after.get(k)) for k in ("active_thread_percentage",
                                                                           "pinned_device_mem_limit"))})
            if self.systemd:
                self.result["enabled"] = after.get("enabled", self.enabled)
        for w in self.warnings:
            self.module.warn(w)


def main():
    run_module(MpsControl)


if __name__ == "__main__":
    main()
