#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_labels
short_description: Set or remove labels on this host's Kubernetes Node
version_added: 0.1.0
description:
  - Finds the Kubernetes Node that is this host (by node name, by hostname, or by InternalIP when the names differ)
    and merges labels into it, or removes them, through the C(kubernetes) Python client.
  - Only the labels named here change; others are left alone, except with O(purge_prefix).
  - Label keys and values are checked against Kubernetes syntax before any API call.
  - Check mode sends the same patch with the API's server-side dry run (C(dryRun=All)), so the API server validates
    it (admission, RBAC) and nothing is stored.
  - Convenience options set the labels NVIDIA's device plugin and GPU Operator read -
    C(nvidia.com/device-plugin.config), C(nvidia.com/gpu.present) and C(nvidia.com/gpu.deploy.mig-manager).
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
options:
  labels:
    description:
      - With O(state=present), a dict of labels to set. Booleans and numbers become the strings C(true), C(false),
        C(4) (Kubernetes label values are strings). A V(null) value removes that key.
      - With O(state=absent), the label keys to remove, as a list or as a dict whose values are ignored.
    type: raw
    default: {}
  state:
    description: Whether O(labels) must be on the node or not.
    type: str
    choices: [present, absent]
    default: present
  purge_prefix:
    description:
      - With O(state=present), also remove labels under this prefix (C(<prefix>/...)) that O(labels) does not list,
        so the node carries exactly the labels you declare there.
      - Only a prefix you own. Prefixes of Kubernetes (C(kubernetes.io), C(k8s.io) and their subdomains) and of
        NVIDIA (C(nvidia.com) and subdomains), where kubelet, node-feature-discovery, GPU feature discovery and the
        GPU Operator write, are refused.
    type: str
  device_plugin_config:
    description:
      - Set C(nvidia.com/device-plugin.config) to this name, which selects the node's config in the device plugin's
        C(config.map) (see M(gpuops.nvidia.device_plugin)). It must be a valid label value.
    type: str
  gpu_present:
    description:
      - C(always) sets C(nvidia.com/gpu.present=true), which NVIDIA's chart (0.15.0 and later) accepts in its node
        affinity when node-feature-discovery does not label the node.
      - C(auto) sets it only when the node carries none of the node-feature-discovery labels the chart's affinity
        accepts (C(feature.node.kubernetes.io/pci-10de.present=true), C(feature.node.kubernetes.io/cpu-model.vendor_id=NVIDIA)).
        NFD with its own default config labels a GPU node in the class-prefixed form
        (C(feature.node.kubernetes.io/pci-0302_10de.present) or C(pci-0300_10de.present)), which NVIDIA's chart does not
        name; so C(auto) sets the label on such a node too (RV(nfd_gpu_labels) still lists the NFD labels found).
      - C(unmanaged) leaves the label alone.
    type: str
    choices: [auto, always, unmanaged]
    default: unmanaged
  mig_owner:
    description:
      - Who manages MIG on this node; there must be one owner per node.
      - C(collection) sets C(nvidia.com/gpu.deploy.mig-manager=false) so the GPU Operator removes its MIG manager
        from this node (a C(gpu.deploy.*) label set to C(false) removes that operand) and cannot undo the layout
        this collection applies.
      - C(gpu_operator) sets the label to C(true), handing MIG back to the operator's MIG manager.
      - C(unmanaged) leaves the label alone.
    type: str
    choices: [collection, gpu_operator, unmanaged]
    default: unmanaged
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it. Tried first when given.
    type: str
  hostname:
    description:
      - Host names to match against node names, C(Hostname) addresses and the C(kubernetes.io/hostname) label
        (short forms are tried too). Defaults to the host name and FQDN of the host the module runs on; pass
        C({{ ansible_hostname }}) when the task is delegated to the controller.
    type: list
    elements: str
  internal_ips:
    description:
      - IP addresses to match against the nodes' C(InternalIP) addresses. Defaults to the addresses the host
        the module runs on resolves for its own name; pass C({{ ansible_all_ipv4_addresses }}) when delegated.
    type: list
    elements: str
  node_lookup:
    description:
      - How to find the node. C(auto) tries node name, then hostname, then InternalIP, and fails when more
        than one node matches.
    type: str
    choices: [auto, name, hostname, internal_ip]
    default: auto
