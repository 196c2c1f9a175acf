# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU Operator: what the collection writes into a ClusterPolicy, and the mig-parted configs it publishes
for the operator's MIG manager (PRIVATE). Pure: no I/O.

Facts used here, with their sources (NVIDIA/gpu-operator at v24.9.2, v25.3.4 and v25.10.0; NVIDIA/mig-parted at
commit bd7160f4 for the MIG manager):

- ClusterPolicy ``nvidia.com/v1``, cluster-scoped, named ``cluster-policy`` by NVIDIA's chart
  (NVIDIA/gpu-operator deployments/gpu-operator/templates/clusterpolicy.yaml). Its chart labels carry the operator
  release: ``app.kubernetes.io/version`` (templates/_helpers.tpl ``gpu-operator.labels``).
- ``spec.devicePlugin.config.{name,default}``: first in v1.11.0 (api/v1/clusterpolicy_types.go
  ``DevicePluginConfig``; absent at v1.10.1). ``spec.migManager.config.name``: first in v1.9.0
  (``MIGPartedConfigSpec``); ``.default`` (enum ``all-disabled`` or ``""``) from v23.3.0. A CRD without a field
  prunes it silently (apiextensions.k8s.io/v1 always prunes unknown fields), so a missing field shows as the field
  missing from the API server's answer.
- The operator mounts the device plugin ConfigMap (``spec.devicePlugin.config.name``) for the plugin, GFD and the MPS
  daemon, and the MIG manager's ConfigMap (``spec.migManager.config.name``) with ``CONFIG_FILE=
  /mig-parted-config/config.yaml``, i.e. its key ``config.yaml`` (controllers/object_controls.go, v24.9.2 to
  v26.7.0). Both live in the operator's namespace (``status.namespace`` of the ClusterPolicy).
- ``spec.mig.strategy``, when set, is injected as ``MIG_STRATEGY`` into the plugin and GFD
  (``applyMIGConfiguration``) and beats ``flags.migStrategy`` of every config (flag > env > file); unset, each node's
  config decides. MPS with ``mixed`` makes the plugin exit (``using --mig-strategy=mixed is not supported with MPS``).
