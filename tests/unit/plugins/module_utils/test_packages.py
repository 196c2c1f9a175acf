"""_packages and _package_repo: the version order of dpkg (held to the real `dpkg --compare-versions`) and of rpm
(rpm's own rpmvercmp test table), the read-only commands the node plan and package_plan build for apt and dnf, and
the reading of those tools' outputs."""
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _package_repo
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _packages

DEB_PAIRS = [
    ("1.18.1-1", "1.20.0-1"), ("1.20.0-1", "1.20.0-1"), ("1.20.0-1", "1.20.0-2"), ("1.20.0~rc.1-1", "1.20.0-1"),
    ("1.20.0~rc.1-1", "1.20.0~rc.2-1"), ("1:1.0-1", "2.0-1"), ("1.0", "1.0-0"), ("1.0-1", "1.0+b1-1"),
    ("1.0a-1", "1.0-1"), ("1.0~~-1", "1.0~-1"), ("1.10-1", "1.9-1"), ("1.009-1", "1.9-1"), ("2.0", "10.0"),
    ("1.0.0-1ubuntu1", "1.0.0-1"), ("0:1.2", "1.2"), ("1.2-3.4", "1.2-3.10"), ("1.0+", "1.0."),
    ("7.6p2-4", "7.6-0"), ("1.0.3-3", "1.0-1"), ("1.3", "1.2.2-2"), ("1.3", "1.2.2"), ("0-pre", "0-pre"),
    ("0-pre", "0-pree"), ("1.1.6r2-2", "1.1.6r-1"), ("2.6b2-1", "2.6b-2"), ("98.1p5-1", "98.1-pre2-b6-2"),
    ("0.4a6-2", "0.4-1"), ("1:3.0.5+dfsg-1", "1:3.0.5-1"), ("1.2.3~beta", "1.2.3~alpha"),
]

RPM_TABLE = [  # rpm's tests/rpmvercmp.at
    ("1.0", "1.0", 0), ("1.0", "2.0", -1), ("2.0", "1.0", 1), ("2.0.1", "2.0.1", 0), ("2.0", "2.0.1", -1),
    ("2.0.1a", "2.0.1", 1), ("5.5p1", "5.5p2", -1), ("5.5p10", "5.5p1", 1), ("10xyz", "10.1xyz", -1),
    ("xyz10", "xyz10.1", -1), ("xyz.4", "8", -1), ("8", "xyz.4", 1), ("xyz.4", "2", -1), ("5.6p1", "6.5p1", -1),
    ("6.0.rc1", "6.0", 1), ("10b2", "10a1", 1), ("10a2", "10b2", -1), ("1.0a", "1.0aa", -1), ("10.0001", "10.1", 0),
    ("10.0001", "10.0039", -1), ("4.999.9", "5.0", -1), ("20101122", "20101121", 1), ("2_0", "2.0", 0),
    ("a+", "a_", 0), ("+_", "_+", 0), ("_+", "_", 0), ("1.0~rc1", "1.0", -1), ("1.0~rc1", "1.0~rc2", -1),
    ("1.0~rc1~git123", "1.0~rc1", -1), ("1.0^", "1.0", 1), ("1.0^git1", "1.0^git2", -1), ("1.0^git1", "1.01", -1),
    ("1.0^20160101", "1.0.1", -1), ("1.0^20160102", "1.0^20160101^git1", 1), ("1.0~rc1^git1", "1.0~rc1", 1),
    ("1.0^git1~pre", "1.0^git1", -1),
]


def dpkg_order(a, b):
    for op, value in (("lt", -1), ("eq", 0), ("gt", 1)):
        if subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0:
            return value
    raise AssertionError("dpkg gave no order for %s %s" % (a, b))


@pytest.mark.parametrize("first,second", DEB_PAIRS)
def test_debian_order_is_dpkgs(first, second):
    for pair in ((first, second), (second, first)):
        assert _packages.deb_compare(*pair) == dpkg_order(*pair), pair


@pytest.mark.parametrize("left,right,want", RPM_TABLE)
def test_rpm_order_is_rpmvercmps(left, right, want):
    assert _packages._rpmvercmp(left, right) == want
    assert _packages._rpmvercmp(right, left) == -want


def test_rpm_evr_order():
    assert _packages.rpm_compare("1.20.0-1", "1.18.1-1") == 1
    assert _packages.rpm_compare("1:1.0-1", "2.0-1") == 1
    assert _packages.rpm_compare("1.20.0-1", "1.20.0-1") == 0
    assert _packages.rpm_compare("1.20.0-2", "1.20.0-10") == -1


