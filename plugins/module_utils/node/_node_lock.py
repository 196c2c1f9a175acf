# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One lock per node around every GPU-changing module run, so two converges never interleave GPU changes.

Every module that changes GPU state (mig_mode, mig_layout, compute_mode, mps_control) holds the lock for its
whole read -> plan -> apply -> re-read. The second run waits for it; after the timeout it fails, naming the
holder (PID, module, start time), before it has read or changed anything.

The lock is an fcntl (flock) lock on a file: the kernel releases it when the holder exits, even on SIGKILL, so a
killed run never leaves a stale lock. Where the file is:

- ``GPUOPS_NODE_LOCK`` if set;
- on simulated GPUs (``GPUOPS_SIMULATED_GPUS``): beside the state file (``<state>.node.lock``), so each
  simulated node has its own;
- otherwise ``/run/gpuops/node.lock`` (``/run`` is a tmpfs: nothing survives a reboot, and nothing needs to).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import contextlib
import fcntl
import json
import os
import socket
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Refusal
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS, wait

ENV_LOCK = "GPUOPS_NODE_LOCK"
ENV_TIMEOUT = "GPUOPS_NODE_LOCK_TIMEOUT"
ENV_STATE = "GPUOPS_SIMULATED_GPUS"
DEFAULT_PATH = "/run/gpuops/node.lock"
DEFAULT_TIMEOUT = WAITS["node_lock"].timeout

# For modules: add to argument_spec; documented by the doc fragment gpuops.nvidia.node_lock.
ARGUMENT_SPEC = dict(lock_timeout=dict(type="int"))


class NodeLockError(Exception):
    """The node lock could not be taken (timeout, or the lock file cannot be opened)."""


def lock_path(environ=None):
    env = os.environ if environ is None else environ
    if env.get(ENV_LOCK):
        return env[ENV_LOCK]
    if env.get(ENV_STATE):
        return env[ENV_STATE] + ".node.lock"
    return DEFAULT_PATH


def lock_timeout(value=None, environ=None):
    """The timeout in seconds: the module parameter, else GPUOPS_NODE_LOCK_TIMEOUT, else 600."""
    env = os.environ if environ is None else environ
    if value is None:
        raw = env.get(ENV_TIMEOUT)
        if raw in (None, ""):
            return DEFAULT_TIMEOUT
        try:
            value = int(raw)
        except ValueError:
            raise NodeLockError("%s=%r is not a whole number of seconds" % (ENV_TIMEOUT, raw))
    error = seconds_error("lock_timeout", value)
    if error:
        raise NodeLockError("%s (0: do not wait). Nothing was read or changed." % error)
    return value


def _read_holder(fd):
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
        return json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, ValueError):
        return None


def describe_holder(holder):
    if not holder:
        return "a run that did not say who it is"
    since = holder.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else "?"
    return "PID %s on %s (%s, since %s)" % (holder.get("pid"), holder.get("host"), holder.get("module"), when)


class NodeLock(object):
    """Context manager: ``with NodeLock(path, timeout, "mig_layout") as lock: ...``; ``lock.waited`` says how
    long it waited."""

    def __init__(self, path=None, timeout=None, owner="gpuops", environ=None):
        self.path = path or lock_path(environ)
        self.timeout = lock_timeout(timeout, environ)
        self.owner = owner
        self.fd = None
        self.waited = 0.0

    def acquire(self):
        directory = os.path.dirname(self.path)
        try:
            if directory and not os.path.isdir(directory):
                # exist_ok: another node's module may create it at the same moment (a shared state directory)
                os.makedirs(directory, 0o755, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise NodeLockError("cannot open the node lock file %s: %s (set %s to a writable path); nothing "
                                "changed" % (self.path, exc.strerror or exc, ENV_LOCK))

        def try_lock():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise NodeLockError("cannot lock %s: %s; nothing changed" % (self.path, exc))
                return False

        polled = wait("node_lock", try_lock, self.timeout)      # the last try at the deadline
        if not polled.done:
            holder = _read_holder(fd)
            os.close(fd)
            raise NodeLockError(
                "another gpuops run holds the node lock %s: %s; waited %d s (lock_timeout). Nothing was "
                "read or changed. Let that run finish, or raise lock_timeout (or %s)."
                % (self.path, describe_holder(holder), self.timeout, ENV_TIMEOUT))
        self.waited = polled.waited
        self.fd = fd
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "module": self.owner,
                             "since": time.time()})
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, record.encode("utf-8"))
        return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        if self.fd is None:
            self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False


@contextlib.contextmanager
def module_lock_with_backend(run, owner):
    """The node lock for a module run (a ``_module_run.ModuleRun``) whose read opens a GPU backend as ``run.backend``
    (None until then), and that backend closed when the run ends, however it ends."""
    run.backend = None
    with module_lock(run.module, owner):
        try:
            yield
        finally:
            if run.backend is not None:
                run.backend.close()


def module_lock(module, owner):
    """Take the node lock for an AnsibleModule run (its ``lock_timeout`` parameter); a Refusal (raised to the base,
    nothing changed) when it cannot. Return it from a ``ModuleRun``'s ``lock`` hook (run_module's try covers it):
    ``return module_lock(self.module, "mig_layout")``."""
    try:
        return NodeLock(timeout=module.params.get("lock_timeout"), owner=owner).acquire()
    except NodeLockError as exc:
        raise Refusal(str(exc)) from exc
