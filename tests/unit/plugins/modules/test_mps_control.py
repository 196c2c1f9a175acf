"""mps_control end to end: real ansible runs the module; nvidia-cuda-mps-control and systemctl are the
stand-ins in tests/support/bin (state in files), so the module's commands, the unit it renders and its
reading of the daemon's answers are exercised without a GPU or systemd."""
import json
import os
import subprocess
import sys

import pytest

from tests.support.ansible_run import with_compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FAKES = os.path.join(ROOT, "tests", "support", "bin")
MUTATING = ("set_", "quit", "-d")

pytestmark = pytest.mark.slow


class Host(object):
    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.pipe = os.path.join(self.tmp, "pipe")
        self.log = os.path.join(self.tmp, "log")
        self.units = os.path.join(self.tmp, "units")
        os.makedirs(self.units)
        self.sd_state = os.path.join(self.tmp, "systemd.json")

    @property
    def state_path(self):
        return os.path.join(self.pipe, ".fake-mps-state.json")

    def state(self):
        with open(self.state_path) as f:
            return json.load(f)

    def edit_state(self, **kw):
        st = self.state()
        st.update(kw)
        with open(self.state_path, "w") as f:
            json.dump(st, f)

    def call_log(self):
        return self.state()["call_log"] if os.path.exists(self.state_path) else []

    def systemctl_calls(self):
        if not os.path.exists(self.sd_state):
            return []
        with open(self.sd_state) as f:
            return json.load(f)["calls"]

    def run(self, check=False, diff=True, via_ansible=False, **args):
        """Run the module as a real process: by default directly (python -m, args file: fast), or through
        the ansible command (via_ansible=True), as a user would."""
        args.setdefault("pipe_directory", self.pipe)
        args.setdefault("log_directory", self.log)
        args.setdefault("unit_directory", self.units)
        args.setdefault("timeout", 5)
        # with the tests' compile cache (tests/support/compile_cache: the module and its module_utils are compiled
        # from source in every run where no bytecode is written, as on CI), as the other tests' runs have it
        env = with_compile_cache(dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                                      ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                                      PATH=FAKES + os.pathsep + os.environ["PATH"],
                                      FAKE_SYSTEMD_STATE=self.sd_state, FAKE_SYSTEMD_UNIT_DIR=self.units,
                                      PYTHONPATH=os.path.join(ROOT, ".collections")))
        if not via_ansible:
            margs = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
            path = os.path.join(self.tmp, "args.json")
            with open(path, "w") as f:
                json.dump({"ANSIBLE_MODULE_ARGS": margs}, f)
            r = subprocess.run([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules.mps_control",
                                path], cwd=self.tmp, env=env, capture_output=True, text=True, timeout=60, check=False)
            result = json.loads(r.stdout)
            result["_rc"] = r.returncode
            result["_stdout"] = json.dumps(result.get("diff", []))
            result["_stderr"] = json.dumps(result.get("warnings", []))
            return result
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,",
               "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
               "-m", "gpuops.nvidia.mps_control", "-a", json.dumps(args)]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        head, sep, body = r.stdout.rpartition("localhost | ")
        assert sep, r.stdout + r.stderr
        result = json.loads(body.split("=>", 1)[1])
        if body.startswith("FAILED!"):
            result["failed"] = True
        result["_rc"] = r.returncode
        result["_stdout"] = head
        result["_stderr"] = r.stderr
        return result


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


LIMITS = {"default_active_thread_percentage": 25, "default_pinned_device_mem_limit": {"0": "8192M", "1": "4G"}}


def test_none_check_apply_again(host):
    args = dict(LIMITS, service_manager="none")
    r = host.run(check=True, **args)
    assert r["changed"] is True and r["_rc"] == 0
    assert r["actions"] == ["start daemon (-d)"]
    assert r["commands"] == ["set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 8G",
                             "set_default_device_pinned_mem_limit 1 4G"]
    assert not os.path.exists(host.pipe) and not os.path.exists(host.log)  # check mode touched nothing
    assert r["diff"][0]["before"]["running"] is False and r["diff"][0]["after"]["running"] is True
    assert r["diff"][0]["after"]["pinned_device_mem_limit"] == {"0": "8G", "1": "4G"}

    r = host.run(**args)
    assert r["changed"] is True
    assert r["running"] is True
    assert r["limits"] == {"active_thread_percentage": 25.0, "pinned_device_mem_limit": {"0": "8G", "1": "4G"}}
    st = host.state()
    assert st["pct"] == 25.0 and st["limits"] == {"0": 8192, "1": 4096}
    assert st["log_dir"] == host.log and os.path.isdir(host.log)

    before = len(host.call_log())
    r = host.run(**args)
    assert r["changed"] is False and r["commands"] == [] and r["actions"] == []
    assert not [c for c in host.call_log()[before:] if c.startswith(MUTATING)]


