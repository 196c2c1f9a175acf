# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module's AnsiballZ payload kept between runs on the controller, keyed by every source it can hold (controller
only; issue 48).

ansible-core builds a module's payload (the module and each module_utils file of its import closure, found by parsing
them into ASTs: ``recursive_finder`` in ansible/executor/module_common.py) once per run, in the first worker that runs
the module, and keeps it in the run's own folder ``<DEFAULT_LOCAL_TMP>/ansiballz_cache``, removed at the end of the
run. For gpuops.nvidia.gpu_node_plan, whose closure holds every step's reader and planner (about 120 files), that
build is the dearest part of a converged node's re-run on the controller (docs/readings/fleet-compare-session22-2cores.md).

``around_build`` keeps ansible-core's own cache file(s) of one module in a folder beside the runs' folders
(``<local_tmp>/gpuops.nvidia-payloads/<module>/<key>/``) and, in a later run, puts them back into that run's
``ansiballz_cache`` before ansible-core looks there, so ansible-core reads its own file instead of building it again.
Nothing of ansible-core's format is read or written here: the files are copied as ansible-core wrote them.

The key is a SHA-256 over what the payload is made of or by: the ansible-core release and where it is installed, the
controller's Python, the module's fully qualified name and file, ``module_compression`` and the module_utils search
path, and the size and modification time (nanoseconds) of the module's file, of every file under the collection's
``plugins/module_utils`` and of every file of ansible-core's ``module_utils`` and ``executor`` (a superset of the
closure: the closure of the module a store is used for lies within them, held by
tests/unit/plugins/plugin_utils/test_payload_store.py). A source that changes, a file added or removed, another
ansible-core: another key, and the payload is built again (Python's own .pyc files are kept valid by the same rule,
size and modification time, in whole seconds where this uses nanoseconds: an edit that keeps a file's size within the
same tick of the file system's clock as the file's previous write is the one change it cannot see).

Kept safe and out of the way:

- the store's folder is created with mode 0700 and used only while it is a real folder (no link) owned by the user
  who runs ansible and writable by no one else (ansible-core 2.19 and newer keep the payload as a pickle);
- every copy is written under a temporary name and renamed into place, so a worker of the same run, or another run,
  never reads half a file; a store that loses a race to another run keeps the other run's entry;
- per module, the newest ``KEEP`` keys are kept (two checkouts used in turn), older ones removed;
- any error of the store's own (a full disk, a read-only home) is reported at -vvvv and the module is built as
  without it; ``GPUOPS_NVIDIA_PAYLOAD_STORE=off`` in the controller's environment turns the store off.

