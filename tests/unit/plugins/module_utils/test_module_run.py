# -*- coding: utf-8 -*-
"""The one module shape (_module_run): a module run in-process through real AnsibleModule. What a user notices: check
mode reports the change and makes none, apply changes, apply again changes nothing, the diff is there only in diff
mode, bad input is refused before anything is read, and an error of the collection ends the run with its fields and
the result so far."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.nvidia.plugins.module_utils import _module_run
from ansible_collections.gpuops.nvidia.plugins.module_utils._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils._module_run import ModuleRun, run_module

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
