# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: node_declaration_errors
short_description: What is wrong with a GPU node's declared sharing, replicas, MIG, compute mode and providers
version_added: 0.3.0
description:
  - The checks gpuops.nvidia.gpu_node makes first, before every variable's type (roles/gpu_node/tasks/validate.yml),
    in one filter so that one task makes them all (one task per node instead of six). Each message says what
    is wrong and what is valid, starts with the node's name and ends with C(; nothing changed).
  - The input holds the variables as the role sees them, defaults applied (see validate.yml); C(provider_var) names the
    variable the provider came from.
positional: _input, node
options:
  _input:
    description: >-
      The declaration: sharing, replicas, mig_layout, mig_config_name (null when not set), mig_strategy,
      compute_mode, mig_owner, provider, provider_var, containerd_owner, operator_poll_interval, and for CDI: cdi,
      runtime_mode, device_list_strategy, containerd_cdi_enabled, manage_containerd; for DRA: dra_claim_templates
      (gpuops_dra_claim_templates, checked only with provider dra), dra_compute_domain_objects and dra_compute_domains
      (the cluster role's cluster_dra_compute_domain_objects and cluster_dra_compute_domains: each ComputeDomain
      checked, and declared only with provider dra and ComputeDomains on); for reboots: connection (ansible_connection),
      mig_allow_reboot and simulated (the node's GPUs are the simulator's); for the GPU health gate: health_policy
      (gpu_node_health_policy, a mapping of finding kind to block, warn or ignore), health_gate
      (gpu_node_health_gate) and health_reset (gpu_node_health_reset, which needs the gate).
    type: dict
    required: true
  node:
    description: The node's inventory name, for the messages.
    type: str
    required: true
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Check the declaration
  vars:
    __errors: "{{ {'sharing': gpu_node_sharing, 'replicas': gpu_node_replicas} | gpuops.nvidia.node_declaration_errors(inventory_hostname) }}"
  ansible.builtin.assert:
    that: __errors | length == 0
    fail_msg: "{{ __errors | join(' ') }}"
"""

RETURN = r"""
_value:
  description: One message per failed check, in the order sharing, replicas, MIG, compute mode and MIG owner,
    providers, poll interval, CDI, a reboot over a local connection; empty when the declaration passes.
  type: list
  elements: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

# The planners are imported where a filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process, and compiles the
# collection's Python from source each time (issue 36; in git history:
# docs/readings/fleet-compare-issue36-2cores.md at dd40865).

SHARING = ("mig", "mps", "time-slicing", "none")
COMPUTE_MODES = ("Default", "Exclusive_Process", "Prohibited")
MIG_OWNERS = ("", "collection", "gpu_operator")
PROVIDERS = ("chart", "gpu_operator", "dra")
CONTAINERD_OWNERS = ("auto", "collection", "gpu_operator")
RUNTIME_MODES = ("auto", "cdi", "legacy")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
CDI_STRATEGIES = ("cdi-annotations", "cdi-cri")
# patterns, compiled (and cached by re) where a filter first matches one: this file is loaded, with every other
# filter file of the collection, in each worker that looks up any gpuops.nvidia filter (issue 36 item 7)
_WHOLE = r"^[0-9]+$"
_SECONDS = r"^[0-9]{1,6}([.][0-9]{1,6})?$"
LOCAL_CONNECTIONS = ("local", "ansible.builtin.local")


