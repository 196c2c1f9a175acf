"""The roles, playbooks and molecule scenarios use only what the oldest ansible-core that meta/runtime.yml allows
(``requires_ansible: '>=2.16.0'``) knows: every ``meta`` action, every keyword of a play, block and task, and every
option of an ansible.builtin module. A newer feature works on the main virtualenv's ansible-core and fails only on
2.16, at run time, in the middle of a node's change: ``ansible.builtin.meta: end_role`` (2.18) failed so ("invalid
meta action requested: end_role"), after the driver had been changed, in roles/gpu_node/tasks/driver.yml.

The meta actions and keywords of 2.16 are listed here with their source; the builtin modules' options are read from
2.16's own ansible-doc where `make setup` installed it (tools/compat/2.16, scripts/compat.py), else that test is
skipped; an option that a task omits by the core's version (``... if ansible_version.full is version('2.19', '>=')
else omit``) passes. It found ansible.builtin.pip's break_system_packages (2.17) in roles/gpu_node/tasks/nvml.yml,
which 2.16 refuses on a real GPU node (the lab skips that task)."""
import json
import os
import re
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLDEST = "2.16"
COMPAT_DOC = os.path.join(ROOT, "tools", "compat", OLDEST, "bin", "ansible-doc")

# The meta actions that ansible-core 2.16 runs: ansible/ansible at v2.16.0, lib/ansible/plugins/strategy/__init__.py,
# StrategyBase._execute_meta (any other action raises "invalid meta action requested"); role_complete is internal.
# end_role came in 2.18 (changelogs of ansible/ansible at v2.18.0: "meta - add end_role").
META_ACTIONS_2_16 = frozenset((
    "noop", "flush_handlers", "refresh_inventory", "clear_facts", "clear_host_errors", "end_batch", "end_play",
    "end_host", "role_complete", "reset_connection"))

# The keywords of ansible-core 2.16 (ansible/ansible at v2.16.0, lib/ansible/playbook/{base,task,block,play,
# handler}.py: the FieldAttributes of Task, Block, Play and Handler; docs/docsite/rst/reference_appendices/
# playbooks_keywords.rst lists the same).
_COMMON = frozenset((
    "any_errors_fatal", "become", "become_exe", "become_flags", "become_method", "become_user", "check_mode",
    "collections", "connection", "debugger", "diff", "environment", "ignore_errors", "ignore_unreachable",
    "module_defaults", "name", "no_log", "port", "remote_user", "run_once", "tags", "throttle", "timeout", "vars"))
TASK_KEYWORDS_2_16 = _COMMON | frozenset((
    "action", "args", "async", "changed_when", "delay", "delegate_facts", "delegate_to", "failed_when", "local_action",
    "loop", "loop_control", "notify", "poll", "register", "retries", "until", "when"))
HANDLER_KEYWORDS_2_16 = TASK_KEYWORDS_2_16 | frozenset(("listen",))
BLOCK_KEYWORDS_2_16 = _COMMON | frozenset((
    "block", "rescue", "always", "delegate_facts", "delegate_to", "notify", "when"))
PLAY_KEYWORDS_2_16 = _COMMON | frozenset((
    "fact_path", "force_handlers", "gather_facts", "gather_subset", "gather_timeout", "handlers", "hosts",
    "max_fail_percentage", "order", "post_tasks", "pre_tasks", "roles", "serial", "strategy", "tasks", "vars_files",
    "vars_prompt", "import_playbook", "ansible.builtin.import_playbook"))
# Modules whose arguments are free-form keys (set_fact's facts) or a string, not options.
FREE_FORM = frozenset(("ansible.builtin.set_fact", "ansible.builtin.meta", "ansible.builtin.include_vars"))


