"""scripts/test.sh (`make test`): the gates (make check, make compat) run beside pytest, and the run fails when any
of the three fails, saying which, with a failed gate's log tail after pytest's summary. Its budget lines (issue 49) come
last, whatever failed, and never change the exit status.

The script runs in a scratch copy of the layout it expects (scripts/test.sh, scripts/test_budget.py, .venv/bin/python),
with stand-ins for `make` and pytest that record how they were called and exit as the test says: nothing real runs but
scripts/test_budget.py (with a small CPU probe)."""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from tests.support.ansible_run import ROOT

# the stand-in `make`: the last argument is the gate; its output names the gate; GATE_FAIL names one to fail
FAKE_MAKE = r"""#!/bin/sh
gate=""
for a in "$@"; do gate=$a; done
echo "make $* (nice $(nice))" >> "$RECORD"
echo "gate $gate ran"
case " $GATE_FAIL " in *" $gate "*) echo "gate $gate: the error"; exit 2 ;; esac
exit 0
"""
# the stand-in .venv/bin/python: as python -m pytest ARGS..., records its arguments and exits PYTEST_RC; as anything
# else (scripts/test_budget.py), the real Python
FAKE_PYTHON = r"""#!/bin/sh
[ "$1" = -m ] || exec "$REAL_PYTHON" "$@"
echo "python $*" >> "$RECORD"
echo "== 3 passed in 0.01s =="
exit "${PYTEST_RC:-0}"
"""


