"""dev_char_symlinks with the nvidia-ctk stand-in (its `system create-dev-char-symlinks` held to the real command's
recorded behaviour: tests/unit/test_nvidia_ctk_devchar_standin.py) on a simulated node root
(tests/support/dev_char_tree.py): check mode reports the links it would make and writes nothing, apply makes them and
NVIDIA's udev rule, a re-run changes nothing; links already right (udev's relative ones too) are no change; a name that
points elsewhere is left alone with a warning; a failing dry run is refused with nothing changed."""
import os

from tests.support import dev_char_tree
from tests.support.ansible_run import ROOT, run_module
from tests.support.modrun import run_here

MODULE = "gpuops.nvidia.dev_char_symlinks"
CTK = os.path.join(ROOT, "tests", "support", "bin", "nvidia-ctk")
EVERY = 4 + 2 + 2 * (1 + 15 * 9)     # the tree's links with --create-all (the real command's count: 278)


def node(tmp_path, case="create-all"):
    root = str(tmp_path / "root")
    dev_char_tree.prepare(root, case, nodes="file")
    args = {"dev_char_path": os.path.join(root, "dev", "char"), "nvidia_ctk_path": CTK,
            "udev_rule_path": os.path.join(root, "lib", "udev", "rules.d", "71-nvidia-dev-char.rules")}
    return root, args, {"GPUOPS_SIMULATED_ROOT": root}


def test_check_mode_apply_and_rerun_through_ansible(tmp_path):
    root, args, env = node(tmp_path)
    check = run_module(MODULE, args, env=env, check=True, diff=True)[0]
    assert check["changed"] is True and check["links"] == EVERY and len(check["created"]) == EVERY, check
    assert "%s/195:0 -> /dev/nvidia0" % args["dev_char_path"] in check["created"]
    assert check["udev_rule_changed"] is True and "195:254 -> /dev/nvidia-modeset" in check["diff"]["after"]
    assert not os.path.exists(args["dev_char_path"]) and not os.path.exists(args["udev_rule_path"])

    applied = run_module(MODULE, args, env=env)[0]
    assert applied["changed"] is True and len(applied["created"]) == EVERY
    links = dev_char_tree.links(args["dev_char_path"])
    assert len(links) == EVERY and links["195:1"] == "/dev/nvidia1" and links["238:1"] == "/dev/nvidia-uvm-tools"
    with open(args["udev_rule_path"]) as handle:
        rule = handle.read()
    assert ('ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="%s system create-dev-char-symlinks --create-all '
            '--dev-char-path=%s"\n' % (CTK, args["dev_char_path"])) in rule
    again = run_module(MODULE, args, env=env)[0]
    assert again["changed"] is False and again["created"] == [] and again["udev_rule_changed"] is False


def test_links_already_right_are_no_change_and_one_missing_is_made(tmp_path):
    root, args, env = node(tmp_path)
    assert run_here(MODULE, args, env=env)["changed"] is True
    one = os.path.join(args["dev_char_path"], "195:1")
    os.unlink(one)
    os.symlink("/dev/nvidia1", one)     # put back as nvidia-ctk writes it
    os.unlink(os.path.join(args["dev_char_path"], "195:0"))
    os.symlink("../../dev/nvidia0", os.path.join(args["dev_char_path"], "195:0"))  # relative, resolves elsewhere
    res = run_here(MODULE, args, env=env)
    # relative to ROOT/dev/char, ../../dev/nvidia0 is ROOT/dev/nvidia0, not the host path /dev/nvidia0: left alone
    assert res["changed"] is False and res["other"] == ["%s/195:0 (-> ../../dev/nvidia0)" % args["dev_char_path"]]
    assert any("left alone" in w for w in res["warnings"])
    os.unlink(os.path.join(args["dev_char_path"], "238:0"))
    check = run_here(MODULE, args, env=env, check=True)
    assert check["changed"] is True and check["created"] == ["%s/238:0 -> /dev/nvidia-uvm" % args["dev_char_path"]]
    assert not os.path.lexists(os.path.join(args["dev_char_path"], "238:0"))
    res = run_here(MODULE, args, env=env)
    assert res["changed"] is True and os.readlink(os.path.join(args["dev_char_path"], "238:0")) == "/dev/nvidia-uvm"
    assert os.readlink(os.path.join(args["dev_char_path"], "195:0")) == "../../dev/nvidia0"   # never replaced


