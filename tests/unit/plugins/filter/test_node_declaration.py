"""node_declaration_errors (roles/gpu_node/tasks/validate.yml's first checks, in one filter): the same messages as the
six assert tasks it replaced, every failed check reported, and any value refused with a message, never a crash."""
import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.node_declaration import node_declaration_errors

with open(os.path.join(os.path.dirname(__file__), "node_declaration_messages.json")) as _handle:
    RECORDED = json.load(_handle)["cases"]

# roles/gpu_node/defaults/main.yml, as validate.yml sees them
ROLE_DEFAULTS = {"gpu_node_sharing": "none", "gpu_node_replicas": None, "gpu_node_mig_config_name": "all-balanced",
                 "gpu_node_mig_layout": [], "gpu_node_mig_strategy": "mixed", "gpu_node_mig_owner": "",
                 "gpu_node_compute_mode": "Default", "gpu_node_containerd_owner": "auto",
                 "gpu_node_operator_poll_interval": 5.0}


def declared(variables):
    """What validate.yml's task hands the filter for these inventory variables (role defaults in scope)."""
    v = dict(ROLE_DEFAULTS, **variables)
    return {"sharing": v["gpu_node_sharing"], "replicas": v["gpu_node_replicas"],
            "mig_layout": v["gpu_node_mig_layout"], "mig_config_name": v["gpu_node_mig_config_name"],
            "mig_strategy": v["gpu_node_mig_strategy"], "compute_mode": v["gpu_node_compute_mode"],
            "mig_owner": v["gpu_node_mig_owner"],
            # the role's default for it is gpuops_device_plugin_provider | default('chart'): always defined
            "provider": v.get("gpu_node_device_plugin_provider", v.get("gpuops_device_plugin_provider", "chart")),
            "provider_var": "gpu_node_device_plugin_provider",
            "containerd_owner": v["gpu_node_containerd_owner"],
            "operator_poll_interval": v["gpu_node_operator_poll_interval"]}


@pytest.mark.parametrize("case", RECORDED, ids=[c["id"] for c in RECORDED])
def test_same_message_as_the_assert_tasks_it_replaced(case):
    errors = node_declaration_errors(declared(case["vars"]), case["id"])
    assert errors == ([case["message"]] if case["message"] else [])


def test_every_failed_check_is_reported_in_order():
    errors = node_declaration_errors(declared({"gpu_node_sharing": "mps", "gpu_node_compute_mode": "Prohibited",
                                               "gpu_node_operator_poll_interval": "never"}), "n1")
    assert [e.split(" ")[2].split("=")[0] for e in errors] == [
        "gpu_node_sharing", "gpu_node_compute_mode", "gpu_node_operator_poll_interval"], errors
    assert all(e.startswith("node n1: ") and e.endswith("; nothing changed") for e in errors)


def test_the_fleet_wide_variable_is_named_when_the_node_one_is_not_set():
    d = dict(declared({}), provider="helm", provider_var="gpuops_device_plugin_provider")
    assert node_declaration_errors(d, "n1")[0].startswith('node n1: gpuops_device_plugin_provider="helm" (valid')


@pytest.mark.parametrize("value", [10 ** 5000, "9" * 5000, float("inf"), float("nan"), {"a": 1}, [2], b"2", object()],
                         ids=["int-5000-digits", "text-5000-digits", "inf", "nan", "dict", "list", "bytes", "object"])
def test_any_replicas_or_interval_gets_a_message(value):
    errors = node_declaration_errors(declared({"gpu_node_sharing": "mps", "gpu_node_replicas": value,
                                               "gpu_node_operator_poll_interval": value}), "n1")
    assert len(errors) == 2 and "gpu_node_replicas" in errors[0] and "poll_interval" in errors[1], errors


def test_not_a_declaration():
    with pytest.raises(AnsibleFilterError, match="expects the node's declaration"):
        node_declaration_errors(["mig"], "n1")


def _cdi(**values):
    return dict(declared({}), **values)


