"""The tests' compile cache (tests/support/compile_cache/gpuops_startup.py, started by that directory's
sitecustomize.py): a hit gives back what compile() makes,
under the caller's file name; anything it should not cache goes to the real compile(); a bad entry is compiled
again; and the ansible commands the tests run start with it."""
import __future__
import builtins
import importlib.util
import json
import marshal
import os
import subprocess
import sys
import zipfile

import pytest

from tests.support import ansible_run

STARTUP = os.path.join(ansible_run.COMPILE_CACHE_PATH, "gpuops_startup.py")
_spec = importlib.util.spec_from_file_location("gpuops_test_compile_cache", STARTUP)
cc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cc)

# a source above MIN_SIZE, with a nested function, a class and an annotation
SOURCE = "\n".join(["def outer(x: int):",
                    "    def inner(y):",
                    "        return x * y + 1",
                    "    return inner",
                    "class Box(object):",
                    "    size: 'int' = 3",
                    "    def twice(self):",
                    "        return [outer(self.size)(i) for i in range(2)]",
                    "VALUES = %r" % (list(range(400)),),
                    ""])


class Counting(object):
    """The real compile(), counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return builtins.compile(*args, **kwargs)


def _filenames(code):
    yield code.co_filename
    for const in code.co_consts:
        if hasattr(const, "co_filename"):
            yield from _filenames(const)


def _run(code):
    space = {}
    exec(code, space)  # pylint: disable=exec-used
    return space["Box"]().twice(), space["outer"].__code__.co_filename, space["Box"].__annotations__


def test_a_second_compile_of_the_same_source_is_read_back_as_the_same_code_under_its_own_file_name(tmp_path):
    assert len(SOURCE) >= cc.MIN_SIZE
    real = Counting()
    cache = cc.CompileCache(str(tmp_path), real=real)
    first = cache.compile(SOURCE, "/a/first.py", "exec", dont_inherit=True)
    second = cache.compile(SOURCE, "/b/second.py", "exec", dont_inherit=True)
    assert (cache.misses, cache.hits, real.calls) == (1, 1, 1)
    expected = builtins.compile(SOURCE, "/b/second.py", "exec", dont_inherit=True)
    assert second == expected and second.co_consts == expected.co_consts
    assert set(_filenames(first)) == {"/a/first.py"} and set(_filenames(second)) == {"/b/second.py"}
    assert _run(second) == ([1, 4], "/b/second.py", {"size": "int"})
    # bytes and str sources of the same text, and another optimization level, are entries of their own
    cache.compile(SOURCE.encode(), "/c.py", "exec", dont_inherit=True)
    cache.compile(SOURCE, "/d.py", "exec", dont_inherit=True, optimize=2)
    assert (cache.misses, cache.hits) == (3, 1)
    assert sum(len(walked[2]) for walked in os.walk(str(tmp_path))) == 3


def test_the_future_flags_are_part_of_the_key_as_compile_inherits_them(tmp_path):
    cache = cc.CompileCache(str(tmp_path))
    plain = cache.compile(SOURCE, "/p.py", "exec", dont_inherit=True)
    postponed = cache.compile(SOURCE, "/p.py", "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    assert cache.misses == 2 and cache.hits == 0
    space_plain, space_postponed = {}, {}
    exec(plain, space_plain)  # pylint: disable=exec-used
    exec(postponed, space_postponed)  # pylint: disable=exec-used
    assert space_plain["outer"].__annotations__ == {"x": int}
    assert space_postponed["outer"].__annotations__ == {"x": "int"}
    # dont_inherit=False: the caller's own __future__ flags (this file has none) -> the plain entry
    again = cache.compile(SOURCE, "/p.py", "exec")
    assert cache.hits == 1 and again == plain


@pytest.mark.parametrize("call", [
    pytest.param(lambda c: c.compile("x = 1\n", "/small.py", "exec"), id="below-min-size"),
    pytest.param(lambda c: c.compile("1 + " * 400 + "1", "/e.py", "eval"), id="eval-mode"),
    pytest.param(lambda c: c.compile(SOURCE, "/t.py", "exec", 0x400), id="ast"),
    pytest.param(lambda c: c.compile(SOURCE, b"/b.py", "exec"), id="bytes-file-name"),
])
def test_what_is_not_cached_goes_to_the_real_compile_and_writes_nothing(tmp_path, call):
    real = Counting()
    cache = cc.CompileCache(str(tmp_path), real=real)
    call(cache)
    call(cache)
    assert real.calls == 2 and cache.hits == cache.misses == 0 and os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize("content", [b"", b"not marshal data", None])
def test_an_entry_that_is_not_code_is_compiled_again_and_replaced(tmp_path, content):
    cache = cc.CompileCache(str(tmp_path))
    cache.compile(SOURCE, "/x.py", "exec", dont_inherit=True)
    key = cache.key(SOURCE, "exec", 0, -1)
    entry = tmp_path / key[:2] / key
    assert entry.is_file()
    entry.write_bytes(marshal.dumps(("a tuple",)) if content is None else content)
    code = cache.compile(SOURCE, "/x.py", "exec", dont_inherit=True)
    assert cache.misses == 2 and cache.hits == 0 and _run(code)[0] == [1, 4]
    assert cache.compile(SOURCE, "/x.py", "exec", dont_inherit=True) == code and cache.hits == 1


def test_a_source_that_does_not_compile_raises_as_before_and_leaves_no_entry(tmp_path):
    cache = cc.CompileCache(str(tmp_path))
    with pytest.raises(SyntaxError) as raised:
        cache.compile(SOURCE + "\ndef broken(:\n", "/bad.py", "exec")
    assert raised.value.filename == "/bad.py"
    assert os.listdir(str(tmp_path)) == []


def test_an_unwritable_directory_only_costs_the_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = cc.CompileCache(str(blocker / "cache"))
    assert _run(cache.compile(SOURCE, "/y.py", "exec"))[0] == [1, 4]
    assert cache.misses == 1 and blocker.read_text() == "not a directory"


def _import_from_zip(tmp_path, environ):
    """A new interpreter started as the tests start ansible's commands, importing a module from a zip (as a module
    run imports its payload): the cache's hits and misses in that process, or None where compile is not routed."""
    archive = tmp_path / "payload.zip"
    if not archive.exists():
        with zipfile.ZipFile(str(archive), "w") as zipped:
            zipped.writestr("payloadmod.py", SOURCE)
    script = ("import builtins, sys; sys.path.insert(0, %r); import payloadmod; assert payloadmod.Box().twice() == "
              "[1, 4]; c = getattr(builtins.compile, '__self__', None); print(None if c is None or "
              "isinstance(c, type(builtins)) else [c.hits, c.misses])" % str(archive))
    # without the shared AnsiballZ cache's hook and the import hooks of the Jinja cache, the plugin preload, the
    # controller's tasks and the local module runs: where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, as on CI), importing them compiles
    # their sources through the cache, more compiles to count
    env = ansible_run.ansible_env(dict(environ, GPUOPS_TEST_ANSIBALLZ_CACHE="", GPUOPS_TEST_JINJA_CACHE="off",
                                       GPUOPS_TEST_PLUGIN_PRELOAD="off", GPUOPS_TEST_CONTROLLER_TASKS="off",
                                       GPUOPS_TEST_LOCAL_MODULES="off"))
    out = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=True)
    return out.stdout.strip()


