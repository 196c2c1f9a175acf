"""containerd_runtime module: main() in-process (patch_module_args) with the nvidia-ctk STAND-IN
(tests/support/nvidia_ctk_standin.py, not NVIDIA's real nvidia-ctk) and Debian's REAL containerd binary,
which validates every configuration the module produces (`containerd --config FILE config dump`).
"""
import json
import os
import pwd
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.support import ctk_env  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import (  # noqa: E402
    _containerd_stamp as containerd_stamp)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (  # noqa: E402
    parse_toml, runtimes_of)
from ansible_collections.gpuops.nvidia.plugins.modules import containerd_runtime  # noqa: E402

GOLDEN_INPUT = ctk_env.fixture_text("golden-input-v2.toml")
GOLDEN_V2 = ctk_env.fixture_text("golden-v2-in-place-1.17.8.toml")
GOLDEN_MISSING = ctk_env.fixture_text("golden-missing-set-default-cdi-drop-in-1.20.0.toml")
INPUT_V3 = ctk_env.fixture_text("input-v3.toml")
NVIDIA_HEADER = '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]'
RUNC_HEADER = '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'


class Env(object):
    def __init__(self, tmp_path, capsys, ctk_version="1.20.0"):
        self.tmp = tmp_path
        self.capsys = capsys
        self.etc = tmp_path / "etc" / "containerd"
        self.etc.mkdir(parents=True)
        self.config = self.etc / "config.toml"
        self.drop_in = self.etc / "conf.d" / "99-nvidia.toml"
        self.private = tmp_path / "private"
        self.private.mkdir()
        self.set_ctk(ctk_version)

    def set_ctk(self, version):
        self.ctk = ctk_env.ctk_wrapper(self.tmp / "bin" / version, version)

    def args(self, **extra):
        args = dict(config_path=str(self.config), drop_in_path=str(self.drop_in), nvidia_ctk_path=self.ctk,
                    containerd_path=ctk_env.require_containerd())
        args.update(extra)
        return args

    def run(self, check=False, diff=True, **extra):
        args = self.args(**extra)
        args.update(_ansible_check_mode=check, _ansible_diff=diff, _ansible_tmpdir=str(self.private),
                    _ansible_keep_remote_files=False)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exc:
                containerd_runtime.main()
        result = json.loads(self.capsys.readouterr().out)
        result["rc"] = exc.value.code
        return result

    def files(self):
        return ctk_env.snapshot(self.etc)


@pytest.fixture
def env(tmp_path, capsys):
    return Env(tmp_path, capsys)


def assert_valid_live(config, runtime="nvidia"):
    result = ctk_env.containerd_dump(config)
    assert result.returncode == 0, result.stderr
    dump = parse_toml(result.stdout, "dump")
    assert runtime in runtimes_of(dump, 2)
    return dump


# ------------------------------------------------------------------------------------------------------
# check mode, apply, idempotency, diff, backup, modes and owners
# ------------------------------------------------------------------------------------------------------
def test_check_mode_reports_change_and_touches_nothing(env):
    env.config.write_text(GOLDEN_INPUT)
    before = env.files()
    result = env.run(check=True)
    assert result["rc"] == 0 and result["changed"] is True and result["restart_required"] is True
    assert result["files_changed"] == [str(env.drop_in), str(env.config)]
    assert env.files() == before  # same bytes, mtimes, modes
    assert not env.drop_in.parent.exists()
    assert result["validated"] is True


def test_apply_then_second_run_unchanged(env):
    env.config.write_text(GOLDEN_INPUT)
    first = env.run()
    assert first["changed"] is True and first["restart_required"] is True
    assert first["edit_mode"] == "drop_in" and first["nvidia_ctk_version"] == "1.20.0"
    assert first["containerd_version"].startswith("1.6.20")
    assert env.drop_in.read_text() == GOLDEN_V2
    reserialised = GOLDEN_V2[:GOLDEN_V2.index(NVIDIA_HEADER)] + GOLDEN_V2[GOLDEN_V2.index(RUNC_HEADER):]
    assert env.config.read_text() == 'imports = ["%s/*.toml"]\n' % env.drop_in.parent + reserialised
    assert_valid_live(env.config)
    snap = env.files()
    second = env.run()
    assert second["changed"] is False and second["restart_required"] is False
    assert second["files_changed"] == [] and "diff" in second and second["diff"] == []
    assert env.files() == snap  # not even rewritten: mtimes unchanged


def test_diff_shows_comment_loss_and_import(env):
    env.config.write_text(GOLDEN_INPUT)
    result = env.run(check=True)
    diffs = {d["after_header"]: d for d in result["diff"]}
    top = diffs[str(env.config)]
    assert "# managed by hand: keep this comment" in top["before"]
    assert "keep this comment" not in top["after"]
    assert top["after"].startswith('imports = ["%s/*.toml"]\n' % env.drop_in.parent)
    drop = diffs[str(env.drop_in)]
    assert drop["before_header"].endswith("(absent)") and drop["before"] == "" and drop["after"] == GOLDEN_V2
    assert "diff" not in env.run(check=True, diff=False)


