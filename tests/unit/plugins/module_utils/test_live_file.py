# -*- coding: utf-8 -*-
"""require_tool: the one way a step finds a tool it cannot do without, and the one message when it is missing."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._live_file import TOOL_DIRS, ToolNotFound, require_tool


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