def test_the_ansible_commands_the_tests_run_start_with_the_cache_and_zipimport_reads_it(tmp_path):
    env = ansible_run.ansible_env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [ansible_run.COMPILE_CACHE_PATH, "/elsewhere"]
    assert env["GPUOPS_TEST_COMPILE_CACHE"] == ansible_run.COMPILE_CACHE
    where = {"GPUOPS_TEST_COMPILE_CACHE": str(tmp_path / "cache")}
    # the first process compiles the module once (zipimport asks twice on CPython 3.10 to 3.13: the second is a
    # hit), the next one not at all
    hits, misses = json.loads(_import_from_zip(tmp_path, where))
    assert misses == 1
    hits_again, misses_again = json.loads(_import_from_zip(tmp_path, where))
    assert misses_again == 0 and hits_again == hits + 1
    assert _import_from_zip(tmp_path, {"GPUOPS_TEST_COMPILE_CACHE": "off"}) == "None"


def test_a_bench_uses_the_cache_only_where_its_environment_names_it(monkeypatch, tmp_path):
    """bench/'s figures are a node's real cost: a bench started by hand runs ansible without the cache; one that a
    test starts (tests/conftest.py names the cache for the session) runs with it. fleet_common.Run is what the fleet,
    compare, floor, chart and driver flow benches run ansible-playbook with."""
    sys.path.insert(0, os.path.join(ansible_run.ROOT, "bench"))
    try:
        import fleet_common  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, '{"plays": [], "stats": {}}', "")

    monkeypatch.setattr(fleet_common.subprocess, "run", fake_run)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert os.environ["GPUOPS_TEST_COMPILE_CACHE"]   # the test session's (tests/conftest.py)
    monkeypatch.delenv("GPUOPS_TEST_COMPILE_CACHE")
    fleet_common.Run("site.yml", str(tmp_path), 1, {})
    assert seen[-1]["PYTHONPATH"] == "/elsewhere" and "GPUOPS_TEST_COMPILE_CACHE" not in seen[-1]
    monkeypatch.setenv("GPUOPS_TEST_COMPILE_CACHE", "off")
    fleet_common.Run("site.yml", str(tmp_path), 1, {})
    assert seen[-1]["PYTHONPATH"] == "/elsewhere" and "GPUOPS_TEST_COMPILE_CACHE" not in seen[-1]
    monkeypatch.setenv("GPUOPS_TEST_COMPILE_CACHE", str(tmp_path / "cache"))
    fleet_common.Run("site.yml", str(tmp_path), 1, {})
    assert seen[-1]["PYTHONPATH"].split(os.pathsep) == [ansible_run.COMPILE_CACHE_PATH, "/elsewhere"]
    assert seen[-1]["GPUOPS_TEST_COMPILE_CACHE"] == str(tmp_path / "cache")


