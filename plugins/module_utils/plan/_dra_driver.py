# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's DRA driver for GPUs as a helm release: the chart values the collection owns, the values it refuses, and
what on a node would conflict with the driver (PRIVATE: do not use from other collections). Pure functions, no I/O.

Facts from NVIDIA's chart and code at kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1 (commit
fc69d98528027bfe06efff81e6fd99c98ede8ff7), deployments/helm/nvidia-dra-driver-gpu/ unless another path is named, and
unchanged at v25.12.0 (NVIDIA/k8s-dra-driver-gpu, commit 0882da8720c28763137e0987778ec476ec4cf8df, the default) unless
25.12.0 is named: docs/dra.md says what changed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods

# templates/deviceclass-gpu.yaml and deviceclass-mig.yaml: rendered when resources.gpus.enabled.
DEVICE_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com")
CHART_NAME = "nvidia-dra-driver-gpu"

# Values the module sets, each with why a user's value is refused. featureGates: pkg/featuregates/featuregates.go
# v25.8.1 - TimeSlicingSettings and MPSSupport are alpha and default false; GpuConfig sharing (time-slicing
# settings, MPS) is refused by the driver without them.
OWNED = (
    (("resources", "gpus", "enabled"), "the module installs the driver to allocate GPUs, so it is always true"),
    (("gpuResourcesEnabledOverride",), "NVIDIA's chart refuses resources.gpus.enabled=true without it "
                                       "(templates/validation.yaml), so the module sets it true"),
    (("resources", "computeDomains", "enabled"), "set it with the option compute_domains"),
    (("featureGates", "TimeSlicingSettings"), "the module turns this alpha gate (default false in 25.8) on so that "
                                              "GpuConfig time-slicing settings are accepted"),
    (("featureGates", "MPSSupport"), "the module turns this alpha gate (default false in 25.8) on so that GpuConfig "
                                     "MPS sharing is accepted"),
)
# Values NVIDIA's chart refuses itself (templates/validation.yaml): refused before helm runs, with its reason.
REFUSED = (
    ("namespace", "NVIDIA's chart refuses a 'namespace' value (\"no longer supported\"; the release namespace is "
                  "used): set the module's namespace option instead"),
    ("nvidiaCtkPath", "NVIDIA's chart refuses it (\"Setting a user-defined nvidiaCtkPath is no longer supported\"; "
                      "the driver installs its own nvidia-cdi-hook): remove it"),
)

# The GPU Operator's device plugin operand (gpu-operator assets/state-device-plugin: DaemonSet
# nvidia-device-plugin-daemonset, pods labelled app=nvidia-device-plugin-daemonset); NVIDIA's static manifest
# (k8s-device-plugin nvidia-device-plugin.yml) uses the same DaemonSet name.
OPERATOR_DAEMONSET = "nvidia-device-plugin-daemonset"
# NVIDIA's device plugin chart labels every pod app.kubernetes.io/name=nvidia-device-plugin, its device plugin's as
# well as gpu-feature-discovery's and the MPS control daemon's; only the device plugin advertises GPUs.
CHART_PLUGIN_NAME = "nvidia-device-plugin"
HARMLESS_SUFFIXES = ("-gpu-feature-discovery", "-mps-control-daemon")
HARMLESS_COMPONENTS = ("gfd", "gpu-feature-discovery", "mps-control-daemon")
# Extended resources the device plugin advertises (nvidia.com/gpu, nvidia.com/gpu.shared when renamed,
# nvidia.com/mig-<profile> with the mixed strategy).
PLUGIN_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
# The DRA driver's kubelet plugin: pods labelled app.kubernetes.io/name=nvidia-dra-driver-gpu (_helpers.tpl
# templateLabels) of the DaemonSet <name>-kubelet-plugin (templates/kubeletplugin.yaml).
KUBELET_PLUGIN_SUFFIX = "-kubelet-plugin"


def _path(keys):
    return ".".join(keys)


