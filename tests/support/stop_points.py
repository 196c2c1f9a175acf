"""Wait for a process that stopped itself (SIGSTOP) at a point the test chose, so the test can kill it exactly there.

Tests must not place a kill or a fault by sleeping: on a loaded machine the run is elsewhere when the sleep ends. The
code under test stops itself instead, at a point a test hook names: the simulator after its N-th mutating call
(SimulatedBackend.stop_after), ansible-playbook at the start of its N-th task or of a named one
(tests/support/callback_plugins/task_progress.py). These helpers wait for that stop, polling with a bound: how long
the run takes to get there changes nothing but the wait.
"""
import os
import time

BOUND_S = 300


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
