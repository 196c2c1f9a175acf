"""The nvidia-ctk STAND-IN's `config` (tests/support/nvidia_ctk_standin.py), held to what the REAL nvidia-ctk v1.20.0
printed and wrote (tests/fixtures/nvidia-ctk/local-commands.txt and the config-*.toml beside it): the runtime mode
set with `config --in-place --set nvidia-container-runtime.mode=...`, as issue 23's cdi_spec module will set it."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.support import ctk_env

FIXTURES = os.path.join(ctk_env.ROOT, "tests", "fixtures", "nvidia-ctk")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def ctk(*args):
    return subprocess.run([sys.executable, ctk_env.STANDIN] + list(args), capture_output=True, text=True, check=False)


def recorded(command_end):
    """(exit code, stdout lines, stderr lines) of the block of local-commands.txt whose command ends so."""
    lines = fixture("local-commands.txt").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$ ") and line.endswith(command_end))
    code = int(lines[start + 1].split()[1])
    out_at, err_at = lines.index("--- stdout", start), lines.index("--- stderr", start)
    end = next((i for i in range(err_at + 1, len(lines)) if not lines[i] or lines[i].startswith(("$ ", "#"))),
               len(lines))
    return code, lines[out_at + 1:err_at], [re.sub(r'^time="[^"]*" ', "", x) for x in lines[err_at + 1:end]]


def test_default_is_the_real_default():
    result = ctk("config", "default")
    assert result.returncode == 0 and result.stdout == fixture("config-default.toml")


@pytest.mark.parametrize("mode, expected", [
    ("cdi", "config-default-mode-cdi.toml"),
    ("legacy", "config-default-mode-legacy.toml"),
    ("auto", "config-default.toml"),
])
def test_set_mode_in_place_writes_what_the_real_tool_wrote(tmp_path, mode, expected):
    config = tmp_path / "config.toml"
    shutil.copy(os.path.join(FIXTURES, "config-default.toml"), str(config))
    inode = config.stat().st_ino
    result = ctk("config", "--in-place", "--set", "nvidia-container-runtime.mode=%s" % mode, "--config=%s" % config)
    code, out, err = recorded("--set nvidia-container-runtime.mode=%s --config=cfg/config-%s.toml" % (mode, mode))
    assert (result.returncode, result.stdout.splitlines(), result.stderr.splitlines()) == (code, out, err)
    assert config.read_text() == fixture(expected)
    assert config.stat().st_ino == inode   # os.Create: truncated and rewritten in place, never replaced


def test_comments_are_lost_and_missing_defaults_come_back_commented(tmp_path):
    config = tmp_path / "config.toml"
    shutil.copy(os.path.join(FIXTURES, "config-minimal.toml"), str(config))
    assert ctk("config", "-i", "--set=nvidia-container-runtime.mode=cdi", "-c", str(config)).returncode == 0
    assert config.read_text() == fixture("config-minimal-mode-cdi.toml")
    printed = ctk("config", "--set", "nvidia-container-runtime.mode=cdi",
                  "--config=%s" % os.path.join(FIXTURES, "config-minimal.toml"))
    assert printed.stdout == fixture("config-minimal-mode-cdi.toml")


def test_a_missing_config_is_created_from_the_defaults(tmp_path):
    config = tmp_path / "missing" / "config.toml"
    result = ctk("config", "--in-place", "--set", "nvidia-container-runtime.mode=cdi", "--config=%s" % config)
    assert (result.returncode, result.stderr) == (0, "")
    assert config.read_text() == fixture("config-default-mode-cdi.toml")


def test_the_mode_value_is_not_checked_but_the_key_is(tmp_path):
    config = tmp_path / "config.toml"
    shutil.copy(os.path.join(FIXTURES, "config-default-mode-cdi.toml"), str(config))
    assert ctk("config", "-i", "--set", "nvidia-container-runtime.mode=bogus", "-c", str(config)).returncode == 0
    assert 'mode = "bogus"' in config.read_text().splitlines()
    before = config.read_text()
    result = ctk("config", "--in-place", "--set", "nvidia-container-runtime.nomode=cdi", "--config=%s" % config)
    code, out, err = recorded("--set nvidia-container-runtime.nomode=cdi --config=cfg/bogus.toml")
    assert (result.returncode, result.stdout.splitlines(), result.stderr.splitlines()) == (code, out, err)
    assert config.read_text() == before


@pytest.mark.parametrize("version, source, expected, drop_in", [
    ("1.20.0", "v1-input.toml", "v1-cdi-drop-in-1.20.0.toml", True),
    ("1.17.8", "v1-input.toml", "v1-cdi-in-place-1.17.8.toml", False),
    ("1.17.8", "v1-input-cri-cdi.toml", "v1-cri-cdi-in-place-1.17.8.toml", False),
])
def test_cdi_on_a_version_1_config_lands_where_the_real_tool_puts_it(tmp_path, version, source, expected, drop_in):
    """Issue 36: on a version 1 config the real tool (config_v1.go EnableCDI, the same at v1.17.8, v1.18.0 and
    v1.20.0) sets enable_cdi under [plugins.cri.containerd], not [plugins.cri] where containerd's CRI plugin reads
    it; on 1.18+ it writes the whole v1 tree to the drop-in and leaves config.toml alone."""
    etc = tmp_path / "etc" / "containerd"
    etc.mkdir(parents=True)
    config, drop = etc / "config.toml", etc / "conf.d" / "99-nvidia.toml"
    shutil.copy(os.path.join(FIXTURES, source), str(config))
    args = ["runtime", "configure", "--runtime=containerd", "--cdi.enabled", "--config=%s" % config]
    if drop_in:
        args.append("--drop-in-config=%s" % drop)
    result = ctk_env.run_standin(args, version)
    assert result.returncode == 0, result.stderr
    assert (drop if drop_in else config).read_text() == ctk_env.real_ctk_text(expected)
    if drop_in:
        assert config.read_text() == fixture(source)
    assert sorted(str(p.relative_to(etc)) for p in etc.rglob("*") if p.is_file()) == sorted(
        ["config.toml"] + (["conf.d/99-nvidia.toml"] if drop_in else []))
