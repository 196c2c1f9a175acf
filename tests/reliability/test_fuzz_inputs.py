"""Input fuzzing (issue 15): every module and filter, given any value for any option, fails clearly or works; it
never lets an exception escape, never changes anything when it fails, names the option in its message, and never
spends memory or time in proportion to a number the user typed.

Modules: each example takes the harness's valid run (fuzz_harness.py) and replaces one to three options with
generated values (tests/support/fuzz_values.py: of the option's type and beyond it), runs the module's main()
in a forked child against a fresh rig (tests/support/rigs.py) under a memory and a wall-clock bound
(tests/support/bounded.py), and asserts:

- no exception escaped main() (a real run would show MODULE FAILURE and a traceback), the child was not killed,
  it stayed within GPUOPS_FUZZ_MEMORY_MIB more memory and GPUOPS_FUZZ_WALL_S seconds;
- a failed run reports changed=false, changed nothing the rig can see, and its message names at least one of the
  options the example changed.

Filters: each filter function with generated arguments returns, or raises AnsibleFilterError; nothing else. A
filter's examples share one forked child (FILTER_FORK_EACH below), each under the same two bounds.

Settings: GPUOPS_FUZZ_EXAMPLES examples per module (default 30 in CI) and per filter (default 60); the examples
are fixed (derandomized) unless GPUOPS_FUZZ_SEED is set, which makes a seeded random run for longer local runs:

    GPUOPS_FUZZ_EXAMPLES=5000 GPUOPS_FUZZ_SEED=1 .venv/bin/python -m pytest -n 2 tests/reliability/test_fuzz_inputs.py

hypothesis's example database is off, so a run never depends on an earlier one. Every input class a run found is
a case in bad_input_corpus.yml.
"""
import glob
import importlib
import inspect
import os
import shutil
import socket
import sys
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st
from ansible.errors import AnsibleFilterError
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.json import Direction, get_module_encoder
from ansible.module_utils.testing import patch_module_args

from tests.reliability import fuzz_harness
from tests.support import fuzz_values
from tests.support import rigs
from tests.support.ansible_run import CANARY, ROOT, first_failure, run_playbook, site_validation_play
from tests.support import bounded
from tests.support.bounded import memory_bound
from tests.support.modrun import run_main

PACKAGE = "ansible_collections.gpuops.nvidia.plugins"
EXAMPLES = int(os.environ.get("GPUOPS_FUZZ_EXAMPLES") or 30)
FILTER_EXAMPLES = int(os.environ.get("GPUOPS_FUZZ_EXAMPLES") or 60)
SEED = os.environ.get("GPUOPS_FUZZ_SEED")
WALL_S = float(os.environ.get("GPUOPS_FUZZ_WALL_S") or 60)
MEMORY_MIB = int(os.environ.get("GPUOPS_FUZZ_MEMORY_MIB") or 512)
# A filter's examples run one after another in ONE forked child per filter (bounded.run_series), each under the memory
# bound and a wall-clock bound of its own; GPUOPS_FUZZ_FORK_EACH=1 forks a child per example, as the modules' examples
# always are (a module run changes its process: the environment, the directory, its modules' state).
FILTER_FORK_EACH = os.environ.get("GPUOPS_FUZZ_FORK_EACH") == "1"
OMIT = "@OMIT@"
# Options each rig points at its sandbox or its tools (tests/support/rigs.py): never omitted by an example (their
# defaults are the host's real paths, /etc/containerd/config.toml and the like, and its real tools).
PINNED = {"sim": (), "mps": ("pipe_directory", "log_directory", "unit_directory"),
          "containerd": ("config_path", "drop_in_path", "containerd_path", "nvidia_ctk_path"), "kube": (),
          # cdi_spec's and runtime_mode's: the spec directories and the runtime config are the host's real ones
          # dev_char_symlinks': the links and the udev rule are the host's real /dev/char and /lib/udev
          "cdi": ("spec_path", "spec_dirs", "config_path", "nvidia_ctk_path", "dev_char_path", "udev_rule_path"),
          "helm": ("binary_path",), "operator": (), "dra": ("binary_path",), "dra_api": (), "exporter": ("binary_path",),
          # driver_modules' and driver_plan's: the node root is this machine's /, the tools its own kmod/systemctl
          "driver": ("root", "modprobe", "rmmod", "modinfo", "systemctl"),
          # dcgm_host_engine's: systemctl unset is this machine's (looked up in /usr/bin); package_files unset or empty
          # is the repository path, whose apt-get update refreshes the root's package lists before apt can say that
          # the (empty) repository lacks DCGM: a change of apt's cache on a failed run, which the harness's rule
          # forbids. That path is tested against a real signed repository in test_dcgm_host_engine.py.
          "dcgm": ("systemctl", "package_files"),
          # host_imex's: unset, the record is this machine's /var/lib/gpuops and systemctl its own
          "imex": ("record", "systemctl")}


