"""SIGKILL at every internal step of a live driver reload (gpuops.nvidia.driver_modules, 570 -> 580), then a re-run
ends with the new driver loaded and its daemons running (module level; the site-level kills are in
tests/integration/test_site_driver_live.py). The module runs as its own process (`python -m`, as ansible runs it on a
node) against a node root whose nvidia-persistenced (the systemctl stand-in's unit) holds the device files, with the
kmod stand-ins (tests/support/bin). Every command the module runs through a stand-in is a step: stop
nvidia-persistenced, rmmod each module, modprobe each module, start nvidia-persistenced, and the reads between them
(modinfo, is-active). An uninterrupted reference run lists them (the stand-ins' log, tests/support/stop_points.py);
then, after each step that changes the node and after a read before and between them (kill_points), a fresh node's
run is stopped by the stand-in right after that step (SIGSTOP of the module, its parent), the test SIGKILLs it there,
and a re-run must bring the node to 580 with persistenced active and the module's record gone; a third run must
change nothing."""
import json
import os
import signal
import subprocess
import sys

from tests.support import driver_files as df
from tests.support.ansible_run import module_process_env
from tests.support.stop_points import STANDIN_LOG, STANDIN_STOP_AFTER, standin_log, wait_child_stopped
from tests.unit.plugins.modules.test_driver_modules import FAKES, NEW, Node, upgrade_files

UNIT = "nvidia-persistenced.service"


def _node(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    node.add_unit(UNIT, 900, "/usr/bin/nvidia-persistenced")
    upgrade_files(node)                         # 580's packages installed under the loaded 570
    return node


def _start(node, log=None, stop_after=None):
    path = os.path.join(node.tmp, "args.json")
    args = {"state": "reloaded", "version": NEW, "flavour": "open", "root": node.root}
    for tool in ("modprobe", "rmmod", "modinfo", "systemctl"):
        args[tool] = [os.path.join(FAKES, tool)]
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    env = module_process_env()
    for var, value in ((STANDIN_LOG, log), (STANDIN_STOP_AFTER, stop_after)):
        env.pop(var, None)
        if value is not None:
            env[var] = str(value)
    return subprocess.Popen([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules.driver_modules",
                             path], cwd=node.tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def _run(node, log=None):
    out, err = _start(node, log).communicate(timeout=120)
    assert out.strip(), err
    return json.loads(out[out.index("{"):])


def _serving(node):
    return (node.version(), node.active(UNIT), os.path.exists(df.path(node.root, "var/lib/gpuops/driver-modules.json")),
            sorted(node.modules()))


def test_the_reference_reload_runs_each_step_through_a_stand_in(tmp_path, monkeypatch):
    node = _node(tmp_path, monkeypatch)
    log = os.path.join(node.tmp, "standin.log")
    res = _run(node, log)
    assert not res.get("failed") and res["changed"] is True, res
    steps = standin_log(log)
    # the steps a user would name, in order (the reads between them are steps too)
    named = [s for s in steps if s.split()[0] in ("rmmod", "modprobe") or s.split()[:2] in (
        ["systemctl", "stop"], ["systemctl", "start"])]
    assert named == ["systemctl stop %s" % UNIT, "rmmod nvidia_uvm", "rmmod nvidia_modeset", "rmmod nvidia",
                     "modprobe nvidia", "modprobe nvidia_uvm", "modprobe nvidia_modeset",
                     "systemctl start %s" % UNIT], steps
    assert _serving(node) == (NEW, True, False, ["nvidia", "nvidia_modeset", "nvidia_uvm"])


def _reference_steps(tmp_path, monkeypatch):
    d = tmp_path / "reference"
    d.mkdir()
    node = _node(d, monkeypatch)
    log = os.path.join(node.tmp, "standin.log")
    assert not _run(node, log).get("failed")
    return standin_log(log)


def kill_points(steps):
    """The step numbers (1-based) to kill after: every step that changes the node (a daemon stopped or started, a
    module removed or inserted), the first read (nothing changed yet) and the last read before the daemons start again
    (the modules loaded, the daemons not back). The other reads (is-active of each daemon) sit between the same two
    changes as one of these, so a kill after them leaves the node as one of these does."""
    changes = [n for n, step in enumerate(steps, 1) if not step.startswith(("systemctl is-active", "modinfo"))]
    start = [n for n in changes if steps[n - 1].startswith("systemctl start")][0]
    return sorted(set([1, start - 1] + changes))


def test_sigkill_after_each_step_then_a_rerun_serves_580(tmp_path, monkeypatch):
    steps = _reference_steps(tmp_path, monkeypatch)
    points = kill_points(steps)
    assert [steps[n - 1].split()[0] for n in points] == [
        "modinfo", "systemctl", "rmmod", "rmmod", "rmmod", "modprobe", "modprobe", "modprobe", "systemctl",
        "systemctl"], [steps[n - 1] for n in points]
    for n in points:
        step = steps[n - 1]
        d = tmp_path / ("k%02d" % n)
        d.mkdir()
        node = _node(d, monkeypatch)
        log = os.path.join(node.tmp, "standin.log")
        proc = _start(node, log, stop_after=n)
        stopped = wait_child_stopped(proc)
        if stopped:
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        assert stopped, ("step %d (%s): the run ended before it" % (n, step), proc.returncode, out, err)
        assert standin_log(log) == steps[:n], (n, step)            # killed right after that step, not later
        again = _run(node)
        assert not again.get("failed"), (n, step, again)
        assert _serving(node) == (NEW, True, False, ["nvidia", "nvidia_modeset", "nvidia_uvm"]), (n, step)
        assert node.modules()["nvidia"]["refcnt"] == 4, (n, step)   # persistenced holds the new driver again
        third = _run(node)
        assert third["changed"] is False and third["actions"] == [], (n, step, third)


def test_the_stop_hook_is_off_without_its_log(tmp_path, monkeypatch):
    # the hook never fires in a run that does not ask for it (the lab's and the other tests' runs)
    node = _node(tmp_path, monkeypatch)
    proc = _start(node, log=None, stop_after=1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and json.loads(out[out.index("{"):])["changed"] is True, err
