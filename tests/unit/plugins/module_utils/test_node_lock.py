# -*- coding: utf-8 -*-
"""module_lock: a node lock held by another run is a Refusal raised to the module's base (issue 48), worded as
before and reported unchanged."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_lock
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Refusal, failure


class _Module(object):
    def __init__(self, lock_timeout):
        self.params = dict(lock_timeout=lock_timeout)

    def fail_json(self, **kwargs):     # never called: the base fails the module
        raise AssertionError("fail_json called from a helper: %r" % kwargs)


def test_a_held_lock_is_a_refusal_with_the_locks_message_and_changed_false(tmp_path, monkeypatch):
    monkeypatch.setenv(_node_lock.ENV_LOCK, str(tmp_path / "node.lock"))
    holder = _node_lock.NodeLock(timeout=0, owner="test-holder").acquire()
    try:
        with pytest.raises(Refusal) as raised:
            _node_lock.module_lock(_Module(0), "mig_mode")
    finally:
        holder.release()
    got = failure(raised.value, dict(changed=True))     # what the base passes to fail_json
    assert "another gpuops run holds the node lock" in got["msg"] and "test-holder" in got["msg"]
    assert got["changed"] is False
    with _node_lock.module_lock(_Module(0), "mig_mode"):   # free again: taken
        pass
