"""The lookup gpuops.nvidia.node_steps: the step registry's decision from the role's variables, each read through
ansible-core's own vars lookup; no terms; variables that are not the role's give a clear error."""
import pytest

from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuops.nvidia.plugins.lookup.node_steps import LookupModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps

from tests.unit.test_node_steps import ROLE_VALUES


def _lookup():
    loader = DataLoader()
    return LookupModule(loader=loader, templar=Templar(loader=loader))


def test_it_returns_the_registrys_decision():
    (got,) = _lookup().run([], variables=dict(ROLE_VALUES))
    assert got == _node_steps.resolve(_node_steps.RoleVars(dict(ROLE_VALUES).__getitem__))
    assert got["managed"]["compute_mode"] and not got["managed"]["driver"] and got["mig"]["manage"] == "disable"


def test_terms_and_foreign_variables_are_refused():
    with pytest.raises(AnsibleLookupError, match="takes no terms"):
        _lookup().run(["gpu_node_sharing"], variables=dict(ROLE_VALUES))
    with pytest.raises(AnsibleLookupError, match="the gpu_node role's variables are not what it expects"):
        _lookup().run([], variables=dict(ROLE_VALUES, gpu_node_cdi=True, __gpu_node_cdi="not a mapping"))


def test_the_mig_role_is_handed_the_registrys_gpu_holders_or_the_inventorys_list():
    (got,) = _lookup().run([], variables=dict(ROLE_VALUES, mps_control_service_name="team-mps"))
    assert got["mig"]["blockers"] == _node_steps.reset_blockers("team-mps") and "team-mps" in got["mig"]["blockers"]
    (got,) = _lookup().run([], variables=dict(ROLE_VALUES, mig_blocker_services=["site-agent", "nvidia-dcgm"]))
    assert got["mig"]["blockers"] == ["site-agent"] + _node_steps.reset_blockers()
