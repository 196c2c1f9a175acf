"""DCGM's planner (plan/_dcgm_plan): the package names per CUDA major, the plan from the package database and the
unit's state (install, upgrade, refuse a downgrade, enable, start, restart after an upgrade, remove), and the property
that applying the plan's answer leaves nothing to change (idempotency of the plan itself)."""
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _dcgm_node
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_plan as dp

NAMES = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]
V = "1:4.5.2-1"
UP = {"enabled": True, "active": True, "known": True}
DOWN = {"enabled": False, "active": False, "known": True}
NONE = {"enabled": False, "active": False, "known": False}


def _installed(version):
    return dict((n, {"version": version, "held": False, "status": "install ok installed"}) for n in NAMES)


def test_package_names_per_cuda_major():
    assert dp.package_names(12) == NAMES
    assert dp.package_names(13, proprietary=True) == [
        "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary",
        "datacenter-gpu-manager-4-proprietary-cuda13"]
    with pytest.raises(dp.DcgmPlanError, match="one of 12, 13; got 11"):
        dp.package_names(11)


def test_a_fresh_node_installs_enables_and_starts():
    todo = dp.plan("present", "apt", NAMES, V, {}, NONE)
    assert [p["action"] for p in todo["packages"]] == ["install", "install"]
    assert todo["service"] == ["daemon-reload", "enable", "start"]
    assert todo["reasons"] == ["package %s is not installed, declared %s" % (n, V) for n in NAMES]


def test_a_converged_node_has_nothing_to_do():
    assert dp.plan("present", "apt", NAMES, V, _installed(V), UP) == {
        "packages": [{"name": n, "installed": V, "version": V, "action": "none"} for n in NAMES],
        "service": [], "hold": [], "pin": None, "reasons": []}
    held = dict((n, dict(e, held=True, status="hold ok installed")) for n, e in _installed(V).items())
    assert dp.plan("present", "apt", NAMES, V, held, UP, hold=True, pin=dp.pin_text(NAMES, V))["reasons"] == []


def test_apt_holds_the_pin_twice_over_and_dnf_holds_nothing():
    """On apt: a preferences pin at the version and a dpkg hold, planned for a fresh install, for an installed node
    that lacks them, and again for an upgrade (the pin moves with the version); never on dnf."""
    fresh = dp.plan("present", "apt", NAMES, V, {}, NONE, hold=True)
    assert fresh["hold"] == NAMES and fresh["pin"] == dp.pin_text(NAMES, V)
    assert "Package: %s\nPin: version %s\nPin-Priority: 990\n" % (" ".join(NAMES), V) in fresh["pin"]
    assert "the apt preferences pin nvidia-dcgm-gpuops is missing" in fresh["reasons"]

    unheld = dp.plan("present", "apt", NAMES, V, _installed(V), UP, hold=True, pin=dp.pin_text(NAMES, V))
    assert unheld["hold"] == NAMES and unheld["pin"] is None and unheld["service"] == []
    assert unheld["reasons"] == ["package %s is not held (dpkg selection install)" % n for n in NAMES]

    old = dict((n, dict(e, held=True)) for n, e in _installed("1:4.4.2-1").items())
    up = dp.plan("present", "apt", NAMES, V, old, UP, hold=True, pin=dp.pin_text(NAMES, "1:4.4.2-1"))
    assert up["hold"] == NAMES and up["pin"] == dp.pin_text(NAMES, V)
    assert "the apt preferences pin nvidia-dcgm-gpuops does not pin DCGM's packages at %s" % V in up["reasons"]

    dnf = dp.plan("present", "dnf", NAMES, "4.5.2-1", {}, NONE, hold=True)
    assert dnf["hold"] == [] and dnf["pin"] is None
    loose = dp.plan("present", "apt", NAMES, V, _installed(V), UP, hold=False, pin=None)
    assert loose["reasons"] == [] and loose["hold"] == [] and loose["pin"] is None


def test_a_stopped_or_disabled_engine_is_started_and_enabled():
    todo = dp.plan("present", "apt", NAMES, V, _installed(V), DOWN)
    assert todo["service"] == ["enable", "start"]
    assert todo["reasons"] == ["the host engine is not enabled", "the host engine is not running"]
    todo = dp.plan("present", "apt", NAMES, V, _installed(V), dict(UP, active=False))
    assert todo["service"] == ["start"] and todo["reasons"] == ["the host engine is not running"]