- Node labels: ``nvidia.com/mig.config`` (the mig-parted config to apply), ``nvidia.com/mig.config.state``
  (``pending``, ``rebooting``, ``success``, ``failed``, written by the MIG manager), ``nvidia.com/gpu.deploy.<operand>``
  (``false`` keeps that operand off the node). The MIG manager applies a config when the label's value changes, and
  once at its start (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go: the informer's AddFunc sets the value), and
  never retries a failed apply by itself.
- The container toolkit (``spec.toolkit.enabled``, default true) edits containerd's config itself: the top-level file
  (``CONTAINERD_CONFIG`` or ``RUNTIME_CONFIG`` in ``spec.toolkit.env``, default ``/etc/containerd/config.toml``) and,
  from v25.10.0 (toolkit 1.18), the drop-in ``RUNTIME_DROP_IN_CONFIG`` (default
  ``/etc/containerd/conf.d/99-nvidia.toml``) (controllers/object_controls.go ``getRuntimeConfigFiles`` at v25.10.1).
- Device plugin releases shipped by the operator (deployments/gpu-operator/values.yaml): v24.3.0 is the first with
  device plugin v0.15.0, the first with MPS sharing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import (
    MigLayoutError,
    parse_migparted_config,
    resolve_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import current_devices, validate_gpu_layout
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._device_plugin import version_at_least

GROUP_PATH = "/apis/nvidia.com/v1/clusterpolicies"
DEFAULT_POLICY_NAME = "cluster-policy"
VERSION_LABEL = "app.kubernetes.io/version"
CHART_LABEL = "helm.sh/chart"

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_MANAGER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
TOOLKIT_DEPLOY_LABEL = "nvidia.com/gpu.deploy.container-toolkit"
MIG_STATES = ("pending", "rebooting", "success", "failed")

OPERATOR_MIG_CONFIGMAP = "default-mig-parted-config"
MIG_CONFIG_KEY = "config.yaml"
CONFIG_PREFIX = "gpuops-"
ALL_DISABLED = "all-disabled"
ALL_DISABLED_ENTRIES = [{"devices": "all", "mig-enabled": False}]

# Dotted ClusterPolicy fields this collection writes -> (first operator release that has it, where that is seen).
FIELD_SINCE = {
    "spec.devicePlugin.config.name": ("v1.11.0", "api/v1/clusterpolicy_types.go DevicePluginConfig"),
    "spec.devicePlugin.config.default": ("v1.11.0", "api/v1/clusterpolicy_types.go DevicePluginConfig"),
    "spec.migManager.config.name": ("v1.9.0", "api/v1/clusterpolicy_types.go MIGPartedConfigSpec"),
}
MPS_MIN_OPERATOR = "v24.3.0"          # first release shipping device plugin v0.15.0
DROP_IN_OPERATOR = "v25.10.0"         # the toolkit writes a containerd drop-in from here on
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CONTAINERD_OWNERS = ("auto", "collection", "gpu_operator")

_PRERELEASE = re.compile(r"^(rc|alpha|beta|pre)", re.I)


class OperatorError(ValueError):
    """A ClusterPolicy or declaration the collection cannot work with; ``errors`` lists every problem."""

    def __init__(self, errors):
        self.errors = list(errors) if isinstance(errors, (list, tuple)) else [errors]
        super(OperatorError, self).__init__("; ".join(self.errors))


def policy_path(name=None):
    return GROUP_PATH + ("/%s" % name if name else "")


def image_version(tag):
    """An image tag as a comparable version: ``v0.17.0-ubi9`` -> ``v0.17.0`` (a distribution suffix is not a
    pre-release); ``v0.18.0-rc.1`` stays a pre-release."""
    text = str(tag or "").strip()
    main, dummy, suffix = text.partition("-")
    if suffix and not _PRERELEASE.match(suffix):
        return main
    return text


def operator_version(policy):
    """The operator release as its chart labelled the ClusterPolicy, or None (e.g. installed by OLM)."""
    labels = (policy.get("metadata") or {}).get("labels") or {}
    version = labels.get(VERSION_LABEL)
    if not version:
        chart = labels.get(CHART_LABEL) or ""
        if chart.startswith("gpu-operator-"):
            version = chart[len("gpu-operator-"):]
    if not version or not re.match(r"^v?\d+\.\d+", version):
        return None
    return version if version.startswith("v") else "v" + version


def _dig(obj, dotted):
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def spec_view(policy):
    """The part of a ClusterPolicy this collection owns or reads, for diffs and results."""
    spec = (policy or {}).get("spec") or {}
    return {
        "devicePlugin.config": (spec.get("devicePlugin") or {}).get("config"),
        "migManager.config": (spec.get("migManager") or {}).get("config"),
        "mig.strategy": (spec.get("mig") or {}).get("strategy"),
        "toolkit.enabled": (spec.get("toolkit") or {}).get("enabled"),
        "devicePlugin.version": (spec.get("devicePlugin") or {}).get("version"),
    }


def owned_patch(device_plugin=None, mig_manager=None):
    """The merge patch on exactly the fields the collection owns: devicePlugin.config {name, default} and
    migManager.config.name. ``None`` leaves a part alone."""
    spec = {}
    if device_plugin is not None:
        spec["devicePlugin"] = {"config": {"name": device_plugin[0], "default": device_plugin[1]}}
    if mig_manager is not None:
        spec["migManager"] = {"config": {"name": mig_manager}}
    return {"spec": spec} if spec else {}


def patch_needed(policy, patch):
    """Dotted fields of ``patch`` whose value differs in ``policy``."""
    out = []

    def walk(node, prefix):
        for key, value in node.items():
            path = "%s.%s" % (prefix, key) if prefix else key
            if isinstance(value, dict):
                walk(value, path)
            elif _dig(policy, path) != value:
                out.append(path)
    walk(patch, "")
    return sorted(out)


def dropped_fields(answer, patch):
    """Fields the patch set that the API server's answer does not hold: the CRD does not know them (pruned)."""
    return patch_needed(answer, patch)


def too_old_errors(policy_name, version, dropped):
    found = "operator %s (label %s)" % (version, VERSION_LABEL) if version else \
        "an operator release this collection cannot tell (no %s label)" % VERSION_LABEL
    errs = []
    for field in dropped:
        since, where = FIELD_SINCE.get(field, ("?", "?"))
        errs.append("ClusterPolicy %s has no field %s: the API server dropped it from the patch (its CRD, from %s, "
                    "does not define it, and unknown fields are pruned). It needs GPU Operator >= %s (%s); "
                    "upgrade the operator and its CRD" % (policy_name, field, found, since, where))
    return errs


def select_policy(items, name=None):
    """The ClusterPolicy to work on from a list: the one named, else the only one. Raises OperatorError."""
    names = sorted(((i.get("metadata") or {}).get("name") for i in items or []))
    if name:
        for item in items or []:
            if item["metadata"]["name"] == name:
                return item
        raise OperatorError("ClusterPolicy %r not found; the cluster has %s. This collection never creates a "
                            "ClusterPolicy: install NVIDIA's GPU Operator (its chart creates cluster-policy) or name "
                            "the existing one with policy_name" % (name, ", ".join(names) or "none"))
    if not items:
        raise OperatorError("no ClusterPolicy found (clusterpolicies.nvidia.com): the GPU Operator is not installed "
                            "or has not created one. This collection never creates a ClusterPolicy; install NVIDIA's "
                            "GPU Operator, or use gpuops_device_plugin_provider=chart")
    if len(items) > 1:
        raise OperatorError("%d ClusterPolicies found (%s): give policy_name" % (len(items), ", ".join(names)))
    return items[0]


def namespace_of(policy, given=None):
    return given or ((policy or {}).get("status") or {}).get("namespace") or None


# ---- device plugin side ------------------------------------------------------------------------------------------
def mig_strategy_errors(policy, node_profiles):
    """spec.mig.strategy, when set, overrides every config's flags.migStrategy. ``node_profiles``: {node: profile}
    (normalized profiles). Returns errors for nodes whose declared strategy it would override harmfully."""
    strategy = ((policy.get("spec") or {}).get("mig") or {}).get("strategy")
    if not strategy:
        return []
    errs = []
    for node, prof in sorted(node_profiles.items()):
        declared = prof.get("mig_strategy") or "none"
        if prof.get("sharing") == "mps" and strategy == "mixed":
            errs.append("node %s uses MPS (profile %s) but the ClusterPolicy sets spec.mig.strategy=mixed, which the "
                        "operator passes to every device plugin as MIG_STRATEGY, and the plugin refuses MPS with it "
                        "(\"using --mig-strategy=mixed is not supported with MPS\")" % (node, prof["name"]))
        elif declared in ("single", "mixed") and declared != strategy:
            errs.append("node %s declares MIG strategy %s (profile %s) but the ClusterPolicy sets "
                        "spec.mig.strategy=%s, which the operator passes to every device plugin as MIG_STRATEGY and "
                        "which beats the config's flags.migStrategy" % (node, declared, prof["name"], strategy))
    if errs:
        errs.append("set gpu_node_mig_strategy to %s on those nodes, or remove spec.mig.strategy from the ClusterPolicy "
                    "(helm: --set mig.strategy=) so each node's config decides; this collection does not change "
                    "spec.mig" % strategy)
    return errs


# ---- containerd: who writes the runtime config -------------------------------------------------------------------
def toolkit_files(policy, version=None):
    """(enabled, files): whether the operator's container toolkit is on, and the host files it edits."""
    toolkit = (policy.get("spec") or {}).get("toolkit") or {}
    enabled = toolkit.get("enabled", True) is not False
    env = dict((e.get("name"), e.get("value")) for e in toolkit.get("env") or [] if isinstance(e, dict))
    files = [env.get("CONTAINERD_CONFIG") or env.get("RUNTIME_CONFIG") or CONTAINERD_CONFIG]
    if version is None or version_at_least(version, DROP_IN_OPERATOR):
        files.append(env.get("RUNTIME_DROP_IN_CONFIG") or CONTAINERD_DROP_IN)
    return enabled, files


def containerd_owners(policy, version, nodes, node_labels):
    """Who writes containerd's nvidia runtime on each node. ``nodes``: [{name, owner, files}] with owner auto |
    collection | gpu_operator and the files the collection's containerd_runtime would write there;
    ``node_labels``: {node: labels} of the Nodes found. Returns ({node: 'collection'|'gpu_operator'}, errors)."""
    enabled, files = toolkit_files(policy, version)
    out, errs = {}, []
    for node in nodes or []:
        name, owner = node["name"], node.get("owner") or "auto"
        labels = node_labels.get(name) or {}
        on_node = enabled and str(labels.get(TOOLKIT_DEPLOY_LABEL, "true")).lower() != "false"
        why = ("spec.toolkit.enabled is false" if not enabled else
               "the node is labelled %s=false" % TOOLKIT_DEPLOY_LABEL)
        if owner == "auto":
            out[name] = "gpu_operator" if on_node else "collection"
        elif owner == "collection":
            same = sorted(set(node.get("files") or []) & set(files))
            if on_node and same:
                errs.append("node %s: gpu_node_containerd_owner=collection, but the GPU Operator's container toolkit "
                            "runs on this node and writes %s too (ClusterPolicy spec.toolkit; files %s). Two writers "
                            "of one containerd config undo each other: set gpu_node_containerd_owner=auto or "
                            "gpu_operator, or label the node %s=false (or set spec.toolkit.enabled=false) to keep the "
                            "toolkit off it" % (name, ", ".join(same), ", ".join(files), TOOLKIT_DEPLOY_LABEL))
            out[name] = "collection"
        elif owner == "gpu_operator":
            if not on_node:
                errs.append("node %s: gpu_node_containerd_owner=gpu_operator, but the operator's container toolkit does "
                            "not run there (%s): nothing would define containerd's nvidia runtime; use auto or "
                            "collection" % (name, why))
            out[name] = "gpu_operator"
        else:
            errs.append("node %s: containerd owner %r is not one of %s" % (name, owner, ", ".join(CONTAINERD_OWNERS)))
    return out, errs


# ---- mig-parted configs for the MIG manager ----------------------------------------------------------------------
def _counts(devices):
    return dict(sorted((devices or {}).items()))


def render_entries(gpus, resolved):
    """mig-parted v1 entries that give each GPU of this node its resolved layout, keyed by the GPU's PCI id
    (``device-filter``) so nodes of other models can share the config name: ``devices: all`` when every MIG GPU of
    a model gets the same layout, else explicit indices. Layouts are validated against each GPU first."""
    by_index = dict((g["index"], g) for g in gpus)
    specs = {}
    for index, spec in resolved["gpus"].items():
        gpu = by_index[index]
        devices = validate_gpu_layout(gpu, spec) if spec.get("mig_enabled") else {}
        specs[index] = (bool(spec.get("mig_enabled")), _counts(devices))
    models = {}
    for gpu in gpus:
        if gpu.get("mig_supported"):
            models.setdefault(str(gpu.get("pci_device_id")).upper().replace("0X", "0x"), []).append(gpu["index"])
    entries = []
    for pci, indices in sorted(models.items()):
        chosen = [i for i in indices if i in specs]
        groups = {}
        for i in chosen:
            groups.setdefault(json.dumps(specs[i], sort_keys=True), []).append(i)
        whole = len(groups) == 1 and len(chosen) == len(indices)
        for key, members in sorted(groups.items(), key=lambda kv: kv[1]):
            enabled, devices = json.loads(key)
            entry = {"device-filter": pci, "devices": "all" if whole else sorted(members), "mig-enabled": enabled}
            if enabled:
                entry["mig-devices"] = devices
            entries.append(entry)
    return entries


def config_name(hint, entries):
    """The config's name: ``gpuops-<hint>-<8 hex of its content>``, a valid label value of at most 63
    characters. The content is in the name so that a changed layout is a changed label value, which is what makes
    the MIG manager apply it."""
    if hint == ALL_DISABLED and entries == ALL_DISABLED_ENTRIES:
        return ALL_DISABLED
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest()[:8]
    hint = re.sub(r"[^A-Za-z0-9._-]", "-", str(hint or "layout"))[:63 - len(CONFIG_PREFIX) - 9].strip("-._")
    return "%s%s-%s" % (CONFIG_PREFIX, hint or "layout", digest)


def node_config(gpus, layout=None, config_name_hint=None):
    """(name, entries, resolved) of this node's declared layout: an inline ``layout`` or a named layout."""
    if layout:
        resolved = resolve_layout(gpus, layout=layout)
        hint = "layout"
    else:
        resolved = resolve_layout(gpus, named=config_name_hint)
        hint = config_name_hint
    if hint == ALL_DISABLED or (resolved["gpus"] and not any(s["mig_enabled"] for s in resolved["gpus"].values())
                                and all(g["index"] in resolved["gpus"] for g in gpus if g.get("mig_supported"))):
        entries = list(ALL_DISABLED_ENTRIES)
        return ALL_DISABLED, entries, resolved
    entries = render_entries(gpus, resolved)
    if not entries:
        raise MigLayoutError("the layout selects no MIG-capable GPU on this node")
    return config_name(hint, entries), entries, resolved


def gpus_differ(gpus, resolved):
    """Indices of the GPUs whose MIG mode or MIG devices differ from the resolved layout (mig-parted's notion of
    equality: the mode and the multiset of MIG devices per GPU)."""
    by_index = dict((g["index"], g) for g in gpus)
    out = []
    for index, spec in sorted(resolved["gpus"].items()):
        gpu = by_index[index]
        want = "Enabled" if spec.get("mig_enabled") else "Disabled"
        if gpu.get("mig_mode_current") != want or (gpu.get("mig_mode_pending") or want) != want:
            out.append(index)
            continue
        if spec.get("mig_enabled"):
            desired = validate_gpu_layout(gpu, spec)
            if current_devices(gpu) != desired:
                out.append(index)
    return out


def parse_config_text(text, yaml_module):
    """The mig-parted document of a ConfigMap's ``config.yaml``; empty or absent -> a new v1 document."""
    if not text or not str(text).strip():
        return {"version": "v1", "mig-configs": {}}
    try:
        doc = yaml_module.safe_load(text)
    except yaml_module.YAMLError as exc:
        raise OperatorError("the MIG manager's config.yaml is not valid YAML: %s" % exc)
    if not isinstance(doc, dict) or doc.get("version") != "v1" or not isinstance(doc.get("mig-configs"), dict):
        raise OperatorError("the MIG manager's config.yaml is not a mig-parted v1 config (version: v1, "
                            "mig-configs: {...})")
    return doc


def with_config(doc, name, entries):
    """A copy of the mig-parted document with config ``name`` set to ``entries`` (all-disabled always present)."""
    out = {"version": "v1", "mig-configs": dict(doc.get("mig-configs") or {})}
    out["mig-configs"].setdefault(ALL_DISABLED, list(ALL_DISABLED_ENTRIES))
    if name:
        out["mig-configs"][name] = entries
    parse_migparted_config(out, name or ALL_DISABLED)
    return out


def dump_config(doc, yaml_module):
    return yaml_module.safe_dump(doc, default_flow_style=False, sort_keys=True)


def unused_configs(doc, node_labels):
    """Names this collection published (``gpuops-*``) that no node selects."""
    used = set(labels.get(MIG_CONFIG_LABEL) for labels in node_labels.values())
    return sorted(n for n in (doc.get("mig-configs") or {}) if n.startswith(CONFIG_PREFIX) and n not in used)


def state_problem(node, state, config, namespace, waited=None):
    """What to tell the user when the MIG manager did not report success for ``config`` on ``node``."""
    logs = ("kubectl -n %s logs -l app=nvidia-mig-manager --field-selector spec.nodeName=%s"
            % (namespace or "<operator namespace>", node))
    if state == "failed":
        return ("node %s: the GPU Operator's MIG manager reported %s=failed for %s=%s. It does not retry by itself: "
                "read its log (%s), fix the cause (a process still using a GPU is the usual one), then delete that "
                "MIG manager pod - a new one applies the label's config at its start - or change the label; re-run "
                "afterwards" % (node, MIG_STATE_LABEL, MIG_CONFIG_LABEL, config, logs))
    if state in ("pending", "rebooting"):
        return ("node %s: %s is still %s for %s=%s after %s s: the MIG manager is still applying it%s. Look at its "
                "log (%s), then re-run, or wait longer (gpu_node_operator_mig_timeout)" % (
                    node, MIG_STATE_LABEL, state, MIG_CONFIG_LABEL, config, waited,
                    " (the node reboots, and the state must reach success after the reboot)"
                    if state == "rebooting" else "", logs))
    return ("node %s: no %s was written for %s=%s within %s s: is the MIG manager running on the node (label %s "
            "not false, spec.migManager.enabled true)? Look at kubectl -n %s get pods -l app=nvidia-mig-manager -o "
            "wide" % (node, MIG_STATE_LABEL, MIG_CONFIG_LABEL, config, waited, MIG_MANAGER_DEPLOY_LABEL,
                      namespace or "<operator namespace>"))
