"""The molecule default scenario (extensions/molecule/default): converge the lab, idempotence, verify.
Measured at about 60 s on the 2-core CI machine."""
import os
import re
import subprocess

import pytest

from tests.support.ansible_run import ROOT, molecule_env

MOLECULE = os.path.join(ROOT, ".venv", "bin", "molecule")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(MOLECULE), reason="molecule not installed: run make setup")]


def test_molecule_default_scenario(tmp_path):
    env = molecule_env(tmp_path)
    proc = subprocess.run([MOLECULE, "test", "-s", "default"], cwd=os.path.join(ROOT, "extensions"), env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    # all six steps (cleanup, syntax, converge, idempotence, verify, cleanup) ran and succeeded
    assert re.search(r"default\s*: actions=6\s+successful=6\s+disabled=0\s+skipped=0\s+missing=0\s+failed=0", out), \
        out[-3000:]
    assert "Idempotence completed successfully" in out or re.search(r"idempotence\S*:\s*Executed: Successful", out), \
        out[-3000:]
