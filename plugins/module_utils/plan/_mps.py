# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MPS control daemon: validated declarations, systemd unit text, control commands, parsing its answers.

Pure: no I/O. The module (plugins/modules/mps_control.py) runs what this builds.

Facts this relies on (NVIDIA MPS docs, "Tools and Interface Reference"; device plugin
cmd/mps-control-daemon; readings on a real H200 in docs/readings/h200-mps-caps.txt and docs/sharing-mps.md):
- ``nvidia-cuda-mps-control -d`` starts the control daemon in the background; other invocations read commands
  on stdin, one per line, and print the answer on stdout (exit status non-zero when no daemon answers).
- ``get_default_active_thread_percentage`` prints e.g. ``25.0``; ``get_default_device_pinned_mem_limit <dev>``
  prints e.g. ``3G`` or ``4606M``; ``get_server_list`` prints one server PID per line; ``get_client_list <PID>``
  one client PID per line; ``quit`` stops the daemon.
- ``set_default_*`` only affects servers spawned afterwards; a running server keeps what it started with.
- ``set_default_device_pinned_mem_limit <dev> <value>`` takes an integer plus G or M; the device plugin uses
  device indices because limits set by UUID were not applied.
- The daemon's defaults are lost when it stops: they live in the unit (ExecStartPost) so a restart or reboot
  gets them back before any client connects.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._sharing import (
    MIB, LimitError, daemon_mem_amount, parse_mem_limit, parse_thread_percentage)

_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+-]*$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,100}$")

UNIT_MARKER = "# Managed by gpuops.nvidia.mps_control: edits here are overwritten."
WAIT_TRIES = 50  # ExecStartPost waits up to 50 x 0.2 s for the daemon to answer
# The driver's packages that hold nvidia-cuda-mps-control (docs/driver.md: NVIDIA's repositories, the distribution)
CONTROL_PACKAGE = "nvidia-compute-utils-<branch> (apt) or nvidia-driver-cuda (dnf)"


class MpsError(ValueError):
    """Bad declaration or an answer from nvidia-cuda-mps-control that cannot be read."""


def check_path(what, path):
    if not isinstance(path, str) or not _SAFE_PATH.match(path) or "//" in path or "/../" in path + "/":
        raise MpsError("%s must be an absolute path of letters, digits and _ . / + - (it goes into a systemd "
                       "unit and the daemon's environment), got %r" % (what, path[:120] if isinstance(path, str) else path))
    if len(path) > 4095 or any(len(part) > 255 for part in path.split("/")):
        raise MpsError("%s is longer than a path may be (at most 255 characters a name, 4095 in all), got %r"
                       % (what, path[:120] + "..."))
    return path.rstrip("/") or "/"


def check_service_name(name):
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or name.endswith(".service"):
        raise MpsError("name must be a systemd unit name without '.service' (letters, digits, _ . @ -), got %r"
                       % (name,))
    return name


def normalize_defaults(active_thread_percentage=None, pinned_device_mem_limit=None):
    """Validate the daemon defaults. Returns (pct or None, {index: 'NG'|'NM'} or {})."""
    pct = None
    if active_thread_percentage is not None:
        try:
            pct = parse_thread_percentage(active_thread_percentage)
        except LimitError as e:
            raise MpsError("default_active_thread_percentage: %s" % e)
    limits = {}
    if pinned_device_mem_limit is not None and pinned_device_mem_limit != {} and pinned_device_mem_limit != "":
        try:
            entries = parse_mem_limit(pinned_device_mem_limit)
        except LimitError as e:
            raise MpsError("default_pinned_device_mem_limit: %s" % e)
        for e in entries:
            if e["kind"] != "index":
                raise MpsError("default_pinned_device_mem_limit: %s: the daemon's defaults are set per GPU index "
                               "(NVIDIA's device plugin moved to indices because defaults set by UUID were not "
                               "applied); give the GPU's index" % e["device"])
            limits[e["device"]] = daemon_mem_amount(e["bytes"])
    return pct, limits


def default_commands(pct, limits):
    """The control commands that set the declared defaults, in a stable order."""
    cmds = []
    if pct is not None:
        cmds.append("set_default_active_thread_percentage %d" % pct)
    for index in sorted(limits):
        cmds.append("set_default_device_pinned_mem_limit %d %s" % (index, limits[index]))
    return cmds