def test_backup_keeps_previous_files(env):
    env.config.write_text(GOLDEN_INPUT)
    result = env.run(backup=True)
    by_path = {f["path"]: f for f in result["files"]}
    backup = by_path[str(env.config)]["backup_file"]
    with open(backup) as handle:
        assert handle.read() == GOLDEN_INPUT
    assert "backup_file" not in by_path[str(env.drop_in)]  # created, nothing to back up
    assert not backup.endswith(".toml")  # never picked up by an imports glob
    result = env.run(backup=True, set_as_default=True)
    by_path = {f["path"]: f for f in result["files"]}
    with open(by_path[str(env.drop_in)]["backup_file"]) as handle:
        assert handle.read() == GOLDEN_V2


def test_mode_and_owner_kept_new_files_0644(env):
    env.config.write_text(GOLDEN_INPUT)
    os.chmod(str(env.config), 0o600)
    nobody = pwd.getpwnam("nobody")
    can_chown = os.geteuid() == 0
    if can_chown:
        os.chown(str(env.config), nobody.pw_uid, nobody.pw_gid)
    old_umask = os.umask(0o022)
    try:
        env.run()
    finally:
        os.umask(old_umask)
    st = os.stat(str(env.config))
    assert stat.S_IMODE(st.st_mode) == 0o600
    if can_chown:
        assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert stat.S_IMODE(os.stat(str(env.drop_in)).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(str(env.drop_in.parent)).st_mode) == 0o755


def test_symlinked_config_stays_a_symlink(env):
    real = env.tmp / "real-config.toml"
    real.write_text(GOLDEN_INPUT)
    env.config.symlink_to(real)
    assert env.run()["changed"] is True
    assert env.config.is_symlink() and "imports" in real.read_text()


def test_set_as_default_and_cdi_change_only_the_drop_in(env):
    env.config.write_text(GOLDEN_INPUT)
    env.run()
    top = env.config.read_text()
    result = env.run(set_as_default=True, cdi_enabled=True)
    assert result["files_changed"] == [str(env.drop_in)]
    assert env.config.read_text() == top
    assert 'default_runtime_name = "nvidia"' in env.drop_in.read_text()
    assert "enable_cdi = true" in env.drop_in.read_text()
    assert any("does not know enable_cdi" in w for w in result["trap_warnings"])  # containerd 1.6
    dump = assert_valid_live(env.config)
    assert dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "nvidia"
    assert env.run(set_as_default=True, cdi_enabled=True)["changed"] is False
    # Back to not default: the drop-in is regenerated from config.toml, whose default is still runc.
    result = env.run()
    assert result["changed"] is True and 'default_runtime_name = "runc"' in env.drop_in.read_text()
    assert_valid_live(env.config)


def test_missing_config_is_created_with_systemd_cgroup_warning(env):
    result = env.run(set_as_default=True, cdi_enabled=True)
    assert result["changed"] is True
    assert env.drop_in.read_text() == GOLDEN_MISSING
    assert env.config.read_text() == 'imports = ["%s/*.toml"]\nversion = 2\n' % env.drop_in.parent
    assert any("fallback options without SystemdCgroup" in w for w in result["trap_warnings"])
    assert_valid_live(env.config)
    assert env.run(set_as_default=True, cdi_enabled=True)["changed"] is False


def test_in_place_with_nvidia_ctk_1_17(env):
    env.set_ctk("1.17.8")
    env.config.write_text(GOLDEN_INPUT)
    result = env.run()
    assert result["edit_mode"] == "in_place" and result["files_changed"] == [str(env.config)]
    assert env.config.read_text() == GOLDEN_V2
    assert not env.drop_in.exists()
    assert_valid_live(env.config)
    assert env.run(edit_mode="in_place")["changed"] is False


def test_upgrade_1_17_to_1_20_moves_to_drop_in(env):
    env.set_ctk("1.17.8")
    env.config.write_text(GOLDEN_INPUT)
    env.run()
    env.set_ctk("1.20.0")
    result = env.run()
    assert result["changed"] is True and result["edit_mode"] == "drop_in"
    assert_valid_live(env.config)
    assert env.run()["changed"] is False


def test_version_3_config_refused_by_containerd_1_6(env):
    env.config.write_text(INPUT_V3)
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and result["changed"] is False
    assert "would not run this candidate" in result["msg"] and "does not see runtime 'nvidia'" in result["msg"]
    assert env.files() == before


