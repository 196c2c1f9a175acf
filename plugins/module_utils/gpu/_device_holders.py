# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which processes hold the NVIDIA device files open, found the way ``fuser`` and ``lsof`` find them.

NVML names no process when it refuses a GPU reset (its error is only "In use by another client"), and it lists only
processes with a CUDA context: a device plugin, GPU feature discovery or a DCGM exporter keeps ``/dev/nvidia*`` open
without one, and so does nvidia-persistenced. This module reads each process's open file descriptors under a proc
root (``/proc/<pid>/fd/*``) and keeps those that point at one of the device files matched by the given patterns
(``/dev/nvidia*``, ``/dev/nvidia-caps/*``). A descriptor is matched by what it opens, not by its name: a character
device by its device number (a container's own ``/dev/nvidia0`` node is the host's 195:0), any other file by its
inode; so a process in another mount namespace is found too. For each holder it reads the command
(``/proc/<pid>/cmdline``, else ``comm``) and ``/proc/<pid>/cgroup``, which says the Kubernetes pod (its UID) and
container, or the systemd unit, that the process runs in. A process whose descriptors cannot be read (another user's,
without root) is counted and reported, never silently dropped.

Pure parts (``parse_cgroup``, ``for_device``, ``describe``) take no I/O; ``find_holders`` is the reader. Both backends
build the same records (``holder_record``): the real one from /proc, the simulator from its state; the words the
user reads are ``describe``'s in both. The Kubernetes pod name is not in the cgroup, only its UID; ``describe`` takes
an optional {uid: "namespace/name"} map from a caller that has a Kubernetes client.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import glob
import os
import re
import stat

DEV_DIR = "/dev"
PROC_ROOT = "/proc"
# The driver's device files: one per GPU (nvidia<minor>), the control file nvidiactl, nvidia-uvm(-tools),
# nvidia-modeset, and the MIG capability files under nvidia-caps/.
PATTERNS = ("nvidia*", "nvidia-caps/*")

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_POD = re.compile(r"(?:^|[/-])pod(%s)(?:\.slice)?(?:/|$)" % _UID)
# The container's own cgroup: systemd driver "<runtime>-<id>.scope", cgroupfs driver "<id>" (64 hex characters).
# crio's "crio-conmon-<id>.scope" is its monitor process, not the container.
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")
_UNIT = re.compile(r"^[^/]+\.(?:service|scope)$")


def device_patterns(dev_dir=DEV_DIR):
    """The glob patterns of the NVIDIA device files under ``dev_dir``."""
    return tuple(os.path.join(dev_dir, p) for p in PATTERNS)


def parse_cgroup(text):
    """What one process's ``/proc/<pid>/cgroup`` says about where it runs: {"pod_uid", "container_id", "unit",
    "cgroup"}, each None when the file does not say. Handles cgroup v2 (the single ``0::<path>`` line) and v1 (one
    line per hierarchy; the first that names a Kubernetes pod, else the systemd one, is used), kubelet's systemd
    cgroup driver (``kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<id>.scope``) and its cgroupfs driver
    (``/kubepods/burstable/pod<uid>/<id>``). The pod UID is given with dashes, as the API server shows it."""
    paths = []
    for line in (text or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            paths.append((parts[0], parts[1], parts[2]))
    # the first line naming a pod, else the v2 line, else v1's systemd line, else the first
    ranked = sorted(paths, key=lambda p: (not _POD.search(p[2]), (p[0], p[1]) != ("0", ""), p[1] != "name=systemd"))
    chosen = ranked[0][2] if ranked else None
    out = {"pod_uid": None, "container_id": None, "unit": None, "cgroup": chosen}
    if not chosen:
        return out
    segments = [s for s in chosen.split("/") if s]
    pod = _POD.search(chosen)
    if pod:
        out["pod_uid"] = pod.group(1).replace("_", "-")
        last = segments[-1] if segments else ""
        match = _CONTAINER.match(last)
        if match and "conmon" not in last:
            out["container_id"] = match.group(1)
    elif segments and _UNIT.match(segments[-1]):
        out["unit"] = segments[-1]
    return out


def holder_record(pid, command, paths, cgroup_text=None):
    """One holder as both backends report it: {"pid", "command", "paths" (sorted), "pod_uid", "container_id",
    "unit"}."""
    where = parse_cgroup(cgroup_text)
    return {"pid": pid, "command": command, "paths": sorted(set(paths)), "pod_uid": where["pod_uid"],
            "container_id": where["container_id"], "unit": where["unit"]}


def _key(st):
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return ("dev", stat.S_IFMT(st.st_mode), st.st_rdev)
    return ("file", st.st_dev, st.st_ino)


def device_files(patterns):
    """{key: path} of the files the patterns match now (directories left out); a character device is keyed by its
    device number, any other file by its inode."""
    files = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                continue
            files.setdefault(_key(st), path)
    return files


def _read(path, limit=65536):
    with open(path, "rb") as handle:
        return handle.read(limit)


def _command(proc_dir):
    """The program's name: argv[0]'s base name from cmdline (full length), else comm (the kernel's 15 characters)."""
    try:
        argv0 = _read(os.path.join(proc_dir, "cmdline")).split(b"\0")[0]
        if argv0:
            return os.path.basename(argv0.decode("utf-8", "replace"))
    except (IOError, OSError):
        pass
    try:
        return _read(os.path.join(proc_dir, "comm")).decode("utf-8", "replace").strip() or "?"
    except (IOError, OSError):
        return "?"


def find_holders(proc_root=PROC_ROOT, patterns=None):
    """Every process under ``proc_root`` with a file descriptor open on a file that ``patterns`` (globs, default
    the NVIDIA device files under /dev) match. Returns {"holders": [holder_record...] by PID, "unreadable": [PIDs
    whose descriptors could not be read], "files": [the device files matched]}. Processes that end while they are
    read are left out; it only reads."""
    files = device_files(device_patterns() if patterns is None else patterns)
    holders, unreadable = [], []
    if not files:
        return {"holders": holders, "unreadable": unreadable, "files": []}
    try:
        entries = os.listdir(proc_root)
    except OSError as exc:
        raise OSError(exc.errno, "cannot list processes under %s: %s" % (proc_root, exc.strerror))
    for name in sorted((e for e in entries if e.isdigit()), key=int):
        proc_dir = os.path.join(proc_root, name)
        fd_dir = os.path.join(proc_dir, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                unreadable.append(int(name))
            continue
        held = set()
        for fd in fds:
            try:
                st = os.stat(os.path.join(fd_dir, fd))
            except OSError:
                continue
            path = files.get(_key(st))
            if path:
                held.add(path)
        if not held:
            continue
        try:
            cgroup = _read(os.path.join(proc_dir, "cgroup")).decode("utf-8", "replace")
        except (IOError, OSError):
            cgroup = None
        holders.append(holder_record(int(name), _command(proc_dir), held, cgroup))
    return {"holders": holders, "unreadable": unreadable, "files": sorted(files.values())}


def gpu_file(minor, dev_dir=DEV_DIR):
    return os.path.join(dev_dir, "nvidia%d" % minor)


def for_device(found, device_file):
    """The holders of one GPU: those with ``device_file`` (its /dev/nvidia<minor>) open, and those holding only
    files that no single GPU owns (nvidiactl, nvidia-uvm, nvidia-caps/*), which a reset may also wait for. With
    ``device_file`` None (the GPU's minor number is unknown), every holder."""
    if device_file is None:
        return dict(found, holders=list(found["holders"]))
    own = re.compile(r"nvidia\d+$")
    kept = []
    for holder in found["holders"]:
        gpu_files = [p for p in holder["paths"] if own.search(p)]
        if device_file in holder["paths"] or not gpu_files:
            kept.append(holder)
    return dict(found, holders=kept)


def describe_holder(holder, pods=None, own_pid=None):
    """``PID 4242 nv-hostengine (pod monitoring/dcgm-exporter-x, container 0123456789ab) holds /dev/nvidia0``. The
    process ``own_pid`` (the caller's) is marked: NVML's own session keeps the device files open too."""
    where = []
    if own_pid is not None and holder.get("pid") == own_pid:
        where.append("this run itself, through its NVML session")
    if holder.get("pod_uid"):
        name = (pods or {}).get(holder["pod_uid"])
        where.append("pod %s" % name if name else "pod UID %s" % holder["pod_uid"])
        if holder.get("container_id"):
            where.append("container %s" % holder["container_id"][:12])
    elif holder.get("unit"):
        where.append("unit %s" % holder["unit"])
    pid = "?" if holder.get("pid") is None else holder["pid"]
    text = "PID %s %s" % (pid, holder.get("command") or "?")
    if where:
        text += " (%s)" % ", ".join(where)
    return text + " holds " + ", ".join(holder.get("paths") or [])


def describe(found, pods=None, own_pid=None):
    """One sentence naming every holder, and how many processes could not be read."""
    parts = []
    holders = found.get("holders") or []
    if holders:
        parts.append("%d process(es) hold the device files open: %s" % (
            len(holders), "; ".join(describe_holder(h, pods, own_pid) for h in holders)))
    else:
        parts.append("no process that could be read holds the device files open (a kernel client such as the "
                     "nvidia_drm or nvidia_modeset module holds them without one)")
    unreadable = found.get("unreadable") or []
    if unreadable:
        parts.append("%d process(es) could not be read (permission denied; run as root to see them): PID %s" % (
            len(unreadable), ", ".join(str(p) for p in unreadable[:20]) + (", ..." if len(unreadable) > 20 else "")))
    return ". ".join(parts)
