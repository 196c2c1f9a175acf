"""The tests' warm interpreter for module runs (tests/support/compile_cache/gpuops_module_server.py): a script handed to
it behaves as in a Python of its own (output, exit status, a signal, the environment, directory, umask, argv, path,
atexit); a run whose starter is killed is killed; another ansible-core's payload, another interpreter's start-up and
the CPU reading's runs are not taken; the server's CPU seconds are read while it runs."""
import base64
import io
import os
import signal
import subprocess
import sys
import zipfile

import pytest

from tests.support import ansible_run
from tests.support.compile_cache import gpuops_module_server as module_server
from tests.support.stop_points import BOUND_S, wait_gone

pytestmark = pytest.mark.skipif(not module_server.available(), reason="needs Linux's pidfd_open")

SCRIPT = r"""
import atexit, json, os, sys, tempfile, time
atexit.register(lambda: sys.stdout.write("atexit ran\n"))
umask = os.umask(0); os.umask(umask)
print(json.dumps({"tz": time.tzname, "tmp": tempfile.gettempdir(), "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "umask": umask,
                  "marker": os.environ.get("GPUOPS_TEST_MARKER"), "main": __name__, "file": __file__,
                  "in_path": "/elsewhere/lib" in sys.path, "fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}))
sys.stderr.write("to stderr\n")
sys.exit(int(os.environ.get("GPUOPS_TEST_EXIT", "0")))
"""


@pytest.fixture
def server(tmp_path):
    env = _env()
    started = module_server.Started(str(tmp_path / "ms"), env)
    os.makedirs(started.directory)
    assert started.ready(), "the module server did not start"
    yield started
    started.stop()


def _env(**extra):
    env = ansible_run.with_compile_cache(dict(os.environ, PYTHONPATH="/elsewhere/lib"))
    env.pop(module_server.VARIABLE, None)
    env.pop("GPUOPS_TEST_TASK_CPU", None)
    env.update(extra)
    return env


def _python(script, env, cwd, directory=None):
    if directory is not None:
        env = dict(env, **{module_server.VARIABLE: directory})
    return subprocess.run([sys.executable], input=script.encode(), env=env, cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=BOUND_S, check=False)


def _served(server, before):
    return module_server.server_cpu(server.path) > before


def test_a_script_runs_in_the_server_as_in_a_python_of_its_own(server, tmp_path):
    (tmp_path / "tmp").mkdir()
    env = _env(GPUOPS_TEST_MARKER="here", GPUOPS_TEST_EXIT="3", TZ="XYZ+3", TMPDIR=str(tmp_path / "tmp"))
    own = _python(SCRIPT, env, tmp_path)
    before = module_server.server_cpu(server.path)
    served = _python(SCRIPT, env, tmp_path, server.directory)
    assert _served(server, before)
    assert (served.returncode, served.stdout, served.stderr) == (own.returncode, own.stdout, own.stderr)
    assert own.returncode == 3 and b'"marker": "here"' in own.stdout and own.stdout.endswith(b"atexit ran\n")
    assert b'"argv": [""], "path0": ""' in own.stdout and b'"in_path": true' in own.stdout
    assert b'"tz": ["XYZ", "XYZ"]' in own.stdout and str(tmp_path / "tmp").encode() in own.stdout
    assert b'"fds": [0, 1, 2, 3]' in served.stdout        # the listing's own descriptor: nothing of the server's


def test_the_libraries_the_server_preloads_are_those_the_script_would_import(server, tmp_path):
    """PRELOAD's libraries (urllib3, yaml, ...: already imported when a run starts) are the files the script's own
    Python imports: the interpreter's site-packages and standard library, never another copy."""
    script = ("import importlib, json, sys\n"
              "names = %r\n"
              "found = {}\n"
              "for name in names:\n"
              "    try:\n"
              "        found[name] = getattr(importlib.import_module(name), '__file__', None)\n"
              "    except ImportError:\n"
              "        found[name] = None\n"
              "print(json.dumps(found, sort_keys=True))\n") % (list(module_server.PRELOAD),)
    env = _env()
    own = _python(script, env, tmp_path)
    served = _python(script, env, tmp_path, server.directory)
    assert own.returncode == served.returncode == 0, (own.stderr, served.stderr)
    assert served.stdout == own.stdout
    assert b'"urllib3": "' in own.stdout and b'"yaml": "' in own.stdout     # installed here: the preload is exercised


