# -*- coding: utf-8 -*-
"""The one module shape (_module_run): a module run in-process through real AnsibleModule. What a user notices: check
mode reports the change and makes none, apply changes, apply again changes nothing, the diff is there only in diff
mode, bad input is refused before anything is read, and an error of the collection ends the run with its fields and
the result so far."""
import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _module_run
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import ModuleRun, run_module

STORE = {}      # the "device" the test module manages: one value


class Value(ModuleRun):
    argument_spec = dict(value=dict(type="str", required=True), fail_read=dict(type="bool", default=False),
                         fail_apply=dict(type="bool", default=False))
    errors = (KubeError,)

    def validate(self):
        return ["value %r is not lowercase (a-z)" % self.params["value"]] if not self.params["value"].islower() else []

    def read(self):
        STORE["reads"] = STORE.get("reads", 0) + 1
        self.result["before"] = STORE.get("value")
        if self.params["fail_read"]:
            raise KubeError("the API server said no", status=403, reason="Forbidden")
        return STORE.get("value")

    def plan(self, current):
        if current == self.params["value"]:
            return None
        self.set_diff({"value": current}, {"value": self.params["value"]}, header="the value")
        return [("set", self.params["value"])]

    def apply(self, current, changes):
        STORE["value"] = changes[0][1]
        if self.params["fail_apply"]:
            self.result["applied"] = changes
            raise _module_run.Failure("the value was set but reads back wrong", changes=len(changes), changed=True)


def run(capsys, args, check=False, diff=False):
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            run_module(Value)
    return json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def fresh_store():
    STORE.clear()


def test_check_mode_reports_apply_changes_and_again_changes_nothing(capsys):
    check = run(capsys, {"value": "on"}, check=True, diff=True)
    assert check["changed"] is True and "value" not in STORE
    assert check["diff"] == {"before": {"value": None}, "after": {"value": "on"},
                             "before_header": "the value", "after_header": "the value"}
    applied = run(capsys, {"value": "on"})
    assert applied["changed"] is True and STORE["value"] == "on" and "diff" not in applied   # no diff mode, no diff
    again = run(capsys, {"value": "on"}, diff=True)
    assert again["changed"] is False and "diff" not in again and again["before"] == "on"


def test_bad_input_is_refused_before_anything_is_read(capsys):
    res = run(capsys, {"value": "ON"})
    assert res["failed"] and res["changed"] is False
    assert res["msg"] == "invalid input, nothing changed: value 'ON' is not lowercase (a-z)"
    assert res["errors"] == ["value 'ON' is not lowercase (a-z)"] and "reads" not in STORE


def test_a_collection_error_fails_with_its_fields_and_the_result_so_far(capsys):
    STORE["value"] = "off"
    res = run(capsys, {"value": "on", "fail_read": True})
    assert res["failed"] and res["msg"] == "the API server said no"
    assert res["status"] == 403 and res["reason"] == "Forbidden" and res["before"] == "off"
    assert STORE["value"] == "off"


def test_a_failure_raised_from_a_hook_ends_the_run_with_the_result_and_its_fields(capsys):
    """A module fails by raising to the base (issue 48: no fail_json of its own): the result so far, the failure's
    fields winning over it."""
    res = run(capsys, {"value": "on", "fail_apply": True})
    assert res["failed"] and res["msg"] == "the value was set but reads back wrong"
    assert res["changed"] is True and res["changes"] == 1 and res["applied"] == [["set", "on"]]
    assert STORE["value"] == "on"
    assert issubclass(_module_run.Refusal, _module_run.Failure)


def test_a_refusal_reports_no_change_whatever_the_plan_said(capsys):
    """A Refusal is a failure before any change: changed=False, also raised from apply, after the base set changed
    from the plan; a Failure reports the result so far (here the plan's changed=True) unless it says otherwise."""
    class Refused(Value):
        def apply(self, current, changes):
            raise _module_run.Refusal("refused before any change", planned=len(changes))

    class Failed(Value):
        def apply(self, current, changes):
            raise _module_run.Failure("failed part way")
    args = {"value": "on", "_ansible_check_mode": False, "_ansible_diff": False}
    for run_class, changed in ((Refused, False), (Failed, True)):
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                run_module(run_class)
        res = json.loads(capsys.readouterr().out)
        assert res["failed"] and res["changed"] is changed, res
    assert "value" not in STORE


