#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_driver
short_description: Install or upgrade NVIDIA's DRA driver for GPUs (Dynamic Resource Allocation) as a Helm release
version_added: 0.3.0
description:
  - Installs or upgrades NVIDIA's C(nvidia-dra-driver-gpu) Helm chart (NVIDIA/k8s-dra-driver-gpu, 25.8.1
    and later) with the real C(helm) binary, so that pods claim GPUs through C(resource.k8s.io/v1) ResourceClaims
    and the DeviceClasses C(gpu.nvidia.com) and C(mig.nvidia.com) instead of the C(nvidia.com/gpu) extended resource.
  - "Owns these chart values: C(resources.gpus.enabled=true) with C(gpuResourcesEnabledOverride=true) (the chart
    refuses the first without the second), C(resources.computeDomains.enabled) (O(compute_domains)), the alpha
    feature gates C(featureGates.TimeSlicingSettings=true) and C(featureGates.MPSSupport=true) (off by default in
    25.8; GpuConfig sharing needs them), and C(kubeletPlugin.affinity) - the user's affinity, or the chart's default
    terms, with the expression that lets M(gpuops.nvidia.node_gpu_pods) pause the kubelet plugin on a node around
    a MIG change."
  - O(values) that set an owned key, C(namespace) or C(nvidiaCtkPath) (both refused by NVIDIA's chart), or
    C(featureGates.DynamicMIG=true) (NVIDIA's driver 25.12.0 refuses it with C(MPSSupport)) are refused before
    anything runs, naming the key and why.
  - "Before any helm write, and in check mode too, reads the cluster: it must serve C(resource.k8s.io/v1)
    (Kubernetes 1.34+, where DRA is GA; the collection writes its DRA objects at v1), and no node in O(nodes) may run
    a device plugin that would hand out the same GPUs twice - a pod of NVIDIA's device plugin chart (not its
    gpu-feature-discovery), of the GPU Operator's device plugin, or a node advertising C(nvidia.com/gpu*) or
    C(nvidia.com/mig-*) in its allocatable (O(conflict_check))."
  - Idempotent without the helm-diff plugin (chart version and values compared); check mode runs only read-only helm
    commands and API reads and reports the values diff; a failed upgrade is rolled back
    (O(rollback_on_failure)); a release left pending by a dead helm is recovered first (O(pending_timeout),
    O(record_dir)) - the same release handling as M(gpuops.nvidia.device_plugin).
  - After an install or upgrade, checks that the DeviceClasses C(gpu.nvidia.com) and C(mig.nvidia.com) exist.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.helm_release
options:
  state:
    description: C(present) installs or upgrades; C(absent) uninstalls the release.
    type: str
    choices: [present, absent]
    default: present
  release_name:
    description: Helm release name.
    type: str
    default: nvidia-dra-driver-gpu
  namespace:
    description: Namespace of the release. NVIDIA's chart refuses C(default) (unless C(allowDefaultNamespace)).
    type: str
    default: nvidia-dra-driver-gpu
  chart_ref:
    description: Chart name in the repository.
    type: str
    default: nvidia-dra-driver-gpu
  chart_repo_url:
    description: Helm repository URL (used unless O(chart_path) is given).
    type: str
    default: https://helm.ngc.nvidia.com/nvidia
  chart_version:
    description:
      - Pinned chart version (e.g. C(25.12.0); C(25.8.1) is still supported), required with a repository (an unpinned chart would change under you).
      - With O(chart_path) the version is read from the chart and this, if given, must match.
    type: str
  chart_path:
    description: Local chart directory or C(.tgz) for air-gapped sites (read where the module runs).
    type: path
  compute_domains:
    description: Enable the driver's ComputeDomain support (C(resources.computeDomains.enabled); multi-node NVLink, the
      controller Deployment).
    type: bool
    default: false
  nodes:
    description:
      - Kubernetes node names this run prepares for DRA. Each is checked for a device plugin that would conflict
        with the driver (O(conflict_check)).
    type: list
    elements: str
    default: []
  conflict_check:
    description: Refuse, before any change, when a node in O(nodes) runs a device plugin or advertises
      C(nvidia.com/gpu*) / C(nvidia.com/mig-*) resources - both would allocate the same GPUs as the DRA driver.
    type: bool
    default: true
  values:
    description:
      - Other chart values (e.g. C(nvidiaDriverRoot), C(kubeletPlugin.tolerations), C(kubeletPlugin.nodeSelector)).
      - Owned keys, C(namespace), C(nvidiaCtkPath) and C(featureGates.DynamicMIG=true) are refused (see the description).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Only read-only helm commands and API reads run; the values diff is reported.
  diff_mode:
    support: full
  idempotent:
    support: full
