"""cluster_lease: the module in-process against the fake API server (real HTTP, the real kubernetes client), then
once as its own process (as Ansible runs it) to see the renewer: it renews while its owner lives, lets the module's
output end at once, and stops when the owner is gone."""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _lease
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_lease
from tests.support.ansible_run import module_process_env
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.modrun import run_main


pytestmark = pytest.mark.usefixtures("no_ambient_credentials")


def _args(kube_api, **kw):
    args = dict(kubeconfig=kube_api.kubeconfig_path, namespace="gpu-ops", renew=False, owner_pid=os.getpid(),
                holder="test run")
    args.update(kw)
    return args


def _lease_obj(kube_api):
    return kube_api.get("coordination.k8s.io", "leases", "gpuops-nvidia-cluster", "gpu-ops")


def test_check_mode_then_acquire_then_idempotent_then_release(kube_api):
    # check mode without the namespace: says what it would create, stores nothing, dry runs only
    res = run_main(cluster_lease.main, _args(kube_api), check_mode=True, diff=True)
    assert res["changed"] and not res["acquired"] and "would be created" in res["msg"], res
    assert res["diff"]["after"]["holder"] == res["identity"]
    assert kube_api.writes(dry_run=False) == [] and not [k for k in kube_api.objects if k[1] == "namespaces"]
    # check mode with the namespace: the write it would make goes as a dry run
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-ops"}})
    res = run_main(cluster_lease.main, _args(kube_api), check_mode=True, diff=True)
    assert res["changed"] and res["how"] == "created" and not res["acquired"]
    assert _lease_obj(kube_api) is None and kube_api.writes(dry_run=False) == []
    assert kube_api.writes()[-1]["path"] == "/apis/coordination.k8s.io/v1/namespaces/gpu-ops/leases"

    res = run_main(cluster_lease.main, _args(kube_api), diff=True)
    assert res["changed"] and res["acquired"] and res["how"] == "created", res
    after = {"holder": res["identity"], "lease_duration": 60, "transitions": 0}
    assert res["diff"] == {"before": {}, "after": after}
    assert res["identity"].startswith("test run on ") and " pid %d #" % os.getpid() in res["identity"]
    assert _lease_obj(kube_api)["spec"]["holderIdentity"] == res["identity"]
    writes = len(kube_api.writes())
    again = run_main(cluster_lease.main, _args(kube_api))
    assert again["changed"] is False and again["how"] == "held" and again["acquired"]

    rel = run_main(cluster_lease.main, _args(kube_api, state="released", converged="abc", run_id="r1"), diff=True)
    assert rel["changed"] and rel["diff"]["before"]["holder"] == res["identity"] and rel["diff"]["after"]["holder"] == ""
    assert rel["converged"]["digest"] == "abc" and rel["converged"]["run"] == "r1"
    assert rel["converged"]["by"] == res["identity"]
    assert run_main(cluster_lease.main, _args(kube_api, state="released"))["changed"] is False
    assert len(kube_api.writes()) == writes + 2          # the renewal of the second acquire, the release
    query = run_main(cluster_lease.main, _args(kube_api, state="query"))
    assert query["changed"] is False and query["lease"]["holder"] == "" and query["converged"]["digest"] == "abc"
    assert "is free" in query["msg"]


def test_held_by_another_run_fails_after_the_wait_and_names_it(kube_api):
    first = run_main(cluster_lease.main, _args(kube_api, holder="AWX job 1"))
    assert first["acquired"]
    other = _args(kube_api, holder="AWX job 2", owner_pid=os.getppid(), wait_timeout=1)
    res = run_main(cluster_lease.main, other, check_mode=True)
    assert res["changed"] and res["how"] == "would wait" and "AWX job 1" in res["msg"], res
    res = run_main(cluster_lease.main, other)
    assert res["failed"] and "held by 'AWX job 1 on " in res["msg"] and "waited 1 s (wait_timeout)" in res["msg"]
    assert "nothing changed" in res["msg"]
    assert _lease_obj(kube_api)["spec"]["holderIdentity"] == first["identity"]
    rel = run_main(cluster_lease.main, dict(other, state="released"))
    assert rel["changed"] is False and "not by this run" in rel["msg"]


