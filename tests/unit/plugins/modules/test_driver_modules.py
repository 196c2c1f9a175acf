"""driver_modules against a node root in a temporary directory: the kmod stand-ins (tests/support/bin/modprobe,
rmmod, modinfo) change its /proc/modules, /sys/module and /proc/driver/nvidia; the systemctl stand-in runs the
daemons' units, whose Exec lines open and close the device files under the root (tests/support/driver_files.py), so
a daemon holds the driver exactly while it runs."""
import json
import os
import subprocess
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.modules import driver_modules
from tests.support import driver_files as df
from tests.support.modrun import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FAKES = os.path.join(ROOT, "tests", "support", "bin")
DRIVER_FILES = os.path.join(ROOT, "tests", "support", "driver_files.py")
OLD, NEW = "570.172.08", "580.95.05"
GPU = "0000:47:00.0"
POD_UID = "8d2c1a52-4c11-4f3e-9a0b-2f7e4c1d9e01"
CONTAINER = "a" * 64


def unit_text(pid, unit, command, release=True):
    hold = "%s %s hold %d %s %s" % (sys.executable, DRIVER_FILES, pid, unit, command)
    text = "[Service]\nExecStart=%s\n" % hold
    if release:
        text += "ExecStop=%s %s release %d\n" % (sys.executable, DRIVER_FILES, pid)
    return text


class Node(object):
    def __init__(self, tmp, monkeypatch):
        self.tmp = str(tmp)
        self.root = os.path.join(self.tmp, "root")
        self.units = os.path.join(self.tmp, "units")
        os.makedirs(self.units)
        self.sd_state = os.path.join(self.tmp, "systemd.json")
        for var, value in ((df.ENV_ROOT, self.root), ("FAKE_SYSTEMD_STATE", self.sd_state),
                           ("FAKE_SYSTEMD_UNIT_DIR", self.units),
                           ("GPUOPS_NODE_LOCK", os.path.join(self.tmp, "node.lock"))):
            monkeypatch.setenv(var, value)
        df.set_kernel(self.root, "6.8.0-45-generic")
        dev = df.path(self.root, "sys/bus/pci/devices", GPU)
        os.makedirs(dev)
        for key, value in (("vendor", "0x10de"), ("device", "0x2335"), ("class", "0x030200")):
            df.write(dev, key, value + "\n")
        df.install_module_files(self.root, OLD)
        df.load_driver(self.root, OLD)

    def add_unit(self, unit, pid, command, release=True):
        with open(os.path.join(self.units, unit), "w") as handle:
            handle.write(unit_text(pid, unit, command, release))
        self.systemctl("daemon-reload")
        self.systemctl("start", unit)

    def systemctl(self, *args):
        return subprocess.run([os.path.join(FAKES, "systemctl")] + list(args), capture_output=True, text=True,
                              check=False)

    def active(self, unit):
        return self.systemctl("is-active", unit).stdout.strip() == "active"

    def systemctl_calls(self):
        with open(self.sd_state) as handle:
            return json.load(handle)["calls"]

    def run(self, check=False, **args):
        args.setdefault("root", self.root)
        for tool in ("modprobe", "rmmod", "modinfo", "systemctl"):
            args.setdefault(tool, [os.path.join(FAKES, tool)])
        return run_main(driver_modules.main, args, check_mode=check, diff=True)

    def modules(self):
        return df.loaded(self.root)

    def version(self):
        return (df.read(self.root, "sys/module/nvidia/version") or "").strip() or None

    def snapshot(self):
        return df.snapshot(self.root)


@pytest.fixture
def node(tmp_path, monkeypatch):
    n = Node(tmp_path, monkeypatch)
    n.add_unit("nvidia-persistenced.service", 900, "/usr/bin/nvidia-persistenced")
    return n


def upgrade_files(node):
    """The 580 packages replace the module files in place (as a package upgrade does)."""
    df.install_module_files(node.root, NEW)


