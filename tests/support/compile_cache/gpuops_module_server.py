"""A warm interpreter for the module runs of the tests' ansible commands (issue 49), loaded by this directory's
sitecustomize.py where ``GPUOPS_TEST_MODULE_SERVER`` names a directory (tests/conftest.py: one server per pytest
process, for its session). Off unless named.

Why: every module run of a test's converge starts a new Python that reads AnsiballZ's wrapper from its standard input
(ansible.cfg's ``pipelining``) and imports ansible-core's module_utils again (``ansible.module_utils.basic`` and what
it imports: about 0.1 of a module run's 0.13-0.2 CPU s), some 3,700 times a `make test`. Here a server that imported
them once forks for each run instead; the Python that ansible started hands its script, its standard streams, its
environment, working directory, umask and ``sys.path`` to the server, waits for the fork to end and ends the same way
(its exit status, or killed by the same signal). The module's own code still runs from the payload ansible built, in
its own process, with the node's environment; only ansible-core's module_utils are the server's copies, and only where
the payload's ``ansible/module_utils/basic.py`` is the server's byte for byte (the same ansible-core), else the
Python that ansible started runs the script itself, as without the server.

What differs from a fresh interpreter, and so where the server is not used:

- the module's process is the server's child, not a child of the ansible worker, in the server's process group: a
  test that finds a module among ansible-playbook's descendants, kills a process group a stand-in names or kills a run
  while a module may be running keeps a Python per run (the test or its file is named in tests/conftest.py,
  MODULE_PROCESS_TESTS); a module whose starter is killed (a SIGKILL of ansible-playbook's process group) is killed by
  the server as soon as it sees the starter gone;
- a module that reads its own ancestry (the cluster lease's owner: DECLINED_FILES) runs in its own interpreter;
- the interpreter's start-up is the server's: every run has the server's hash seed (a fresh Python draws one per
  process; ``random`` is reseeded in each fork by Python itself), and a process whose ``sys.executable``, version,
  flags, ``PYTHON*``, locale or tests' hooks (GPUOPS_TEST_COMPILE_CACHE, GPUOPS_TEST_ANSIBALLZ_*) differ finds no
  server (its socket is named by a digest of them) and starts as usual; so does any Python started with arguments
  (only a script read from standard input is handed over), and every run while ``GPUOPS_TEST_TASK_CPU`` is set (that
  reading measures real processes).

Where the CPU goes: the module's process is the server's child, so the tests' cost table (tests/support/cost_table.py)
adds the server's CPU seconds (``server_cpu``), which the server counts as it reaps each run.

Handed without a starter (``hand_over``, gpuops_local_modules.py): where ansible's worker would start
``/bin/sh -c '<python> && sleep 0'`` with the script on its standard input, and ``<python>`` is the worker's own
interpreter, the worker hands the script itself, with the environment, directory and umask that Python would have had
(dash's PWD), and reads its output and status as it would have read the shell's: no shell, starter or ``sleep``
(about 25 ms of CPU a module run, some 3 800 a make test). What the starter alone knows, its ``sys.path``, the server
takes from the last starter of the same HOME (the interpreter, its flags and PYTHON* variables are the socket's name);
before any starter there is none, and the run is declined (the worker then starts the shell as usual).
"""
import marshal
import os
import sys

try:
    # the socket's name: blake2b from its own small extension, not hashlib, which loads OpenSSL (about 10 ms of each
    # handed run's start-up; every Python the tests' ansible runs start computes the name)
    from _blake2 import blake2b as _digest
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b as _digest

VARIABLE = "GPUOPS_TEST_MODULE_SERVER"
# what the server imports once: AnsiballZ's wrapper and loader, ansible-core's module_utils that every module imports,
# and the libraries of the interpreter's own site-packages and standard library that the collection's modules import
# on their common paths (counted over the module runs of test_site_dra and test_site_lab: urllib3 and yaml, the
# Kubernetes modules' client path, in 176 of 314 runs, 0.07-0.1 CPU s a run on the slow machine that counted them;
# resource, glob and uuid in 103 to 248). Never the collection's own code: a run takes that from its payload, which can be another copy's.
PRELOAD = ("ansible.module_utils.basic", "ansible.module_utils._internal._ansiballz._loader", "base64", "datetime",
           "json", "shutil", "tempfile", "zipfile", "urllib3", "yaml", "resource", "glob", "uuid", "tomllib")
