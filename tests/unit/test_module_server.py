"""The tests' warm interpreter for module runs (tests/support/compile_cache/gpuops_module_server.py): a script handed to
it behaves as in a Python of its own (output, exit status, a signal, the environment, directory, umask, argv, path,
atexit); a run whose starter is killed is killed; another ansible-core's payload, another interpreter's start-up and
the CPU reading's runs are not taken; the server's CPU seconds are read while it runs.

And the runs that ansible's worker hands to it itself (gpuops_local_modules.py, hand_over): only the exact command
ansible builds for a pipelined module is taken; what the run sees and what the worker gets back are what the shell and
the starter would have given (the output, the status, a signal and dash's message for it, the environment with the
task's variables and dash's PWD, the directory); before any starter there is no path to give the run, and nothing
starts; ansible's own local connection takes its module runs so, and a run of another interpreter still goes through
the shell."""
import base64
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import zipfile

import pytest

from tests.support import ansible_run
from tests.support.compile_cache import gpuops_local_modules as local_modules
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


PYTHON = sys.executable
# hand_over's runs: what the run sees, its two streams (the second larger than a pipe holds), an exit status from the environment
HANDED_SCRIPT = r"""
import json, os, sys
umask = os.umask(0); os.umask(umask)
seen = {"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "umask": umask, "stdin": sys.stdin.read(),
        "env": dict((k, v) for k, v in os.environ.items() if k.startswith("GPUOPS_TEST_T_") or k == "PWD"),
        "in_path": "/elsewhere/lib" in sys.path, "ppid_is_server": os.getppid() == int(os.environ["SERVER_PID"])}
print(json.dumps(seen))
sys.stderr.write("e" * 200000 + "\n")
sys.exit(int(os.environ.get("GPUOPS_TEST_T_EXIT", "0")))
"""


def _command(python=PYTHON, **assignments):
    """The command ansible's sh shell and ActionBase build for a pipelined module (with the task's environment)."""
    inner = " ".join(["%s=%s" % (name, shlex.quote(value)) for name, value in assignments.items()] + [python])
    return "/bin/sh -c " + shlex.quote(inner + " && sleep 0")


def _through_the_shell(cmd, source, env, cwd):
    """As ansible's local connection runs ``cmd``: through /bin/sh, the script on standard input."""
    done = subprocess.run(cmd, shell=True, executable="/bin/sh", input=source, env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=BOUND_S, check=False)
    return done.returncode, done.stdout, done.stderr


def _handed(server, cmd, source, env, cwd):
    python, assignments = local_modules.pipelined_python(cmd)
    assert python == PYTHON
    return module_server.hand_over(server.directory, local_modules.shell_environment(env, cwd, assignments), cwd,
                                   source)


def test_only_the_command_ansible_builds_for_a_pipelined_module_is_read():
    assert local_modules.pipelined_python(_command()) == (PYTHON, {})
    assert local_modules.pipelined_python(_command(A="x y", B="", C="it's $HOME `id` *")) == (
        PYTHON, {"A": "x y", "B": "", "C": "it's $HOME `id` *"})
    for other in ("/bin/sh -c '%s'" % PYTHON,                                         # no sleep: not ansible's
                  "/bin/sh -c 'cd /tmp && %s && sleep 0'" % PYTHON,                    # chdir
                  "/bin/sh -c 'A=$(id) %s && sleep 0'" % PYTHON,                       # an expansion
                  "/bin/sh -c '%s > /tmp/x && sleep 0'" % PYTHON,                      # a redirection
                  "/bin/sh -c 'sudo -H -S -n -u other %s && sleep 0'" % PYTHON,        # a become
                  "/bin/sh -c 'python3 && sleep 0'",                                 # not a path
                  "/bin/sh -c 'PWD=/x %s && sleep 0'" % PYTHON,                        # dash's own PWD
                  "/bin/bash -c '%s && sleep 0'" % PYTHON,                             # another shell
                  "/bin/sh -c  '%s && sleep 0'" % PYTHON,                              # not as ansible quotes
                  "/bin/sh -c \"%s && sleep 0\"" % PYTHON,
                  "/bin/sh -c '%s && sleep 0' ; true" % PYTHON,
                  "/bin/sh -c 'unbalanced",
                  None):
        assert local_modules.pipelined_python(other) is None, other