def test_a_process_started_as_the_tests_start_ansible_freezes_its_objects_only_across_a_fork():
    """The start-up's fork hook: the forked child starts with its parent's objects frozen (its collector leaves
    them alone), the parent has none frozen after the fork."""
    script = ("import gc, os; before = gc.get_freeze_count(); r, w = os.pipe(); pid = os.fork()\n"
              "if pid == 0:\n    os.write(w, str(gc.get_freeze_count()).encode()); os._exit(0)\n"
              "os.close(w); child = int(os.read(r, 64)); os.waitpid(pid, 0)\n"
              "print(before, child > 1000, gc.get_freeze_count())")
    env = ansible_run.ansible_env({})
    out = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=True)
    assert out.stdout.split() == ["0", "True", "0"]
    off = subprocess.run([sys.executable, "-c", script], env=ansible_run.ansible_env({"GPUOPS_TEST_COMPILE_CACHE": "off"}),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=True)
    assert off.stdout.split() == ["0", "False", "0"]      # without the tests' start-up: nothing frozen


def test_a_process_started_as_the_tests_start_ansible_makes_its_cache_without_hashlib_or_importlib_util(tmp_path):
    """The stand-ins, helm's wrapper and the other short Pythons the tests' ansible runs start load this start-up too:
    the cache's key comes from _blake2 and the frozen importlib, not from hashlib (OpenSSL) and importlib.util, which
    cost such a process about 8 ms (issue 49). The cache is still made (compile() is the cache's) and its key still
    starts from the interpreter's bytecode magic."""
    script = ("import sys, builtins\n"
              "print(sorted(m for m in ('hashlib', '_hashlib', 'importlib.util') if m in sys.modules))\n"
              "print(type(builtins.compile.__self__).__name__)\n")
    env = ansible_run.ansible_env({"GPUOPS_TEST_COMPILE_CACHE": str(tmp_path / "cache"),
                                   "GPUOPS_TEST_MODULE_SERVER": "off"})
    out = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=True)
    assert out.stdout.splitlines() == ["[]", "CompileCache"], out.stdout + out.stderr
    magic = cc._magic_number()  # pylint: disable=protected-access
    seed = cc.CompileCache(str(tmp_path / "other"))._seed.digest()  # pylint: disable=protected-access
    assert magic == importlib.util.MAGIC_NUMBER
    assert seed == cc._digest(importlib.util.MAGIC_NUMBER, digest_size=32).digest()  # pylint: disable=protected-access


