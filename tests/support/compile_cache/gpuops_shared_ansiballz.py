"""One AnsiballZ cache for every ansible command of a test session (issue 49), loaded by this directory's
sitecustomize.py where the environment names it.

ansible-core builds a module's payload (the module and every module_utils file it imports, found by parsing them:
``recursive_finder`` in ansible/executor/module_common.py) once per module per run and keeps it in
``<DEFAULT_LOCAL_TMP>/ansiballz_cache``, keyed by the module's name, its compression and its extensions.
DEFAULT_LOCAL_TMP is a new directory of each run, removed at its end: every ansible-playbook a test starts built
every payload again (about 7 of a 60 CPU-second lab converge on 2 cores, and the suite starts a few hundred runs).
Here that directory's ``ansiballz_cache`` is a link to a folder shared by the session's runs, so the first run
builds a module's payload and the later ones read it: ansible-core's own cache entries, written and locked by
ansible-core's own code (it locks an entry while writing it, as its forks already share the folder within a run).

It is safe only where every run of the session builds the same payloads, which is why it applies only when:

- ``GPUOPS_TEST_ANSIBALLZ_CACHE`` names the folder (tests/conftest.py: under the session's temporary directory, so a
  session starts empty and never sees payloads of an earlier checkout), and
- ``ANSIBLE_COLLECTIONS_PATH`` is exactly ``GPUOPS_TEST_ANSIBALLZ_COLLECTIONS`` (this checkout's .collections):
  a test that runs ansible against another copy of the collection (a built artifact, an AWX project) builds its
  own payloads as before;

and the folder has one subfolder per ansible-core version and Python (another core's payload of
``ansible.builtin.copy`` differs). The tests do not change the collection's sources while they run.
"""
import os
import sys

from gpuops_after_import import AfterImport

TRIGGER = "ansible.constants"


def link(constants, shared):
    """Make ``constants.DEFAULT_LOCAL_TMP``'s ansiballz_cache a link to this ansible-core's subfolder of ``shared``;
    returns the subfolder, or None where it did nothing (no local temporary folder, or a cache already there)."""
    local_tmp = getattr(constants, "DEFAULT_LOCAL_TMP", None)
    if not local_tmp:
        return None
    release = sys.modules.get("ansible.release")
    version = getattr(release, "__version__", None) or "unknown"
    folder = os.path.join(shared, "ansible-core-%s-py%d.%d" % ((version,) + sys.version_info[:2]))
    entry = os.path.join(local_tmp, "ansiballz_cache")
    try:
        os.makedirs(folder, exist_ok=True)
        os.makedirs(local_tmp, exist_ok=True)
        os.symlink(folder, entry)
    except OSError:
        return None             # the run builds its own payloads, as without this file
    return folder


def install(environ):
    """Arm the link for this process where ``environ`` asks for it (see the module's docstring); True if armed."""
    shared = environ.get("GPUOPS_TEST_ANSIBALLZ_CACHE", "")
    collections = environ.get("GPUOPS_TEST_ANSIBALLZ_COLLECTIONS", "")
    if not shared or not collections or environ.get("ANSIBLE_COLLECTIONS_PATH") != collections:
        return False
    if TRIGGER in sys.modules:
        link(sys.modules[TRIGGER], shared)
    else:
        sys.meta_path.insert(0, AfterImport(TRIGGER, lambda module: link(module, shared)))
    return True