seealso:
  - module: gpuops.nvidia.device_plugin
  - module: gpuops.nvidia.node_gpu_pods
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: NVIDIA's DRA driver for GPUs on the GPU nodes of this run
  gpuops.nvidia.dra_driver:
    chart_version: 25.12.0
    nodes: "{{ groups['gpu_nodes'] }}"
    values:
      nvidiaDriverRoot: /run/nvidia/driver
  delegate_to: localhost
  run_once: true
  register: dra

- name: Air-gapped, with ComputeDomains (multi-node NVLink)
  gpuops.nvidia.dra_driver:
    chart_path: /opt/charts/nvidia-dra-driver-gpu-25.12.0.tgz
    compute_domains: true

- name: Remove the driver
  gpuops.nvidia.dra_driver:
    state: absent
"""

RETURN = r"""
chart_version:
  description: Chart version applied (or that would be).
  returned: with state=present
  type: str
  sample: 25.12.0
chart_values:
  description: The complete chart values applied (or that would be).
  returned: with state=present
  type: dict
feature_gates:
  description: The driver's feature gates as the chart values set them.
  returned: with state=present
  type: dict
  sample: {"MPSSupport": true, "TimeSlicingSettings": true}
device_classes:
  description: The DeviceClasses the driver's chart installs.
  returned: with state=present
  type: list
  elements: str
  sample: [gpu.nvidia.com, mig.nvidia.com]
kubelet_plugin:
  description:
    - The kubelet plugin DaemonSet (C(namespace), C(name)) and the label selector of its pods, as
      M(gpuops.nvidia.node_gpu_pods) takes them to pause the plugin on a node.
  returned: with state=present
  type: dict
  sample: {"namespace": "nvidia-dra-driver-gpu", "name": "nvidia-dra-driver-gpu-kubelet-plugin",
           "selector": "app.kubernetes.io/instance=nvidia-dra-driver-gpu"}
resource_api:
  description: The resource.k8s.io versions the API server serves and its gitVersion, as read before any change.
  returned: with state=present
  type: dict
  sample: {"versions": ["v1"], "server_version": "v1.34.1"}
changes:
  description: Why the release changes (empty when it is as declared).
  returned: with state=present
  type: list
  elements: str
conflicts:
  description: Per node, what would allocate the same GPUs as the driver (the run fails when not empty).
  returned: when the conflict check refused
  type: dict
release:
  description: The release as C(helm list) shows it after the run (before it in check mode).
  returned: always
  type: dict
commands:
  description: Helm commands run (argument lists; credentials go through the environment, never here).
  returned: always
  type: list
rolled_back_to:
  description: Revision restored after a failed upgrade.
  returned: on failure with a rollback
  type: int
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra_driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _helm_release
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names

ARGUMENT_SPEC = _helm_release.release_argument_spec(release_name="nvidia-dra-driver-gpu",
                                                    namespace="nvidia-dra-driver-gpu",
                                                    chart_ref="nvidia-dra-driver-gpu",
                                                    chart_repo_url="https://helm.ngc.nvidia.com/nvidia")
ARGUMENT_SPEC.update(
    compute_domains=dict(type="bool", default=False),
    nodes=dict(type="list", elements="str", default=[]),
    conflict_check=dict(type="bool", default=True),
)