What it does not do: keep anything where the run's folder has no ``ansiballz_cache`` files for the module after the
build (a layout that ansible-core changed: the run behaves as without the store); help a run whose home is new each
time (an AWX execution environment's container starts with an empty home: each job builds the payload as before).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import shutil
import sys
import tempfile
import time

from ansible import constants as C
from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE
from ansible.utils.display import Display

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bytecode_cache import private_dir

display = Display()

FORMAT = "1"
KEEP = 3
STORE_NAME = "gpuops.nvidia-payloads"
_SKIP = (".lock", "-part")


def enabled(environ=None):
    environ = os.environ if environ is None else environ
    return environ.get("GPUOPS_NVIDIA_PAYLOAD_STORE", "").strip().lower() not in BOOLEANS_FALSE


def _listing(root, digest, skip_dirs=("__pycache__",)):
    """Every file under ``root`` (its path below root, size and modification time) into ``digest``, in a fixed
    order; a root that is not there counts as one entry."""
    if not os.path.isdir(root):
        digest.update(("missing\0%s\n" % root).encode("utf-8", "surrogateescape"))
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs)
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            digest.update(("%s\0%d\0%d\n" % (os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
                          .encode("utf-8", "surrogateescape"))


def key(module_fqn, module_path, module_utils_dirs):
    """The store's key for the payload of ``module_fqn`` (its file ``module_path``; ``module_utils_dirs``: the
    folders its closure can draw from besides ansible-core's own)."""
    import ansible
    from ansible.release import __version__ as core_version
    core = os.path.dirname(os.path.abspath(ansible.__file__))
    digest = hashlib.sha256()
    head = [FORMAT, core_version, core, sys.version, module_fqn, os.path.abspath(module_path),
            str(getattr(C, "DEFAULT_MODULE_COMPRESSION", "")), repr(getattr(C, "DEFAULT_MODULE_UTILS_PATH", None))]
    digest.update("\0".join(head).encode("utf-8", "surrogateescape"))
    st = os.stat(module_path)
    digest.update(("\nmodule\0%d\0%d\n" % (st.st_size, st.st_mtime_ns)).encode("ascii"))
    for folder in list(module_utils_dirs) + [os.path.join(core, "module_utils"), os.path.join(core, "executor")]:
        digest.update(("\nfolder\0%s\n" % os.path.abspath(folder)).encode("utf-8", "surrogateescape"))
        _listing(folder, digest)
    return digest.hexdigest()


def _private_folder(path):
    """``path`` as a folder of this user's that no one else can write (created 0700 where missing), or None."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not private_dir(path):
        display.vvvv("gpuops.nvidia payload store: %s is not a private folder of this user: not used" % path)
        return None
    return path


def _ours(names, module_fqn):
    prefix = module_fqn + "-"
    return sorted(n for n in names if n.startswith(prefix) and not n.endswith(_SKIP))


def _copy_in(src, dest_dir, name):
    """``src`` as ``dest_dir/name``, whole or not at all (a temporary file renamed into place)."""
    fd, tmp = tempfile.mkstemp(prefix=".gpuops-", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as handle:
            shutil.copyfileobj(handle, out, 1 << 20)
        os.replace(tmp, os.path.join(dest_dir, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _prune(module_dir, kept, now=None):
    """The newest KEEP entries of a module kept (``kept`` always), and staging folders that a killed run left (an
    hour old) removed."""
    try:
        found = [e for e in os.scandir(module_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    now = time.time() if now is None else now
    for entry in found:
        if entry.name.startswith(".") and now - entry.stat(follow_symlinks=False).st_mtime > 3600:
            shutil.rmtree(entry.path, ignore_errors=True)
    entries = [e for e in found if not e.name.startswith(".")]
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns, reverse=True)
    for entry in entries[KEEP:]:
        if entry.name != kept:
            shutil.rmtree(entry.path, ignore_errors=True)


class _Store(object):

    def __init__(self, module_fqn, module_path, module_utils_dirs, local_tmp):
        self.fqn = module_fqn
        self.run_cache = os.path.join(local_tmp, "ansiballz_cache")
        root = _private_folder(os.path.join(os.path.dirname(os.path.abspath(local_tmp)), STORE_NAME))
        if root is None:
            raise OSError("no private store folder")
        self.module_dir = os.path.join(root, module_fqn)
        os.makedirs(self.module_dir, mode=0o700, exist_ok=True)
        # a later worker of the same run finds the payload in the run's cache: the worker that built or put it
        # there keeps it, so this one neither works out the key (9 ms of CPU for ~330 files) nor looks at the store
        self.served = bool(self._run_files())
        self.entry = None if self.served else os.path.join(self.module_dir,
                                                           key(module_fqn, module_path, module_utils_dirs))

    def _run_files(self):
        try:
            return _ours(os.listdir(self.run_cache), self.fqn)
        except OSError:
            return []

    def restore(self):
        """The stored files into the run's cache, where the run has none yet; True if they were put there."""
        if self.served:
            return False
        try:
            stored = _ours(os.listdir(self.entry), self.fqn)
        except OSError:
            return False
        if not stored:
            return False
        os.makedirs(self.run_cache, exist_ok=True)
        for name in stored:
            _copy_in(os.path.join(self.entry, name), self.run_cache, name)
        os.utime(self.entry)        # the newest entry is the one kept
        return True

    def keep(self):
        """The run's files of this module as the entry of this key, where there is none yet."""
        if self.served or os.path.isdir(self.entry):
            return
        names = self._run_files()
        if not names:
            return
        staging = tempfile.mkdtemp(prefix=".gpuops-", dir=self.module_dir)
        try:
            for name in names:
                _copy_in(os.path.join(self.run_cache, name), staging, name)
            try:
                os.rename(staging, self.entry)
            except OSError:
                if not os.path.isdir(self.entry):   # not a lost race: a real error
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _prune(self.module_dir, os.path.basename(self.entry))


def around_build(module_fqn, module_path, module_utils_dirs, build, local_tmp=None):
    """``build()`` (ansible-core's ``_configure_module``) with the stored payload of ``module_fqn`` put into the
    run's cache before it and the run's payload kept after it; returns what ``build()`` returns. The store's own
    errors never reach the caller (reported at -vvvv); ``build()``'s do, unchanged."""
    store = None
    if enabled():
        try:
            store = _Store(module_fqn, module_path, module_utils_dirs,
                           local_tmp if local_tmp is not None else C.DEFAULT_LOCAL_TMP)
            store.restore()
        except (OSError, ValueError) as exc:
            display.vvvv("gpuops.nvidia payload store: not used for %s (%s)" % (module_fqn, exc))
            store = None
    result = build()
    if store is not None:
        try:
            store.keep()
        except (OSError, ValueError) as exc:
            display.vvvv("gpuops.nvidia payload store: %s not kept (%s)" % (module_fqn, exc))
    return result
