"""The payload store (plugins/plugin_utils/payload_store.py, issue 48): a module's AnsiballZ payload kept between runs
on the controller, put back only where every source it can hold is as it was, never a reason for a run to fail.

Unit tests drive ``around_build`` with a stand-in for ansible-core's build (it writes what ansible-core writes into
the run's ``ansiballz_cache`` where the file is not there yet, as ansible-core's own cache check does); the last
tests run ansible-core itself: the closure of gpu_node_plan's payload lies within the key's folders, and a second
run reads the first run's payload instead of building it."""
import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import payload_store
from tests.support.ansible_run import BIN, ROOT, ansible_env

FQN = "ansible_collections.example.one.plugins.modules.thing"
NAME = FQN + "-ZIP_STORED-none"


class Source(object):
    """A collection of one module and its module_utils, and ansible-core's build of it into a run's folder."""

    def __init__(self, tmp_path):
        self.root = tmp_path / "collection"
        (self.root / "plugins" / "module_utils" / "sub").mkdir(parents=True)
        (self.root / "plugins" / "modules").mkdir()
        self.module = self.root / "plugins" / "modules" / "thing.py"
        self.module.write_text("from ..module_utils import helper\n")
        self.helper = self.root / "plugins" / "module_utils" / "helper.py"
        self.helper.write_text("X = 1\n")
        (self.root / "plugins" / "module_utils" / "sub" / "deep.py").write_text("Y = 2\n")
        self.home = tmp_path / "home" / ".ansible" / "tmp"
        self.home.mkdir(parents=True)
        self.builds = 0
        self.runs = 0

    def new_run(self):
        self.runs += 1
        run = self.home / ("ansible-local-%d" % self.runs)
        run.mkdir()
        return run

    def build(self, run):
        """ansible-core's part: read the run's cache where it has the module, else build and write it (and its
        lock); returns what it read or built."""
        cache = run / "ansiballz_cache"
        target = cache / NAME
        if target.exists():
            return target.read_bytes()
        self.builds += 1
        cache.mkdir(exist_ok=True)
        (cache / (NAME + ".lock")).write_text("")
        payload = ("payload of %s: %s" % (self.module.read_text(), self.helper.read_text())).encode()
        target.write_bytes(payload)
        return payload

    def around(self, run):
        return payload_store.around_build(FQN, str(self.module), [str(self.root / "plugins" / "module_utils")],
                                          lambda: self.build(run), local_tmp=str(run))

    def store(self):
        return self.home / payload_store.STORE_NAME / FQN


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUOPS_NVIDIA_PAYLOAD_STORE", raising=False)
    return Source(tmp_path)


def test_a_later_run_reads_the_first_runs_payload(source):
    first = source.around(source.new_run())
    assert source.builds == 1
    entries = os.listdir(str(source.store()))
    assert len(entries) == 1
    assert os.listdir(str(source.store() / entries[0])) == [NAME]        # not the lock
    run = source.new_run()
    assert source.around(run) == first
    assert source.builds == 1                                            # read, not built
    assert sorted(os.listdir(str(run / "ansiballz_cache"))) == [NAME]    # whole, no temporary file left
    assert stat.S_IMODE(os.stat(str(source.home / payload_store.STORE_NAME)).st_mode) == 0o700


def test_a_run_that_has_the_payload_already_is_left_alone(source, monkeypatch):
    """A later worker of the same run: the worker that built the payload (or put it there) keeps it; this one works
    out no key, puts nothing in and keeps nothing."""
    source.around(source.new_run())
    run = source.new_run()
    (run / "ansiballz_cache").mkdir()
    (run / "ansiballz_cache" / NAME).write_bytes(b"another worker's build")
    monkeypatch.setattr(payload_store, "key", lambda *args: pytest.fail("the key was worked out"))
    assert source.around(run) == b"another worker's build"
    assert len(os.listdir(str(source.store()))) == 1


