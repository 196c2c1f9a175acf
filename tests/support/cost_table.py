"""The suite's per-file cost table (issue 49), a pytest plugin (tests/conftest.py loads it).

Per test (setup, call and teardown together), in the process that runs it: CPU seconds (getrusage of the process and
of the children it waited for: the ansible-playbook and ansible processes the test ran, and everything they waited
for), wall seconds, and the ansible runs the test started: ansible-playbook runs, ad-hoc ansible runs and the module
runs inside them, counted by the test-only callback tests/support/callback_plugins/ansible_runs.py into a file per
worker that GPUOPS_TEST_ANSIBLE_RUNS names (every ansible command of tests.support.ansible_run.ansible_env loads that
callback). Nothing here starts a process or fails a test: a few system calls per test.

Each pytest process that ran tests (each xdist worker) writes its rows to build/test-costs/<worker>.json at the end
of its session; the main process then merges them into build/test-logs/test-costs.md and .json (per file: tests,
worker-seconds of CPU and wall, runs; the costliest first: scripts/test_budget.py's merge). scripts/test_budget.py's
trend command keeps the table and its trend in docs/readings/test-costs.md. Off with `-p no:tests.support.cost_table`.

Limits: a module- or session-scoped fixture is charged to the test whose setup or teardown ran it; a process a test
leaves running is charged to the test during which it is waited for (its runs' lines to the test during which they
are written); an ansible run started with an environment of its own, without ansible_env's callback path or this
variable, is not counted (its CPU is). The session's module server (tests/support/compile_cache/gpuops_module_server.py)
runs the module runs of most tests' ansible commands as its own children: its CPU seconds, which it counts as it reaps
each run, are added while it runs, so that a module run is charged to the test whose ansible command started it (and,
once the server has ended and been waited for, they are in this process's children's).
"""
import importlib.util
import json
import os
import resource
import time
import uuid

import pytest

from tests.support.ansible_run import ROOT
from tests.support.compile_cache import gpuops_module_server as module_server

VARIABLE = "GPUOPS_TEST_ANSIBLE_RUNS"    # the callback's file (tests/support/callback_plugins/ansible_runs.py)
RUN_VARIABLE = "GPUOPS_TEST_COST_RUN"    # the main process's run id, which its xdist workers inherit
# where the rows and the table go: build/ of the checkout, or the folder GPUOPS_TEST_COSTS_DIR names (this plugin's own
# test runs a pytest of its own there, beside the suite's run)
OUT = os.environ.get("GPUOPS_TEST_COSTS_DIR") or os.path.join(ROOT, "build")
WORKERS_DIR = os.path.join(OUT, "test-costs")
TABLE = os.path.join(OUT, "test-logs", "test-costs")

_SPEC = importlib.util.spec_from_file_location("test_budget", os.path.join(ROOT, "scripts", "test_budget.py"))
test_budget = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(test_budget)


def cpu_seconds():
    """User and system CPU seconds of this process and of the children it has waited for, and of the session's module
    server while it runs (its module runs are its children, not the ansible commands': gpuops_module_server.py)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + module_server.running_cpu()


def parse_runs(text):
    """The counts in the callback's lines: "start playbook", "start adhoc", "modules N"."""
    counts = {"playbook_runs": 0, "adhoc_runs": 0, "module_runs": 0}
    for line in text.splitlines():
        words = line.split()
        if words == ["start", "playbook"]:
            counts["playbook_runs"] += 1
        elif words == ["start", "adhoc"]:
            counts["adhoc_runs"] += 1
        elif len(words) == 2 and words[0] == "modules" and words[1].isdigit():
            counts["module_runs"] += int(words[1])
    return counts


class RunsFile(object):
    """The callback's file for this process: take() returns the counts of the lines written since the last take()."""

    def __init__(self, path):
        self.path = path
        self.offset = 0

    def take(self):
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            data = b""
        end = data.rfind(b"\n") + 1         # a line still being written waits for the next take()
        self.offset += end
        return parse_runs(data[:end].decode("utf-8", "replace"))