def discovered(kind):
    """Every module (plugins/modules/*.py), filter file (plugins/filter/*.py) or role with an argument spec."""
    if kind == "role":
        return sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
                      for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))
    folder = {"module": "modules", "filter": "filter"}[kind]
    return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", folder, "*.py"))
                  if not os.path.basename(p).startswith("_"))


MODULE_NAMES = discovered("module")


class _Spec(Exception):
    pass


def argument_spec(name):
    """The module's AnsibleModule(...) keyword arguments, taken from its main() without running anything else."""
    module = importlib.import_module("%s.modules.%s" % (PACKAGE, name))
    original = AnsibleModule.__init__

    def capture(self, *args, **kwargs):
        raise _Spec(kwargs)
    AnsibleModule.__init__ = capture
    try:
        module.main()
    except _Spec as got:
        return module, got.args[0]
    finally:
        AnsibleModule.__init__ = original
    raise AssertionError("%s.main() did not build an AnsibleModule" % name)


def option_names(spec, mutated):
    """The names a message may use for the options an example changed: with their aliases, and the names of their
    suboptions (ansible-core names a suboption's field, such as 'settings' of compute_mode, without its parent)."""
    names = set()
    todo = [(name, spec[name]) for name in mutated]
    while todo:
        name, option = todo.pop()
        names.add(name)
        names.update(option.get("aliases") or [])
        todo.extend((option.get("options") or {}).items())
    return names


def settings_for(examples):
    """Fixed examples (derandomized) unless GPUOPS_FUZZ_SEED; no shrinking unless GPUOPS_FUZZ_SHRINK=1: a module
    example costs about a second, and shrinking one of them took hypothesis more than five minutes (the failing
    example, one to three options, is readable as it is)."""
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("GPUOPS_FUZZ_SHRINK") == "1" else [])
    base = dict(max_examples=examples, deadline=None, database=None, derandomize=SEED is None,
                suppress_health_check=list(HealthCheck), print_blob=True, phases=phases)
    return settings(**base)


# ---- the harness table is complete ----------------------------------------------------------------------------------
def test_every_module_has_a_harness():
    missing = sorted(set(MODULE_NAMES) - set(fuzz_harness.MODULES))
    stale = sorted(set(fuzz_harness.MODULES) - set(MODULE_NAMES))
    assert not missing, ("modules without an entry in tests/reliability/fuzz_harness.py MODULES (say how to run "
                         "them against a rig): %s" % ", ".join(missing))
    assert not stale, "fuzz_harness.MODULES names modules that do not exist: %s" % ", ".join(stale)


def test_every_filter_has_a_harness():
    missing = sorted(set(discovered("filter")) - set(fuzz_harness.FILTERS))
    assert not missing, "filter files without an entry in fuzz_harness.FILTERS: %s" % ", ".join(missing)
    for filename, funcs in fuzz_harness.FILTERS.items():
        plugin = importlib.import_module("%s.filter.%s" % (PACKAGE, filename)).FilterModule().filters()
        assert sorted(funcs) == sorted(plugin), "fuzz_harness.FILTERS[%r] must list exactly %s" % (
            filename, sorted(plugin))


def test_every_role_has_a_harness():
    missing = sorted(set(discovered("role")) - set(fuzz_harness.ROLES))
    stale = sorted(set(fuzz_harness.ROLES) - set(discovered("role")))
    assert not missing, "roles without an entry in fuzz_harness.ROLES: %s" % ", ".join(missing)
    assert not stale, "fuzz_harness.ROLES names roles without an argument spec: %s" % ", ".join(stale)


