"""The daemons that hold the GPUs: one table in the step registry (each step's holds_gpus and OTHER_GPU_HOLDERS),
from which the driver's unload table and the units MIG stops before a GPU reset are both made."""
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_modules as dm
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _gpu_holders, _node_steps
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._gpu_holders import Holder
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_steps import RoleVars, Step

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MIG_ROLE = os.path.join(ROOT, "roles", "mig")

# Before the registry held them (main at 9209463): _driver_modules.DAEMONS in stop order, its START_ORDER, and the mig
# role's mig_blocker_services.
DRIVER_STOP_BEFORE = ["dcgm", "mps", "persistenced", "fabricmanager", "nvlsm"]
DRIVER_START_BEFORE = ["persistenced", "nvlsm", "fabricmanager", "mps", "dcgm"]
MIG_BEFORE = ["dcgm-exporter", "nvidia-dcgm", "nvsm", "nvidia-fabricmanager", "nvidia-persistenced"]


def _load(*path):
    with open(os.path.join(*path)) as handle:
        return yaml.safe_load(handle)


def _only(names, among):
    return [n for n in names if n in among]


def test_the_driver_table_is_the_one_it_replaced_plus_nvsm_and_the_exporter():
    table = _node_steps.driver_daemons()
    by_name = dict((d["name"], d) for d in table)
    assert _only([d["name"] for d in table], DRIVER_STOP_BEFORE) == DRIVER_STOP_BEFORE
    assert set(by_name) == set(DRIVER_STOP_BEFORE) | {"nvsm", "dcgm_exporter"}
    started = [d["name"] for d in dm.start_order(table, table)]
    assert _only(started, DRIVER_START_BEFORE) == DRIVER_START_BEFORE
    # the exporter reads DCGM: stopped before it, started after it
    assert started[-2:] == ["dcgm", "dcgm_exporter"] and [d["name"] for d in table][:2] == ["dcgm_exporter", "dcgm"]
    # the units and pid files it had
    assert by_name["dcgm"]["units"] == ("nvidia-dcgm.service",) and by_name["dcgm"]["pid_file"] == \
        "/var/run/nvhostengine.pid"
    assert by_name["persistenced"]["units"] == (ds.PERSISTENCED_UNIT,)
    assert by_name["fabricmanager"]["units"] == (ds.FABRIC_MANAGER_UNIT,)
    assert by_name["nvlsm"]["pid_file"] == "/var/run/nvidia-fabricmanager/nvlsm.pid"
    assert by_name["mps"]["units"] == ("gpuops-mps-control.service",) and by_name["mps"]["pid_file"] is None


def test_mig_stops_what_it_stopped_plus_the_mps_control_daemon():
    blockers = _node_steps.reset_blockers()
    assert _only(blockers, MIG_BEFORE) == MIG_BEFORE
    assert set(blockers) - set(MIG_BEFORE) == {"gpuops-mps-control", "nvidia-nvlsm"}
    # MPS is a client of the driver: stopped before the fabric manager and persistenced, started after them (the mig
    # role restarts in the reverse order, which is the driver's start order)
    assert blockers.index("gpuops-mps-control") < blockers.index("nvidia-fabricmanager")
    table = _node_steps.driver_daemons()
    restart = list(reversed(blockers))
    assert restart == [d["units"][0][:-len(".service")] for d in dm.start_order(table, table)]
    # the MPS unit as the node names it, with or without .service
    assert "my-mps" in _node_steps.reset_blockers("my-mps") and "gpuops-mps-control" not in \
        _node_steps.reset_blockers("my-mps.service")


def test_the_mig_roles_own_default_is_the_registrys_list():
    """The mig role used alone keeps its own default; it is the list gpu_node passes (the MPS unit templated)."""
    default = _load(MIG_ROLE, "defaults", "main.yml")["mig_blocker_services"]
    why = ("the step registry's GPU holders changed: gpu_node passes them to the mig role by itself; write the same "
           "list as the mig role's own default (defaults/main.yml, meta/argument_specs.yml) for the role used alone")
    assert [u.replace("{{ mps_control_service_name | default('gpuops-mps-control') }}", "gpuops-mps-control")
            for u in default] == _node_steps.reset_blockers(), why
    spec = _load(MIG_ROLE, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]["mig_blocker_services"]
    assert spec["default"] == _node_steps.reset_blockers(), why


@pytest.mark.parametrize("given, unit", [
    ({}, "gpuops-mps-control"),
    ({"mps_control_service_name": "team-mps"}, "team-mps"),
])
def test_the_mig_roles_default_names_the_mps_unit_as_the_mps_control_role_does(given, unit):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    # (the role's defaults file is trusted as ansible-core trusts a role's own files)
    default = [trust_as_template(u) for u in _load(MIG_ROLE, "defaults", "main.yml")["mig_blocker_services"]]
    assert Templar(loader=DataLoader(), variables=given).template(default) == _node_steps.reset_blockers(unit)


