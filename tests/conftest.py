"""Test-wide setup: make the collection importable as ansible_collections.gpuops.nvidia."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
# The tests' compile cache (tests/support/compile_cache/sitecustomize.py) for every ansible command of the session,
# those of the benches that tests run included (bench/ uses it only where the environment names it).
os.environ.setdefault("GPUOPS_TEST_COMPILE_CACHE", os.path.join(ROOT, "build", "test-compile-cache"))


# The order pytest-xdist gets the tests in (`make test`: -n 2 --dist worksteal). worksteal gives each worker a
# contiguous share of the collection, in order, and a worker that runs out takes the second half of another's queue,
# from its end. Each share is therefore built as: the slow tests (tests/integration, tests/reliability: converges of
# 10 to 190 s), the files whose single tests are the longest first (85 to 190 s each on CI's 2 cores:
# docs/readings/test-time-session8.md), then the fast ones (unit tests, under a few seconds). Both workers start on
# long tests and end on short ones, and what one takes from the other is short: no long test starts when the rest of
# the run is short (docs/readings/test-time-session9.md: the run ended with one core idle for about 80 s when one
# worker's share held every slow test and the other took from its end).
LONGEST_FIRST = ("tests/integration/test_site_health.py", "tests/integration/test_bench_driver_flow.py",
                 "tests/integration/test_site_kube.py", "tests/integration/test_site_molecule.py",
                 "tests/integration/test_site_lab.py", "tests/integration/test_site_operator.py")
SLOW = ("tests/integration/", "tests/reliability/")


def worker_order(paths, workers):
    """The indices of tests at ``paths`` (in collection order) in the order described above, for ``workers``."""
    rank = dict((path, i) for i, path in enumerate(LONGEST_FIRST))
    order = sorted(range(len(paths)), key=lambda i: rank.get(paths[i].split("::", 1)[0], len(rank)))
    slow = [i for i in order if paths[i].startswith(SLOW)]
    fast = [i for i in order if not paths[i].startswith(SLOW)]
    slow_shares = [slow[worker::workers] for worker in range(workers)]
    shares, left = [], len(paths)
    for worker in range(workers):
        size = left // (workers - worker)     # the share worksteal sends this worker (xdist/scheduler/worksteal.py)
        left -= size
        mine, over = slow_shares[worker][:size], slow_shares[worker][size:]
        if over:                              # more slow tests than the share holds: the next share starts with them
            slow_shares[worker + 1][:0] = over
        taken = size - len(mine)
        shares.extend(mine + fast[:taken])
        fast = fast[taken:]
    return shares


def pytest_collection_modifyitems(config, items):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    items[:] = [items[i] for i in worker_order([item.nodeid for item in items], workers)]
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