def test_the_run_ends_as_the_script_does(server, tmp_path):
    env = _env()
    for script, code, err in (("raise SystemExit('no way')", 1, b"no way\n"),
                              ("raise ValueError('bad')", 1, b"ValueError: bad\n"),
                              ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL, b""),
                              ("import sys; sys.exit(None)", 0, b"")):
        own = _python(script, env, tmp_path)
        served = _python(script, env, tmp_path, server.directory)
        assert (own.returncode, served.returncode) == (code, code), script
        assert own.stderr == served.stderr and own.stderr.endswith(err), (script, own.stderr, served.stderr)


def test_a_run_whose_starter_is_killed_is_killed(server, tmp_path):
    pid_file = tmp_path / "run.pid"
    script = "import os, signal; open(%r, 'w').write(str(os.getpid())); signal.pause()" % str(pid_file)
    env = dict(_env(), **{module_server.VARIABLE: server.directory})
    starter = subprocess.Popen([sys.executable], stdin=subprocess.PIPE, env=env, cwd=str(tmp_path))
    starter.stdin.write(script.encode())
    starter.stdin.close()
    run = wait_for_file(pid_file, starter)
    assert run != starter.pid                               # the script runs in the server's fork
    starter.kill()
    starter.wait()
    wait_gone([run])


def wait_for_file(path, starter):
    import time   # pylint: disable=import-outside-toplevel
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        assert starter.poll() is None, "the starter ended before the script wrote its pid"
        time.sleep(0.01)
    raise AssertionError("the script never wrote its pid")


