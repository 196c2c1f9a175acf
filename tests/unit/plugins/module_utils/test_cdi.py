"""_cdi (pure): the devices a spec must list for the GPUs (as nvidia-ctk names them: tests/fixtures/nvidia-ctk/), how a
listing is read and checked, and the record the node plan compares."""
import importlib.util
import os
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _cdi

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia-ctk")


def _gpu(index, mig=None):
    gpu = {"index": index, "uuid": "GPU-%d" % index, "mig_mode_current": "Enabled" if mig is not None else "Disabled"}
    if mig is not None:
        gpu["mig_devices"] = [{"uuid": "MIG-%d-%d" % (index, j)} for j in range(mig)]
    return gpu


def test_full_gpus_and_mig_devices_by_each_strategy():
    gpus = [_gpu(0), _gpu(1, mig=2), _gpu(2, mig=0)]
    got = _cdi.expected_devices(gpus, ["index", "uuid"])
    assert got == {"names": ["0", "GPU-0", "MIG-1-0", "MIG-1-1", "all"], "counted": {"1:": 2}, "devices": 3}
    typed = _cdi.expected_devices(gpus, ["type-index"])
    assert typed == {"names": ["all", "gpu0"], "counted": {"mig1:": 2}, "devices": 3}
    assert _cdi.expected_devices([_gpu(0, mig=0)], ["index", "uuid"]) == {"names": [], "counted": {}, "devices": 0}


def test_the_real_h100_listing_is_exactly_what_its_gpu_needs():
    # the real nvidia-ctk v1.20.0's `cdi list` over its own spec, on the lent H100 (one GPU, MIG disabled)
    with open(os.path.join(FIXTURES, "h100-cdi-list.txt")) as handle:
        first = handle.read().split("\n===== ")[0]  # the listing of the directory holding its YAML spec
    stdout = "\n".join(line for line in first.splitlines() if line.startswith("nvidia.com/gpu="))
    names, problems = _cdi.parse_list(stdout, "")
    gpu = {"index": 0, "uuid": "GPU-3e165db4-9e73-0984-9e34-2e913492cfaa", "mig_mode_current": "Disabled"}
    assert _cdi.listing_problems(names, _cdi.expected_devices([gpu], ["index", "uuid"])) == []


def test_a_listing_that_differs_says_how():
    expected = _cdi.expected_devices([_gpu(0), _gpu(1, mig=2)], ["index", "uuid"])
    names = ["0", "GPU-0", "MIG-1-0", "MIG-OLD", "1:0", "all"]
    problems = _cdi.listing_problems(names, expected)
    assert problems == ["missing MIG-1-1", "1 MIG device name(s) 1:<n> where the GPU has 2 MIG device(s)",
                        "devices the GPUs do not have: MIG-OLD"]
    assert _cdi.listing_problems(["0", "GPU-0", "MIG-1-0", "MIG-1-1", "1:0", "1:5", "all"], expected) == []


def test_warnings_of_cdi_list_are_problems_even_with_exit_0():
    names, problems = _cdi.parse_list("nvidia.com/gpu=0\nother.com/x=1\n",
                                      'level=info msg="Found 1 CDI devices"\nlevel=warning msg="/etc/cdi/x.yaml: bad"\n')
    assert names == ["0"] and problems == ['level=warning msg="/etc/cdi/x.yaml: bad"']


