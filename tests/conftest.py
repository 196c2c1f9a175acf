"""Test-wide setup: make the collection importable as ansible_collections.gpuops.nvidia."""
import os
import shutil
import sys

import pytest

from tests.support.ansible_run import COMPILE_CACHE, SESSION_TMPDIR, ansible_env
from tests.support.compile_cache import gpuops_module_server as module_server
from tests.support.compile_cache.gpuops_module_server import VARIABLE
from tests.support.converged_lab import session_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
# The tests' compile cache (tests/support/compile_cache/sitecustomize.py) for every ansible command of the session,
# those of the benches that tests run included (tests/support/ansible_run.py, with_compile_cache).
os.environ.setdefault("GPUOPS_TEST_COMPILE_CACHE", COMPILE_CACHE)
# The Python the stand-ins of tests/support/bin run on (their `exec "${GPUOPS_TEST_PYTHON:-python3}"`): this one, for
# every process the tests start. `python3` on PATH can be a version manager's shim (pyenv's: about 0.09 CPU s a call
# against 0.015 for the interpreter itself), and the tests' ansible runs already put this Python's bin first on PATH.
os.environ.setdefault("GPUOPS_TEST_PYTHON", sys.executable)
# Each test's CPU seconds, wall seconds and ansible runs, merged per file into build/test-logs/test-costs.md at the
# end of the run (issue 49; off with -p no:tests.support.cost_table).
pytest_plugins = ("tests.support.cost_table",)


@pytest.fixture(scope="session", autouse=True)
def shared_ansiballz_cache(tmp_path_factory):
    """One AnsiballZ cache for the session's ansible runs against this checkout's collection
    (tests/support/compile_cache/gpuops_shared_ansiballz.py), and one temporary folder for them
    (tests/support/ansible_run.py, ansible_env): new in each session, shared by its xdist workers."""
    os.environ.setdefault("GPUOPS_TEST_ANSIBALLZ_CACHE", str(session_root(tmp_path_factory) / "ansiballz-cache"))
    os.environ.setdefault("GPUOPS_TEST_ANSIBALLZ_COLLECTIONS", COLLECTIONS)
    # the temporary folder of the session's ansible commands (tests/support/ansible_run.py, ansible_env)
    os.environ.setdefault(SESSION_TMPDIR, str(session_root(tmp_path_factory) / "ansible-tmp"))
    yield


# The tests whose assertions are about module processes themselves: they find a module among ansible-playbook's
# descendants, kill the process group a stand-in names (the module's) or kill a run while a module may be running.
# Their ansible runs start every module in its own interpreter, as a node does; the other tests' module runs fork from
# the session's warm interpreter (tests/support/compile_cache/gpuops_module_server.py, issue 49). Two kill tests use
# it: test_site_chart_flow kills ansible-playbook stopped at a task's start (no module running), test_site_driver_live
# kills the module a stand-in stopped by its PID (the stand-in's parent: the module's own process either way). The SIGKILL
# series' clean converge and its re-runs after the kills name the server again (module_server_env below): only the
# killed run starts its modules in their own interpreters.
MODULE_PROCESS_TESTS = ("tests/reliability/test_sigkill_site.py", "tests/reliability/test_sigkill_module.py",
                        "tests/reliability/test_sigkill_driver_modules.py",
                        "tests/reliability/test_sigkill_health_quarantine.py", "tests/reliability/test_fuzz_inputs.py",
                        "tests/integration/test_site_slices.py::"
                        "test_a_killed_lock_holder_is_taken_over_after_its_lease_expires",
                        "tests/unit/plugins/modules/test_cdi_spec.py::"
                        "test_a_run_killed_between_generate_and_replace_leaves_the_old_spec_whole")


def starts_its_own_modules(nodeid):
    """Whether the test ``nodeid`` is one of MODULE_PROCESS_TESTS (a file: each of its tests; file::test: that test
    and each of its parameters)."""
    return any(nodeid == name or nodeid.startswith(name + ("[" if "::" in name else "::"))
               for name in MODULE_PROCESS_TESTS)