@pytest.mark.parametrize("kw,fragment", [
    (dict(namespace="Bad_NS"), "a lowercase RFC 1123 label"),
    (dict(name="no spaces"), "a lowercase RFC 1123 subdomain"),
    (dict(lease_duration=2), "lease_duration must be a whole number of seconds from 3 to 86400"),
    (dict(lease_duration=10 ** 400), "lease_duration must be a whole number of seconds from 3 to 86400"),
    (dict(wait_timeout=-1), "wait_timeout must be a whole number of seconds from 0 to 86400"),
    (dict(wait_timeout=10 ** 18), "wait_timeout must be a whole number of seconds from 0 to 86400"),
    (dict(arrival_timeout=86401), "arrival_timeout must be a whole number of seconds from 0 to 86400"),
    (dict(run_slices=3), "run_slices=3 needs run_id"),
    (dict(run_slices=0, run_id="r"), "run_slices must be from 1 to 1000, got 0"),
    (dict(run_slices=2 ** 63, run_id="r"), "run_slices must be from 1 to 1000"),
    (dict(converged="x"), "use it with state=released"),
    (dict(holder="two\nlines"), "holder must be one line"),
])
def test_bad_input_refused_before_any_call(kube_api, kw, fragment):
    res = run_main(cluster_lease.main, _args(kube_api, **kw))
    assert res["failed"] and fragment in res["msg"], res
    assert kube_api.requests == []


def _module_process(tmp_path, args):
    path = str(tmp_path / "args.json")
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    env = module_process_env()
    return subprocess.run([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules.cluster_lease",
                           path], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60, check=False)


def _renew_time(kube_api):
    return _lease_obj(kube_api)["spec"]["renewTime"]


def _renewed_within(kube_api, seconds):
    first = _renew_time(kube_api)
    deadline = time.monotonic() + seconds
    while _renew_time(kube_api) == first:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture
def tls_kube_api(tmp_path):
    """The fake API server over HTTPS, with its CA in the kubeconfig as certificate-authority-data: the kubernetes
    client writes it to a temporary file that it deletes when the module's process exits."""
    api = FakeKubeApi(tokens={"rw-token": "rw"}).start(tls_dir=str(tmp_path))
    api.kubeconfig_path = str(tmp_path / "kubeconfig")
    with open(api.kubeconfig_path, "w") as handle:
        yaml.safe_dump(api.kubeconfig(token="rw-token"), handle)
    try:
        yield api
    finally:
        api.stop()


def test_the_renewer_follows_the_owner_then_the_runs_marked_tasks_then_stops(tls_kube_api, tmp_path):
    kube_api = tls_kube_api
    owner = subprocess.Popen(["sleep", "120"])             # stands for ansible-playbook
    task = subprocess.Popen(["sleep", "120"], env=dict(os.environ, **{_lease.MARKER_ENV: "m-1"}))  # and helm
    renewer = None
    try:
        start = time.monotonic()
        proc = _module_process(tmp_path, _args(kube_api, renew=True, owner_pid=owner.pid, lease_duration=3,
                                               run_marker="m-1"))
        assert time.monotonic() - start < 30, "the module's output did not end with the module"
        res = json.loads(proc.stdout[proc.stdout.index("{"):])
        assert res["acquired"] and res["renewer_pid"], (res, proc.stderr)
        renewer = res["renewer_pid"]
        assert _renewed_within(kube_api, 20), "no renewal within 20 s (interval 1 s)"
        renewals = [r for r in kube_api.requests if r["query"].get("fieldManager") == [_lease.RENEWER_FIELD_MANAGER]]
        assert renewals and all(r["code"] == 200 for r in renewals)
        owner.kill()
        owner.wait()
        assert _renewed_within(kube_api, 20), "ansible-playbook is gone but a marked task runs: still renewed"
    finally:
        for proc in (owner, task):
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 20
    while _lease.proc_stat(renewer) and _lease.proc_stat(renewer)[0] not in ("Z", "X"):
        assert time.monotonic() < deadline, "the renewer outlived its run by 20 s"
        time.sleep(0.2)
    assert not _renewed_within(kube_api, 2.5)   # more than two renewal intervals: nobody renews the dead run's lease
    assert _lease_obj(kube_api)["spec"]["holderIdentity"] == res["identity"]    # it expires, nobody released it
