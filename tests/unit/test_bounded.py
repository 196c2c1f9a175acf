"""The fuzzer's forked runs (tests/support/bounded.py): the child's collector leaves the objects it inherited alone
(frozen across the fork, as the tests' sitecustomize does for ansible's forks), and the parent's are unfrozen again;
a series runs its units in one child, a unit past the wall-clock bound named by its place."""
import gc
import os
import select

from tests.support.bounded import in_series, run_bounded, run_series


def test_the_child_starts_with_its_parents_objects_frozen_and_the_parent_has_none_frozen_after():
    assert gc.get_freeze_count() == 0
    outcome = run_bounded(gc.get_freeze_count, wall_s=60)
    assert outcome.problem(60, 0) is None, outcome.problem(60, 0)
    assert outcome.value > 1000          # the pytest process's objects: every module imported, the session's
    assert gc.get_freeze_count() == 0


def test_what_the_child_raises_is_reported_and_the_parent_is_unfrozen_too():
    outcome = run_bounded(lambda: 1 // 0, wall_s=60)
    assert "ZeroDivisionError" in outcome.problem(60, 0)
    assert gc.get_freeze_count() == 0


# ---- run_series: many units in one child, each with its own wall-clock bound -------------------------------------
def _forever():
    select.select([], [], [])               # never returns: the bound, not the unit, ends it


def test_a_series_runs_its_units_in_one_child_and_returns_what_it_returned():
    def series(step):
        pids = []
        for _unit in range(3):
            step()
            pids.append(os.getpid())
        return pids
    outcome = run_series(series, wall_s=60)
    assert outcome.problem(60, 0) is None, outcome.problem(60, 0)
    assert outcome.steps == 3
    assert len(set(outcome.value)) == 1 and outcome.value[0] != os.getpid()


def test_a_unit_that_never_ends_is_killed_and_named_by_its_place_in_the_series():
    def series(step):
        step()
        step()
        _forever()
    outcome = run_series(series, wall_s=0.5)
    assert outcome.timed_out and outcome.steps == 2
    assert outcome.problem(0.5, 0) == "ran past the wall-clock bound of 0.5 s in its unit 2"


def test_in_series_runs_the_unit_in_this_process_and_reports_as_run_bounded_does():
    steps = []
    run = in_series(lambda: steps.append(1))
    ok = run(lambda: {"error": None, "t": (1, 2)})
    assert ok.problem(60, 0) is None and ok.value == {"error": None, "t": [1, 2]}      # JSON's round trip, as forked
    failed = run(lambda: 1 // 0)
    assert "an exception escaped" in failed.problem(60, 0) and "ZeroDivisionError" in failed.problem(60, 0)
    assert steps == [1, 1]
    forked = run_bounded(lambda: 1 // 0, wall_s=60)
    assert forked.problem(60, 0).splitlines()[0] == failed.problem(60, 0).splitlines()[0]


def test_what_escapes_a_series_is_reported_with_the_units_started():
    def series(step):
        step()
        raise MemoryError()
    outcome = run_series(series, wall_s=60)
    assert outcome.steps == 1
    assert outcome.problem(60, 7).startswith("exceeded the memory bound of 7 MiB")