attributes:
  check_mode:
    support: full
    details: Server-side dry run; the API validates the patch and stores nothing.
  diff_mode:
    support: full
    details: Before and after labels of the node.
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Select the device plugin config for this node and mark it as a GPU node (no NFD in this cluster)
  gpuops.nvidia.node_labels:
    device_plugin_config: mps-4
    gpu_present: auto
    mig_owner: collection
    hostname: ["{{ ansible_hostname }}"]
  delegate_to: localhost

- name: Labels we own, and nothing else under our prefix
  gpuops.nvidia.node_labels:
    node_name: gpu-node-17
    labels:
      gpuops.example.com/sharing: mps
      gpuops.example.com/pool: training
    purge_prefix: gpuops.example.com

- name: Remove a label
  gpuops.nvidia.node_labels:
    node_name: gpu-node-17
    state: absent
    labels: [gpuops.example.com/pool]

- name: Under AWX with an "OpenShift or Kubernetes API Bearer Token" credential (K8S_AUTH_* set, nothing to pass)
  gpuops.nvidia.node_labels:
    hostname: ["{{ ansible_hostname }}"]
    internal_ips: "{{ ansible_all_ipv4_addresses }}"
    device_plugin_config: ts-4
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: Name of the Node that was matched.
  returned: success
  type: str
  sample: gpu-node-17
matched_by:
  description: How the node was found (C(name), C(hostname) or C(internal_ip)).
  returned: success
  type: str
  sample: hostname
labels:
  description: The node's labels after the change (in check mode, as the API's dry run answered).
  returned: success
  type: dict
  sample: {"nvidia.com/device-plugin.config": "mps-4", "kubernetes.io/hostname": "gpu-node-17"}
set:
  description: Labels added or changed, with their new values.
  returned: success
  type: dict
  sample: {"nvidia.com/device-plugin.config": "mps-4"}
nfd_gpu_labels:
  description:
    - The node-feature-discovery labels on the node (before any change) that mark it as an NVIDIA GPU node, in any of
      NFD's formats (C(pci-10de.present), C(pci-0302_10de.present), C(pci-0300_10de.present) under
      C(feature.node.kubernetes.io/), each C(true); C(cpu-model.vendor_id=NVIDIA)). Empty when NFD does not label it so.
  returned: success
  type: list
  elements: str
  sample: ["feature.node.kubernetes.io/pci-0302_10de.present"]
removed:
  description: Label keys removed.
  returned: success
  type: list
  elements: str
  sample: ["gpuops.example.com/old"]
diff:
  description: Node labels before and after (with diff mode).
  returned: changed and diff mode
  type: dict
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, run_module

DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MIG_MANAGER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
# The node affinity terms of NVIDIA's chart (0.15.0+) that node-feature-discovery satisfies (pci-10de and the Tegra CPU
# vendor, not NFD's class-prefixed pci-0302_10de / pci-0300_10de: _kube_names.NFD_CHART_GPU_LABELS).
NFD_GPU_LABELS = dict(_kube_names.NFD_CHART_GPU_LABELS)
FOREIGN_PREFIXES = ("kubernetes.io", "k8s.io", "nvidia.com")


def purge_prefix_errors(prefix):
    if prefix is None:
        return []
    errs = _kube_names.dns_subdomain_errors(prefix, "purge_prefix")
    for owned in FOREIGN_PREFIXES:
        if prefix == owned or prefix.endswith("." + owned):
            errs.append("purge_prefix %r is refused: labels under %s are written by Kubernetes, node-feature-discovery, "
                        "GPU feature discovery or the GPU Operator; purge only a prefix you own (e.g. "
                        "gpuops.example.com)" % (prefix, owned))
    return errs


def desired_changes(current, labels, state, purge_prefix=None):
    """Return (set, removed): labels to set (key -> value) and keys to remove, given current labels."""
    current = current or {}
    to_set, to_remove = {}, []
    if state == "present":
        for key, value in labels.items():
            if value is None:
                if key in current:
                    to_remove.append(key)
            elif current.get(key) != value:
                to_set[key] = value
        if purge_prefix:
            for key in sorted(current):
                if key.startswith(purge_prefix + "/") and key not in labels:
                    to_remove.append(key)
    else:
        for key in labels:
            if key in current:
                to_remove.append(key)
    return to_set, sorted(to_remove)


