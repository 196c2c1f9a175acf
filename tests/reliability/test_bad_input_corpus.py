"""The bad-input corpus (tests/reliability/bad_input_corpus.yml): every case fails, says what is wrong and what is
valid, and changes nothing.

Module cases run the module's main() in this process (fast on 2 cores); the tools they drive are real where the
project has them (containerd, helm for rendering, the kubernetes client over HTTP to the fake API server) and the
stand-ins otherwise (nvidia-ctk, nvidia-cuda-mps-control, systemctl, helm's release store). Role cases run through
real ansible-playbook, all of them in one run (one inventory host per case).

"Nothing changed" is checked on: every file under the case's directory (bytes, mtime, mode; the simulator's state file
holds call_log), the fake API server's objects and its non-dry-run writes, the helm release store and its mutating
commands. Lock files (`*.lock`) are excluded: taking a lock is not a change of configuration.
"""
import importlib
import os
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.modules import (
    cluster_lease, cluster_profiles, compute_mode, containerd_runtime, dcgm_exporter, dcgm_exporter_verify,
    dev_char_symlinks, dcgm_host_engine, device_plugin, device_plugin_verify, driver_modules, driver_params, driver_plan,
    driver_services, gpu_burn_in, host_imex,
    gpu_health_read, gpu_info, gpu_operator, gpu_operator_mig, gpu_node_plan, gpu_simulator, health_quarantine,
    mig_layout, mig_mode, mps_control, node_cordon, node_labels,
    runtime_class)
from tests.support import ctk_env, fuzz_values, rigs
from tests.support.ansible_run import CANARY, first_failure, run_playbook, site_validation_play
from tests.support.modrun import run_main
from tests.support.rigs import snapshot

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_input_corpus.yml")
with open(CORPUS) as _handle:
    CASES = yaml.safe_load(_handle)["cases"]
MODULES = {"compute_mode": compute_mode, "gpu_info": gpu_info, "gpu_simulator": gpu_simulator,
           "mig_layout": mig_layout, "mig_mode": mig_mode, "node_labels": node_labels, "runtime_class": runtime_class,
           "mps_control": mps_control, "containerd_runtime": containerd_runtime, "device_plugin": device_plugin,
           "node_cordon": node_cordon, "gpu_operator": gpu_operator, "gpu_operator_mig": gpu_operator_mig,
           "device_plugin_verify": device_plugin_verify, "cluster_lease": cluster_lease,
           "cluster_profiles": cluster_profiles, "gpu_node_plan": gpu_node_plan, "driver_modules": driver_modules,
           "driver_params": driver_params,
           "driver_plan": driver_plan, "driver_services": driver_services, "gpu_health_read": gpu_health_read,
           "health_quarantine": health_quarantine, "gpu_burn_in": gpu_burn_in,
           "dcgm_host_engine": dcgm_host_engine, "dcgm_exporter": dcgm_exporter,
           "dcgm_exporter_verify": dcgm_exporter_verify, "dev_char_symlinks": dev_char_symlinks,
           "host_imex": host_imex}
KIND_MODULE = {"mps": "mps_control", "containerd": "containerd_runtime", "helm": "device_plugin"}


def _ids(kind):
    return [pytest.param(c, id=c["id"]) for c in CASES if c["kind"] == kind]


def substitute(value, mapping):
    if isinstance(value, str):
        for key, repl in mapping.items():
            value = value.replace("{%s}" % key, repl)
        return value
    if isinstance(value, list):
        return [substitute(v, mapping) for v in value]
    if isinstance(value, dict):
        return dict((substitute(k, mapping), substitute(v, mapping)) for k, v in value.items())
    return value


def assert_clear_failure(case, res):
    if os.environ.get("CORPUS_SHOW"):          # CORPUS_SHOW=1 pytest -s: print every case's message for review
        print("\n[%s] %s" % (case["id"], res.get("msg")))
    assert res.get("failed") is True, "%s did not fail: %s" % (case["id"], res)
    assert not res.get("changed"), "%s reports changed" % case["id"]
    missing = [f for f in case["expect"] if f not in res["msg"]]
    assert not missing, "%s: message lacks %s:\n%s" % (case["id"], missing, res["msg"])