@pytest.mark.parametrize("values, names", [
    ({"cdi": False, "runtime_mode": "cdi"}, ["gpu_node_runtime_mode=cdi", "gpu_node_cdi=false"]),
    ({"cdi": "no", "device_list_strategy": "cdi-cri"}, ["gpu_node_device_list_strategy=cdi-cri", "gpu_node_cdi=false"]),
    ({"cdi": True, "runtime_mode": "legacy", "device_list_strategy": "cdi-annotations"},
     ["gpu_node_runtime_mode=legacy", "gpu_node_device_list_strategy=cdi-annotations"]),
    ({"cdi": "true", "containerd_cdi_enabled": "false"}, ["gpu_node_cdi=true", "containerd_runtime_cdi_enabled=false"]),
    ({"cdi": True, "provider": "gpu_operator"}, ["gpu_node_cdi=true", "GPU Operator"]),
    ({"runtime_mode": "legacy", "provider": "gpu_operator"}, ["gpu_node_runtime_mode=legacy", "GPU Operator"]),
    ({"cdi": "maybe"}, ['gpu_node_cdi="maybe" (valid: true, false)']),
    ({"runtime_mode": "jit-cdi"}, ["gpu_node_runtime_mode=\"jit-cdi\" (valid: auto, cdi, legacy)"]),
])
def test_contradictory_cdi_declarations_are_refused_naming_both_settings(values, names):
    errors = node_declaration_errors(_cdi(**values), "n1")
    assert len(errors) == 1 and errors[0].endswith("; nothing changed"), errors
    for name in names:
        assert name in errors[0], (name, errors[0])


@pytest.mark.parametrize("values", [
    {}, {"cdi": True}, {"cdi": "yes", "runtime_mode": "cdi", "device_list_strategy": "cdi-cri"},
    {"cdi": True, "runtime_mode": "legacy"}, {"runtime_mode": "legacy"},
    {"cdi": True, "containerd_cdi_enabled": False, "manage_containerd": False},
    {"cdi": False, "provider": "gpu_operator"},
])
def test_consistent_cdi_declarations_pass(values):
    assert node_declaration_errors(_cdi(**values), "n1") == []


CD = {"name": "nvl72-train", "namespace": "ml", "num_nodes": 0}


@pytest.mark.parametrize("values, words", [
    ({"provider": "dra", "dra_compute_domains": True,
      "dra_compute_domain_objects": [dict(CD, channel_allocation_mode="all")]},
     "cluster_dra_compute_domain_objects[0].channel_allocation_mode must be one of Single, All"),
    ({"provider": "dra", "dra_compute_domains": True, "dra_compute_domain_objects": [dict(CD, num_nodes=-2)]},
     "cluster_dra_compute_domain_objects[0].num_nodes must be a whole number of nodes, 0 or more"),
    ({"provider": "dra", "dra_compute_domains": True, "dra_compute_domain_objects": [dict(CD, size=2)]},
     "cluster_dra_compute_domain_objects[0] has unknown keys size (valid: name, namespace, num_nodes"),
    ({"provider": "dra", "dra_compute_domains": True, "dra_compute_domain_objects": [CD, CD]},
     "cluster_dra_compute_domain_objects[1]: ComputeDomain ml/nvl72-train is declared twice"),
    ({"provider": "dra", "dra_compute_domains": True, "dra_compute_domain_objects": "nvl72-train"},
     "cluster_dra_compute_domain_objects must be a list of ComputeDomains"),
    ({"provider": "dra", "dra_compute_domains": False, "dra_compute_domain_objects": [CD]},
     "but cluster_dra_compute_domains=false: NVIDIA's DRA driver serves them only with it on"),
    ({"provider": "chart", "dra_compute_domains": True, "dra_compute_domain_objects": [CD]},
     "declares ComputeDomains but gpu_node_device_plugin_provider=\"chart\": only NVIDIA's DRA driver serves them"),
])
def test_compute_domain_declarations_that_cannot_work_are_refused(values, words):
    errors = node_declaration_errors(_cdi(**values), "n1")
    assert len(errors) == 1 and words in errors[0] and errors[0].endswith("; nothing changed"), errors


def test_good_compute_domain_declarations_pass():
    for objects in ([], [CD, dict(CD, name="all", channel_allocation_mode="All", claim_template="chan")]):
        assert node_declaration_errors(_cdi(provider="dra", dra_compute_domains="yes",
                                            dra_compute_domain_objects=objects), "n1") == []
    assert node_declaration_errors(_cdi(dra_compute_domain_objects=[]), "n1") == []


