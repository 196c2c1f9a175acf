"""Playbook-level tests: real ansible-playbook / ansible running gpuops.nvidia.containerd_runtime (module and
role) with the nvidia-ctk STAND-IN (tests/support/nvidia_ctk_standin.py, not NVIDIA's real nvidia-ctk) and
Debian's REAL containerd binary for validation. The role's restart handler is pointed at a command that
appends to a marker file, so the tests see exactly when containerd would be restarted.
"""
import json
import os
import subprocess

import pytest
import yaml

from tests.support import ctk_env  # noqa: E402
from tests.support.pythons import find_python  # noqa: E402

ROOT = ctk_env.ROOT
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
BIN = os.path.join(ROOT, ".venv", "bin")
ROLE = os.path.join(ROOT, "roles", "containerd_runtime")
GOLDEN_INPUT = ctk_env.fixture_text("golden-input-v2.toml")
GOLDEN_V2 = ctk_env.fixture_text("golden-v2-in-place-1.17.8.toml")

pytestmark = pytest.mark.slow


def ansible_env():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_RETRY_FILES_ENABLED="0")
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return env


def run(argv, cwd=ROOT):
    return subprocess.run(argv, cwd=cwd, env=ansible_env(), capture_output=True, text=True, check=False)


class Lab(object):
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.etc = tmp_path / "etc" / "containerd"
        self.etc.mkdir(parents=True)
        self.config = self.etc / "config.toml"
        self.drop_in = self.etc / "conf.d" / "99-nvidia.toml"
        self.marker = tmp_path / "restarts.log"
        self.result = tmp_path / "result.json"
        self.ctk = ctk_env.ctk_wrapper(tmp_path / "bin", "1.20.0")
        self.playbook = tmp_path / "play.yml"

    def write_playbook(self, method="command", **overrides):
        role_vars = dict(
            containerd_runtime_config_path=str(self.config),
            containerd_runtime_drop_in_path=str(self.drop_in),
            containerd_runtime_nvidia_ctk_path=self.ctk,
            containerd_runtime_containerd_path=ctk_env.require_containerd(),
            containerd_runtime_restart_method=method,
            containerd_runtime_restart_command=["/bin/sh", "-c", "echo restarted >> %s" % self.marker])
        role_vars.update(overrides)
        play = [{
            "name": "containerd runtime",
            "hosts": "localhost",
            "gather_facts": False,
            "roles": [{"role": "gpuops.nvidia.containerd_runtime", "vars": role_vars}],
            "post_tasks": [
                {"name": "See whether the restart already happened (handlers flushed by the role)",
                 "ansible.builtin.stat": {"path": str(self.marker)}, "register": "marker"},
                {"name": "Record", "ansible.builtin.copy": {
                    "dest": str(self.result), "mode": "0644",
                    "content": "{{ {'module': containerd_runtime_result, 'marker_seen': marker.stat.exists}"
                               " | to_json }}"},
                 "check_mode": False},
            ],
        }]
        self.playbook.write_text(yaml.safe_dump(play, sort_keys=False))

    def play(self, *extra):
        return run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                    "-e", "ansible_python_interpreter=%s" % PYTHON, str(self.playbook)] + list(extra))

    def restarts(self):
        return self.marker.read_text().count("restarted") if self.marker.exists() else 0

    def recorded(self):
        return json.loads(self.result.read_text())


@pytest.fixture
def lab(tmp_path):
    return Lab(tmp_path)


def test_role_check_then_apply_then_idempotent(lab):
    lab.config.write_text(GOLDEN_INPUT)
    lab.write_playbook()
    before = ctk_env.snapshot(lab.etc)

    checked = lab.play("--check", "--diff")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert ctk_env.snapshot(lab.etc) == before  # check mode: nothing written, mtimes unchanged
    assert lab.restarts() == 0  # the command handler does not run in check mode
    assert "+imports = [" in checked.stdout  # diff shown
    assert lab.recorded()["module"]["changed"] is True

    applied = lab.play()
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert lab.restarts() == 1
    assert lab.recorded()["marker_seen"] is True  # flushed inside the role, before post_tasks
    assert lab.drop_in.read_text() == GOLDEN_V2
    assert ctk_env.containerd_dump(lab.config).returncode == 0
    backups = [n for n in os.listdir(str(lab.etc)) if n.startswith("config.toml.")]
    assert len(backups) == 1  # the role keeps backups by default

    again = lab.play()
    assert again.returncode == 0, again.stdout + again.stderr
    assert lab.restarts() == 1  # handler did not fire
    assert lab.recorded()["module"]["changed"] is False
    assert "RUNNING HANDLER" not in again.stdout


def test_role_restart_method_none_reports_instead(lab):
    lab.config.write_text(GOLDEN_INPUT)
    lab.write_playbook(method="none")
    result = lab.play()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "containerd was NOT restarted" in " ".join(result.stdout.split())
    assert lab.restarts() == 0
    assert lab.recorded()["module"]["changed"] is True


def test_role_failure_leaves_files_and_does_not_restart(lab):
    lab.config.write_text('disabled_plugins = ["cri"]\n')
    lab.write_playbook()
    before = ctk_env.snapshot(lab.etc)
    result = lab.play()
    assert result.returncode != 0
    assert "no `version` key" in " ".join(result.stdout.split())
    assert ctk_env.snapshot(lab.etc) == before and lab.restarts() == 0