def node_declaration_errors(declared, node):
    if not isinstance(declared, dict):
        raise AnsibleFilterError("node_declaration_errors expects the node's declaration (a dict), got %s"
                                 % type(declared).__name__)
    sharing = declared.get("sharing", "none")
    head = "node %s:" % _text(node)
    errors = []
    if sharing not in SHARING:
        errors.append("%s gpu_node_sharing=%s is not a sharing strategy; valid: %s"
                      % (head, _json(sharing), ", ".join(SHARING)))
    if sharing in ("mps", "time-slicing") and not _replicas_ok(declared.get("replicas")):
        errors.append("%s gpu_node_sharing=%s needs gpu_node_replicas, a whole number of 2 or more; got %s"
                      % (head, sharing, _json(declared.get("replicas"))))
    if sharing == "mig":
        config_name = declared.get("mig_config_name")
        config_or_default = "all-balanced" if config_name is None else config_name
        named = _length(declared.get("mig_layout", [])) > 0 or _length(config_or_default) > 0
        strategy = declared.get("mig_strategy", "mixed")
        if not (named and strategy in ("single", "mixed")):
            errors.append("%s sharing=mig needs gpu_node_mig_config_name (a named layout such as all-balanced) or "
                          "gpu_node_mig_layout, and gpu_node_mig_strategy single or mixed; got config_name=%s, "
                          "strategy=%s" % (head, _json("" if config_name is None else config_name), _json(strategy)))
    mode, owner = declared.get("compute_mode", "Default"), declared.get("mig_owner", "")
    if not (mode in COMPUTE_MODES and owner in MIG_OWNERS
            and (sharing not in ("mps", "time-slicing") or mode == "Default")):
        errors.append("%s gpu_node_compute_mode=%s (valid: %s; mps and time-slicing need Default), "
                      "gpu_node_mig_owner=%s (valid: '', collection, gpu_operator)"
                      % (head, _json(mode), ", ".join(COMPUTE_MODES), _json(owner)))
    provider, containerd = declared.get("provider", "chart"), declared.get("containerd_owner", "auto")
    if not (provider in PROVIDERS and containerd in CONTAINERD_OWNERS):
        errors.append("%s %s=%s (valid: %s), gpu_node_containerd_owner=%s (valid: %s)"
                      % (head, declared.get("provider_var", "gpuops_device_plugin_provider"), _json(provider),
                         ", ".join(PROVIDERS), _json(containerd), ", ".join(CONTAINERD_OWNERS)))
    if provider == "dra" and mode != "Default":
        errors.append("%s gpu_node_compute_mode=%s with %s=dra: NVIDIA's DRA driver sets the compute mode itself for "
                      "each claim (EXCLUSIVE_PROCESS for MPS, DEFAULT for time-slicing), so the collection leaves it "
                      "alone there; remove gpu_node_compute_mode (Default)"
                      % (head, _json(mode), declared.get("provider_var", "gpuops_device_plugin_provider")))
    if provider == "dra" and owner == "gpu_operator":
        errors.append("%s gpu_node_mig_owner=gpu_operator with %s=dra: there is no GPU Operator MIG manager on a DRA "
                      "cluster run by this collection; leave gpu_node_mig_owner empty (the collection applies MIG)"
                      % (head, declared.get("provider_var", "gpuops_device_plugin_provider")))
    if provider == "dra":
        errors.extend("%s %s" % (head, e) for e in _dra_errors(declared.get("dra_claim_templates")))
    if "dra_compute_domain_objects" in declared:
        errors.extend("%s %s" % (head, e) for e in _compute_domain_errors(
            declared["dra_compute_domain_objects"], declared.get("dra_compute_domains", False), provider,
            declared.get("provider_var", "gpuops_device_plugin_provider")))
    interval = declared.get("operator_poll_interval", 5.0)
    if not _seconds_ok(interval):
        errors.append("%s gpu_node_operator_poll_interval=%s is not a number of seconds from 0.05 to 3600"
                      % (head, _json(_truncate(_text(interval), 40))))
    errors.extend(_cdi_errors(declared, head, provider))
    errors.extend(_health_errors(declared.get("health_policy", {}), head))
    if "device_plugin_skip_xids" in declared:
        errors.extend(_skip_xids_errors(declared["device_plugin_skip_xids"], head))
    if "dcgm_exporter" in declared:
        errors.extend("%s %s" % (head, e) for e in _dcgm_exporter_errors(declared["dcgm_exporter"]))
    if _bool(declared.get("health_reset", False)) and _bool(declared.get("health_gate", True)) is False:
        errors.append("%s gpu_node_health_reset=true with gpu_node_health_gate=false: the reset is the gate's "
                      "remediation, decided from the health the gate reads; set gpu_node_health_gate=true, or "
                      "gpu_node_health_reset=false" % head)
    if (declared.get("connection") in LOCAL_CONNECTIONS and _bool(declared.get("mig_allow_reboot", False))
            and not _bool(declared.get("simulated", False))):
        errors.append("%s mig_allow_reboot=true with ansible_connection=local: a reboot to activate a MIG mode change "
                      "would reboot the machine that runs Ansible (this run), not a remote node. Run from a controller "
                      "over ssh, or set mig_allow_reboot: false (a change that needs a reboot then stops and says so; "
                      "reboot the host yourself)" % head)
    if not errors:
        return errors
    # imported here, where an error is written (see the note above SHARING): the modules' one wording
    from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import nothing_changed
    return [nothing_changed(e) for e in errors]