def test_an_upgrade_restarts_the_running_engine_and_a_downgrade_is_refused_unless_allowed():
    todo = dp.plan("present", "apt", NAMES, V, _installed("1:4.4.2-1"), UP)
    assert [p["action"] for p in todo["packages"]] == ["upgrade", "upgrade"]
    assert todo["service"] == ["daemon-reload", "restart"]
    with pytest.raises(dp.DcgmPlanError, match=r"downgrade is refused unless allowed \(allow_downgrade: true\)"):
        dp.plan("present", "apt", NAMES, "1:4.4.2-1", _installed(V), UP)
    allowed = dp.plan("present", "apt", NAMES, "1:4.4.2-1", _installed(V), UP, allow_downgrade=True)
    assert [p["action"] for p in allowed["packages"]] == ["downgrade", "downgrade"]


def test_absent_stops_disables_and_removes_only_what_is_there():
    todo = dp.plan("absent", "apt", NAMES, V, dict(_installed(V), **{NAMES[1]: {"version": None}}), UP)
    assert todo["service"] == ["stop", "disable"]
    assert [p["action"] for p in todo["packages"]] == ["remove", "none"]
    assert dp.plan("absent", "apt", NAMES, V, {}, NONE)["reasons"] == []
    # the pin goes with the packages ("": remove the file)
    pinned = dp.plan("absent", "apt", NAMES, V, {}, NONE, hold=True, pin=dp.pin_text(NAMES, V))
    assert pinned["pin"] == "" and pinned["reasons"] == ["the apt preferences pin nvidia-dcgm-gpuops is there (state absent)"]


def test_the_commands_are_argument_lists_with_the_pin():
    assert dp.install_command("apt", NAMES, V, [], False)[-2:] == ["%s=%s" % (n, V) for n in NAMES]
    assert "--allow-downgrades" in dp.install_command("apt", NAMES, V, [], True)
    assert dp.install_command("apt", NAMES, V, ["/x/a.deb"], False)[-1] == "/x/a.deb"
    assert dp.install_command("dnf", NAMES, "4.5.2-1", [], False) == [
        "dnf", "install", "-y", "datacenter-gpu-manager-4-core-4.5.2-1", "datacenter-gpu-manager-4-cuda12-4.5.2-1"]
    # held packages are removed too (apt-get refuses to change a held package unless told)
    assert dp.remove_command("apt", NAMES) == ["apt-get", "remove", "-y", "-q", "--allow-change-held-packages"] + NAMES


def test_the_package_manager_is_resolved_from_the_node_tools():
    assert dp.resolve_manager("auto", {"dpkg-query": True, "apt-get": True}) == "apt"
    assert dp.resolve_manager("auto", {"rpm": True, "dnf": True}) == "dnf"
    assert dp.resolve_manager("dnf", {}) == "dnf"
    with pytest.raises(dp.DcgmPlanError, match="neither apt .* nor dnf"):
        dp.resolve_manager("auto", {"rpm": True})


@pytest.mark.parametrize("params, words", [
    ({"version": "latest"}, "version 'latest' is not a package version"),
    ({"version": ""}, "is not a package version"),
    ({"cuda": 11}, "one of 12, 13; got 11"),
    ({"service": "nvidia-dcgm"}, "is not a systemd service name (like nvidia-dcgm.service)"),
    ({"service": "a b.service"}, "is not a systemd service name"),
    ({"state": "running"}, "state must be one of present, absent"),
    ({"package_files": ["relative.deb"]}, "must be an absolute path on the node"),
    ({"systemctl": [""]}, "systemctl must be an argument list naming the systemctl program first"),
    ({"systemctl": ["/usr/bin/systemctl", ""]}, "like [/usr/bin/systemctl]"),
    ({"package_files": ["/x/datacenter-gpu-manager-4-core_1:4.5.2-1_amd64.deb"]}, "must not contain a colon"),
])
def test_bad_input_says_what_is_wrong_and_what_is_valid(params, words):
    base = {"state": "present", "version": V, "cuda": 12, "service": "nvidia-dcgm.service", "package_files": []}
    assert dp.validate(base) == []
    errors = dp.validate(dict(base, **params))
    assert len(errors) == 1 and words in errors[0], errors


