"""_bytecode_cache: the collection's module_utils imported from a zip archive (as in an AnsiballZ payload) are compiled
once per process, kept in a private per-user cache keyed by their source, read back by the next process, and never
served stale, from someone else's directory, or where the cache is off. Each case runs a fresh Python, as a module
run does, with the payload's sys.path: the archive first."""
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

from tests.support.ansible_run import ROOT
from tests.support.pythons import find_python

PKG_DIR = "ansible_collections/gpuops/nvidia/plugins/module_utils"
CACHE_SRC = os.path.join(ROOT, "plugins", "module_utils", "common", "_bytecode_cache.py")
TAG = sys.implementation.cache_tag

# What a module does, then what the test reads off the process: how often each of the archive's module_utils was
# compiled, and where Python thinks the imported code came from.
RUNNER = textwrap.dedent("""
    import builtins, collections, json, sys
    compiled = collections.Counter()
    _compile = builtins.compile
    def counting(source, filename, *args, **kwargs):
        compiled[str(filename).rsplit('/', 1)[-1]] += 1
        return _compile(source, filename, *args, **kwargs)
    builtins.compile = counting
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
    _bytecode_cache.install()
    from ansible_collections.gpuops.nvidia.plugins.module_utils.layer import _thing
    try:
        _thing.fail()
    except RuntimeError as exc:
        tb_file = exc.__traceback__.tb_next.tb_frame.f_code.co_filename
    print(json.dumps({"value": _thing.VALUE, "file": _thing.__file__, "tb_file": tb_file,
                      "compiled": compiled.get("_thing.py", 0)}))
""")


def _archive(path, value):
    """A payload-like zip: the package chain, common/_bytecode_cache and one module_utils file layer/_thing
    (VALUE = value), each in a package below module_utils as the collection's files are."""
    with zipfile.ZipFile(str(path), "w") as archive:
        parts = PKG_DIR.split("/")
        for depth in range(1, len(parts) + 1):
            archive.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        for package in ("common", "layer"):
            archive.writestr("%s/%s/__init__.py" % (PKG_DIR, package), "")
        with open(CACHE_SRC, "rb") as handle:
            archive.writestr(PKG_DIR + "/common/_bytecode_cache.py", handle.read())
        archive.writestr(PKG_DIR + "/layer/_thing.py",
                         "VALUE = %r\n\n\ndef fail():\n    raise RuntimeError('here')\n" % value)
    return str(path)


