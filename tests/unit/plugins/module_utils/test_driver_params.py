"""The NVIDIA module parameters' planner (_driver_params) against the simulated module (_nvreg_params): what is
declared, written to modprobe.d, taken by a load and read back from /proc/driver/nvidia/params must agree."""
import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params as dp
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _nvreg_params as sim

INT_PARAMS = [p[0] for p in sim.PARAMS if p[1] == "int"]
TEXT_PARAMS = [p[0] for p in sim.PARAMS if p[1] == "charp" and p[3]]
TEXT = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e, blacklist_characters='"\'\\#'),
               min_size=1, max_size=40).filter(lambda t: dp.kernel_int(t) is None)


def int_forms(number):
    forms = [str(number)]
    if number >= 0:
        forms += ["0x%x" % number, "0%o" % number if number else "0"]
    return st.sampled_from(forms)


def declared_values():
    ints = st.dictionaries(st.sampled_from(INT_PARAMS),
                           st.integers(dp.INT_MIN, dp.INT_MAX).flatmap(int_forms), max_size=4)
    texts = st.dictionaries(st.sampled_from(TEXT_PARAMS), TEXT, max_size=2)
    return st.tuples(ints, texts).map(lambda pair: dict(pair[0], **pair[1]))


def load(tmp, values):
    """Write the rendered file into a root's modprobe.d, load as the simulated kernel does, read back."""
    conf = os.path.join(tmp, "etc", "modprobe.d")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "gpuops-nvidia-params.conf"), "w") as handle:
        handle.write(dp.render(values) or "")
    loaded, error = sim.load_values(tmp)
    assert error is None
    return dp.parse_proc_params(sim.proc_params_text(loaded))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(declared_values())
def test_a_declaration_written_loaded_and_read_back_has_no_difference(tmp_path_factory, values):
    tmp = str(tmp_path_factory.mktemp("root"))
    checked = dp.check(values)
    dp.check_names(checked, dp.parse_modinfo(sim.modinfo_p_text()))
    diffs, unreadable = dp.compare(checked, load(tmp, checked), sim.TYPES)
    assert diffs == [] and unreadable == []


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.sampled_from(INT_PARAMS), st.integers(dp.INT_MIN, dp.INT_MAX), st.integers(dp.INT_MIN, dp.INT_MAX))
def test_another_loaded_value_is_a_difference_naming_the_parameter(name, declared, other):
    if declared & 0xFFFFFFFF == other & 0xFFFFFFFF:
        return
    diffs, _u = dp.compare({name: str(declared)}, {name: str(other & 0xFFFFFFFF)}, sim.TYPES)
    assert [d["name"] for d in diffs] == [name]
    assert name in dp.differences_text(diffs)


def test_the_kernel_forms_of_integers_read_back_as_unsigned():
    # 0666 is octal (kstrtoint base 0), -1 is all bits set: /proc prints %u
    assert dp.expected("0666") == "438" and dp.expected("-1") == "4294967295" and dp.expected("0x12") == "18"
    assert dp.compare({"NVreg_DeviceFileMode": "0666"}, {"NVreg_DeviceFileMode": "438"}) == ([], [])


def test_render_is_one_options_line_sorted_and_none_without_parameters():
    text = dp.render({"NVreg_EnableStreamMemOPs": "1", "NVreg_CoherentGPUMemoryMode": "driver"})
    assert text.startswith("# Managed by gpuops.nvidia")
    assert text.splitlines()[-1] == "options nvidia NVreg_CoherentGPUMemoryMode=driver NVreg_EnableStreamMemOPs=1"
    assert dp.render({}) is None


@pytest.mark.parametrize("values, words", [
    ({"EnableStreamMemOPs": 1}, "not a parameter name"),
    ({"NVreg_X": True}, "write 1 or 0"),
    ({"NVreg_X": None}, "not a value the kernel takes"),
    ({"NVreg_X": 4294967295}, "outside the kernel's int range"),
    ({"NVreg_X": "a b"}, "cannot be written on a modprobe options line"),
    ({"NVreg_X": 'a"b'}, "without spaces, quotes"),
    ({"NVreg_X": ""}, "cannot be written"),
    ({"NVreg_X": [1]}, "not a value"),
])
def test_bad_declarations_are_refused_naming_the_entry(values, words):
    with pytest.raises(dp.DriverParamsError) as err:
        dp.check(values)
    assert words in str(err.value) and list(values)[0] in str(err.value)