@pytest.mark.parametrize("values, words", [
    ({"provider": "dra", "compute_mode": "Exclusive_Process"}, "sets the compute mode itself"),
    ({"provider": "dra", "mig_owner": "gpu_operator"}, "no GPU Operator MIG manager"),
    ({"provider": "dra", "dra_claim_templates": [{"name": "w", "sharing": "mps", "active_thread_percentage": "25%"}]},
     "gpuops_dra_claim_templates[0].active_thread_percentage must be a whole number from 1 to 100"),
    ({"provider": "dra", "dra_claim_templates": [{"name": "w", "sharing": "mps", "pinned_memory_limit": "8GB"}]},
     "gpuops_dra_claim_templates[0].pinned_memory_limit '8GB' is not a Kubernetes quantity"),
    ({"provider": "dra", "dra_claim_templates": "train"}, "must be a list of templates"),
])
def test_dra_declarations_that_cannot_work_are_refused(values, words):
    errors = node_declaration_errors(_cdi(**values), "n1")
    assert len(errors) == 1 and words in errors[0] and errors[0].endswith("; nothing changed"), errors


def test_dra_claim_templates_are_checked_only_with_dra():
    bad = [{"name": "w", "sharing": "mps", "active_thread_percentage": 0}]
    assert node_declaration_errors(_cdi(dra_claim_templates=bad), "n1") == []
    assert node_declaration_errors(_cdi(provider="dra", dra_claim_templates=[{"name": "w", "sharing": "mps",
                                                                              "active_thread_percentage": 20}]),
                                   "n1") == []


@pytest.mark.parametrize("connection", ["local", "ansible.builtin.local"])
def test_a_reboot_over_a_local_connection_is_refused_before_anything_changes(connection):
    """On the GPU host itself (a CI runner, molecule's local case) a MIG reboot would reboot the machine running
    Ansible: refused up front, naming both settings and what to do instead."""
    d = dict(declared({"gpu_node_sharing": "mig"}), connection=connection, mig_allow_reboot=True, simulated=False)
    errors = node_declaration_errors(d, "gpu1")
    assert len(errors) == 1, errors
    assert "mig_allow_reboot=true" in errors[0] and "ansible_connection=local" in errors[0], errors
    assert "reboot the machine that runs Ansible" in errors[0] and "mig_allow_reboot: false" in errors[0], errors
    assert errors[0].endswith("; nothing changed"), errors


@pytest.mark.parametrize("values", [
    {"connection": "ssh", "mig_allow_reboot": True, "simulated": False},      # a controller reboots a remote node
    {"connection": "local", "mig_allow_reboot": False, "simulated": False},   # no reboot allowed
    {"connection": "local", "mig_allow_reboot": "no", "simulated": False},
    {"connection": "local", "mig_allow_reboot": True, "simulated": True},     # the simulated node reboots, not the host
    {},                                                                       # older callers: nothing said
], ids=["ssh", "local-no-reboot", "local-no-reboot-text", "local-simulated", "unset"])
def test_reboots_elsewhere_or_not_allowed_pass(values):
    assert node_declaration_errors(dict(declared({"gpu_node_sharing": "mig"}), **values), "gpu1") == []


@pytest.mark.parametrize("policy, words", [
    ({"row_remap_pendin": "warn"}, ["gpu_node_health_policy", "'row_remap_pendin'", "valid kinds", "xid_fatal"]),
    ({"xid_fatal": "off"}, ["gpu_node_health_policy", "xid_fatal", "'off'", "block, warn, ignore"]),
    ({"xid_fatal": True}, ["gpu_node_health_policy", "xid_fatal", "True", "block, warn, ignore"]),
    (["xid_fatal"], ["gpu_node_health_policy", "must be a mapping", "list"]),
    ({"x" * 5000: "warn"}, ["gpu_node_health_policy", "unknown health finding kind"]),
])
def test_a_bad_health_policy_is_refused_naming_the_key_and_the_valid_ones(policy, words):
    (error,) = node_declaration_errors(dict(declared({}), health_policy=policy), "n1")
    assert error.startswith("node n1: gpu_node_health_policy: ") and error.endswith("; nothing changed")
    assert len(error) < 2200
    for word in words:
        assert word in error, error


@pytest.mark.parametrize("policy", [{}, None, {"row_remap_pending": "warn", "ecc_corrected": "ignore"}])
def test_a_valid_health_policy_passes(policy):
    assert node_declaration_errors(dict(declared({}), health_policy=policy), "n1") == []