def _cdi_errors(declared, head, provider):
    """CDI, the runtime's mode and the device plugin's device list strategy, which must agree (docs/cdi.md)."""
    cdi, mode = _bool(declared.get("cdi", False)), declared.get("runtime_mode", "auto")
    strategy = declared.get("device_list_strategy", "envvar")
    out = []
    if cdi is None or mode not in RUNTIME_MODES or strategy not in DEVICE_LIST_STRATEGIES:
        return ["%s gpu_node_cdi=%s (valid: true, false), gpu_node_runtime_mode=%s (valid: %s), "
                "gpu_node_device_list_strategy=%s (valid: %s)"
                % (head, _json(declared.get("cdi")), _json(mode), ", ".join(RUNTIME_MODES), _json(strategy),
                   ", ".join(DEVICE_LIST_STRATEGIES))]
    if provider == "gpu_operator" and (cdi or mode != "auto" or strategy != "envvar"):
        out.append("%s gpu_node_cdi=%s, gpu_node_runtime_mode=%s, gpu_node_device_list_strategy=%s with the GPU "
                   "Operator: its container toolkit writes the node's CDI spec and runtime config and sets the device "
                   "list strategy (ClusterPolicy cdi.enabled, cdi.default); this collection does not write them on "
                   "its nodes. Leave the three at their defaults (false, auto, envvar)"
                   % (head, _json(cdi), mode, strategy))
        return out
    if not cdi and mode == "cdi":
        out.append("%s gpu_node_runtime_mode=cdi with gpu_node_cdi=false: in cdi mode nvidia-container-runtime injects "
                   "devices only from the node's CDI spec, which nothing would keep true. Set gpu_node_cdi=true, or "
                   "gpu_node_runtime_mode=auto" % head)
    if not cdi and strategy in CDI_STRATEGIES:
        out.append("%s gpu_node_device_list_strategy=%s with gpu_node_cdi=false: the device plugin would hand out CDI "
                   "device names that no spec on the node resolves. Set gpu_node_cdi=true, or "
                   "gpu_node_device_list_strategy=envvar" % (head, strategy))
    if mode == "legacy" and strategy in CDI_STRATEGIES:
        out.append("%s gpu_node_runtime_mode=legacy with gpu_node_device_list_strategy=%s: the device plugin passes "
                   "devices only as CDI names, which the runtime in legacy mode ignores. Set gpu_node_runtime_mode to "
                   "auto or cdi, or gpu_node_device_list_strategy=envvar" % (head, strategy))
    if cdi and _bool(declared.get("manage_containerd", True)) and _bool(declared.get("containerd_cdi_enabled", True)) is False:
        out.append("%s gpu_node_cdi=true with containerd_runtime_cdi_enabled=false: containerd injects CDI devices "
                   "only with enable_cdi. Set containerd_runtime_cdi_enabled=true (its default follows gpu_node_cdi), or "
                   "gpu_node_cdi=false" % head)
    return out


def _health_errors(policy, head):
    """The health gate's policy (docs/health.md): known finding kinds, each block, warn or ignore."""
    if policy in (None, "") or policy == {}:
        # no policy of the user's: the defaults, which are valid; the health reader (with the burn-in, DCGM, Xid and
        # PCI readers it imports) not imported in every node's validation for it (issue 48's re-run)
        return []
    # imported here: the planner only where the filter runs (see the note above SHARING)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import (
        HealthPolicyError, validate_policy)
    try:
        validate_policy(policy if policy not in (None, "") else None)
    except HealthPolicyError as exc:
        return ["%s gpu_node_health_policy: %s" % (head, _truncate(str(exc), 2000))]
    return []


def _skip_xids_errors(setting, head):
    """The fleet-wide device plugin Xid skip setting (the cluster role's cluster_device_plugin_skip_xids, or
    gpuops_device_plugin_skip_xids): 'auto', 'all' or a list of Xid codes (docs/health.md)."""
    if setting == "auto":
        # the default, always valid (setting_errors' first rule): its planner and the health reader it imports are
        # not imported in every node's validation for it (issue 48's re-run)
        return []
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._device_plugin_health import setting_errors
    return ["%s %s" % (head, error) for error in setting_errors(setting, "cluster_device_plugin_skip_xids")]