def test_not_a_mapping_is_refused():
    with pytest.raises(dp.DriverParamsError, match="must be a mapping"):
        dp.check(["NVreg_EnableStreamMemOPs=1"])


def test_an_unknown_name_is_refused_naming_the_valid_ones():
    valid = dp.parse_modinfo(sim.modinfo_p_text())
    with pytest.raises(dp.DriverParamsError) as err:
        dp.check_names({"NVreg_EnableStreamMemOps": "1"}, valid)
    message = str(err.value)
    assert "NVreg_EnableStreamMemOps is not a parameter" in message and "NVreg_EnableStreamMemOPs" in message


def test_text_for_an_integer_parameter_is_refused():
    with pytest.raises(dp.DriverParamsError, match="NVreg_EnableGpuFirmware is an integer parameter"):
        dp.check_names({"NVreg_EnableGpuFirmware": "on"}, {"NVreg_EnableGpuFirmware": "int"})


def test_modinfo_lines_with_and_without_descriptions():
    assert dp.parse_modinfo("NVreg_A:int\nNVreg_B:Some text (charp)\nfoo:\n\n") == {
        "NVreg_A": "int", "NVreg_B": "charp", "foo": ""}


def test_proc_params_names_are_prefixed_and_the_custom_name_mapped():
    loaded = dp.parse_proc_params(sim.proc_params_text(dict((p[0], p[2]) for p in sim.PARAMS)))
    assert loaded["NVreg_EnableGpuFirmware"] == "18" and loaded["NVreg_CoherentGPUMemoryMode"] == ""
    assert loaded["NVreg_RestrictProfilingToAdminUsers"] == "1" and "NVreg_RmProfilingAdminOnly" not in loaded
    # a parameter outside /proc's table cannot be read back: reported, not a difference
    assert dp.compare({"NVreg_RmNvlinkBandwidth": "x"}, loaded) == ([], ["NVreg_RmNvlinkBandwidth"])


def test_the_simulated_kernel_refuses_a_value_that_does_not_parse(tmp_path):
    conf = tmp_path / "etc" / "modprobe.d"
    conf.mkdir(parents=True)
    (conf / "x.conf").write_text("options nvidia NVreg_EnableGpuFirmware=on\n")
    assert sim.load_values(str(tmp_path)) == (None, "Invalid argument")


# ---- the node plan's driver step (_driver_step.module_parameters, validate) -----------------------------------------
def _step_root(tmp_path, loaded_values=None):
    if loaded_values is not None:
        values = dict((p[0], p[2]) for p in sim.PARAMS)
        values.update(loaded_values)
        path = tmp_path / "proc" / "driver" / "nvidia"
        path.mkdir(parents=True)
        (path / "params").write_text(sim.proc_params_text(values))
    return str(tmp_path)


def _report(action="none"):
    return {"action": action, "disruptive": []}


def test_step_a_loaded_driver_reading_otherwise_is_a_disruptive_reload_naming_the_parameter(tmp_path):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_step
    root, report = _step_root(tmp_path, {}), _report()
    reasons = _driver_step.module_parameters({"loaded": {"version": "580.95.05"}},
                                             {"module_parameters": {"NVreg_EnableStreamMemOPs": 1}}, root, report)
    assert report["action"] == "reload" and report["disruptive"] == reasons
    assert "NVreg_EnableStreamMemOPs: declared 1, the loaded driver reads 0" in reasons[0]


def test_step_converged_or_nothing_loaded_has_no_work(tmp_path):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_step
    p = {"module_parameters": {"NVreg_EnableStreamMemOPs": 1, "NVreg_DeviceFileMode": "0660"}}
    report = _report()
    root = _step_root(tmp_path, {"NVreg_EnableStreamMemOPs": 1, "NVreg_DeviceFileMode": 0o660})
    assert _driver_step.module_parameters({"loaded": {"version": "580.95.05"}}, p, root, report) == []
    assert report["action"] == "none" and report["module_parameters"]["pending"] == []
    # no driver loaded: the load the step makes anyway takes the file
    report = _report("load")
    assert _driver_step.module_parameters({"loaded": None}, p, root, report) == [] and report["action"] == "load"


def test_step_validate_refuses_a_bad_declaration_before_anything_is_read():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_step
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Refusal
    with pytest.raises(Refusal, match="driver_module_parameters: NVreg_EnableStreamMemOPs: 'on off'"):
        _driver_step.validate(None, {"driver": {"version": "580.95.05",
                                                "module_parameters": {"NVreg_EnableStreamMemOPs": "on off"}}})
