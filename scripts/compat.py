"""`make compat` (part of `make test`): the collection on the other ansible-core versions that meta/runtime.yml's
requires_ansible promises, the oldest and the newest (issue 27). The main version (requirements-lab.txt) runs the
whole suite; each version here, from its own virtualenv tools/compat/<version>/ (requirements-compat-<version>.txt,
with the Python that file names, installed by `make setup`), runs:

1. sanity: ansible-test sanity of that ansible-core (scripts/sanity.sh with SANITY_VENV), whose tests differ by
   version;
2. lab: `make lab`'s run, site.yml on inventories/lab (every lab node), from scratch, then again: the first run must
   change something on every node and fail on none, the second must report changed=0 on every node;
3. molecule: the default scenario (extensions/molecule/default: converge, idempotence, verify).

The lab and molecule steps run their modules as the tests do: forked from a warm interpreter of that version's Python
and ansible-core (tests/support/compile_cache/gpuops_module_server.py), where it starts.

    .venv/bin/python scripts/compat.py                   # every version, every step
    .venv/bin/python scripts/compat.py 2.16 --steps lab  # one version, some steps

The versions run side by side (one thread each: on 2 cores the wall time is about that of the slower one); within a
version the steps run in order, and every step runs even after one failed. Each step's output is kept in
build/compat/<version>/<step>.log; the lab's simulated state lives in build/compat/<version>/lab-state, never in the
checkout's lab-state/. Exit status 1 when any step of any version failed.

Time limit: one deadline for the whole run (--deadline, 80 minutes from its start), not one per step. It is there for
a hang, to report the step and its log before CI's own 90-minute limit stops everything unreported. A step's wall
time says little about a hang: `make test` runs compat niced beside pytest, where ansible-test sanity of 2.16, 156
CPU s alone, ran past the 1800 s per-step limit this file used to have (CI's run of a8fd8cf). A step past the
deadline is stopped with its whole process group (SIGTERM, then SIGKILL), ansible-test's and molecule's children too.
"""
import argparse
import contextlib
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.support.ansible_run import COMPILE_CACHE, with_compile_cache  # noqa: E402  # pylint: disable=wrong-import-position
from tests.support.compile_cache import gpuops_module_server as module_server  # noqa: E402  # pylint: disable=wrong-import-position

BUILD = os.path.join(ROOT, "build", "compat")
STEPS = ("sanity", "lab", "molecule")
DEADLINE = 4800      # seconds from compat's start (see above)
STOP_GRACE = 10      # seconds between a stopped step's SIGTERM and its SIGKILL
# The PLAY RECAP line of a host, as every ansible-core since 2.9 prints it with the default callback.
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
MOLECULE_RECAP = re.compile(r"^default\s*:\s*actions=(\d+)\s+successful=(\d+)\s.*failed=(\d+)", re.M)


