"""Run real ansible / ansible-playbook from the repository's .venv against this checkout's collection."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bin_dir():
    """Where ansible's commands are: GPUOPS_TEST_ANSIBLE_BIN where set (another ansible-core's virtualenv, e.g.
    tools/compat/2.16/bin: a site test run on the oldest core that meta/runtime.yml allows), else beside this Python
    (the repository's .venv), else on PATH (a GPU host where ansible-core was installed with pip --target)."""
    chosen = os.environ.get("GPUOPS_TEST_ANSIBLE_BIN")
    if chosen:
        chosen = os.path.join(ROOT, chosen)
        if not os.path.exists(os.path.join(chosen, "ansible-playbook")):
            raise RuntimeError("GPUOPS_TEST_ANSIBLE_BIN=%s has no ansible-playbook" % chosen)
        return chosen
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "ansible")):
        return here
    found = shutil.which("ansible")
    return os.path.dirname(found) if found else here


BIN = _bin_dir()
COMPILE_CACHE_PATH = os.path.join(ROOT, "tests", "support", "compile_cache")
COMPILE_CACHE = os.path.join(ROOT, "build", "test-compile-cache")
SESSION_TMPDIR = "GPUOPS_TEST_TMPDIR"


def with_compile_cache(env, default=None):
    """``env`` with the tests' compile cache (tests/support/compile_cache/sitecustomize.py) where it names one in
    GPUOPS_TEST_COMPILE_CACHE (``default`` where unset; ``off``: none): its directory first on PYTHONPATH. The
    tests name it for their session (tests/conftest.py), so the benches they run have it too; a bench started by
    hand runs without it (its figures are a node's real cost)."""
    if default:
        env.setdefault("GPUOPS_TEST_COMPILE_CACHE", default)
    if env.get("GPUOPS_TEST_COMPILE_CACHE", "off").lower() not in ("", "off"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (COMPILE_CACHE_PATH, env.get("PYTHONPATH")) if p)
    else:
        env.pop("GPUOPS_TEST_COMPILE_CACHE", None)
    return env


def ansible_env(extra=None):
    env = dict(os.environ)
    env.pop("GPUOPS_SIMULATED_GPUS", None)
    env.pop("GPUOPS_SIMULATED_MACHINE", None)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, ".collections"),
        "ANSIBLE_STDOUT_CALLBACK": "json_results",
        "ANSIBLE_CALLBACK_PLUGINS": os.path.join(ROOT, "tests", "support", "callback_plugins"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
    })
    env.update(extra or {})
    # The session's folder for the temporary files of its ansible commands (tests/conftest.py names it under pytest's
    # own session folder, which pytest removes after three newer sessions): what a killed module or tool leaves there
    # (AnsiballZ's payload folder, which ansible-core removes in a `finally` that a SIGKILL skips, a private copy)
    # stays out of the machine's /tmp, where CI runs next. A caller's TMPDIR (a site test's own folder) is kept.
    session_tmp = env.get(SESSION_TMPDIR)
    if session_tmp and "TMPDIR" not in (extra or {}):
        os.makedirs(session_tmp, exist_ok=True)
        env["TMPDIR"] = session_tmp
    # The modules' bytecode cache (plugins/module_utils/common/_bytecode_cache.py) where a GPU node keeps it, under the run's
    # HOME, named explicitly so that a machine's PYTHONDONTWRITEBYTECODE does not turn it off for the tests: they run
    # the modules the way a default node does (a fleet of the bench with its own HOME starts with an empty cache).
    env.setdefault("GPUOPS_BYTECODE_CACHE", os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache",
                                                         "gpuops.nvidia", "bytecode"))
    return with_compile_cache(env)


def module_process_env(**extra):
    """The environment of a module started as its own process, ``python -m ansible_collections.gpuops.nvidia.plugins.
    modules.<name> <args file>`` (the kill and concurrency tests, test_cluster_lease's), ``extra`` added: the collection on PYTHONPATH and
    the tests' start-up hooks (with_compile_cache), so that where no bytecode is written (as on CI) its modules are not
    compiled from source in every such process (issue 49)."""
    return with_compile_cache(dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections"), **extra))


def molecule_env(home, **extra):
    """The environment the molecule tests run molecule with (``extra`` added): this checkout's bin first on PATH, the
    test's HOME, the repository's ansible.cfg, no simulated GPU or cluster of the caller's, and the tests' start-up
    hooks (with_compile_cache), as every other test's ansible runs and compat's molecule step have them (issue 49)."""
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ.get("PATH", ""),
               HOME=str(home), MOLECULE_NO_LOG="false", ANSIBLE_NOCOLOR="1", NO_COLOR="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), **extra)
    for var in ("GPUOPS_SIMULATED_GPUS", "GPUOPS_SIMULATED_MACHINE", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST"):
        env.pop(var, None)
    return with_compile_cache(env)


def run_module(module, args=None, env=None, check=False, diff=False, python=None):
    """Run one module on localhost; returns (result dict, completed process)."""
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-m", module,
           "-e", "ansible_python_interpreter=%s" % (python or sys.executable)]
    if args is not None:
        cmd += ["-a", json.dumps(args) if isinstance(args, dict) else args]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    proc = subprocess.run(cmd, cwd=ROOT, env=ansible_env(env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    result = data["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result, proc


def playbook_command(playbook, inventory=None, extra_vars=None, env=None, check=False, diff=False, args=()):
    """The ansible-playbook command line and environment that run_playbook runs (for tests that start it)."""
    cmd = [os.path.join(BIN, "ansible-playbook"), playbook]
    if inventory:
        cmd += ["-i", inventory]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    cmd += list(args)
    return cmd, ansible_env(env)


def parse_output(stdout):
    """The json_results callback's document in ansible-playbook's stdout, or None when there is none."""
    try:
        return json.loads(stdout[stdout.index("{"):])
    except ValueError:
        return None


def run_playbook(playbook, inventory=None, extra_vars=None, env=None, check=False, diff=False, args=()):
    """Run a playbook; returns (parsed json callback output, completed process)."""
    cmd, full_env = playbook_command(playbook, inventory, extra_vars, env, check, diff, args)
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=900, check=False)
    return parse_output(proc.stdout), proc


CANARY = "canary"   # a host with nothing declared: it passes the validation play, so that a run whose every test
# host fails there goes on to its next play (ansible-playbook ends the run when a play has no host left)


def site_validation_play(hosts):
    """site.yml's first play (every node's declared state validated before anything changes), for ``hosts``, with
    any_errors_fatal off so that in a batch of test hosts every one reaches its own failure. Put CANARY (with
    ansible_connection local) among ``hosts`` when more plays follow."""
    import yaml
    with open(os.path.join(ROOT, "playbooks", "site.yml")) as handle:
        play = yaml.safe_load(handle)[0]
    play.update(hosts=hosts, any_errors_fatal=False)
    return play


def first_failure(data, host):
    """``host``'s first failed task result in a json_results document, with ``text``: its message, its argument
    errors and those of its failed loop items, joined; None when no task failed."""
    for play in data["plays"]:
        for task in play["tasks"]:
            res = task["hosts"].get(host)
            if res and res.get("failed") and not res.get("skipped"):
                texts = [str(res.get("msg") or "")] + [str(e) for e in res.get("argument_errors") or []]
                for item in res.get("results") or []:
                    if item.get("failed"):
                        texts += [str(item.get("msg") or "")] + [str(e) for e in item.get("argument_errors") or []]
                return dict(res, text="\n".join(t for t in texts if t))
    return None
