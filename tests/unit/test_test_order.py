"""The order tests/conftest.py gives pytest-xdist: each worker's contiguous share starts with the longest tests and
ends with fast ones, so that the work a worker takes from another's end is short."""
from tests.conftest import LONGEST_FIRST, worker_order

PATHS = (["tests/unit/test_a.py::test_%d" % i for i in range(7)]
         + ["tests/integration/test_site_x.py::test_%d" % i for i in range(3)]
         + ["%s::test_0" % LONGEST_FIRST[2], "%s::test_0" % LONGEST_FIRST[0]]
         + ["tests/reliability/test_r.py::test_%d" % i for i in range(4)]
         + ["tests/unit/test_b.py::test_%d" % i for i in range(4)])


def _slow(path):
    return path.startswith(("tests/integration/", "tests/reliability/"))


def test_two_workers_each_get_half_the_slow_tests_longest_first_then_fast_ones():
    order = [PATHS[i] for i in worker_order(PATHS, 2)]
    assert sorted(order) == sorted(PATHS)
    first, second = order[:len(order) // 2], order[len(order) // 2:]   # worksteal's initial shares
    for share, slow_count in ((first, 5), (second, 4)):
        slow = [p for p in share if _slow(p)]
        assert len(slow) == slow_count and share[:slow_count] == slow, share   # slow first, then only fast ones
        assert not _slow(share[-1]) and not _slow(share[-2])
    # the longest files lead, one in each share, in LONGEST_FIRST's order
    assert first[0].startswith(LONGEST_FIRST[0]) and second[0].startswith(LONGEST_FIRST[2])
    # the fast tests keep their collection order
    assert [p for p in order if not _slow(p)] == [p for p in PATHS if not _slow(p)]


def test_a_share_too_small_for_its_slow_tests_passes_them_on_and_no_test_is_lost():
    paths = ["tests/reliability/test_r.py::test_%d" % i for i in range(7)] + ["tests/unit/test_u.py::test_0"]
    for workers in (1, 2, 3, 5):
        order = worker_order(paths, workers)
        assert sorted(order) == list(range(len(paths)))
        assert paths[order[-1]] == "tests/unit/test_u.py::test_0"


def test_one_process_runs_the_slow_tests_first_in_collection_order_after_the_longest():
    order = [PATHS[i] for i in worker_order(PATHS, 1)]
    assert order[:2] == ["%s::test_0" % LONGEST_FIRST[0], "%s::test_0" % LONGEST_FIRST[2]]
    assert [p for p in order if _slow(p)] == order[:9]
    assert [p for p in order if not _slow(p)] == [p for p in PATHS if not _slow(p)]