def versions():
    """{version: (requirements file, Python X.Y)} of every requirements-compat-<version>.txt."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "requirements-compat-*.txt"))):
        version = os.path.basename(path)[len("requirements-compat-"):-len(".txt")]
        with open(path) as handle:
            python = re.search(r"^# python: *([0-9.]+)", handle.read(), re.M)
        found[version] = (path, python.group(1) if python else None)
    return found


def venv_problem(version, requirements, python):
    """Why tools/compat/<version> cannot run (not installed, or installed from other requirements), or None."""
    venv = os.path.join(ROOT, "tools", "compat", version)
    if not os.path.exists(os.path.join(venv, "bin", "ansible-playbook")):
        return ("ansible-core %s is not installed in %s: it needs Python %s (python%s on PATH or under pyenv), then "
                "`bash scripts/setup.d/compat.sh`" % (version, os.path.relpath(venv, ROOT), python, python))
    stamp = os.path.join(venv, ".requirements")
    wanted = b""
    for path in (requirements, os.path.join(ROOT, "requirements.txt")):
        with open(path, "rb") as handle:
            wanted += handle.read()
    if not os.path.exists(stamp) or open(stamp, "rb").read() != wanted:
        return "%s was installed from other requirements than %s: run `bash scripts/setup.d/compat.sh`" % (
            os.path.relpath(venv, ROOT), os.path.basename(requirements))
    return None


def recap(output):
    """{host: {"ok", "changed", "unreachable", "failed"}} from an ansible-playbook PLAY RECAP."""
    return dict((m.group(1), dict(ok=int(m.group(2)), changed=int(m.group(3)), unreachable=int(m.group(4)),
                                  failed=int(m.group(5))))
                for m in RECAP.finditer(output))


def lab_hosts():
    """The hosts of inventories/lab (its hosts.yml), sorted."""
    with open(os.path.join(ROOT, "inventories", "lab", "hosts.yml")) as handle:
        inventory = yaml.safe_load(handle)
    hosts = set()

    def walk(group):
        hosts.update((group or {}).get("hosts") or {})
        for child in ((group or {}).get("children") or {}).values():
            walk(child)
    for group in inventory.values():
        walk(group)
    return sorted(hosts)


def run_problems(name, output, returncode, hosts, rerun):
    """What is wrong with one ansible-playbook run of the lab: a non-zero status, a host missing from the recap, a
    host failed or unreachable; on the first run a host that nothing changed on, on the re-run one that changed."""
    problems = []
    if returncode != 0:
        problems.append("%s: ansible-playbook exited with status %d" % (name, returncode))
    stats = recap(output)
    for host in hosts:
        if host not in stats:
            problems.append("%s: %s is not in the PLAY RECAP" % (name, host))
            continue
        counts = stats[host]
        if counts["failed"] or counts["unreachable"]:
            problems.append("%s: %s failed=%d unreachable=%d" % (name, host, counts["failed"], counts["unreachable"]))
        if rerun and counts["changed"] != 0:
            problems.append("%s: %s changed=%d (a re-run must change nothing)" % (name, host, counts["changed"]))
        if not rerun and counts["changed"] == 0:
            problems.append("%s: %s changed=0 on a first run from scratch (nothing was converged)" % (name, host))
    return problems


def molecule_problems(output, returncode):
    """What is wrong with a `molecule test -s default` run: a non-zero status, or a scenario recap that is missing or
    counts a failed action, or no successful idempotence step."""
    problems = []
    if returncode != 0:
        problems.append("molecule exited with status %d" % returncode)
    found = MOLECULE_RECAP.search(output)
    if not found:
        problems.append("molecule printed no recap of the default scenario")
    elif int(found.group(3)) or found.group(1) != found.group(2):
        problems.append("molecule: %s actions, %s successful, %s failed" % found.groups())
    if not re.search(r"idempotence\S*:\s*Executed: Successful", output):
        problems.append("molecule: the idempotence step did not succeed")
    return problems


class Version(object):
    """One ansible-core version's runs: its virtualenv, its scratch directory, the environment of its commands."""

    def __init__(self, version, deadline=None):
        self.version = version
        self.deadline = deadline if deadline is not None else time.monotonic() + DEADLINE  # (time.monotonic())
        self.venv = os.path.join(ROOT, "tools", "compat", version)
        self.dir = os.path.join(BUILD, version)
        self.results = []   # (step, seconds, problems, summary)

    def env(self, home=True):
        """The environment of its commands: its virtualenv first on PATH (molecule and ansible-test find ansible's
        commands there, the lab's nvidia-ctk stand-in its python3), then tools/ and what make put on PATH. With
        ``home``, a HOME of its own (molecule's ephemeral directory, ansible's temporary files), so that versions
        running side by side share nothing; ansible-test keeps the real HOME, where it caches its test venvs."""
        env = dict(os.environ)
        for var in ("VIRTUAL_ENV", "GPUOPS_SIMULATED_GPUS", "GPUOPS_SIMULATED_MACHINE", "K8S_AUTH_KUBECONFIG",
                    "K8S_AUTH_HOST", "KUBECONFIG", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_STDOUT_CALLBACK"):
            env.pop(var, None)
        env.update(PATH=os.pathsep.join([os.path.join(self.venv, "bin"), os.path.join(ROOT, "tools", "bin"),
                                         env.get("PATH", "")]),
                   ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", NO_COLOR="1",
                   ANSIBLE_TEST_COLOR="no", MOLECULE_NO_LOG="false")
        if home:
            env["HOME"] = os.path.join(self.dir, "home")
            os.makedirs(env["HOME"], exist_ok=True)
        return env

    def playbook_env(self):
        """env() for the steps that run the collection's playbooks (lab, molecule): with the tests' compile cache,
        as the tests' own ansible runs have it; entries are per Python version, so versions side by side share only
        what is the same."""
        return with_compile_cache(self.env(), default=COMPILE_CACHE)

    def call(self, log, argv, cwd=ROOT, env=None):
        """Run ``argv`` in a process group of its own, its output (stdout and stderr) appended to ``log``; (status,
        output). Past the deadline the whole group is stopped: status -1, the output says so."""
        env = env or self.env()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, start_new_session=True)
        killed = None
        while True:
            # in slices of at most 5 s, so that a deadline moved while the step runs is seen (the unit test moves it);
            # communicate() may be called again after its timeout without losing output
            left = self.deadline - time.monotonic()
            if left <= 0:
                killed = self._stop(proc)
                output = proc.communicate()[0]
                break
            try:
                output = proc.communicate(timeout=min(left, 5.0))[0]
                break
            except subprocess.TimeoutExpired:
                continue
        status = proc.returncode
        if killed:
            status = -1
            output += "\n(stopped with %s: compat's deadline passed; a hang, or a machine too busy)\n" % killed
        with open(log, "a") as handle:
            handle.write("$ %s\n%s\n" % (" ".join(argv), output))
        return status, output

    @staticmethod
    def _stop(proc):
        """SIGTERM to the step's whole process group (sanity.sh's EXIT trap removes its scratch copy), SIGKILL to
        whatever of it is left after STOP_GRACE seconds; the signal that ended the step's own process."""
        how = "SIGTERM"
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_GRACE)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            how = "SIGKILL"
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return how

    def about(self):
        """'ansible-core X on Python Y' of its virtualenv."""
        proc = subprocess.run([os.path.join(self.venv, "bin", "python"), "-c",
                               "import sys, ansible.release as r; print('ansible-core %s on Python %d.%d.%d' % "
                               "((r.__version__,) + sys.version_info[:3]))"],
                              stdout=subprocess.PIPE, universal_newlines=True, check=False)
        return proc.stdout.strip()

    def sanity(self, log):
        env = self.env(home=False)
        env["SANITY_VENV"] = self.venv
        status, output = self.call(log, ["bash", os.path.join(ROOT, "scripts", "sanity.sh")], env=env)
        tests = re.findall(r'^Running sanity test "([^"]+)"', output, re.M)
        problems = [] if status == 0 else ["ansible-test sanity failed (status %d): %s" % (
            status, "; ".join(re.findall(r"^ERROR: (.*)$", output, re.M)[:5]) or "see the log")]
        return problems, "%d sanity tests" % len(tests)

    @contextlib.contextmanager
    def served(self, env):
        """``env`` with this version's warm interpreter for module runs where it starts (its own Python and
        ansible-core, in build/compat/<version>/module-server: tests/support/compile_cache/gpuops_module_server.py),
        as the tests' runs have one; ``env`` as it is where it does not."""
        directory = module_server.socket_folder(os.path.join(self.dir, "module-server"))
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        server = module_server.Started(directory, env, python=os.path.join(self.venv, "bin", "python"))
        try:
            yield dict(env, **{module_server.VARIABLE: directory}) if server.ready() else env
        finally:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)

    def lab(self, log):
        state = os.path.join(self.dir, "lab-state")
        shutil.rmtree(state, ignore_errors=True)
        argv = [os.path.join(self.venv, "bin", "ansible-playbook"), "-i", os.path.join(ROOT, "inventories", "lab"),
                os.path.join(ROOT, "site.yml"), "-e", "gpuops_lab_state_dir=%s" % state]
        hosts = lab_hosts()
        problems, changed = [], []
        for name, rerun in (("converge", False), ("re-run", True)):
            with self.served(self.playbook_env()) as env:
                status, output = self.call(log, argv, env=env)
            problems += run_problems(name, output, status, hosts, rerun)
            stats = recap(output)
            changed.append("%s %s" % (name, ", ".join("%s changed=%s" % (h, stats.get(h, {}).get("changed", "?"))
                                                      for h in hosts)))
            if status != 0:
                break
        return problems, "; ".join(changed)

    def molecule(self, log):
        with self.served(self.playbook_env()) as env:
            status, output = self.call(log, [os.path.join(self.venv, "bin", "molecule"), "test", "-s", "default"],
                                       cwd=os.path.join(ROOT, "extensions"), env=env)
        found = MOLECULE_RECAP.search(output)
        return molecule_problems(output, status), (found.group(0).strip() if found else "no recap")

    def run(self, steps):
        os.makedirs(self.dir, exist_ok=True)
        print("compat %s: %s" % (self.version, self.about()), flush=True)
        for step in steps:
            log = os.path.join(self.dir, "%s.log" % step)
            if os.path.exists(log):
                os.remove(log)
            start = time.time()
            try:
                problems, summary = getattr(self, step)(log)
            except Exception as exc:  # a crash of this script must fail the step, not vanish in the thread
                problems, summary = ["%s: %r" % (step, exc)], "crashed"
            seconds = time.time() - start
            self.results.append((step, seconds, problems, summary))
            print("compat %s: %s %s in %.0f s: %s" % (self.version, step, "FAILED" if problems else "passed",
                                                      seconds, summary), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("versions", nargs="*", help="ansible-core versions (default: every requirements-compat-*.txt)")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated, of %s" % ", ".join(STEPS))
    parser.add_argument("--deadline", type=int, default=DEADLINE, metavar="SECONDS",
                        help="stop what still runs this long after the start (default %(default)s: a hang guard)")
    args = parser.parse_args(argv)
    known = versions()
    wanted = args.versions or sorted(known)
    steps = [s for s in args.steps.split(",") if s]
    unknown = [v for v in wanted if v not in known] + [s for s in steps if s not in STEPS]
    if unknown or not wanted:
        parser.error("unknown: %s (versions: %s; steps: %s)" % (", ".join(unknown) or "no version",
                                                                ", ".join(sorted(known)), ", ".join(STEPS)))
    failed = []
    for version in wanted:
        problem = venv_problem(version, *known[version])
        if problem:
            failed.append("%s: %s" % (version, problem))
    if failed:
        print("compat: FAILED\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    if args.deadline <= 0:
        parser.error("--deadline must be a positive number of seconds, not %d" % args.deadline)
    deadline = time.monotonic() + args.deadline
    runs = [Version(v, deadline) for v in wanted]
    start = time.time()
    threads = [threading.Thread(target=r.run, args=(steps,)) for r in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("compat: %s in %.0f s (wall)" % (", ".join(wanted), time.time() - start))
    for run in runs:
        for step, seconds, problems, summary in run.results:
            print("  %-5s %-8s %-6s %4.0f s  %s" % (run.version, step, "FAILED" if problems else "ok", seconds,
                                                    summary))
            if problems:
                log = os.path.join(run.dir, "%s.log" % step)
                if os.path.exists(log):
                    with open(log) as handle:
                        tail = handle.read().splitlines()[-40:]
                    print("\n".join(["    " + line for line in tail]))
                for problem in problems:
                    print("    !! %s" % problem)
                print("    (whole output: %s)" % os.path.relpath(log, ROOT))
                failed.append("%s %s" % (run.version, step))
    if failed:
        print("compat: FAILED: %s" % ", ".join(failed), file=sys.stderr)
        return 1
    print("compat: every step passed on ansible-core %s" % ", ".join(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
