#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_operator
short_description: Point NVIDIA GPU Operator's ClusterPolicy at the collection's device plugin and MIG configs
version_added: 0.2.0
description:
  - For clusters where NVIDIA's GPU Operator deploys the device plugin, GPU feature discovery, the MIG manager and the
    container toolkit. Writes the device plugin configs - one per sharing profile, built and validated exactly as
    M(gpuops.nvidia.device_plugin) builds them for the chart - into a ConfigMap in the operator's namespace and points
    the ClusterPolicy at it (C(spec.devicePlugin.config.name) and C(.default)).
  - With O(mig_config_map), also makes sure the MIG manager's ConfigMap exists (a mig-parted v1 config under the key
    C(config.yaml), started from the configs of the ConfigMap the ClusterPolicy named before, so node labels that
    worked keep working) and points C(spec.migManager.config.name) at it. The layouts themselves are published per
    node by M(gpuops.nvidia.gpu_operator_mig).
  - Merge patches on exactly C(spec.devicePlugin.config) and C(spec.migManager.config.name); no other field of the
    ClusterPolicy is changed, and the ClusterPolicy is never created or deleted.
  - Refuses, before any change, a ClusterPolicy whose CRD lacks those fields (the API server drops unknown fields; the
    error names the operator release found and the first release with the field), C(spec.mig.strategy) values that
    would override a node's declared MIG strategy (the operator injects it into every device plugin), MPS with a
    device plugin older than v0.15.0, and a node declared to have its containerd runtime written by this collection
    while the operator's container toolkit writes the same file.
  - Check mode and diff use the API server's dry run for every write; nothing is stored.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  policy_name:
    description: The ClusterPolicy's name. Default - the only ClusterPolicy of the cluster (NVIDIA's chart names it C(cluster-policy)).
    type: str
  namespace:
    description: The operator's namespace, where its ConfigMaps must be. Default - the ClusterPolicy's C(status.namespace).
    type: str
  device_plugin_config_map:
    description: Name of the ConfigMap of device plugin configs (one key per profile). The collection owns its data.
    type: str
    default: gpuops-device-plugin-configs
  profiles:
    description: Sharing profiles, as for M(gpuops.nvidia.device_plugin); each becomes one key of the ConfigMap.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Profile name - the ConfigMap key and the value of the node label C(nvidia.com/device-plugin.config).
        type: str
        required: true
      sharing:
        description: C(none), C(time-slicing) or C(mps).
        type: str
        choices: [none, time-slicing, mps]
        default: none
      replicas:
        description: Replicas per GPU (>= 2) for C(time-slicing) and C(mps).
        type: int
      rename_by_default:
        description: Advertise shared GPUs as C(nvidia.com/gpu.shared).
        type: bool
        default: false
      fail_requests_greater_than_one:
        description: Refuse containers asking for more than one replica.
        type: bool
      mig_strategy:
        description: MIG strategy of nodes using this profile.
        type: str
        choices: [none, single, mixed]
        default: none
      resources:
        description: Instead of O(profiles[].replicas) - resources to share, each C({name, replicas}).
        type: list
        elements: dict
      flags:
        description: Extra device plugin flags for this profile.
        type: dict
  default_profile:
    description: The profile of nodes without the label (C(spec.devicePlugin.config.default)).
    type: str
    default: default
  nodes:
    description:
      - The GPU nodes and what they declare, for the per-node checks (MIG strategy against C(spec.mig.strategy),
        containerd ownership against the operator's toolkit) and for the C(node_labels) and C(containerd_owners)
        results.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Kubernetes node name.
        type: str
        required: true
      profile:
        description: The profile this node selects (default O(default_profile)).
        type: str
      containerd_owner:
        description:
          - Who writes containerd's C(nvidia) runtime on the node. C(auto) - the operator's toolkit where it runs on
            the node, else this collection. C(collection) - this collection (refused where the toolkit writes the
            same file). C(gpu_operator) - the toolkit (refused where it does not run on the node).
        type: str
        choices: [auto, collection, gpu_operator]
        default: auto
      containerd_files:
        description: The containerd files this collection would write on the node (config and drop-in paths).
        type: list
        elements: str
        default: []
  mig_config_map:
    description:
      - Name of the MIG manager's ConfigMap to create (when missing) and to point C(spec.migManager.config.name) at.
        Omit it to leave the MIG manager's configuration alone (no node delegates MIG to the operator).
      - The operator's own C(default-mig-parted-config) is refused - the operator rewrites it.
    type: str
attributes:
  check_mode:
    support: full
    details: Every write is sent with the API server's dry run (C(dryRun=All)); nothing is stored.
  diff_mode:
    support: full
    details: The owned ClusterPolicy fields and the ConfigMaps' data, before and after.
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Device plugin configs for an operator-managed cluster
  gpuops.nvidia.gpu_operator:
    default_profile: default
    profiles:
      - name: default
      - name: mps-4
        sharing: mps
        replicas: 4
      - name: mig-mixed
        mig_strategy: mixed
    nodes:
      - name: gpu-node-17
        profile: mps-4
    mig_config_map: gpuops-mig-parted-config
  delegate_to: localhost
  run_once: true
  register: operator
"""

RETURN = r"""
policy:
  description: Name of the ClusterPolicy.
  returned: success
  type: str
  sample: cluster-policy
namespace:
  description: The operator's namespace, where the ConfigMaps are.
  returned: success
  type: str
  sample: gpu-operator
operator_version:
  description: The operator release from the ClusterPolicy's chart labels; null when it carries none.
  returned: success
  type: str
  sample: v25.10.1
device_plugin_version:
  description: C(spec.devicePlugin.version) (the device plugin image tag the operator runs); null when unset.
  returned: success
  type: str
  sample: v0.18.1
spec:
  description: The ClusterPolicy fields the collection owns or reads, after the run (the dry run's answer in check mode).
  returned: success
  type: dict
configs:
  description: The device plugin config of each profile.
  returned: success
  type: dict
node_labels:
  description: For each node in O(nodes), the value of C(nvidia.com/device-plugin.config) that selects its profile.
  returned: success
  type: dict
containerd_owners:
  description: For each node in O(nodes), who writes containerd's nvidia runtime there (C(collection) or C(gpu_operator)).
  returned: success
  type: dict
  sample: {"gpu-node-17": "gpu_operator"}
toolkit:
  description: Whether the operator's container toolkit is enabled, and the host files it edits.
  returned: success
  type: dict
  sample: {"enabled": true, "files": ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]}
mig_config_map:
  description: The MIG manager's ConfigMap (when O(mig_config_map) is given).
  returned: success
  type: str
unused_mig_configs:
  description: Configs this collection published (C(gpuops-*)) that no node's C(nvidia.com/mig.config) selects.
  returned: when O(mig_config_map) is given
  type: list
  elements: str
changes:
  description: What was (in check mode - would be) changed.
  returned: success
  type: list
  elements: str
"""

import copy

from ansible.module_utils.basic import missing_required_lib

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import KubeError
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover
    HAS_YAML = False

NODE_SPEC = dict(
    name=dict(type="str", required=True),
    profile=dict(type="str"),
    containerd_owner=dict(type="str", default="auto", choices=list(_gpu_operator.CONTAINERD_OWNERS)),
    containerd_files=dict(type="list", elements="str", default=[]),
)
MANAGED_LABELS = {"app.kubernetes.io/managed-by": "gpuops.nvidia"}


def read_policy(kube, name):
    try:
        items = kube.get("list ClusterPolicies", _gpu_operator.policy_path()).get("items") or []
    except KubeError as exc:
        if exc.status != 404:
            raise
        raise _gpu_operator.OperatorError("the cluster serves no ClusterPolicy resource (clusterpolicies.nvidia.com: "
                                          "%s): NVIDIA's GPU Operator is not installed. This collection never creates "
                                          "it; install the operator, or use gpuops_device_plugin_provider=chart"
                                          % exc.msg)
    return _gpu_operator.select_policy(items, name)


def check_mps(built, policy, version, dp_version):
    """MPS needs device plugin >= v0.15.0: from spec.devicePlugin.version, else from the operator release."""
    if not any((c.get("sharing") or {}).get("mps") for c in built["configs"].values()):
        return []
    errs = []
    # with spec.devicePlugin.version set, _device_plugin.build has checked that version itself
    if not dp_version and version and not _device_plugin.version_at_least(version, _gpu_operator.MPS_MIN_OPERATOR):
        errs.append("MPS needs device plugin >= v0.15.0, first shipped by GPU Operator %s; this cluster runs operator "
                    "%s" % (_gpu_operator.MPS_MIN_OPERATOR, version))
    if ((policy.get("spec") or {}).get("gfd") or {}).get("enabled") is False:
        errs.append("MPS needs GPU feature discovery: the operator's MPS control daemon runs only on nodes it labels "
                    "nvidia.com/mps.capable=true, and the ClusterPolicy has spec.gfd.enabled=false")
    return errs


def seed_mig_config(kube, namespace, policy):
    """The mig-parted document to start a new MIG ConfigMap from: the configs of the ConfigMap the ClusterPolicy names
    now (or the operator's default one), so node labels that worked keep working."""
    current = (((policy.get("spec") or {}).get("migManager") or {}).get("config") or {}).get("name") \
        or _gpu_operator.OPERATOR_MIG_CONFIGMAP
    source = _kube.read_or_none(kube, "read ConfigMap %s/%s" % (namespace, current),
                                _kube.configmap_path(namespace, current))
    text = ((source or {}).get("data") or {}).get(_gpu_operator.MIG_CONFIG_KEY)
    try:
        doc = _gpu_operator.parse_config_text(text, yaml)
    except _gpu_operator.OperatorError:
        doc = _gpu_operator.parse_config_text("", yaml)
    return _gpu_operator.with_config(doc, None, None), (current if source else None)


ARGUMENT_SPEC = dict(
    policy_name=dict(type="str"),
    namespace=dict(type="str"),
    device_plugin_config_map=dict(type="str", default="gpuops-device-plugin-configs"),
    profiles=dict(type="list", elements="dict", required=True, options=_device_plugin.PROFILE_ARG_SPEC),
    default_profile=dict(type="str", default="default"),
    nodes=dict(type="list", elements="dict", default=[], options=NODE_SPEC),
    mig_config_map=dict(type="str"),
)
ARGUMENT_SPEC.update(_kube.AUTH_ARG_SPEC)


class OperatorSharing(KubeRun):
    """The ClusterPolicy and the ConfigMaps that give the GPU Operator the collection's sharing configs: validate ->
    read (the ClusterPolicy, the nodes) -> plan (configs built and checked, the policy patch tried as a dry run: a
    CRD that lacks a field drops it) -> apply (the ConfigMaps, then the policy patch). Everything is checked before
    the first write. In check mode the ConfigMap writes are the API server's dry runs and the policy is not patched.
    ``result`` is what the module returns, also when an error ends the run. Its converge hook is that sequence:
    whether it changed is what the writes (or their dry runs) answered, so it is not the base's plan -> apply (it
    neither retries, waits nor reads GPUs). A planner's OperatorError is a refusal (nothing written yet)."""

    argument_spec = ARGUMENT_SPEC
    refusals = (_gpu_operator.OperatorError,)

    def __init__(self, module):
        super(OperatorSharing, self).__init__(module)
        self.dry = module.check_mode
        self.result.update(changes=[])

    def validate(self):
        p = self.params
        if not HAS_YAML:
            raise Failure(missing_required_lib("PyYAML"))
        errors = _kube_names.dns_subdomain_errors(p["device_plugin_config_map"], "device_plugin_config_map")
        if p["namespace"] is not None:
            errors += _kube_names.dns_label_errors(p["namespace"], "namespace")
        if p["policy_name"] is not None:
            errors += _kube_names.dns_subdomain_errors(p["policy_name"], "policy_name")
        if p["mig_config_map"] is not None:
            errors += _kube_names.dns_subdomain_errors(p["mig_config_map"], "mig_config_map")
            if p["mig_config_map"] == _gpu_operator.OPERATOR_MIG_CONFIGMAP:
                errors.append("mig_config_map %s is refused: the operator creates and rewrites that ConfigMap itself; "
                              "name one of your own (e.g. gpuops-mig-parted-config)"
                              % _gpu_operator.OPERATOR_MIG_CONFIGMAP)
        names = [n["name"] for n in self.params["nodes"]]
        twice = sorted(set(n for n in names if names.count(n) > 1))
        if twice:
            errors.append("nodes listed twice: %s" % ", ".join(twice))
        return errors

    def read(self):
        """The ClusterPolicy, with the operator's and the device plugin's versions."""
        policy = read_policy(self.kube, self.params["policy_name"])
        version = _gpu_operator.operator_version(policy)
        spec = policy.get("spec") or {}
        dp_version = _gpu_operator.image_version((spec.get("devicePlugin") or {}).get("version")) or None
        self.result.update(policy=policy["metadata"]["name"], operator_version=version,
                           device_plugin_version=dp_version)
        return policy, version, dp_version

    def plan(self, policy, version, dp_version):
        """The configs, checked against the policy and the nodes, and the policy patch (tried as a dry run). Raises
        OperatorError with every problem found."""
        p, kube = self.params, self.kube
        name = policy["metadata"]["name"]
        try:
            built = _device_plugin.build([dict((k, v) for k, v in prof.items() if v is not None or k == "name")
                                          for prof in p["profiles"]], p["default_profile"], chart_version=dp_version,
                                         nodes=[{"name": n["name"], "profile": n["profile"]} for n in p["nodes"]],
                                         yaml_module=yaml)
        except _device_plugin.DevicePluginConfigError as exc:
            raise _gpu_operator.OperatorError(exc.errors)
        problems = check_mps(built, policy, version, dp_version)
        profiles = dict((prof["name"], _device_plugin.normalize_profile(prof)) for prof in p["profiles"])
        problems += _gpu_operator.mig_strategy_errors(policy, dict((node, profiles[prof])
                                                                   for node, prof in built["node_labels"].items()))
        nodes = kube.get("list nodes", "/api/v1/nodes").get("items") or []
        labels = dict((n["metadata"]["name"], n["metadata"].get("labels") or {}) for n in nodes)
        owners, owner_errors = _gpu_operator.containerd_owners(
            policy, version, [{"name": n["name"], "owner": n["containerd_owner"], "files": n["containerd_files"]}
                              for n in p["nodes"]], labels)
        problems += owner_errors
        namespace = _gpu_operator.namespace_of(policy, p["namespace"])
        if not namespace:
            problems.append("ClusterPolicy %s has no status.namespace (the operator writes it when it reconciles): "
                            "give namespace, the namespace the operator runs in" % name)
        if problems:
            raise _gpu_operator.OperatorError(problems)
        enabled, files = _gpu_operator.toolkit_files(policy, version)
        self.result.update(namespace=namespace, configs=built["configs"], node_labels=built["node_labels"],
                           containerd_owners=owners, toolkit={"enabled": enabled, "files": files})
        for warning in built["warnings"]:
            self.module.warn(warning)
        patch = _gpu_operator.owned_patch((p["device_plugin_config_map"], built["default_profile"]),
                                          p["mig_config_map"])
        needed = _gpu_operator.patch_needed(policy, patch)
        after_policy = policy
        if needed:
            after_policy = kube.patch("patch ClusterPolicy %s" % name, _gpu_operator.policy_path(name), patch,
                                      dry_run=True)
            dropped = _gpu_operator.dropped_fields(after_policy, patch)
            if dropped:
                raise _gpu_operator.OperatorError(_gpu_operator.too_old_errors(name, version, dropped))
        return dict(built=built, labels=labels, namespace=namespace, patch=patch, needed=needed,
                    after_policy=after_policy)

    def write_device_plugin_configs(self, plan, maps):
        """The device plugin ConfigMap holds one config per profile; ``maps``: (before, after) data by name."""
        p, namespace = self.params, plan["namespace"]
        name = p["device_plugin_config_map"]
        dp_data = dict((prof, _device_plugin.dump_config(cfg, yaml))
                       for prof, cfg in sorted(plan["built"]["configs"].items()))
        current = _kube.read_or_none(self.kube, "read ConfigMap %s/%s" % (namespace, name),
                                     _kube.configmap_path(namespace, name))
        answer = _kube.write_configmap(self.kube, namespace, name, dp_data, current, dry_run=self.dry,
                                       labels=MANAGED_LABELS)
        maps[0][name] = (current or {}).get("data")
        maps[1][name] = answer.get("data")
        if answer is not current:
            self.result["changes"].append("%s ConfigMap %s/%s with the device plugin configs %s" % (
                "create" if current is None else "update", namespace, name, ", ".join(sorted(dp_data))))

    def write_mig_config(self, policy, plan, maps):
        """The MIG manager's ConfigMap: created from the configs the policy names now, else its configs kept."""
        namespace, mig_name = plan["namespace"], self.params["mig_config_map"]
        current = _kube.read_or_none(self.kube, "read ConfigMap %s/%s" % (namespace, mig_name),
                                     _kube.configmap_path(namespace, mig_name))
        if current is None:
            doc, seeded_from = seed_mig_config(self.kube, namespace, policy)
        else:
            text = (current.get("data") or {}).get(_gpu_operator.MIG_CONFIG_KEY)
            doc = _gpu_operator.with_config(_gpu_operator.parse_config_text(text, yaml), None, None)
            seeded_from = None
        old_doc = None
        if current is not None:
            old_doc = yaml.safe_load((current.get("data") or {}).get(_gpu_operator.MIG_CONFIG_KEY) or "null")
        if current is None or old_doc != doc:
            data = dict(current.get("data") or {}) if current else {}
            data[_gpu_operator.MIG_CONFIG_KEY] = _gpu_operator.dump_config(doc, yaml)
            answer = _kube.write_configmap(self.kube, namespace, mig_name, data, current, dry_run=self.dry,
                                           labels=MANAGED_LABELS)
            self.result["changes"].append("%s ConfigMap %s/%s for the MIG manager%s" % (
                "create" if current is None else "update", namespace, mig_name,
                " (starting from the configs of %s)" % seeded_from if seeded_from else ""))
        else:
            answer = current
        maps[0][mig_name] = (current or {}).get("data")
        maps[1][mig_name] = answer.get("data")
        self.result["mig_config_map"] = mig_name
        self.result["unused_mig_configs"] = _gpu_operator.unused_configs(doc, plan["labels"])

    def patch_policy(self, name, plan):
        """The planned ClusterPolicy patch, outside check mode; returns the policy after it."""
        self.result["changes"].append("patch ClusterPolicy %s: %s" % (name, ", ".join(plan["needed"])))
        if self.dry:
            return plan["after_policy"]
        self.kube.patch("patch ClusterPolicy %s" % name, _gpu_operator.policy_path(name), plan["patch"])
        after_policy = self.kube.get("read ClusterPolicy %s" % name, _gpu_operator.policy_path(name))
        left = _gpu_operator.dropped_fields(after_policy, plan["patch"])
        if left:
            raise Failure("the ClusterPolicy %s does not hold %s after the patch (changed by someone else at the "
                          "same time?)" % (name, ", ".join(left)))
        return after_policy

    def converge(self):
        policy, version, dp_version = self.read()
        name = policy["metadata"]["name"]
        plan = self.plan(policy, version, dp_version)
        maps = ({}, {})
        self.write_device_plugin_configs(plan, maps)
        if self.params["mig_config_map"]:
            self.write_mig_config(policy, plan, maps)
        after_policy = self.patch_policy(name, plan) if plan["needed"] else plan["after_policy"]
        result = self.result
        result["spec"] = _gpu_operator.spec_view(after_policy)
        result["changed"] = bool(result["changes"])
        if self.module._diff and result["changed"]:
            result["diff"] = dict(
                before={"clusterpolicy/%s" % name: _gpu_operator.spec_view(policy),
                        "configmaps": copy.deepcopy(maps[0])},
                after={"clusterpolicy/%s" % name: result["spec"], "configmaps": maps[1]})
        return result


def main():
    run_module(OperatorSharing)


if __name__ == "__main__":
    main()