# ---- modules ------------------------------------------------------------------------------------------------------
def _offline():
    """Name lookups of anything but this machine fail at once in the child (no input may reach the network)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host not in (None, "127.0.0.1", "localhost", "::1", b"127.0.0.1", b"localhost"):
            raise socket.gaierror(socket.EAI_NONAME, "fuzz sandbox: no name lookups (%r)" % (host,))
        return real(host, *args, **kwargs)
    socket.getaddrinfo = getaddrinfo


@pytest.fixture(scope="module", autouse=True)
def imported_before_forking():
    """What every forked child would otherwise import and set up again on its own, imported once in this worker
    before the first fork (run_bounded's children share it): ansible-core's serialization profiles for module
    arguments (patch_module_args) and for the module's result (exit_json and fail_json's encoder, the same profile's
    other direction) and, through ansible.utils.display, ansible.constants with its configuration (the text of an
    AnsibleError): about 0.1 CPU s a child. The rigs' own (Rig.prepare) are run_example's."""
    with patch_module_args({}):
        pass
    get_module_encoder("legacy", Direction.MODULE_TO_CONTROLLER)      # patch_module_args' profile, as a module exits
    str(AnsibleFilterError("imported before forking"))


def run_example(name, mutation, base_dir):
    """Run module ``name`` with the harness's arguments changed by ``mutation`` ({option: value or OMIT}) in a
    forked child; returns (outcome, report) where report has the module's result and what changed."""
    harness = fuzz_harness.MODULES[name]
    module = argument_spec(name)[0]
    # the rig kind's helpers imported, its fixed files read or built (a driver rig's node: copied by each child)
    # here once, not in every child; each child still gets a fresh rig of its own
    rigs.RIGS[harness["rig"]].prepare(**harness.get("rig_kwargs", {}))

    def work():
        sandbox = tempfile.mkdtemp(prefix="ex-", dir=base_dir)
        os.chdir(sandbox)
        _offline()
        rig = rigs.RIGS[harness["rig"]](sandbox, **harness.get("rig_kwargs", {}))
        try:
            fuzz_values.make_pool(sandbox, harness.get("files"))
            rigs.os_environ_apply(rig.env)
            args = dict(rig.args, **fuzz_values.resolve(harness["args"], sandbox))
            for option, value in mutation.items():
                if value == OMIT:
                    args.pop(option, None)
                else:
                    args[option] = fuzz_values.resolve(value, sandbox)
            before = rig.state()
            with memory_bound(MEMORY_MIB):
                result = run_main(module.main, args, diff=True, **rig.internal)
            return {"result": result, "changes": rig.changes(before)}
        finally:
            rig.close()
    return bounded.run_bounded(work, wall_s=WALL_S)


# Messages of ansible-core's own argument validation that do not name the option; the fix belongs in ansible-core.
KNOWN_CORE_GAPS = {
    # A string element of a list-of-dicts option with suboptions (e.g. compute_mode settings: "x"): ansible-core's
    # no_log scan (_list_no_log_values) converts it with check_type_dict before the type check runs, and
    # AnsibleModule reports only that first error, which names no option (seen with ansible-core 2.19).
    "dictionary requested, could not parse JSON or key=value",
    # the same, for a string element that starts like JSON ('{'): check_type_dict's literal_eval message
    "unable to evaluate string as dictionary",
}
# Prefixes of such messages. A NUL in any string option, on a host with syslog (journald's /dev/log): AnsibleModule
# logs its invocation to syslog before any code of ours runs, syslog refuses the NUL, and the module fails with this
# message (it says what is wrong - an embedded null character - but not in which option; seen with 2.19.14 on the
# lent GPU machine; the build machine has no /dev/log and never shows it).
KNOWN_CORE_GAP_PREFIXES = ("Failed to log to syslog (embedded null character).",)