def test_udevs_relative_links_count_as_right(tmp_path):
    # on a real host udev links /dev/char/195:0 -> ../nvidia0: dev_char_path /dev/char resolves it to /dev/nvidia0
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._dev_char import link_state
    base = tmp_path / "dev" / "char"
    base.mkdir(parents=True)
    os.symlink("../nvidia0", str(base / "195:0"))
    assert link_state(str(base / "195:0"), str(tmp_path / "dev" / "nvidia0")) == "right"
    assert link_state(str(base / "195:0"), "/dev/nvidia1") == "-> ../nvidia0"
    assert link_state(str(base / "195:9"), "/dev/nvidia9") == "missing"


def test_without_the_rule_only_links_and_a_changed_rule_is_rewritten(tmp_path):
    root, args, env = node(tmp_path)
    res = run_here(MODULE, dict(args, udev_rule=False), env=env)
    assert res["changed"] is True and res["udev_rule_changed"] is False and not os.path.exists(args["udev_rule_path"])
    os.makedirs(os.path.dirname(args["udev_rule_path"]))
    with open(args["udev_rule_path"], "w") as handle:
        handle.write("# an old rule\n")
    res = run_here(MODULE, args, env=env, diff=True)
    assert res["changed"] is True and res["udev_rule_changed"] is True and res["created"] == []
    assert "# an old rule" in res["diff"]["before"]
    assert run_here(MODULE, args, env=env)["changed"] is False


def test_no_gpu_is_nothing_to_do_and_a_failing_dry_run_is_refused(tmp_path):
    root, args, env = node(tmp_path, "no-gpu")
    res = run_here(MODULE, dict(args, udev_rule=False), env=env)
    assert res["changed"] is False and res["links"] == 0
    root, args, env = node(tmp_path / "b", "no-nvidia-major")
    res = run_here(MODULE, args, env=env)
    assert res.get("failed") and "no NVIDIA devices found" in res["msg"] and "nothing changed" in res["msg"], res
    assert not os.path.exists(args["dev_char_path"]) and not os.path.exists(args["udev_rule_path"])


def test_bad_paths_are_refused_before_anything_runs(tmp_path):
    res = run_here(MODULE, {"dev_char_path": "dev/char", "nvidia_ctk_path": CTK}, env={})
    assert res.get("failed") and "dev_char_path 'dev/char' must be an absolute path" in res["msg"], res
    res = run_here(MODULE, {"dev_char_path": "/dev/my char", "nvidia_ctk_path": CTK}, env={})
    assert res.get("failed") and "udev rule's RUN command" in res["msg"], res
    res = run_here(MODULE, {"dev_char_path": "/dev/my char", "udev_rule": False, "nvidia_ctk_path": CTK,
                            "udev_rule_path": "/"}, env={})
    assert res.get("failed") and "udev_rule_path '/' must be an absolute path" in res["msg"], res


def test_the_stamp_spares_the_node_plan_the_dry_run_until_what_it_depends_on_changes(tmp_path):
    # gpu_node_plan's check (node/_dev_char.read with trust_stamp) takes the links from the stamp the module wrote,
    # still looks at each link and the rule, and runs the dry run again where an input changed or no stamp is there
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _dev_char
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import load_stamp
    root, args, env = node(tmp_path)
    env = dict(env, GPUOPS_SIMULATED_GPUS="1")      # the simulated node's root is where its /proc is read
    params = dict(args, udev_rule=True)
    stamp = _dev_char.stamp_file(args["dev_char_path"])
    assert run_here(MODULE, args, env=env, check=True)["changed"] is True and not os.path.exists(stamp)
    assert run_here(MODULE, args, env=env)["changed"] is True
    assert len(load_stamp(stamp)["links"]) == EVERY

    calls = []

    def run(argv):
        calls.append(argv)
        return 1, "", "not expected"
    state = _dev_char.read(run, CTK, params, trust_stamp=True, root=root)
    assert calls == [] and state["stamped"] is True and state["missing"] == [] and _dev_char.reasons(state) == []
    os.unlink(os.path.join(args["dev_char_path"], "238:0"))
    state = _dev_char.read(run, CTK, params, trust_stamp=True, root=root)
    assert calls == [] and state["missing"] == [(os.path.join(args["dev_char_path"], "238:0"), "/dev/nvidia-uvm")]
    with open(os.path.join(root, "proc", "devices"), "a") as handle:
        handle.write("511 nvidia-caps-imex-channels\n")   # a driver reloaded with another major set
    try:
        _dev_char.read(run, CTK, params, trust_stamp=True, root=root)
    except _dev_char.DevCharError as exc:
        assert "not expected" in str(exc)
    assert len(calls) == 1 and "--dry-run" in calls[0]
    # the module itself never trusts the stamp: it makes the missing link and records the new inputs
    assert run_here(MODULE, args, env=env)["changed"] is True
    calls[:] = []
    assert _dev_char.read(run, CTK, params, trust_stamp=True, root=root)["stamped"] is True and calls == []
