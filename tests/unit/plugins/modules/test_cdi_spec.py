"""cdi_spec on simulated nodes with the nvidia-ctk stand-in (tests/support/nvidia_ctk_cdi.py, held to the real tool's
recorded output by tests/unit/test_nvidia_ctk_cdi_standin.py): through real ansible for check mode, apply and
re-run, MIG changes, a hand-edited spec, a kill between generate and replace, and the refusals."""
import json
import os
import signal
import subprocess
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _cdi
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.support.ansible_run import BIN, ROOT, ansible_env, run_module
from tests.support.modrun import run_here

MODULE = "gpuops.nvidia.cdi_spec"
CTK = os.path.join(ROOT, "tests", "support", "bin", "nvidia-ctk")


def _node(tmp_path, shape="dgx-a100-40gb"):
    path = str(tmp_path / "state.json")
    sim = SimulatedBackend(path, shape=shape)
    etc, run = tmp_path / "etc" / "cdi", tmp_path / "run" / "cdi"
    etc.mkdir(parents=True)
    run.mkdir(parents=True)
    args = {"spec_path": str(run / "nvidia.yaml"), "spec_dirs": [str(etc), str(run)], "nvidia_ctk_path": CTK}
    return sim, {"GPUOPS_SIMULATED_GPUS": path}, args


def _enable_mig(sim, indexes):
    for index in indexes:
        sim.set_mig_mode(index, True)
        if sim.read_gpu(index)["mig_mode_current"] != "Enabled":
            sim.reset_gpu(index)


def _layout(env, config_name):
    res = run_here("gpuops.nvidia.mig_layout", {"config_name": config_name}, env=env)
    assert not res.get("failed"), res
    return res


def _listed(spec_dir):
    """What the nvidia-ctk stand-in lists from one directory (the node's CDI view of it)."""
    proc = subprocess.run([CTK, "cdi", "list", "--spec-dir=%s" % spec_dir], capture_output=True, text=True,
                          env=ansible_env({}), check=True)
    return sorted(line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("nvidia.com/gpu="))


def _read(path):
    with open(path) as handle:
        return handle.read()


def test_check_then_apply_then_rerun_on_an_a100_node_lists_every_gpu(tmp_path):
    sim, env, args = _node(tmp_path)
    spec = args["spec_path"]
    check = run_module(MODULE, args, env=env, check=True, diff=True)[0]
    assert check["changed"] is True and check["action"] == "create", check
    assert not os.path.exists(spec) and os.listdir(os.path.dirname(spec)) == [], "check mode wrote something"
    assert check["diff"]["before"] == "" and "kind: nvidia.com/gpu" in check["diff"]["after"]

    applied = run_module(MODULE, args, env=env, diff=True)[0]
    assert applied["changed"] is True and applied["action"] == "create", applied
    gpus = sim.read_all()["gpus"]
    want = sorted(["%d" % g["index"] for g in gpus] + [g["uuid"] for g in gpus] + ["all"])
    assert applied["devices"] == want and applied["device_count"] == 8
    assert _listed(os.path.dirname(spec)) == want
    assert oct(os.stat(spec).st_mode & 0o777) == "0o644"
    record = json.loads(_read(_cdi.stamp_path(spec)))
    assert record["spec_sha256"] and record["driver_version"] == sim.read_all()["driver_version"]

    again = run_module(MODULE, args, env=env, diff=True)[0]
    assert again["changed"] is False and again["action"] == "none", again


def test_a_layout_change_regenerates_exactly_the_new_mig_devices(tmp_path):
    sim, env, args = _node(tmp_path)
    spec = args["spec_path"]
    run_here(MODULE, args, env=env)
    full = set(_listed(os.path.dirname(spec)))

    _enable_mig(sim, range(8))
    _layout(env, "all-balanced")
    res = run_here(MODULE, args, env=env, diff=True)
    assert res["changed"] is True and res["action"] == "replace", res
    migs = [(g["index"], m["uuid"]) for g in sim.read_all()["gpus"] for m in g["mig_devices"]]
    listed = set(_listed(os.path.dirname(spec)))
    assert not (listed & (full - {"all"})), "full-GPU names left after MIG was enabled"
    assert {uuid for _i, uuid in migs} <= listed
    for index in range(8):
        n = sum(1 for i, _u in migs if i == index)
        assert n == 4 and sorted(x for x in listed if x.startswith("%d:" % index)) == ["%d:%d" % (index, j)
                                                                                       for j in range(n)]
    assert len(listed) == 2 * len(migs) + 1

    _layout(env, "all-1g.5gb")
    res = run_here(MODULE, args, env=env)
    assert res["changed"] is True and res["action"] == "replace"
    new = {m["uuid"] for g in sim.read_all()["gpus"] for m in g["mig_devices"]}
    listed = set(_listed(os.path.dirname(spec)))
    assert new <= listed and not ({uuid for _i, uuid in migs} - new) & listed, "old MIG devices left in the spec"
    assert run_here(MODULE, args, env=env)["changed"] is False