# Exceptions that escape ansible-core's own argument validation (AnsibleModule.__init__, before any code of ours):
# a real run shows "Module failed: <the exception's text>". The fix belongs in ansible-core (seen with 2.19.14).
KNOWN_CORE_ESCAPES = {
    # An int option given an infinite float (YAML .inf, or a template's 1e999): check_type_int catches ValueError
    # and TypeError but not the OverflowError of int(Decimal('Infinity')) (common/validation.py).
    "OverflowError: cannot convert Infinity to integer",
    # A float option given an int past 1e308: check_type_float's float() raises OverflowError, not caught either.
    "OverflowError: int too large to convert to float",
    # A dict option with suboptions (device_plugin_verify's profile) given a list holding a scalar ([null], [1]):
    # _validate_sub_spec walks the list as if it held dicts and set_fallbacks tests `name in None`
    # (common/parameters.py); the type error that names the option is reported only afterwards.
    "TypeError: argument of type 'NoneType' is not iterable",
    "TypeError: argument of type 'int' is not iterable",
    "TypeError: argument of type 'float' is not iterable",
    "TypeError: argument of type 'bool' is not iterable",
    # An int option given a number of more than 4300 digits as text: the type check converts it, then
    # AnsibleModule's invocation log (basic.py _log_invocation) or no_log masking (parameters.py remove_values,
    # text/converters.py) calls str() on it, which Python refuses past sys.get_int_max_str_digits().
    "ValueError: Exceeds the limit (4300 digits) for integer string conversion; use sys.set_int_max_str_digits() to "
    "increase the limit",
}
# Prefixes of such last lines. A string holding a lone surrogate (text decoded with surrogateescape, such as
# '\udcc0'): AnsibleModule's JSON decoder refuses it in _load_params (basic.py), before validation; ansible-playbook
# would refuse to send it in the first place.
# ansible-core 2.19.14 wraps that refusal once more in _load_params (basic.py: "raise Exception('Failed to decode JSON
# module parameters.') from ex"), so the last line is then that one: the same refusal, before any module code.
KNOWN_CORE_ESCAPE_PREFIXES = ("ansible.errors.AnsibleRuntimeError: Refusing to deserialize an invalid UTF8 string value",
                              "Exception: Failed to decode JSON module parameters.")
CORE_VALIDATION = ("ansible/module_utils/common/validation.py", "ansible/module_utils/common/parameters.py",
                   "ansible/module_utils/basic.py", "ansible/module_utils/common/text/converters.py")


def core_escape(outcome):
    """True when the escaped exception is a KNOWN_CORE_ESCAPES one raised inside ansible-core's validation."""
    lines = (outcome.error or "").strip().splitlines()
    frames = [line for line in lines if line.strip().startswith("File ")]
    known = bool(lines) and (lines[-1] in KNOWN_CORE_ESCAPES or lines[-1].startswith(KNOWN_CORE_ESCAPE_PREFIXES))
    return known and bool(frames) and \
        any(part in frames[-1] for part in CORE_VALIDATION)


def outcome_failure(name, res):
    """True when a failed run reports what the system did after the module's change (the harness's ``outcomes``):
    the MIG manager's state, a rollout that did not show. Such a run may report changed=true (it changed what it
    was asked to; the failure comes after) and names the node or object, not an option."""
    msg = str(res.get("msg") or "")
    return any(fragment in msg for fragment in fuzz_harness.MODULES[name].get("outcomes", ()))


def check_outcome(name, mutation, outcome, spec):
    if core_escape(outcome):
        return None
    problem = outcome.problem(WALL_S, MEMORY_MIB)
    assert problem is None, "%s with %r: %s" % (name, mutation, problem)
    res = outcome.value["result"]
    if not res.get("failed") or outcome_failure(name, res):
        return res
    assert not res.get("changed"), "%s failed but reports changed=true with %r: %s" % (name, mutation, res.get("msg"))
    assert outcome.value["changes"] == [], "%s failed and changed %s with %r: %s" % (
        name, outcome.value["changes"], mutation, res.get("msg"))
    msg = str(res.get("msg") or "")
    if msg in KNOWN_CORE_GAPS or msg.startswith(KNOWN_CORE_GAP_PREFIXES):
        return res
    names = option_names(spec, mutation)
    assert any(n in msg for n in names), "%s failed without naming the option (%s) with %r: %s" % (
        name, ", ".join(sorted(names)), mutation, msg)
    return res