def test_persistenced_holds_the_driver_in_the_rig(node):
    # the rig itself: a running daemon is a holder and a reference on nvidia, and a stop releases both
    assert node.modules()["nvidia"]["refcnt"] == 2 + 2
    node.systemctl("stop", "nvidia-persistenced.service")
    assert node.modules()["nvidia"]["refcnt"] == 2


def test_check_mode_plans_the_reload_and_touches_nothing(node):
    upgrade_files(node)
    before = node.snapshot()
    calls = len(node.systemctl_calls())
    res = node.run(check=True, state="reloaded", version=NEW)
    assert res["changed"] is True, res
    assert res["actions"] == ["stop nvidia-persistenced.service", "rmmod nvidia_uvm", "rmmod nvidia_modeset",
                              "rmmod nvidia", "modprobe nvidia", "modprobe nvidia_uvm", "modprobe nvidia_modeset",
                              "start nvidia-persistenced.service"]
    assert res["diff"]["before"]["version"] == OLD and res["diff"]["after"]["version"] == NEW
    assert node.snapshot() == before
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []
    assert node.active("nvidia-persistenced.service")


def test_reload_570_to_580_then_idempotent(node):
    upgrade_files(node)
    res = node.run(state="reloaded", version=NEW, flavour="open")
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["previous"] == {"version": OLD, "flavour": "open", "modules": ["nvidia", "nvidia_uvm", "nvidia_modeset"]}
    assert (res["version"], res["flavour"]) == (NEW, "open")
    assert res["modules"] == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
    assert [d["unit"] for d in res["daemons_stopped"]] == ["nvidia-persistenced.service"]
    assert [d["unit"] for d in res["daemons_started"]] == ["nvidia-persistenced.service"]
    assert node.version() == NEW
    assert NEW in df.read(node.root, "proc/driver/nvidia/version")
    assert node.active("nvidia-persistenced.service")
    assert node.modules()["nvidia"]["refcnt"] == 4  # two dependents, persistenced's two open files
    assert not os.path.exists(df.path(node.root, "var/lib/gpuops/driver-modules.json"))

    calls = len(node.systemctl_calls())
    again = node.run(state="reloaded", version=NEW, flavour="open")
    assert again["changed"] is False, again
    assert again["actions"] == []
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []


def test_unload_refused_with_a_holder_named_and_nothing_stopped(node):
    upgrade_files(node)
    df.add_holder(node.root, 4242, ["python3", "train.py"], cgroup="0::/kubepods.slice/kubepods-besteffort.slice/"
                  "kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope" % (POD_UID.replace("-", "_"), CONTAINER))
    before = node.snapshot()
    calls = len(node.systemctl_calls())
    res = node.run(state="reloaded", version=NEW)
    assert res["failed"] is True and res["changed"] is False
    assert "PID 4242 python3 (pod UID %s, container %s) holds" % (POD_UID, CONTAINER[:12]) in res["msg"], res["msg"]
    assert "Nothing was stopped or unloaded" in res["msg"]
    assert len(res["holders"]) == 1
    # persistenced holds the files too, but it is one of the daemons the run would stop: not named
    assert "nvidia-persistenced" not in res["msg"]
    assert node.snapshot() == before
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []
    assert node.active("nvidia-persistenced.service")


def test_check_mode_refuses_the_same_way(node):
    df.add_holder(node.root, 4242, ["python3", "train.py"])
    res = node.run(check=True, state="unloaded")
    assert res["failed"] is True and "PID 4242 python3" in res["msg"]


