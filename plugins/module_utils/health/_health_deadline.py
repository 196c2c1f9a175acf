# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUs' health read with a deadline: every NVML read in a child process, so that a GPU (or a driver) that never
answers becomes a finding within the deadline, never a hung job (issue 50).

A child (``os.fork``; it always ends with ``os._exit``) reads through the run's backend part by part - NVML's start and
the GPU count, then each GPU's bus id and health (``read_gpu_health``), then, without NVML, this boot's kernel log with
timestamps and the PCI bus - and writes one JSON line per part to a pipe: ``{"start": part}`` before it, then its
answer. The parent waits on the pipe with ``select`` until the part's deadline (``DEFAULT_DEADLINE`` seconds per part,
each GPU its own). When a part does not answer in time, the parent kills the child (SIGKILL, then reaps it) and:

- NVML's start or the GPU count: the node's NVML is unresponsive (``nvml_unresponsive``: one finding, no GPU), its
  GPUs are not read;
- a GPU: that GPU is unresponsive (``gpu_unresponsive``), with its bus id where NVML named it before the health read
  stopped answering, else from the PCI bus (the one GPU there NVML did not answer for), and a new child reads the GPUs
  after it (a new NVML start; where that start does not answer either, NVML is unresponsive as above);
- the kernel log or the PCI bus: read as unreadable, with the reason.

