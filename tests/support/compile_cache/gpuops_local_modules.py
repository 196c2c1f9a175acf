"""Module runs handed to the module server by ansible's worker itself (issue 49), armed by this directory's
gpuops_startup.py where the compile cache is on and ``GPUOPS_TEST_MODULE_SERVER`` names the session's server.

Why: with pipelining (ansible.cfg) a module run on the ``local`` connection is ``/bin/sh -c '<python> && sleep 0'``
(the task's environment as ``NAME=value`` words before ``<python>``), run through the shell again by the connection
(two dash processes), a Python that only hands its standard input to the module server (gpuops_module_server.py),
then ``sleep``: four programs started for each of some 3 800 module runs a make test, about 25 ms of CPU a run, for a
script the server runs anyway. Here the local connection hands the script to the server itself
(gpuops_module_server.hand_over) when the command is exactly that one and ``<python>`` is the worker's own interpreter
(as the lab's ``ansible_python_interpreter: "{{ ansible_playbook_python }}"`` is), with no become that wrapped it: the
environment is the worker's with the task's and PWD as dash sets it, the directory the connection's, standard input
empty as the starter's is once it read the script; the status and output come back as the shell's would. Any other
command (a temporary directory, a become, ``raw``, another interpreter) and a run the server declines go through the
shell as before.

What differs from the starter's run: the shell, the starter and ``sleep`` are not started, so a test that counts or
kills the processes of a module run keeps the server off for itself (tests/conftest.py, MODULE_PROCESS_TESTS); a
worker that ends before its run (a task's timeout) has the run killed by the server, as a killed starter has.
"""
import os
import sys

_SHELL = "/bin/sh -c "
_SUFFIX = " && sleep 0"
_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def pipelined_python(cmd):
    """(``<python>``, {name: value}) where ``cmd`` is exactly what ansible runs for a pipelined module with the default
    shell, ``/bin/sh -c '[NAME=value ...] <python> && sleep 0'`` (the task's environment, each value quoted as
    ansible quotes it; an interpreter path that needs no quotes), else None: the command rebuilt from what was read
    must be ``cmd`` to the byte, so that nothing else the shell would do (an expansion, a redirection) is in it."""
    import shlex   # pylint: disable=import-outside-toplevel
    if not isinstance(cmd, str) or not cmd.startswith(_SHELL):
        return None
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    if len(words) != 3 or words[:2] != ["/bin/sh", "-c"] or not words[2].endswith(_SUFFIX):
        return None
    inner = words[2]
    try:
        parts = shlex.split(inner[:-len(_SUFFIX)])
    except ValueError:
        return None
    if not parts:
        return None
    python, assignments = parts[-1], [part.partition("=") for part in parts[:-1]]
    if any(not sep or not name or name[0].isdigit() or not set(name) <= _NAME or name == "PWD"
           for name, sep, _value in assignments):
        return None
    rebuilt = " ".join(["%s=%s" % (name, shlex.quote(value)) for name, _sep, value in assignments] + [python])
    if not python.startswith("/") or shlex.quote(python) != python or _SHELL + shlex.quote(rebuilt + _SUFFIX) != cmd:
        return None
    return python, dict((name, value) for name, _sep, value in assignments)


def shell_environment(environ, cwd, assignments=None):
    """The environment dash passes on from ``environ`` in directory ``cwd`` to a command it runs with
    ``assignments``: PWD kept where it is an absolute path of that directory, else the directory's physical path."""
    env = dict(environ)
    env.update(assignments or {})
    pwd = env.get("PWD")
    try:
        same = bool(pwd) and pwd.startswith("/") and os.path.samestat(os.stat(pwd), os.stat(cwd))
    except OSError:
        same = False
    if not same:
        env["PWD"] = os.path.realpath(cwd)
    return env


def install(directory, loader_module, hand_over):
    """Arm the local connection that ``loader_module`` (ansible.plugins.loader) loads for a task (its connection
    loader's get_with_context, which ansible-core 2.16 to 2.21's TaskExecutor asks): its exec_command hands a pipelined
    module run of this interpreter to the server in ``directory`` via ``hand_over``."""
    loader = loader_module.connection_loader
    real = loader.get_with_context

    def get_with_context(name, *args, **kwargs):
        result = real(name, *args, **kwargs)
        if result[0] is not None:
            _arm(type(result[0]), directory, hand_over)
        return result

    loader.get_with_context = get_with_context


def _arm(cls, directory, hand_over):
    if getattr(cls, "_gpuops_local_modules", False) or getattr(cls, "transport", None) not in ("local",
                                                                                               "ansible.builtin.local"):
        return
    real = cls.exec_command

    def exec_command(self, cmd, in_data=None, sudoable=True):
        # (a become that wrapped no command, as for the same user, is left alone by the connection too)
        become = sudoable and self.become is not None and getattr(self.become, "_id", None)
        command = pipelined_python(cmd) if in_data is not None and not become else None
        if command is not None and command[0] == sys.executable:
            cwd = os.fsdecode(self.cwd) if self.cwd else os.getcwd()
            if not self._connected:
                self._connect()
            handed = hand_over(directory, shell_environment(os.environ, cwd, command[1]), cwd, in_data)
            if handed is not None:
                return handed
        return real(self, cmd, in_data=in_data, sudoable=sudoable)

    cls.exec_command = exec_command
    cls._gpuops_local_modules = True   # pylint: disable=protected-access