@st.composite
def mutations(draw, spec, harness, pinned):
    """{option: value or OMIT} for one to three options; ``pinned`` options are never omitted."""
    names = sorted(n for n in spec if n not in harness.get("fixed", {}))
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    hints = harness.get("hints", {})
    out = {}
    for option in chosen:
        if option not in pinned and draw(st.integers(0, 9)) == 0:
            out[option] = OMIT
        else:
            out[option] = draw(fuzz_values.option(spec[option], hints, option))
    return out


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_harness_run_succeeds(name, tmp_path):
    """The harness's own arguments make a working run: the examples start from it."""
    outcome = run_example(name, {}, str(tmp_path))
    assert outcome.problem(WALL_S, MEMORY_MIB) is None, outcome.problem(WALL_S, MEMORY_MIB)
    res = outcome.value["result"]
    assert not res.get("failed"), "%s: the harness's run fails: %s" % (name, res.get("msg"))


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_fuzz_module(name, tmp_path):
    spec = argument_spec(name)[1]["argument_spec"]
    harness = fuzz_harness.MODULES[name]

    @settings_for(EXAMPLES)
    @given(mutations(spec, harness, PINNED[harness["rig"]]))
    def one(mutation):
        base = tempfile.mkdtemp(dir=str(tmp_path))
        outcome = run_example(name, mutation, base)
        check_outcome(name, mutation, outcome, spec)
        shutil.rmtree(base, ignore_errors=True)

    if SEED is not None:
        one = seed(int(SEED))(one)
    # hypothesis prints a failing example with its pretty-printer, which recurses once per level of a value nested
    # 600 deep (fuzz_values.deep) and hit the default limit, hiding the failure behind a RecursionError
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        one()
    finally:
        sys.setrecursionlimit(limit)


# ---- filters ------------------------------------------------------------------------------------------------------
FILTER_FUNCS = sorted((f, n) for f, names in fuzz_harness.FILTERS.items() for n in names)


@pytest.mark.parametrize("filename,func", FILTER_FUNCS, ids=["%s.%s" % p for p in FILTER_FUNCS])
def test_fuzz_filter(filename, func):
    function = importlib.import_module("%s.filter.%s" % (PACKAGE, filename)).FilterModule().filters()[func]
    params = list(inspect.signature(function).parameters.values())
    hints = fuzz_harness.FILTERS[filename][func]
    strategies = [hints.get(p.name, st.one_of(fuzz_values.json_values(), fuzz_values.hostile())) for p in params]
    required = sum(1 for p in params if p.default is inspect.Parameter.empty)
    # each example in a child of its own where FILTER_FORK_EACH; else, below, in_series' stand-in in one child. The
    # name stays `run_bounded` and is rebound, not passed, so that one()'s source, from which hypothesis derives its
    # derandomized seed, is the same either way: both run the same fixed examples.
    run_bounded = bounded.run_bounded

    @settings_for(FILTER_EXAMPLES)
    @given(st.integers(required, len(params)).flatmap(lambda n: st.tuples(*strategies[:n])))
    def one(args):
        def work():
            with memory_bound(MEMORY_MIB):
                try:
                    function(*args)
                except AnsibleFilterError as exc:
                    return {"error": str(exc)}
            return {"error": None}
        outcome = run_bounded(work, wall_s=WALL_S)
        problem = outcome.problem(WALL_S, MEMORY_MIB)
        assert problem is None, "%s%r: %s" % (func, args, problem)
        assert outcome.value["error"] != "", "%s%r raised AnsibleFilterError without a message" % (func, args)

    if SEED is not None:
        one = seed(int(SEED))(one)
    if FILTER_FORK_EACH:
        one()
        return

    def series(step):
        nonlocal run_bounded                    # in the series' child only: its examples run there, one by one
        run_bounded = bounded.in_series(step)
        one()
        return "passed"                        # a value: a report of None would read as no report
    outcome = bounded.run_series(series, wall_s=WALL_S)
    problem = outcome.problem(WALL_S, MEMORY_MIB)
    assert problem is None, "%s: %s (its unit: the example in that order; GPUOPS_FUZZ_FORK_EACH=1 runs each " \
        "example in a child of its own and names the one that fails)" % (func, problem)


# ---- roles --------------------------------------------------------------------------------------------------------
ROLE_EXAMPLES = int(os.environ.get("GPUOPS_FUZZ_ROLE_EXAMPLES") or 12)
ROLE_PLAY = """---
- name: Roles validated when they start (one host per example)
  hosts: role_cases
  gather_facts: false
  tasks:
    - name: Apply the example's role
      ansible.builtin.include_role:
        name: "gpuops.nvidia.{{ case_role }}"
"""