def test_a_handed_run_ends_as_the_shell_and_the_starter_would_report_it(server, tmp_path):
    cmd = _command(GPUOPS_TEST_T_EXIT="3", GPUOPS_TEST_T_VALUE="a 'b' $c")
    source = HANDED_SCRIPT.encode()
    env = dict(_env(SERVER_PID=str(server.process.pid), PWD="/not/here"), **{module_server.VARIABLE: server.directory})
    cwd = str(tmp_path)
    # before any starter of this HOME the server has no path to give the run: declined, nothing started
    assert _handed(server, cmd, source, env, cwd) is None
    shell = _through_the_shell(cmd, source, env, cwd)       # a starter: the server forks the run and learns its path
    handed = _handed(server, cmd, source, env, cwd)
    assert handed is not None
    assert handed[0] == shell[0] == 3
    assert handed[2] == shell[2] and len(shell[2]) == 200001
    seen, seen_by_shell = json.loads(handed[1]), json.loads(shell[1])
    assert seen == seen_by_shell
    assert seen["ppid_is_server"] and seen["argv"] == [""] and seen["path0"] == "" and seen["in_path"]
    assert seen["stdin"] == "" and seen["cwd"] == os.path.realpath(cwd)
    assert seen["env"] == {"GPUOPS_TEST_T_EXIT": "3", "GPUOPS_TEST_T_VALUE": "a 'b' $c", "PWD": os.path.realpath(cwd)}
    # PWD kept where it names the directory, as dash keeps it
    kept = _handed(server, cmd, source, dict(env, PWD=cwd + "/."), cwd)
    assert json.loads(kept[1])["env"]["PWD"] == cwd + "/."


def test_a_handed_run_killed_by_a_signal_reports_the_shells_status(server, tmp_path):
    env = dict(_env(), **{module_server.VARIABLE: server.directory})
    cwd = str(tmp_path)
    _through_the_shell(_command(), b"pass", env, cwd)      # the server learns the path
    for script, status in (("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM),
                           ("raise ValueError('bad')", 1), ("import sys; sys.exit(None)", 0)):
        shell = _through_the_shell(_command(), script.encode(), env, cwd)
        handed = _handed(server, _command(), script.encode(), env, cwd)
        assert handed == shell and shell[0] == status, script


def test_a_server_that_ends_during_a_handed_run_fails_it_and_never_starts_it_twice(server, tmp_path):
    env = dict(_env(), **{module_server.VARIABLE: server.directory})
    _through_the_shell(_command(), b"pass", env, str(tmp_path))
    count = tmp_path / "runs"
    script = ("import os, signal; open(%r, 'a').write('run\\n'); os.kill(%d, signal.SIGKILL)"
              % (str(count), server.process.pid))
    status, _out, err = _handed(server, _command(), script.encode(), env, str(tmp_path))
    assert status == 70 and b"the module server ended before" in err
    assert count.read_text() == "run\n"


def test_ansibles_local_connection_hands_its_module_runs_to_the_server(tmp_path):
    """ansible's own worker takes the hand-off (the hook of gpuops_startup.py): after the first run of a HOME (a
    starter, through the shell), a module run is no shell command of ansible's (none at -vvv); with the hand-off off,
    or another interpreter, each still is; the module's result is the same either way."""
    server = module_server.Started(str(tmp_path / "ms"), ansible_run.ansible_env())   # as tests/conftest.py's
    os.makedirs(server.directory)
    assert server.ready(), "the module server did not start"

    def ping(**extra):
        python = extra.pop("PY", PYTHON)
        env = ansible_run.ansible_env(dict({module_server.VARIABLE: server.directory, "HOME": str(tmp_path)}, **extra))
        done = subprocess.run([os.path.join(ansible_run.BIN, "ansible"), "localhost", "-m", "ping", "-vvv",
                               "-e", "ansible_python_interpreter=%s" % python],
                              cwd=ansible_run.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=BOUND_S, check=False)
        assert done.returncode == 0, done.stdout
        assert '"ping": "pong"' in done.stdout
        return done.stdout.count("EXEC /bin/sh -c '%s && sleep 0'" % python)

    try:
        assert ping() == 1           # the first of this HOME: the starter teaches the server its path
        assert ping() == 0           # handed by the worker
        assert ping(GPUOPS_TEST_LOCAL_MODULES="off") == 1
        other = os.path.join(str(tmp_path), "python")
        os.symlink(PYTHON, other)    # another path to the same interpreter: not the worker's own
        assert ping(PY=other) == 1
    finally:
        server.stop()