def test_a_daemon_that_keeps_the_files_open_is_found_after_the_stop_and_everything_is_started_again(node):
    # DCGM's unit stops without closing its files (its ExecStop does nothing): the second look finds it
    node.add_unit("nvidia-dcgm.service", 901, "/usr/bin/nv-hostengine", release=False)
    upgrade_files(node)
    res = node.run(state="reloaded", version=NEW)
    assert res["failed"] is True
    assert "still in use after its daemons were stopped" in res["msg"]
    assert "PID 901 nv-hostengine (unit nvidia-dcgm.service)" in res["msg"]
    assert "Backed out: the daemons this run stopped were started again" in res["msg"]
    assert node.active("nvidia-persistenced.service") and node.active("nvidia-dcgm.service")
    assert node.version() == OLD and set(node.modules()) == {"nvidia", "nvidia_uvm", "nvidia_modeset"}
    assert not os.path.exists(df.path(node.root, "var/lib/gpuops/driver-modules.json"))
    stops = [c for c in node.systemctl_calls() if c[0] == "stop"]
    assert stops == [["stop", "nvidia-dcgm.service"], ["stop", "nvidia-persistenced.service"]]  # DCGM first


def test_every_gpu_holder_of_the_step_registry_is_stopped_and_started_again_in_its_order(node):
    """NVSM and the MPS control daemon (its unit named without .service, as the mps_control role names it) hold the
    driver: the registry's table has them, so the reload stops them first and starts them after persistenced."""
    node.add_unit("nvsm.service", 902, "/usr/bin/nvsm")
    node.add_unit("team-mps.service", 903, "/usr/bin/nvidia-cuda-mps-control")
    upgrade_files(node)
    res = node.run(state="reloaded", version=NEW, mps_unit="team-mps")
    assert not res.get("failed"), res
    assert [d["unit"] for d in res["daemons_stopped"]] == ["nvsm.service", "team-mps.service",
                                                           "nvidia-persistenced.service"]
    assert [d["unit"] for d in res["daemons_started"]] == ["nvidia-persistenced.service", "team-mps.service",
                                                           "nvsm.service"]
    assert node.version() == NEW and node.active("nvsm.service") and node.active("team-mps.service")


def test_an_mps_unit_that_is_not_a_unit_name_is_refused_before_anything(node):
    before = node.snapshot()
    res = node.run(state="reloaded", version=NEW, mps_unit="a b")
    assert res["failed"] is True
    assert "mps_unit: 'a b' is not a systemd service unit name: give letters" in res["msg"], res["msg"]
    assert node.snapshot() == before and node.active("nvidia-persistenced.service")


def test_a_kernel_reference_without_a_process_refuses_by_the_driver_containers_rule(node):
    df.set_refcnt(node.root, "nvidia_uvm", +1)
    res = node.run(state="unloaded")
    assert res["failed"] is True
    assert "module nvidia_uvm has 1 reference(s) beyond none expected" in res["msg"], res["msg"]
    assert node.active("nvidia-persistenced.service")
    assert "nvidia_uvm" in node.modules()


def test_reload_refused_when_the_installed_module_is_not_the_version(node):
    before = node.snapshot()
    res = node.run(state="reloaded", version=NEW)
    assert res["failed"] is True
    assert "installed for the running kernel is %s, not %s" % (OLD, NEW) in res["msg"]
    assert node.snapshot() == before and node.active("nvidia-persistenced.service")


def test_loaded_refuses_to_replace_another_loaded_version(node):
    upgrade_files(node)
    before = node.snapshot()
    res = node.run(state="loaded", version=NEW)
    assert res["failed"] is True and "use state=reloaded" in res["msg"]
    assert node.snapshot() == before


def test_bad_version_is_refused_before_anything(node):
    before = node.snapshot()
    res = node.run(state="reloaded", version="latest")
    assert res["failed"] is True and "'latest' is not a driver version" in res["msg"]
    assert node.snapshot() == before


