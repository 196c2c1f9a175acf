"""Compute-mode rules, pure: names, selectors, MIG refusal, what changes."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import (
    ComputeModeError, normalize_mode, plan, state_view)


def gpu(index, name="NVIDIA H200", mode="Default", mig=None, pending=None, persistence=True, processes=()):
    return {"index": index, "uuid": "GPU-%08d-0000-0000-0000-000000000000" % index, "name": name,
            "compute_mode": mode, "mig_mode_current": mig, "mig_mode_pending": pending or mig,
            "persistence_mode": persistence, "processes": [{"pid": p} for p in processes]}


@pytest.mark.parametrize("text,name", [("Default", "Default"), ("default", "Default"), ("DEFAULT", "Default"),
                                       ("exclusive_process", "Exclusive_Process"),
                                       ("EXCLUSIVE_PROCESS", "Exclusive_Process"), (" Prohibited ", "Prohibited")])
def test_mode_names(text, name):
    assert normalize_mode(text) == name


@pytest.mark.parametrize("text,fragment", [
    ("Exclusive", "unknown compute mode 'Exclusive'"),
    ("exclusive-process", "unknown compute mode"),
    ("MPS", "unknown compute mode 'MPS'"),
    ("Exclusive_Thread", "removed from NVIDIA's drivers"),
    ("1", "removed from NVIDIA's drivers"),
    ("3", "not nvidia-smi's number"),
    ("", "mode must be one of"),
    (None, "mode must be one of"),
])
def test_unknown_modes_are_refused_listing_valid_ones(text, fragment):
    with pytest.raises(ComputeModeError) as err:
        normalize_mode(text)
    assert fragment in str(err.value)
    assert "Default, Exclusive_Process, Prohibited" in str(err.value)


def test_exclusive_process_on_a_mig_gpu_is_refused_for_the_whole_declaration():
    gpus = [gpu(0), gpu(1, mig="Enabled")]
    with pytest.raises(ComputeModeError) as err:
        plan(gpus, ["all"], "Exclusive_Process")
    msg = str(err.value)
    assert "not supported on a MIG-enabled GPU" in msg and "1 (NVIDIA H200" in msg and "nothing changed" in msg
    assert "0 (NVIDIA" not in msg
    # selecting only the GPU without MIG is fine
    assert [c["index"] for c in plan(gpus, ["0"], "Exclusive_Process")["changes"]] == [0]


@pytest.mark.parametrize("mode", ["Default", "Prohibited"])
def test_other_modes_are_allowed_on_mig_gpus(mode):
    out = plan([gpu(0, mode="Exclusive_Process", mig="Enabled")], ["all"], mode)
    assert out["changes"][0]["compute_mode"] == ("Exclusive_Process", mode)


def test_declared_equal_state_plans_nothing():
    out = plan([gpu(0), gpu(1)], ["all"], "Default", persistence_mode=True)
    assert out["changes"] == [] and out["warnings"] == []


def test_only_what_differs_is_planned():
    out = plan([gpu(0, mode="Exclusive_Process"), gpu(1, persistence=False)], ["all"], "Exclusive_Process",
               persistence_mode=True)
    assert out["changes"] == [{"index": 1, "uuid": gpu(1)["uuid"], "name": "NVIDIA H200",
                               "compute_mode": ("Default", "Exclusive_Process"), "persistence_mode": (False, True)}]


def test_selector_matching_nothing_names_the_gpus():
    with pytest.raises(ComputeModeError) as err:
        plan([gpu(0)], ["B200"], "Default")
    assert "matches no GPU" in str(err.value) and "0 (NVIDIA H200" in str(err.value)


def test_busy_gpu_and_pending_mig_warn():
    out = plan([gpu(0, processes=[11, 12]), gpu(1, pending="Enabled", mig="Disabled")], ["all"],
               "Exclusive_Process")
    assert len(out["changes"]) == 2
    assert any("PIDs 11, 12" in w for w in out["warnings"])
    assert any("MIG mode pending Enabled" in w for w in out["warnings"])


def test_bad_persistence_value():
    with pytest.raises(ComputeModeError, match="persistence_mode must be"):
        plan([gpu(0)], ["all"], "Default", persistence_mode="yes")


def test_state_view():
    assert state_view([gpu(3, persistence=False)]) == {"3": {"compute_mode": "Default", "persistence_mode": False}}


def test_settings_later_entries_win_and_nothing_flips():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import plan_settings
    gpus = [gpu(0, mode="Exclusive_Process"), gpu(1, name="NVIDIA L40S")]
    out = plan_settings(gpus, [{"gpus": ["all"], "mode": "Default"}, {"gpus": ["0"], "mode": "Exclusive_Process"}])
    assert out["modes"] == {0: "Exclusive_Process", 1: "Default"} and out["mode"] is None
    assert out["changes"] == []  # GPU 0 is not sent to Default and back


@pytest.mark.parametrize("settings,fragment", [
    ([], "non-empty list"),
    ([{"gpus": ["all"]}], "must be a mapping with 'mode'"),
    ([{"mode": "Default", "gpu": ["0"]}], "must be a mapping with 'mode'"),
    ([{"mode": "Default"}, {"gpus": ["7"], "mode": "Default"}], "gpus=['7'] matches no GPU"),
    ([{"mode": "Default"}, {"gpus": ["1"], "mode": "Exclusive_Process"}], "MIG-enabled"),
])
def test_bad_settings(settings, fragment):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import plan_settings
    with pytest.raises(ComputeModeError) as err:
        plan_settings([gpu(0), gpu(1, mig="Enabled")], settings)
    assert fragment in str(err.value)
