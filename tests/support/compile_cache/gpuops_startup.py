"""A compile cache for the Python processes the tests start (ansible-playbook, its forked workers, the modules): the
code that ``compile()`` makes from a source is kept on disk, keyed by the source, and read back the next time any
process compiles the same source. Tests only: tests/support/ansible_run.py puts this directory first on PYTHONPATH
of the ansible commands it runs, so Python imports this directory's sitecustomize.py at start-up (site.py's
``sitecustomize``), which loads this file's code and calls ``_start`` (see sitecustomize.py for why two files).

Why: the suite is bound by the CPU it needs (in git history: docs/readings/test-time-session9.md at d903693), and a
large part of it is the same sources compiled again in thousands of short-lived processes that keep no bytecode:
ansible-core's own module_utils compiled twice by zipimport in every module run, the collection's plugins and
module_utils compiled by ansible-core's collection loader in every forked worker, Jinja's generated template code in
every worker. The code a cache entry gives back is what ``compile()`` would return for that source (the same bytecode,
constants and line numbers; the file name is set to the caller's), so what a test checks is unchanged. A bench of
bench/ uses it only where its environment names it (as the tests that run a bench do): started by hand, its figures
are a node's real cost.

What is cached: ``compile(source, filename, "exec", ...)`` of a str or bytes source of at least ``MIN_SIZE`` bytes.
ASTs (``ast.parse``), ``eval``/``single`` mode and other calls go to the real ``compile()`` untouched. The key is the
BLAKE2b (256 bits) of the interpreter's bytecode magic, the effective compiler flags (the caller's ``__future__``
flags where ``dont_inherit`` is false, as ``compile()`` itself inherits them), the optimization level and the source,
so another Python, flag or source never reads an entry that is not its own. Entries are written whole (a temporary
file renamed into place); an entry that cannot be read or is not a code object is compiled again and replaced. A
compile that fails raises as before and caches nothing. What the cache does not give back: a ``SyntaxWarning`` or
``DeprecationWarning`` that compiling the source emits is emitted only when the source is compiled, not on a hit.

``GPUOPS_TEST_COMPILE_CACHE``: the cache directory (ansible_run.py names build/test-compile-cache in the checkout);
unset, empty or ``off``: no cache. A ``sitecustomize`` that this one shadows on sys.path is run after it.
With the compile cache on, the code Jinja compiles from a template is kept too, in its ``jinja`` folder
(gpuops_jinja_cache.py, issue 49); ``GPUOPS_TEST_JINJA_CACHE=off`` leaves Jinja alone. So are the filter, test,
lookup and action plugins that ansible's workers load, loaded before the fork (gpuops_plugin_preload.py, issue 49;
their names in its ``plugins`` folder); ``GPUOPS_TEST_PLUGIN_PRELOAD=off`` leaves ansible's plugin loaders alone.
So are the tasks ansible-playbook can finish without forking a worker: one that its ``when`` skips, one of ansible-core's
controller-side actions (gpuops_controller_tasks.py, issue 49; ansible-core 2.19); ``GPUOPS_TEST_CONTROLLER_TASKS=skip``
finishes the skips only, ``off`` leaves the strategies alone (as does ``GPUOPS_TEST_TASK_CPU``, a reading of every worker).
``GPUOPS_TEST_TASK_CPU``: a file where every process of the run writes its CPU seconds when it ends, per task and module
(gpuops_task_cpu.py, issue 49; tests/support/task_cpu.py sums them); it needs the cache's directory on PYTHONPATH, so
the compile cache on. Unset: nothing is recorded.
``GPUOPS_TEST_MODULE_SERVER``: a directory where the session's warm interpreter for module runs listens
(gpuops_module_server.py, issue 49); a Python started to read its script from standard input hands the script to it.
Unset, empty or ``off``: every module run starts its own interpreter. Where it is named, ansible's workers hand a
pipelined module run of their own interpreter to it themselves, without the shell and that Python
(gpuops_local_modules.py); ``GPUOPS_TEST_LOCAL_MODULES=off`` leaves that to the starter.
Every process that loads this file also freezes its objects before it forks (``gc.freeze``; unfrozen in the parent
after the fork): a forked child's collector then leaves the inherited heap alone (issue 49).
"""
import __future__
import _thread
import builtins
import gc
import marshal
import os
import sys
import types

try:
    import _imp
except ImportError:  # pragma: no cover - not CPython
    _imp = None

try:
    # the key's digest: BLAKE2b from its own small extension, not hashlib, which loads OpenSSL; with importlib.util
    # (below), about 8 ms of the start-up of a Python the tests' ansible runs start that imports neither itself (the
    # stand-ins, helm's wrapper; ansible's own commands import hashlib later anyway): issue 49
    from _blake2 import blake2b as _digest
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b as _digest

MIN_SIZE = 1024
_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast at every start-up
_FUTURE = 0
for _name in __future__.all_feature_names:
    _FUTURE |= getattr(__future__, _name).compiler_flag
_real_compile = builtins.compile