def test_one_wording_for_a_failure_before_any_change():
    assert _module_run.nothing_changed("spec_path must be absolute.") == "spec_path must be absolute; nothing changed"
    assert _module_run.nothing_changed("x; ") == "x; nothing changed"
    assert _module_run.invalid_input(["a", "b"]) == "invalid input, nothing changed: a; b"


def test_failure_maps_the_fields_an_error_carries_and_nothing_else():
    class Busy(ValueError):
        busy = [4242]
    got = _module_run.failure(Busy("GPU 0 is in use"), {"changed": False, "gpus": []})
    assert got == {"msg": "GPU 0 is in use", "busy": [4242], "changed": False, "gpus": []}


def test_done_ends_the_run_with_its_answer_and_nothing_is_planned_or_applied(capsys):
    """An answer known before any plan (a skip, a verified state that holds): the run succeeds with its fields and
    the result so far; plan, apply and after do not run."""
    class Skipped(Value):
        def read(self):
            self.result["before"] = "read"
            raise _module_run.Done(skipped_reason="nothing to manage here")

        def plan(self, current):
            raise AssertionError("no plan after Done")
    args = {"value": "on", "_ansible_check_mode": False, "_ansible_diff": False}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            run_module(Skipped)
    res = json.loads(capsys.readouterr().out)
    assert not res.get("failed") and res["changed"] is False
    assert res["skipped_reason"] == "nothing to manage here" and res["before"] == "read" and "value" not in STORE


def test_an_error_named_in_refusals_is_a_refusal_with_its_errors(capsys):
    """A planner's error (it lists every problem) named in ``refusals``: one wording ("...; nothing changed"),
    changed=False, its ``errors``; ``failing`` has the last word on the result first."""
    class PlanError(ValueError):
        def __init__(self, errors):
            self.errors = errors
            super(PlanError, self).__init__("; ".join(errors))

    class Refusing(Value):
        refusals = (PlanError,)

        def plan(self, current):
            raise PlanError(["a is wrong", "b is wrong"])

        def failing(self, exc):
            self.result["seen"] = type(exc).__name__
    args = {"value": "on", "_ansible_check_mode": False, "_ansible_diff": False}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            run_module(Refusing)
    res = json.loads(capsys.readouterr().out)
    assert res["failed"] and res["changed"] is False and res["msg"] == "a is wrong; b is wrong; nothing changed"
    assert res["errors"] == ["a is wrong", "b is wrong"] and res["seen"] == "Refusal"

    class Worded(Value):
        def failing(self, exc):         # the failure reported instead: a library's error in the module's words
            return _module_run.Failure("install the thing: %s" % exc, changed=False)
    with patch_module_args(dict(args, fail_read=True)):
        with pytest.raises(SystemExit):
            run_module(Worded)
    res = json.loads(capsys.readouterr().out)
    assert res["failed"] and res["msg"] == "install the thing: the API server said no" and "status" not in res


def test_retry_makes_the_whole_attempt_again_and_wait_reads_the_table_with_the_runs_clock(capsys):
    """``retry`` is the hook a layer's base fills (the Kubernetes one: on 409 Conflict): it runs read -> plan ->
    apply -> after as one attempt. ``wait`` reads until the table's condition holds, on the run's clock and sleep."""
    calls = []

    class Twice(Value):
        def retry(self, attempt):
            calls.append("first")
            attempt()
            calls.append("again")
            return attempt()
    args = {"value": "on", "_ansible_check_mode": False, "_ansible_diff": False}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            run_module(Twice)
    res = json.loads(capsys.readouterr().out)
    assert calls == ["first", "again"] and STORE["reads"] == 2 and res["changed"] is False     # the second found it

    now, slept = [0.0], []

    class Waiting(Value):
        def clock(self):                    # a test's clock and sleep, on the class
            return now[0]

        def sleep(self, seconds):
            slept.append(seconds)
            now[0] += seconds
    with patch_module_args(dict(args)):
        waiting = Waiting(AnsibleModule(argument_spec=Value.argument_spec))
    states = iter(["pending", None, "success"])
    polled = waiting.wait("mig_manager", lambda: next(states), timeout=60, interval=5)
    assert polled.done and polled.seen == "success" and slept == [5, 5] and polled.waited == 10