class NodeLabels(KubeRun):
    """validate -> read this host's Node -> plan (desired_changes) -> apply one patch with the read's resourceVersion
    (in check mode the API server's dry run), read back. A conflict (someone changed the Node in between) reads and
    plans again (the base's retry), three tries in all."""

    argument_spec = dict(
        labels=dict(type="raw", default={}),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        purge_prefix=dict(type="str"),
        device_plugin_config=dict(type="str"),
        gpu_present=dict(type="str", default="unmanaged", choices=["auto", "always", "unmanaged"]),
        mig_owner=dict(type="str", default="unmanaged", choices=["collection", "gpu_operator", "unmanaged"]),
        node_name=dict(type="str"),
        hostname=dict(type="list", elements="str"),
        internal_ips=dict(type="list", elements="str"),
        node_lookup=dict(type="str", default="auto", choices=["auto", "name", "hostname", "internal_ip"]),
    )
    argument_spec.update(_kube.AUTH_ARG_SPEC)
    apply_in_check_mode = True
    conflict_tries = 3      # someone else changed the node between our read and our patch: read and plan again
    name = None

    def validate(self):
        p, module = self.params, self.module
        raw = p["labels"]
        state = p["state"]
        errors = []
        if state == "present":
            if raw in (None, ""):
                raw = {}
            if not isinstance(raw, dict):
                raise Failure("labels must be a dict of key: value with state=present, got %s" % type(raw).__name__)
            labels = dict((k, _kube_names.normalize_label_value(v)) for k, v in raw.items())
            if p["device_plugin_config"] is not None:
                config_errors = _kube_names.label_value_errors(DEVICE_PLUGIN_CONFIG_LABEL, p["device_plugin_config"])
                if config_errors:
                    self.refuse_input(["device_plugin_config: " + "; ".join(e[:300] for e in config_errors)])
                labels[DEVICE_PLUGIN_CONFIG_LABEL] = p["device_plugin_config"]
            if p["gpu_present"] == "always":
                labels[GPU_PRESENT_LABEL] = "true"
            if p["mig_owner"] == "collection":
                labels[MIG_MANAGER_DEPLOY_LABEL] = "false"
            elif p["mig_owner"] == "gpu_operator":
                labels[MIG_MANAGER_DEPLOY_LABEL] = "true"
        else:
            if isinstance(raw, (dict, list)):
                keys = list(raw)
            else:
                keys = [raw] if raw else []
            if p["purge_prefix"] or p["device_plugin_config"] is not None or p["gpu_present"] != "unmanaged" \
                    or p["mig_owner"] != "unmanaged":
                errors.append("state=absent only removes the keys in labels; purge_prefix, device_plugin_config, "
                              "gpu_present and mig_owner apply to state=present")
            labels = dict((k, None) for k in keys)
        errors.extend("labels: " + error for error in _kube_names.validate_labels(labels))
        errors.extend(purge_prefix_errors(p["purge_prefix"]))
        if p["device_plugin_config"] == "":
            errors.append("device_plugin_config must name a config (a key of the device plugin's config.map), got ''")
        self.labels = labels
        return errors

    def read(self):
        if self.name is None:
            node, how = _kube_nodes.find_this_node(self.kube, self.params)
            self.name = node["metadata"]["name"]
            self.result.update(node=self.name, matched_by=how)
            return node
        return self.kube.get("read node %s" % self.name, _kube.node_path(self.name))

    def plan(self, current):
        p = self.params
        before = dict(current["metadata"].get("labels") or {})
        self.result["nfd_gpu_labels"] = _kube_names.nfd_gpu_labels(before)
        want = dict(self.labels)
        if p["state"] == "present" and p["gpu_present"] == "auto":
            if not any(before.get(k) == v for k, v in NFD_GPU_LABELS.items()):
                want[GPU_PRESENT_LABEL] = "true"
        to_set, to_remove = desired_changes(before, want, p["state"], p["purge_prefix"])
        if not to_set and not to_remove:
            self.result.update(labels=before, set={}, removed=[])
            return None
        return to_set, to_remove

    def apply(self, current, changes):
        kube, name, check = self.kube, self.name, self.module.check_mode
        to_set, to_remove = changes
        patch = {"metadata": {"labels": dict(to_set, **dict((k, None) for k in to_remove)),
                              "resourceVersion": current["metadata"].get("resourceVersion")}}
        answer = kube.patch("patch labels of node %s" % name, _kube.node_path(name), patch, dry_run=check)
        after = dict(answer["metadata"].get("labels") or {})
        if not check:
            after = dict(kube.get("read node %s" % name, _kube.node_path(name))["metadata"].get("labels") or {})
        self.result.update(labels=after, set=to_set, removed=to_remove)
        self.set_diff({"labels": dict(current["metadata"].get("labels") or {})}, {"labels": after},
                      header="node/%s" % name)


def main():
    run_module(NodeLabels)


if __name__ == "__main__":
    main()
