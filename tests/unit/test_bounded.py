"""The fuzzer's forked runs (tests/support/bounded.py): the child's collector leaves the objects it inherited alone
(frozen across the fork, as the tests' sitecustomize does for ansible's forks), and the parent's are unfrozen again."""
import gc

from tests.support.bounded import run_bounded


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