class CompileCache(object):
    """compile() with its code kept in ``directory``; ``hits`` and ``misses`` count this process's cacheable calls."""

    def __init__(self, directory, real=_real_compile):
        self.directory = directory
        self.real = real
        self.hits = 0
        self.misses = 0
        self._seed = _digest(_magic_number(), digest_size=32)

    def key(self, source, mode, flags, optimize):
        data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
        digest = self._seed.copy()
        settings = "%s %d %d %d %s\0" % (mode, flags, optimize, sys.flags.optimize, type(source).__name__)
        digest.update(settings.encode("ascii"))
        digest.update(data)
        return digest.hexdigest()

    def compile(self, source, filename, mode, flags=0, dont_inherit=False, optimize=-1, **kwargs):
        if (kwargs or mode != "exec" or flags & _ONLY_AST or not isinstance(source, (str, bytes))
                or len(source) < MIN_SIZE or not isinstance(filename, str)):
            return self.real(source, filename, mode, flags, dont_inherit, optimize, **kwargs)
        if not dont_inherit:
            # what compile() inherits: the __future__ flags of the code that calls it
            flags |= sys._getframe(1).f_code.co_flags & _FUTURE   # pylint: disable=protected-access
        key = self.key(source, mode, flags, optimize)
        path = os.path.join(self.directory, key[:2], key)
        code = self._read(path)
        if code is not None:
            if code.co_filename != filename and _imp is not None:
                _imp._fix_co_filename(code, filename)   # pylint: disable=protected-access
            if code.co_filename == filename:
                self.hits += 1
                return code
        code = self.real(source, filename, mode, flags, True, optimize)
        self.misses += 1
        self._write(path, code)
        return code

    @staticmethod
    def _read(path):
        code = read_marshal(path)
        return code if isinstance(code, types.CodeType) else None

    @staticmethod
    def _write(path, code):
        write_marshal(path, code)


def read_marshal(path):
    """The value marshal wrote to ``path``, or None where it cannot be read (missing, cut short, not marshal)."""
    try:
        with open(path, "rb") as handle:
            return marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def write_marshal(path, value):
    """Write ``value`` marshalled to ``path`` whole (a temporary file renamed into place); a failure writes nothing."""
    temp = "%s.%d.%d.tmp" % (path, os.getpid(), _thread.get_ident())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temp, "wb") as handle:
            handle.write(marshal.dumps(value))
        os.replace(temp, path)
    except (OSError, ValueError):
        try:
            os.unlink(temp)
        except OSError:
            pass


def append_line(path, line):
    """Append ``line`` (bytes) to ``path`` in one write in append mode, so that the lines of processes that write at
    once do not mix; a failure writes nothing (the files written so are readings and records, never a reason for a
    run to fail)."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(handle, line)
        finally:
            os.close(handle)
    except OSError:
        pass


def install(directory):
    """Route builtins.compile through a CompileCache in ``directory``; returns the cache."""
    cache = CompileCache(directory)
    builtins.compile = cache.compile
    return cache


def _magic_number():
    """The interpreter's bytecode magic (importlib.util.MAGIC_NUMBER) without importing importlib.util, which
    imports contextlib, functools and more (about 4 ms of a start-up): from the frozen module that holds it, which
    CPython's import system registers at start-up."""
    frozen = sys.modules.get("_frozen_importlib_external")
    if frozen is not None and isinstance(getattr(frozen, "MAGIC_NUMBER", None), bytes):
        return frozen.MAGIC_NUMBER
    import importlib.util   # pylint: disable=import-outside-toplevel
    return importlib.util.MAGIC_NUMBER


def _run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if not any(_may_hold_sitecustomize(p) for p in rest):
        return
    import importlib.machinery   # pylint: disable=import-outside-toplevel
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        # (only where there is one to run: importlib.util is about 4 ms of a start-up)
        import importlib.util   # pylint: disable=import-outside-toplevel
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _may_hold_sitecustomize(entry):
    """Whether the sys.path entry ``entry`` could give a ``sitecustomize`` to PathFinder: a folder with a name that
    starts so (a module, a package, an extension), or anything else that exists (a zip file). Looked at first because
    importlib.machinery, which finds the module, is about 3 ms of a start-up of a Python that has no other one to run
    (the stand-ins, helm's wrapper: issue 49)."""
    try:
        return any(name.startswith("sitecustomize") for name in os.listdir(entry or "."))
    except NotADirectoryError:
        return True
    except OSError:
        return False


def _jinja_cache(chosen, environment_module):
    import gpuops_jinja_cache   # pylint: disable=import-outside-toplevel
    gpuops_jinja_cache.install(os.path.join(chosen, gpuops_jinja_cache.FOLDER), read_marshal, write_marshal,
                               environment_module.Environment)


def _plugin_preload(chosen, queue_manager_module):
    import gpuops_plugin_preload   # pylint: disable=import-outside-toplevel
    gpuops_plugin_preload.install(os.path.join(chosen, gpuops_plugin_preload.FOLDER), queue_manager_module,
                                  sys.modules["ansible.plugins.loader"], append_line)