def test_role_on_k3s_restarts_the_agent_only_when_its_generated_config_changes(lab, monkeypatch):
    """Issue 51: a k3s node (simulated root, the agent's config step a STAND-IN: tests/support/rancher_agent_standin.py)
    whose agent started before the toolkit was installed: the role sets default-runtime, its handler restarts the
    agent (which then generates the nvidia runtime, valid for the real containerd), and a second run restarts
    nothing."""
    from tests.support import rancher_agent_standin as agent
    root = lab.tmp / "root"
    monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(lab.tmp / "gpus.json"))
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", str(root))
    agent.make_root(root, "k3s", unit="k3s-agent")
    agent.start(root, "k3s")
    agent.install_executable(root, "/usr/bin/nvidia-container-runtime")
    restart = ("import sys; sys.path[:0] = [%r, %r]; from tests.support import rancher_agent_standin as a; "
               "a.start(%r, 'k3s'); open(%r, 'a').write('restarted\\n')"
               % (ROOT, os.path.join(ROOT, ".collections"), str(root), str(lab.marker)))
    lab.write_playbook(containerd_runtime_set_as_default=True,
                       containerd_runtime_restart_command=[PYTHON, "-c", restart])
    first = lab.play()
    assert first.returncode == 0, first.stdout + first.stderr
    result = json.loads(lab.result.read_text())
    assert result["module"]["restart_service"] == "k3s-agent" and result["marker_seen"] and lab.restarts() == 1
    generated = agent.under(root, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml")
    dump = ctk_env.containerd_dump(generated)
    assert dump.returncode == 0 and 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump.stdout
    assert 'default_runtime_name = "nvidia"' in dump.stdout
    second = lab.play()
    assert second.returncode == 0, second.stdout
    again = json.loads(lab.result.read_text())["module"]
    assert not again["changed"] and not again["restart_required"] and lab.restarts() == 1


def test_role_rejects_command_method_without_command(lab):
    lab.config.write_text(GOLDEN_INPUT)
    lab.write_playbook(containerd_runtime_restart_command=[])
    result = lab.play()
    assert result.returncode != 0 and "needs containerd_runtime_restart_command" in result.stdout
    assert lab.config.read_text() == GOLDEN_INPUT


def test_adhoc_module_check_diff(tmp_path):
    lab = Lab(tmp_path)
    lab.config.write_text(GOLDEN_INPUT)
    before = ctk_env.snapshot(lab.etc)
    args = "config_path=%s drop_in_path=%s nvidia_ctk_path=%s containerd_path=%s" % (
        lab.config, lab.drop_in, lab.ctk, ctk_env.require_containerd())
    result = run([os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                  "-e", "ansible_python_interpreter=%s" % PYTHON, "-m", "gpuops.nvidia.containerd_runtime",
                  "-a", args, "--check", "--diff"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CHANGED" in result.stdout and "-# managed by hand: keep this comment" in result.stdout
    assert ctk_env.snapshot(lab.etc) == before


def test_role_argument_specs_match_defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROLE, "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        if isinstance(defaults[name], str) and defaults[name].startswith("{{"):
            # a default computed from another role's variable (cdi_enabled follows gpu_node_cdi): the spec states
            # none (it would be checked before the template is) and its description says what it follows
            assert "default" not in spec and "default" in " ".join(spec["description"]).lower(), name
            continue
        assert spec.get("default") == defaults[name], name
        assert name.startswith("containerd_runtime_")


def test_ansible_doc_renders_module_and_role():
    result = run([os.path.join(BIN, "ansible-doc"), "gpuops.nvidia.containerd_runtime"])
    assert result.returncode == 0, result.stderr
    assert "nvidia-container-toolkit" in result.stdout and "restart_required" in result.stdout
    result = run([os.path.join(BIN, "ansible-doc"), "-t", "role", "gpuops.nvidia.containerd_runtime"])
    assert result.returncode == 0, result.stderr
    assert "containerd_runtime_restart_method" in result.stdout


def _python39():
    return find_python("3.9")


@pytest.mark.skipif(_python39() is None, reason="no Python 3.9 interpreter on this machine")
def test_module_runs_on_python_3_9_target(tmp_path):
    """Target-side code on Python 3.9: without a TOML library it names the package; with tomlkit (no tomllib
    before 3.11) it configures and is idempotent."""
    import shutil

    import tomlkit

    lab = Lab(tmp_path)
    lab.config.write_text(GOLDEN_INPUT)
    args = "config_path=%s drop_in_path=%s nvidia_ctk_path=%s containerd_path=%s" % (
        lab.config, lab.drop_in, lab.ctk, ctk_env.require_containerd())
    base = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % _python39(), "-m", "gpuops.nvidia.containerd_runtime", "-a", args]
    bare = run(base)
    assert bare.returncode != 0 and "(tomli)" in bare.stdout
    assert lab.config.read_text() == GOLDEN_INPUT
    libs = tmp_path / "py39libs"
    shutil.copytree(os.path.dirname(tomlkit.__file__), str(libs / "tomlkit"))
    wrapper = tmp_path / "python3.9-with-tomlkit"
    wrapper.write_text('#!/bin/sh\nPYTHONPATH="%s" exec "%s" "$@"\n' % (libs, _python39()))
    wrapper.chmod(0o755)
    env_line = ["-e", "ansible_python_interpreter=%s" % wrapper]
    first = run(base + env_line)
    assert first.returncode == 0 and "CHANGED" in first.stdout, first.stdout + first.stderr
    assert lab.drop_in.read_text() == GOLDEN_V2
    second = run(base + env_line)
    assert second.returncode == 0 and "SUCCESS" in second.stdout, second.stdout
