"""Whether `make test` runs the whole fault and kill series or a fixed sample of it: GPUOPS_RELIABILITY=full runs
every step and every kill point (tests/reliability/site_env.py says why the default samples)."""
import os

import pytest

FULL = os.environ.get("GPUOPS_RELIABILITY", "").lower() == "full"


def skip_unless_sampled(point, sampled):
    """Skip the test of ``point`` unless it is one of ``sampled`` or the full series was asked for."""
    if point not in sampled and not FULL:
        pytest.skip("make test runs %s; GPUOPS_RELIABILITY=full runs every one" % (sampled,))
