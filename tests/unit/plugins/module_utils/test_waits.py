"""_waits: the one table of the collection's waits. Each row says what is waited for and when the wait ends; a wait
reads until its row's condition holds or the timeout passes, with the row's default timeout and interval unless the
caller's options say otherwise. A fake clock drives every wait here: nothing sleeps."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _waits
from tests.support.fake_clock import FakeClock as Clock


def test_every_row_says_what_when_and_how_long():
    assert len(_waits.WAITS) >= 10
    for name, row in _waits.WAITS.items():
        assert row.what and row.until and callable(row.done), name
        assert isinstance(row.timeout, int) and 0 < row.timeout <= 86400, name
        assert isinstance(row.interval, float) and 0 < row.interval <= 60, name


@pytest.mark.parametrize("name, not_yet, done", [
    ("mig_manager", "pending", "failed"),          # failed ends the wait too: the module reports it
    ("mig_manager", None, "success"),
    ("pods_gone", ["gpu/plugin-x"], []),
    ("drain", ["jobs/a"], []),
    ("rollout", (["node n1: 0 nvidia.com/gpu, expected 8"], {}), ([], {"n1": {}})),
    ("dra_slices", ([], ["GPU GPU-1 is not published"]), ([{"name": "s"}], [])),
    ("fabric", [{"index": 3}], []),
    ("daemon_exit", True, False),
    ("mps_up", False, True),
    ("mps_down", True, False),
    ("node_lock", False, True),
    ("lease_free", (None, None, "wait", False, 0), (None, None, "take", True, 0)),
    ("lease_arrivals", (["s1"], 2), (["s1", "s2"], 2)),
])
def test_a_wait_ends_where_its_row_says(name, not_yet, done):
    clock = Clock()
    reads = iter([not_yet, done])
    polled = _waits.wait(name, lambda: next(reads), clock=clock, sleep=clock.sleep)
    assert polled.done and polled.seen == done
    assert clock.sleeps == [_waits.WAITS[name].interval]        # the row's default interval


def test_the_timeout_and_interval_given_win_and_a_timeout_returns_the_last_read():
    clock = Clock()
    polled = _waits.wait("pods_ready", lambda: ["gpu/plugin"], timeout=7, interval=3, clock=clock, sleep=clock.sleep)
    assert not polled.done and polled.seen == ["gpu/plugin"] and polled.waited == 7
    assert clock.sleeps == [3, 3, 1]                    # never past the deadline; the last read at it
    clock = Clock()
    polled = _waits.wait("daemon_exit", lambda: True, clock=clock, sleep=clock.sleep)
    assert not polled.done and round(polled.waited, 6) == _waits.WAITS["daemon_exit"].timeout   # the row's 5 s