def values_errors(values):
    """The user's ``values`` that the module cannot take: owned keys, keys NVIDIA's chart refuses, a parent of an
    owned key that is not a mapping, a kubeletPlugin.affinity the pause expression cannot be added to."""
    errors = []
    values = values or {}
    for keys, why in OWNED:
        cur = values
        for depth, key in enumerate(keys):
            if key not in cur:
                break
            if depth == len(keys) - 1:
                errors.append("values.%s is set by the module and cannot be given (%s); got %r"
                              % (_path(keys), why, cur[key]))
                break
            cur = cur[key]
            if not isinstance(cur, dict):
                parent = keys[:depth + 1]
                errors.append("values.%s must be a mapping (the module sets %s under it), got %r"
                              % (_path(parent), ", ".join(_path(k) for k, dummy in OWNED if k[:depth + 1] == parent),
                                 cur))
                break
    for key, why in REFUSED:
        if key in values:
            errors.append("values.%s is refused: %s" % (key, why))
    gates = values.get("featureGates")
    if isinstance(gates, dict) and gates.get("DynamicMIG") is True:
        errors.append("values.featureGates.DynamicMIG cannot be true: the module turns MPSSupport on, and NVIDIA's "
                      "driver (25.12.0, pkg/featuregates ValidateFeatureGates) refuses DynamicMIG with MPSSupport, so "
                      "the kubelet plugin would not start (and the collection sets the MIG layout on the node itself)")
    plugin = values.get("kubeletPlugin")
    if plugin is not None and not isinstance(plugin, dict):
        errors.append("values.kubeletPlugin must be a mapping (the module sets kubeletPlugin.affinity), got %r"
                      % (plugin,))
    elif plugin:
        errors.extend(_gpu_pods.affinity_errors(plugin.get("affinity"), "values.kubeletPlugin.affinity"))
    unique = []
    for error in errors:     # a parent that is not a mapping is named once, not once per owned key under it
        if error not in unique:
            unique.append(error)
    return unique


def build_values(values, compute_domains):
    """The complete chart values: the user's with the owned keys set and kubeletPlugin.affinity made pausable.
    kubeletPlugin.affinity's default required terms in NVIDIA's values.yaml v25.8.1 are the device plugin chart's
    three (_device_plugin.CHART_AFFINITY_TERMS), so gpuops.nvidia.node_gpu_pods pauses the kubelet plugin on a node
    around a MIG change as it does the device plugin."""
    out = copy.deepcopy(values or {})
    resources = out.setdefault("resources", {})
    resources.setdefault("gpus", {})["enabled"] = True
    resources.setdefault("computeDomains", {})["enabled"] = bool(compute_domains)
    out["gpuResourcesEnabledOverride"] = True
    gates = out.setdefault("featureGates", {})
    gates["TimeSlicingSettings"] = True
    gates["MPSSupport"] = True
    plugin = out.setdefault("kubeletPlugin", {})
    plugin["affinity"] = _device_plugin.pausable_affinity(plugin.get("affinity"))
    return out


def kubelet_plugin_daemonset(values, chart_name=CHART_NAME):
    """The kubelet plugin DaemonSet's name: <nameOverride or chart name>-kubelet-plugin (templates/kubeletplugin.yaml)."""
    name = (values or {}).get("nameOverride") or chart_name
    return str(name)[:63].rstrip("-") + KUBELET_PLUGIN_SUFFIX


def _daemonset_owner(pod):
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(owner, dict) and owner.get("kind") == "DaemonSet":
            return owner.get("name") or ""
    return None


def _finished(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def device_plugin_pod(pod):
    """What device plugin ``pod`` runs (a sentence), or None: a pod of the GPU Operator's device plugin, or of the
    device plugin DaemonSet of NVIDIA's chart (not its gpu-feature-discovery or MPS control daemon)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    owner = _daemonset_owner(pod)
    if owner is None or _finished(pod):
        return None
    where = "pod %s/%s of DaemonSet %s" % (meta.get("namespace"), meta.get("name"), owner)
    if owner == OPERATOR_DAEMONSET or labels.get("app") == OPERATOR_DAEMONSET:
        return "the GPU Operator's device plugin (%s)" % where
    if (labels.get("app.kubernetes.io/name") == CHART_PLUGIN_NAME and not owner.endswith(HARMLESS_SUFFIXES)
            and labels.get("app.kubernetes.io/component") not in HARMLESS_COMPONENTS):
        return "NVIDIA's device plugin chart (%s)" % where
    return None


def dra_kubelet_plugin_pod(pod):
    """A sentence naming ``pod`` when it is the DRA driver's kubelet plugin, else None."""
    meta = pod.get("metadata") or {}
    owner = _daemonset_owner(pod)
    if owner is None or _finished(pod) or (meta.get("labels") or {}).get("app.kubernetes.io/name") != CHART_NAME \
            or not owner.endswith(KUBELET_PLUGIN_SUFFIX):
        return None
    return "NVIDIA's DRA driver kubelet plugin (pod %s/%s of DaemonSet %s)" % (
        meta.get("namespace"), meta.get("name"), owner)


def _positive(quantity):
    text = str(quantity).strip()
    try:
        return float(text.rstrip("kKMGTPEi")) > 0
    except ValueError:
        return text not in ("", "0")


def advertised_plugin_resources(node):
    """The device plugin resources ``node`` (a Node object) advertises in status.allocatable with a count above 0."""
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    return dict((k, v) for k, v in sorted(allocatable.items())
                if k.startswith(PLUGIN_RESOURCE_PREFIXES) and _positive(v))