The answer is a health read in ``_gpu_health``'s shape with "unresponsive", "nvml_unresponsive" and "kernel_log"
holding the timed lines (``_xid.read_kernel_log_timed``'s shape, with "boot_id").
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import select
import signal
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._pci import sysfs_bus_id

DEFAULT_DEADLINE = 30.0


class HealthReadError(Exception):
    """A part of the read failed (an NVML error, the simulator's state, a child that ended without answering): ``msg``
    says which part and why."""

    def __init__(self, msg):
        super(HealthReadError, self).__init__(msg)
        self.msg = msg


def _write(fd, record):
    data = (json.dumps(record) + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


def _child(fd, open_backend, open_host, indexes, host_parts):
    """The child's reads, each announced and answered on ``fd``. ``indexes``: the GPUs to read (None: NVML's count
    first); ``host_parts``: "kernel_log", "pci" to read after the GPUs (without NVML)."""
    if indexes is None or indexes:
        _write(fd, {"start": "init"})
        backend = open_backend()
        _write(fd, {"backend": backend.kind})
        if indexes is None:
            indexes = backend.health_indexes()
            _write(fd, {"count": indexes})
        for index in indexes:
            _write(fd, {"start": "gpu", "index": index})
            identity = getattr(backend, "read_gpu_identity", None)
            if identity is not None:
                try:
                    _write(fd, {"identity": index, "pci_bus_id": identity(index)["pci_bus_id"]})
                except Exception:  # pylint: disable=broad-exception-caught
                    pass           # (a lost GPU answers its health read as lost; the bus id then comes from there)
            _write(fd, {"gpu": index, "health": backend.read_gpu_health(index)})
        backend.close()
    if host_parts:
        host = open_host()
        for part in host_parts:
            _write(fd, {"start": part})
            answer = host.read_kernel_log_timed() if part == "kernel_log" else host.read_pci()
            _write(fd, {part: answer})
        host.close()
    _write(fd, {"done": True})


def _spawn(open_backend, open_host, indexes, host_parts):
    """(pid, the read end of its pipe) of a child reading ``indexes`` and ``host_parts``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        status = 0
        try:
            os.close(read_fd)
            _child(write_fd, open_backend, open_host, indexes, host_parts)
        except BaseException as exc:  # pylint: disable=broad-exception-caught
            status = 1
            try:
                _write(write_fd, {"error": "%s: %s" % (type(exc).__name__, exc)})
            except BaseException:  # pylint: disable=broad-exception-caught
                pass
        finally:
            os._exit(status)  # pylint: disable=protected-access
    os.close(write_fd)
    return pid, read_fd


# How long the parent waits to reap a killed child: a child inside an uninterruptible driver call (state D, what a hung
# GPU does to its caller) dies only when the call returns, and the read must not hang on it; it is left to init then.
REAP_SECONDS = 5.0


def _end(pid, fd, kill):
    """The child killed (where ``kill``) and reaped (a killed one waited for at most ``REAP_SECONDS``), its pipe
    closed."""
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise
    gives_up = time.monotonic() + REAP_SECONDS
    while True:
        try:
            done, dummy = os.waitpid(pid, os.WNOHANG if kill else 0)
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            if exc.errno != errno.ECHILD:
                raise
            break
        if done or time.monotonic() > gives_up:
            break
        time.sleep(0.01)
    os.close(fd)


def _records(pid, fd, deadline, clock):
    """The child's records as they come, and ("timeout", None) where a part does not answer within ``deadline``
    seconds of its start (the child then killed), ("eof", None) when the child ended. Closed early (the caller
    failed), it kills and reaps the child."""
    ended = []
    try:
        yield from _records_until_end(pid, fd, deadline, clock, ended)
    finally:
        if not ended:
            _end(pid, fd, kill=True)


def _records_until_end(pid, fd, deadline, clock, ended):
    buffered = b""
    part_ends = clock() + deadline
    while True:
        left = part_ends - clock()
        if left <= 0:
            ended.append(True)
            _end(pid, fd, kill=True)
            yield "timeout", None
            return
        try:
            ready, dummy, dummy2 = select.select([fd], [], [], left)
        except (OSError, select.error) as exc:
            if getattr(exc, "errno", None) == errno.EINTR or (exc.args and exc.args[0] == errno.EINTR):
                continue
            raise
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            ended.append(True)
            _end(pid, fd, kill=False)
            yield "eof", None
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            record = json.loads(line.decode("utf-8"))
            if "start" in record:
                part_ends = clock() + deadline
            yield "record", record


def _bus_from_pci(pci, read_gpus, unresponsive):
    """The bus id of an unresponsive GPU from the PCI bus: where exactly one GPU the bus shows is neither a GPU NVML
    answered for nor an unresponsive GPU whose bus id is known, that one (sysfs form); else None."""
    if not isinstance(pci, dict) or not pci.get("readable"):
        return None
    known = set(sysfs_bus_id(g.get("pci_bus_id")) for g in read_gpus)
    known.update(sysfs_bus_id(g["bus_id"]) for g in unresponsive if g.get("bus_id"))
    left = [g["bus_id"] for g in pci.get("gpus") or [] if sysfs_bus_id(g.get("bus_id")) not in known]
    return left[0] if len(left) == 1 else None


def read_health(open_backend, open_host, deadline=DEFAULT_DEADLINE, kernel_log=True, clock=time.monotonic):
    """The node's health read with ``deadline`` seconds per part (module docstring). ``open_backend``: () -> the GPU
    backend (_gpu_backend.get_backend; it may start NVML); ``open_host``: () -> the reader of the kernel log and the PCI
    bus (_gpu_backend.get_host_reader); both called in the child only. ``kernel_log``: read it (else it is not read:
    {"readable": False, "reason": ...}). Raises HealthReadError where a part fails rather than hangs."""
    if deadline <= 0:
        raise ValueError("deadline must be more than 0 seconds; got %r" % (deadline,))
    gpus, unresponsive, identities = {}, [], {}
    backend_kind = None
    nvml_stuck = None
    indexes = None
    host = {"kernel_log": None, "pci": None}
    host_parts = (["kernel_log"] if kernel_log else []) + ["pci"]
    todo_gpus = None          # None: the count is not known yet
    todo_host = list(host_parts)
    while True:
        pid, fd = _spawn(open_backend, open_host, todo_gpus, todo_host)
        current = ("init", None) if todo_gpus is None or todo_gpus else (todo_host[0], None) if todo_host else None
        error = None
        ended = None
        records = _records(pid, fd, deadline, clock)
        try:
            for kind, record in records:
                if kind != "record":
                    ended = kind
                    break
                if "backend" in record:
                    backend_kind = record["backend"]
                elif "start" in record:
                    current = (record["start"], record.get("index"))
                elif "count" in record:
                    indexes = list(record["count"])
                    todo_gpus = list(indexes)
                elif "identity" in record:
                    identities[record["identity"]] = record["pci_bus_id"]
                elif "gpu" in record:
                    gpus[record["gpu"]] = record["health"]
                    todo_gpus.remove(record["gpu"])
                elif "kernel_log" in record or "pci" in record:
                    part = "kernel_log" if "kernel_log" in record else "pci"
                    host[part] = record[part]
                    todo_host.remove(part)
                elif "error" in record:
                    error = record["error"]
                elif "done" in record:
                    todo_gpus = todo_gpus or []
        finally:
            records.close()
        if error is not None:
            raise HealthReadError("the health read failed at %s: %s" % (_part_words(current), error))
        if ended == "eof":
            if (todo_gpus is None or todo_gpus) or todo_host:
                raise HealthReadError("the health read ended without answering at %s" % _part_words(current))
            break
        # the part did not answer in time
        what, index = current
        if what == "init":
            nvml_stuck = {"seconds": deadline, "not_read": list(todo_gpus or [])}
            todo_gpus = []
        elif what == "gpu":
            unresponsive.append({"gpu": index, "bus_id": identities.get(index),
                                 "bus_id_source": "nvml" if identities.get(index) else None, "seconds": deadline})
            todo_gpus.remove(index)
        else:
            reason = "%s did not answer within the deadline of %g s" % (
                "the kernel log read" if what == "kernel_log" else "the PCI bus read", deadline)
            host[what] = {"readable": False, "source": None, "oldest": None, "lines": [], "reason": reason} \
                if what == "kernel_log" else {"readable": False, "root": None, "gpus": [], "reason": reason}
            todo_host.remove(what)
        if not todo_gpus and not todo_host:
            break
    read_gpus = [gpus[i] for i in sorted(gpus)]
    for entry in unresponsive:
        if entry["bus_id"] is None:
            entry["bus_id"] = _bus_from_pci(host["pci"], read_gpus, unresponsive)
            entry["bus_id_source"] = "pci" if entry["bus_id"] else None
    log = host["kernel_log"] if kernel_log else {
        "readable": False, "source": None, "oldest": None, "lines": [], "boot_id": None,
        "reason": "kernel log not read (kernel_log: false)"}
    return {"backend": backend_kind, "gpus": read_gpus, "unresponsive": unresponsive, "nvml_unresponsive": nvml_stuck,
            "kernel_log": log, "pci": host["pci"], "indexes": indexes}


def _part_words(current):
    if current is None:
        return "its end"
    what, index = current
    return {"init": "NVML's start or GPU count", "gpu": "GPU %s" % index, "kernel_log": "the kernel log",
            "pci": "the PCI bus"}.get(what, what)