def test_unload_then_load_with_a_load_fault_says_what_is_loaded(node):
    res = node.run(state="unloaded")
    assert res["changed"] is True and res["modules"] == [] and not node.modules()
    assert not node.active("nvidia-persistenced.service")
    assert os.path.exists(df.path(node.root, "var/lib/gpuops/driver-modules.json"))
    assert node.run(state="unloaded")["changed"] is False

    upgrade_files(node)
    df.fail_load(node.root, "nvidia_uvm", "Key was rejected by service")
    res = node.run(state="loaded", version=NEW)
    assert res["failed"] is True
    assert "modprobe nvidia_uvm failed (rc 1): modprobe: ERROR: could not insert 'nvidia_uvm': Key was rejected " \
           "by service" in res["msg"], res["msg"]
    assert "loaded now: nvidia (%s, open)" % NEW in res["msg"]
    assert "Not started (recorded in" in res["msg"] and "nvidia-persistenced" in res["msg"]
    assert not node.active("nvidia-persistenced.service")

    df.clear_faults(node.root)
    res = node.run(state="loaded", version=NEW)
    assert res["changed"] is True and res["actions"] == ["modprobe nvidia_uvm", "modprobe nvidia_modeset",
                                                         "start nvidia-persistenced.service"]
    assert node.active("nvidia-persistenced.service") and node.version() == NEW
    assert not os.path.exists(df.path(node.root, "var/lib/gpuops/driver-modules.json"))
    assert node.run(state="loaded", version=NEW)["changed"] is False


def test_optional_modules_loaded_before_come_back(node):
    df.install_module_files(node.root, OLD)
    df.load_driver(node.root, OLD, modules=("nvidia_drm", "nvidia_peermem"))
    upgrade_files(node)
    res = node.run(state="reloaded", version=NEW)
    assert not res.get("failed"), res
    assert res["actions"][1:6] == ["rmmod nvidia_peermem", "rmmod nvidia_uvm", "rmmod nvidia_drm",
                                   "rmmod nvidia_modeset", "rmmod nvidia"]
    assert res["modules"] == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"]


@pytest.fixture
def pid_daemon_node(tmp_path, monkeypatch):
    """A node whose Fabric Manager runs from its pid file, no unit: a real background process."""
    n = Node(tmp_path, monkeypatch)
    n.pid_file = df.path(n.root, "var/run/nvidia-fabricmanager/nv-fabricmanager.pid")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "fake_daemon.py"), n.pid_file], check=True,
                   timeout=30)
    yield n
    text = df.read(n.root, "var/run/nvidia-fabricmanager/nv-fabricmanager.pid")
    if text and text.strip().isdigit():
        try:
            os.kill(int(text), 15)
        except OSError:
            pass


def test_a_pid_file_daemon_is_stopped_by_sigterm_and_started_again_with_its_command_line(pid_daemon_node):
    node = pid_daemon_node
    first = int(df.read(node.root, "var/run/nvidia-fabricmanager/nv-fabricmanager.pid"))
    assert node.modules()["nvidia"]["refcnt"] == 4  # the daemon holds two files
    res = node.run(state="unloaded")
    assert not res.get("failed"), res
    assert res["actions"][0] == "stop NVIDIA Fabric Manager (nv-fabricmanager) (PID %d)" % first
    assert not node.modules() and not os.path.exists(node.pid_file)
    with open(df.path(node.root, "var/lib/gpuops/driver-modules.json")) as handle:
        record = json.load(handle)
    assert record["daemons"][0]["argv"][-1] == node.pid_file
    upgrade_files(node)
    res = node.run(state="loaded", version=NEW)
    assert not res.get("failed"), res
    second = int(df.read(node.root, "var/run/nvidia-fabricmanager/nv-fabricmanager.pid"))
    assert second != first and os.path.isdir(df.path(node.root, "proc", str(second)))
    assert [d["name"] for d in res["daemons_started"]] == ["fabricmanager"]
    assert node.modules()["nvidia"]["refcnt"] == 4