def test_query_commands_are_argument_lists():
    assert _packages.query_command("apt", ["a", "b"], "/usr/bin/dpkg-query") == [
        "/usr/bin/dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n", "a", "b"]
    assert _packages.query_command("dnf", ["a"], "/usr/bin/rpm") == [
        "/usr/bin/rpm", "-q", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n", "a"]
    with pytest.raises(_packages.PackageError):
        _packages.query_command("zypper", ["a"], "x")


def test_dpkg_query_output_is_read_with_holds_and_half_installed_packages():
    out = ("nvidia-container-toolkit\t1.20.0-1\thold ok installed\n"
           "libnvidia-container1\t1.18.1-1\tinstall ok half-configured\n"
           "libnvidia-container-tools\t1.18.1-1\tdeinstall ok config-files\n")
    found = _packages.parse_query("apt", ["nvidia-container-toolkit", "libnvidia-container1",
                                          "libnvidia-container-tools", "nvidia-container-toolkit-base"], 1, out,
                                  "dpkg-query: no packages found matching nvidia-container-toolkit-base\n")
    assert found["nvidia-container-toolkit"] == {"version": "1.20.0-1", "held": True, "status": "hold ok installed"}
    assert found["libnvidia-container1"]["version"] is None
    assert found["libnvidia-container-tools"]["version"] is None
    assert found["nvidia-container-toolkit-base"] == {"version": None, "held": False, "status": "not installed"}
    with pytest.raises(_packages.PackageError):
        _packages.parse_query("apt", ["a"], 2, "", "dpkg-query: error: cannot access archive")


def test_rpm_query_output_is_read():
    out = "nvidia-container-toolkit\t0:1.20.0-1\npackage libnvidia-container1 is not installed\n"
    found = _packages.parse_query("dnf", ["nvidia-container-toolkit", "libnvidia-container1"], 1, out, "")
    assert found["nvidia-container-toolkit"]["version"] == "1.20.0-1"
    assert found["libnvidia-container1"]["version"] is None
    assert _packages.parse_query("dnf", ["a"], 0, "a\t2:1.0-1\n", "")["a"]["version"] == "2:1.0-1"
    with pytest.raises(_packages.PackageError):       # more missing than asked for: not an answer
        _packages.parse_query("dnf", ["a"], 3, "", "error: rpmdb open failed")


def test_plan_and_reasons():
    installed = {"a": {"version": "1.18.1-1", "held": True, "status": "hold ok installed"},
                 "b": {"version": "1.20.0-1", "held": False, "status": "install ok installed"},
                 "c": {"version": "1.21.0-1", "held": True, "status": "hold ok installed"}}
    assert [e["action"] for e in _packages.plan("apt", ["a", "b", "c", "d"], "1.20.0-1", installed)] == [
        "upgrade", "none", "downgrade", "install"]
    entries = [{"name": n, "version": "1.20.0-1", "manager": "apt", "hold": True} for n in "abd"]
    assert _packages.reasons(entries, installed) == [
        "package a is at 1.18.1-1, declared 1.20.0-1", "package b is not held (dpkg selection install)",
        "package d is not installed, declared 1.20.0-1"]


def test_repository_probe_commands_stay_in_the_scratch_directory():
    update, madison = _package_repo.apt_commands("/usr/bin/apt-get", "/usr/bin/apt-cache", "/tmp/s", ["a"])
    assert update[0] == "/usr/bin/apt-get" and update[-1] == "update" and madison[-2:] == ["madison", "a"]
    # the probe's own configuration, read after the node's: the node's update hooks do not run
    assert update[2:4] == ["-c", "/tmp/s/apt.conf"] and madison[1:3] == ["-c", "/tmp/s/apt.conf"]
    assert "#clear APT::Update::Post-Invoke;" in _package_repo.APT_PROBE_CONF
    options = dict(update[i + 1].split("=", 1) for i, word in enumerate(update) if word == "-o")
    for key in ("Dir::Etc::SourceList", "Dir::Etc::SourceParts", "Dir::State::Lists", "Dir::Cache",
                "Dir::Etc::PreferencesParts"):
        assert options[key].startswith("/tmp/s/"), key
    makecache, listing = _package_repo.dnf_commands("/usr/bin/dnf", "/tmp/s", ["a", "b"])
    assert "--setopt=reposdir=/tmp/s/repos" in makecache and "--setopt=cachedir=/tmp/s/cache" in makecache
    assert makecache[-1] == "makecache" and listing[-5:] == ["list", "--showduplicates", "--available", "a", "b"]
    assert _package_repo.file_command("dnf", "/x.rpm", rpm="/usr/bin/rpm")[:3] == ["/usr/bin/rpm", "-qp", "--nosignature"]


def test_repository_answers_are_read_and_failures_classified():
    madison = (" nvidia-container-toolkit |   1.20.0-1 | file:/r/deb/amd64  Packages\n"
               " nvidia-container-toolkit |   1.18.1-1 | file:/r/deb/amd64  Packages\n")
    assert _package_repo.parse_madison(madison, ["nvidia-container-toolkit", "x"]) == {
        "nvidia-container-toolkit": ["1.20.0-1", "1.18.1-1"], "x": []}
    listing = ("Available Packages\n"
               "nvidia-container-toolkit.x86_64          1.18.1-1          nvidia-container-toolkit\n"
               "nvidia-container-toolkit.x86_64          1.20.0-1          nvidia-container-toolkit\n")
    assert _package_repo.parse_dnf_list(listing, ["nvidia-container-toolkit"]) == {
        "nvidia-container-toolkit": ["1.18.1-1", "1.20.0-1"]}
    assert _package_repo.classify(["W: GPG error: file:/r/deb/amd64  InRelease: The following signatures couldn't "
                                   "be verified because the public key is not available: NO_PUBKEY 0123"]) == "signature"
    assert _package_repo.classify(["E: The repository 'file:/r/deb/amd64  Release' is not signed."]) == "signature"
    assert _package_repo.classify(["E: Failed to fetch http://127.0.0.1:9/x/InRelease  Could not connect to "
                                   "127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)"]) == "unreachable"
    assert _package_repo.scratch_sources("deb [signed-by=/k.asc] u /", "/k.asc", "/tmp/s/key.asc") == \
        "deb [signed-by=/tmp/s/key.asc] u /"
    assert _package_repo.parse_file("dnf", "nvidia-container-toolkit\t0:1.20.0-1\n") == (
        "nvidia-container-toolkit", "1.20.0-1")
    assert _package_repo.parse_file("apt", "") is None