class _Loader(yaml.SafeLoader):
    """YAML with ansible's tags (!unsafe, !vault) read as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def yaml_files():
    """Every file of tasks, handlers or plays: roles' tasks and handlers, playbooks, molecule's playbooks."""
    found = []
    for top, kinds in (("roles", ("tasks", "handlers")), ("playbooks", None), ("extensions", None)):
        for base, _dirs, files in os.walk(os.path.join(ROOT, top)):
            rel = os.path.relpath(base, ROOT)
            if kinds and os.path.basename(base) not in kinds:
                continue
            for name in files:
                if name.endswith((".yml", ".yaml")) and name not in ("molecule.yml", "requirements.yml") \
                        and not name.endswith("-vars.yml"):
                    found.append(os.path.join(rel, name))
    return sorted(found)


def _action(task, keywords):
    """(the module a task runs, its arguments), or (None, None) for a block."""
    if "block" in task:
        return None, None
    names = [k for k in task if k not in keywords and not k.startswith("with_")]
    assert len(names) == 1, "a task names one module, this one %s: %s" % (names or "none", task.get("name"))
    return names[0], task[names[0]]


def tasks_of(path):
    """(where, kind, task) of every play, block, task and handler in one file; kind is play/block/task/handler."""
    with open(os.path.join(ROOT, path)) as handle:
        data = yaml.load(handle, Loader=_Loader)
    out = []

    def walk(items, kind, where):
        for i, item in enumerate(items or []):
            if not isinstance(item, dict):
                continue
            here = "%s[%d] %s" % (where, i, item.get("name", ""))
            if "block" in item:
                out.append((here, "block", item))
                for part in ("block", "rescue", "always"):
                    walk(item.get(part), kind, here + "." + part)
            else:
                out.append((here, kind, item))

    if isinstance(data, list) and data and isinstance(data[0], dict) and (
            "hosts" in data[0] or "import_playbook" in data[0] or "ansible.builtin.import_playbook" in data[0]):
        for i, play in enumerate(data):
            where = "%s play %d" % (path, i)
            out.append((where, "play", play))
            for part in ("pre_tasks", "tasks", "post_tasks"):
                walk(play.get(part), "task", where + "." + part)
            walk(play.get("handlers"), "handler", where + ".handlers")
    else:
        walk(data, "handler" if "/handlers/" in path else "task", path)
    return out


def everything():
    return [entry for path in yaml_files() for entry in tasks_of(path)]


def test_the_scan_finds_the_collections_tasks():
    found = everything()
    files = set(w.split("[")[0].split(" play")[0] for w, _k, _t in found)
    assert "roles/gpu_node/tasks/driver.yml" in files and "playbooks/site.yml" in files
    assert "roles/mig/handlers/main.yml" in files
    kinds = set(k for _w, k, _t in found)
    assert kinds == {"play", "block", "task", "handler"}, kinds
    assert len([1 for _w, k, _t in found if k == "task"]) > 200


def meta_actions(found):
    out = []
    for where, kind, task in found:
        if kind in ("task", "handler"):
            module, args = _action(task, HANDLER_KEYWORDS_2_16)
            if module in ("meta", "ansible.builtin.meta", "ansible.legacy.meta"):
                out.append((where, args if isinstance(args, str) else (args or {}).get("_raw_params")))
    return out


def test_every_meta_action_is_one_that_the_oldest_ansible_core_runs():
    actions = meta_actions(everything())
    assert actions, "the collection uses meta (flush_handlers): the scan must see it"
    unknown = ["%s: meta %s" % (w, a) for w, a in actions if a not in META_ACTIONS_2_16]
    assert unknown == [], "ansible-core %s fails these at run time (invalid meta action): %s" % (OLDEST, unknown)


def test_the_meta_check_fails_on_end_role():
    task = {"name": "End this pass", "ansible.builtin.meta": "end_role"}
    assert [a for _w, a in meta_actions([("x", "task", task)]) if a not in META_ACTIONS_2_16] == ["end_role"]


def keyword_problems(found):
    allowed = {"play": PLAY_KEYWORDS_2_16, "block": BLOCK_KEYWORDS_2_16, "task": TASK_KEYWORDS_2_16,
               "handler": HANDLER_KEYWORDS_2_16}
    problems = []
    for where, kind, item in found:
        if kind in ("play", "block"):
            extra = sorted(k for k in item if k not in allowed[kind])
            if extra:
                problems.append("%s: %s keywords %s" % (where, kind, extra))
    return problems


def test_every_play_and_block_keyword_is_one_the_oldest_ansible_core_knows():
    assert keyword_problems(everything()) == []
    # (a task's unknown keyword reads as a second module name: _action refuses it, for every task, in the tests here)
    for _where, kind, task in everything():
        if kind in ("task", "handler"):
            _action(task, HANDLER_KEYWORDS_2_16 if kind == "handler" else TASK_KEYWORDS_2_16)
    assert keyword_problems([("x", "block", {"block": [], "rescue": [], "loop": []})]) == [
        "x: block keywords ['loop']"]


def builtin_uses(found):
    """{ansible.builtin module: {option: [(where, value), ...]}} of the tasks that give a builtin module a mapping."""
    uses = {}
    for where, kind, task in found:
        if kind not in ("task", "handler"):
            continue
        module, args = _action(task, HANDLER_KEYWORDS_2_16)
        if not module.startswith("ansible.builtin.") or module in FREE_FORM:
            continue
        options = uses.setdefault(module, {})
        for key, value in (args if isinstance(args, dict) else {}).items():
            options.setdefault(key, []).append((where, value))
    return uses


def _guarded(value):
    """Whether an option's value omits it on older cores (``{{ x if ansible_version.full is version(...) else omit }}``)."""
    return isinstance(value, str) and "ansible_version" in value and "omit" in value


