"""The tests' start-up hook (issue 49). tests/support/ansible_run.py puts this directory first on PYTHONPATH of the
ansible commands it runs, so Python imports this file at start-up (site.py's ``sitecustomize``); what the hook does
(the compile cache and the hooks it arms) is gpuops_startup.py, whose code this file loads and starts.

Why two files: the file Python imports as ``sitecustomize`` is compiled from source at every start where no bytecode
is written (PYTHONDONTWRITEBYTECODE, as on CI), since the compile cache it installs cannot serve its own import.
gpuops_startup.py's code took about 5 ms of each such start (some 7 000 Pythons a make test: module runs' starters,
stand-ins, ansible's commands). Its code is kept in the compile cache's ``startup`` folder, keyed by the interpreter's
bytecode magic, the file's path and its source, and read back by every later start; this file is small enough to
compile in a fraction of that. Without the compile cache (GPUOPS_TEST_COMPILE_CACHE unset, empty or ``off``)
gpuops_startup is imported as usual.
"""
import marshal
import os
import sys

FOLDER = "startup"


def load(environ):
    """The module gpuops_startup, its code read from the compile cache named in ``environ`` where an entry for this
    source is there, else compiled (and the entry written). ``loaded_from``: "cache", "source" or "import"."""
    chosen = environ.get("GPUOPS_TEST_COMPILE_CACHE", "")
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", None)
    if not chosen or chosen.lower() == "off" or not isinstance(magic, bytes):
        import gpuops_startup   # pylint: disable=import-outside-toplevel
        gpuops_startup.loaded_from = "import"
        return gpuops_startup
    try:
        from _blake2 import blake2b   # pylint: disable=import-outside-toplevel
    except ImportError:  # pragma: no cover - an interpreter built without it
        from hashlib import blake2b   # pylint: disable=import-outside-toplevel
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpuops_startup.py")
    with open(path, "rb") as handle:
        source = handle.read()
    key = blake2b(b"\0".join((magic, os.fsencode(path), source)), digest_size=32).hexdigest()
    entry = os.path.join(chosen, FOLDER, key)
    try:
        with open(entry, "rb") as handle:
            code = marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        code = None
    fresh = not isinstance(code, type(load.__code__))
    if fresh:
        code = compile(source, path, "exec", dont_inherit=True)
    module = type(sys)("gpuops_startup")
    module.__file__ = path
    sys.modules["gpuops_startup"] = module
    exec(code, module.__dict__)   # pylint: disable=exec-used
    module.loaded_from = "source" if fresh else "cache"
    if fresh:
        module.write_marshal(entry, code)   # whole (renamed into place): starts at once read it whole or not at all
    return module


if __name__ == "sitecustomize":   # (the tests load this file under another name, to test it)
    load(os.environ)._start(os.environ)   # pylint: disable=protected-access
