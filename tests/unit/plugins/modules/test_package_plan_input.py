"""package_plan given package files that are not regular files: refused naming the option, never a hang (dpkg-deb
--show waits for ever on a FIFO; the same defect the input fuzzer found in driver_plan). On the fuzz rig's throwaway
apt root (tests/support/rigs.DriverRig), so nothing of this machine's package set is read."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import package_plan
from tests.support import fuzz_values, rigs
from tests.support.modrun import run_main


@pytest.fixture
def rig(tmp_path, monkeypatch):
    r = rigs.DriverRig(str(tmp_path / "rig"), module="driver_plan")
    rigs.apply_env(r.env, monkeypatch.setenv, lambda key: monkeypatch.delenv(key, raising=False))
    yield r
    r.close()


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_package_files_that_are_not_regular_files_are_refused(rig, tmp_path, kind):
    path = fuzz_values.make_special(str(tmp_path / ("pkg-" + kind)), kind)
    res = run_main(package_plan.main, {"manager": "apt", "packages": ["nvidia-container-toolkit"], "version": "1.20.0-1",
                                       "package_files": [path]}, **rig.internal)
    assert res.get("failed"), res
    assert "package_files" in res["msg"] and "must be a regular file" in res["msg"], res["msg"]