def _run(archive, env, python=sys.executable):
    # -S: no site-packages, so nothing but the archive provides the package; the environment is the case's alone
    proc = subprocess.run([python, "-S", "-c", "import sys; sys.path.insert(0, %r)\n%s" % (archive, RUNNER)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def home(tmp_path):
    """A home directory of this user; the environment of a module run with it (no XDG_CACHE_HOME, no override)."""
    path = tmp_path / "home"
    path.mkdir()
    env = {"HOME": str(path), "PATH": os.environ.get("PATH", "")}
    return path, env


def _entry(home_dir, tag=TAG):
    name = "%s.layer._thing.%s.code" % (PKG_DIR.replace("/", "."), tag)
    return home_dir / ".cache" / "gpuops.nvidia" / "bytecode" / name


# the oldest Python the modules support and the newest, beside this one (where this machine has them)
PYTHONS = [sys.executable] + [found for found in (find_python("3.9"), find_python("3.13")) if found]


def _tag(python):
    return subprocess.check_output([python, "-S", "-c", "import sys; print(sys.implementation.cache_tag)"],
                                   universal_newlines=True).strip()


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_compiled_once_then_read_from_the_cache_by_the_next_run(tmp_path, home, python):
    home_dir, env = home
    first = _run(_archive(tmp_path / "a.zip", 1), env, python)
    # zipimport would compile it twice; here once, and the code is kept
    assert first["compiled"] == 1 and first["value"] == 1
    entry = _entry(home_dir, _tag(python))
    assert entry.is_file()
    assert oct(os.stat(str(entry.parent)).st_mode & 0o777) == "0o700"

    # the next module run unpacks its payload elsewhere: the code is read, not compiled, and it names the new archive
    second_zip = _archive(tmp_path / "b.zip", 1)
    second = _run(second_zip, env, python)
    assert second["compiled"] == 0 and second["value"] == 1
    assert second["file"] == os.path.join(second_zip, PKG_DIR, "layer", "_thing.py")
    assert second["tb_file"] == second["file"]


def test_a_changed_source_is_compiled_again_never_served_stale(tmp_path, home):
    home_dir, env = home
    _run(_archive(tmp_path / "a.zip", "old"), env)
    changed = _run(_archive(tmp_path / "b.zip", "new"), env)
    assert changed == dict(changed, value="new", compiled=1)
    # one entry per file and Python: the new source replaced the old one
    assert sorted(p.name for p in _entry(home_dir).parent.iterdir()) == [_entry(home_dir).name]
    assert _run(_archive(tmp_path / "c.zip", "new"), env)["compiled"] == 0


def test_a_broken_entry_is_compiled_again_and_replaced(tmp_path, home):
    home_dir, env = home
    archive = _archive(tmp_path / "a.zip", 7)
    _run(archive, env)
    entry = _entry(home_dir)
    data = entry.read_bytes()
    entry.write_bytes(data[:len(data) // 2])  # the key intact, the code cut short
    broken = _run(archive, env)
    assert broken["compiled"] == 1 and broken["value"] == 7
    assert _run(archive, env)["compiled"] == 0  # the broken entry was replaced by a whole one


def test_a_directory_others_can_write_to_is_never_read(tmp_path, home):
    home_dir, env = home
    archive = _archive(tmp_path / "a.zip", 1)
    _run(archive, env)
    cache = _entry(home_dir).parent
    os.chmod(str(cache), 0o777)
    try:
        # another user could have put code there: compiled, and nothing written
        before = _entry(home_dir).stat().st_mtime_ns
        assert _run(archive, env)["compiled"] == 1
        assert _entry(home_dir).stat().st_mtime_ns == before
    finally:
        os.chmod(str(cache), 0o700)


def test_off_and_python_s_own_switch(tmp_path, home):
    home_dir, env = home
    archive = _archive(tmp_path / "a.zip", 1)
    # off: compiled once per run (never twice), no directory made
    assert _run(archive, dict(env, GPUOPS_BYTECODE_CACHE="off"))["compiled"] == 1
    assert not (home_dir / ".cache").exists()
    # PYTHONDONTWRITEBYTECODE: the default directory is not written to
    assert _run(archive, dict(env, PYTHONDONTWRITEBYTECODE="1"))["compiled"] == 1
    assert not _entry(home_dir).exists()
    # ... but a directory named explicitly is (asked for), and read by the next run
    named = tmp_path / "named" / "cache"
    explicit = dict(env, PYTHONDONTWRITEBYTECODE="1", GPUOPS_BYTECODE_CACHE=str(named))
    assert _run(archive, explicit)["compiled"] == 1
    assert _run(archive, explicit)["compiled"] == 0
    assert len(list(named.iterdir())) == 1


def test_source_outside_an_archive_is_left_to_python(tmp_path):
    """Tests, ansible-test and the MIG boot unit's bundle import module_utils from files: the finder stays out."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache

    finder = _bytecode_cache.ArchiveFinder(_bytecode_cache.BytecodeCache(str(tmp_path / "unused")))
    package = os.path.join(ROOT, "plugins", "module_utils", "gpu")
    assert finder.find_spec(_bytecode_cache.PACKAGE + ".gpu._gpu", [package]) is None
    assert finder.find_spec("json", None) is None
    assert not (tmp_path / "unused").exists()


def test_install_changes_nothing_outside_a_payload():
    """ansible-test's import check and the tests import the modules from disk: sys.meta_path stays as it was."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache

    before = list(sys.meta_path)
    assert _bytecode_cache.install() is None
    assert sys.meta_path == before
