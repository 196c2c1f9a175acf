# -*- coding: utf-8 -*-
"""require_tool: the one way a step finds a tool it cannot do without, and the one message when it is missing."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _live_file
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import TOOL_DIRS, ToolNotFound, require_tool


def _searching(found):
    """A get_bin_path that records where it was asked to look and answers ``found``."""
    calls = []

    def get_bin_path(name, opt_dirs=None):
        calls.append((name, list(opt_dirs or [])))
        return found
    return get_bin_path, calls


def test_found_in_the_search_path():
    get_bin_path, calls = _searching("/usr/sbin/nvidia-ctk")
    assert require_tool(get_bin_path, {"nvidia_ctk_path": None}, "nvidia_ctk_path", "nvidia-ctk",
                        "nvidia-container-toolkit") == "/usr/sbin/nvidia-ctk"
    assert calls == [("nvidia-ctk", TOOL_DIRS)]


def test_not_found_names_every_place_searched_and_the_package():
    get_bin_path, calls = _searching(None)
    with pytest.raises(ToolNotFound) as err:
        require_tool(get_bin_path, {"nvidia_ctk_path": None}, "nvidia_ctk_path", "nvidia-ctk",
                     "nvidia-container-toolkit")
    assert str(err.value) == ("nvidia-ctk was not found (looked in PATH, /usr/bin, /usr/local/bin, /usr/sbin): install"
                              " the nvidia-container-toolkit package, which provides it, or set nvidia_ctk_path")
    assert err.value.reason == "nvidia-ctk not found"
    assert calls and set(calls[0][1]) == set(["/usr/bin", "/usr/local/bin", "/usr/sbin"])


def test_own_search_dirs_and_a_tool_no_option_names():
    # driver_modules' /usr/sbin and /sbin, and mps_control's PATH only for the programs its unit runs
    get_bin_path, calls = _searching(None)
    with pytest.raises(ToolNotFound) as err:
        require_tool(get_bin_path, {"modprobe": []}, "modprobe", "modprobe", "kmod", opt_dirs=["/usr/sbin", "/sbin"])
    assert str(err.value) == ("modprobe was not found (looked in PATH, /usr/sbin, /sbin): install the kmod package, "
                              "which provides it, or set modprobe")
    with pytest.raises(ToolNotFound) as err:
        require_tool(get_bin_path, {}, None, "systemctl", "systemd", opt_dirs=())
    assert str(err.value) == "systemctl was not found (looked in PATH): install the systemd package, which provides it"
    assert calls == [("modprobe", ["/usr/sbin", "/sbin"]), ("systemctl", [])]


def test_a_named_path_is_used_without_searching(tmp_path):
    tool = tmp_path / "nvidia-ctk"
    tool.write_text("#!/bin/sh\n")
    os.chmod(str(tool), 0o755)
    get_bin_path, calls = _searching(None)
    assert require_tool(get_bin_path, {"nvidia_ctk_path": str(tool)}, "nvidia_ctk_path", "nvidia-ctk", "pkg") == \
        str(tool)
    assert calls == []


def test_a_named_path_that_is_not_executable_is_refused(tmp_path):
    get_bin_path, _calls = _searching("/usr/bin/nvidia-ctk")
    with pytest.raises(ToolNotFound) as err:
        require_tool(get_bin_path, {"nvidia_ctk_path": str(tmp_path / "nope")}, "nvidia_ctk_path", "nvidia-ctk",
                     "pkg")
    assert "does not exist or is not executable" in str(err.value)
    assert err.value.reason == "nvidia-ctk %s is not executable" % (tmp_path / "nope")


def test_stamp_lies_hidden_beside_the_file_it_vouches_for():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _cdi, _containerd_stamp
    assert _live_file.stamp_path("/var/run/cdi/nvidia.yaml", ".x") == "/var/run/cdi/.nvidia.yaml.x"
    # the file names the nodes already hold stay valid
    assert _cdi.stamp_path("/var/run/cdi/nvidia.yaml") == "/var/run/cdi/.nvidia.yaml.gpuops-verified"
    assert _containerd_stamp.stamp_path("/etc/containerd/config.toml") == \
        "/etc/containerd/.config.toml.gpuops-verified.json"


def test_stamp_text_is_stable_json_and_reads_back(tmp_path):
    assert _live_file.stamp_text({"b": 1, "a": [2]}) == '{"a": [2], "b": 1}\n'
    assert _live_file.stamp_text({"b": 1, "a": 2}, indent=1) == '{\n "a": 2,\n "b": 1\n}\n'
    path = tmp_path / ".x.stamp"
    path.write_text(_live_file.stamp_text({"inputs": {"k": "v"}}))
    assert _live_file.load_stamp(str(path)) == {"inputs": {"k": "v"}}


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", "null", "\"a\"", None])
def test_a_stamp_that_is_not_a_json_object_is_no_record(tmp_path, text):
    assert _live_file.parse_stamp(text) is None
    if text is not None:
        path = tmp_path / ".x.stamp"
        path.write_text(text)
        assert _live_file.load_stamp(str(path)) is None


def test_a_missing_or_unreadable_stamp_is_no_record(tmp_path):
    assert _live_file.load_stamp(str(tmp_path / "absent")) is None
    assert _live_file.load_stamp(str(tmp_path)) is None   # a directory


def test_a_live_file_that_cannot_be_read_is_raised_to_the_base_unchanged(tmp_path):
    """read_live's failure (issue 48): a LiveFileError, not fail_json; the base reports the old message and
    changed=False (the old failure had no changed key) even over a result that says changed; the MIG boot script,
    which has no base, reports it as the ValueError it is."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import failure
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xff\xfe not UTF-8")
    assert _live_file.read_live(str(tmp_path / "absent.toml"), "config_path") is None
    with pytest.raises(_live_file.LiveFileError) as raised:
        _live_file.read_live(str(path), "config_path")
    assert isinstance(raised.value, ValueError)
    got = failure(raised.value, dict(changed=True, files=[]))
    assert got["msg"].startswith("config_path %s" % path) and got["msg"].endswith(
        "; it is left untouched, nothing changed")
    assert str(raised.value) == got["msg"] and got["changed"] is False and got["files"] == []
