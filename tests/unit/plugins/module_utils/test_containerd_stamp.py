"""_containerd_stamp: the code its digest covers, and what gpu_node_plan loads to check it.

The stamp lets a later run (and gpu_node_plan) return a recorded result without running nvidia-ctk or containerd,
so its code digest must cover every module_utils file whose code decides containerd_runtime's result: a file the
run imports but CODE_MODULES leaves out could change the result without changing the digest, and the node would
keep reporting the old one. The files are found here the way ansible-core finds what goes into a module's
payload (ansible.executor.module_common.ModuleDepFinder, every import statement, run or not).
"""
import ast
import json
import os
import subprocess
import sys

import pytest
from ansible.executor.module_common import ModuleDepFinder

from tests.support.ansible_run import ROOT

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import (  # noqa: E402
    _containerd_stamp as containerd_stamp)

PACKAGE = ("ansible_collections", "gpuops", "nvidia", "plugins")
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")


def _payload(module):
    """The collection's module_utils (``package._name`` below module_utils) that ansible-core packs with
    plugins/modules/``module``.py."""
    todo = [(os.path.join(ROOT, "plugins", "modules", module + ".py"), ".".join(PACKAGE + ("modules", module)))]
    found = set()
    while todo:
        path, fqn = todo.pop()
        with open(path) as handle:
            finder = ModuleDepFinder(fqn, ast.parse(handle.read()))
        for names in finder.submodules:
            if names[:5] != PACKAGE + ("module_utils",) or len(names) < 6:
                continue
            # the file an import names: the shortest run of names below module_utils that is a file
            depth = next((d for d in range(6, len(names) + 1)
                          if os.path.isfile(os.path.join(MODULE_UTILS, *names[5:d]) + ".py")), None)
            assert depth, names
            if ".".join(names[5:depth]) in found:
                continue
            found.add(".".join(names[5:depth]))
            todo.append((os.path.join(MODULE_UTILS, *names[5:depth]) + ".py", ".".join(names[:depth])))
    return found


# How the module's code is loaded, not code that decides its result: _bytecode_cache executes exactly the sources of
# the payload (its entries are keyed by each source's SHA-256), so a change to it is no reason to validate again.
LOADER_MODULES = {"common._bytecode_cache"}


def test_the_code_digest_covers_every_module_utils_file_containerd_runtime_loads():
    missing = _payload("containerd_runtime") - set(containerd_stamp.CODE_MODULES) - LOADER_MODULES
    assert not missing, ("containerd_runtime imports %s, whose code can change its result: add it to "
                         "_containerd_stamp.CODE_MODULES" % sorted(missing))
    unused = set(containerd_stamp.CODE_MODULES) - _payload("containerd_runtime")
    assert not unused, "CODE_MODULES names %s, which containerd_runtime does not import" % sorted(unused)


def test_gpu_node_plan_carries_every_file_the_digest_reads():
    # without one of them in its payload the plan could never compute the digest, and never find a verified state
    assert set(containerd_stamp.CODE_MODULES) <= _payload("gpu_node_plan")


@pytest.mark.parametrize("name", containerd_stamp.CODE_MODULES)
def test_a_change_to_any_listed_file_is_another_digest(monkeypatch, name):
    before = containerd_stamp.code_digest()
    assert before is not None and len(before) == 64
    read = containerd_stamp._source
    monkeypatch.setattr(containerd_stamp, "_source", lambda each: read(each) + ("\n" if each == name else ""))
    assert containerd_stamp.code_digest() not in (None, before)
    monkeypatch.setattr(containerd_stamp, "_source", lambda each: None if each == name else read(each))
    assert containerd_stamp.code_digest() is None  # a source that cannot be read: nothing is recorded or trusted


def test_gpu_node_plan_checks_the_stamp_without_loading_the_run():
    """gpu_node_plan imports the stamp, not the runner or the run (whose compiling it would pay on every node), and
    its digest is the one containerd_runtime computes with everything loaded."""
    script = (
        "import json, sys\n"
        "sys.path.insert(0, %r)\n"
        "from ansible_collections.gpuops.nvidia.plugins.modules import gpu_node_plan\n"
        "from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _containerd_stamp\n"
        "loaded = sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith("
        "'ansible_collections.gpuops.nvidia.plugins.module_utils.'))\n"
        "print(json.dumps({'loaded': loaded, 'digest': _containerd_stamp.code_digest()}))\n"
        % os.path.join(ROOT, ".collections"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    seen = json.loads(out.stdout)
    assert "_containerd_run" not in seen["loaded"] and "_nvidia_ctk" not in seen["loaded"], seen["loaded"]
    from ansible_collections.gpuops.nvidia.plugins.modules import containerd_runtime  # noqa: F401  # loads the run
    assert seen["digest"] == containerd_stamp.code_digest()


def test_missing_nvidia_ctk_message_lists_every_place_searched():
    # the search covers /usr/sbin; the message used to leave it out
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._containerd_stamp import find_tools
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import ToolNotFound
    with pytest.raises(ToolNotFound) as err:
        find_tools(lambda name, opt_dirs=None: None, {"nvidia_ctk_path": None, "containerd_path": None})
    assert "(looked in PATH, /usr/bin, /usr/local/bin, /usr/sbin)" in str(err.value)
