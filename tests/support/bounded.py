"""Run a function in a forked child under a memory bound and a wall-clock bound; get back what it returned.

The fuzzer (tests/reliability/test_fuzz_inputs.py) runs every module in-process, but an input that makes a module
allocate memory in proportion to a number the user typed must not take the test machine down with it, and one that
makes it loop or wait for ever must not hang the suite. So each run happens in a child made with os.fork() (cheap:
everything is imported already) and SIGKILLed, with every program it started, after ``wall_s`` seconds; within
memory_bound(), a soft RLIMIT_AS of the child's current address space plus ``memory_mib`` makes allocation past it
raise MemoryError, which the fuzzer reports.
Programs the child starts inherit the soft limit; the tool wrappers in tests/support/rigs.py lift it (a soft limit
can be raised again up to the hard one, which is left alone).

run_series() runs many such units in ONE forked child: the child calls ``step()`` as each starts, and the wall-clock
bound applies to each unit from its step (a fork of a large pytest worker costs more than a filter's example: on the
2-core machines about 25 ms of system time, against a few ms for the example itself); ``in_series(step)`` is
run_bounded's stand-in inside that child, so that code written for run_bounded runs there unchanged. Only for units
that leave no state behind (a filter's pure function): every unit of a series shares the child's process.
"""
import contextlib
import gc
import json
import os
import resource
import select
import signal
import time
import traceback


class Outcome(object):
    """``value``: what the function returned (JSON round-tripped); ``error``: the traceback of an exception that
    escaped it; ``timed_out``/``signal``: the child was killed (by us after wall_s, or by a signal); ``seconds``."""

    def __init__(self, value=None, error=None, timed_out=False, signal=None, seconds=0.0, raw=None, steps=0):
        self.value = value
        self.error = error
        self.timed_out = timed_out
        self.signal = signal
        self.seconds = seconds
        self.raw = raw
        self.steps = steps      # run_series: how many units had started (the last: the one a kill stopped)

    def problem(self, wall_s, memory_mib):
        """None when the child returned normally; else a one-line description and the details."""
        where = " in its unit %d" % self.steps if self.steps else ""
        if self.timed_out:
            return "ran past the wall-clock bound of %s s%s" % (wall_s, where)
        if self.signal is not None:
            return "the child died of signal %d%s" % (self.signal, where)
        if self.error is not None:
            if "MemoryError" in self.error.strip().splitlines()[-1]:
                return "exceeded the memory bound of %d MiB:\n%s" % (memory_mib, self.error)
            return "an exception escaped:\n%s" % self.error
        if self.value is None and self.raw is not None:
            return "the child's report cannot be read: %r" % self.raw[-2000:]
        return None


def _address_space():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def memory_bound(memory_mib):
    """Within the block, the process may grow by at most ``memory_mib`` MiB of address space (else MemoryError)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + memory_mib * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _step(write_fd):
    """In run_series' child: one unit starts (a NUL byte, which the JSON report never holds: json escapes it)."""
    def step():
        os.write(write_fd, b"\0")
    return step


def _report(call):
    """{"value": what call() returned} or {"error": the traceback of what escaped it}, as JSON text."""
    try:
        report = {"value": call()}
    except BaseException:                       # noqa: B902 - everything that escapes is the finding
        report = {"error": traceback.format_exc()}
    return json.dumps(report, default=repr)


def _child(func, write_fd):
    """In the child: run func(step), write its _report, _exit."""
    try:
        data = _report(lambda: func(_step(write_fd))).encode("utf-8", "surrogatepass")
        while data:
            data = data[os.write(write_fd, data):]
    finally:
        os._exit(0)


def run_bounded(func, wall_s=60):
    """func() in a forked child (its return value must be JSON-serialisable); returns an Outcome. func uses
    memory_bound() around what it wants bounded."""
    return _run_forked(lambda step: func(), wall_s)


def run_series(func, wall_s=60):
    """func(step) in one forked child, which calls step() as each of its units starts; the wall-clock bound is each
    unit's, from its step (before the first: from the fork). Returns an Outcome whose ``steps`` counts the units
    started."""
    return _run_forked(func, wall_s)


def in_series(step):
    """run_bounded's stand-in in run_series' child: func() in this process as one unit (step() first), what it
    returned round-tripped through JSON and what escaped it reported, as run_bounded's child would."""
    def run(func, wall_s=None):                 # wall_s: the series' own bound applies
        step()
        start = time.time()
        raw = _report(func)
        report = json.loads(raw)
        return Outcome(value=report.get("value"), error=report.get("error"), seconds=time.time() - start, raw=raw)
    return run


def _run_forked(func, wall_s):
    """func(step) in a forked child under the wall-clock bound (restarted at each step); an Outcome."""
    read_fd, write_fd = os.pipe()
    start = time.time()
    # The child's collector leaves alone what it inherited (the pytest worker's heap: every module imported, the
    # session's objects), as the tests' sitecustomize does for ansible's forks: a collection in the child would walk
    # that heap and write every page of it (copy-on-write) for objects the child only reads.
    gc.freeze()
    try:
        pid = os.fork()
        if pid == 0:                            # pragma: no cover - runs in the child
            os.close(read_fd)
            os.setpgid(0, 0)
            _child(func, write_fd)
    finally:
        gc.unfreeze()                           # the parent's, also where the fork failed
    os.close(write_fd)
    chunks, timed_out, steps = [], False, 0
    deadline = start + wall_s
    try:
        while True:
            left = deadline - time.time()
            if left <= 0:
                timed_out = True
                break
            ready = select.select([read_fd], [], [], min(left, 1.0))[0]
            if ready:
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                started = chunk.count(b"\0")
                if started:                     # a unit started: its own bound from now
                    steps += started
                    deadline = time.time() + wall_s
                    chunk = chunk.replace(b"\0", b"")
                chunks.append(chunk)
    finally:
        os.close(read_fd)
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)      # the child and every program it started
            except OSError:
                pass
        status = os.waitpid(pid, 0)[1]
    seconds = time.time() - start
    if timed_out:
        return Outcome(timed_out=True, seconds=seconds, steps=steps)
    if os.WIFSIGNALED(status):
        return Outcome(signal=os.WTERMSIG(status), seconds=seconds, steps=steps)
    raw = b"".join(chunks).decode("utf-8", "surrogatepass")
    try:
        report = json.loads(raw)
    except ValueError:
        return Outcome(raw=raw, seconds=seconds, steps=steps)
    return Outcome(value=report.get("value"), error=report.get("error"), seconds=seconds, raw=raw, steps=steps)