def test_corpus_is_big_enough():
    kinds = set(c["kind"] for c in CASES)
    assert len(CASES) >= 60 and len(set(c["id"] for c in CASES)) == len(CASES)
    assert kinds == {"sim", "containerd", "cdi", "mps", "kube", "helm", "operator", "driver", "dcgm", "imex", "role", "site",
                     "filter"}
    modules = set(c.get("module") or KIND_MODULE.get(c["kind"]) for c in CASES if c["kind"] != "role")
    assert modules >= set(MODULES)


def make_rig(case, directory):
    """The case's rig (tests/support/rigs.py) with the case's files in it (``files``: {name: text};
    ``special_files``: {name: kind of tests/support/fuzz_values.make_special}), and the {placeholder: path} it
    offers the case's arguments ({tmp}: the rig's directory; {etc}: containerd's config directory; {standins}: the lab's
    stand-in tools, tests/support/bin; {9x5000}: 5000
    nines; {x64}: 64 x; {a,x300}: 300 a's joined by commas)."""
    kind = case["kind"]
    mapping = {"9x5000": "9" * 5000,        # a number longer than int() converts (4300 digits)
               "x64": "x" * 64, "a,x300": ",".join("a" * 300)}     # a label value past 63; a node name past 253
    mapping["standins"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "bin")
    if kind == "sim":
        rig = rigs.SimRig(directory, shape=case.get("shape"), enable=case.get("enable", []), setup=case.get("setup"),
                          state_text=case.get("state_text"), state_dir=case.get("state_dir", False))
    elif kind == "containerd":
        rig = rigs.ContainerdRig(directory, config_text=case["config_text"])
        mapping["etc"] = rig.etc
    elif kind == "driver":
        rig = rigs.DriverRig(directory, module=case["module"])
    elif kind == "cdi":
        rig = rigs.CdiRig(directory, module=case["module"])
    else:
        rig = rigs.RIGS[kind](directory)
    for name, text in (case.get("files") or {}).items():
        with open(rig.path(name), "w") as handle:
            handle.write(text)
    for name, special in (case.get("special_files") or {}).items():
        fuzz_values.make_special(rig.path(name), special)
    mapping["tmp"] = rig.dir
    return rig, mapping


def run_case(case, directory, monkeypatch):
    """Run the case's module against its rig; assert a clear failure and that nothing changed."""
    rig, mapping = make_rig(case, directory)
    try:
        rigs.apply_env(rig.env, monkeypatch.setenv, lambda key: monkeypatch.delenv(key, raising=False))
        args = dict(rig.args)
        if case.get("gpus_of"):                 # operator cases: gpu_info's facts of one of the rig's nodes
            args["gpus"] = rig.facts[case["gpus_of"]]
        for key, value in substitute(case["args"], mapping).items():
            if value is None and case["kind"] == "helm":
                args.pop(key, None)             # helm cases: null removes one of the rig's arguments
            else:
                args[key] = value
        before = rig.state()
        res = run_main(MODULES[case.get("module") or KIND_MODULE[case["kind"]]].main, args, diff=True,
                       **rig.internal)
        assert_clear_failure(case, res)
        assert rig.changes(before) == []
    finally:
        rig.close()


