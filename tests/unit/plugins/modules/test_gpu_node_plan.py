"""gpu_node_plan in-process on simulated nodes: it plans exactly what mig_mode, mig_layout and compute_mode plan in
check mode (same results, same errors), finds every declared file, directory, unit and containerd state that is
not as declared, changes nothing (check mode or not), and refuses bad input before reading anything."""
import hashlib
import os
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import boot_unit
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import parse_toml
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import (
    compute_mode, containerd_runtime, dcgm_host_engine, gpu_node_plan, mig_layout, mig_mode)
from tests.support import apt_rig, ctk_env, dcgm_rig
from tests.support.ansible_run import ROOT
from tests.support.modrun import run_main, run_main_ok


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A simulated node (``node(shape)`` -> SimulatedBackend), the process pointed at it."""
    def _make(shape):
        path = str(tmp_path / "state.json")
        monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", path)
        monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", shape)
        sim = SimulatedBackend(path, shape=shape)
        sim.read_all()
        return sim
    return _make


def _digest(sim):
    with open(sim.path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _plan(args, check=False):
    return run_main(gpu_node_plan.main, args, check_mode=check)


def _strip(result):
    return dict((k, v) for k, v in result.items() if k not in ("invocation", "warnings"))


def _enable_balanced(sim):
    args = {"config_name": "all-balanced", "allow_reset": True}
    run_main_ok(mig_mode.main, args)
    run_main_ok(mig_layout.main, {"config_name": "all-balanced"})


@pytest.mark.parametrize("shape,setup,declared", [
    ("dgx-a100-40gb", None, {"config_name": "all-balanced"}),            # first converge: mode and layout
    ("dgx-a100-40gb", _enable_balanced, {"config_name": "all-balanced"}),  # nothing to do
    ("dgx-a100-40gb", _enable_balanced, {"config_name": "all-1g"}),        # a new layout
    ("hgx-h200", _enable_balanced, {"config_name": "all-disabled"}),       # disable MIG
    ("mixed", None, {"layout": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}),
])
def test_mig_plans_are_the_check_mode_results_of_mig_mode_and_mig_layout(node, shape, setup, declared):
    sim = node(shape)
    if setup:
        setup(sim)
    sim.clear_call_log()
    before = _digest(sim)
    plan = _plan({"mig": dict(declared, manage="declared", allow_reset=True)})
    mode = run_main(mig_mode.main, dict(declared, allow_reset=True), check_mode=True)
    layout = run_main(mig_layout.main, dict(declared), check_mode=True)
    assert plan["changed"] is False and plan["mig"]["managed"] is True
    changes = any(g["changed"] for g in mode["gpus"]) or mode["pending"] or layout["changed"]
    assert bool(plan["mig"]["disruptive"]) == bool(changes)
    assert bool(plan["steps"]["mig"]) == bool(changes)
    if changes:
        assert plan["mig"]["mode_plan"] == _strip(mode)
        assert plan["mig"]["layout_plan"] == _strip(layout)
    else:
        assert "mode_plan" not in plan["mig"]
    assert plan["ansible_facts"]["nvidia_gpus"]["gpus"] == sim.read_all()["gpus"]
    assert _digest(sim) == before and sim.raw_state()["call_log"] == []


def test_mig_errors_are_those_of_the_modules_and_nothing_is_planned_on_bad_input(node):
    sim = node("dgx-a100-40gb")
    before = _digest(sim)
    plan = _plan({"mig": {"manage": "declared", "config_name": "all-nonsense"}})
    mode = run_main(mig_mode.main, {"config_name": "all-nonsense"}, check_mode=True)
    assert plan["failed"] and plan["msg"] == mode["msg"] and "all-balanced" in plan["msg"]
    _enable_balanced(sim)
    gi = sim.read_all()["gpus"][0]["gpu_instances"][0]
    sim.add_process(0, 4242, "trainer", gi_id=gi["id"], ci_id=gi["compute_instances"][0]["id"])
    plan = _plan({"mig": {"manage": "declared", "config_name": "all-disabled"}})
    mode = run_main(mig_mode.main, {"config_name": "all-disabled"}, check_mode=True)
    assert plan["failed"] and plan["msg"] == mode["msg"] and "pid 4242 (trainer)" in plan["msg"]
    assert _digest(sim) != before  # (the setup changed it; the plans did not:)
    after_setup = _digest(sim)
    _plan({"mig": {"manage": "declared", "config_name": "all-disabled"}})
    assert _digest(sim) == after_setup


@pytest.mark.parametrize("shape,mig_on,manage,managed", [
    ("l40s-x2", False, "declared", False),   # no MIG-capable GPU: never managed
    ("hgx-h200", False, "declared", True),
    ("hgx-h200", False, "disable", False),   # another sharing strategy, MIG off: nothing to disable
    ("hgx-h200", True, "disable", True),     # another sharing strategy, MIG on: disable it
])
def test_whether_mig_is_managed(node, shape, mig_on, manage, managed):
    sim = node(shape)
    if mig_on:
        sim.set_mig_mode(3, True)
    plan = _plan({"mig": {"manage": manage, "config_name": "all-disabled" if manage == "disable" else "all-balanced"}})
    assert plan["mig"]["managed"] is managed
    if manage == "disable" and managed:
        assert plan["mig"]["disruptive"] == ["MIG mode changes on GPU(s) 3"], plan["mig"]


def test_compute_mode_plan_and_boot_unit(node, tmp_path):
    sim = node("hgx-h200")
    sim.set_compute_mode(2, "Prohibited")
    unit = tmp_path / "units" / "gpuops-compute-mode.service"
    args = {"compute_mode": {"settings": [{"gpus": ["all"], "mode": "Default"}], "persistence_mode": True,
                             "boot_unit": {"path": str(unit)}}}
    plan = _plan(args)
    check = run_main(compute_mode.main, {"settings": [{"gpus": ["all"], "mode": "Default"}], "persistence_mode": True},
                     check_mode=True)
    assert plan["compute_mode"]["changes"] == check["changes"] and plan["compute_mode"]["gpus"] == check["gpus"]
    assert plan["steps"]["compute_mode"][0] == "GPU 2: compute mode Prohibited -> Default"
    assert any("is absent, declared file" in r for r in plan["steps"]["compute_mode"]), plan["steps"]
    # the modes as declared and the unit the role writes (the filter's text for compute_mode's result): no work
    applied = run_main_ok(compute_mode.main, {"settings": [{"gpus": ["all"], "mode": "Default"}],
                                              "persistence_mode": True})
    unit.parent.mkdir()
    unit.write_text(boot_unit(applied["gpus"], True, "/usr/bin/nvidia-smi"))
    unit.chmod(0o644)
    assert _plan(args)["steps"]["compute_mode"] == []
    # persistence off in the declaration: another unit text
    args["compute_mode"]["persistence_mode"] = False
    assert _plan(args)["steps"]["compute_mode"] != []


def _sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def test_files_and_directories_declared(node, tmp_path):
    node("h200-x1")
    (tmp_path / "d").mkdir(mode=0o755)
    (tmp_path / "d").chmod(0o755)
    (tmp_path / "f").write_text("hello\n")
    (tmp_path / "f").chmod(0o644)
    (tmp_path / "link").symlink_to(tmp_path / "f")
    (tmp_path / "marker").write_text("x")
    files = [
        {"step": "a", "path": str(tmp_path / "d"), "state": "directory", "mode": "0755"},
        {"step": "a", "path": str(tmp_path / "f"), "checksum": _sha1("hello\n"), "mode": "0644"},
        {"step": "a", "path": str(tmp_path / "absent"), "state": "absent"},
        {"step": "b", "path": str(tmp_path / "f"), "checksum": _sha1("hello!\n"), "mode": "0644"},
        {"step": "c", "path": str(tmp_path / "f"), "checksum": _sha1("hello\n"), "mode": "0600"},
        {"step": "d", "path": str(tmp_path / "link"), "checksum": _sha1("hello\n")},
        {"step": "e", "path": str(tmp_path / "marker"), "state": "absent"},
        {"step": "f", "path": str(tmp_path / "missing"), "checksum": _sha1("x")},
        {"step": "g", "path": str(tmp_path / "f"), "state": "directory"},
        {"step": "h", "path": str(tmp_path / "f")},   # no checksum: exists is enough here
    ]
    plan = _plan({"files": files})
    steps = plan["steps"]
    assert steps["a"] == [] and steps["h"] == []
    assert steps["b"] == ["%s differs from what is declared" % (tmp_path / "f")]
    assert steps["c"] == ["%s has mode 0644, declared 0600" % (tmp_path / "f")]
    assert steps["d"] == ["%s is link, declared file" % (tmp_path / "link")]
    assert steps["e"] == ["%s exists (file) and must not" % (tmp_path / "marker")]
    assert steps["f"] == ["%s is absent, declared file" % (tmp_path / "missing")]
    assert steps["g"] == ["%s is file, declared directory" % (tmp_path / "f")]
    assert plan["files"][str(tmp_path / "f")] == {"state": "file", "mode": "0644", "checksum": _sha1("hello\n")}


def test_units_must_be_reported_enabled(node, tmp_path, monkeypatch):
    node("h200-x1")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text('#!/bin/sh\ncase "$2" in on.service) echo enabled;; static.service) echo static;;'
                         ' *) echo disabled; exit 1;; esac\n')
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    plan = _plan({"units": [{"step": "a", "name": "on.service"}, {"step": "b", "name": "static.service"},
                            {"step": "c", "name": "off.service"}]})
    assert plan["steps"] == {"a": [], "b": ["unit static.service is static"], "c": ["unit off.service is disabled"]}


def test_containerd_step_follows_the_modules_verified_state(node, tmp_path):
    node("h200-x1")
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True)
    (etc / "config.toml").write_text(ctk_env.fixture_text("golden-input-v2.toml"))
    args = {"config_path": str(etc / "config.toml"), "drop_in_path": str(etc / "conf.d" / "99-nvidia.toml"),
            "nvidia_ctk_path": ctk_env.ctk_wrapper(tmp_path / "bin", "1.20.0"),
            "containerd_path": ctk_env.require_containerd()}
    plan = _plan({"containerd": dict(args)})
    assert plan["containerd"] == {"verified": False} and plan["steps"]["containerd_runtime"]
    applied = run_main_ok(containerd_runtime.main, dict(args, _ansible_tmpdir=str(tmp_path)))
    assert applied["changed"] is True
    plan = _plan({"containerd": dict(args)}, check=True)
    assert plan["containerd"]["verified"] is True and plan["steps"]["containerd_runtime"] == []
    again = run_main_ok(containerd_runtime.main, dict(args, _ansible_tmpdir=str(tmp_path)))
    assert again["verified_earlier"] is True
    assert plan["containerd"]["result"] == _strip(again)
    # another parameter than the one verified: the step has work
    plan = _plan({"containerd": dict(args, runtime_name="nvidia-legacy")})
    assert plan["steps"]["containerd_runtime"] and plan["containerd"] == {"verified": False}
    plan = _plan({"containerd": dict(args, nvidia_ctk_path=str(tmp_path / "nope"))})
    assert plan["steps"]["containerd_runtime"] == ["containerd: nvidia-ctk %s is not executable" % (tmp_path / "nope")]


def test_containerd_step_on_k3s_reads_the_agents_config_and_refuses_the_wrong_containerd(
        node, tmp_path, monkeypatch):
    """Issue 51: on a k3s node the step follows what the agent generated (work until it serves the runtime, none
    after), and a plain-containerd declaration there is reported refused, naming both containerds."""
    from tests.support import rancher_agent_standin as agent
    node("h200-x1")
    root = tmp_path / "root"
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", str(root))
    agent.make_root(root, "k3s", unit="k3s-agent")
    agent.start(root, "k3s")
    agent.install_executable(root, "/usr/bin/nvidia-container-runtime")
    args = {"distribution": "auto", "set_as_default": True}
    plan = _plan({"containerd": dict(args)}, check=True)
    assert plan["containerd"]["distribution"] == "k3s" and plan["containerd"]["restart_service"] == "k3s-agent"
    assert plan["containerd_runtime"] == {"needs_installs": False}  # no nvidia-ctk: planned before the toolkit
    assert plan["steps"]["containerd_runtime"] == [
        "/etc/rancher/k3s/config.yaml create",
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml: no runtime 'nvidia'",
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml: default runtime runc, not 'nvidia'"]
    run_main_ok(containerd_runtime.main, dict(args, _ansible_tmpdir=str(tmp_path)))
    agent.start(root, "k3s")
    assert _plan({"containerd": dict(args)}, check=True)["steps"]["containerd_runtime"] == []
    plan = _plan({"containerd": dict(args, distribution="containerd")}, check=True)
    (reason,) = plan["steps"]["containerd_runtime"]
    assert "containerd's containerd" in reason and "k3s's containerd" in reason and plan["containerd"]["refused"]
    assert "containerd_runtime" not in plan  # a refusal waits for nothing: it is reported with or without the toolkit


def test_a_converged_version_1_node_with_cdi_has_no_containerd_work(node, tmp_path):
    """Issue 36: a version 1 config that containerd_runtime brought to CDI on ([plugins.cri] enable_cdi, set by the
    collection because nvidia-ctk 1.17 puts it under [plugins.cri.containerd]) is converged for the node plan."""
    node("h200-x1")
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True)
    v1_without_cdi = ctk_env.real_ctk_text("v1-input-cri-cdi.toml").replace("  enable_cdi = true\n", "")
    (etc / "config.toml").write_text(v1_without_cdi)
    args = {"config_path": str(etc / "config.toml"), "drop_in_path": str(etc / "conf.d" / "99-nvidia.toml"),
            "nvidia_ctk_path": ctk_env.ctk_wrapper(tmp_path / "bin", "1.17.8"), "cdi_enabled": True,
            "containerd_path": ctk_env.require_containerd()}
    assert _plan({"containerd": dict(args)}, check=True)["steps"]["containerd_runtime"]
    applied = run_main_ok(containerd_runtime.main, dict(args, _ansible_tmpdir=str(tmp_path)))
    assert applied["changed"] is True and applied["config_version"] == 1
    assert parse_toml((etc / "config.toml").read_text(), "v1")["plugins"]["cri"]["enable_cdi"] is True
    plan = _plan({"containerd": dict(args)}, check=True)
    assert plan["containerd"]["verified"] is True and plan["steps"]["containerd_runtime"] == []


@pytest.mark.parametrize("bad,words", [
    ({"files": [{"step": "a", "path": "relative/file"}]}, ["must be absolute"]),
    ({"files": [{"step": "a", "path": "/x", "checksum": "abc"}]}, ["sha1", "40 characters"]),
    ({"files": [{"step": "a", "path": "/x", "mode": "u+rw"}]}, ["octal", "0644"]),
    ({"files": [{"step": "a", "path": "/x", "state": "link"}]}, ["file, directory, absent"]),
    ({"mig": {"manage": "sometimes", "config_name": "all-balanced"}}, ["declared, disable"]),
    ({"mig": {"manage": "declared"}}, ["layout", "config_name"]),
    ({"compute_mode": {"settings": [{"mode": "Shared"}]}}, ["Shared", "Exclusive_Process"]),
])
def test_bad_input_fails_before_reading_or_changing_anything(tmp_path, monkeypatch, bad, words):
    path = tmp_path / "state.json"
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(path))
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "h200-x1")
    result = _plan(bad)
    assert result.get("failed"), result
    for word in words:
        assert word in result["msg"], result["msg"]
    if "compute_mode" not in bad:  # (compute modes are checked against the GPUs, after reading them)
        assert not path.exists()


def test_mig_files_are_no_work_where_mig_is_not_managed(node, tmp_path):
    node("hgx-h200")
    files = [{"step": "mig", "path": str(tmp_path / "missing"), "checksum": _sha1("x")}]
    plan = _plan({"mig": {"manage": "disable", "config_name": "all-disabled"}, "files": files})
    assert plan["mig"]["managed"] is False and plan["steps"]["mig"] == []
    assert plan["files"][str(tmp_path / "missing")]["state"] == "absent"
    plan = _plan({"mig": {"manage": "declared", "config_name": "all-balanced"}, "files": files})
    assert "%s is absent, declared file" % (tmp_path / "missing") in plan["steps"]["mig"]


def _dpkg_status(root, entries):
    """A dpkg database under ``root`` with ``entries`` ((package, version, status), ...): what dpkg-query reads."""
    admin = root / "var" / "lib" / "dpkg"
    admin.mkdir(parents=True)
    (admin / "status").write_text("".join(
        "Package: %s\nStatus: %s\nPriority: optional\nSection: utils\nMaintainer: t <t@t.invalid>\n"
        "Architecture: all\nVersion: %s\nDescription: test\n\n" % (name, status, version)
        for name, version, status in entries))


@pytest.mark.skipif(not os.path.exists("/usr/bin/dpkg-query"), reason="needs dpkg-query (Debian family)")
def test_packages_are_read_with_dpkg_query_and_compared_with_the_pin(node, tmp_path, monkeypatch):
    node("hgx-h200")
    _dpkg_status(tmp_path / "root", [("nvidia-container-toolkit", "1.20.0-1", "hold ok installed"),
                                     ("nvidia-container-toolkit-base", "1.20.0-1", "install ok installed"),
                                     ("libnvidia-container-tools", "1.18.1-1", "hold ok installed"),
                                     ("libnvidia-container1", "1.20.0-1", "deinstall ok config-files")])
    monkeypatch.setenv("DPKG_ROOT", str(tmp_path / "root"))
    names = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
             "libnvidia-container1"]
    res = _plan({"packages": [{"step": "container_toolkit", "manager": "apt", "names": names, "version": "1.20.0-1",
                               "hold": True}]}, check=True)
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert res["steps"]["container_toolkit"] == [
        "package nvidia-container-toolkit-base is not held (dpkg selection install)",
        "package libnvidia-container-tools is at 1.18.1-1, declared 1.20.0-1",
        "package libnvidia-container1 is deinstall ok config-files, declared 1.20.0-1"]
    assert res["packages"]["nvidia-container-toolkit"] == {"version": "1.20.0-1", "held": True,
                                                           "status": "hold ok installed"}
    # what the step would install (not installed now): in check mode the steps after it cannot be planned then
    assert res["installs"] == {"container_toolkit": ["libnvidia-container1"]}, res["packages"]
    # the same node, as declared: no work
    _dpkg_status(tmp_path / "right", [(n, "1.20.0-1", "hold ok installed") for n in names])
    monkeypatch.setenv("DPKG_ROOT", str(tmp_path / "right"))
    res = _plan({"packages": [{"step": "container_toolkit", "manager": "apt", "names": names, "version": "1.20.0-1",
                               "hold": True}]})
    assert res["steps"]["container_toolkit"] == [] and res["installs"] == {}, res
    # an epoch is part of the version
    res = _plan({"packages": [{"step": "container_toolkit", "manager": "apt", "names": names[:1], "version": "1:1.20.0-1"}]})
    assert res["steps"]["container_toolkit"] == ["package nvidia-container-toolkit is at 1.20.0-1, declared 1:1.20.0-1"]


def test_packages_bad_input_and_a_missing_package_database(node, monkeypatch):
    node("hgx-h200")
    res = _plan({"packages": [{"step": "t", "manager": "apt", "names": ["Bad Name"], "version": "1.0-1"}]})
    assert res["failed"] and "is not a package name" in res["msg"], res
    monkeypatch.setenv("PATH", "/nonexistent")
    res = _plan({"packages": [{"step": "t", "manager": "dnf", "names": ["nvidia-container-toolkit"],
                               "version": "1.20.0-1"}]})
    assert not res.get("failed"), res
    assert res["steps"]["t"][0].startswith("package nvidia-container-toolkit cannot be read: rpm not found"), res


def test_health_is_read_in_the_plans_one_read_and_its_blocking_findings_are_the_steps_reasons(node):
    """The health step: the verdict of gpu_info's read, in the same module run as the facts; blocking findings are the
    step's work (their lines name GPU, bus id, finding and fix), warnings are not; the policy moves a kind; reads
    only."""
    sim = node("hgx-h200")
    plan = _plan({"health": {}})
    assert plan["steps"]["health"] == [] and plan["health"]["healthy"] is True
    assert plan["health"]["gate"] == {"healthy": True, "blocking": [], "warnings": [], "reset_clears": []}
    assert "gpus" not in plan["health"]          # each GPU's read fields are gpu_info's, not the plan's
    bus = sim.read_all()["gpus"][3]["pci_bus_id"]
    sim.inject_health(3, "row_remap_pending")
    sim.inject_health(5, "ecc_volatile_corrected", 2)
    sim.clear_call_log()
    before = _digest(sim)
    plan = _plan({"health": {}}, check=True)
    (reason,) = plan["steps"]["health"]
    assert reason.startswith("GPU 3 (%s): remapped rows pending" % bus) and "reset the GPU or reboot" in reason
    gate = plan["health"]["gate"]
    assert gate["healthy"] is False and gate["reset_clears"] == [3]
    assert gate["blocking"] == [{"gpu": 3, "bus_id": bus, "kind": "row_remap_pending", "message": reason}]
    assert [w["kind"] for w in gate["warnings"]] == ["ecc_corrected"] and gate["warnings"][0]["gpu"] == 5
    assert _digest(sim) == before and sim.raw_state()["call_log"] == []
    # the policy, per group: the pending remap only warns
    plan = _plan({"health": {"policy": {"row_remap_pending": "warn"}}})
    assert plan["steps"]["health"] == [] and plan["health"]["verdict"] == "warn"
    # without the health option nothing of it is read or reported
    plan = _plan({"compute_mode": {"settings": [{"mode": "Default"}]}})
    assert "health" not in plan and "health" not in plan["steps"]


@pytest.mark.parametrize("policy,words", [
    ({"row_remap_pendin": "warn"}, ["health.policy", "'row_remap_pendin'", "valid kinds", "row_remap_pending"]),
    ({"xid_fatal": "stop"}, ["health.policy", "xid_fatal", "'stop'", "block, warn, ignore"]),
])
def test_a_bad_health_policy_is_refused_before_anything_is_read(tmp_path, monkeypatch, policy, words):
    path = tmp_path / "state.json"
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(path))
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "h200-x1")
    result = _plan({"health": {"policy": policy}})
    assert result.get("failed") and "nothing changed" in result["msg"], result
    for word in words:
        assert word in result["msg"], result["msg"]
    assert not path.exists()


def test_a_lost_gpu_does_not_fail_the_plan_its_gpu_steps_wait_and_the_health_step_blocks(node):
    """A GPU NVML answers GPU_IS_LOST for (Xid 79, fallen off the bus): the plan still answers, so that the gate can
    mark the node. The steps that read the GPUs say they cannot plan it and do not run (managed false); the health
    step reports the lost GPU as a blocking finding naming its bus id and the fix."""
    sim = node("hgx-h200")
    bus = sim.read_all()["gpus"][4]["pci_bus_id"]
    sim.inject_health(4, "lost")
    plan = _plan({"health": {}, "compute_mode": {"settings": [{"mode": "Default"}]},
                  "mig": {"manage": "declared", "config_name": "all-disabled"}})
    assert not plan.get("failed"), plan
    assert [g["index"] for g in plan["ansible_facts"]["nvidia_gpus"]["gpus"]] == [0, 1, 2, 3, 5, 6, 7]
    assert plan["ansible_facts"]["nvidia_gpus"]["lost_gpus"][0]["index"] == 4
    for step in ("compute_mode", "mig"):
        assert plan[step]["managed"] is False and plan[step]["lost_gpus"] == [4], plan[step]
    assert plan["steps"]["compute_mode"] == ["cannot plan GPU 4: NVML reports it lost (GPU_IS_LOST); this step waits "
                                             "for a run that finds every GPU"]
    assert plan["steps"]["mig"] == []           # (an unmanaged MIG has no work: _mig_settle)
    (reason,) = plan["steps"]["health"]
    assert reason.startswith("GPU 4 (%s): NVML reports the GPU lost (GPU_IS_LOST)" % bus), reason
    assert "reboot / reseat" in reason and "the gate clears when the next run finds it healthy" in reason
    assert plan["health"]["gate"]["blocking"][0]["bus_id"] == bus


def test_a_gpu_missing_from_nvml_does_not_fail_the_plan_its_gpu_steps_wait_and_the_health_step_blocks(
        tmp_path, monkeypatch):
    """A GPU the host's PCI bus shows and NVML does not list (the modelled host under GPUOPS_SIMULATED_ROOT): the plan
    answers with the GPUs NVML lists, names the missing one by its sysfs bus id, the steps that read the GPUs wait (NVML
    numbers its GPUs without the missing one), and the health step blocks naming the bus id and the fix."""
    path, root = str(tmp_path / "state.json"), str(tmp_path / "root")
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", path)
    monkeypatch.setenv("GPUOPS_SIMULATED_MACHINE", "h200-x2")
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", root)
    sim = SimulatedBackend(path, shape="h200-x2", root=root)
    sim.inject_health(1, "missing")
    plan = _plan({"health": {}, "compute_mode": {"settings": [{"mode": "Default"}]}})
    assert not plan.get("failed"), plan
    facts = plan["ansible_facts"]["nvidia_gpus"]
    assert [g["index"] for g in facts["gpus"]] == [0]
    assert facts["missing_gpus"] == [{"bus_id": "0000:0f:00.0", "name": "NVIDIA H200", "bound_driver": "nvidia"}]
    assert plan["compute_mode"]["managed"] is False and plan["compute_mode"]["missing_gpus"] == ["0000:0f:00.0"]
    assert plan["steps"]["compute_mode"] == ["cannot plan the GPU at PCI 0000:0f:00.0: the bus shows it, NVML does not "
                                             "list it; this step waits for a run that finds every GPU"]
    (reason,) = plan["steps"]["health"]
    assert reason.startswith("GPU (PCI 0000:0f:00.0): on the PCI bus but not listed by NVML"), reason
    assert plan["health"]["gate"]["blocking"][0]["bus_id"] == "0000:0f:00.0"
    # back in NVML's list: the steps plan again, nothing blocks
    sim.inject_health(1, "missing", False)
    plan = _plan({"health": {}, "compute_mode": {"settings": [{"mode": "Default"}]}})
    assert plan["ansible_facts"]["nvidia_gpus"]["missing_gpus"] == [] and plan["steps"].get("health") in (None, [])
    assert plan["compute_mode"].get("managed", True) is True


def test_the_health_step_runs_dcgms_diagnostic_only_when_asked(node):
    """health.dcgm_diag (off by default): with the lab's stand-in dcgmi replaying a failed run, the plan's health step
    blocks on the GPU DCGM names; without it, no dcgmi is run (health.dcgm null)."""
    sim = node("h200-x2")
    with open(os.path.join(ROOT, "tests", "fixtures", "dcgm", "diag-r1-pending-row-remap.json")) as src, \
            open(sim.path + ".dcgmi.json", "w") as dst:
        dst.write(src.read())
    plan = _plan({"health": {}})
    assert plan["health"]["dcgm"] is None and plan["steps"].get("health") in (None, []), plan["health"]
    plan = _plan({"health": {"dcgm_diag": True, "dcgmi": os.path.join(ROOT, "tests", "support", "bin", "dcgmi")}})
    (reason,) = plan["steps"]["health"]
    assert reason.startswith("GPU 1 (%s): DCGM's diagnostic failed a test" % sim.read_all()["gpus"][1]["pci_bus_id"])


@pytest.mark.skipif(bool(apt_rig.missing_tools()), reason="needs Debian's apt and dpkg tools")
def test_dcgm_is_planned_as_dcgm_host_engine_reads_it(node, tmp_path, monkeypatch):
    """The dcgm step: DCGM's packages and host engine as dcgm_host_engine reads and plans them (the same read and
    planner); work before the install, none after it; bad input refused before anything is read."""
    node("hgx-h200")
    root = apt_rig.Root(tmp_path / "root")
    for key, value in root.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", root.path)
    systemctl = [os.path.join(ROOT, "tests", "support", "bin", "systemctl")]
    step = {"state": "present", "version": dcgm_rig.NEW, "package_manager": "apt", "systemctl": systemctl}
    res = _plan({"dcgm": step}, check=True)
    assert not res.get("failed") and res["changed"] is False, res
    assert res["steps"]["dcgm"] == ["package %s is not installed, declared %s" % (n, dcgm_rig.NEW)
                                    for n in dcgm_rig.NAMES] + ["the apt preferences pin nvidia-dcgm-gpuops is missing"]
    assert res["dcgm"]["service"] == ["daemon-reload", "enable", "start"]
    files = dcgm_rig.place(dcgm_rig.build(tmp_path / "debs", dcgm_rig.NEW), os.path.join(root.path, "debs"))
    run_main_ok(dcgm_host_engine.main, {"version": dcgm_rig.NEW, "package_manager": "apt", "package_files": files,
                                        "systemctl": systemctl})
    res = _plan({"dcgm": step})
    assert res["steps"]["dcgm"] == [] and res["dcgm"]["service"] == [], res
    # a hold someone took off is work (the module holds again), as with hold: false it is not
    subprocess.run(["dpkg", "--set-selections"], input="%s install\n" % dcgm_rig.NAMES[0], universal_newlines=True,
                   check=True)
    res = _plan({"dcgm": step})
    assert res["steps"]["dcgm"] == ["package %s is not held (dpkg selection install)" % dcgm_rig.NAMES[0]], res
    assert _plan({"dcgm": dict(step, hold=False)})["steps"]["dcgm"] == []
    # another pin is work again (an upgrade)
    res = _plan({"dcgm": dict(step, version="1:4.6.0-1")})
    assert res["steps"]["dcgm"] == ["package %s is at %s, declared 1:4.6.0-1" % (n, dcgm_rig.NEW)
                                    for n in dcgm_rig.NAMES] + [
        "the apt preferences pin nvidia-dcgm-gpuops does not pin DCGM's packages at 1:4.6.0-1"], res
    bad = _plan({"dcgm": dict(step, version="latest")})
    assert bad.get("failed") and "dcgm: version 'latest' is not a package version" in bad["msg"], bad
    assert "nothing changed" in bad["msg"]
