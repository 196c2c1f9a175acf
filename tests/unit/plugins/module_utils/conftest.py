import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._simulator import SimulatedBackend


@pytest.fixture
def make_sim(tmp_path):
    """make_sim('hgx-h200') -> a SimulatedBackend on a fresh state file of that shape."""
    def _make(shape, name="state.json"):
        return SimulatedBackend(str(tmp_path / name), shape=shape)
    return _make