def option_problems(uses, docs):
    """What ``uses`` (builtin_uses) gives a module that ansible-core 2.16's ``docs`` (ansible-doc -j) lack: an option
    is fine where every use omits it by the core's version."""
    problems = []
    for module, options in sorted(uses.items()):
        doc = (docs.get(module) or {}).get("doc")
        if doc is None:
            problems.append("%s: no such module in ansible-core %s" % (module, OLDEST))
            continue
        known = set(doc.get("options") or {})
        for spec in (doc.get("options") or {}).values():
            known.update(spec.get("aliases") or [])
        known.add("_raw_params")
        for option, places in sorted(options.items()):
            if option not in known and not all(_guarded(value) for _where, value in places):
                problems.append("%s: option %s, which ansible-core %s lacks (%s)"
                                % (module, option, OLDEST, places[0][0]))
    return problems


@pytest.mark.skipif(not os.path.exists(COMPAT_DOC), reason="ansible-core %s not installed (tools/compat/%s: make setup)"
                    % (OLDEST, OLDEST))
def test_every_builtin_module_option_is_one_the_oldest_ansible_core_has():
    uses = builtin_uses(everything())
    assert "ansible.builtin.include_role" in uses and "tasks_from" in uses["ansible.builtin.include_role"]
    proc = subprocess.run([COMPAT_DOC, "-t", "module", "-j"] + sorted(uses), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert re.match(r"^2\.16\.", subprocess.run([COMPAT_DOC, "--version"], stdout=subprocess.PIPE,
                                                universal_newlines=True, check=False).stdout.split("[core ")[1])
    assert option_problems(uses, docs) == []
    # and it fails on an option 2.16 lacks
    assert option_problems({"ansible.builtin.pip": {"break_system_packages": [("x", "{{ true }}")]}}, docs) == [
        "ansible.builtin.pip: option break_system_packages, which ansible-core 2.16 lacks (x)"]
    assert option_problems({"ansible.builtin.pip": {"break_system_packages": [
        ("x", "{{ true if ansible_version.full is version('2.17', '>=') else omit }}")]}}, docs) == []