def test_a_hand_edited_spec_is_restored_with_a_backup(tmp_path):
    sim, env, args = _node(tmp_path)
    spec = args["spec_path"]
    run_here(MODULE, args, env=env)
    good = _read(spec)
    with open(spec, "w") as handle:
        handle.write(good.replace('name: "0"', 'name: "9"'))
    res = run_here(MODULE, dict(args, backup=True), env=env, diff=True)
    assert res["changed"] is True and res["action"] == "replace"
    assert _read(spec) == good
    assert res["backup_file"].endswith("~") and 'name: "9"' in _read(res["backup_file"])
    # the backup's name is not one CDI readers load
    assert _listed(os.path.dirname(spec)) == _listed(os.path.dirname(spec))
    assert "9" not in _listed(os.path.dirname(spec))


def test_mig_enabled_with_no_devices_removes_the_stale_spec_and_warns(tmp_path):
    sim, env, args = _node(tmp_path, "h200-x1")
    spec = args["spec_path"]
    run_here(MODULE, args, env=env)
    assert os.path.exists(spec)
    _enable_mig(sim, [0])
    res = run_here(MODULE, args, env=env)
    assert res["changed"] is True and res["action"] == "remove" and res["device_count"] == 0, res
    assert not os.path.exists(spec)
    assert any("no GPU device to describe" in w for w in res.get("warnings", [])), res
    assert run_here(MODULE, args, env=env)["changed"] is False


def test_a_run_killed_between_generate_and_replace_leaves_the_old_spec_whole(tmp_path):
    sim, env, args = _node(tmp_path)
    spec = args["spec_path"]
    run_here(MODULE, args, env=env)
    old = _read(spec)
    _enable_mig(sim, range(8))
    _layout(env, "all-balanced")
    # The stand-in's `cdi list` (run on the private candidate, after generate, before the replace) announces
    # itself and waits: ansible's whole process group (module and stand-in included) is killed there.
    marker = tmp_path / "listing"
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-m", MODULE,
           "-a", json.dumps(args)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ansible_env(dict(env, NVIDIA_CTK_STANDIN_HANG_ON_LIST=str(marker))),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not marker.exists():
            assert proc.poll() is None and time.time() < deadline, "the module never reached the candidate's check"
            time.sleep(0.05)
    finally:
        # ansible puts itself in a session of its own: the stand-in names the process group it runs in
        groups = {proc.pid} | ({int(_read(str(marker)).split()[1])} if marker.exists() else set())
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    assert _read(spec) == old
    assert sorted(os.listdir(os.path.dirname(spec))) == [".nvidia.yaml.gpuops-verified", "nvidia.yaml"]
    res = run_here(MODULE, args, env=env)
    assert res["changed"] is True and res["action"] == "replace"


def test_another_spec_of_the_same_kind_is_refused_and_nothing_changes(tmp_path):
    sim, env, args = _node(tmp_path)
    etc, run = args["spec_dirs"]
    run_here(MODULE, args, env=env)
    spec = _read(args["spec_path"])
    # what NVIDIA's nvidia-cdi-refresh would have written, with ours moved to /etc/cdi
    with open(os.path.join(etc, "nvidia.yaml"), "w") as handle:
        handle.write(spec)
    res = run_here(MODULE, dict(args, spec_path=os.path.join(run, "gpus.yaml")), env=env)
    assert res.get("failed") and "nvidia-cdi-refresh" in res["msg"] and os.path.join(etc, "nvidia.yaml") in res["msg"]
    assert not os.path.exists(os.path.join(run, "gpus.yaml"))


@pytest.mark.parametrize("args, words", [
    ({"spec_path": "relative.yaml"}, "must be an absolute path"),
    ({"spec_path": "/x/cdi/nvidia.toml"}, "must end in .yaml or .json"),
    ({"spec_path": "/elsewhere/nvidia.yaml"}, "is not in a CDI spec directory"),
    ({"device_name_strategy": ["index", "index"]}, "distinct"),
])
def test_bad_parameters_are_refused_before_anything_is_read(tmp_path, args, words):
    sim, env, base = _node(tmp_path)
    if "spec_path" in args and args["spec_path"].startswith("/x/"):
        args = dict(args, spec_path=os.path.join(base["spec_dirs"][1], "nvidia.toml"))
    res = run_here(MODULE, dict(base, **args), env=env)
    assert res.get("failed") and words in res["msg"] and "nothing changed" in res["msg"], res
    assert os.listdir(base["spec_dirs"][1]) == []


def test_state_absent_removes_the_spec_and_its_record(tmp_path):
    sim, env, args = _node(tmp_path)
    run_here(MODULE, args, env=env)
    check = run_here(MODULE, dict(args, state="absent"), env=env, check=True)
    assert check["changed"] is True and os.path.exists(args["spec_path"])
    res = run_here(MODULE, dict(args, state="absent"), env=env)
    assert res["changed"] is True and os.listdir(args["spec_dirs"][1]) == []
    assert run_here(MODULE, dict(args, state="absent"), env=env)["changed"] is False