@pytest.mark.parametrize("change", ["content", "mtime", "new file", "removed file", "module"])
def test_a_changed_source_is_built_again(source, change):
    source.around(source.new_run())
    if change == "content":
        source.helper.write_text("X = 33\n")
    elif change == "mtime":
        st = os.stat(str(source.helper))
        os.utime(str(source.helper), ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    elif change == "new file":
        (source.root / "plugins" / "module_utils" / "sub" / "other.py").write_text("")
    elif change == "removed file":
        (source.root / "plugins" / "module_utils" / "sub" / "deep.py").unlink()
    else:
        source.module.write_text("from ..module_utils import helper  # changed\n")
    second = source.around(source.new_run())
    assert source.builds == 2
    if change in ("content", "module"):
        assert b"changed" in second or b"X = 33" in second
    assert len(os.listdir(str(source.store()))) == 2


def test_only_the_newest_keys_are_kept(source):
    for n in range(payload_store.KEEP + 2):
        source.helper.write_text("X = %d\n" % n)
        st = os.stat(str(source.helper))
        os.utime(str(source.helper), ns=(st.st_atime_ns, st.st_mtime_ns + n + 1))
        source.around(source.new_run())
    assert source.builds == payload_store.KEEP + 2
    assert len(os.listdir(str(source.store()))) == payload_store.KEEP
    source.around(source.new_run())                             # the newest is among them
    assert source.builds == payload_store.KEEP + 2


def test_a_staging_folder_of_a_killed_run_goes_after_an_hour(source):
    source.around(source.new_run())
    left = source.store() / ".gpuops-left"
    left.mkdir()
    payload_store._prune(str(source.store()), "none", now=os.stat(str(left)).st_mtime + 10)
    assert left.exists()
    payload_store._prune(str(source.store()), "none", now=os.stat(str(left)).st_mtime + 3601)
    assert not left.exists()


@pytest.mark.parametrize("value", ["off", "0", "false", "no", "OFF"])
def test_off_in_the_environment(source, monkeypatch, value):
    monkeypatch.setenv("GPUOPS_NVIDIA_PAYLOAD_STORE", value)
    source.around(source.new_run())
    source.around(source.new_run())
    assert source.builds == 2
    assert not (source.home / payload_store.STORE_NAME).exists()


def test_a_store_others_can_write_is_not_used(source):
    store = source.home / payload_store.STORE_NAME
    store.mkdir()
    store.chmod(0o777)
    source.around(source.new_run())
    source.around(source.new_run())
    assert source.builds == 2
    assert os.listdir(str(store)) == []


def test_a_link_as_the_store_is_not_used(source, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (source.home / payload_store.STORE_NAME).symlink_to(elsewhere)
    source.around(source.new_run())
    source.around(source.new_run())
    assert source.builds == 2
    assert os.listdir(str(elsewhere)) == []


def test_the_stores_own_errors_never_fail_the_build(source):
    (source.home / payload_store.STORE_NAME).write_text("a file where the store would be")
    assert source.around(source.new_run()).startswith(b"payload of")
    assert source.builds == 1


def test_a_failed_build_raises_as_it_was_and_keeps_nothing(source):
    def broken():
        raise RuntimeError("module not found")

    with pytest.raises(RuntimeError, match="module not found"):
        payload_store.around_build(FQN, str(source.module), [], broken, local_tmp=str(source.new_run()))
    assert os.listdir(str(source.store())) == []


def test_gpu_node_plans_closure_lies_within_the_keys_folders(tmp_path):
    """ansible-core's own build of the module (its recursive_finder): every file it puts in the payload is the module,
    a file under the collection's plugins/module_utils or one of ansible-core's module_utils: the folders the key
    lists, so no source of the payload can change without a new key."""
    code = r"""
import json, os, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
import ansible.constants as C
C.DEFAULT_LOCAL_TMP = sys.argv[3]   # the test's own folder: ansible-core builds the payload's cache there
from ansible.executor import module_common
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
names = []
real = module_common.recursive_finder
def finder(*args, **kwargs):
    found = real(*args, **kwargs)
    names.extend(args[3].namelist())
    return found
module_common.recursive_finder = finder
module_common.modify_module(module_name="gpuops.nvidia.gpu_node_plan", module_path=sys.argv[2], module_args={},
                            templar=Templar(loader=DataLoader()),
                            task_vars={"ansible_python_interpreter": sys.executable})
print(json.dumps(names))
"""
    module = os.path.join(ROOT, "plugins", "modules", "gpu_node_plan.py")
    out = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, ".collections"), module, str(tmp_path)],
                         check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    names = [n for n in json.loads(out.strip().splitlines()[-1]) if n.endswith(".py")]
    assert len(names) > 50
    outside = [n for n in names if not (
        n.startswith("ansible/module_utils/") or n.startswith("ansible_collections/gpuops/nvidia/plugins/module_utils/")
        or n in ("ansible/__init__.py", "ansible_collections/__init__.py", "ansible_collections/gpuops/__init__.py",
                 "ansible_collections/gpuops/nvidia/__init__.py", "ansible_collections/gpuops/nvidia/plugins/__init__.py"))]
    assert outside == []


def _plan_once(home, sim):
    """One ad-hoc run of gpuops.nvidia.gpu_node_plan (its action, so the store) with ansible-core's debug log."""
    env = ansible_env({"HOME": str(home), "ANSIBLE_DEBUG": "1", "GPUOPS_SIMULATED_GPUS": str(sim),
                       "GPUOPS_SIMULATED_MACHINE": "h200-x1", "ANSIBLE_STDOUT_CALLBACK": "minimal"})
    env.pop("GPUOPS_TEST_ANSIBALLZ_CACHE", None)      # the suite's shared cache: this test is about the run's own
    env.pop("GPUOPS_NVIDIA_PAYLOAD_STORE", None)
    proc = subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-m", "gpuops.nvidia.gpu_node_plan",
                           "-a", json.dumps({"steps": []}), "-e", "ansible_python_interpreter=%s" % sys.executable],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ours = [line for line in proc.stdout.splitlines() if "ANSIBALLZ" in line and "gpu_node_plan" in line]
    return ours


def test_ansible_core_reads_the_kept_payload_in_the_next_run(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    sim = tmp_path / "gpus.json"
    first = _plan_once(home, sim)
    assert not any("using cached module" in line for line in first), first
    store = home / ".ansible" / "tmp" / payload_store.STORE_NAME / \
        "ansible_collections.gpuops.nvidia.plugins.modules.gpu_node_plan"
    assert len(os.listdir(str(store))) == 1
    second = _plan_once(home, sim)
    assert any("using cached module" in line for line in second), second