@pytest.fixture(scope="session")
def _module_server(tmp_path_factory, shared_ansiballz_cache):   # pylint: disable=unused-argument,redefined-outer-name
    """This pytest process's warm interpreter for module runs, started with the environment of the tests' ansible
    commands (so that their module runs find it); none where GPUOPS_TEST_MODULE_SERVER is already set (``off``: none
    at all) or the system cannot run it."""
    if VARIABLE in os.environ or not module_server.available():
        yield None
        return
    directory = module_server.socket_folder(str(tmp_path_factory.mktemp("ms")))
    server = module_server.Started(directory, ansible_env())
    try:
        yield server if server.ready() else None
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def module_server_for_test(request, _module_server, monkeypatch):   # pylint: disable=redefined-outer-name
    """The session's module server named for this test's ansible runs, unless the test is one of MODULE_PROCESS_TESTS
    (a file: all its tests; file::test: that test, each of its parameters)."""
    if _module_server is not None and not starts_its_own_modules(request.node.nodeid):
        monkeypatch.setenv(VARIABLE, _module_server.directory)
    yield


@pytest.fixture(scope="session")
def module_server_env(_module_server):   # pylint: disable=redefined-outer-name
    """The environment that names the session's module server ({} where there is none): for the ansible runs of a
    MODULE_PROCESS_TESTS test whose processes its assertions do not look at (the SIGKILL series' clean converge and
    its re-run after a kill), so that only the run it kills starts its modules in their own interpreters."""
    return {VARIABLE: _module_server.directory} if _module_server is not None else {}


# The files whose tests are the longest single tests of `make test` (each 85 to 190 s on CI's 2 cores:
# in git history: docs/readings/test-time-session8.md at 87479e5), run first: pytest-xdist hands out the collection
# in order, and one of them started last keeps one worker busy for minutes after the other has finished. Their own
# order is kept.
LONGEST_FIRST = ("tests/integration/test_site_health.py", "tests/integration/test_bench_driver_flow.py",
                 "tests/integration/test_site_kube.py", "tests/integration/test_site_molecule.py",
                 "tests/integration/test_site_lab.py", "tests/integration/test_site_operator.py")


def pytest_collection_modifyitems(config, items):
    rank = dict((path, i) for i, path in enumerate(LONGEST_FIRST))
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    if os.environ.get("GPUOPS_REAL_GPU") == "1":
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU: set GPUOPS_REAL_GPU=1 on a GPU host")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


KUBE_TOKEN = "gpuops-test-token"
KUBE_RO_TOKEN = "gpuops-readonly-token"


@pytest.fixture
def kube_api(tmp_path):
    """A running fake Kubernetes API server (tests/support/fake_kube_api.py) with bearer-token auth.

    ``kube_api.kubeconfig_path`` is a kubeconfig (context ``fake``) with a read-write token;
    ``kube_api.token`` / ``kube_api.ro_token`` are the read-write and read-only tokens.
    """
    import yaml
    from tests.support.fake_kube_api import FakeKubeApi

    api = FakeKubeApi(tokens={KUBE_TOKEN: "rw", KUBE_RO_TOKEN: "ro"}).start()
    api.token, api.ro_token = KUBE_TOKEN, KUBE_RO_TOKEN
    api.kubeconfig_path = str(tmp_path / "kubeconfig")
    with open(api.kubeconfig_path, "w") as handle:
        yaml.safe_dump(api.kubeconfig(token=KUBE_TOKEN), handle)
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def no_ambient_kube_credentials(monkeypatch, tmp_path):
    """No K8S_AUTH_* or KUBECONFIG of the machine running the tests reaches a module, and HOME (~/.kube/config) is a
    scratch directory: a module under test talks only to the cluster the test gives it."""
    for var in list(os.environ):
        if var.startswith("K8S_AUTH_") or var == "KUBECONFIG":
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