def test_a_process_that_opens_the_files_while_the_daemons_stop_is_named_and_the_daemons_start_again(node):
    # the point the test chooses: persistenced's stop is when a workload opens the GPU
    with open(os.path.join(node.units, "nvidia-persistenced.service"), "a") as handle:
        handle.write("ExecStop=%s %s hold 5555 session-7.scope ./burn\n" % (sys.executable, DRIVER_FILES))
    node.systemctl("daemon-reload")
    upgrade_files(node)
    res = node.run(state="reloaded", version=NEW)
    assert res["failed"] is True
    assert "PID 5555 burn (unit session-7.scope) holds" in res["msg"], res["msg"]
    assert node.active("nvidia-persistenced.service") and node.version() == OLD
    assert res["daemons_started"] == res["daemons_stopped"] == [
        {"name": "persistenced", "label": "nvidia-persistenced", "unit": "nvidia-persistenced.service"}]


# ---- bad input found by the input fuzzer (tests/reliability/test_fuzz_inputs.py): refused before anything changes -----
@pytest.mark.parametrize("kind", ["fifo", "zero", "deep-json"])
def test_record_path_not_a_record_file_is_refused_and_nothing_changes(node, kind):
    # before: a FIFO blocked the run for ever (open() waits for a writer), a device was read until memory ran out,
    # JSON nested 100000 deep ended in a RecursionError traceback
    from tests.support.fuzz_values import make_special
    record = make_special(os.path.join(node.tmp, "record-" + kind), kind)
    upgrade_files(node)
    before, calls = node.snapshot(), len(node.systemctl_calls())
    res = node.run(state="reloaded", version=NEW, record_path=record)
    assert res.get("failed") and not res.get("changed"), res
    assert "record_path" in res["msg"] and "Nothing was stopped or unloaded" in res["msg"], res["msg"]
    assert node.snapshot() == before
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []


def test_record_of_another_shape_is_refused_before_a_load(node):
    # before: a daemon without a name ended in a KeyError traceback halfway through the run
    record = os.path.join(node.tmp, "record.json")
    with open(record, "w") as handle:
        handle.write('{"daemons": [{"label": "x"}], "modules": ["nvidia"]}\n')
    before = node.snapshot()
    res = node.run(state="loaded", record_path=record)
    assert res.get("failed") and not res.get("changed"), res
    assert "record_path" in res["msg"] and "daemons is not a list of objects with a name" in res["msg"], res["msg"]
    assert node.snapshot() == before


@pytest.mark.parametrize("tool", ["rmmod", "modprobe", "systemctl"])
def test_a_tool_that_cannot_run_is_refused_before_a_daemon_stops(node, tool):
    # before: rmmod given as a file that is not a program stopped nvidia-persistenced and wrote the record, then
    # failed inside run_command ("Error executing command.") without starting the daemon again
    upgrade_files(node)
    not_a_program = os.path.join(node.tmp, "not-a-program")
    with open(not_a_program, "w") as handle:
        handle.write("text\n")
    before, calls = node.snapshot(), len(node.systemctl_calls())
    res = node.run(state="reloaded", version=NEW, **{tool: [not_a_program]})
    assert res.get("failed") and not res.get("changed"), res
    assert res["msg"].startswith("%s: " % tool) and "is not an executable program" in res["msg"], res["msg"]
    assert node.snapshot() == before
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []
    assert node.active("nvidia-persistenced.service")


@pytest.mark.parametrize("tool", ["rmmod", "modprobe"])
@pytest.mark.parametrize("check", [True, False], ids=["check", "apply"])
def test_a_tool_not_given_and_not_found_is_refused_before_a_daemon_stops(node, monkeypatch, tool, check):
    # before: a reload looked rmmod and modprobe up only when it ran them, after nvidia-persistenced had been stopped
    # and the record written, and failed saying that nothing was stopped, without starting the daemon again
    upgrade_files(node)
    real = AnsibleModule.get_bin_path

    def get_bin_path(module, arg, required=False, opt_dirs=None):
        return None if arg == tool else real(module, arg, required=required, opt_dirs=opt_dirs)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", get_bin_path)
    before, calls = node.snapshot(), len(node.systemctl_calls())
    res = node.run(check=check, state="reloaded", version=NEW, **{tool: None})
    assert res.get("failed") and not res.get("changed"), res
    assert tool in res["msg"] and "Nothing was stopped or unloaded" in res["msg"], res["msg"]
    assert node.snapshot() == before
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []
    assert node.active("nvidia-persistenced.service")


