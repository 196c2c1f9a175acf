"""dcgm_host_engine in-process, with Debian's real apt-get and dpkg installing package files shaped like DCGM 4's
(tests/support/dcgm_rig.py, NOT NVIDIA's) into a throwaway root, and the systemctl stand-in running the packaged unit:
check mode reports and changes nothing, apply installs, enables and starts the host engine, apply again changes
nothing; a newer version upgrades and restarts it; a downgrade is refused; absent stops it and removes the packages;
bad input changes nothing. The repository path: from a signed local repository laid out as NVIDIA's CUDA repository
(apt-get update, then the install at the pin), the packages held (the preferences pin and the dpkg hold) so that
apt-get upgrade does not move them. The dnf path: with a stand-in for rpm and dnf (tests/support/rpm_dnf_standin.py;
no real rpm or dnf can be installed here)."""
import json
import os
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import dcgm_host_engine

from tests.support import apt_rig, dcgm_rig, driver_rig, rpm_dnf_standin
from tests.support.modrun import run_main

pytestmark = pytest.mark.skipif(bool(apt_rig.missing_tools()),
                                reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))
SYSTEMCTL = os.path.join(dcgm_rig.ROOT, "tests", "support", "bin", "systemctl")


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    before = apt_rig.host_installed()
    work = tmp_path_factory.mktemp("dcgm-debs")
    yield {dcgm_rig.OLD: dcgm_rig.build(work, dcgm_rig.OLD), dcgm_rig.NEW: dcgm_rig.build(work, dcgm_rig.NEW)}
    assert apt_rig.host_installed() == before, "this machine's own package set changed"


@pytest.fixture
def node(tmp_path, monkeypatch):
    root = apt_rig.Root(tmp_path / "node")
    for key, value in root.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", root.path)
    monkeypatch.setenv("GPUOPS_NODE_LOCK", str(tmp_path / "node.lock"))
    monkeypatch.delenv("FAKE_SYSTEMD_STATE", raising=False)
    return root


def _args(node, debs, version=dcgm_rig.NEW, **more):
    files = dcgm_rig.place(debs[version], os.path.join(node.path, "var", "cache", "gpuops", "dcgm", version.replace(":", "_")))
    return dict(dict(version=version, package_manager="apt", package_files=files, systemctl=[SYSTEMCTL]), **more)


def _units(node):
    with open(os.path.join(node.path, ".standin-systemd.json")) as handle:
        return json.load(handle)["units"]


def test_check_apply_again_upgrade_and_a_refused_downgrade(node, debs):
    args = _args(node, debs)
    check = run_main(dcgm_host_engine.main, args, check_mode=True, diff=True)
    assert check["changed"] is True and not check.get("failed"), check
    assert [p["action"] for p in check["packages"]] == ["install", "install"]
    assert check["service"] == ["daemon-reload", "enable", "start"]
    assert "(not installed)" in check["diff"]["before"] and dcgm_rig.NEW in check["diff"]["after"]
    assert driver_rig.installed(node, dcgm_rig.NAMES) == {} and dcgm_rig.engine_running(node.path) is None

    applied = run_main(dcgm_host_engine.main, args)
    assert applied["changed"] is True and not applied.get("failed"), applied.get("msg")
    assert dict((n, v) for n, (v, s) in driver_rig.installed(node, dcgm_rig.NAMES).items()) == dict(
        (n, dcgm_rig.NEW) for n in dcgm_rig.NAMES)
    assert applied["host_engine"] == {"unit": "nvidia-dcgm.service", "enabled": True, "active": True, "port": 5555}
    unit = _units(node)["nvidia-dcgm.service"]
    assert unit["enabled"] and unit["active"]
    assert dcgm_rig.engine_running(node.path) == "version=4.5.2 port=5555"
    # the packaged dcgmi is where the burn-in and the gate look for it
    assert os.access(os.path.join(node.path, "usr", "bin", "dcgmi"), os.X_OK)

    again = run_main(dcgm_host_engine.main, args)
    assert again["changed"] is False and again["reasons"] == [] and again["service"] == [], again

    # the engine stopped behind our back: started again, nothing installed
    with open(os.path.join(node.path, ".standin-systemd.json")) as handle:
        state = json.load(handle)
    state["units"]["nvidia-dcgm.service"]["active"] = False
    with open(os.path.join(node.path, ".standin-systemd.json"), "w") as handle:
        json.dump(state, handle)
    restarted = run_main(dcgm_host_engine.main, args)
    assert restarted["changed"] is True and restarted["service"] == ["start"], restarted
    assert [p["action"] for p in restarted["packages"]] == ["none", "none"]

    # an older pin is refused (nothing changes), unless allowed
    older = _args(node, debs, version=dcgm_rig.OLD)
    refused = run_main(dcgm_host_engine.main, older)
    assert refused.get("failed") and refused["changed"] is False, refused
    assert "downgrade is refused unless allowed (allow_downgrade: true)" in refused["msg"]
    assert "nothing changed" in refused["msg"]
    down = run_main(dcgm_host_engine.main, dict(older, allow_downgrade=True))
    assert down["changed"] is True and not down.get("failed"), down
    assert down["service"] == ["daemon-reload", "restart"]
    assert dcgm_rig.engine_running(node.path) == "version=4.4.2 port=5555"
    up = run_main(dcgm_host_engine.main, args)
    assert [p["action"] for p in up["packages"]] == ["upgrade", "upgrade"] and not up.get("failed"), up


