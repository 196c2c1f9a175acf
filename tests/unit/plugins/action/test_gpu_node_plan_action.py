"""gpu_node_plan's action plugin: ansible-core's ``normal`` action with the cyclic garbage collector paused while it
runs (issue 36 item 7: the payload build in a forked worker; docs/readings/rerun-gc-pause-session10.md). The
module's own behaviour through it (arguments, module_defaults, check mode, results) is what every site and role test
runs; here: the pause, that it always ends, and that ansible-core picks this plugin for the module."""
import gc
import os
import subprocess
import sys
from unittest import mock

import pytest
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.gpuops.nvidia.plugins.action.gpu_node_plan import ActionModule
from tests.support.ansible_run import ROOT


def _action():
    return ActionModule(mock.MagicMock(), mock.MagicMock(), mock.MagicMock(), mock.MagicMock(), mock.MagicMock(),
                        mock.MagicMock())


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_runs_normal_with_the_collector_paused_and_restores_it(gc_state, monkeypatch):
    seen = []
    result = {"changed": False, "ansible_facts": {"nvidia_gpus": {"gpus": []}}}

    def normal_run(self, tmp=None, task_vars=None):
        seen.append((gc.isenabled(), tmp, task_vars))
        return result

    monkeypatch.setattr(NormalAction, "run", normal_run)
    gc.enable()
    assert _action().run(task_vars={"x": 1}) is result     # the normal action's result, untouched
    assert seen == [(False, None, {"x": 1})]               # paused while it ran, with the same arguments
    assert gc.isenabled()


def test_collector_restored_when_the_action_raises(gc_state, monkeypatch):
    def normal_run(self, tmp=None, task_vars=None):
        assert not gc.isenabled()
        raise RuntimeError("connection lost")

    monkeypatch.setattr(NormalAction, "run", normal_run)
    gc.enable()
    with pytest.raises(RuntimeError, match="connection lost"):
        _action().run(task_vars={})
    assert gc.isenabled()


def test_collector_left_off_where_the_caller_had_turned_it_off(gc_state, monkeypatch):
    monkeypatch.setattr(NormalAction, "run", lambda self, tmp=None, task_vars=None: {})
    gc.disable()
    _action().run(task_vars={})
    assert not gc.isenabled()


def test_ansible_core_picks_this_action_for_the_module():
    """In a fresh interpreter (the plugin loader's state is global): the action plugin ansible-core resolves for
    gpuops.nvidia.gpu_node_plan is this file."""
    code = (
        "import sys\n"
        "from ansible.plugins.loader import action_loader, init_plugin_loader\n"
        "init_plugin_loader([sys.argv[1]])\n"
        "ctx = action_loader.find_plugin_with_context('gpuops.nvidia.gpu_node_plan')\n"
        "print(ctx.resolved, ctx.plugin_resolved_path)\n")
    out = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, ".collections")], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
    assert out[0] == "True", out
    assert os.path.realpath(out[1]) == os.path.join(ROOT, "plugins", "action", "gpu_node_plan.py")
