"""node/_host_imex: the host's IMEX units planned for ComputeDomains (masked, given back from the record once), the
IMEX channels read as NVIDIA's DRA driver reads them, the driver minimum; and the module host_imex on the systemctl
stand-in (systemd's mask modelled there)."""
import json
import os
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _host_imex

from tests.support.ansible_run import ROOT
from tests.support.modrun import run_here

SYSTEMCTL = os.path.join(ROOT, "tests", "support", "bin", "systemctl")
IMEX = "nvidia-imex.service"


def _seen(enabled="enabled", active=True, present=True):
    return {"present": present, "enabled": enabled if present else "not-found", "active": active and present}


def test_masked_stops_disables_and_masks_and_records_what_it_was():
    todo = _host_imex.plan("masked", [IMEX, "nvidia-imex-ctl.service"],
                           {IMEX: _seen(), "nvidia-imex-ctl.service": _seen(present=False)}, None)
    assert todo["commands"] == [["stop", IMEX], ["disable", IMEX], ["mask", IMEX]]
    assert todo["record"] == {IMEX: {"enabled": "enabled", "active": True}}
    assert len(todo["reasons"]) == 1 and "nvidia-imex.service is enabled, running" in todo["reasons"][0]
    # converged: masked and stopped, the record kept: nothing to do
    again = _host_imex.plan("masked", [IMEX], {IMEX: _seen("masked", False)}, todo["record"])
    assert again == {"commands": [], "record": todo["record"], "reasons": []}
    # masked but running (someone started it before the mask): stopped
    running = _host_imex.plan("masked", [IMEX], {IMEX: _seen("masked", True)}, todo["record"])
    assert running["commands"] == [["stop", IMEX]]


def test_a_unit_the_admin_masked_is_not_recorded_so_never_unmasked():
    todo = _host_imex.plan("masked", [IMEX], {IMEX: _seen("masked", False)}, None)
    assert todo == {"commands": [], "record": None, "reasons": []}
    assert _host_imex.plan("unmasked", [IMEX], {IMEX: _seen("masked", False)}, None)["commands"] == []


def test_unmasked_gives_back_what_the_record_says_once():
    record = {IMEX: {"enabled": "enabled", "active": True}}
    todo = _host_imex.plan("unmasked", [IMEX], {IMEX: _seen("masked", False)}, record)
    assert todo["commands"] == [["unmask", IMEX], ["enable", IMEX], ["start", IMEX]] and todo["record"] is None
    # a unit that was disabled and stopped comes back unmasked only
    quiet = _host_imex.plan("unmasked", [IMEX], {IMEX: _seen("masked", False)},
                            {IMEX: {"enabled": "disabled", "active": False}})
    assert quiet["commands"] == [["unmask", IMEX]]
    # the record alone is still work (to remove it); without one there is nothing to do
    left = _host_imex.plan("unmasked", [IMEX], {IMEX: _seen()}, record)
    assert left["commands"] == [] and left["reasons"] and left["record"] is None
    assert _host_imex.plan("unmasked", [IMEX], {}, None) == {"commands": [], "record": None, "reasons": []}


def test_validate_names_what_is_wrong():
    problems = _host_imex.validate({"state": "off", "units": ["nvidia-imex; rm -rf /"], "record": "rel/path"})
    assert len(problems) == 3
    assert "state must be one of masked, unmasked" in problems[0]
    assert "systemd service names" in problems[1] and "absolute path" in problems[2]


def _proc_devices(root, text):
    os.makedirs(os.path.join(root, "proc"), exist_ok=True)
    with open(os.path.join(root, "proc", "devices"), "w") as handle:
        handle.write(text)