def test_the_record_names_what_changed():
    params = {"spec_path": "/var/run/cdi/nvidia.yaml", "state": "present", "device_name_strategy": ["index", "uuid"]}
    expected = _cdi.expected_devices([_gpu(0)], ["index", "uuid"])
    inputs = _cdi.stamp_inputs(params, expected, "580.1", ["/usr/bin/nvidia-ctk", 1, 2])
    text = _cdi.stamp_text(inputs, "abc")
    assert _cdi.stamp_reason(text, inputs, "abc") is None
    assert "not the one verified" in _cdi.stamp_reason(text, inputs, "def")
    assert "not the one verified" in _cdi.stamp_reason(text, inputs, None)
    mig = _cdi.stamp_inputs(params, _cdi.expected_devices([_gpu(0, mig=1)], ["index", "uuid"]), "580.1",
                            ["/usr/bin/nvidia-ctk", 1, 2])
    assert "GPUs' devices changed" in _cdi.stamp_reason(text, mig, "abc")
    assert "driver version" in _cdi.stamp_reason(text, dict(inputs, driver_version="580.2"), "abc")
    assert "nvidia-ctk binary" in _cdi.stamp_reason(text, dict(inputs, nvidia_ctk=["/usr/bin/nvidia-ctk", 1, 3]), "abc")
    assert _cdi.stamp_reason(None, inputs, "abc") == "no record of a verified CDI spec"
    assert "unreadable" in _cdi.stamp_reason("{", inputs, "abc")


def test_parameters_are_checked_with_what_is_valid():
    assert _cdi.param_problems("/etc/cdi/nvidia.yaml", ["/etc/cdi", "/var/run/cdi"], ["index", "uuid"]) == []
    problems = _cdi.param_problems("/opt/nvidia.yml", ["cdi"], ["name"])
    assert len(problems) == 3 and "end in .yaml or .json" in problems[0] and "index, uuid, type-index" in problems[2]


def test_the_kind_is_found_in_the_real_tools_yaml_and_json():
    for name in ("h100-nvidia.yaml", "h100-nvidia.json"):
        with open(os.path.join(FIXTURES, name)) as handle:
            assert _cdi.has_gpu_kind(handle.read()), name
    assert not _cdi.has_gpu_kind("kind: nvidia.com/gpux\n") and not _cdi.has_gpu_kind("kind: example.com/gpu\n")


class _BootLikeModule(object):
    """The little of an AnsibleModule that CdiSpecRun uses; no fail_json (issue 48: its failures are raised)."""
    check_mode = False
    _diff = False

    def __init__(self, spec_path):
        self.params = dict(spec_path=spec_path, spec_dirs=[os.path.dirname(spec_path)], state="present",
                           device_name_strategy=["index"], backup=False)

    def run_command(self, argv):
        raise AssertionError("no command expected: %r" % (argv,))


def test_a_cdi_spec_run_failure_is_a_cdi_error_that_the_base_and_the_boot_script_report(tmp_path, monkeypatch):
    """_cdi_run's failures are CdiError (the MIG boot script runs it without ansible-core, so not the base's
    Failure): the base reports its message and fields (changed=False, spec_path) over the result so far; the boot
    script's CDI step turns it into its StepFailed with the same message."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._cdi_run import CdiSpecRun
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import failure
    spec = str(tmp_path / "cdi" / "nvidia.yaml")
    run = CdiSpecRun(_BootLikeModule(spec), sys.executable)
    with pytest.raises(_cdi.CdiError) as raised:
        run.refuse("the generated CDI spec does not list the GPUs' devices as they are now: gpu 0.", devices=["0"])
    got = failure(raised.value, dict(changed=True, action="replace"))
    assert got == dict(msg="the generated CDI spec does not list the GPUs' devices as they are now: gpu 0; nothing "
                           "changed", changed=False, spec_path=spec, devices=["0"], action="replace")

    def fails(self):
        self.refuse("`nvidia-ctk cdi generate` exited 0 but wrote no nvidia.yaml")
    monkeypatch.setattr(CdiSpecRun, "run", fails)
    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "mig", "files",
                          "gpuops-mig-apply.py")
    loader = importlib.util.spec_from_file_location("gpuops_mig_apply_under_test", script)
    boot = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(boot)
    with pytest.raises(boot.StepFailed) as step:
        boot.write_cdi_spec(dict(spec_path=spec, spec_dirs=[os.path.dirname(spec)], nvidia_ctk_path=sys.executable))
    assert str(step.value) == "`nvidia-ctk cdi generate` exited 0 but wrote no nvidia.yaml; nothing changed"
