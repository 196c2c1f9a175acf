"""gpu_info, mig_mode and mig_layout on the simulated Blackwell shapes, in-process: what gpu_info reports, and check
mode (reports, touches nothing), apply (changed), apply again (not changed, no GPU call) with suffixed profiles."""
import hashlib

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_info, mig_layout, mig_mode
from tests.support.modrun import run_main


@pytest.fixture
def node(tmp_path, monkeypatch):
    def _node(shape):
        path = str(tmp_path / "state.json")
        monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", path)
        return SimulatedBackend(path, shape=shape)
    return _node


def _digest(sim):
    with open(sim.path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _calls(sim):
    return [e["call"] for e in sim.raw_state()["call_log"] if "call" in e]


@pytest.mark.parametrize("shape,count,name,pci,arch", [
    ("hgx-b200", 8, "NVIDIA B200", "0x290110DE", "blackwell"),
    ("hgx-b300", 8, "NVIDIA B300 SXM6 AC", "0x318210DE", "blackwell"),
    ("gb200-nvl", 4, "NVIDIA GB200", "0x294110DE", "blackwell"),
    ("gh200", 1, "NVIDIA GH200 480GB", "0x234210DE", "hopper"),
    ("rtx-pro-6000-x8", 8, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "0x2BB510DE", "blackwell"),
    ("h100-nvl-x2", 2, "NVIDIA H100 NVL", "0x232110DE", "hopper"),
])
def test_gpu_info_on_each_new_shape(node, shape, count, name, pci, arch):
    node(shape)
    res = run_main(gpu_info.main, {})
    assert not res.get("failed") and res["changed"] is False
    gpus = res["gpus"]
    assert len(gpus) == count
    assert {(g["name"], g["pci_device_id"], g["architecture"], g["mig_mode_current"]) for g in gpus} == {
        (name, pci, arch, "Disabled")}
    assert all(g["gi_profiles"] and g["mig_supported"] for g in gpus)


def test_gpu_info_lists_rtx_pro_suffix_profiles_by_model_name(node):
    node("rtx-pro-6000-x8")
    res = run_main(gpu_info.main, {"gpus": ["RTX PRO 6000 Blackwell Server Edition"]})
    names = [p["name"] for p in res["gpus"][0]["gi_profiles"]]
    assert names == ["1g.24gb", "1g.24gb+me", "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb",
                     "2g.48gb+gfx", "2g.48gb+me.all", "2g.48gb-me", "4g.96gb", "4g.96gb+gfx"]
    assert len(res["gpus"]) == 8


@pytest.mark.parametrize("shape", ["hgx-b200", "rtx-pro-6000-x8"])
def test_mig_mode_on_blackwell_needs_no_reset(node, shape):
    sim = node(shape)
    before = _digest(sim)
    check = run_main(mig_mode.main, {"enabled": True, "allow_reset": True}, check_mode=True, diff=True)
    assert check["changed"] is True and _digest(sim) == before
    assert {tuple(g["actions"]) for g in check["gpus"]} == {("set_mig_mode",)}
    applied = run_main(mig_mode.main, {"enabled": True, "allow_reset": True})
    assert applied["changed"] is True and not applied["pending"]
    assert _calls(sim) == ["set_mig_mode"] * len(applied["gpus"])
    again = run_main(mig_mode.main, {"enabled": True, "allow_reset": True})
    assert again["changed"] is False and len(_calls(sim)) == len(applied["gpus"])


def test_mig_layout_suffixed_profiles_check_apply_idempotent(node):
    sim = node("rtx-pro-6000-x8")
    for index in range(8):
        sim.set_mig_mode(index, True)
    sim.clear_call_log()
    args = {"layout": [{"devices": [0, 1], "mig_devices": {"1g.24gb+gfx": 2, "1c.2g.48gb-me": 2}},
                       {"devices": [2], "mig_devices": {"1g.24gb+me.all": 1, "1g.24gb-me": 3}}],
            "gpus": ["0", "1", "2"]}
    before = _digest(sim)
    check = run_main(mig_layout.main, args, check_mode=True, diff=True)
    assert check["changed"] is True and _digest(sim) == before and _calls(sim) == []
    applied = run_main(mig_layout.main, args, diff=True)
    assert applied["changed"] is True, applied.get("msg")
    assert [c["operations"] for c in check["gpus"]] == [a["operations"] for a in applied["gpus"]]
    got = dict((g["index"], sorted(d["profile"] for d in g["mig_devices"])) for g in applied["gpus"])
    assert got[0] == got[1] == ["1c.2g.48gb-me", "1c.2g.48gb-me", "1g.24gb+gfx", "1g.24gb+gfx"]
    assert got[2] == ["1g.24gb+me.all", "1g.24gb-me", "1g.24gb-me", "1g.24gb-me"]
    n = len(_calls(sim))
    again = run_main(mig_layout.main, args)
    assert again["changed"] is False and len(_calls(sim)) == n


def test_mig_layout_takes_mig_parteds_blackwell_file_unchanged(node, tmp_path):
    sim = node("hgx-b200")
    for index in range(8):
        sim.set_mig_mode(index, True)
    config = tmp_path / "config.yaml"
    # the shape of mig-parted's config-default entries for B200 (device-filter per model)
    config.write_text(yaml.safe_dump({"version": "v1", "mig-configs": {"all-balanced": [
        {"device-filter": ["0x2BB510DE"], "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.24gb": 2, "2g.48gb": 1}},
        {"device-filter": ["0x290110DE"], "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}}]}}))
    args = {"config_file": str(config), "config_name": "all-balanced"}
    applied = run_main(mig_layout.main, args)
    assert applied["changed"] is True, applied.get("msg")
    assert all(sorted(d["profile"] for d in g["mig_devices"]) == ["1g.23gb", "1g.23gb", "2g.45gb", "3g.90gb"]
               for g in applied["gpus"])
    assert run_main(mig_layout.main, args)["changed"] is False


def test_mig_layout_unknown_profile_on_b200_lists_valid_and_changes_nothing(node):
    sim = node("hgx-b200")
    sim.set_mig_mode(0, True)
    before = _digest(sim)
    res = run_main(mig_layout.main, {"config_name": "all-1g.24gb+gfx", "gpus": ["0"]})
    assert res["failed"] and "which this GPU does not offer" in res["msg"] and "1g.23gb+me" in res["msg"]
    assert _digest(sim) == before
