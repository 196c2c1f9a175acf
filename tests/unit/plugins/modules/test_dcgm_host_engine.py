"""dcgm_host_engine in-process, with Debian's real apt-get and dpkg installing package files shaped like DCGM 4's
(tests/support/dcgm_rig.py, NOT NVIDIA's) into a throwaway root, and the systemctl stand-in running the packaged unit:
check mode reports and changes nothing, apply installs, enables and starts the host engine, apply again changes
nothing; a newer version upgrades and restarts it; a downgrade is refused; absent stops it and removes the packages;
bad input changes nothing."""
import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import dcgm_host_engine

from tests.support import apt_rig, dcgm_rig, driver_rig
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
