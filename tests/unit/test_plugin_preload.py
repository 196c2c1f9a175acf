"""The tests' preload of the plugins ansible's workers load (tests/support/compile_cache/gpuops_plugin_preload.py): a
name a worker's lookup loaded is recorded, the next process loads it before it forks, so its workers find it loaded;
what they find is what they would have loaded; a name that cannot be loaded costs nothing; ``off`` leaves ansible-core
alone."""
import json
import os
import re
import subprocess
import sys

from tests.support import ansible_run
from tests.support.compile_cache import gpuops_plugin_preload as preload

# In a new interpreter started as the tests start ansible's commands: the loaders set up as ansible's commands set them
# up, then a forked child (as a worker is) looks up the names given and says, for each, whether the lookup loaded a
# plugin module and what it found; PRELOAD=1 runs the preload first (as a TaskQueueManager's run does).
SCRIPT = r'''
import json, os, sys
from ansible.executor import task_queue_manager
from ansible.plugins import loader
loader.init_plugin_loader()
run = task_queue_manager.TaskQueueManager.run
armed = getattr(run, "preload", None)
if armed is not None and os.environ.get("PRELOAD") == "1":
    armed.preload()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    found = []
    for kind, name in json.loads(sys.argv[1]):
        chosen = getattr(loader, kind + "_loader")
        before = dict((k, set(v._module_cache)) for k, v in (("filter", loader.filter_loader),
                      ("test", loader.test_loader), ("lookup", loader.lookup_loader)))
        try:
            plugin = chosen.get(name)
            what = "not found" if plugin is None else getattr(plugin, "ansible_name", None) or type(plugin).__module__
        except Exception as exc:
            what = "error: %s" % type(exc).__name__
        loaded = sorted(set(chosen._module_cache) - before[kind])
        found.append([kind, name, what, len(loaded)])
    os.write(w, json.dumps(found).encode())
    os._exit(0)
os.close(w)
data = b""
while True:
    chunk = os.read(r, 65536)
    if not chunk:
        break
    data += chunk
os.waitpid(pid, 0)
print(json.dumps({"armed": armed is not None, "preloaded": armed.preloaded if armed else None,
                  "instance_lookup": "get_with_context" in vars(loader.filter_loader), "found": json.loads(data)}))
'''
DEBUG_LINE = re.compile(r"^ *[0-9]+ [0-9.]+: ")   # ANSIBLE_DEBUG's lines: the process id and the time
NAMES = [["filter", "gpuops.nvidia.declared_files"], ["test", "ansible.builtin.version"],
         ["lookup", "ansible.builtin.env"], ["filter", "default"]]


def _run(cache, names, **environ):
    env = ansible_run.ansible_env(dict(environ, GPUOPS_TEST_COMPILE_CACHE=str(cache)))
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(names)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, check=True, timeout=300)
    assert out.stderr == "", out.stderr
    return json.loads(out.stdout)


def _record(cache):
    return preload.read_names(os.path.join(str(cache), preload.FOLDER, preload.FILE))


def test_a_name_a_worker_loaded_is_loaded_before_the_next_fork_and_found_the_same(tmp_path):
    first = _run(tmp_path, NAMES, PRELOAD="1")
    assert first["armed"] and first["instance_lookup"] and first["preloaded"] == 0
    loads = dict((name, count) for _kind, name, _what, count in first["found"])
    # with nothing recorded, the preload loads ansible.builtin's filters and tests only: the child loads the
    # collection's filter files and the lookup; the builtin test and filter load nothing more
    assert loads["gpuops.nvidia.declared_files"] > 1 and loads["ansible.builtin.env"] == 1
    assert loads["ansible.builtin.version"] == loads["default"] == 0
    # recorded: the names whose lookup loaded a module
    assert _record(tmp_path) == [("filter", "gpuops.nvidia.declared_files"), ("lookup", "ansible.builtin.env")]
    second = _run(tmp_path, NAMES, PRELOAD="1")
    assert second["preloaded"] == len(_record(tmp_path))
    assert [count for _kind, _name, _what, count in second["found"]] == [0, 0, 0, 0]
    # what the child finds is what it found when it loaded the plugins itself
    assert [f[:3] for f in second["found"]] == [f[:3] for f in first["found"]]
    assert second["found"][0][2] == "gpuops.nvidia.declared_files"
    # without the preload (a process that never runs a play), its child loads them again, the builtin tests too
    again = [count for _kind, _name, _what, count in _run(tmp_path, NAMES, PRELOAD="0")["found"]]
    assert again[0] > 1 and again[1] > 0 and again[2] == 1


