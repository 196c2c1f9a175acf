"""scripts/compat.py (`make compat`, issue 27): which lab and molecule output fails a version, and the tested range
kept the same in meta/runtime.yml, the roles' meta and the requirements-compat-<version>.txt files."""
import glob
import importlib.util
import os
import re
import signal
import sys
import threading
import time

import pytest

import yaml

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("compat", os.path.join(ROOT, "scripts", "compat.py"))
compat = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compat)

HOSTS = ["lab-dgx-a100", "lab-hgx-b200", "lab-hgx-h200"]
# The recaps of the lab's converge and re-run on ansible-core 2.16.19 (Python 3.10).
CONVERGE = """PLAY RECAP *********************************************************************
lab-dgx-a100               : ok=40   changed=9    unreachable=0    failed=0    skipped=24   rescued=0    ignored=0
lab-hgx-b200               : ok=39   changed=9    unreachable=0    failed=0    skipped=24   rescued=0    ignored=0
lab-hgx-h200               : ok=24   changed=5    unreachable=0    failed=0    skipped=21   rescued=0    ignored=0
"""
RERUN = """PLAY RECAP *********************************************************************
lab-dgx-a100               : ok=12   changed=0    unreachable=0    failed=0    skipped=16   rescued=0    ignored=0
lab-hgx-b200               : ok=11   changed=0    unreachable=0    failed=0    skipped=16   rescued=0    ignored=0
lab-hgx-h200               : ok=10   changed=0    unreachable=0    failed=0    skipped=17   rescued=0    ignored=0
"""
MOLECULE_OK = """INFO     [default > idempotence] Executed: Successful
DETAILS
default > cleanup: Executed: Successful
default > syntax: Executed: Successful
default > converge: Executed: Successful
default > idempotence: Executed: Successful
default > verify: Executed: Successful
default > cleanup: Executed: Successful

SCENARIO RECAP
default                   : actions=6  successful=6  disabled=0  skipped=0  missing=0  failed=0
"""


def _oldest_newest():
    found = sorted(compat.versions(), key=lambda v: tuple(int(p) for p in v.split(".")))
    return found[0], found[-1]


def test_lab_hosts_are_the_inventorys_nodes():
    assert compat.lab_hosts() == HOSTS


def test_a_converge_and_an_unchanged_rerun_pass():
    assert compat.run_problems("converge", CONVERGE, 0, HOSTS, rerun=False) == []
    assert compat.run_problems("re-run", RERUN, 0, HOSTS, rerun=True) == []


def test_a_rerun_that_changes_one_node_fails_naming_it():
    rerun = RERUN.replace("ok=10   changed=0", "ok=10   changed=1")
    assert compat.run_problems("re-run", rerun, 0, HOSTS, rerun=True) == [
        "re-run: lab-hgx-h200 changed=1 (a re-run must change nothing)"]


def test_a_failed_or_missing_node_or_a_bad_status_fails():
    failed = CONVERGE.replace("changed=9    unreachable=0    failed=0", "changed=8    unreachable=0    failed=1", 1)
    assert compat.run_problems("converge", failed, 2, HOSTS, rerun=False) == [
        "converge: ansible-playbook exited with status 2", "converge: lab-dgx-a100 failed=1 unreachable=0"]
    missing = "\n".join(line for line in CONVERGE.splitlines() if not line.startswith("lab-hgx-b200"))
    assert compat.run_problems("converge", missing, 0, HOSTS, rerun=False) == [
        "converge: lab-hgx-b200 is not in the PLAY RECAP"]
    assert compat.run_problems("converge", "ERROR! the playbook could not be read", 4, HOSTS, rerun=False)[1:] == [
        "converge: %s is not in the PLAY RECAP" % host for host in HOSTS]


def test_a_first_run_that_changes_nothing_fails():
    """From scratch every lab node has work: a converge that changes nothing did not run the roles."""
    assert compat.run_problems("converge", RERUN, 0, HOSTS, rerun=False) == [
        "converge: %s changed=0 on a first run from scratch (nothing was converged)" % host for host in HOSTS]


def test_molecule_passes_only_with_every_action_and_idempotence_successful():
    assert compat.molecule_problems(MOLECULE_OK, 0) == []
    failed = MOLECULE_OK.replace("idempotence: Executed: Successful", "idempotence: Executed: Failed").replace(
        "successful=6  disabled=0  skipped=0  missing=0  failed=0", "successful=3  disabled=0  skipped=0  missing=0  failed=1")
    assert compat.molecule_problems(failed, 1) == [
        "molecule exited with status 1", "molecule: 6 actions, 3 successful, 1 failed",
        "molecule: the idempotence step did not succeed"]
    assert "molecule printed no recap of the default scenario" in compat.molecule_problems("Traceback ...", 1)


def test_every_compat_version_pins_its_ansible_core_and_names_its_python():
    found = compat.versions()
    assert len(found) >= 2, found
    for version, (path, python) in found.items():
        with open(path) as handle:
            text = handle.read()
        assert re.search(r"^ansible-core==%s\.\d+$" % re.escape(version), text, re.M), path
        assert python and re.match(r"^3\.\d+$", python), path


