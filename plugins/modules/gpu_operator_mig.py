#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_operator_mig
short_description: Have the GPU Operator's MIG manager apply a node's declared MIG layout, and wait for it
version_added: 0.2.0
description:
  - For nodes whose MIG is owned by NVIDIA's GPU Operator. Resolves the declared layout (a named layout such as
    C(all-balanced), or an inline layout in M(gpuops.nvidia.mig_layout)'s format) against the node's GPU facts, in
    each GPU's own profile names, and validates it - a layout a GPU cannot take is refused before anything changes.
  - Publishes it as a mig-parted v1 config in the MIG manager's ConfigMap (the one C(spec.migManager.config.name) of
    the ClusterPolicy names, key C(config.yaml)); entries are keyed by the GPUs' PCI ids (C(device-filter)), so
    nodes of different models can share a config name. The name is C(gpuops-<layout>-<8 hex of the content>) - a
    changed layout is a new name, hence a new label value, which is what makes the MIG manager apply it. A layout
    that disables MIG everywhere is published as C(all-disabled).
  - Sets the node's label C(nvidia.com/mig.config) to that name (in the same change it removes a stale
    C(nvidia.com/mig.config.state), and sets C(nvidia.com/gpu.deploy.mig-manager=true) if it was C(false)), then waits
    until the MIG manager reports C(nvidia.com/mig.config.state=success) or C(failed), reading the node every
    O(interval) seconds. It fails with the node, the state (C(failed), C(pending), C(rebooting) or none) and what to
    look at when it is not C(success) within O(timeout). A MIG change can drain and restart the device plugin and
    other GPU pods of the node first, which counts against O(timeout).
  - Nothing is written when the node already selects the config, the MIG manager reported success and the GPUs
    match it; then C(changed) is false.
  - Returns C(gpus_differ) (GPUs whose MIG mode or devices differ from the layout) so that a play can cordon and
    drain the node only when the change is disruptive.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.wait_options