def _dcgm_exporter_errors(declared):
    """The cluster role's DCGM exporter settings (cluster_dcgm_exporter_*): the host engine's port, the chart values
    the module would refuse, the scrape's timeout - refused here, before the cluster play installs anything."""
    errors = []
    port = declared.get("port", _PORT_NOT_GIVEN)
    if isinstance(port, str) and re.match(_WHOLE, port.strip()) and len(port.strip()) < 7:
        port = int(port)
    values = declared.get("values") or {}
    # the planner imported only where it has something to check: chart values, or a port that is not one (the
    # defaults, no values and port 5555, need neither; it imports the device plugin's and the GPU pods' planners)
    if (values and isinstance(values, dict)) or not (port is _PORT_NOT_GIVEN or _tcp_port(port)):
        from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_exporter
        error = _dcgm_exporter.port_error("cluster_dcgm_exporter_host_engine_port", port)
        if error and port is not _PORT_NOT_GIVEN:
            errors.append(error.replace(", got", " (the port of the nodes' nv-hostengine), got"))
        if isinstance(values, dict):
            errors.extend("cluster_dcgm_exporter_" + e for e in _dcgm_exporter.values_errors(values))
    timeout = declared.get("verify_timeout", 300)
    if isinstance(timeout, str) and re.match(_WHOLE, timeout.strip()) and len(timeout.strip()) < 7:
        timeout = int(timeout)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout <= 86400:
        errors.append("cluster_dcgm_exporter_verify_timeout must be a whole number of seconds from 0 to 86400 (one "
                      "day), got %s" % _json(_truncate(_text(timeout), 40)))
    return errors


_PORT_NOT_GIVEN = object()


def _tcp_port(value):
    """True for a TCP port number: what _dcgm_exporter.port_error takes without a message
    (tests/unit/plugins/filter/test_node_declaration.py compares the two)."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _dra_errors(explicit):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
    try:
        _dra.explicit_templates(explicit)
    except _dra.DraError as exc:
        return [str(exc)]
    return []


def _compute_domain_errors(objects, enabled, provider, provider_var):
    """The fleet's ComputeDomain declarations (the cluster role's cluster_dra_compute_domain_objects, or
    gpuops_dra_compute_domain_objects): the planner's checks of each, names declared once, and only where NVIDIA's DRA
    driver serves ComputeDomains."""
    where = "cluster_dra_compute_domain_objects"
    if objects in (None, "", []):
        return []
    # (imported only for a declaration: site.yml checks every node in every run, mostly with none)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
    if not isinstance(objects, list):
        return ["%s must be a list of ComputeDomains (mappings with %s), got %s"
                % (where, ", ".join(_dra.COMPUTE_DOMAIN_KEYS), type(objects).__name__)]
    errors, seen = [], set()
    for n, decl in enumerate(objects):
        at = "%s[%d]" % (where, n)
        errors.extend(_dra.compute_domain_errors(decl, at))
        if isinstance(decl, dict):
            key = "%s/%s" % (decl.get("namespace"), decl.get("name"))
            if key in seen:
                errors.append("%s: ComputeDomain %s is declared twice" % (at, key))
            seen.add(key)
    if objects and provider != "dra":
        errors.append("%s declares ComputeDomains but %s=%s: only NVIDIA's DRA driver serves them; set it to dra, or "
                      "remove the declarations" % (where, provider_var, _json(provider)))
    elif objects and _bool(enabled) is not True:
        errors.append("%s declares ComputeDomains but cluster_dra_compute_domains=%s: NVIDIA's DRA driver serves them "
                      "only with it on; set cluster_dra_compute_domains: true, or remove the declarations"
                      % (where, _json(enabled)))
    return errors


def _bool(value):
    """Ansible's booleans (true, "yes", "on", 1, ...) as True/False; None for anything else."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        return None


def _text(value):
    """Jinja's ``string`` filter (and a stand-in where Python cannot write the number: past 4300 digits)."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except ValueError:
        return "(a number of more than 4300 digits)"


def _length(value):
    """Jinja's ``length``; a value without one (a number, say) counts as empty, so the message says what is valid."""
    try:
        return len(value)
    except TypeError:
        return 0


def _replicas_ok(replicas):
    if replicas is None or not re.match(_WHOLE, _text(replicas)):
        return False
    try:
        return int(_text(replicas)) >= 2
    except ValueError:  # past Python's 4300-digit limit for int(str): not a replica count either
        return False


def _seconds_ok(interval):
    # as text first: a number past 1e308 would overflow the float conversion
    return bool(re.match(_SECONDS, _text(interval))) and 0.05 <= float(_text(interval)) <= 3600


def _truncate(text, length):
    """Jinja's ``truncate(length)`` with its defaults (leeway 5, whole words, '...')."""
    if len(text) <= length + 5:
        return text
    return text[:length - 3].rsplit(" ", 1)[0] + "..."


def _json(value):
    # imported here, where an error is written: ansible-core's core filter file costs about 10 ms to import, in every
    # worker that looks up any gpuops.nvidia filter (this file is loaded with all the others then)
    from ansible.plugins.filter.core import to_json
    try:
        return to_json(value)
    except (TypeError, ValueError, RecursionError):  # not JSON (bytes, an object), past 4300 digits, nested deep
        return to_json(_text(value))


class FilterModule(object):
    def filters(self):
        return {"node_declaration_errors": node_declaration_errors}