def test_a_recorded_name_that_cannot_be_loaded_is_skipped_without_a_word(tmp_path):
    folder = tmp_path / preload.FOLDER
    folder.mkdir()
    (folder / preload.FILE).write_text("filter\tgpuops.nvidia.no_such_filter\nlookup\tno.such.collection\n"
                                       "not a record\nmodule\tansible.builtin.ping\nlookup\tansible.builtin.env\n"
                                       "filter\t\n")
    assert _record(tmp_path) == [("filter", "gpuops.nvidia.no_such_filter"), ("lookup", "ansible.builtin.env"),
                                 ("lookup", "no.such.collection")]
    got = _run(tmp_path, [["lookup", "ansible.builtin.env"], ["filter", "gpuops.nvidia.no_such_filter"]], PRELOAD="1")
    # the lookup loaded before the fork; the missing filter fails in the child as it would have (its name unknown),
    # the collection's filter files already loaded by the preload's attempt
    assert got["preloaded"] == 1
    assert got["found"] == [["lookup", "ansible.builtin.env", "ansible.builtin.env", 0],
                            ["filter", "gpuops.nvidia.no_such_filter", "not found", 0]]


def test_off_leaves_the_loaders_and_the_queue_manager_as_ansible_made_them(tmp_path):
    got = _run(tmp_path, NAMES[:1], GPUOPS_TEST_PLUGIN_PRELOAD="off", PRELOAD="1")
    assert not got["armed"] and not got["instance_lookup"]
    assert got["found"][0][3] > 1 and not (tmp_path / preload.FOLDER).exists()


def test_the_tests_ansible_commands_preload_what_their_workers_loaded(tmp_path):
    """ansible (as ansible-playbook) with the tests' environment: the first run's worker loads the env lookup and
    records it; the next run loads it before forking, and its worker finds it loaded (ansible-core's own debug line
    says found_in_cache; the preload's own load says nothing); the task's result is the same."""
    cmd = [os.path.join(ansible_run.BIN, "ansible"), "localhost", "-m", "ansible.builtin.debug",
           "-a", "msg={{ lookup('ansible.builtin.env', 'GPUOPS_PRELOAD_PROBE') }}"]

    def adhoc(**environ):
        env = ansible_run.ansible_env(dict(environ, GPUOPS_TEST_COMPILE_CACHE=str(tmp_path / "cache"), ANSIBLE_DEBUG="1",
                                           GPUOPS_PRELOAD_PROBE="probe-value", ANSIBLE_STDOUT_CALLBACK="minimal"))
        out = subprocess.run(cmd, cwd=ansible_run.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=300, check=False)
        said = [line for line in out.stdout.splitlines() if not DEBUG_LINE.match(line)]
        assert out.returncode == 0 and "msg: probe-value" in "\n".join(said), said
        lines = [line for line in out.stdout.splitlines() if "Loading LookupModule '" in line and "lookup.env'" in line]
        return [("class_only=True" in line, "found_in_cache=True" in line) for line in lines]

    assert adhoc() == [(False, False)]                       # the worker loaded it
    assert _record(tmp_path / "cache") == [("action", "ansible.builtin.debug"), ("lookup", "ansible.builtin.env")]
    assert adhoc() == [(False, True)]            # ansible loaded it (silently), then its worker found it loaded
    assert adhoc(GPUOPS_TEST_PLUGIN_PRELOAD="off") == [(False, False)]