# the variables that decide how an interpreter and this directory's sitecustomize start: part of the socket's name
_HOOKS = ("GPUOPS_TEST_COMPILE_CACHE", "GPUOPS_TEST_ANSIBALLZ_CACHE", "GPUOPS_TEST_ANSIBALLZ_COLLECTIONS",
          "GPUOPS_TEST_TASK_CPU")
_HEADER = 8
_QUERY = 0             # a request of this length asks for the server's CPU seconds
_DECLINED = -(1 << 30)  # the reply for a script the server does not run (another ansible-core's payload)
_RECEIVE_S = 60.0        # how long the server waits for a whole request once a starter has connected
_PARENT_CHECK_MS = 5000  # while idle, how often the server looks whether the process that started it still runs
# payload files whose code reads the module's own ancestry, and so a module that carries one is run by its starter:
# the cluster lease's owner is the ansible-playbook found among the module's ancestors (find_owner, else its
# parent), and the lease's renewer lives as long as that owner; in the server the ancestors are the server's
DECLINED_FILES = ("ansible_collections/gpuops/nvidia/plugins/module_utils/kube/_lease.py",)


def fingerprint(environ):
    """What an interpreter started with ``environ`` would be: sys.executable, version, flags and the variables above."""
    keys = sorted(k for k in environ if k.startswith("PYTHON") or k.startswith("LC_") or k == "LANG" or k in _HOOKS)
    text = repr((sys.executable, sys.version, tuple(sys.flags), [(k, environ[k]) for k in keys]))
    return _digest(text.encode("utf-8", "surrogateescape"), digest_size=10).hexdigest()


def socket_path(directory, environ):
    return os.path.join(directory, fingerprint(environ) + ".sock")


def run_source(source):
    """Run ``source`` as `python` runs a script read from its standard input, then end the process as it would."""
    import types
    main = types.ModuleType("__main__")
    main.__file__ = "<stdin>"
    main.__builtins__ = sys.modules["builtins"]
    sys.modules["__main__"] = main
    status, signal_number = 0, None
    try:
        exec(compile(source, "<stdin>", "exec"), main.__dict__)   # pylint: disable=exec-used
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except KeyboardInterrupt:
        import signal   # pylint: disable=import-outside-toplevel
        kind, value, trace = sys.exc_info()
        sys.excepthook(kind, value.with_traceback(trace.tb_next), trace.tb_next)
        status, signal_number = 1, signal.SIGINT
    except BaseException:   # pylint: disable=broad-except
        kind, value, trace = sys.exc_info()
        sys.excepthook(kind, value.with_traceback(trace.tb_next), trace.tb_next)   # from the script's frame, as Python
        status = 1
    _finalize()
    if signal_number is not None:
        import signal   # pylint: disable=import-outside-toplevel
        signal.signal(signal_number, signal.SIG_DFL)
        os.kill(os.getpid(), signal_number)
    os._exit(status)


def _exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write("%s\n" % (code,))
    except Exception:   # pylint: disable=broad-except
        pass
    return 1