def _executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def layout(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("test.sh", "test_budget.py"):
        shutil.copy(os.path.join(ROOT, "scripts", name), str(repo / "scripts" / name))
    (repo / ".venv" / "bin").mkdir(parents=True)
    _executable(repo / ".venv" / "bin" / "python", FAKE_PYTHON)
    tools = tmp_path / "bin"
    tools.mkdir()
    _executable(tools / "make", FAKE_MAKE)
    (repo / "build" / "test-logs").mkdir(parents=True)
    (repo / "build" / "test-logs" / "stale.log").write_text("from an earlier run")
    return repo, tools, tmp_path / "record"


def _env(tools, record, **more):
    return dict(os.environ, PATH=str(tools) + os.pathsep + os.environ["PATH"], RECORD=str(record),
                REAL_PYTHON=sys.executable, GPUOPS_TEST_BUDGET_PROBE_ROUNDS="20000", **more)


def _run(layout, fail="", pytest_rc=0):
    repo, tools, record = layout
    env = _env(tools, record, GATE_FAIL=fail, PYTEST_RC=str(pytest_rc))
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh"), "-k", "lab", "--durations=0"], cwd=str(repo),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=60, check=False)
    return proc, record.read_text().splitlines()


def test_every_part_passes(layout):
    proc, calls = _run(layout)
    assert proc.returncode == 0, proc.stdout
    # pytest in the foreground with make test's arguments; each gate niced, with -k, once
    assert "python -m pytest -n 2 --dist worksteal -k lab --durations=0" in calls, calls
    for gate in ("check", "compat"):
        made = [c for c in calls if c.startswith("make ") and c.split()[-3] == gate]
        assert made == ["make -k --no-print-directory %s (nice 10)" % gate], calls
        assert "test: make %s passed (in " % gate in proc.stdout, proc.stdout
    # pytest's summary first, then one line per gate; the gates' output only in their logs
    lines = proc.stdout.splitlines()
    verdicts = [i for i, line in enumerate(lines) if line.startswith(("test: make check passed", "test: make compat passed"))]
    assert len(verdicts) == 2 and lines.index("== 3 passed in 0.01s ==") < min(verdicts), lines
    assert "gate check ran" not in proc.stdout
    logs = layout[0] / "build" / "test-logs"
    assert (logs / "check.log").read_text() == "gate check ran\n"
    assert (logs / "compat.log").read_text() == "gate compat ran\n"
    assert not (logs / "stale.log").exists()
    # the budget last: pytest's and each gate's CPU (measured: the stand-ins take next to none), the probe before and
    # after; the same in budget.json
    assert lines[-2].startswith("test: budget: wall ") and lines[-1].startswith("test: budget: CPU probe "), lines
    assert min(verdicts) < len(lines) - 2
    assert re.search(r"CPU: pytest \d+\.\d s \(workers and their ansible runs\), "
                     r"gates check \d+\.\d s, compat \d+\.\d s \(beside pytest\)$", lines[-2]), lines[-2]
    budget = json.loads((logs / "budget.json").read_text())
    assert budget["interrupted"] is False and budget["pytest"]["exit"] == 0 and budget["pytest"]["cpu_s"] >= 0
    assert set(budget["gates"]) == {"check", "compat"} and all(g["exit"] == 0 for g in budget["gates"].values())
    assert budget["probe"]["before_s"] > 0 and budget["probe"]["after_s"] > 0 and budget["probe"]["rounds"] == 20000


def test_a_failed_gate_fails_the_run_and_shows_its_log(layout):
    proc = _run(layout, fail="compat")[0]
    assert proc.returncode == 1, proc.stdout
    assert "test: make check passed" in proc.stdout
    assert "test: make compat FAILED (exit 2 after " in proc.stdout
    assert "    gate compat: the error" in proc.stdout        # its log's tail, indented
    assert proc.stdout.rstrip().endswith("test: FAILED")


def test_a_failed_pytest_fails_the_run_though_the_gates_pass(layout):
    proc = _run(layout, pytest_rc=1)[0]
    assert proc.returncode == 1, proc.stdout
    assert "test: make check passed" in proc.stdout and "test: make compat passed" in proc.stdout
    assert proc.stdout.rstrip().endswith("test: FAILED")
    # the budget still measured, just before the verdict
    lines = proc.stdout.splitlines()
    assert lines[-3].startswith("test: budget: wall ") and lines[-2].startswith("test: budget: CPU probe "), lines
    assert json.loads((layout[0] / "build" / "test-logs" / "budget.json").read_text())["pytest"]["exit"] == 1


def test_the_budget_never_changes_the_exit_status(layout):
    """A budget that cannot be measured (here: its script missing) is a message; the run's status is its tests'."""
    (layout[0] / "scripts" / "test_budget.py").unlink()
    proc, calls = _run(layout)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.rstrip().endswith("test: budget: not measured (scripts/test_budget.py failed)"), proc.stdout
    assert "python -m pytest -n 2 --dist worksteal -k lab --durations=0" in calls


def test_ctrl_c_stops_pytest_and_the_gates(layout, tmp_path):
    """A terminal's Ctrl-C (SIGINT to the foreground process group): pytest stops, the script stops the gates in their
    own process groups and exits 130; nothing it started keeps running."""
    repo, tools, record = layout
    pids = tmp_path / "pids"
    pids.mkdir()
    sleeper = "echo $$ > %s/$(basename $0).$$\nexec sleep 300\n" % pids
    _executable(tools / "make", "#!/bin/sh\n" + sleeper)
    _executable(repo / ".venv" / "bin" / "python", '#!/bin/sh\n[ "$1" = -m ] || exec "$REAL_PYTHON" "$@"\n' + sleeper)

    def default_sigint():  # a shell started in the background ignores SIGINT; a terminal's does not
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    proc = subprocess.Popen(["bash", str(repo / "scripts" / "test.sh")], cwd=str(repo), start_new_session=True,
                            preexec_fn=default_sigint, env=_env(tools, record),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    deadline = time.monotonic() + 30
    while len(os.listdir(str(pids))) < 3:          # pytest and both gates started
        assert time.monotonic() < deadline and proc.poll() is None, os.listdir(str(pids))
        time.sleep(0.05)
    started = [int(name.rsplit(".", 1)[1]) for name in os.listdir(str(pids))]
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 130, out
    # the budget of what ran so far: the wall time, no probe after (and no CPU figure of the killed pytest)
    assert "test: budget (interrupted): wall " in out and "s before, none after" in out, out
    assert json.loads((repo / "build" / "test-logs" / "budget.json").read_text())["interrupted"] is True
    deadline = time.monotonic() + 10
    while [pid for pid in started if _alive(pid)]:
        assert time.monotonic() < deadline, [pid for pid in started if _alive(pid)]
        time.sleep(0.05)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open("/proc/%d/stat" % pid) as handle:       # a zombie waiting for its parent is not running
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