def test_the_tested_range_is_requires_ansible_and_the_roles_minimum():
    """The oldest compat version is requires_ansible's lower bound and every role's min_ansible_version; the main
    version (requirements-lab.txt) lies between the oldest and the newest."""
    oldest, newest = _oldest_newest()
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        requires = yaml.safe_load(handle)["requires_ansible"]
    assert requires == ">=%s.0" % oldest, requires
    for meta in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "main.yml"))):
        with open(meta) as handle:
            assert yaml.safe_load(handle)["galaxy_info"]["min_ansible_version"] == oldest, meta
    with open(os.path.join(ROOT, "requirements-lab.txt")) as handle:
        main = re.search(r"^ansible-core>=(\d+\.\d+),<", handle.read(), re.M).group(1)

    def key(version):
        return tuple(int(p) for p in version.split("."))
    assert key(oldest) < key(main) < key(newest), (oldest, main, newest)


def test_an_unknown_version_or_step_is_refused(capsys):
    try:
        compat.main(["2.99", "--steps", "lab,dance"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("compat.main accepted an unknown version and step")
    assert "unknown: 2.99, dance" in capsys.readouterr().err


def test_the_playbook_steps_run_with_the_tests_compile_cache_and_sanity_without(monkeypatch, tmp_path):
    from tests.support import ansible_run
    monkeypatch.setattr(compat, "BUILD", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv("GPUOPS_TEST_COMPILE_CACHE", raising=False)
    version = compat.Version("2.16")
    env = version.playbook_env()
    assert env["PYTHONPATH"].split(os.pathsep) == [ansible_run.COMPILE_CACHE_PATH, "/elsewhere"]
    assert env["GPUOPS_TEST_COMPILE_CACHE"] == ansible_run.COMPILE_CACHE
    assert os.path.isfile(os.path.join(ansible_run.COMPILE_CACHE_PATH, "sitecustomize.py"))
    assert "GPUOPS_TEST_COMPILE_CACHE" not in version.env() and version.env()["PYTHONPATH"] == "/elsewhere"


def _gone(pid):
    """The process is gone (or a zombie waiting for its reaper)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _wait_for(predicate, what):
    """Until ``predicate()`` holds: a condition the test waits on, its verdict not a matter of time (120 s only so
    that a broken run ends)."""
    limit = time.monotonic() + 120
    while not predicate():
        assert time.monotonic() < limit, "never happened: " + what
        time.sleep(0.05)


def test_a_step_past_the_deadline_is_stopped_with_its_whole_process_group(monkeypatch, tmp_path):
    """The stop is placed where the test chooses: once the step's child has started a grandchild (as sanity.sh starts
    ansible-test, and it pylint), the deadline is moved into the past. Both are stopped, the step reports status -1
    and keeps what it printed (a TimeoutExpired's partial output is bytes on POSIX: it once ended compat with a
    TypeError), and its log says why."""
    monkeypatch.setattr(compat, "BUILD", str(tmp_path))
    version = compat.Version("2.16", deadline=time.monotonic() + 3600)
    log, pidfile = str(tmp_path / "step.log"), tmp_path / "grandchild.pid"
    child = ("import subprocess, sys\n"
             "g = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(60)'])\n"
             "open(%r, 'w').write(str(g.pid))\n"
             "print('started', flush=True)\n"
             "g.wait()\n" % str(pidfile))
    result = {}
    runner = threading.Thread(target=lambda: result.update(
        out=version.call(log, [sys.executable, "-c", child], env=dict(os.environ))), daemon=True)
    runner.start()
    grandchild = None
    try:
        _wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the step's grandchild started")
        grandchild = int(pidfile.read_text())
        assert not _gone(grandchild)
        version.deadline = time.monotonic() - 1
        runner.join(120)
        assert not runner.is_alive(), "the step was not stopped"
        status, output = result["out"]
        assert status == -1 and "started" in output, output
        assert "(stopped with SIGTERM: compat's deadline passed" in output, output
        _wait_for(lambda: _gone(grandchild), "the grandchild stopped with its group")
        with open(log) as handle:
            assert "compat's deadline passed" in handle.read()
    finally:
        # a failed run must not leave the grandchild behind, nor a thread that holds pytest at its exit
        version.deadline = time.monotonic() - 1
        if grandchild and not _gone(grandchild):
            os.kill(grandchild, signal.SIGKILL)
        runner.join(10)


def test_a_step_that_ends_in_time_keeps_its_status_and_output(monkeypatch, tmp_path):
    monkeypatch.setattr(compat, "BUILD", str(tmp_path))
    version = compat.Version("2.16")
    status, output = version.call(str(tmp_path / "step.log"), [sys.executable, "-c", "print('done'); raise SystemExit(3)"],
                                  env=dict(os.environ))
    assert (status, output) == (3, "done\n")


def test_a_deadline_that_is_not_positive_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        compat.main(["2.16", "--deadline", "0"])
    assert exc.value.code == 2
    assert "--deadline must be a positive number of seconds, not 0" in capsys.readouterr().err