def test_existing_imports_kept_and_other_drop_ins_validated(env):
    other = env.etc / "extra" / "registry.toml"
    other.parent.mkdir()
    other.write_text("version = 2\n")
    env.config.write_text('imports = ["%s"]\n' % other + GOLDEN_INPUT)
    env.run()
    tree = parse_toml(env.config.read_text(), "c")
    assert tree["imports"] == [str(other), "%s/*.toml" % env.drop_in.parent]
    assert env.run()["changed"] is False


def test_k3s_path_accepted_with_warning(tmp_path, capsys):
    env = Env(tmp_path / "var" / "lib" / "rancher" / "k3s" / "agent", capsys)
    env.config.write_text(GOLDEN_INPUT)
    result = env.run(check=True)
    assert result["changed"] is True and any("k3s/rke2" in w for w in result["trap_warnings"])


# ------------------------------------------------------------------------------------------------------
# traps
# ------------------------------------------------------------------------------------------------------
def test_trap_docker_config_without_version(env):
    env.config.write_text('disabled_plugins = ["cri"]\n')
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "no `version` key" in result["msg"] and "CRI plugin" in result["msg"]
    assert env.files() == before and not env.drop_in.exists()


# A version 1 config (`version = 1`): the real nvidia-ctk writes --cdi.enabled's enable_cdi under
# [plugins.cri.containerd], where containerd's CRI plugin never reads it (issue 36; recorded from nvidia-ctk 1.17.8
# and 1.20.0 in tests/fixtures/nvidia-ctk/v1-*.toml). Its input is v1-input-cri-cdi.toml less enable_cdi.
V1_INPUT = ctk_env.real_ctk_text("v1-input-cri-cdi.toml").replace("  enable_cdi = true\n", "")
V1_WITH_CDI = ctk_env.real_ctk_text("v1-cri-cdi-in-place-1.17.8.toml")


def test_cdi_on_a_version_1_config_ends_on_where_containerd_reads_it(env):
    env.set_ctk("1.17.8")  # in place: the only mode in which a version 1 config takes effect
    env.config.write_text(V1_INPUT)
    before = env.files()
    check = env.run(check=True, cdi_enabled=True)
    assert check["rc"] == 0 and check["changed"] is True and env.files() == before
    assert "[plugins.cri] enable_cdi = true" in " ".join(check["trap_warnings"])
    first = env.run(cdi_enabled=True)
    assert first["rc"] == 0 and first["changed"] is True and first["config_version"] == 1
    assert first["diff"] == check["diff"] and first["trap_warnings"] == check["trap_warnings"]
    # containerd's CRI plugin (its PluginConfig) reads enable_cdi from [plugins.cri] in a version 1 config: the
    # file is what the real nvidia-ctk 1.17.8 writes for a config that already has it there
    assert env.config.read_text() == V1_WITH_CDI
    assert parse_toml(V1_WITH_CDI, "v1")["plugins"]["cri"]["enable_cdi"] is True
    assert_valid_live(env.config)
    snap = env.files()
    second = env.run(cdi_enabled=True)
    assert second["changed"] is False and second["verified_earlier"] is True and env.files() == snap