def test_gpu_node_passes_the_registrys_list_to_the_mig_role():
    tasks = _load(ROOT, "roles", "gpu_node", "tasks", "mig.yml")
    includes = [t for t in tasks[0]["block"] if "ansible.builtin.include_role" in t]
    assert [t["vars"]["mig_blocker_services"] for t in includes] == ["{{ __gpu_node.mig.blockers }}"]


def test_a_new_step_that_holds_the_gpus_is_one_field():
    """A throwaway step with holds_gpus: its daemon is stopped by the driver's unload and by MIG's client stop, as a
    client of the driver (before persistenced and the fabric manager, started after them)."""
    new = Step("exporter_x", {}, tasks="exporter_x.yml",
               holds_gpus=(Holder("exporter_x", "Exporter X", ("exporter-x.service",), pid_file="/run/x.pid"),))
    steps = _node_steps.STEPS + (new,)
    assert _node_steps.registry_problems(steps) == []
    table = _node_steps.driver_daemons(steps=steps)
    names = [d["name"] for d in table]
    assert names.index("mps") < names.index("exporter_x") < names.index("persistenced")
    started = [d["name"] for d in dm.start_order(table, table)]
    assert started.index("fabricmanager") < started.index("exporter_x") < started.index("mps")
    assert [d["pid_file"] for d in table if d["name"] == "exporter_x"] == ["/run/x.pid"]
    blockers = _node_steps.reset_blockers(steps=steps)
    assert blockers.index("gpuops-mps-control") < blockers.index("exporter-x") < blockers.index("nvidia-fabricmanager")
    # and gpu_node hands it to the mig role (the lookup's mig.blockers)
    assert "exporter-x" not in _node_steps.reset_blockers()


def _v(values):
    def get(name):
        return values[name]
    return RoleVars(get)


def test_gpu_node_hands_the_mig_role_the_registrys_list():
    base = {"gpu_node_sharing": "mig", "gpu_node_mig_layout": [], "gpu_node_mig_config_name": "all-balanced",
            "gpu_node_cdi": False, "gpu_node_device_plugin_provider": "chart", "gpu_node_disable_mig": False}
    assert _node_steps._mig_resolved(_v(base))["blockers"] == _node_steps.reset_blockers()
    # the MPS unit as the mps_control role names it
    named = _node_steps._mig_resolved(_v(dict(base, mps_control_service_name="team-mps")))["blockers"]
    assert "team-mps" in named and "gpuops-mps-control" not in named
    # the mig role's own default (gpu_node imports the role, so it is defined): the registry's list
    default = _node_steps.reset_blockers()
    assert _node_steps._mig_resolved(_v(dict(base, mig_blocker_services=default)))["blockers"] == default
    # another unit the inventory names is stopped first (and started last); one the registry holds is not doubled
    own = _node_steps._mig_resolved(_v(dict(base, mig_blocker_services=["site-agent", "nvsm"])))["blockers"]
    assert own == ["site-agent"] + default
    with pytest.raises(ValueError, match="mig_blocker_services must be a list of systemd unit names"):
        _node_steps._mig_resolved(_v(dict(base, mig_blocker_services="nvsm")))


@pytest.mark.parametrize("holders, words", [
    ((Holder("x", "X", ("x.service",)), Holder("x", "X again", ("y.service",))), "holder x is declared twice"),
    ((Holder("X-1", "X", ("x.service",)),), "lower case letters"),
    ((Holder("x", "X", ("x.socket",)),), "'x.socket' not a systemd service unit"),
    ((Holder("x", "X", ()),), "neither a unit nor a pid file"),
    ((Holder("x", "X", ("x.service",), stop="first"),), "stop and start must be integers"),
])
def test_a_wrong_holder_is_a_registry_problem(holders, words):
    steps = _node_steps.STEPS + (Step("x", {}, tasks="x.yml", holds_gpus=holders),)
    found = _node_steps.registry_problems(steps)
    assert any(words in p for p in found), found


def test_a_holder_held_by_a_step_and_named_outside_is_found():
    dup = Step("x", {}, tasks="x.yml", holds_gpus=(Holder("dcgm", "DCGM", ("nvidia-dcgm.service",)),))
    assert "holder dcgm is declared twice" in _node_steps.registry_problems(_node_steps.STEPS + (dup,))


@pytest.mark.parametrize("name", ["", "  ", "a b", "-x", "../x", None, 3])
def test_a_unit_name_that_is_not_one_says_what_is_valid(name):
    with pytest.raises(ValueError, match="not a systemd service unit name: give letters"):
        _gpu_holders.service_unit(name)