def test_absent_stops_disables_and_removes(node, debs):
    args = _args(node, debs)
    assert not run_main(dcgm_host_engine.main, args).get("failed")
    check = run_main(dcgm_host_engine.main, dict(args, state="absent"), check_mode=True)
    assert check["changed"] is True and check["service"] == ["stop", "disable"]
    assert dcgm_rig.engine_running(node.path) is not None
    gone = run_main(dcgm_host_engine.main, dict(args, state="absent"))
    assert gone["changed"] is True and not gone.get("failed"), gone
    assert driver_rig.installed(node, dcgm_rig.NAMES) == {} and dcgm_rig.engine_running(node.path) is None
    assert run_main(dcgm_host_engine.main, dict(args, state="absent"))["changed"] is False


def test_package_files_at_another_version_install_nothing(node, debs):
    args = _args(node, debs)
    older = _args(node, debs, version=dcgm_rig.OLD)["package_files"]
    out = run_main(dcgm_host_engine.main, dict(args, package_files=[args["package_files"][0], older[1]]))
    assert out.get("failed") and out["changed"] is False, out
    assert "datacenter-gpu-manager-4-cuda12 at 1:4.4.2-1, declared 1:4.5.2-1" in out["msg"]
    assert "nothing changed" in out["msg"]
    assert driver_rig.installed(node, dcgm_rig.NAMES) == {}


@pytest.mark.parametrize("more, words", [
    ({"version": "latest"}, "version 'latest' is not a package version"),
    ({"service": "dcgm"}, "is not a systemd service name (like nvidia-dcgm.service)"),
    ({"package_files": ["dcgm.deb"]}, "must be an absolute path on the node"),
    ({"cuda": 11}, "value of cuda must be one of: 12, 13"),
])
def test_bad_input_changes_nothing(node, debs, more, words):
    args = dict(_args(node, debs), **more)
    out = run_main(dcgm_host_engine.main, args)
    assert out.get("failed") and out.get("changed", False) is False and words in out["msg"], out
    assert driver_rig.installed(node, dcgm_rig.NAMES) == {}


def test_check_mode_before_the_files_are_copied_reports_the_install(node, debs):
    """In check mode the gpu_node role has not copied the package files yet: the install is reported, the files named
    as not read; a real run with them missing reads them first and fails with nothing changed."""
    args = dict(_args(node, debs), package_files=["/nonexistent/datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb"])
    check = run_main(dcgm_host_engine.main, args, check_mode=True)
    assert check["changed"] is True and not check.get("failed"), check
    assert check["package_files_unread"] == args["package_files"]
    real = run_main(dcgm_host_engine.main, args)
    assert real.get("failed") and real["changed"] is False and "nothing changed" in real["msg"], real
    assert driver_rig.installed(node, dcgm_rig.NAMES) == {}


# ----------------------------------------------------------------------------------------------- the repository path
@pytest.fixture(scope="module")
def keyring(tmp_path_factory):
    made = apt_rig.Keyring(tmp_path_factory.mktemp("dcgm-gpg"), "dcgm")
    yield made
    made.close()


