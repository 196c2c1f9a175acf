"""bench/fleet.py's options that go together: a wrong combination is refused before any fleet is made."""
import os
import subprocess
import sys

import pytest

from tests.support.ansible_run import ROOT


@pytest.mark.parametrize("args", [
    ["--slices", "1", "--nodes", "2", "--slices-phase", "first"],                       # no --slices-keep
    ["--slices", "1", "--nodes", "2", "--slices-keep", "KEEP"],                         # no --slices-phase
    ["--slices", "1,2", "--nodes", "2", "--slices-phase", "first", "--slices-keep", "KEEP"],  # two slice counts
])
def test_slices_phase_and_keep_go_together_with_one_row(tmp_path, args):
    keep = str(tmp_path / "keep")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fleet.py")]
                          + [keep if a == "KEEP" else a for a in args],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "--slices-phase (first or again) and --slices-keep DIR go together, with one --slices count and one " \
           "--nodes size" in proc.stderr
    assert not os.path.exists(keep)