def _finalize():
    """What Python does at exit before it tears down: wait for threads, run atexit, flush the standard streams."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()   # pylint: disable=protected-access
        except Exception:   # pylint: disable=broad-except
            pass
    import atexit   # pylint: disable=import-outside-toplevel
    atexit._run_exitfuncs()   # pylint: disable=protected-access
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:   # pylint: disable=broad-except
            pass


def _connect(directory, environ):
    """A socket connected to the server for ``environ``, or None where there is none."""
    # (the C socket type, which has every call made here: the socket module imports enum and selectors, about a
    # quarter of a handed run's start-up)
    import _socket as socket   # pylint: disable=import-outside-toplevel
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path(directory, environ))
    except OSError:
        sock.close()
        return None
    return sock


def _send(sock, request, streams):
    """Send ``request`` (marshalled) with the run's standard streams ``streams`` (three descriptors, passed to the
    server with SCM_RIGHTS); OSError where the server did not get it whole."""
    import _socket as socket   # pylint: disable=import-outside-toplevel
    fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in streams)
    sock.sendmsg([len(request).to_bytes(_HEADER, "big")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    sock.sendall(request)


def client(directory, environ):
    """In a Python started to read its script from standard input: hand the run to the server. Returns None where
    there is no server for this interpreter (standard input untouched: Python goes on as usual), the script where the
    server declined it or never had the whole request (this process runs it, after its usual start-up); ends the
    process otherwise, as the run ended (with status 70 and a message where the server ended first: the run is never
    started twice)."""
    if environ.get("GPUOPS_TEST_TASK_CPU"):
        return None
    sock = _connect(directory, environ)
    if sock is None:
        return None
    source = sys.stdin.buffer.read()
    request = marshal.dumps({"cwd": os.getcwd(), "env": dict(environ), "umask": _umask(), "path": list(sys.path),
                             "source": source})
    try:
        _send(sock, request, (0, 1, 2))
    except OSError:
        return source             # the server never had the whole request, so started nothing: run it here
    try:
        reply = _read(sock, 4)
    except OSError:
        reply = b""
    if len(reply) < 4:
        # the server ended with the run started or not: never run it a second time, say so and fail
        os.write(2, b"gpuops_module_server: the module server ended before it said how the run ended\n")
        os._exit(70)
    status = int.from_bytes(reply, "big", signed=True)
    if status == _DECLINED:
        return source
    if status < 0:
        import signal   # pylint: disable=import-outside-toplevel
        try:
            signal.signal(-status, signal.SIG_DFL)
        except (OSError, ValueError):
            pass          # SIGKILL, SIGSTOP: nothing to reset
        os.kill(os.getpid(), -status)
        status = 128 - status
    os._exit(status)


def hand_over(directory, environ, cwd, source):
    """In ansible's worker, instead of the shell and the starter: hand ``source`` (a module's script) to the server
    for ``environ``, to run in ``cwd`` with an empty standard input; (status, stdout, stderr) as the shell would have
    reported them (a run killed by signal N: 128 + N), or None where no server takes the run (none for this
    interpreter, no starter's path yet, another ansible-core's payload): nothing was started then."""
    if any(entry and not os.path.isabs(entry) for entry in environ.get("PYTHONPATH", "").split(os.pathsep)):
        return None               # a relative entry is made absolute from the starter's directory: not the same path
    sock = _connect(directory, environ)
    if sock is None:
        return None
    import select   # pylint: disable=import-outside-toplevel
    request = marshal.dumps({"cwd": cwd, "env": dict(environ), "umask": _umask(), "path": None, "source": source})
    stdin, stdin_end = os.pipe()
    os.close(stdin_end)           # the script was the starter's standard input: the run reads it at its end
    out, out_end = os.pipe()
    err, err_end = os.pipe()
    try:
        try:
            _send(sock, request, (stdin, out_end, err_end))
        except OSError:
            return None           # the server never had the whole request, so started nothing
        finally:
            for fd in (stdin, out_end, err_end):
                os.close(fd)      # the run has its own copies: the pipes end when the run (and what it left) does
        output = {out: [], err: [], sock.fileno(): []}
        poller = select.poll()
        for fd in output:
            poller.register(fd, select.POLLIN)
        left = set(output)
        while left:
            for fd, _event in poller.poll():
                data = sock.recv(4) if fd == sock.fileno() else os.read(fd, 65536)
                if data:
                    output[fd].append(data)
                else:
                    poller.unregister(fd)
                    left.discard(fd)
        reply = b"".join(output[sock.fileno()])
        stdout, stderr = b"".join(output[out]), b"".join(output[err])
    finally:
        os.close(out)
        os.close(err)
        sock.close()
    if len(reply) < 4:
        # as the starter says it: the run may have started, so it is never run a second time
        return 70, stdout, stderr + b"gpuops_module_server: the module server ended before it said how the run ended\n"
    status = int.from_bytes(reply[:4], "big", signed=True)
    if status == _DECLINED:
        return None
    if status >= 0:
        return status, stdout, stderr
    import signal   # pylint: disable=import-outside-toplevel
    if -status not in (signal.SIGINT, signal.SIGPIPE):
        # what dash writes after a command that a signal killed (without "(core dumped)": the reply does not say)
        stderr += ("%s\n" % (signal.strsignal(-status) or "Signal %d" % -status)).encode()
    return 128 - status, stdout, stderr


def server_cpu(path):
    """The CPU seconds of the server listening at ``path`` and of every run it reaped: 0.0 where there is none."""
    import socket   # pylint: disable=import-outside-toplevel
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(_QUERY.to_bytes(_HEADER, "big"))
        return float(_read(sock, 64).decode("ascii") or 0.0)
    except (OSError, ValueError):
        return 0.0
    finally:
        sock.close()


def _read(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Server(object):
    """The server's loop: accepts runs, forks one process per run, reaps it and tells its starter how it ended; kills a
    run whose starter is gone. One thread, no signal handlers: every wait is a poll over the listener, the runs'
    process file descriptors and their starters' connections."""

    def __init__(self, directory, parent):
        self.parent = parent      # the process that started the server: the server ends once that one is gone
        os.close(os.pidfd_open(os.getpid()))   # a kernel without pidfds (before Linux 5.3) fails here: no server
        import select   # pylint: disable=import-outside-toplevel
        import socket   # pylint: disable=import-outside-toplevel
        for name in PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass              # not in this ansible-core (2.16 has no _ansiballz package): imported per run
        basic = sys.modules["ansible.module_utils.basic"].__file__
        with open(basic, "rb") as handle:
            self.basic = handle.read()
        # ansible-core's files as the payloads name them ("ansible/module_utils/basic.py"): a payload that carries
        # any other file under ansible/ (a playbook's own library module is ansible/legacy/<name>.py) is declined,
        # since the server's `ansible` package would not find it
        top = os.path.dirname(sys.modules["ansible"].__file__)
        self.ansible_files = set(os.path.relpath(os.path.join(folder, name), os.path.dirname(top))
                                 for folder, _dirs, names in os.walk(top) for name in names)
        self.select, self.socket = select, socket
        self.path = socket_path(directory, os.environ)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path + ".new")
        self.listener.listen(64)
        os.replace(self.path + ".new", self.path)   # whole: a client connects to a listening server or to none
        self.poller = select.poll()
        self.poller.register(self.listener.fileno(), select.POLLIN)
        self.runs = {}            # pidfd -> (pid, connection)
        self.starters = {}        # connection's fd -> pidfd
        self.paths = {}           # HOME -> the sys.path of the last starter with that HOME (hand_over's runs take it)

    def serve(self):
        while True:
            events = self.poller.poll(_PARENT_CHECK_MS)
            if not events and os.getppid() != self.parent:
                return            # the test session that started it is gone (killed): so is the server
            for fd, _events in events:
                if fd == self.listener.fileno():
                    self._accept()
                elif fd in self.runs:
                    self._ended(fd)
                elif fd in self.starters:
                    self._starter_gone(fd)

    def _accept(self):
        conn = self.listener.accept()[0]
        conn.settimeout(_RECEIVE_S)   # a starter stopped mid-request never holds the other runs up for longer
        try:
            fds, request = self._receive(conn)
        except (OSError, ValueError, EOFError, TypeError):
            conn.close()
            return
        conn.settimeout(None)
        if request is None:
            conn.sendall(("%.6f" % self._cpu()).encode("ascii"))
            conn.close()
            return
        home = request["env"].get("HOME")
        if request["path"] is not None:
            self.paths[home] = request["path"]
        else:
            request["path"] = self.paths.get(home)
        if request["path"] is None or not self._same_ansible(request["source"]):
            for fd in fds:
                os.close(fd)
            conn.sendall(_DECLINED.to_bytes(4, "big", signed=True))
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            self._child(fds, request)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.runs[pidfd] = (pid, conn)
        self.starters[conn.fileno()] = pidfd
        self.poller.register(pidfd, self.select.POLLIN)
        self.poller.register(conn.fileno(), self.select.POLLIN)   # the starter sends nothing more: this is its end

    def _receive(self, conn):
        socket = self.socket
        msg, ancdata, _flags, _addr = conn.recvmsg(_HEADER, socket.CMSG_SPACE(3 * 4))
        fds = []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True) for i in range(0, len(data) - 3, 4)]
        size = int.from_bytes(msg, "big") if len(msg) == _HEADER else -1
        if size == _QUERY and not fds:
            return fds, None
        if size <= 0 or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            raise ValueError("not a request")
        return fds, marshal.loads(_read(conn, size))

    def _same_ansible(self, source):
        """Whether a script that carries an AnsiballZ payload carries this server's basic.py, no file under
        ansible/ that the server's ansible-core lacks and none of DECLINED_FILES (a script that is not AnsiballZ's
        wrapper: yes)."""
        for marker in (b"\nzip_data='", b"ZIPDATA = '"):    # ansible-core 2.19 on, before 2.19
            start = source.find(marker)
            if start >= 0:
                start += len(marker)
                break
        else:
            return b"_ANSIBALLZ_WRAPPER" not in source[:4096]   # a wrapper of another shape: declined
        import base64   # pylint: disable=import-outside-toplevel
        import io   # pylint: disable=import-outside-toplevel
        import zipfile   # pylint: disable=import-outside-toplevel
        try:
            payload = zipfile.ZipFile(io.BytesIO(base64.b64decode(source[start:source.index(b"'", start)])))
            names = payload.namelist()
            if any(name.startswith("ansible/") and name not in self.ansible_files for name in names):
                return False
            if any(name in DECLINED_FILES for name in names):
                return False
            return payload.read("ansible/module_utils/basic.py") == self.basic
        except (KeyError, ValueError, zipfile.BadZipFile):
            return False

    def _child(self, fds, request):
        """The run's process: the starter's streams, environment, directory, umask and path; then its script."""
        try:
            import signal   # pylint: disable=import-outside-toplevel
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.closerange(3, 65536)   # the listener, other runs' connections: a fresh interpreter has none of them
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.chdir(request["cwd"])
            zone = os.environ.get("TZ")
            os.environ.clear()
            os.environ.update(request["env"])
            os.umask(request["umask"])
            if os.environ.get("TZ") != zone:
                import time   # pylint: disable=import-outside-toplevel
                time.tzset()      # the local time of the starter's TZ, as its own interpreter would read it
            tempfile = sys.modules.get("tempfile")
            if tempfile is not None:
                tempfile.tempdir = None   # found again from the starter's TMPDIR where a script asks for it
            sys.argv[:] = [""]
            sys.path[:] = ([] if getattr(sys.flags, "safe_path", False) else [""]) + request["path"]
        except BaseException:   # pylint: disable=broad-except
            os._exit(70)
        run_source(request["source"])

    def _ended(self, pidfd):
        pid, conn = self.runs.pop(pidfd)
        self._forget(pidfd, conn)
        status = os.waitpid(pid, 0)[1]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            conn.sendall(code.to_bytes(4, "big", signed=True))
        except OSError:
            pass
        conn.close()

    def _starter_gone(self, fd):
        pidfd = self.starters[fd]
        pid, conn = self.runs.pop(pidfd)
        self._forget(pidfd, conn)
        import signal   # pylint: disable=import-outside-toplevel
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        conn.close()

    def _forget(self, pidfd, conn):
        self.poller.unregister(pidfd)
        self.poller.unregister(conn.fileno())
        del self.starters[conn.fileno()]
        os.close(pidfd)

    @staticmethod
    def _cpu():
        import resource   # pylint: disable=import-outside-toplevel
        own, runs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + runs.ru_utime + runs.ru_stime