options:
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it.
    type: str
    required: true
  gpus:
    description:
      - The node's GPU facts from M(gpuops.nvidia.gpu_info) (the whole C(nvidia_gpus) fact or its C(gpus) list).
        The layout is resolved and validated against them, and compared with them to tell whether the GPUs differ.
    type: raw
    required: true
  config_name:
    description: A named layout (C(all-disabled), C(all-enabled), C(all-balanced), C(all-1g), C(all-3g.40gb), ...).
    type: str
  layout:
    description: An inline layout (M(gpuops.nvidia.mig_layout)'s O(gpuops.nvidia.mig_layout#module:layout) format).
    type: list
    elements: dict
  config_map:
    description: The MIG manager's ConfigMap. Default - the one C(spec.migManager.config.name) names.
    type: str
  namespace:
    description: The operator's namespace. Default - the ClusterPolicy's C(status.namespace).
    type: str
  policy_name:
    description: The ClusterPolicy's name. Default - the only one of the cluster.
    type: str
  wait:
    description: Wait for the MIG manager's C(success) (or fail on C(failed) or after O(timeout)).
    type: bool
    default: true
  timeout:
    default: 600
  interval:
    default: 5.0
attributes:
  check_mode:
    support: full
    details: The ConfigMap and label writes are sent with the API server's dry run; nothing is stored and nothing waits.
  diff_mode:
    support: full
    details: The node's MIG labels and the published config, before and after.
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpuops.nvidia.gpu_info:

- name: Let the GPU Operator's MIG manager apply all-balanced here
  gpuops.nvidia.gpu_operator_mig:
    node_name: "{{ inventory_hostname }}"
    gpus: "{{ ansible_facts.nvidia_gpus }}"
    config_name: all-balanced
    timeout: 900
  delegate_to: localhost
"""

RETURN = r"""
config:
  description: The config name the node selects (the value of C(nvidia.com/mig.config)).
  returned: success
  type: str
  sample: gpuops-all-balanced-1a2b3c4d
entries:
  description: The mig-parted entries of that config.
  returned: success
  type: list
  elements: dict
config_map:
  description: Namespace and name of the MIG manager's ConfigMap.
  returned: success
  type: str
  sample: gpu-operator/gpuops-mig-parted-config
published:
  description: Whether the config was (in check mode - would be) added to the ConfigMap.
  returned: success
  type: bool
state:
  description: The C(nvidia.com/mig.config.state) label at the end (before the change in check mode).
  returned: success
  type: str
  sample: success
gpus_differ:
  description: Indices of the GPUs whose MIG mode or devices differ from the layout (read from O(gpus)).
  returned: success
  type: list
  elements: int
waited:
  description: Seconds spent waiting for the MIG manager.
  returned: success
  type: float
skipped_reason:
  description: Why nothing was needed (no MIG-capable GPU).
  returned: when the node has no MIG-capable GPU
  type: str
"""

from ansible.module_utils.basic import missing_required_lib

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import interval_error, seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun, write_as_planned
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Done, Failure, Refusal, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._mig_apply import name_source
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover
    HAS_YAML = False


def _gpus(raw):
    if isinstance(raw, dict):
        raw = raw.get("gpus")
    if not isinstance(raw, list) or not all(isinstance(g, dict) and "index" in g for g in raw):
        return None
    return raw


def published(current, config, entries):
    """Whether the MIG ConfigMap ``current`` (None: there is none) holds config ``config`` as ``entries``."""
    text = ((current or {}).get("data") or {}).get(_gpu_operator.MIG_CONFIG_KEY)
    return current is not None and (_gpu_operator.parse_config_text(text, yaml).get("mig-configs") or {}).get(
        config) == entries


def publish(kube, namespace, name, config, entries, dry_run, current, attempts=5):
    """Add config ``config`` to the MIG ConfigMap ``current`` as read (a write guarded by its resourceVersion; a
    concurrent writer - another node of the batch - makes it fail with a conflict, and the ConfigMap is read and
    written again, ``attempts`` writes in all: _kube_service.write_as_planned). Returns (published, answer)."""
    path = _kube.configmap_path(namespace, name)

    def write(cm):
        if published(cm, config, entries):
            return False, cm
        text = ((cm or {}).get("data") or {}).get(_gpu_operator.MIG_CONFIG_KEY)
        data = dict((cm or {}).get("data") or {})
        data[_gpu_operator.MIG_CONFIG_KEY] = _gpu_operator.dump_config(
            _gpu_operator.with_config(_gpu_operator.parse_config_text(text, yaml), config, entries), yaml)
        return True, _kube.write_configmap(kube, namespace, name, data, cm, dry_run=dry_run)
    return write_as_planned(current, lambda: _kube.read_or_none(kube, "read ConfigMap %s/%s" % (namespace, name),
                                                                path), write, tries=attempts)


def mig_state(kube, node):
    """The node's nvidia.com/mig.config.state label now (None: not set)."""
    labels = kube.get("read node %s" % node, _kube.node_path(node))["metadata"].get("labels") or {}
    return labels.get(_gpu_operator.MIG_STATE_LABEL)


ARGUMENT_SPEC = dict(
    node_name=dict(type="str", required=True),
    gpus=dict(type="raw", required=True),
    config_name=dict(type="str"),
    layout=dict(type="list", elements="dict"),
    config_map=dict(type="str"),
    namespace=dict(type="str"),
    policy_name=dict(type="str"),
    wait=dict(type="bool", default=True),
    timeout=dict(type="int", default=WAITS["mig_manager"].timeout),
    interval=dict(type="float", default=WAITS["mig_manager"].interval),
    **_kube.AUTH_ARG_SPEC
)


class OperatorMigLayout(KubeRun):
    """One node's MIG layout through the GPU Operator's MIG manager: validate -> read (no MIG-capable GPU: done; the
    mig-parted config planned from the node's GPU facts; the MIG ConfigMap the ClusterPolicy names, the node's MIG
    labels) -> plan (publish the config, relabel the node) -> apply (in check mode as the API server's dry runs) ->
    after: the MIG manager's last verdict where nothing changed, then the wait for its verdict (the one table's
    ``mig_manager``). ``result`` is what the module returns, also when an error ends the run."""

    argument_spec = ARGUMENT_SPEC
    module_options = dict(mutually_exclusive=[("config_name", "layout")], required_one_of=[("config_name", "layout")])
    refusals = (_gpu_operator.OperatorError,)
    apply_in_check_mode = True          # the writes are the API server's dry runs

    def __init__(self, module):
        super(OperatorMigLayout, self).__init__(module)
        self.dry = module.check_mode
        self.node = module.params["node_name"]

    def validate(self):
        """Every parameter checked; the GPU facts kept for the run."""
        p = self.params
        if not HAS_YAML:
            raise Failure(missing_required_lib("PyYAML"))
        errors = _kube_names.dns_subdomain_errors(p["node_name"], "node_name")
        for key in ("config_map", "policy_name"):
            if p[key] is not None:
                errors += _kube_names.dns_subdomain_errors(p[key], key)
        if p["namespace"] is not None:
            errors += _kube_names.dns_label_errors(p["namespace"], "namespace")
        if p["config_map"] == _gpu_operator.OPERATOR_MIG_CONFIGMAP:
            errors.append("config_map %s is refused: the operator rewrites its own ConfigMap; use the one the "
                          "collection manages (gpuops.nvidia.gpu_operator's mig_config_map)"
                          % _gpu_operator.OPERATOR_MIG_CONFIGMAP)
        errors.extend(e for e in (seconds_error("timeout", p["timeout"]), interval_error("interval", p["interval"]))
                      if e)
        gpus = _gpus(p["gpus"])
        if gpus is None:
            errors.append("gpus must be the GPU facts of gpuops.nvidia.gpu_info (the nvidia_gpus fact or its gpus "
                          "list)")
        self.gpus = gpus
        return errors

    def declared(self, gpus):
        """(config name, mig-parted entries, GPUs that differ from them) for the node's GPUs. Pure."""
        p = self.params
        try:
            config, entries, resolved = _gpu_operator.node_config(gpus, layout=p["layout"],
                                                                  config_name_hint=p["config_name"])
            return config, entries, _gpu_operator.gpus_differ(gpus, resolved)
        except MigLayoutError as exc:
            raise Refusal("node %s: %s (the node's GPUs as the gpus option describes them); nothing changed"
                          % (self.node, name_source(p, str(exc)).rstrip(". "))) from exc

    def config_map(self):
        """(namespace, name) of the MIG ConfigMap: as given, else the one the ClusterPolicy names, which must be
        the collection's."""
        p, kube = self.params, self.kube
        cm_name, namespace = p["config_map"], p["namespace"]
        if cm_name and namespace:
            return namespace, cm_name
        items = kube.get("list ClusterPolicies", _gpu_operator.policy_path()).get("items") or []
        policy = _gpu_operator.select_policy(items, p["policy_name"])
        namespace = _gpu_operator.namespace_of(policy, namespace)
        named = (((policy.get("spec") or {}).get("migManager") or {}).get("config") or {}).get("name")
        cm_name = cm_name or named
        if not namespace:
            raise _gpu_operator.OperatorError("ClusterPolicy %s has no status.namespace: give namespace"
                                              % policy["metadata"]["name"])
        if not cm_name or cm_name == _gpu_operator.OPERATOR_MIG_CONFIGMAP:
            raise _gpu_operator.OperatorError(
                "ClusterPolicy %s does not point the MIG manager at a ConfigMap of this collection "
                "(spec.migManager.config.name=%s): run gpuops.nvidia.gpu_operator with mig_config_map first "
                "(site.yml's cluster step does, with gpu_node_mig_owner=gpu_operator)"
                % (policy["metadata"]["name"], named or "(unset)"))
        return namespace, cm_name

    def labels(self):
        """The node's MIG labels now (a node name no Node has: says so)."""
        node_obj = _kube_nodes.lookup_node(self.kube, node_name=self.node, method="name")[0]
        labels = node_obj["metadata"].get("labels") or {}
        keys = (_gpu_operator.MIG_CONFIG_LABEL, _gpu_operator.MIG_STATE_LABEL, _gpu_operator.MIG_MANAGER_DEPLOY_LABEL)
        return dict((k, labels.get(k)) for k in keys)

    def check_reported(self, before, config, differ, namespace):
        """Nothing to change: the MIG manager's last verdict must be one the run can stand on."""
        state = before[_gpu_operator.MIG_STATE_LABEL]
        if state == "failed":
            raise Failure(_gpu_operator.state_problem(self.node, state, config, namespace))
        if state == "success" and differ:
            raise Failure("node %s: the MIG manager reported success for %s=%s, but GPU(s) %s do not "
                          "match it. It applies a config only when the label changes or at its start: "
                          "delete the node's MIG manager pod (kubectl -n %s delete pod -l "
                          "app=nvidia-mig-manager --field-selector spec.nodeName=%s) to have it applied "
                          "again, then re-run" % (self.node, _gpu_operator.MIG_CONFIG_LABEL, config,
                                                  ", ".join(map(str, differ)), namespace, self.node))

    def relabel(self, before, config):
        """Point the node's config label at ``config`` and clear the state label (the MIG manager applies a config
        when the label changes); a MIG manager kept off the node is let back. Returns the labels patched."""
        patch = {_gpu_operator.MIG_CONFIG_LABEL: config, _gpu_operator.MIG_STATE_LABEL: None}
        if str(before[_gpu_operator.MIG_MANAGER_DEPLOY_LABEL]).lower() == "false":
            patch[_gpu_operator.MIG_MANAGER_DEPLOY_LABEL] = "true"
        self.kube.patch("label node %s" % self.node, _kube.node_path(self.node), {"metadata": {"labels": patch}},
                        dry_run=self.dry)
        return patch

    def read(self):
        p, node, gpus = self.params, self.node, self.gpus
        if not any(g.get("mig_supported") for g in gpus):
            raise Done(gpus_differ=[], skipped_reason="node %s has no MIG-capable GPU" % node)
        config, entries, differ = self.declared(gpus)
        self.result.update(changed=False, config=config, entries=entries, gpus_differ=differ, published=False,
                           waited=0.0)
        namespace, cm_name = self.config_map()
        self.result["config_map"] = "%s/%s" % (namespace, cm_name)
        labels = self.labels()
        self.result["state"] = labels[_gpu_operator.MIG_STATE_LABEL]
        current = _kube.read_or_none(self.kube, "read ConfigMap %s/%s" % (namespace, cm_name),
                                     _kube.configmap_path(namespace, cm_name))
        return dict(config=config, entries=entries, differ=differ, namespace=namespace, cm_name=cm_name,
                    labels=labels, config_map=current)

    def plan(self, current):
        publish_it = not published(current["config_map"], current["config"], current["entries"])
        relabel = current["labels"][_gpu_operator.MIG_CONFIG_LABEL] != current["config"]
        return dict(publish=publish_it, relabel=relabel) if publish_it or relabel else None

    def apply(self, current, changes):
        result, node, config = self.result, self.node, current["config"]
        namespace, cm_name, before = current["namespace"], current["cm_name"], current["labels"]
        if changes["publish"]:
            result["published"] = publish(self.kube, namespace, cm_name, config, current["entries"], self.dry,
                                          current["config_map"])[0]
        patch = self.relabel(before, config) if changes["relabel"] else {}
        result["changed"] = changes["relabel"] or result["published"]
        if self.module._diff and result["changed"]:
            after = dict(before)
            after.update(patch)
            result["diff"] = dict(before={"node/%s labels" % node: before},
                                  after={"node/%s labels" % node: after,
                                         "%s/%s config %s" % (namespace, cm_name, config): current["entries"]},
                                  before_header="node/%s" % node, after_header="node/%s" % node)

    def after(self, current, changes):
        p, result, node = self.params, self.result, self.node
        if not result["changed"]:
            self.check_reported(current["labels"], current["config"], current["differ"], current["namespace"])
        relabel = bool(changes and changes["relabel"])
        if self.dry or not p["wait"] or (not relabel and result["state"] == "success"):
            return
        polled = self.wait("mig_manager", lambda: mig_state(self.kube, node), p["timeout"], p["interval"])
        state, waited = polled.seen, round(polled.waited, 1)
        result.update(state=state, waited=waited)
        if state != "success":
            raise Failure(_gpu_operator.state_problem(node, state, current["config"], current["namespace"], waited))


def main():
    run_module(OperatorMigLayout)


if __name__ == "__main__":
    main()