def render_unit(executable, pipe_directory, log_directory, pct, limits, mkdir="/bin/mkdir", sh="/bin/sh"):
    """systemd unit text for the control daemon; the defaults are re-applied by ExecStartPost on every start."""
    for what, path in (("executable", executable), ("pipe_directory", pipe_directory),
                       ("log_directory", log_directory), ("mkdir", mkdir), ("sh", sh)):
        check_path(what, path)
    ping = ("%s -c 'i=0; until echo get_server_list | %s >/dev/null 2>&1; do i=$$((i+1)); "
            "[ $$i -ge %d ] && exit 1; sleep 0.2; done'" % (sh, executable, WAIT_TRIES))
    lines = [
        UNIT_MARKER,
        "[Unit]",
        "Description=NVIDIA CUDA MPS control daemon (gpuops.nvidia)",
        "After=nvidia-persistenced.service",
        "",
        "[Service]",
        "Type=forking",
        "Environment=CUDA_MPS_PIPE_DIRECTORY=%s" % pipe_directory,
        "Environment=CUDA_MPS_LOG_DIRECTORY=%s" % log_directory,
        "ExecStartPre=%s -p %s %s" % (mkdir, pipe_directory, log_directory),
        "ExecStart=%s -d" % executable,
        "ExecStartPost=%s" % ping,
    ]
    for cmd in default_commands(pct, limits):
        lines.append("ExecStartPost=%s -c 'echo %s | %s'" % (sh, cmd, executable))
    lines += [
        "ExecStop=%s -c 'echo quit | %s'" % (sh, executable),
        "Restart=on-failure",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def restart_relevant(unit_text):
    """The unit without the lines that only set defaults (those are applied at run time without a restart)."""
    if unit_text is None:
        return None
    return "\n".join(line for line in unit_text.splitlines()
                     if not (line.startswith("ExecStartPost=") and "set_default_" in line))


# ---- answers ----------------------------------------------------------------------------------------------
_PCT_ANSWER = re.compile(r"^([0-9]{1,3}(?:\.[0-9]+)?)$")
_MEM_ANSWER = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)B?$", re.IGNORECASE)
_MEM_FACTOR = {"": 1.0 / MIB, "K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def _one_line(text, what):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if len(lines) != 1:
        raise MpsError("cannot read the daemon's answer to %s: %r" % (what, text))
    return lines[0]


def parse_percentage_answer(text):
    """'25.0' -> 25.0"""
    line = _one_line(text, "get_default_active_thread_percentage")
    if not _PCT_ANSWER.match(line):
        raise MpsError("cannot read the daemon's answer to get_default_active_thread_percentage: %r" % text)
    return float(line)


def parse_mem_answer(text):
    """'8G' / '4606M' -> MiB (int); '0' or '0M' -> None (no limit)."""
    line = _one_line(text, "get_default_device_pinned_mem_limit")
    m = _MEM_ANSWER.match(line)
    if not m:
        raise MpsError("cannot read the daemon's answer to get_default_device_pinned_mem_limit: %r" % text)
    mib = int(float(m.group(1)) * _MEM_FACTOR[m.group(2).upper()])
    return mib or None


def parse_pid_list(text, what="get_server_list"):
    """PIDs, one per line (whitespace-separated also accepted); anything else is an error, never guessed."""
    pids = []
    for token in (text or "").split():
        if not re.match(r"^[0-9]+$", token):
            raise MpsError("cannot read the daemon's answer to %s: %r" % (what, text))
        pids.append(int(token))
    return pids


def mib_text(mib):
    """MiB -> how this collection reports a limit: 8G when whole GiB, else 4606M; None stays None."""
    if mib is None:
        return None
    return daemon_mem_amount(mib * MIB)


def plan_defaults(pct, limits, current_pct, current_limits):
    """Control commands needed to bring the running daemon to the declared defaults.

    current_limits: {index: MiB or None} as read. Only declared values are managed.
    """
    cmds = []
    if pct is not None and (current_pct is None or abs(current_pct - pct) > 0.001):
        cmds.append("set_default_active_thread_percentage %d" % pct)
    for index in sorted(limits):
        want = parse_amount_mib(limits[index])
        if current_limits.get(index) != want:
            cmds.append("set_default_device_pinned_mem_limit %d %s" % (index, limits[index]))
    return cmds


def parse_amount_mib(text):
    """'8G' / '4606M' (as normalize_defaults returns) -> MiB."""
    m = re.match(r"^([0-9]+)([MG])$", text)
    if not m:
        raise MpsError("not a daemon memory amount: %r" % text)
    return int(m.group(1)) * (1024 if m.group(2) == "G" else 1)


def unit_setting(unit_text, key):
    """From a unit this module rendered: the value of Environment=<key>=..., or of ExecStart= (its program)."""
    if not unit_text:
        return None
    for line in unit_text.splitlines():
        if key == "ExecStart" and line.startswith("ExecStart="):
            return line[len("ExecStart="):].split(" ")[0]
        if line.startswith("Environment=%s=" % key):
            return line[len("Environment=%s=" % key):]
    return None