def test_changing_one_limit_sends_one_command_and_warns_about_running_servers(host):
    args = dict(LIMITS, service_manager="none")
    host.run(**args)
    host.edit_state(servers={"4242": []})
    args["default_pinned_device_mem_limit"] = {"0": "8G", "1": "6G"}
    r = host.run(check=True, **args)
    assert r["changed"] and r["commands"] == ["set_default_device_pinned_mem_limit 1 6G"]
    assert host.state()["limits"]["1"] == 4096
    r = host.run(**args)
    assert r["commands"] == ["set_default_device_pinned_mem_limit 1 6G"]
    assert host.state()["limits"] == {"0": 8192, "1": 6144}
    assert r["servers"] == [{"pid": 4242, "clients": []}]
    assert "keep the limits they started with" in r["_stderr"]


def test_stop_refuses_while_clients_are_connected(host):
    host.run(service_manager="none")
    host.edit_state(servers={"4242": [5000, 5001]})
    r = host.run(service_manager="none", state="stopped")
    assert r["_rc"] != 0 and r.get("failed")
    assert "2 client process(es) are connected (PIDs 5000, 5001)" in r["msg"] and "force=true" in r["msg"]
    assert host.state()["running"] is True
    r = host.run(service_manager="none", state="stopped", force=True)
    assert r["changed"] and host.state()["running"] is False


def test_stop_check_apply_again(host):
    host.run(service_manager="none", default_active_thread_percentage=50)
    r = host.run(check=True, service_manager="none", state="stopped")
    assert r["changed"] and r["actions"] == ["stop daemon (quit)"]
    assert host.state()["running"] is True
    r = host.run(service_manager="none", state="stopped")
    assert r["changed"] and r["running"] is False
    assert host.state()["call_log"][-2:] == ["quit", "get_server_list"] or "quit" in host.state()["call_log"]
    assert host.state()["running"] is False
    r = host.run(service_manager="none", state="stopped")
    assert r["changed"] is False


@pytest.mark.parametrize("args,fragment", [
    ({"default_pinned_device_mem_limit": "0=8G, 1=8G"}, "contains spaces"),
    ({"default_pinned_device_mem_limit": "'0=8G'"}, "quote characters"),
    ({"default_pinned_device_mem_limit": {"0": "8"}}, "has no unit"),
    ({"default_pinned_device_mem_limit": "GPU-0a1b2c3d-1111-2222-3333-444455556666=8G"}, "set per GPU index"),
    ({"default_active_thread_percentage": 150}, "from 1 to 100"),
    ({"default_active_thread_percentage": "25%"}, "without a % sign"),
    ({"pipe_directory": "/tmp/has space"}, "absolute path"),
    ({"name": "x.service", "service_manager": "systemd"}, "without '.service'"),
    ({"state": "running"}, "value of state must be one of: started, stopped"),
])
def test_bad_input_is_refused_and_nothing_changes(host, args, fragment):
    args = dict(args)
    args.setdefault("service_manager", "none")
    r = host.run(**args)
    assert r["_rc"] != 0 and r.get("failed")
    assert fragment in r["msg"]
    assert not os.path.exists(host.pipe)
    assert os.listdir(host.units) == []
    assert [c for c in host.systemctl_calls() if c[0] not in ("is-active", "is-enabled")] == []


def test_bad_input_through_ansible(host):
    r = host.run(via_ansible=True, service_manager="systemd", default_pinned_device_mem_limit="0=6G, 1=10G")
    assert r.get("failed") and r["_rc"] != 0 and "contains spaces" in r["msg"]
    assert os.listdir(host.units) == [] and not os.path.exists(host.pipe)


def test_systemd_check_apply_again_through_ansible(host):
    r = host.run(check=True, via_ansible=True, **LIMITS)
    assert r["changed"] and r["actions"] == [
        "write %s/gpuops-mps-control.service" % host.units, "systemctl daemon-reload",
        "enable gpuops-mps-control.service", "start gpuops-mps-control.service"]
    assert os.listdir(host.units) == []
    assert [c for c in host.systemctl_calls() if c[0] not in ("is-active", "is-enabled")] == []
    assert "+ExecStart=" in r["_stdout"]  # unit diff

    r = host.run(via_ansible=True, **LIMITS)
    assert r["changed"] and r["running"] and r["enabled"]
    assert r["limits"]["pinned_device_mem_limit"] == {"0": "8G", "1": "4G"}
    log = host.call_log()
    # the defaults came from the unit's ExecStartPost, right after -d, before the module read anything
    assert log[:5] == ["-d", "get_server_list", "set_default_active_thread_percentage 25",
                       "set_default_device_pinned_mem_limit 0 8G", "set_default_device_pinned_mem_limit 1 4G"]
    with open(os.path.join(host.units, "gpuops-mps-control.service")) as f:
        assert "Environment=CUDA_MPS_PIPE_DIRECTORY=%s" % host.pipe in f.read()

    calls = len(host.systemctl_calls())
    r = host.run(via_ansible=True, **LIMITS)
    assert r["changed"] is False
    assert [c for c in host.systemctl_calls()[calls:] if c[0] not in ("is-active", "is-enabled")] == []


