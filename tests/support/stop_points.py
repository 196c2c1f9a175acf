"""Wait for a process that stopped itself (SIGSTOP) at a point the test chose, so the test can kill it exactly there.

Tests must not place a kill or a fault by sleeping: on a loaded machine the run is elsewhere when the sleep ends. The
code under test stops itself instead, at a point a test hook names: the simulator after its N-th mutating call
(SimulatedBackend.stop_after), ansible-playbook at the start of its N-th task or of a named one
(tests/support/callback_plugins/task_progress.py), a module that runs the lab's stand-in tools (kmod, systemctl)
once its N-th stand-in command is done (standin_done, below). These helpers wait for that stop, polling with a bound:
how long the run takes to get there changes nothing but the wait.
"""
import json
import os
import signal
import time

BOUND_S = 300
# The stand-in tools' hook (tests/support/kmod_standin.py, systemctl_standin.py): with STANDIN_LOG set, each
# command a stand-in ran is appended to that file as one line ("rmmod nvidia_uvm", "systemctl stop x.service"); with
# STANDIN_STOP_AFTER=N too, the stand-in that ran the N-th stops the process that started it (the module: its parent)
# with SIGSTOP once its work is done, so that a test kills the module right after that step.
STANDIN_LOG = "GPUOPS_STANDIN_LOG"
STANDIN_STOP_AFTER = "GPUOPS_STANDIN_STOP_AFTER"
# ... or, with STANDIN_STOP_AT set to a command line ("rmmod nvidia"), the first stand-in that runs exactly that
# command stops its parent; the stopped process's PID is written to "<log>.stopped" (a site-level test finds the
# module's process there, under ansible-playbook).
STANDIN_STOP_AT = "GPUOPS_STANDIN_STOP_AT"
# With STANDIN_TIMES set (a file), each command a stand-in ran is also appended there as one JSON line: the wall-clock
# time it was done (time.time), the node's root (GPUOPS_SIMULATED_ROOT) and the command - bench/driver_flow.py splits a
# node's driver reload by them.
STANDIN_TIMES = "GPUOPS_STANDIN_TIMES"


def standin_done(tool, args):
    """Called by a stand-in once its command ``tool args`` is done (the hooks above; nothing without STANDIN_LOG or
    STANDIN_TIMES)."""
    times = os.environ.get(STANDIN_TIMES)
    if times:
        with open(times, "a") as handle:
            handle.write(json.dumps({"time": time.time(), "root": os.environ.get("GPUOPS_SIMULATED_ROOT"),
                                     "command": " ".join([tool] + list(args))}) + "\n")
    log = os.environ.get(STANDIN_LOG)
    if not log:
        return
    with open(log, "a") as handle:
        handle.write(" ".join([tool] + list(args)) + "\n")
    with open(log) as handle:
        done = len(handle.readlines())
    line = " ".join([tool] + list(args))
    at = os.environ.get(STANDIN_STOP_AT)
    if str(done) == os.environ.get(STANDIN_STOP_AFTER) or (
            at == line and not os.path.exists(log + ".stopped")):
        with open(log + ".stopped", "w") as handle:
            handle.write("%d\n" % os.getppid())
        os.kill(os.getppid(), signal.SIGSTOP)


def standin_stopped(log):
    """The PID the stand-ins' hook stopped (see STANDIN_STOP_AT), or None."""
    try:
        with open(log + ".stopped") as handle:
            return int(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


def standin_log(path):
    """The commands the stand-ins ran, in order (the hook's log)."""
    try:
        with open(path) as handle:
            return [line.rstrip("\n") for line in handle]
    except (IOError, OSError):
        return []


def proc_state(pid):
    """The state letter of a process (R, S, T, Z, ...), None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def wait_child_stopped(proc, bound_s=BOUND_S):
    """Wait until the child ``proc`` (a Popen) is stopped, or has ended: True when stopped; False when it ended (its
    returncode is then set)."""
    deadline = time.monotonic() + bound_s
    while True:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid:
            if os.WIFSTOPPED(status):
                return True
            proc.returncode = os.waitstatus_to_exitcode(status)
            return False
        assert time.monotonic() < deadline, "process %d neither stopped nor ended within %d s" % (proc.pid, bound_s)
        time.sleep(0.02)


def wait_stopped(find_pid, running, bound_s=BOUND_S):
    """Wait until the process that ``find_pid()`` names (None while there is none yet) is stopped: its pid. None when
    ``running()`` turns false first (the run ended without reaching the point)."""
    deadline = time.monotonic() + bound_s
    while True:
        pid = find_pid()
        if pid is not None and proc_state(pid) == "T":
            return pid
        if not running():
            return None
        assert time.monotonic() < deadline, "the run did not reach its stop point within %d s" % bound_s
        time.sleep(0.02)


def _stat(pid):
    """(state, ppid, pgid) of a process, None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root):
    """{pid: process group} of every live process below ``root`` (ansible's workers call setsid(): their modules
    and the programs those run are in the workers' groups, not in ansible-playbook's)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat and stat[0] not in ("Z", "X"):
                children.setdefault(stat[1], []).append((int(entry), stat[2]))
    out, todo = {}, [root]
    while todo:
        for pid, pgid in children.get(todo.pop(), []):
            out[pid] = pgid
            todo.append(pid)
    return out


def wait_gone(pids, bound_s=120):
    """Wait (bounded) until none of ``pids`` is alive (zombies count as gone)."""
    deadline = time.monotonic() + bound_s
    while True:
        alive = [p for p in pids if (_stat(p) or ("X",))[0] not in ("Z", "X")]
        if not alive:
            return
        assert time.monotonic() < deadline, "processes %s of the killed run still alive after %d s" % (alive, bound_s)
        time.sleep(0.1)