def _systemctl(enabled_rc, enabled_out, active_rc):
    """A run() answering is-enabled and is-active as systemctl does."""
    def run(argv):
        if argv[1] == "is-enabled":
            return enabled_rc, enabled_out, "" if enabled_out else "Failed to get unit file state"
        return active_rc, "active\n" if active_rc == 0 else "inactive\n", ""
    return run


def test_the_unit_state_as_systemctl_answers():
    unit_state = _dcgm_node.unit_state
    assert unit_state(_systemctl(0, "enabled\n", 0), ["systemctl"], "nvidia-dcgm.service") == UP
    assert unit_state(_systemctl(1, "disabled\n", 3), ["systemctl"], "nvidia-dcgm.service") == DOWN
    # no such unit file: a package has not installed it yet
    assert unit_state(_systemctl(1, "", 3), ["systemctl"], "nvidia-dcgm.service") == NONE
    assert unit_state(None, None, "nvidia-dcgm.service") == NONE      # no systemctl


VERSIONS = st.sampled_from([None, "1:4.4.2-1", V, "1:4.6.0-1"])
UNITS = st.fixed_dictionaries({"enabled": st.booleans(), "active": st.booleans(), "known": st.booleans()})


@settings(max_examples=200, deadline=None)
@given(st.lists(VERSIONS, min_size=2, max_size=2), UNITS, st.sampled_from(["present", "absent"]),
       st.lists(st.booleans(), min_size=2, max_size=2), st.booleans(),
       st.sampled_from([None, "", dp.pin_text(NAMES, V), dp.pin_text(NAMES, "1:4.4.2-1")]))
def test_applying_the_plan_leaves_nothing_to_do(versions, unit, state, held, hold, pin):
    """Whatever the node holds (versions, dpkg holds, a pin file), the state the plan's actions lead to plans nothing
    more (or the plan refused)."""
    installed = dict((n, {"version": v, "held": h and v is not None, "status": "x"})
                     for n, v, h in zip(NAMES, versions, held))
    if unit["enabled"] or unit["active"]:
        unit = dict(unit, known=True)
    try:
        todo = dp.plan(state, "apt", NAMES, V, installed, unit, hold=hold, pin=pin)
    except dp.DcgmPlanError:
        assert state == "present" and any(v == "1:4.6.0-1" for v in versions)
        return
    after_packages = dict((p["name"], {"version": p["version"] if state == "present" else None,
                                       "held": installed[p["name"]]["held"] and state == "present"}
                           if p["action"] != "none" else dict(installed[p["name"]])) for p in todo["packages"])
    for name in todo["hold"]:
        after_packages[name]["held"] = True
    after_pin = pin if todo["pin"] is None else (todo["pin"] or None)
    verbs = todo["service"]
    after_unit = {"known": unit["known"] or state == "present" and any(p["action"] != "none" for p in todo["packages"]),
                  "enabled": (unit["enabled"] or "enable" in verbs) and "disable" not in verbs,
                  "active": (unit["active"] or "start" in verbs or "restart" in verbs) and "stop" not in verbs}
    if state == "present" and not after_unit["known"]:
        assert todo["reasons"], todo      # installed packages without their unit: reported, never "converged"
        return
    assert dp.plan(state, "apt", NAMES, V, after_packages, after_unit, hold=hold, pin=after_pin)["reasons"] == []


def test_package_files_are_checked_before_anything_is_installed():
    files = {"/f/core.deb": (NAMES[0], V), "/f/cuda12.deb": (NAMES[1], V)}
    assert dp.files_problems("apt", NAMES, V, files) == []
    assert dp.files_problems("apt", NAMES, V, {"/f/core.deb": (NAMES[0], V)}) == [
        "no package file holds datacenter-gpu-manager-4-cuda12"]
    assert dp.files_problems("apt", NAMES, V, dict(files, **{"/f/cuda12.deb": (NAMES[1], "1:4.4.2-1")})) == [
        "/f/cuda12.deb holds datacenter-gpu-manager-4-cuda12 at 1:4.4.2-1, declared 1:4.5.2-1"]
    assert dp.files_problems("apt", NAMES, V, dict(files, **{"/f/x.deb": ("curl", "8.0")})) == [
        "/f/x.deb holds curl, which is not one of DCGM's declared packages (%s)" % ", ".join(NAMES)]
    assert dp.files_problems("apt", NAMES, V, dict(files, **{"/f/x.deb": "is not a package file (dpkg-deb: x)"})) == [
        "/f/x.deb: is not a package file (dpkg-deb: x)"]
