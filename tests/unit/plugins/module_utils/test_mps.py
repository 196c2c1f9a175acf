"""Pure MPS pieces: declarations, the systemd unit, the commands, reading nvidia-cuda-mps-control answers."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mps import (
    MpsError, check_path, check_service_name, default_commands, mib_text, normalize_defaults, parse_mem_answer,
    parse_percentage_answer, parse_pid_list, plan_defaults, render_unit, restart_relevant)

CTL = "/usr/bin/nvidia-cuda-mps-control"


def test_defaults_are_normalised_to_what_the_daemon_takes():
    assert normalize_defaults(25, {"0": "8192M", 1: "4GB", "2": "4606MB"}) == (25, {0: "8G", 1: "4G", 2: "4606M"})
    assert normalize_defaults(None, "0=8G,1=10G") == (None, {0: "8G", 1: "10G"})
    assert normalize_defaults() == (None, {})


@pytest.mark.parametrize("pct,mem,fragment", [
    (0, None, "default_active_thread_percentage: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE must be a whole number"),
    ("25%", None, "without a % sign"),
    (None, "0=8G, 1=8G", "contains spaces"),
    (None, {"0": "8"}, "has no unit"),
    (None, "GPU-0a1b2c3d-1111-2222-3333-444455556666=8G", "set per GPU index"),
    (None, "0=8g", "units are upper case"),
])
def test_bad_defaults_are_refused(pct, mem, fragment):
    with pytest.raises(MpsError) as err:
        normalize_defaults(pct, mem)
    assert fragment in str(err.value)


def test_commands_in_stable_order():
    assert default_commands(25, {1: "4G", 0: "8G"}) == [
        "set_default_active_thread_percentage 25",
        "set_default_device_pinned_mem_limit 0 8G",
        "set_default_device_pinned_mem_limit 1 4G"]
    assert default_commands(None, {}) == []


def test_unit_carries_dirs_and_reapplies_defaults_on_start():
    text = render_unit(CTL, "/run/mps/pipe", "/var/log/mps", 25, {0: "8G"})
    lines = text.splitlines()
    assert "Type=forking" in lines
    assert "Environment=CUDA_MPS_PIPE_DIRECTORY=/run/mps/pipe" in lines
    assert "Environment=CUDA_MPS_LOG_DIRECTORY=/var/log/mps" in lines
    assert "ExecStart=%s -d" % CTL in lines
    assert "ExecStartPre=/bin/mkdir -p /run/mps/pipe /var/log/mps" in lines
    posts = [line for line in lines if line.startswith("ExecStartPost=")]
    # first wait until the daemon answers ($$ is systemd's escape for $), then the defaults in order
    assert "until echo get_server_list" in posts[0] and "$$((i+1))" in posts[0]
    assert posts[1:] == ["ExecStartPost=/bin/sh -c 'echo set_default_active_thread_percentage 25 | %s'" % CTL,
                         "ExecStartPost=/bin/sh -c 'echo set_default_device_pinned_mem_limit 0 8G | %s'" % CTL]
    assert "ExecStop=/bin/sh -c 'echo quit | %s'" % CTL in lines
    assert "WantedBy=multi-user.target" in lines


def test_only_path_changes_need_a_restart():
    a = render_unit(CTL, "/p", "/l", 25, {0: "8G"})
    b = render_unit(CTL, "/p", "/l", 50, {0: "4G", 1: "4G"})
    c = render_unit(CTL, "/p2", "/l", 25, {0: "8G"})
    assert a != b and restart_relevant(a) == restart_relevant(b)
    assert restart_relevant(a) != restart_relevant(c)
    assert restart_relevant(None) is None


@pytest.mark.parametrize("path", ["relative/dir", "/tmp/with space", "/tmp/q'uote", "/tmp/$HOME", "/tmp/a;b",
                                  "/tmp/../etc", "//tmp", "", None])
def test_unsafe_paths_are_refused(path):
    with pytest.raises(MpsError, match="absolute path"):
        check_path("pipe_directory", path)


@pytest.mark.parametrize("name", ["", "x.service", "a b", "../x", "-x"])
def test_bad_service_names(name):
    with pytest.raises(MpsError, match="systemd unit name"):
        check_service_name(name)


@pytest.mark.parametrize("text,value", [("25.0\n", 25.0), ("100.0", 100.0), ("12.5\n", 12.5)])
def test_percentage_answers(text, value):
    assert parse_percentage_answer(text) == value


@pytest.mark.parametrize("text", ["", "Cannot find MPS control daemon process", "25.0\n26.0\n", "abc"])
def test_unreadable_percentage_answers_fail(text):
    with pytest.raises(MpsError, match="cannot read"):
        parse_percentage_answer(text)


@pytest.mark.parametrize("text,mib", [("3G\n", 3072), ("4606M", 4606), ("8GB", 8192), ("0", None), ("0M", None),
                                      ("1.5G", 1536), ("8589934592", 8192)])
def test_memory_answers(text, mib):
    assert parse_mem_answer(text) == mib


@pytest.mark.parametrize("text", ["", "no limit", "8 X", "3G\n4G"])
def test_unreadable_memory_answers_fail(text):
    with pytest.raises(MpsError):
        parse_mem_answer(text)


def test_pid_lists():
    assert parse_pid_list("") == []
    assert parse_pid_list("4242\n4243\n") == [4242, 4243]
    with pytest.raises(MpsError, match="get_server_list"):
        parse_pid_list("Cannot find MPS control daemon process")


def test_plan_sends_only_what_differs():
    assert plan_defaults(25, {0: "8G", 1: "4G"}, 25.0, {0: 8192, 1: None}) == [
        "set_default_device_pinned_mem_limit 1 4G"]
    assert plan_defaults(25, {0: "8G"}, 25.0, {0: 8192}) == []
    assert plan_defaults(None, {}, 50.0, {0: 1024}) == []  # nothing declared: nothing managed
    assert plan_defaults(30, {}, 25.0, {}) == ["set_default_active_thread_percentage 30"]


def test_mib_text():
    assert (mib_text(8192), mib_text(4606), mib_text(None)) == ("8G", "4606M", None)


def test_pid_list_whitespace_separated():
    assert parse_pid_list("4242 4243") == [4242, 4243]
