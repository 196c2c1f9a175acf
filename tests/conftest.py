"""Test-wide setup: make the collection importable as ansible_collections.gpuops.nvidia."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("GPUOPS_REAL_GPU") == "1":
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU: set GPUOPS_REAL_GPU=1 on a GPU host")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
