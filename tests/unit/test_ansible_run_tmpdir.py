"""The tests' ansible commands keep their temporary files in the session's folder (tests/support/ansible_run.py,
ansible_env; tests/conftest.py names it), not in the machine's /tmp: what a killed module leaves there (AnsiballZ's
payload folder) stays out of the /tmp of the machine where CI runs next."""
import os
import sys

from tests.support.ansible_run import SESSION_TMPDIR, ansible_env, run_module
from tests.support.converged_lab import session_root


def test_the_session_names_a_folder_under_pytests_own(tmp_path_factory):
    named = os.environ.get(SESSION_TMPDIR)
    assert named, "tests/conftest.py names %s for the session" % SESSION_TMPDIR
    assert os.path.dirname(named) == str(session_root(tmp_path_factory)), named


def test_ansible_commands_get_the_named_folder_and_a_callers_own_is_kept(tmp_path, monkeypatch):
    folder = tmp_path / "session-tmp"
    monkeypatch.setenv(SESSION_TMPDIR, str(folder))
    monkeypatch.setenv("TMPDIR", "/tmp")
    env = ansible_env()
    assert env["TMPDIR"] == str(folder) and folder.is_dir()
    assert ansible_env({"TMPDIR": str(tmp_path / "own")})["TMPDIR"] == str(tmp_path / "own")
    monkeypatch.delenv(SESSION_TMPDIR)
    assert ansible_env()["TMPDIR"] == "/tmp"


def test_a_module_run_sees_the_folder(tmp_path, monkeypatch):
    folder = tmp_path / "session-tmp"
    monkeypatch.setenv(SESSION_TMPDIR, str(folder))
    result, proc = run_module("ansible.builtin.command",
                              "%s -c 'import tempfile; print(tempfile.gettempdir())'" % sys.executable)
    assert result.get("rc") == 0, (result, proc.stderr[-2000:])
    assert result["stdout"].strip() == str(folder), result
