import subprocess
import sys
import textwrap

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend


@pytest.fixture
def make_sim(tmp_path):
    """make_sim('hgx-h200') -> a SimulatedBackend on a fresh state file of that shape."""
    def _make(shape, name="state.json"):
        return SimulatedBackend(str(tmp_path / name), shape=shape)
    return _make


HOLD = textwrap.dedent("""
    import os, sys
    fds = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]
    print(os.getpid(), flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def holders(tmp_path):
    """Start real processes that hold files open until the test ends; each is named by the program it runs as."""
    started = []

    def start(name, *paths):
        program = tmp_path / name
        if not program.exists():
            program.symlink_to(sys.executable)
        proc = subprocess.Popen([str(program), "-c", HOLD] + [str(p) for p in paths],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        started.append(proc)
        assert int(proc.stdout.readline()) == proc.pid     # the files are open from here on
        return proc.pid

    yield start
    for proc in started:
        proc.stdin.close()
        proc.wait()