def _started(tmp_path, raw=None, **extra):
    """A new interpreter started as the tests start ansible's commands, no bytecode written (as on CI): where its
    start-up code came from, whether compile() is the cache's, and the start-up modules it has."""
    script = ("import builtins, sys\n"
              "print(sys.modules['gpuops_startup'].loaded_from)\n"
              "print(type(getattr(builtins.compile, '__self__', None)).__name__)\n"
              "print(sorted(m for m in ('importlib.machinery', 'shadowed_marker') if m in sys.modules))\n")
    env = ansible_run.ansible_env(dict({"GPUOPS_TEST_COMPILE_CACHE": str(tmp_path / "cache"),
                                        "GPUOPS_TEST_MODULE_SERVER": "off", "PYTHONDONTWRITEBYTECODE": "1"}, **extra))
    env.update(raw or {})   # (set as they are: ansible_env leaves the hook's folder out where the cache is off)
    out = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_start_up_code_is_compiled_once_then_read_from_the_cache(tmp_path):
    """sitecustomize.py keeps gpuops_startup.py's code in the compile cache: where no bytecode is written (as on CI),
    the first start compiles it and every later start reads it back (issue 49: about 5 ms of each of some 7 000
    starts); what the start does is the same either way. Without the cache it is imported as usual."""
    assert _started(tmp_path) == ["source", "CompileCache", "[]"]
    entries = os.listdir(str(tmp_path / "cache" / "startup"))
    assert len(entries) == 1
    assert _started(tmp_path) == ["cache", "CompileCache", "[]"]
    # an entry that cannot be read is compiled again and replaced
    with open(str(tmp_path / "cache" / "startup" / entries[0]), "wb") as handle:
        handle.write(b"not marshal")
    assert _started(tmp_path) == ["source", "CompileCache", "[]"]
    assert _started(tmp_path) == ["cache", "CompileCache", "[]"]
    # the hook's folder on PYTHONPATH with the cache off (ansible_env leaves the folder out then): imported as usual
    assert _started(tmp_path, raw={"GPUOPS_TEST_COMPILE_CACHE": "off",
                                   "PYTHONPATH": ansible_run.COMPILE_CACHE_PATH}) == ["import", "module", "[]"]


def test_a_sitecustomize_that_the_start_up_shadows_still_runs_after_it(tmp_path):
    """A sitecustomize further down sys.path (a distribution's own) still runs; where there is none, the start-up does
    not import importlib.machinery to look for one (about 3 ms of a stand-in's start)."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys, types\nsys.modules['shadowed_marker'] = types.ModuleType('m')\n")
    path = os.pathsep.join((ansible_run.COMPILE_CACHE_PATH, str(other)))
    started = _started(tmp_path, PYTHONPATH=str(other))
    assert started[0] == "source" and started[2] == "['importlib.machinery', 'shadowed_marker']", started
    assert ansible_run.ansible_env({"PYTHONPATH": str(other)})["PYTHONPATH"] == path
    assert _started(tmp_path)[2] == "[]"
