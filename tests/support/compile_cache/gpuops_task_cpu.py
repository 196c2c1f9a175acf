"""Where a test's ansible runs spend their CPU, per task and per module (issue 49), loaded by this directory's
sitecustomize.py where ``GPUOPS_TEST_TASK_CPU`` names a file. Off unless named: nothing here runs in a normal test run.

Every Python process of the run (they all start with this directory on PYTHONPATH, tests/support/ansible_run.py)
appends one tab-separated line to the file when it ends:

- ``worker``: a worker that ansible-playbook forked for one task on one host (the strategy forks one per task and
  host, the skipped ones included); its name is the task's name and the host's. Its own CPU seconds are what the
  controller pays for the task outside the module (templating, conditionals, the action plugin); its children's are
  the module process it ran and whatever that waited for.
- ``module``: a module process (AnsiballZ), named by the module it ran (``runpy.run_module``'s name).
- ``main``: any other Python program: ansible-playbook or ansible themselves (their children's seconds include every
  worker), a stand-in or a tool wrapper a module ran.

The columns: kind, name, host, own CPU seconds (user + system, getrusage RUSAGE_SELF), children's CPU seconds
(RUSAGE_CHILDREN: those it waited for), the process id, its command line (main) or the task's action (worker).
A forked worker's counters start at zero (Linux resets them in a fork), so a worker's line is its own. A process that
is killed (SIGKILL) writes nothing. tests/support/task_cpu.py sums the lines per task and per module:

    GPUOPS_TEST_TASK_CPU=/tmp/cpu.tsv .venv/bin/python -m pytest -q -n 2 tests/integration/test_health_sweep.py
    .venv/bin/python -m tests.support.task_cpu /tmp/cpu.tsv
"""
import atexit
import os
import resource
import runpy
import sys

VARIABLE = "GPUOPS_TEST_TASK_CPU"
_state = {"path": None, "append": None, "kind": "main", "module": None}


def _cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _clean(text):
    return " ".join(str(text).split())[:300]


def _write(kind, name, host, extra):
    fields = (kind, _clean(name), _clean(host), "%.3f" % _cpu(resource.RUSAGE_SELF),
              "%.3f" % _cpu(resource.RUSAGE_CHILDREN), str(os.getpid()), _clean(extra))
    line = "\t".join(f.replace("\t", " ") for f in fields) + "\n"
    _state["append"](_state["path"], line.encode("utf-8", "replace"))


def _at_exit():
    if _state["kind"] == "main":
        module = _state["module"]
        if module:
            _write("module", module, "", "")
        else:
            _write("main", os.path.basename(sys.argv[0] if sys.argv else "") or "python", "", " ".join(sys.argv))


def _run_module(run_module):
    def run(mod_name, *args, **kwargs):
        _state["module"] = mod_name
        return run_module(mod_name, *args, **kwargs)
    return run


def _in_forked_child():
    """A fork that does not exec (ansible-playbook's workers): its line is written when it leaves by os._exit, as a
    multiprocessing child does; its atexit handlers (the parent's) do not run there."""
    _state["kind"] = "fork"
    real_exit = os._exit

    def _exit(code):
        try:
            import multiprocessing  # pylint: disable=import-outside-toplevel
            worker = multiprocessing.current_process()
            task, host = getattr(worker, "_task", None), getattr(worker, "_host", None)
            if task is not None:
                _write("worker", task.get_name(), host.get_name() if host is not None else "", task.action or "")
        except Exception:  # a reading, never a reason for a worker to fail
            pass
        real_exit(code)
    os._exit = _exit


def install(path, append):
    """Record this process (and the processes it forks) into ``path``, a line at a time with ``append(path, line)``
    (gpuops_startup.append_line: one write in append mode)."""
    _state["path"] = path
    _state["append"] = append
    runpy.run_module = _run_module(runpy.run_module)
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_in_forked_child)