def _local_modules(directory, loader_module):
    import gpuops_local_modules   # pylint: disable=import-outside-toplevel
    import gpuops_module_server   # pylint: disable=import-outside-toplevel
    gpuops_local_modules.install(directory, loader_module, gpuops_module_server.hand_over)


def _controller_tasks(mode, strategy_module):
    import gpuops_controller_tasks   # pylint: disable=import-outside-toplevel
    gpuops_controller_tasks.install(strategy_module, mode)


def _start(environ):
    chosen = environ.get("GPUOPS_TEST_COMPILE_CACHE", "")
    cached = bool(chosen) and chosen.lower() != "off"
    if cached:
        # first, so that this directory's own modules imported below come from the cache too: the module server's
        # client, compiled from source in every handed run where no bytecode is written (as on CI, whose
        # PYTHONDONTWRITEBYTECODE is set), was about 4 ms of its start-up (issue 49)
        install(chosen)
    handed = None
    if environ.get("GPUOPS_TEST_MODULE_SERVER", "off") not in ("", "off") and sys.argv == [""] and not os.isatty(0):
        # a script read from standard input (a module run: ansible.cfg's pipelining) goes to the session's warm
        # interpreter where there is one for this interpreter (this directory's gpuops_module_server.py); the process
        # ends there, or gets the script back (declined) and runs it below, after its usual start-up
        import gpuops_module_server   # pylint: disable=import-outside-toplevel
        handed = gpuops_module_server.client(environ["GPUOPS_TEST_MODULE_SERVER"], environ)
    # a fork (ansible-playbook's task workers, the module server's runs) starts with its parent's objects frozen, so
    # that the child's collections never walk the heap it inherited (nor copy its pages by touching them); the
    # parent's objects go back to the oldest generation (issue 49: about 4 % of a lab converge's CPU)
    os.register_at_fork(before=gc.freeze, after_in_parent=gc.unfreeze)
    if cached:
        hooks = []
        if environ.get("GPUOPS_TEST_JINJA_CACHE", "").lower() != "off":
            # and the code of compiled Jinja templates (this directory's gpuops_jinja_cache.py), armed to install when
            # the process imports Jinja (ansible's commands and their workers; never a module run)
            hooks.append(("jinja2.environment", lambda module: _jinja_cache(chosen, module)))
        if environ.get("GPUOPS_TEST_PLUGIN_PRELOAD", "").lower() != "off":
            # and the filter, test, lookup and action plugins that ansible's forked workers load, loaded before the fork
            # (this directory's gpuops_plugin_preload.py), armed to install when a process imports ansible's
            # TaskQueueManager (ansible-playbook and ansible; never a module run)
            hooks.append(("ansible.executor.task_queue_manager", lambda module: _plugin_preload(chosen, module)))
        mode = environ.get("GPUOPS_TEST_CONTROLLER_TASKS", "")
        if mode.lower() != "off" and not environ.get("GPUOPS_TEST_TASK_CPU"):
            # and the tasks ansible-playbook can finish without forking a worker: a skip, an action of ansible-core's
            # that stays on the controller (this directory's gpuops_controller_tasks.py), armed to install when a
            # process imports ansible's strategies; not while GPUOPS_TEST_TASK_CPU reads the CPU of every worker
            hooks.append(("ansible.plugins.strategy", lambda module: _controller_tasks(mode, module)))
        server = environ.get("GPUOPS_TEST_MODULE_SERVER", "off")
        if (server not in ("", "off") and not environ.get("GPUOPS_TEST_TASK_CPU")
                and environ.get("GPUOPS_TEST_LOCAL_MODULES", "").lower() != "off"):
            # and the module runs of ansible's local connection handed to that server by the worker itself, without
            # the shell and the starter (this directory's gpuops_local_modules.py), armed to install when a process
            # imports ansible's plugin loaders (ansible's commands; never a module run)
            hooks.append(("ansible.plugins.loader", lambda module: _local_modules(server, module)))
        if hooks:
            from gpuops_after_import import AfterImport   # pylint: disable=import-outside-toplevel
            for name, callback in hooks:
                sys.meta_path.insert(0, AfterImport(name, callback))
    if environ.get("GPUOPS_TEST_ANSIBALLZ_CACHE"):
        # the session's shared AnsiballZ cache (this directory's gpuops_shared_ansiballz.py), imported only where the
        # environment names it; a module process inherits that environment too, and its hook never fires there
        # (a module imports no ansible.constants)
        import gpuops_shared_ansiballz   # pylint: disable=import-outside-toplevel
        gpuops_shared_ansiballz.install(environ)
    if environ.get("GPUOPS_TEST_TASK_CPU"):
        # where the CPU of a test's ansible runs goes, per task and module (this directory's gpuops_task_cpu.py), only
        # where the environment names its file
        import gpuops_task_cpu   # pylint: disable=import-outside-toplevel
        gpuops_task_cpu.install(environ["GPUOPS_TEST_TASK_CPU"], append_line)
    _run_shadowed_sitecustomize()
    if handed is not None:
        gpuops_module_server.run_source(handed)
