"""_kube_service.retry_on_conflict: the one read -> plan -> write loop on 409 Conflict. First with the KubeErrors
_kube.api_error words from the API's answers, then a real read-merge-write of a ConfigMap against the fake API server
(real HTTP) that another writer changes between the read and the write."""
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import (
    retry_on_conflict, write_as_planned)


def _error(status, reason):
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status, "reason": reason,
                       "message": "injected %d" % status})
    return _kube.api_error(status, reason, body, "patch node n1", "https://api:6443")


class Attempts(object):
    """An attempt that raises the given errors in turn, then answers the number of its call."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer %d" % self.calls


def test_a_conflict_is_tried_again_up_to_the_tries_and_success_ends_the_calls():
    attempt = Attempts(_error(409, "Conflict"), _error(409, "Conflict"))
    conflicts = []
    assert retry_on_conflict(attempt, tries=3, between=conflicts.append) == "answer 3"
    assert attempt.calls == 3
    assert [c.status for c in conflicts] == [409, 409]
    once = Attempts()
    assert retry_on_conflict(once, tries=5) == "answer 1" and once.calls == 1     # success: nothing called again


def test_other_statuses_pass_through_at_once():
    for status, reason in ((500, "InternalError"), (404, "NotFound"), (422, "Invalid"), (403, "Forbidden")):
        attempt = Attempts(_error(status, reason))
        with pytest.raises(_kube.KubeError) as exc:
            retry_on_conflict(attempt, tries=3, between=pytest.fail, exhausted=pytest.fail)
        assert exc.value.status == status and attempt.calls == 1
    attempt = Attempts(_error(409, "Conflict"), ValueError("not the API's"))
    with pytest.raises(ValueError):
        retry_on_conflict(attempt, tries=3)
    assert attempt.calls == 2


def test_the_last_conflict_is_raised_after_the_tries_or_handed_to_exhausted():
    attempt = Attempts(*[_error(409, "Conflict") for dummy in range(4)])
    conflicts = []
    with pytest.raises(_kube.KubeError) as exc:
        retry_on_conflict(attempt, tries=3, between=conflicts.append)
    assert attempt.calls == 3 and len(conflicts) == 2       # no wait after the last try
    assert exc.value.status == 409 and exc.value.msg == "conflict (409) while trying to patch node n1: injected 409"
    assert retry_on_conflict(Attempts(_error(409, "AlreadyExists")), tries=1,
                             exhausted=lambda conflict: "gave up on %d" % conflict.status) == "gave up on 409"
    assert retry_on_conflict(Attempts(_error(409, "Conflict")), tries=2) == "answer 2"
    with pytest.raises(ValueError):
        retry_on_conflict(Attempts(), tries=0)


def test_a_concurrent_writer_makes_the_write_read_and_merge_again(kube_api):
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"},
                  "data": {"other": "1"}})
    kube = _kube.Kube.from_params(dict(kubeconfig=kube_api.kubeconfig_path))
    path = _kube.configmap_path("ns", "cm")
    reads = []

    def add_mine():
        current = kube.get("read ConfigMap ns/cm", path)
        reads.append(dict(current["data"]))
        if len(reads) == 1:            # another writer stores its key between this read and this write
            kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"},
                          "data": {"other": "2"}})
        return _kube.write_configmap(kube, "ns", "cm", dict(current["data"], mine="x"), current)

    answer = retry_on_conflict(add_mine, tries=3)
    assert reads == [{"other": "1"}, {"other": "2"}]
    assert answer["data"] == {"other": "2", "mine": "x"}                 # the other writer's value is kept
    patches = [r["code"] for r in kube_api.requests if r["method"] == "PATCH"]
    assert patches == [409, 200]


def test_write_as_planned_writes_the_plan_first_and_replans_only_after_a_conflict():
    written, replans = [], []

    def write(plan):
        written.append(plan)
        if len(written) == 1:
            raise _kube.KubeError("conflict", status=409)
        return "done"

    def replan():
        replans.append(1)
        return "plan on the node as read again"

    assert write_as_planned("plan on the node as read", replan, write) == "done"
    assert written == ["plan on the node as read", "plan on the node as read again"] and replans == [1]
    # no conflict: the plan is written once, nothing read again
    written[:], replans[:] = ["x"], []
    assert write_as_planned("p", replan, write) == "done" and replans == []


def test_kube_run_tries_read_plan_apply_again_after_a_conflict_and_forgets_the_lost_try(kube_api, capsys):
    """The Kubernetes modules' base: a write that another writer beat (409) makes the whole read -> plan -> apply
    run again on what is there now, ``conflict_tries`` in all, ``forget`` called between; the client is built from
    the authentication options; the last conflict fails the run with the API's status."""
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module

    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"},
                  "data": {"other": "1"}})
    path = _kube.configmap_path("ns", "cm")

    class AddMine(KubeRun):
        argument_spec = dict(_kube.AUTH_ARG_SPEC, beaten=dict(type="int", default=1))
        conflict_tries = 3

        def read(self):
            current = self.kube.get("read ConfigMap ns/cm", path)
            self.result.setdefault("reads", []).append(dict(current["data"]))
            if len(self.result["reads"]) <= self.params["beaten"]:     # another writer, between read and write
                kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"},
                              "data": {"other": str(len(self.result["reads"]) + 1)}})
            return current

        def plan(self, current):
            return None if current["data"].get("mine") else dict(current["data"], mine="x")

        def apply(self, current, changes):
            self.result["data"] = _kube.write_configmap(self.kube, "ns", "cm", changes, current)["data"]

        def forget(self, conflict):
            self.result.setdefault("forgot", []).append(conflict.status)

    def run(beaten):
        with patch_module_args(dict(kubeconfig=kube_api.kubeconfig_path, beaten=beaten)):
            with pytest.raises(SystemExit):
                run_module(AddMine)
        return json.loads(capsys.readouterr().out)

    res = run(1)
    assert res["changed"] is True and res["data"] == {"other": "2", "mine": "x"}       # the other's value kept
    assert res["reads"] == [{"other": "1"}, {"other": "2"}] and res["forgot"] == [409]
    kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"},
                  "data": {"other": "1"}})
    res = run(3)
    assert res["failed"] and res["status"] == 409 and "conflict (409)" in res["msg"]
    assert len(res["reads"]) == 3 and res["forgot"] == [409, 409]
