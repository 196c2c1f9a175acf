# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's module_utils, imported from a module's AnsiballZ payload: compiled once per run, and compiled
at all only when their source changed since an earlier run on the node.

ansible-core sends a module with its module_utils as a zip of sources, and Python's zipimport compiles a file from
source every time it is imported; on CPython 3.9 to 3.13 it compiles each file twice (its find_spec asks for the
file name, and zipimporter.get_filename compiles the file to answer). No bytecode is kept between runs. For the
node plan this was the largest part of its run: 37 module_utils files compiled twice, about 0.18 CPU s of a 0.5 s
run (docs/readings/module-bytecode-cache.md).

``install()`` (the first import of every module of the collection) puts a finder before zipimport for the
modules of this package's packages (gpu, kube, ...) that live in a zip archive, where the module runs from one.
It reads the source from the archive, and

- compiles it once, with the same file name zipimport gives it (tracebacks and ``__file__`` unchanged), and
- keeps the code in a per-user cache directory, keyed by the source's SHA-256 and the interpreter's bytecode magic,
  so the next run of any module reads the code instead of compiling it again. A changed file, another collection
  version or another Python never reads an entry that is not its own: the key does not match and the file is
  compiled and its entry replaced (one entry per module_utils file and Python version, so the directory stays
  bounded).

The directory: ``$GPUOPS_BYTECODE_CACHE`` if set (``off`` turns the cache off), else
``$XDG_CACHE_HOME/gpuops.nvidia/bytecode`` or ``~/.cache/gpuops.nvidia/bytecode``. It is created 0700 and used only
while it and its parent are owned by the running user and writable by nobody else (code read from it is executed).
``PYTHONDONTWRITEBYTECODE`` (``sys.dont_write_bytecode``) stops writes to the default directory, as it does for
Python's own bytecode; a directory named in ``$GPUOPS_BYTECODE_CACHE`` is written to all the same (asked for). Any
error of the cache (unreadable, full disk, a corrupt entry) falls back to compiling: the cache can make a run
cheaper, never fail it. Source outside a zip archive (tests, ansible-test, the MIG boot unit's bundle) is left to
Python's own import system.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import marshal
import os
import stat
import sys
import tempfile
import zipimport

try:
    import _imp
except ImportError:  # pragma: no cover - not CPython
    _imp = None
from importlib.machinery import ModuleSpec
from importlib.util import MAGIC_NUMBER, decode_source

PACKAGE = "ansible_collections.gpuops.nvidia.plugins.module_utils"
ENV_DIR = "GPUOPS_BYTECODE_CACHE"
_HEADER = len(MAGIC_NUMBER) + 32  # magic, then the source's SHA-256


def cache_dir(environ=None):
    """(the cache directory this process uses or None where the cache is off, whether it was named explicitly)"""
    environ = os.environ if environ is None else environ
    chosen = environ.get(ENV_DIR, "")
    if chosen.lower() == "off":
        return None, False
    if chosen:
        return chosen, True
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpuops.nvidia", "bytecode"), False


def private_dir(path):
    """Whether ``path`` is a directory of this user that nobody else can write to (no link); the controller's payload
    store (plugins/plugin_utils/payload_store.py) holds its folder to the same rule."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


class BytecodeCache(object):
    """Code objects of module_utils sources, kept in ``directory`` (None: compile only); ``explicit``: written to
    even under PYTHONDONTWRITEBYTECODE."""

    def __init__(self, directory, explicit=False):
        self.directory, self.explicit = directory, explicit
        self._usable = None

    def usable(self):
        if self._usable is None:
            self._usable = False
            if self.directory:
                try:
                    if not os.path.isdir(self.directory):
                        os.makedirs(self.directory, 0o700)
                except OSError:
                    return False
                self._usable = private_dir(self.directory) and private_dir(os.path.dirname(self.directory))
        return self._usable

    def _entry(self, fullname):
        return os.path.join(self.directory, "%s.%s.code" % (fullname, sys.implementation.cache_tag))

    def code(self, fullname, filename, source):
        """The code of ``source`` (bytes) as module ``fullname`` from ``filename``: from the cache where it has
        this very source, else compiled (and kept)."""
        key = MAGIC_NUMBER + hashlib.sha256(source).digest()
        entry = self._entry(fullname) if self.usable() else None
        if entry:
            try:
                with open(entry, "rb") as handle:
                    data = handle.read()
                if data[:_HEADER] == key:
                    code = marshal.loads(data[_HEADER:])
                    if _imp is not None:
                        _imp._fix_co_filename(code, filename)  # pylint: disable=protected-access
                    return code
            except (OSError, EOFError, ValueError, TypeError):
                pass  # no entry, or a broken one: compile and replace it
        code = compile(source, filename, "exec", dont_inherit=True)
        if entry and (self.explicit or not sys.dont_write_bytecode):
            self._keep(entry, key + marshal.dumps(code))
        return code

    def _keep(self, entry, data):
        handle, temp = None, None
        try:
            handle, temp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            os.write(handle, data)
            os.close(handle)
            handle = None
            os.replace(temp, entry)
            temp = None
        except OSError:
            pass
        finally:
            if handle is not None:
                os.close(handle)
            if temp is not None:
                try:
                    os.unlink(temp)
                except OSError:
                    pass


class _ArchiveLoader(object):
    """Loads one module_utils file from a zip archive through the cache (``source``: its bytes, read once by the
    finder)."""

    def __init__(self, filename, source, cache):
        self.filename, self.source, self.cache = filename, source, cache

    def create_module(self, spec):  # pylint: disable=unused-argument
        return None  # the default module object

    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)  # pylint: disable=exec-used

    def get_code(self, fullname):
        return self.cache.code(fullname, self.filename, self.source)

    def get_source(self, fullname):  # pylint: disable=unused-argument
        return decode_source(self.source)

    def get_filename(self, fullname):  # pylint: disable=unused-argument
        return self.filename

    def is_package(self, fullname):  # pylint: disable=unused-argument
        return False


class ArchiveFinder(object):
    """A meta path finder for the modules of PACKAGE and of its packages (``PACKAGE.gpu._gpu``) that live in a zip
    archive (an AnsiballZ payload)."""

    def __init__(self, cache):
        self.cache = cache

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
        parent, _dot, name = fullname.rpartition(".")
        if not path or not (parent == PACKAGE or parent.startswith(PACKAGE + ".")):
            return None
        for entry in path:
            try:
                importer = zipimport.zipimporter(entry)
            except (zipimport.ZipImportError, OSError):
                continue  # not inside an archive: Python's own import system
            filename = os.path.join(importer.archive, importer.prefix, name + ".py")
            try:
                source = importer.get_data(filename)
            except OSError:
                continue
            spec = ModuleSpec(fullname, _ArchiveLoader(filename, source, self.cache), origin=filename)
            spec.has_location = True
            return spec
        return None

    def invalidate_caches(self):
        pass


def install():
    """Put the finder first in sys.meta_path, once per process, where this file was itself imported from a zip
    archive (a module's payload); elsewhere (ansible-test, the tests, a module_utils file imported from disk) it
    changes nothing and returns None."""
    if not isinstance(globals().get("__loader__"), zipimport.zipimporter):
        return None
    for finder in sys.meta_path:
        if isinstance(finder, ArchiveFinder):
            return finder
    finder = ArchiveFinder(BytecodeCache(*cache_dir()))
    sys.meta_path.insert(0, finder)
    return finder