def test_preflight_before_the_packages_names_what_would_refuse_the_reload_and_changes_nothing(node):
    # issue 47, 2: the packages are not installed yet (the module on disk is still OLD): the preflight does not compare
    # it, and names a plain process and a pod's process; with preflight_pods=defer the pod's is only listed
    df.add_holder(node.root, 4242, ["python3", "serve.py"], cgroup="0::/user.slice/session-1.scope")
    df.add_holder(node.root, 4343, ["python3", "train.py"], cgroup="0::/kubepods.slice/kubepods-besteffort.slice/"
                  "kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope" % (POD_UID.replace("-", "_"), CONTAINER))
    before, calls = node.snapshot(), len(node.systemctl_calls())
    for check in (False, True):
        res = node.run(check=check, state="reloaded", version=NEW, preflight=True)
        assert not res.get("failed") and res["changed"] is False and res["reload"] is True, res
        assert len(res["holders"]) == 2 and res["deferred"] == [], res
        assert "PID 4242 python3 (unit session-1.scope) holds" in res["msg"] and "PID 4343" in res["msg"], res
        assert res["msg"].startswith("the driver cannot be reloaded at %s now: " % NEW), res["msg"]
        assert "nvidia-persistenced" not in res["msg"]       # a daemon the reload stops and starts again
    res = node.run(state="reloaded", version=NEW, preflight=True, preflight_pods="defer")
    assert [h.split(" holds")[0] for h in res["holders"]] == ["PID 4242 python3 (unit session-1.scope)"], res
    assert [h.split(" holds")[0] for h in res["deferred"]] == [
        "PID 4343 python3 (pod UID %s, container %s)" % (POD_UID, CONTAINER[:12])], res
    assert node.snapshot() == before and node.version() == OLD
    assert [c for c in node.systemctl_calls()[calls:] if c[0] in ("stop", "start")] == []
    assert node.active("nvidia-persistenced.service")


def test_preflight_finds_nothing_where_no_reload_is_due_or_nothing_holds_the_driver(node):
    # nothing but the daemons the reload stops: no blocker (the installed module still OLD: not compared)
    res = node.run(state="reloaded", version=NEW, preflight=True)
    assert (res["reload"], res["blockers"], res["msg"], res["changed"]) == (True, [], "", False), res
    # the declared driver is loaded: no reload due, whatever holds it
    df.add_holder(node.root, 4242, ["python3", "serve.py"])
    res = node.run(state="reloaded", version=OLD, preflight=True)
    assert (res["reload"], res["blockers"]) == (False, []), res
    # a preflight checks a reload only
    res = node.run(state="loaded", version=NEW, preflight=True)
    assert res["failed"] and "give state=reloaded" in res["msg"], res


def test_the_module_is_the_base_hooks_without_its_own_converge():
    # issue 48: read, plan, apply and after are driver_modules' own; converge and run are the base's
    cls = driver_modules.DriverModules
    for hook in ("read", "plan", "apply", "after", "lock"):
        assert hook in vars(cls), hook
    for base in ("converge", "run", "validate"):
        assert base not in vars(cls), base


def test_what_check_mode_plans_is_what_the_run_does(node):
    upgrade_files(node)
    planned = node.run(check=True, state="reloaded", version=NEW)
    done = node.run(state="reloaded", version=NEW)
    assert planned["actions"] == done["actions"] and planned["changed"] is done["changed"] is True, (planned, done)
    for key in ("version", "flavour", "modules", "previous"):
        assert planned[key] == done[key], key
    planned = node.run(check=True, state="unloaded")
    done = node.run(state="unloaded")
    assert planned["actions"] == done["actions"] and planned["modules"] == done["modules"] == [], (planned, done)
    assert node.run(check=True, state="unloaded")["changed"] is False