def _wrapper(basic, *more):
    """A script shaped as AnsiballZ's wrapper, whose payload carries ``basic`` as ansible/module_utils/basic.py (and
    the files ``more`` names)."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as payload:
        payload.writestr("ansible/module_utils/basic.py", basic)
        for name in more:
            payload.writestr(name, "")
    return "\n".join(["_ANSIBALLZ_WRAPPER = True", "import os", "print(os.getppid())", "x = dict(",
                      "zip_data='%s'," % base64.b64encode(data.getvalue()).decode(), ")", ""])


def test_only_a_payload_of_the_same_ansible_core_is_taken(server, tmp_path):
    from ansible.module_utils import basic   # pylint: disable=import-outside-toplevel
    with open(basic.__file__, "rb") as handle:
        same = handle.read()
    env = _env()
    taken = _python(_wrapper(same), env, tmp_path, server.directory)
    declined = _python(_wrapper(same + b"\n# another ansible-core\n"), env, tmp_path, server.directory)
    legacy = _python(_wrapper(same, "ansible/legacy/__init__.py", "ansible/legacy/my_module.py"), env, tmp_path,
                     server.directory)
    lease = _python(_wrapper(same, *module_server.DECLINED_FILES), env, tmp_path, server.directory)
    assert taken.returncode == declined.returncode == legacy.returncode == lease.returncode == 0
    assert int(taken.stdout) == server.process.pid            # forked by the server
    # ran in the Python this test started
    assert int(declined.stdout) == int(legacy.stdout) == int(lease.stdout) == os.getpid()


def test_every_module_that_reads_its_own_ancestry_is_run_by_its_starter():
    """A module whose code walks its own parents (the lease's owner) would find the server's: the files that do are
    DECLINED_FILES, or import one of them (so their payloads carry it)."""
    root = os.path.join(ansible_run.ROOT, "plugins")
    declined = [os.path.basename(name)[:-3] for name in module_server.DECLINED_FILES]
    readers = []
    for folder, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as handle:
                    text = handle.read()
                if "getppid(" in text or "find_owner(" in text:
                    readers.append(name)
                    assert name[:-3] in declined or any(("import %s" % d) in text for d in declined), name
    assert sorted(readers) == ["_lease.py", "cluster_lease.py"]


def test_another_start_up_or_the_cpu_reading_finds_no_server(server, tmp_path):
    script = "import os; print(os.getppid())"
    assert int(_python(script, _env(), tmp_path, server.directory).stdout) == server.process.pid
    for other in (_env(PYTHONHASHSEED="7"), _env(GPUOPS_TEST_TASK_CPU=str(tmp_path / "cpu.tsv")),
                  _env(GPUOPS_TEST_COMPILE_CACHE="off")):
        assert int(_python(script, other, tmp_path, server.directory).stdout) == os.getpid()


def test_the_server_cpu_is_read_while_it_runs_and_is_its_parents_once_stopped(tmp_path):
    started = module_server.Started(str(tmp_path / "ms"), _env())
    os.makedirs(started.directory)
    assert started.ready()
    assert started in module_server._RUNNING   # pylint: disable=protected-access
    first = module_server.running_cpu()
    assert first > 0                             # its imports
    _python("sum(range(3000000))", _env(), tmp_path, started.directory)
    assert module_server.running_cpu() > first   # the run it reaped
    started.stop()
    assert started not in module_server._RUNNING   # pylint: disable=protected-access
    assert module_server.server_cpu(started.path) == 0.0


def test_a_server_whose_session_is_gone_ends(tmp_path):
    """A server left by a killed test session (its parent) ends on its own: none pile up on a developer's machine."""
    directory = str(tmp_path / "ms")
    os.makedirs(directory)
    here = os.path.dirname(os.path.abspath(module_server.__file__))
    # a parent that starts the server, says its PID and is then killed (no stop(): as a killed pytest worker)
    starts = ("import os, subprocess, sys; p = subprocess.Popen([sys.executable, %r, %r, str(os.getpid())]); "
              "print(p.pid, flush=True); import signal; signal.pause()") % (
                  os.path.join(here, "gpuops_module_server.py"), directory)
    parent = subprocess.Popen([sys.executable, "-c", starts], env=_env(), stdout=subprocess.PIPE)
    server = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    wait_gone([server])


def test_a_server_that_ends_during_a_run_fails_the_run_and_never_starts_it_twice(server, tmp_path):
    count = tmp_path / "runs"
    script = ("import os, signal; open(%r, 'a').write('run\\n'); os.kill(%d, signal.SIGKILL)"
              % (str(count), server.process.pid))
    served = _python(script, _env(), tmp_path, server.directory)
    assert served.returncode == 70 and b"the module server ended before" in served.stderr
    assert count.read_text() == "run\n"


def test_the_session_server_is_named_for_this_test_and_takes_its_module_runs(tmp_path):
    """tests/conftest.py's fixture: a test outside MODULE_PROCESS_TESTS has the session's server named, and a module
    run started as its ansible commands start one (ansible_env) is forked by that server."""
    directory = os.environ.get(module_server.VARIABLE, "")
    if directory == "off":
        pytest.skip("GPUOPS_TEST_MODULE_SERVER=off: the session runs without the server")
    assert directory, "the session's module server did not start"
    served = subprocess.run([sys.executable], input=b"import os; print(os.getppid())", env=ansible_run.ansible_env(),
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=BOUND_S,
                            check=True)
    assert int(served.stdout) != os.getpid()
    assert [name for name in os.listdir(directory) if name.endswith(".sock")]


def test_the_process_model_tests_are_named_by_file_or_by_test():
    from tests.conftest import starts_its_own_modules   # pylint: disable=import-outside-toplevel
    assert starts_its_own_modules("tests/reliability/test_sigkill_site.py::test_sigkill_at_a_chosen_point[3]")
    assert starts_its_own_modules("tests/integration/test_site_slices.py::"
                                  "test_a_killed_lock_holder_is_taken_over_after_its_lease_expires")
    assert not starts_its_own_modules("tests/integration/test_site_slices.py::"
                                      "test_three_slices_at_once_install_once_then_a_rerun_changes_nothing")
    assert not starts_its_own_modules("tests/integration/test_site_lab.py::test_check_then_apply_then_nothing_to_do")
    assert not starts_its_own_modules("tests/reliability/test_sigkill_site_other.py::test_x")


def test_a_socket_folder_too_long_for_a_socket_path_is_replaced_by_a_short_one(tmp_path):
    assert module_server.socket_folder(str(tmp_path)) == str(tmp_path)      # pytest's: short enough here
    long_one = "/tmp/" + "x" * 90
    short = module_server.socket_folder(long_one)
    try:
        assert short != long_one and os.path.isdir(short) and len(short) <= 80
    finally:
        os.rmdir(short)
