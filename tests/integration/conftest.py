"""Fixtures shared by the site tests."""
import pytest

from tests.support.converged_lab import ConvergedLabs, session_root


@pytest.fixture(scope="session")
def converged_labs(tmp_path_factory):
    """The session's converged labs (tests/support/converged_lab.py): ``converged_labs.copy(variant, build, ...)``
    hands a test a fresh copy of a lab that site.yml converged once in this session (per pytest-xdist worker at most)."""
    return ConvergedLabs(session_root(tmp_path_factory))