class DraDriverRelease(_helm_release.HelmRelease):
    """NVIDIA's DRA driver chart as a helm release (the lifecycle is _helm_release.HelmRelease's): owned values set,
    the cluster's DRA API and the nodes' device plugins checked before any helm write, the DeviceClasses after."""

    namespace_hint = "nvidia-dra-driver-gpu"
    version_example = "25.12.0"
    argument_spec = ARGUMENT_SPEC
    values_prefix = "gpuops-dra-"

    def extra_errors(self):
        p = self.params
        errors = _dra_driver.values_errors(p["values"])
        for index, node in enumerate(p["nodes"] or []):
            errors.extend(_kube_names.dns_subdomain_errors(node, "nodes[%d]" % index))
        return errors

    def build(self, chart_version):
        p = self.params
        values = _dra_driver.build_values(p["values"], p["compute_domains"])
        selector = "app.kubernetes.io/instance=%s" % p["release_name"]
        additions = dict(feature_gates=values["featureGates"], device_classes=list(_dra_driver.DEVICE_CLASSES),
                         kubelet_plugin=dict(namespace=p["namespace"], selector=selector,
                                             name=_dra_driver.kubelet_plugin_daemonset(values)))
        return values, additions, None

    # ---- the cluster, read before any helm write -------------------------------------------------------------------
    def pre_checks(self, context):
        p = self.params
        _kube.require_client()
        kube = _kube.Kube.from_params(p)
        versions = _kube.served_group_versions(kube, _kube.DRA_GROUP)
        server = _kube.server_git_version(kube)
        self.result["resource_api"] = dict(versions=versions, server_version=server)
        if _kube.DRA_VERSION not in versions:
            self.refuse(
                "the Kubernetes API server (gitVersion %s) does not serve %s: it serves %s. gpuops.nvidia "
                "writes its DRA objects (DeviceClass, ResourceClaimTemplate) at %s, which "
                "Kubernetes 1.34 and later serve (DRA is GA there); upgrade the cluster"
                % (server or "unknown", _kube.DRA_API_VERSION,
                   ", ".join("%s/%s" % (_kube.DRA_GROUP, v) for v in versions)
                   or "no %s version" % _kube.DRA_GROUP, _kube.DRA_API_VERSION))
        if p["conflict_check"] and p["nodes"]:
            self.check_conflicts(kube)

    def check_conflicts(self, kube):
        """Refuse when a node of this run runs a device plugin or advertises its resources: the kubelet would hand
        the same GPUs to a device-plugin pod and to a ResourceClaim."""
        conflicts = {}
        for node in self.params["nodes"]:
            found = []
            obj = _kube.read_or_none(kube, "read node %s" % node, _kube.node_path(node))
            if obj is None:
                found.append("the node is not in the cluster (check the node name)")
            else:
                resources = _dra_driver.advertised_plugin_resources(obj)
                if resources:
                    found.append("it advertises %s in status.allocatable (a device plugin registered these)"
                                 % ", ".join("%s=%s" % item for item in resources.items()))
                found.extend(what for what in (_dra_driver.device_plugin_pod(pod)
                                               for pod in _kube.pods_on_node(kube, node)) if what)
            if found:
                conflicts[node] = found
        if conflicts:
            self.result["conflicts"] = conflicts
            self.refuse(
                "refusing to install NVIDIA's DRA driver: %s. A device plugin and the DRA driver on one node "
                "would both allocate the same GPUs. Remove the device plugin from these nodes first (or set "
                "conflict_check=false if you know better)"
                % "; ".join("node %s: %s" % (node, ", ".join(found)) for node, found in sorted(conflicts.items())))

    def after_apply(self, context):
        """The chart's DeviceClasses exist (pods claim GPUs through them)."""
        kube = _kube.Kube.from_params(self.params)
        missing = [name for name in _dra_driver.DEVICE_CLASSES
                   if _kube.read_or_none(kube, "read DeviceClass %s" % name,
                                         _kube.dra_path("deviceclasses", name=name)) is None]
        if missing:
            raise Failure(
                "helm installed release %s/%s, but DeviceClass %s does not exist at %s: the chart did not "
                "create it (NVIDIA's chart renders gpu.nvidia.com and mig.nvidia.com when resources.gpus.enabled; "
                "check chart_path/chart_version is NVIDIA's nvidia-dra-driver-gpu chart)"
                % (self.params["namespace"], self.params["release_name"], ", ".join(missing),
                   _kube.DRA_API_VERSION))


def main():
    run_module(DraDriverRelease)


if __name__ == "__main__":
    main()