class CostRecorder(object):
    def __init__(self, config):
        workerinput = getattr(config, "workerinput", None)
        self.worker = workerinput["workerid"] if workerinput else "main"
        self.run = os.environ.get(RUN_VARIABLE)
        self.args = list(config.invocation_params.args)
        self.started = time.monotonic()
        self.rows = []
        self.table = None
        self.outcomes = {}
        self.outside = dict.fromkeys(("playbook_runs", "adhoc_runs", "module_runs"), 0)
        self.previous = self.runs = None

    def _start(self):
        """At the first test (an xdist main process runs none): the callback's file, named in the environment that
        the tests' ansible commands inherit."""
        os.makedirs(WORKERS_DIR, exist_ok=True)
        path = os.path.join(WORKERS_DIR, "%s.runs" % self.worker)
        with open(path, "w"):
            pass
        self.previous = os.environ.get(VARIABLE)
        os.environ[VARIABLE] = path
        self.runs = RunsFile(path)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.runs is None:
            self._start()
        for key, value in self.runs.take().items():      # what ran between tests
            self.outside[key] += value
        cpu, wall = cpu_seconds(), time.monotonic()
        yield
        row = {"test": item.nodeid, "file": item.nodeid.split("::", 1)[0],
               "cpu_s": round(cpu_seconds() - cpu, 3), "wall_s": round(time.monotonic() - wall, 3),
               "outcome": self.outcomes.pop(item.nodeid, None)}
        row.update(self.runs.take())
        self.rows.append(row)

    def pytest_runtest_logreport(self, report):
        # the test's outcome over its phases: failed (an error in setup or teardown too) over skipped over passed
        rank = {"passed": 0, "skipped": 1, "failed": 2}
        before = self.outcomes.get(report.nodeid)
        if before is None or rank.get(report.outcome, 0) > rank.get(before, 0):
            self.outcomes[report.nodeid] = report.outcome

    def write(self):
        if not self.rows and self.worker == "main":
            return
        for key, value in (self.runs.take() if self.runs else {}).items():     # after the last test
            self.outside[key] += value
        tested = sum(row["cpu_s"] for row in self.rows)
        total = cpu_seconds()
        doc = {"worker": self.worker, "run": self.run, "args": self.args, "rows": self.rows,
               "cpu_s": round(total, 2), "wall_s": round(time.monotonic() - self.started, 2),
               "outside": dict(self.outside, cpu_s=round(total - tested, 2))}
        os.makedirs(WORKERS_DIR, exist_ok=True)
        path = os.path.join(WORKERS_DIR, "%s.json" % self.worker)
        with open(path + ".part", "w") as handle:
            json.dump(doc, handle)
        os.replace(path + ".part", path)

    def close(self):
        if self.runs is None:
            return
        if self.previous is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = self.previous


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        # the main process: a run id its workers inherit, and no rows of an earlier run left to merge
        os.environ[RUN_VARIABLE] = uuid.uuid4().hex
        for name in os.listdir(WORKERS_DIR) if os.path.isdir(WORKERS_DIR) else ():
            if name.endswith((".json", ".runs", ".part")):
                os.remove(os.path.join(WORKERS_DIR, name))
    config.pluginmanager.register(CostRecorder(config), "gpuops_cost_recorder")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    recorder = session.config.pluginmanager.get_plugin("gpuops_cost_recorder")
    if recorder is None:
        return
    recorder.write()
    if hasattr(session.config, "workerinput"):
        return
    # the main process: its workers have written theirs (xdist's workers end their session before it ends its own)
    docs = test_budget.read_workers(WORKERS_DIR, os.environ.get(RUN_VARIABLE))
    if docs and any(doc["rows"] for doc in docs):
        recorder.table = test_budget.merge(docs)
        test_budget.write_table(recorder.table, TABLE)


def pytest_terminal_summary(terminalreporter, config):
    recorder = config.pluginmanager.get_plugin("gpuops_cost_recorder")
    table = getattr(recorder, "table", None)
    if table:
        totals = table["totals"]
        terminalreporter.write_line(
            "test costs: %d tests in %d files, %.1f worker-s CPU, %.1f worker-s wall, %d playbook, %d ad-hoc and %d "
            "module runs; per file: %s.md" % (totals["tests"], totals["files"], totals["cpu_s"], totals["wall_s"],
                                              totals["playbook_runs"], totals["adhoc_runs"], totals["module_runs"],
                                              os.path.relpath(TABLE)))


def pytest_unconfigure(config):
    recorder = config.pluginmanager.get_plugin("gpuops_cost_recorder")
    if recorder is not None:
        recorder.close()
