"""The session's shared AnsiballZ cache (tests/support/compile_cache/gpuops_shared_ansiballz.py): a second ansible run
reads the payload the first one built, a run against another copy of the collection builds its own, and each
ansible-core version has its own folder."""
import os
import subprocess
import sys

from tests.support import ansible_run

PING = "ansible.modules.ping-ZIP_DEFLATED-none"


def _probe(env):
    """A Python process started as the tests start ansible: after ansible.constants is imported, what is its run's
    ansiballz_cache (a link's target, or None)."""
    script = ("import os; from ansible import constants as C; p = os.path.join(C.DEFAULT_LOCAL_TMP, 'ansiballz_cache');"
              " print(os.path.realpath(p) if os.path.islink(p) else None)")
    out = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=True)
    return out.stdout.strip()


def _env(tmp_path, **extra):
    env = ansible_run.ansible_env(dict({"GPUOPS_TEST_ANSIBALLZ_CACHE": str(tmp_path / "shared"),
                                        "GPUOPS_TEST_ANSIBALLZ_COLLECTIONS": os.path.join(ansible_run.ROOT,
                                                                                          ".collections"),
                                        "HOME": str(tmp_path / "home")}, **extra))
    return env


def test_the_session_names_the_cache_for_this_checkouts_collection():
    # tests/conftest.py's session fixture, and what ansible_env gives every run
    assert os.environ["GPUOPS_TEST_ANSIBALLZ_COLLECTIONS"] == ansible_run.ansible_env()["ANSIBLE_COLLECTIONS_PATH"]
    assert os.environ["GPUOPS_TEST_ANSIBALLZ_CACHE"].endswith("ansiballz-cache")


def test_a_run_links_its_ansiballz_cache_to_its_cores_folder_of_the_shared_one(tmp_path):
    from ansible.release import __version__   # pylint: disable=import-outside-toplevel
    linked = _probe(_env(tmp_path))
    assert linked == os.path.realpath(str(tmp_path / "shared" / ("ansible-core-%s-py%d.%d" % (
        (__version__,) + sys.version_info[:2]))))


def test_another_collection_path_or_no_cache_named_or_the_compile_cache_off_keeps_the_runs_own(tmp_path):
    assert _probe(_env(tmp_path, ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "artifact"))) == "None"
    assert _probe(_env(tmp_path, GPUOPS_TEST_ANSIBALLZ_CACHE="")) == "None"
    # the hook is loaded by the compile cache's sitecustomize: without that on PYTHONPATH, nothing is shared
    assert _probe(_env(tmp_path, GPUOPS_TEST_COMPILE_CACHE="off")) == "None"
    assert not (tmp_path / "shared").exists()


def test_a_second_run_reads_the_payload_the_first_built_and_a_run_ends_without_removing_it(tmp_path):
    env = _env(tmp_path)
    folder = _probe(env)

    def ping():
        proc = subprocess.run([os.path.join(ansible_run.BIN, "ansible"), "localhost", "-m", "ping", "-e",
                               "ansible_python_interpreter=%s" % sys.executable], cwd=ansible_run.ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return os.stat(os.path.join(folder, PING))

    first = ping()
    # the run removed its own temporary folder (the link in it), not the shared payload
    again = ping()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