def _selections(node):
    """{package: dpkg selection} in the root's database."""
    return dict(line.split()[:2] for line in subprocess.run(
        ["dpkg", "--admindir=%s/var/lib/dpkg" % node.path, "--get-selections"] + list(dcgm_rig.NAMES),
        stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.splitlines())


def _apt(node, *args):
    return subprocess.run(["apt-get", "-q", "-y"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, env=dict(os.environ, **node.env), check=False)


def _versions(node):
    return dict((n, v) for n, (v, s) in driver_rig.installed(node, dcgm_rig.NAMES).items())


def test_from_the_repository_held_so_that_an_upgrade_of_the_node_does_not_move_it(node, debs, keyring, tmp_path):
    """The node's configured repository has OLD and NEW; OLD is declared: check mode reports the install, the hold
    and the pin; apply installs OLD from the repository, pins and holds it; a re-run changes nothing; apt-get upgrade
    does not move it (the pin alone keeps it too); a lost hold and pin are restored without touching the engine; a new
    pin upgrades, moves the pin and restarts the engine; absent removes the held packages and the pin."""
    dcgm_rig.repository(tmp_path / "repo", list(debs[dcgm_rig.OLD].values()) + list(debs[dcgm_rig.NEW].values()),
                        keyring, node)
    pin = os.path.join(node.path, "etc", "apt", "preferences.d", "nvidia-dcgm-gpuops")
    args = dict(version=dcgm_rig.OLD, package_manager="apt", systemctl=[SYSTEMCTL])

    check = run_main(dcgm_host_engine.main, args, check_mode=True, diff=True)
    assert check["changed"] is True and not check.get("failed"), check
    assert [p["action"] for p in check["packages"]] == ["install", "install"]
    assert check["hold"] == list(dcgm_rig.NAMES) and check["pin"] == {"path": pin, "changed": True}
    assert "apt preferences pin: none" in check["diff"]["before"]
    assert "%s %s (held)" % (dcgm_rig.NAMES[0], dcgm_rig.OLD) in check["diff"]["after"]
    assert "Pin: version %s" % dcgm_rig.OLD in check["diff"]["after"]
    assert _versions(node) == {} and not os.path.exists(pin)

    applied = run_main(dcgm_host_engine.main, args)
    assert applied["changed"] is True and not applied.get("failed"), applied.get("msg")
    assert _versions(node) == dict((n, dcgm_rig.OLD) for n in dcgm_rig.NAMES)
    assert _selections(node) == dict((n, "hold") for n in dcgm_rig.NAMES)
    with open(pin) as handle:
        text = handle.read()
    assert "Package: %s\nPin: version %s\nPin-Priority: 990\n" % (" ".join(dcgm_rig.NAMES), dcgm_rig.OLD) in text
    assert oct(os.stat(pin).st_mode & 0o777) == "0o644"
    assert dcgm_rig.engine_running(node.path) == "version=4.4.2 port=5555"

    again = run_main(dcgm_host_engine.main, args, check_mode=True, diff=True)
    assert again["changed"] is False and again["reasons"] == [] and again["hold"] == [], again
    assert again["pin"] == {"path": pin, "changed": False}
    assert run_main(dcgm_host_engine.main, args)["changed"] is False

    # an upgrade of the node (unattended-upgrades runs the same resolver) leaves DCGM where it is pinned
    upgrade = _apt(node, "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout
    assert _versions(node) == dict((n, dcgm_rig.OLD) for n in dcgm_rig.NAMES), upgrade.stdout
    # the pin alone keeps it too (the candidate is the pinned version)
    subprocess.run(["dpkg", "--set-selections"], input="".join("%s install\n" % n for n in dcgm_rig.NAMES),
                   universal_newlines=True, env=dict(os.environ, **node.env), check=True)
    assert _apt(node, "upgrade").returncode == 0 and _versions(node)[dcgm_rig.NAMES[0]] == dcgm_rig.OLD
    os.remove(pin)
    restored = run_main(dcgm_host_engine.main, args)
    assert restored["changed"] is True and not restored.get("failed"), restored
    assert restored["hold"] == list(dcgm_rig.NAMES) and restored["pin"]["changed"] is True
    assert restored["service"] == [] and [p["action"] for p in restored["packages"]] == ["none", "none"]
    assert "package %s is not held (dpkg selection install)" % dcgm_rig.NAMES[0] in restored["reasons"]
    assert _selections(node) == dict((n, "hold") for n in dcgm_rig.NAMES) and os.path.exists(pin)

    # a new pin: upgraded from the repository (held packages are changed on purpose), pinned and held again
    up = run_main(dcgm_host_engine.main, dict(args, version=dcgm_rig.NEW))
    assert [p["action"] for p in up["packages"]] == ["upgrade", "upgrade"] and not up.get("failed"), up
    assert up["service"] == ["daemon-reload", "restart"]
    assert _versions(node) == dict((n, dcgm_rig.NEW) for n in dcgm_rig.NAMES)
    assert _selections(node) == dict((n, "hold") for n in dcgm_rig.NAMES)
    with open(pin) as handle:
        assert "Pin: version %s\n" % dcgm_rig.NEW in handle.read()
    assert dcgm_rig.engine_running(node.path) == "version=4.5.2 port=5555"

    # absent: the held packages are removed (apt-get refuses that unless told) and the pin with them
    gone = run_main(dcgm_host_engine.main, dict(args, state="absent"))
    assert gone["changed"] is True and not gone.get("failed"), gone.get("msg")
    assert _versions(node) == {} and not os.path.exists(pin) and dcgm_rig.engine_running(node.path) is None
    assert run_main(dcgm_host_engine.main, dict(args, state="absent"))["changed"] is False


def test_hold_false_installs_without_pin_or_hold(node, debs, keyring, tmp_path):
    dcgm_rig.repository(tmp_path / "repo", list(debs[dcgm_rig.NEW].values()), keyring, node)
    args = dict(version=dcgm_rig.NEW, package_manager="apt", systemctl=[SYSTEMCTL], hold=False)
    out = run_main(dcgm_host_engine.main, args)
    assert out["changed"] is True and not out.get("failed") and out["hold"] == [], out
    assert _selections(node) == dict((n, "install") for n in dcgm_rig.NAMES)
    assert not os.path.exists(os.path.join(node.path, "etc", "apt", "preferences.d", "nvidia-dcgm-gpuops"))
    assert run_main(dcgm_host_engine.main, args)["changed"] is False


def test_a_version_the_repository_does_not_have_fails_with_apts_words(node, debs, keyring, tmp_path):
    dcgm_rig.repository(tmp_path / "repo", list(debs[dcgm_rig.NEW].values()), keyring, node)
    out = run_main(dcgm_host_engine.main, dict(version="1:4.9.9-1", package_manager="apt", systemctl=[SYSTEMCTL]))
    assert out.get("failed") and "could not install DCGM 1:4.9.9-1" in out["msg"], out
    # apt resolves before dpkg changes anything: the failure says so, and reports no change
    assert out["changed"] is False and "DCGM's packages are as they were" in out["msg"], out
    assert "Version '1:4.9.9-1' for 'datacenter-gpu-manager-4-core' was not found" in out["msg"], out["msg"]
    assert _versions(node) == {}
    assert not os.path.exists(os.path.join(node.path, "etc", "apt", "preferences.d", "nvidia-dcgm-gpuops"))


# ----------------------------------------------------------------------------------------------- the dnf path
@pytest.fixture
def rhel(tmp_path, monkeypatch):
    """A RHEL-family node: rpm and dnf (the stand-ins) first on PATH, its files under a scratch root. Returns the
    stand-in's state file."""
    bindir = rpm_dnf_standin.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    root = tmp_path / "rhel"
    root.mkdir()
    monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", str(root))
    monkeypatch.setenv("GPUOPS_NODE_LOCK", str(tmp_path / "node.lock"))
    monkeypatch.delenv("FAKE_SYSTEMD_STATE", raising=False)
    state = tmp_path / "rpm.json"
    state.write_text(json.dumps(dcgm_rig.rpm_state([dcgm_rig.OLD, dcgm_rig.NEW])))
    monkeypatch.setenv("GPUOPS_RPM_STANDIN", str(state))
    return state


def _rpm(state):
    return json.loads(state.read_text())


def test_the_dnf_path_check_apply_again_upgrade_downgrade_and_absent(rhel):
    args = dict(version=dcgm_rig.OLD, package_manager="dnf", systemctl=[SYSTEMCTL])
    check = run_main(dcgm_host_engine.main, args, check_mode=True, diff=True)
    assert check["changed"] is True and not check.get("failed"), check
    assert [p["action"] for p in check["packages"]] == ["install", "install"]
    assert check["hold"] == [] and check["pin"] == {"path": None, "changed": False}   # dnf holds nothing
    assert "pin" not in check["diff"]["after"]
    state = _rpm(rhel)
    assert state["installed"] == {} and not any(c[0] == "dnf" for c in state["calls"])
    assert state["calls"][0] == ["rpm", "-q", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"] + list(dcgm_rig.NAMES)

    applied = run_main(dcgm_host_engine.main, args)
    assert applied["changed"] is True and not applied.get("failed"), applied.get("msg")
    state = _rpm(rhel)
    assert ["dnf", "install", "-y"] + ["%s-%s" % (n, dcgm_rig.OLD) for n in dcgm_rig.NAMES] in state["calls"]
    assert state["installed"] == dict((n, dcgm_rig.OLD) for n in dcgm_rig.NAMES)
    assert applied["host_engine"]["active"] and dcgm_rig.engine_running(os.environ["GPUOPS_SIMULATED_ROOT"]) == \
        "version=4.4.2 port=5555"
    assert run_main(dcgm_host_engine.main, args)["changed"] is False

    up = run_main(dcgm_host_engine.main, dict(args, version=dcgm_rig.NEW))
    assert [p["action"] for p in up["packages"]] == ["upgrade", "upgrade"], up
    assert up["service"] == ["daemon-reload", "restart"], up
    assert _rpm(rhel)["installed"] == dict((n, dcgm_rig.NEW) for n in dcgm_rig.NAMES)
    refused = run_main(dcgm_host_engine.main, args)
    assert refused.get("failed") and "downgrade is refused unless allowed" in refused["msg"], refused
    assert _rpm(rhel)["installed"] == dict((n, dcgm_rig.NEW) for n in dcgm_rig.NAMES)

    gone = run_main(dcgm_host_engine.main, dict(args, state="absent"))
    assert gone["changed"] is True and not gone.get("failed"), gone.get("msg")
    assert ["dnf", "remove", "-y"] + list(dcgm_rig.NAMES) in _rpm(rhel)["calls"] and _rpm(rhel)["installed"] == {}
    assert run_main(dcgm_host_engine.main, dict(args, state="absent"))["changed"] is False


def test_the_dnf_path_from_package_files(rhel, tmp_path):
    """Package files on a dnf node are read with rpm -qp before anything is installed: one at another version
    installs nothing; the right ones install in one dnf transaction."""
    def package(name, version):
        path = tmp_path / ("%s-%s.x86_64.rpm" % (name, version.split(":", 1)[-1]))
        path.write_text(json.dumps({"name": name, "evr": version}))
        return str(path)
    good = [package(n, dcgm_rig.NEW) for n in dcgm_rig.NAMES]
    args = dict(version=dcgm_rig.NEW, package_manager="dnf", systemctl=[SYSTEMCTL], package_files=good)
    older = package(dcgm_rig.NAMES[1], dcgm_rig.OLD)
    wrong = run_main(dcgm_host_engine.main, dict(args, package_files=[good[0], older]))
    assert wrong.get("failed") and wrong["changed"] is False, wrong
    assert "datacenter-gpu-manager-4-cuda12 at %s, declared %s" % (dcgm_rig.OLD, dcgm_rig.NEW) in wrong["msg"]
    assert _rpm(rhel)["installed"] == {}
    assert [c[:4] for c in _rpm(rhel)["calls"] if c[1] == "-qp"][0] == ["rpm", "-qp", "--nosignature", "--qf"]
    applied = run_main(dcgm_host_engine.main, args)
    assert applied["changed"] is True and not applied.get("failed"), applied.get("msg")
    assert ["dnf", "install", "-y"] + good in _rpm(rhel)["calls"]
    assert _rpm(rhel)["installed"] == dict((n, dcgm_rig.NEW) for n in dcgm_rig.NAMES)
    assert run_main(dcgm_host_engine.main, args)["changed"] is False
