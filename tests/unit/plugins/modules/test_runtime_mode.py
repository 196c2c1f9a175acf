"""runtime_mode with the nvidia-ctk stand-in (its `config --set` held to the real tool's recorded output:
tests/unit/test_nvidia_ctk_config_standin.py): check mode, apply, re-run through real ansible; in this process
(run_here), an unchanged mode never rewrites the file (nvidia-ctk would drop its comments) and a config that is not
TOML is refused with nothing changed."""
import os

from tests.support.ansible_run import ROOT, run_module
from tests.support.modrun import run_here

MODULE = "gpuops.nvidia.runtime_mode"
CTK = os.path.join(ROOT, "tests", "support", "bin", "nvidia-ctk")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "nvidia-ctk")


def _read(path):
    with open(path) as handle:
        return handle.read()


def test_a_missing_config_means_auto_and_cdi_writes_nvidias_default_with_that_mode(tmp_path):
    path = str(tmp_path / "nvidia-container-runtime" / "config.toml")
    args = {"config_path": path, "nvidia_ctk_path": CTK}
    same = run_module(MODULE, dict(args, mode="auto"), env={})[0]
    assert same["changed"] is False and same["previous_mode"] == "auto" and not os.path.exists(path), same

    check = run_module(MODULE, dict(args, mode="cdi"), env={}, check=True, diff=True)[0]
    assert check["changed"] is True and not os.path.exists(path), check
    assert 'mode = "cdi"' in check["diff"]["after"] and check["diff"]["before"] == ""
    applied = run_module(MODULE, dict(args, mode="cdi"), env={}, diff=True)[0]
    assert applied["changed"] is True and applied["previous_mode"] == "auto" and applied["mode"] == "cdi"
    # what the real nvidia-ctk v1.20.0 wrote for `config default` then `--set nvidia-container-runtime.mode=cdi`
    assert _read(path) == _read(os.path.join(FIXTURES, "config-default-mode-cdi.toml"))
    again = run_module(MODULE, dict(args, mode="cdi"), env={})[0]
    assert again["changed"] is False and again["previous_mode"] == "cdi"


def test_an_unchanged_mode_keeps_the_file_and_its_comments_and_a_change_is_backed_up(tmp_path):
    path = str(tmp_path / "config.toml")
    original = _read(os.path.join(FIXTURES, "config-minimal.toml"))   # mode = "legacy", with comments
    with open(path, "w") as handle:
        handle.write(original)
    args = {"config_path": path, "nvidia_ctk_path": CTK}
    assert run_here(MODULE, dict(args, mode="legacy"), env={})["changed"] is False
    assert _read(path) == original
    res = run_here(MODULE, dict(args, mode="cdi", backup=True), env={})
    assert res["changed"] is True and res["previous_mode"] == "legacy"
    assert _read(path) == _read(os.path.join(FIXTURES, "config-minimal-mode-cdi.toml"))
    assert _read(res["backup_file"]) == original


def test_a_config_that_is_not_toml_is_refused_and_left_alone(tmp_path):
    path = str(tmp_path / "config.toml")
    with open(path, "w") as handle:
        handle.write("[nvidia-container-runtime\nmode = cdi\n")
    res = run_here(MODULE, {"config_path": path, "nvidia_ctk_path": CTK, "mode": "cdi"}, env={})
    assert res.get("failed") and "left untouched" in res["msg"] and "nothing changed" in res["msg"], res
    assert _read(path) == "[nvidia-container-runtime\nmode = cdi\n"