def test_channels_read_the_major_as_the_dra_driver_does(tmp_path):
    root = str(tmp_path)
    _proc_devices(root, "Character devices:\n195 nvidia\n507 nvidia-caps-imex-channels\n\nBlock devices:\n"
                        "  8 nvidia-caps-imex-channels\n")
    out = _host_imex.channels(root)
    assert out == {"major": 507, "nodes": [], "problems": []}
    # only the character devices count
    _proc_devices(root, "Character devices:\n195 nvidia\n\nBlock devices:\n508 nvidia-caps-imex-channels\n")
    out = _host_imex.channels(root)
    assert out["major"] is None and "NVreg_ImexChannelCount=0" in out["problems"][0]
    # a channel node that is not the driver's character device
    _proc_devices(root, "Character devices:\n507 nvidia-caps-imex-channels\n")
    os.makedirs(os.path.join(root, "dev", "nvidia-caps-imex-channels"))
    with open(os.path.join(root, "dev", "nvidia-caps-imex-channels", "channel0"), "w") as handle:
        handle.write("")
    out = _host_imex.channels(root)
    assert out["nodes"] == ["channel0"]
    assert out["problems"] == ["/dev/nvidia-caps-imex-channels/channel0 is not the character device 507:0 the driver "
                               "registers: remove it (the DRA driver's kubelet plugin creates each channel node "
                               "itself)"]


@pytest.mark.parametrize("version, ok", [("570.158.01", True), ("580.95.05", True), ("570.148.08", False),
                                         ("565.57.01", False), (None, False)])
def test_driver_minimum(version, ok):
    assert (_host_imex.driver_problems(version) == []) is ok


def _stand_in(root, *args):
    env = dict(os.environ, GPUOPS_SIMULATED_ROOT=root, GPUOPS_SIMULATED_GPUS=os.path.join(root, "x.json"))
    env.pop("FAKE_SYSTEMD_STATE", None)
    return subprocess.run([SYSTEMCTL] + list(args), env=env, stdout=subprocess.PIPE, universal_newlines=True,
                          check=False).stdout.strip()


def test_the_module_masks_then_gives_back_with_check_mode_and_diff(tmp_path):
    root = str(tmp_path / "root")
    os.makedirs(os.path.join(root, "lib", "systemd", "system"))
    with open(os.path.join(root, "lib", "systemd", "system", IMEX), "w") as handle:
        handle.write("[Service]\nExecStart=/bin/true\n")
    _stand_in(root, "enable", IMEX)
    _stand_in(root, "start", IMEX)
    env = {"GPUOPS_SIMULATED_ROOT": root, "GPUOPS_SIMULATED_GPUS": os.path.join(root, "x.json")}
    record = str(tmp_path / "root" / "var" / "lib" / "gpuops" / "host-imex.json")
    args = {"state": "masked", "record": record, "systemctl": [SYSTEMCTL]}
    check = run_here("gpuops.nvidia.host_imex", args, env=env, check=True, diff=True)
    assert check["changed"] and check["commands"] == ["stop %s" % IMEX, "disable %s" % IMEX, "mask %s" % IMEX]
    assert (_stand_in(root, "is-enabled", IMEX), _stand_in(root, "is-active", IMEX)) == ("enabled", "active")
    assert not os.path.exists(record)
    assert "enabled, running" in check["diff"]["before"] and "masked" in check["diff"]["after"]
    done = run_here("gpuops.nvidia.host_imex", args, env=env)
    assert done["changed"]
    assert (_stand_in(root, "is-enabled", IMEX), _stand_in(root, "is-active", IMEX)) == ("masked", "inactive")
    with open(record) as handle:
        assert json.load(handle) == {IMEX: {"enabled": "enabled", "active": True}}
    assert run_here("gpuops.nvidia.host_imex", args, env=env)["changed"] is False
    back = dict(args, state="unmasked")
    commands = run_here("gpuops.nvidia.host_imex", back, env=env)["commands"]
    assert commands == ["unmask %s" % IMEX, "enable %s" % IMEX, "start %s" % IMEX]
    assert (_stand_in(root, "is-enabled", IMEX), _stand_in(root, "is-active", IMEX)) == ("enabled", "active")
    assert not os.path.exists(record)
    assert run_here("gpuops.nvidia.host_imex", back, env=env)["changed"] is False


def test_the_module_refuses_bad_input_before_anything(tmp_path):
    args = {"state": "masked", "units": ["imex"], "record": str(tmp_path / "r.json"), "systemctl": [SYSTEMCTL]}
    res = run_here("gpuops.nvidia.host_imex", args, env={})
    assert res["failed"] and "systemd service names" in res["msg"] and "nothing changed" in res["msg"]
