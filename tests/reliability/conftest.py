"""Fixtures shared by the site.yml reliability tests (faults, kills)."""
import pytest

from tests.reliability.site_env import NODES, SmallSite, declared


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """A clean converge of the small fleet (then a second run that must change nothing): the state it ends in,
    its mutating steps (NVML calls per node, API writes, helm and containerd invocations), and its task starts."""
    site = SmallSite(tmp_path_factory.mktemp("reference"))
    try:
        res = site.run()
        assert res.rc == 0, res
        steps = site.progress()
        tasks = len(site.tasks_started())
        state = declared(site)
        again = site.run()
        assert again.rc == 0 and all(again.changed(n) == 0 for n in NODES), again
        assert declared(site) == state
        return {"state": state, "steps": steps, "tasks": tasks}
    finally:
        site.close()