def test_a_result_with_cdi_off_for_the_cri_plugin_is_refused(env, monkeypatch):
    """Without the collection's [plugins.cri] setting, nvidia-ctk's version 1 output leaves CDI off: refused, and
    nothing changes (the guard that also holds for any later nvidia-ctk)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _nvidia_ctk
    monkeypatch.setattr(_nvidia_ctk.NvidiaCtkRunner, "_cri_v1_cdi", lambda *_args: False)
    env.set_ctk("1.17.8")
    env.config.write_text(V1_INPUT)
    before = env.files()
    result = env.run(cdi_enabled=True)
    assert result["rc"] == 1 and "does not set enable_cdi = true in [plugins.cri]" in result["msg"]
    assert "version = 2" in result["msg"] and env.files() == before


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("containerd", [True, False])
def test_version_1_config_in_drop_in_mode_refused_naming_version_2(env, monkeypatch, check, containerd):
    """nvidia-ctk 1.18+ writes a version 1 config whole to the drop-in and imports it nowhere (#1430): nothing,
    CDI included, would take effect. Refused before nvidia-ctk runs, with or without containerd to ask."""
    env.config.write_text(V1_INPUT)
    before = env.files()
    extra = {} if containerd else {"containerd_path": None}
    if not containerd:
        monkeypatch.setenv("PATH", str(env.tmp / "empty-path"))
    result = env.run(check=check, cdi_enabled=True, **extra)
    assert result["rc"] == 1 and result.get("changed") is not True
    assert "version 1" in result["msg"] and "version = 2" in result["msg"] and "#1430" in result["msg"]
    assert env.files() == before and not env.drop_in.exists()


def test_trap_cri_disabled(env):
    env.config.write_text('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n')
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "disables the CRI plugin" in result["msg"]
    assert env.files() == before


def test_trap_systemd_cgroup_lost_through_drop_in_on_containerd_1x(env):
    """runc's SystemdCgroup lives in another drop-in; nvidia-ctk's copy of the top-level CRI section (loaded
    later) replaces the whole section on containerd 1.x: real containerd's merged view shows the loss."""
    env.config.write_text('version = 2\nimports = ["%s/*.toml"]\n' % env.drop_in.parent +
                          '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                          'runtime_type = "io.containerd.runc.v2"\n')
    env.drop_in.parent.mkdir()
    (env.drop_in.parent / "10-systemd.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = true\n')
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "'runc' would lose SystemdCgroup" in result["msg"]
    assert env.files() == before


def test_trap_nvidia_runtime_would_lose_hand_set_systemd_cgroup(env):
    env.config.write_text(GOLDEN_INPUT.replace(
        "default_runtime_name", "default_runtime_name").replace("SystemdCgroup = true", "SystemdCgroup = false") +
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '        runtime_type = "io.containerd.runc.v2"\n'
        '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '          BinaryName = "/usr/bin/nvidia-container-runtime"\n          SystemdCgroup = true\n')
    env.set_ctk("1.17.8")
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "'nvidia' would lose SystemdCgroup" in result["msg"]
    assert env.files() == before


def test_trap_1_18_0_drops_imports_refused(env):
    env.set_ctk("1.18.0")
    env.config.write_text('imports = ["/foo/bar/*.toml"]\n' + GOLDEN_INPUT)
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "drop existing imports" in result["msg"] and "1.18.1" in result["msg"]
    assert env.files() == before


def test_trap_1_18_0_warns_and_reports_wrong_directory_leftover(env):
    env.set_ctk("1.18.0")
    env.config.write_text(GOLDEN_INPUT)
    leftover = env.etc / "config.d" / "99-nvidia.toml"
    leftover.parent.mkdir()
    leftover.write_text(GOLDEN_V2)
    result = env.run()
    assert result["changed"] is True
    assert any("#1404" in w and "1.18.1" in w for w in result["trap_warnings"])
    assert any(str(leftover) in w for w in result["trap_warnings"])
    assert env.drop_in.read_text() == GOLDEN_V2  # written where asked, not to config.d
    assert leftover.read_text() == GOLDEN_V2  # the leftover is reported, not deleted


def test_in_place_refused_on_1_20(env):
    env.config.write_text(GOLDEN_INPUT)
    result = env.run(edit_mode="in_place")
    assert result["rc"] == 1 and "in_place is broken" in result["msg"]
    assert env.config.read_text() == GOLDEN_INPUT


def test_drop_in_refused_on_1_17(env):
    env.set_ctk("1.17.8")
    result = env.run(edit_mode="drop_in")
    assert result["rc"] == 1 and "needs nvidia-ctk 1.18.1" in result["msg"]


# ------------------------------------------------------------------------------------------------------
# bad input and missing tools: clear error, nothing changed
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra,match", [
    ({"config_path": "etc/containerd/config.toml"}, "config_path must be an absolute path"),
    ({"drop_in_path": "conf.d/99-nvidia.toml"}, "drop_in_path must be an absolute path"),
    ({"runtime_path": "nvidia-container-runtime"}, "runtime_path must be an absolute path"),
    ({"runtime_name": "bad name"}, "runtime_name must be"),
    ({"edit_mode": "sideways"}, "value of edit_mode must be one of"),
])
def test_bad_parameters(env, extra, match):
    env.config.write_text(GOLDEN_INPUT)
    before = env.files()
    result = env.run(**extra)
    assert result["rc"] == 1 and match in result["msg"]
    assert env.files() == before


def test_config_not_toml(env):
    env.config.write_text("version = 2\n[plugins\n")
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "is not valid TOML" in result["msg"] and "left untouched" in result["msg"]
    assert env.files() == before


def test_k3s_template_explained(env):
    env.config.write_text('{{ template "base" . }}\n')
    result = env.run()
    assert result["rc"] == 1 and "Go template" in result["msg"]


def test_drop_in_not_toml_is_not_overwritten(env):
    env.config.write_text(GOLDEN_INPUT)
    env.drop_in.parent.mkdir()
    env.drop_in.write_text("garbage = = =\n")
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and str(env.drop_in) in result["msg"]
    assert env.files() == before


def test_config_containerd_cannot_load_today(env):
    # Valid TOML, but containerd 1.6 refuses it (a string where it wants an integer).
    env.config.write_text('version = 2\n[grpc]\nmax_recv_message_size = "big"\n')
    before = env.files()
    result = env.run()
    assert result["rc"] == 1 and "containerd cannot load it" in result["msg"]
    assert "refusing to overwrite" in result["msg"]
    assert env.files() == before


def test_unreadable_config(env, monkeypatch):
    env.config.write_text(GOLDEN_INPUT)
    before = env.files()
    real_open = os.open    # the module reads live files with os.open (never blocking on a FIFO)

    def guarded(path, *args, **kwargs):
        if str(path) == str(env.config):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    result = env.run()
    monkeypatch.undo()
    assert result["rc"] == 1 and "cannot read config_path" in result["msg"] and "Permission denied" in result["msg"]
    assert env.files() == before


def test_config_path_is_a_directory(env):
    result = env.run(config_path=str(env.etc))
    assert result["rc"] == 1 and "is a directory" in result["msg"]


def test_not_utf8(env):
    env.config.write_bytes(b"version = 2\n# \xff\xfe\n")
    result = env.run()
    assert result["rc"] == 1 and "not UTF-8" in result["msg"]


def test_nvidia_ctk_missing_names_the_package(env, monkeypatch):
    if os.path.exists("/usr/bin/nvidia-ctk") or os.path.exists("/usr/local/bin/nvidia-ctk"):
        pytest.skip("a real nvidia-ctk is installed on this machine")
    monkeypatch.setenv("PATH", str(env.tmp / "empty"))
    env.config.write_text(GOLDEN_INPUT)
    before = env.files()
    result = env.run(nvidia_ctk_path=None)
    assert env.files() == before
    assert result["rc"] == 1 and "nvidia-container-toolkit" in result["msg"] and "nvidia-ctk" in result["msg"]


def test_nvidia_ctk_path_given_but_missing(env):
    result = env.run(nvidia_ctk_path=str(env.tmp / "nope" / "nvidia-ctk"))
    assert result["rc"] == 1 and "does not exist" in result["msg"]


def test_containerd_path_given_but_missing(env):
    result = env.run(containerd_path=str(env.tmp / "nope" / "containerd"))
    assert result["rc"] == 1 and "containerd" in result["msg"] and "does not exist" in result["msg"]


def test_without_containerd_binary_warns_and_still_works(env, monkeypatch):
    monkeypatch.setenv("PATH", str(env.tmp / "empty"))
    if any(os.path.exists(os.path.join(d, "containerd")) for d in ("/usr/bin", "/usr/local/bin", "/usr/sbin")):
        pytest.skip("a system containerd is installed on this machine")
    env.config.write_text(GOLDEN_INPUT)
    result = env.run(containerd_path=None)
    assert result["changed"] is True and result["validated"] is False
    assert any("could not be validated" in w for w in result["trap_warnings"])
    assert env.drop_in.read_text() == GOLDEN_V2
    assert_valid_live(env.config)  # validated here, after the fact, by the test


def test_candidate_rejected_by_containerd_leaves_live_files(env):
    """A containerd that loads today's config but rejects the candidate (wrapper around the real binary that
    fails on files in the module's private directory): refused, live files untouched."""
    wrapper = env.tmp / "bin" / "picky-containerd"
    wrapper.write_text('#!/bin/sh\ncase "$2" in *gpuops-nvidia-ctk-*) echo "containerd: failed to load TOML:'
                       ' candidate rejected" >&2; exit 1;; esac\nexec "%s" "$@"\n' % ctk_env.require_containerd())
    wrapper.chmod(0o755)
    env.config.write_text(GOLDEN_INPUT)
    before = env.files()
    result = env.run(containerd_path=str(wrapper))
    assert result["rc"] == 1 and "candidate config (refused, nothing changed)" in result["msg"]
    assert "candidate rejected" in result["msg"]
    assert env.files() == before
    assert os.listdir(str(env.private)) == []


def test_nvidia_ctk_failure_reported(env):
    broken = env.tmp / "bin" / "broken-ctk"
    broken.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "NVIDIA Container Toolkit CLI version 1.20.0";'
                      ' exit 0; fi\necho "level=error msg=boom" >&2\nexit 1\n')
    broken.chmod(0o755)
    env.config.write_text(GOLDEN_INPUT)
    before = env.files()
    result = env.run(nvidia_ctk_path=str(broken))
    assert result["rc"] == 1 and "nvidia-ctk failed on a private copy" in result["msg"] and "boom" in result["msg"]
    assert env.files() == before


def test_documentation_matches_argument_spec(monkeypatch):
    """What ansible-test's validate-modules checks (it cannot run offline here): options, types, defaults,
    choices in DOCUMENTATION equal the argument_spec."""
    import yaml
    from ansible.module_utils import basic

    captured = {}

    class Stop(Exception):
        pass

    def fake_init(self, argument_spec, **kwargs):
        captured.update(argument_spec)
        captured["__kwargs__"] = kwargs
        raise Stop()

    monkeypatch.setattr(basic.AnsibleModule, "__init__", fake_init)
    with pytest.raises(Stop):
        containerd_runtime.main()
    kwargs = captured.pop("__kwargs__")
    assert kwargs["supports_check_mode"] is True
    doc = yaml.safe_load(containerd_runtime.DOCUMENTATION)
    assert set(doc["options"]) == set(captured)
    for name, spec in captured.items():
        documented = doc["options"][name]
        assert documented["type"] == spec["type"], name
        assert documented.get("default") == spec.get("default"), name
        assert documented.get("choices") == spec.get("choices"), name
    assert {"check_mode", "diff_mode", "idempotent"} <= set(doc["attributes"])
    yaml.safe_load(containerd_runtime.EXAMPLES)
    returned = yaml.safe_load(containerd_runtime.RETURN)
    assert {"files_changed", "restart_required", "trap_warnings"} <= set(returned)


def test_non_ascii_content_round_trips(env):
    env.config.write_text(GOLDEN_INPUT.replace("# managed by hand", "# géré à la main").replace(
        'runtime_type = "io.containerd.runc.v2"', 'runtime_type = "io.containerd.runc.v2"\n'
        '        pod_annotations = ["ünïcode.example/ß"]', 1), encoding="utf-8")
    assert env.run()["changed"] is True
    assert 'pod_annotations = ["ünïcode.example/ß"]' in env.drop_in.read_text(encoding="utf-8")
    assert_valid_live(env.config)
    assert env.run()["changed"] is False


@pytest.mark.parametrize("config_version", [3, 4])
def test_containerd_2x_configs_without_a_2x_binary(env, monkeypatch, config_version):
    """Version 3 (containerd 2.0-2.2) and 4 (2.3) configs. Debian 12 has no containerd 2.x to validate them, so
    this runs without a containerd binary: the module's own checks only, and it says so."""
    monkeypatch.setenv("PATH", str(env.tmp / "empty"))
    if any(os.path.exists(os.path.join(d, "containerd")) for d in ("/usr/bin", "/usr/local/bin", "/usr/sbin")):
        pytest.skip("a system containerd is installed on this machine")
    env.config.write_text(INPUT_V3.replace("version = 3", "version = %d" % config_version))
    result = env.run(containerd_path=None, set_as_default=True)
    assert result["changed"] is True and result["validated"] is False and result["config_version"] == config_version
    assert not any("SystemdCgroup" in w for w in result["trap_warnings"])
    golden = ctk_env.fixture_text("golden-v3-set-default-drop-in-1.20.0.toml")
    assert env.drop_in.read_text() == golden.replace("version = 3", "version = %d" % config_version)
    assert env.run(containerd_path=None, set_as_default=True)["changed"] is False


def test_systemd_cgroup_lost_detected_without_containerd(env, monkeypatch):
    """Without containerd the module's own merged view (drop-in section replaces the top-level one) still sees a
    hand-set SystemdCgroup on the nvidia runtime being replaced."""
    monkeypatch.setenv("PATH", str(env.tmp / "empty"))
    if any(os.path.exists(os.path.join(d, "containerd")) for d in ("/usr/bin", "/usr/local/bin", "/usr/sbin")):
        pytest.skip("a system containerd is installed on this machine")
    env.config.write_text(
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvidia-container-runtime"\nSystemdCgroup = true\n')
    before = env.files()
    result = env.run(containerd_path=None)
    assert result["rc"] == 1 and "'nvidia' would lose SystemdCgroup" in result["msg"]
    assert env.files() == before


def test_relative_imports_are_mirrored_for_validation(env):
    """containerd resolves a relative import against the importing file's directory; the private copy must
    hold it too, or real containerd would refuse the candidate (missing import file)."""
    (env.etc / "extra.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
                                        'sandbox_image = "registry.k8s.io/pause:3.9"\n')
    env.config.write_text('imports = ["extra.toml"]\n' + GOLDEN_INPUT)
    result = env.run()
    assert result["rc"] == 0 and result["changed"] is True and result["validated"] is True
    assert parse_toml(env.config.read_text(), "c")["imports"] == ["extra.toml", "%s/*.toml" % env.drop_in.parent]
    assert_valid_live(env.config)


def test_drop_in_regenerated_after_config_edit(env):
    """The drop-in is a copy of the CRI section: an edit to config.toml is shadowed (real containerd 1.6 shows the
    old value) until the module runs again, which regenerates the drop-in and asks for a restart."""
    env.config.write_text(GOLDEN_INPUT)
    env.run()
    env.config.write_text(env.config.read_text().replace("pause:3.9", "pause:3.10"))
    dump = assert_valid_live(env.config)
    assert dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "registry.k8s.io/pause:3.9"  # shadowed
    result = env.run()
    assert result["changed"] is True and result["files_changed"] == [str(env.drop_in)]
    assert result["restart_required"] is True
    dump = assert_valid_live(env.config)
    assert dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "registry.k8s.io/pause:3.10"
    assert result["effective_changes"] == [
        "plugins.io.containerd.grpc.v1.cri.sandbox_image: 'registry.k8s.io/pause:3.9' -> 'registry.k8s.io/pause:3.10'"]


def test_shadowing_another_drop_in_is_reported(env):
    """On containerd 1.x nvidia-ctk's drop-in (whole CRI section, loaded last) replaces another drop-in's CRI
    settings; real containerd's merged view shows it and the module warns."""
    env.config.write_text('imports = ["%s/*.toml"]\n' % env.drop_in.parent + GOLDEN_INPUT)
    env.drop_in.parent.mkdir()
    (env.drop_in.parent / "10-registry.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "mirror.example/pause:3.9"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = true\n')
    result = env.run(check=True)
    assert result["rc"] == 0 and result["changed"] is True
    assert ("plugins.io.containerd.grpc.v1.cri.sandbox_image: 'mirror.example/pause:3.9' ->"
            " 'registry.k8s.io/pause:3.9'") in result["effective_changes"]
    assert any("merged configuration also changes" in w for w in result["trap_warnings"])


# ------------------------------------------------------------------------------------------------------
# the verified-state stamp: a run that finds everything as an earlier run verified it skips both tools
# ------------------------------------------------------------------------------------------------------
def _logging_tools(env):
    """nvidia-ctk (the stand-in) and containerd wrapped so that every invocation is logged."""
    log = env.tmp / "tools.log"
    ctk = ctk_env.ctk_wrapper(env.tmp / "bin" / "logged", "1.20.0", log=str(env.tmp / "ctk-calls.log"))
    wrapped = env.tmp / "bin" / "logged" / "containerd"
    wrapped.write_text('#!/bin/sh\necho "containerd $*" >> "%s"\nexec "%s" "$@"\n' % (log, ctk_env.require_containerd()))
    wrapped.chmod(0o755)
    return ctk, str(wrapped), [log, env.tmp / "ctk-calls.log"]


def _calls(logs):
    return sum(len(p.read_text().splitlines()) for p in logs if p.exists())


def _warnings(result):
    """The texts of a result's warnings (ansible-core 2.19 reports them as structured events)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


def _stamp(env):
    return env.etc / (".config.toml" + containerd_stamp.STAMP_SUFFIX)


def test_a_verified_state_is_recognised_without_running_the_tools(env):
    env.config.write_text(GOLDEN_INPUT)
    ctk, containerd, logs = _logging_tools(env)
    first = env.run(nvidia_ctk_path=ctk, containerd_path=containerd)
    assert first["changed"] is True and "verified_earlier" not in first
    stamp = json.loads(_stamp(env).read_text())
    wrong_dir = str(env.tmp / "etc" / "containerd" / "config.d" / "99-nvidia.toml")  # (#1404's: a warning's input)
    assert sorted(stamp["inputs"]["files"]) == sorted([str(env.config), str(env.drop_in), wrong_dir])
    snap, calls = env.files(), _calls(logs)
    second = env.run(nvidia_ctk_path=ctk, containerd_path=containerd)
    assert _calls(logs) == calls, "a stamp hit must not run nvidia-ctk or containerd"
    assert env.files() == snap
    assert second["changed"] is False and second["verified_earlier"] is True and second["diff"] == []
    # the stamp's answer is exactly what a full run answers
    _stamp(env).unlink()
    full = env.run(nvidia_ctk_path=ctk, containerd_path=containerd)
    assert _calls(logs) > calls
    for key in ("changed", "files", "files_changed", "restart_required", "edit_mode", "config_version",
                "nvidia_ctk_version", "containerd_version", "validated", "trap_warnings", "effective_changes",
                "warnings", "diff"):
        assert second.get(key) == full.get(key), key


def _edit_config(env):
    env.config.write_text(env.config.read_text() + "# edited by hand\n")


def _add_drop_in(env):
    (env.drop_in.parent / "50-other.toml").write_text("version = 2\n")


def _edit_import_of_import(env):
    (env.drop_in.parent / "50-other.toml").write_text('version = 2\nimports = ["%s"]\n' % (env.tmp / "deep.toml"))


def _new_ctk(env):
    env.set_ctk("1.20.0")  # a fresh binary of the same version: another inode
    return {"nvidia_ctk_path": env.ctk}


@pytest.mark.parametrize("change", [
    "config edited", "drop-in edited", "drop-in deleted", "another drop-in added", "an imported file's import edited",
    "nvidia-ctk replaced", "another runtime_path", "another collection version", "corrupt stamp", "check mode"])
def test_any_change_to_what_was_verified_is_a_full_run(env, monkeypatch, change):
    env.config.write_text(GOLDEN_INPUT)
    ctk, containerd, logs = _logging_tools(env)
    args = dict(nvidia_ctk_path=ctk, containerd_path=containerd)
    env.run(**args)
    if change == "an imported file's import edited":
        _edit_import_of_import(env)
        env.run(**args)
        (env.tmp / "deep.toml").write_text("version = 2\n")
    calls = _calls(logs)
    if change == "config edited":
        _edit_config(env)
    elif change == "drop-in edited":
        env.drop_in.write_text(env.drop_in.read_text() + "\n")
    elif change == "drop-in deleted":
        env.drop_in.unlink()
    elif change == "another drop-in added":
        _add_drop_in(env)
    elif change == "nvidia-ctk replaced":
        args["nvidia_ctk_path"] = ctk_env.ctk_wrapper(env.tmp / "bin" / "other", "1.20.0",
                                                      log=str(env.tmp / "ctk-calls.log"))
    elif change == "another runtime_path":
        args["runtime_path"] = "/usr/local/bin/nvidia-container-runtime"
    elif change == "another collection version":
        monkeypatch.setattr(containerd_stamp, "code_digest", lambda: "0" * 64)
    elif change == "corrupt stamp":
        _stamp(env).write_text('{"inputs": ')
    result = env.run(check=change == "check mode", **args)
    if change == "check mode":  # check mode reads the stamp too: a hit, and nothing written
        assert result["verified_earlier"] is True and _calls(logs) == calls
        return
    assert result["rc"] == 0 and "verified_earlier" not in result, result
    assert _calls(logs) > calls, "the tools must run again"
    again = env.run(**args)
    assert again["changed"] is False and again["verified_earlier"] is True


@pytest.fixture
def target_warnings(monkeypatch):
    """Module warnings in the result, as on a target: once any controller-side ansible code is imported in this
    process (filter tests do), ansible-core 2.19 sends module.warn() to its display instead."""
    from ansible.module_utils import _internal
    monkeypatch.setattr(_internal, "is_controller", False)


def test_no_stamp_in_check_mode_or_when_the_written_state_is_not_a_fixed_point(env, target_warnings):
    env.config.write_text(GOLDEN_INPUT)
    env.run(check=True)
    assert not _stamp(env).exists()
    # an nvidia-ctk whose output changes each time it runs on it: changed, written, but never recorded as verified
    drifting = env.tmp / "bin" / "drifting" / "nvidia-ctk"
    drifting.parent.mkdir(parents=True)
    drifting.write_text('#!/bin/sh\n"%s" "$@" || exit $?\nfor a in "$@"; do case "$a" in --drop-in-config=*)'
                        ' echo "# $(date +%%s%%N)" >> "${a#--drop-in-config=}";; esac; done\n' % env.ctk)
    drifting.chmod(0o755)
    result = env.run(nvidia_ctk_path=str(drifting))
    assert result["rc"] == 0 and result["changed"] is True
    assert any("changes its own output again" in w for w in _warnings(result)), result
    assert not _stamp(env).exists()


def test_a_failure_while_verifying_the_written_files_leaves_no_stamp_and_does_not_fail(env, target_warnings):
    """containerd refuses the second look (after the files were written): the change stands and is reported
    (the role must still restart containerd), only no verified state is recorded."""
    counter = env.tmp / "dumps"
    flaky = env.tmp / "bin" / "flaky-containerd"
    flaky.write_text('#!/bin/sh\ncase "$*" in *"config dump"*) n=$(($(cat "%s" 2>/dev/null || echo 0) + 1));'
                     ' echo $n > "%s"; [ $n -ge 3 ] && { echo boom >&2; exit 1; };; esac\nexec "%s" "$@"\n'
                     % (counter, counter, ctk_env.require_containerd()))
    flaky.chmod(0o755)
    env.config.write_text(GOLDEN_INPUT)
    result = env.run(containerd_path=str(flaky))
    assert result["rc"] == 0 and result["changed"] is True and result["restart_required"] is True
    assert any("not recorded as verified" in w and "boom" in w for w in _warnings(result)), result
    assert not _stamp(env).exists()
    assert env.drop_in.read_text() == GOLDEN_V2


def test_a_written_file_that_does_not_read_back_fails_changed(env, monkeypatch):
    """ContainerdRun.apply's read-back check raises a Failure to the base (issue 48): the same message, changed=True
    and the files with their actions, as when it called fail_json."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _containerd_run
    read_live = _containerd_run.read_live

    def tampered(path, what):
        return "changed underneath\n" if what == "written file" else read_live(path, what)
    monkeypatch.setattr(_containerd_run, "read_live", tampered)
    env.config.write_text(GOLDEN_INPUT)
    result = env.run()
    assert result["rc"] == 1 and result["changed"] is True
    assert result["msg"] == "%s does not hold what was written (changed underneath?)" % result["files"][0]["path"]
    assert [f["action"] for f in result["files"]] and all(set(f) == {"path", "action"} for f in result["files"])