def role_spec(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as handle:
        return yaml.safe_load(handle)["argument_specs"]["main"]["options"]


def spec_errors(options, values):
    """What the role's argument spec says about ``values`` (defaults dropped, as roles/gpu_node/tasks/validate.yml
    does), as ansible-core's validator reports it."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    spec = dict((k, dict(v, default=None)) for k, v in options.items())
    try:
        return ArgumentSpecValidator(spec).validate(dict(values)).error_messages
    except OverflowError as exc:        # a float option given an int past 1e308: see CORE_OVERFLOW
        return [CORE_OVERFLOW + str(exc)]


# ansible-core's check_type_float converts an int past 1e308 with float() and lets the OverflowError escape (seen with
# 2.19.14), in validate_argument_spec too: such a host fails with that exception's text, which names no variable.
CORE_OVERFLOW = "ansible-core OverflowError: "


def _yaml_safe(value, depth=0):
    """Inventory values must survive YAML and stay shallow enough for the controller's templating."""
    if depth > 40:
        return False
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(_yaml_safe(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _yaml_safe(k) and _yaml_safe(v, depth + 1) for k, v in value.items())
    return True


def role_examples():
    """{host: (role, {variable: value}, spec errors)}: ROLE_EXAMPLES hosts per role, chosen from eight times as many
    drawn by hypothesis (derandomized unless GPUOPS_FUZZ_SEED): for "site" roles three in four of them values the
    spec refuses (the first draws are mostly plain values it accepts), for "role" roles only such values."""
    hosts = {}
    for role in sorted(fuzz_harness.ROLES):
        options = role_spec(role)
        names = sorted(options)
        refused, accepted, seen = [], [], set()

        @settings(max_examples=ROLE_EXAMPLES * 8, deadline=None, database=None, derandomize=SEED is None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate])
        @given(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True).flatmap(
            lambda chosen: st.tuples(*[st.tuples(st.just(n), fuzz_values.option(options[n], {}, n)) for n in chosen])))
        def collect(pairs):
            values = dict(pairs)
            if not _yaml_safe(values) or repr(values) in seen:
                return
            seen.add(repr(values))
            errors = spec_errors(options, values)
            (refused if errors else accepted).append((values, errors))
        if SEED is not None:
            collect = seed(int(SEED))(collect)
        collect()
        if fuzz_harness.ROLES[role] == "role":
            accepted = []
        picked = refused[:ROLE_EXAMPLES * 3 // 4]
        picked += accepted[:ROLE_EXAMPLES - len(picked)]
        picked += refused[len(picked):ROLE_EXAMPLES] if len(picked) < ROLE_EXAMPLES else []
        for n, (values, errors) in enumerate(picked):
            hosts["%s-%d" % (role, n)] = (role, values, errors)
    return hosts


@pytest.mark.slow
def test_fuzz_role_variables(tmp_path):
    """Role variables: one ansible-playbook run, one inventory host per example. site.yml's first play validates
    every node (any_errors_fatal off here, so that every host reaches its own failure)."""
    cases = role_examples()
    plays = [site_validation_play("site_cases")] + yaml.safe_load(ROLE_PLAY)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    groups = {"site_cases": {CANARY: {"ansible_connection": "local"}}, "role_cases": {}}
    for host, (role, values, _errors) in cases.items():
        group = "site_cases" if fuzz_harness.ROLES[role] == "site" else "role_cases"
        groups[group][host] = dict(values, ansible_connection="local", case_role=role)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": dict(
        (g, {"hosts": h}) for g, h in groups.items())}}, allow_unicode=True))
    data, proc = run_playbook(str(playbook), inventory=str(inventory))
    assert data is not None and proc.returncode in (0, 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    problems = []
    for host, (role, values, errors) in sorted(cases.items()):
        res, shown = first_failure(data, host), repr(values)[:300]
        if res is None:
            if errors:
                problems.append("%s %s: not refused, though its argument spec says %s" % (host, shown, errors[:1]))
            continue
        text = res["text"]
        if errors and errors[0].startswith(CORE_OVERFLOW) and "too large to convert to float" in text + str(
                res.get("exception")):
            continue                    # KNOWN: ansible-core's own escape (CORE_OVERFLOW), refused all the same
        if "Traceback (most recent call last)" in str(res.get("exception")) or "unhandled exception" in text:
            problems.append("%s %s: a traceback: %s %s" % (host, shown, text, str(res.get("exception"))[-1500:]))
        elif not any(name in text for name in values):
            problems.append("%s %s: the message names none of %s: %s" % (host, shown, sorted(values), text[:500]))
    assert not problems, "\n".join(problems)