def test_systemd_defaults_change_is_applied_live_without_restart(host):
    host.run(**LIMITS)
    args = dict(LIMITS, default_active_thread_percentage=20)
    r = host.run(**args)
    assert r["changed"]
    assert "restart gpuops-mps-control.service" not in r["actions"]
    assert r["commands"] == ["set_default_active_thread_percentage 20"]
    assert host.state()["pct"] == 20.0
    assert host.state()["call_log"].count("-d") == 1  # never restarted
    with open(os.path.join(host.units, "gpuops-mps-control.service")) as f:
        assert "set_default_active_thread_percentage 20" in f.read()  # kept for the next start


def test_systemd_path_change_restarts_only_when_idle(host, tmp_path):
    host.run(**LIMITS)
    unit_file = os.path.join(host.units, "gpuops-mps-control.service")
    with open(unit_file) as f:
        first = f.read()
    host.edit_state(servers={"4242": [5000]})
    other_log = str(tmp_path / "log2")
    r = host.run(log_directory=other_log, **LIMITS)
    # busy: nothing changes, the unit keeps describing the daemon in force, the restart stays pending
    assert r["restart_pending"] is True and r["changed"] is False and "nothing changed" in r["_stderr"]
    with open(unit_file) as f:
        assert f.read() == first
    assert host.state()["call_log"].count("-d") == 1
    host.edit_state(servers={"4242": []})  # the clients are gone: the next run restarts
    r = host.run(log_directory=other_log, **LIMITS)
    assert r["changed"] and "restart gpuops-mps-control.service" in r["actions"]
    assert host.state()["call_log"].count("-d") == 2 and host.state()["log_dir"] == other_log
    assert host.run(log_directory=other_log, **LIMITS)["changed"] is False


def test_systemd_pipe_change_asks_the_daemon_in_force(host, tmp_path):
    host.run(**LIMITS)
    old_pipe = host.pipe
    host.edit_state(servers={"4242": [5000]})
    new_pipe = str(tmp_path / "pipe2")
    r = host.run(pipe_directory=new_pipe, **LIMITS)
    # the clients are found through the old pipe, where the running daemon answers
    assert r["restart_pending"] is True and r["servers"] == [{"pid": 4242, "clients": [5000]}]
    host.edit_state(servers={})
    r = host.run(pipe_directory=new_pipe, **LIMITS)
    assert "restart gpuops-mps-control.service" in r["actions"] and r["running"] is True
    with open(os.path.join(old_pipe, ".fake-mps-state.json")) as f:
        assert json.load(f)["running"] is False  # the old daemon was stopped by the restart
    with open(os.path.join(new_pipe, ".fake-mps-state.json")) as f:
        assert json.load(f)["limits"] == {"0": 8192, "1": 4096}


def test_systemd_refuses_a_daemon_it_did_not_start(host):
    host.run(service_manager="none")
    r = host.run(service_manager="systemd")
    assert r.get("failed") and "did not start already answers" in r["msg"]
    assert os.listdir(host.units) == []


def test_systemd_stop_and_disable(host):
    host.run(**LIMITS)
    r = host.run(state="stopped")
    assert r["changed"] and r["actions"] == ["stop gpuops-mps-control.service", "disable gpuops-mps-control.service"]
    assert host.state()["running"] is False and r["enabled"] is False
    assert host.run(state="stopped")["changed"] is False


def test_unreadable_client_list_is_never_taken_for_idle(host):
    host.run(service_manager="none")
    host.edit_state(servers={"4242": ["x"]})  # the stand-in then prints a non-PID client list
    r = host.run(service_manager="none", state="stopped")
    assert r.get("failed") and "get_client_list 4242" in r["msg"]
    assert host.state()["running"] is True


def test_a_failed_start_fails_with_its_actions_and_reports_no_change(host):
    # issue 48: a failure after the plan is raised to the module's base, which adds the result so far (the actions);
    # changed stays false, as when the module called fail_json itself
    broken = os.path.join(host.tmp, "broken-mps-control")
    with open(broken, "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = "-d" ]; then echo "cannot start" >&2; exit 1; fi\n'
                'cat >/dev/null\necho "Cannot find MPS control daemon process"\nexit 1\n')
    os.chmod(broken, 0o755)
    r = host.run(service_manager="none", executable=broken, **LIMITS)
    assert r.get("failed") and r["_rc"] != 0, r
    assert r["msg"] == "nvidia-cuda-mps-control -d failed (rc 1): cannot start", r
    assert r["changed"] is False and r["actions"] == ["start daemon (-d)"], r
