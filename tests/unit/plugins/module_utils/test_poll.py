# -*- coding: utf-8 -*-
"""poll: reads until the state is reached or the deadline passes, with a fake clock (no real sleeping)."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._poll import poll
from tests.support.fake_clock import FakeClock


def reader(values, clock=None, cost=0.0):
    """A read that returns ``values`` one after another (the last one for ever), each read taking ``cost`` s."""
    values = list(values)
    reads = []

    def read():
        if clock is not None:
            clock.now += cost
        reads.append(values[min(len(reads), len(values) - 1)])
        return reads[-1]
    return read, reads


def test_returns_as_soon_as_the_state_is_reached():
    clock = FakeClock(1000.0)
    read, reads = reader(["pending", "pending", "ready"])
    got = poll(read, lambda seen: seen == "ready", timeout=60, interval=5, clock=clock, sleep=clock.sleep)
    assert got.done and got.seen == "ready" and got.waited == 10
    assert reads == ["pending", "pending", "ready"] and clock.sleeps == [5, 5]


def test_timeout_returns_what_was_seen_last_and_never_sleeps_past_the_deadline():
    clock = FakeClock(1000.0)
    read, reads = reader([["a", "b"], ["b"]])
    got = poll(read, lambda seen: not seen, timeout=12, interval=5, clock=clock, sleep=clock.sleep)
    assert not got.done and got.seen == ["b"] and got.waited == 12
    assert clock.sleeps == [5, 5, 2] and len(reads) == 4   # the last read is made at the deadline


def test_a_slow_read_counts_against_the_deadline():
    clock = FakeClock(1000.0)
    read, reads = reader([1], clock=clock, cost=4)
    got = poll(read, lambda seen: False, timeout=10, interval=5, clock=clock, sleep=clock.sleep)
    assert not got.done and got.waited == 13   # reads end at 4 and 13: the deadline (10) passed during the 2nd
    assert clock.sleeps == [5] and len(reads) == 2


def test_zero_timeout_reads_once():
    clock = FakeClock(1000.0)
    read, reads = reader(["x"])
    got = poll(read, lambda seen: False, timeout=0, interval=5, clock=clock, sleep=clock.sleep)
    assert (got.done, got.seen, got.waited) == (False, "x", 0) and clock.sleeps == [] and reads == ["x"]


def test_an_error_of_the_read_passes_through():
    clock = FakeClock(1000.0)

    def read():
        raise RuntimeError("API down")
    with pytest.raises(RuntimeError, match="API down"):
        poll(read, bool, timeout=10, interval=1, clock=clock, sleep=clock.sleep)
