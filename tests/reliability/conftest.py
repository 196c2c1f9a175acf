"""Fixtures shared by the site.yml reliability tests (faults, kills)."""
import pickle

import pytest

from tests.reliability.site_env import NODES, SmallSite, declared, session_lock


def _clean_converge(directory, env):
    """A clean converge of the small fleet, then a second run that must change nothing: the state it ends in, its
    mutating steps (NVML calls per node, API writes, helm and containerd invocations), and its task starts. ``env``:
    more environment for both runs (the session's module server: nothing here kills or looks at a module process)."""
    site = SmallSite(directory)
    site.use_module_server(env)
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


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory):
    """A directory shared by every pytest-xdist worker of this test session (and new in each session)."""
    root = tmp_path_factory.getbasetemp()
    if root.name.startswith("popen-gw"):
        root = root.parent          # pytest-xdist: one basetemp per worker, under the session's own directory
    return root


@pytest.fixture(scope="session")
def reference(tmp_path_factory, session_dir, module_server_env):
    """The clean converge (see _clean_converge), made once per test session: pytest-xdist workers share it through
    a file in their common temporary directory, the first one to need it makes it under a lock."""
    path = session_dir / "site-reference.pickle"
    with session_lock(session_dir, "site-reference"):
        if path.exists():
            with open(str(path), "rb") as handle:
                return pickle.load(handle)
        made = _clean_converge(tmp_path_factory.mktemp("reference"), module_server_env)
        with open(str(path), "wb") as handle:
            pickle.dump(made, handle)
        return made