_RUNNING = []   # the servers this process started and has not stopped yet


def running_cpu():
    """The CPU seconds of the servers this process started and runs (their runs reaped so far included); a server's
    seconds are its parent's children's once it has been stopped and waited for."""
    return sum(server_cpu(started.path) for started in _RUNNING)


def socket_folder(preferred):
    """``preferred`` where a socket's path under it fits (at most 107 bytes: <folder>/<20 hex digits>.sock), else a
    new short folder under /tmp (a CI runner's checkout or pytest folder can be too long)."""
    if len(preferred) <= 80:
        return preferred
    import tempfile   # pylint: disable=import-outside-toplevel
    return tempfile.mkdtemp(prefix="gpuops-ms-", dir="/tmp")


class Started(object):
    """A server started with ``python`` (default this one: another is another ansible-core's, scripts/compat.py) and
    ``env``, in a directory of its own; ``stop()`` ends it and removes its socket."""

    def __init__(self, directory, env, python=None):
        import subprocess   # pylint: disable=import-outside-toplevel
        self.directory = directory
        self.path = None          # the socket, once the server listens (its name is the server's interpreter's)
        here = os.path.dirname(os.path.abspath(__file__))
        self.process = subprocess.Popen([python or sys.executable, os.path.join(here, "gpuops_module_server.py"),
                                         directory, str(os.getpid())],
                                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, close_fds=True)

    def ready(self, bound_s=60.0):
        """Whether the server listens (polls for its socket, bounded; False where it ended first)."""
        import time   # pylint: disable=import-outside-toplevel
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            found = [name for name in os.listdir(self.directory) if name.endswith(".sock")]
            if found:
                self.path = os.path.join(self.directory, found[0])
                _RUNNING.append(self)
                return True
            if self.process.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def stop(self):
        if self in _RUNNING:
            _RUNNING.remove(self)
        self.process.kill()
        self.process.wait()
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def available():
    """Whether this Python and system can run the server (Linux's pidfd_open, SCM_RIGHTS)."""
    return hasattr(os, "pidfd_open") and sys.platform.startswith("linux")


if __name__ == "__main__":
    # argv: the socket's directory, the PID of the process whose end ends the server
    Server(sys.argv[1], int(sys.argv[2])).serve()
