"""Files named by module options: only regular UTF-8 files up to the size limit, YAML not too deep or too large,
and a message that names the option, the path and what is wrong."""

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._input_file import (
    InputFileError, check_shape, load_yaml, read_text)
from tests.support.fuzz_values import make_special


@pytest.mark.parametrize("kind,expect", [
    ("fifo", "is a FIFO (named pipe); it must be a regular file"),
    ("dir", "is a directory; it must be a regular file"),
    ("socket", "is a socket; it must be a regular file"),
    ("zero", "is a character device; it must be a regular file"),
    ("dangling", "No such file or directory"),
    ("loop", "Too many levels of symbolic links"),
    ("binary", "is not UTF-8 text (byte 0x80 at offset 128)"),
    ("huge", "is 1073741824 bytes; files larger than 16777216 bytes (16 MiB) are refused"),
])
def test_what_cannot_be_read_says_why(tmp_path, kind, expect):
    path = make_special(str(tmp_path / "f"), kind)
    with pytest.raises(InputFileError) as raised:
        read_text(path, "config_file")
    assert "config_file" in str(raised.value) and expect in str(raised.value)


def test_a_limit_below_the_file_size_refuses_it_without_reading_past_it(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 101)
    assert read_text(str(path), "opt", limit=101) == "x" * 101
    with pytest.raises(InputFileError, match="opt .* is 101 bytes; files larger than 100 bytes"):
        read_text(str(path), "opt", limit=100)


def test_nul_in_the_path(tmp_path):
    with pytest.raises(InputFileError, match="contains a NUL character"):
        read_text(str(tmp_path) + "/a\x00b", "config_file")


def test_yaml_too_deep_or_too_many_values():
    with pytest.raises(InputFileError, match="nests"):
        load_yaml("[" * 100000 + "]" * 100000, "config_file x", yaml)
    with pytest.raises(InputFileError, match="nests more than 100 levels"):
        load_yaml("[" * 150 + "]" * 150, "config_file x", yaml)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        "%s: &%s [%s]\n" % (chr(98 + i), chr(98 + i), ", ".join(["*" + chr(97 + i)] * 9)) for i in range(9))
    with pytest.raises(InputFileError, match="more than 100000 values"):
        load_yaml(bomb, "config_file x", yaml)
    with pytest.raises(InputFileError, match="is not valid YAML"):
        load_yaml("a: [", "config_file x", yaml)


def test_real_configs_pass():
    value = load_yaml("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n", "f", yaml)
    assert value["version"] == "v1"
    check_shape([[1, 2], {"a": [3]}], "x")