def test_the_health_reset_needs_the_gate():
    (error,) = node_declaration_errors(dict(declared({}), health_reset=True, health_gate=False), "n1")
    assert error.startswith("node n1: gpu_node_health_reset=true with gpu_node_health_gate=false") \
        and error.endswith("; nothing changed")
    for reset, gate in ((True, True), (False, False), ("yes", "true")):
        assert node_declaration_errors(dict(declared({}), health_reset=reset, health_gate=gate), "n1") == []


# The DCGM exporter's and the skip setting's checks, as validate.yml hands them (the cluster role's defaults)
EXPORTER_DEFAULTS = {"port": 5555, "values": {}, "verify_timeout": 300}


@pytest.mark.parametrize("port", ["x", 0, 65536, -1, True, None, 1.5, "", [5555], "0"])
def test_a_host_engine_port_that_is_not_one_is_refused(port):
    (error,) = node_declaration_errors(dict(declared({}), dcgm_exporter=dict(EXPORTER_DEFAULTS, port=port)), "n1")
    assert error.startswith("node n1: cluster_dcgm_exporter_host_engine_port must be a TCP port number from 1 to "
                            "65535 (the port of the nodes' nv-hostengine), got ") and error.endswith("; nothing changed")


@pytest.mark.parametrize("port", [1, 5555, 65535, "5555", " 80 "])
def test_a_host_engine_port_passes(port):
    assert node_declaration_errors(dict(declared({}), dcgm_exporter=dict(EXPORTER_DEFAULTS, port=port)), "n1") == []
    assert node_declaration_errors(dict(declared({}), dcgm_exporter={"values": {}}), "n1") == []   # not given


def test_chart_values_the_module_sets_are_refused_with_a_default_port():
    (error,) = node_declaration_errors(
        dict(declared({}), dcgm_exporter=dict(EXPORTER_DEFAULTS, values={"hostNetwork": False})), "n1")
    assert error.startswith("node n1: cluster_dcgm_exporter_values.hostNetwork is set by the module")


@pytest.mark.parametrize("value", [0, 1, 80, 65535, 65536, -5, True, False, None, "80", 1.0, 5555.5, [], object()])
def test_the_filters_port_rule_is_the_planners(value):
    # node_declaration._tcp_port decides whether the exporter's planner is imported at all; its verdict must be the
    # planner's own (port_error), or a bad port would pass unseen
    from ansible_collections.gpuops.nvidia.plugins.filter import node_declaration
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._dcgm_exporter import port_error
    assert node_declaration._tcp_port(value) is (port_error("p", value) is None)   # pylint: disable=protected-access


def test_the_default_declaration_is_checked_without_the_health_and_exporter_planners():
    # site.yml validates every node in every run: where the health policy, the Xid skip setting and the DCGM exporter
    # keep their defaults, the check imports none of the planners (the health reader with its burn-in, DCGM, Xid and
    # PCI readers; the exporter's with the device plugin's) that other values need (issue 48's re-run); a bad value
    # still gets them (the tests above)
    code = (
        "import json, sys\n"
        "from ansible_collections.gpuops.nvidia.plugins.filter.node_declaration import node_declaration_errors\n"
        "d = json.loads(sys.argv[1])\n"
        "errors = node_declaration_errors(d, 'n1')\n"
        "print(json.dumps([errors, sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "                                 if m.startswith('ansible_collections.gpuops.nvidia.plugins.module_utils.'))]))\n")
    base = dict(declared({}), health_policy={}, health_gate=True, health_reset=False, device_plugin_skip_xids="auto",
                dcgm_exporter=EXPORTER_DEFAULTS)
    heavy = {"_gpu_health", "_device_plugin_health", "_dcgm_exporter", "_burn_in", "_pci", "_xid", "_dcgm"}
    for given, imported in ((base, set()), (dict(base, health_policy={"xid_fatal": "warn"}), {"_gpu_health"}),
                            (dict(base, device_plugin_skip_xids=[79]), {"_device_plugin_health"}),
                            (dict(base, dcgm_exporter=dict(EXPORTER_DEFAULTS, values={"a": 1})), {"_dcgm_exporter"})):
        out = subprocess.run([sys.executable, "-c", code, json.dumps(given)], check=True, stdout=subprocess.PIPE,
                             universal_newlines=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        errors, modules = json.loads(out.stdout)
        assert errors == []
        assert heavy & set(modules) >= imported and (imported or not heavy & set(modules)), (given, modules)