@pytest.mark.parametrize("case", _ids("sim"))
def test_sim(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("mps"))
def test_mps(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("containerd"))
def test_containerd(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("kube"))
def test_kube(case, tmp_path, monkeypatch):
    if case["module"] == "node_labels":
        case = dict(case, args=dict({"hostname": [], "internal_ips": []}, **case["args"]))
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("operator"))
def test_operator(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("driver"))
def test_driver(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("cdi"))
def test_cdi(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("dcgm"))
def test_dcgm(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", _ids("imex"))
def test_imex(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.skipif(not os.path.exists(rigs.HELM), reason="helm not installed: run make setup")
@pytest.mark.parametrize("case", _ids("helm"))
def test_helm(case, tmp_path, monkeypatch):
    run_case(case, tmp_path, monkeypatch)


# ----------------------------------------------------------------------------------------------- filters
@pytest.mark.parametrize("case", _ids("filter"))
def test_filter(case):
    """A filter given ``args`` (the filter's input first) raises AnsibleFilterError with every ``expect`` fragment."""
    from ansible.errors import AnsibleFilterError
    plugin = importlib.import_module("ansible_collections.gpuops.nvidia.plugins.filter.%s" % case["file"])
    function = plugin.FilterModule().filters()[case["filter"]]
    with pytest.raises(AnsibleFilterError) as raised:
        function(*case["args"])
    assert_clear_failure(case, {"failed": True, "msg": str(raised.value)})


# ----------------------------------------------------------------------------------------------- roles, site
# Role cases apply their role (its argument spec and its own checks); site cases run site.yml's first play, which
# must refuse the value for every node before anything changes anywhere. All in one ansible-playbook run.
ROLE_PLAY = """---
- name: Bad-input corpus, role cases (one host per case)
  hosts: role_cases
  gather_facts: false
  environment: "{{ gpuops_environment }}"
  tasks:
    - name: Apply the case's role
      ansible.builtin.include_role:
        name: "gpuops.nvidia.{{ case_role }}"
"""


@pytest.fixture(scope="module")
def role_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("roles")
    groups, dirs = {"role_cases": {}, "site_cases": {CANARY: {"ansible_connection": "local"}}}, {}
    for case in CASES:
        if case["kind"] not in ("role", "site"):
            continue
        d = base / case["id"]
        d.mkdir()
        state = str(d / "state.json")
        SimulatedBackend(state, shape="hgx-h200").clear_call_log()
        config = d / "etc" / "containerd" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(ctk_env.fixture_text("golden-input-v2.toml"))
        hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "case_role": case.get("role"),
              "gpuops_environment": {"GPUOPS_SIMULATED_GPUS": state,
                                     "PATH": rigs.FAKE_BIN + os.pathsep + os.environ["PATH"],
                                     "FAKE_SYSTEMD_STATE": str(d / "systemd.json"),
                                     "FAKE_SYSTEMD_UNIT_DIR": str(d / "units")},
              # everything a role could write points into the case directory
              "mig_root": str(d / "root"), "mig_manage_systemd": False, "mig_manage_services": False,
              "mig_boot_python": sys.executable,
              "compute_mode_unit_directory": str(d / "units"), "compute_mode_manage_systemd": False,
              "mps_control_service_manager": "none", "mps_control_pipe_directory": str(d / "pipe"),
              "mps_control_log_directory": str(d / "log"),
              "containerd_runtime_config_path": str(config),
              "containerd_runtime_drop_in_path": str(config.parent / "conf.d" / "99-nvidia.toml"),
              "containerd_runtime_nvidia_ctk_path": ctk_env.ctk_wrapper(base / ("bin-" + case["id"])),
              "containerd_runtime_containerd_path": ctk_env.require_containerd(),
              "containerd_runtime_restart_method": "none"}
        hv.update(case["vars"])
        groups["%s_cases" % case["kind"]][case["id"]] = hv
        dirs[case["id"]] = str(d)
    inventory = base / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": dict((g, {"hosts": h}) for g, h in groups.items())}}))
    playbook = base / "play.yml"
    playbook.write_text(yaml.safe_dump([site_validation_play("site_cases")] + yaml.safe_load(ROLE_PLAY),
                                       sort_keys=False))
    before = dict((cid, snapshot(d)) for cid, d in dirs.items())
    data, proc = run_playbook(str(playbook), inventory=str(inventory))
    assert data is not None, proc.stdout + proc.stderr
    after = dict((cid, snapshot(d)) for cid, d in dirs.items())
    return data, before, after


@pytest.mark.slow
@pytest.mark.parametrize("case", _ids("role") + _ids("site"))
def test_role(case, role_run):
    data, before, after = role_run
    res = first_failure(data, case["id"]) or {"failed": False, "text": "no task failed for %s" % case["id"]}
    assert_clear_failure(case, dict(res, msg=res["text"]))
    assert after[case["id"]] == before[case["id"]]
