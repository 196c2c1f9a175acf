# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helm values for NVIDIA's nvidia-device-plugin chart, one named config per sharing profile (PRIVATE).

Pure: no I/O. Every rule below is the device plugin's own (NVIDIA/k8s-device-plugin api/config/v1, cmd/
nvidia-device-plugin/main.go, cmd/mps-control-daemon/mps/device.go, chart templates), checked before helm runs so a
bad config never reaches a node, where the plugin would exit and crash-loop. Each error quotes the rule it enforces.
Sources: NVIDIA/k8s-device-plugin at v0.17.0, v0.20.0 and commit 1b826acc
(api/config/v1/{replicas,sharing,resources,consts}.go, cmd/config-manager/main.go,
deployments/helm/nvidia-device-plugin/values.yaml and templates/); docs/sharing.md says what the user sees of them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import (
    LABEL_VALUE_RULE, NFD_CHART_GPU_LABELS, is_dns_subdomain, is_label_value)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._sharing import ShareError, replica_shares

CONFIG_LABEL = "nvidia.com/device-plugin.config"
SHARING_CHOICES = ("none", "time-slicing", "mps")
MIG_STRATEGIES = ("none", "single", "mixed")
MPS_MIN_CHART = "0.15.0"
MPS_FAIL_FLAG_CHART = "0.20.0"
ALLOCATION_POLICY_CHART = "0.20.0"
MPS_MAX_REPLICAS_VOLTA_PLUS = 48   # compute capability >= 7.5 (the code calls it "Volta")
MPS_MAX_REPLICAS_OLDER = 16

# Chart values rendered as environment variables on every node's plugin. A flag or environment variable beats the
# config file (api/config/v1/flags.go: flag > env > file), so each would override the per-node configs.
GLOBAL_OVERRIDES = {
    "migStrategy": ("MIG_STRATEGY", "flags.migStrategy (use the profile's mig_strategy)"),
    "failOnInitError": ("FAIL_ON_INIT_ERROR", "flags.failOnInitError"),
    "deviceListStrategy": ("DEVICE_LIST_STRATEGY", "flags.plugin.deviceListStrategy"),
    "deviceIDStrategy": ("DEVICE_ID_STRATEGY", "flags.plugin.deviceIDStrategy"),
    "nvidiaDriverRoot": ("NVIDIA_DRIVER_ROOT", "flags.nvidiaDriverRoot"),
    "gdsEnabled": ("GDS_ENABLED", "flags.gdsEnabled"),
    "mofedEnabled": ("MOFED_ENABLED", "flags.mofedEnabled"),
    "gdrcopyEnabled": ("GDRCOPY_ENABLED", "flags.gdrcopyEnabled"),
    "deviceDiscoveryStrategy": ("DEVICE_DISCOVERY_STRATEGY", "flags.deviceDiscoveryStrategy"),
    "compatWithCPUManager": ("PASS_DEVICE_SPECS", "flags.plugin.passDeviceSpecs"),
}

# Keys a profile's ``flags`` may carry (api/config/v1/flags.go); the plugin silently drops unknown keys, so a typo
# would otherwise be lost without a word.
FLAG_KEYS = {
    "failOnInitError": bool, "nvidiaDriverRoot": str, "nvidiaDevRoot": str, "gdsEnabled": bool,
    "mofedEnabled": bool, "gdrcopyEnabled": bool, "useNodeFeatureAPI": bool, "deviceDiscoveryStrategy": str,
}
PLUGIN_FLAG_KEYS = {
    "passDeviceSpecs": bool, "deviceListStrategy": (str, list), "deviceIDStrategy": str,
    "cdiAnnotationPrefix": str, "nvidiaCTKPath": str, "containerDriverRoot": str,
    "sharedDevicesAllocationPolicy": str,
}

PROFILE_KEYS = ("name", "sharing", "replicas", "rename_by_default", "fail_requests_greater_than_one",
                "mig_strategy", "resources", "flags")

# The argument spec of one profile, shared by every module that takes profiles (device_plugin, gpu_operator).
PROFILE_ARG_SPEC = dict(
    name=dict(type="str", required=True),
    sharing=dict(type="str", default="none", choices=["none", "time-slicing", "mps"]),
    replicas=dict(type="int"),
    rename_by_default=dict(type="bool", default=False),
    fail_requests_greater_than_one=dict(type="bool"),
    mig_strategy=dict(type="str", default="none", choices=["none", "single", "mixed"]),
    resources=dict(type="list", elements="dict"),
    flags=dict(type="dict"),
)

# Under mig_strategy mixed the plugin registers one resource per GPU-instance profile whose compute instance spans
# it (C == G), named "mig-" + the profile with '+' written as '.': nvidia.com/mig-1g.10gb.me,
# nvidia.com/mig-1g.24gb.gfx, nvidia.com/mig-1g.24gb.me.all, nvidia.com/mig-1g.24gb-me
# (NVIDIA/k8s-device-plugin@1b826acc internal/rm/rm.go AddDefaultResourcesToConfig). Compute-instance
# sub-profiles (1c.3g.20gb) get no resource: a MIG device of one matches no pattern and the plugin fails to build
# its device map ("MIG profile ... does not match any resource patterns", internal/rm/device_map.go).
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb(?:[.-][a-z][a-z0-9.]*[a-z0-9]|[.-][a-z])?$")
_SUB_PROFILE = re.compile(r"^\d+c\.")


def mig_resource_name(profile):
    """The extended resource the device plugin advertises a MIG device of ``profile`` as (mixed strategy), or None
    for a compute-instance sub-profile, which it does not advertise."""
    if _SUB_PROFILE.match(profile or ""):
        return None
    return "nvidia.com/mig-" + profile.replace("+", ".")


_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


class DevicePluginConfigError(ValueError):
    """Input the device plugin would refuse or silently ignore; ``errors`` lists every problem found."""

    def __init__(self, errors):
        self.errors = list(errors)
        super(DevicePluginConfigError, self).__init__("; ".join(self.errors))


def version_tuple(version):
    """'0.15.0' -> (0, 15, 0, 1); '0.15.0-rc.2' -> (0, 15, 0, 0, 2): a pre-release sorts before its release."""
    text = str(version or "").lstrip("v")
    main, dummy, pre = text.partition("-")
    nums = []
    for part in main.split("."):
        m = re.match(r"\d+", part)
        nums.append(int(m.group(0)) if m else 0)
    while len(nums) < 3:
        nums.append(0)
    if pre:
        pre_num = re.findall(r"\d+", pre)
        return tuple(nums[:3]) + (0, int(pre_num[-1]) if pre_num else 0)
    return tuple(nums[:3]) + (1,)


def version_at_least(version, minimum):
    return version_tuple(version) >= version_tuple(minimum)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def full_resource_name(name):
    """The plugin adds ``nvidia.com/`` when a name has no prefix (NewResourceName)."""
    return name if "/" in name else "nvidia.com/" + name


def resource_name_errors(name, where):
    if not isinstance(name, str) or not name:
        return ["%s: no resource name specified (the device plugin's rule: every resource needs a name)" % where]
    full = full_resource_name(name)
    errs = []
    if len(full) > 63:
        errs.append("%s: resource %r: fully-qualified resource name must be 63 characters or less (device plugin "
                    "rule)" % (where, full))
    prefix, dummy, rest = full.partition("/")
    if prefix != "nvidia.com" or not is_dns_subdomain(rest or ""):
        errs.append("%s: resource %r: incorrect format for resource name: the device plugin accepts nvidia.com/<name> "
                    "where <name> is a DNS subdomain (lower case alphanumerics, '-' and '.')" % (where, full))
    return errs


def _gpus_of(facts):
    if facts is None:
        return None
    if isinstance(facts, dict):
        return list(facts.get("gpus") or [])
    return list(facts)


def _cc(gpu):
    try:
        major, minor = str(gpu.get("compute_capability") or "").split(".")[:2]
        return (int(major), int(minor))
    except ValueError:
        return None


def mps_replica_limit(gpus):
    """48 clients per GPU at compute capability >= 7.5, else 16; None when no GPU reports its capability."""
    ccs = [c for c in (_cc(g) for g in gpus or []) if c]
    if not ccs:
        return None
    return MPS_MAX_REPLICAS_VOLTA_PLUS if min(ccs) >= (7, 5) else MPS_MAX_REPLICAS_OLDER


def _mig_enabled(gpus):
    return [g for g in gpus or [] if g.get("mig_mode_current") == "Enabled"]


def normalize_profile(raw):
    """Fill defaults; returns a new dict (does not validate)."""
    p = dict(raw or {})
    p.setdefault("sharing", "none")
    p.setdefault("mig_strategy", "none")
    p.setdefault("rename_by_default", False)
    p.setdefault("fail_requests_greater_than_one", None)
    p.setdefault("resources", None)
    p.setdefault("flags", None)
    p.setdefault("replicas", None)
    return p


def profile_errors(p, chart_version):
    """Every problem with one profile (already normalized)."""
    name = p.get("name")
    where = "profile %r" % (name,)
    errs = []
    unknown = sorted(set(p) - set(PROFILE_KEYS))
    if unknown:
        errs.append("%s: unknown key(s) %s; valid keys are %s (the device plugin silently drops keys it does not "
                    "know, so a misspelt key would be lost)" % (where, ", ".join(unknown), ", ".join(PROFILE_KEYS)))
    if not isinstance(name, str) or not name:
        errs.append("every profile needs a name (it becomes a config.map key and the value of the node label %s)"
                    % CONFIG_LABEL)
    elif not is_label_value(name) or not _CONFIGMAP_KEY.match(name):
        errs.append("%s: the name must be a valid label value and ConfigMap key (%s), because nodes select it with "
                    "the label %s=<name>" % (where, LABEL_VALUE_RULE, CONFIG_LABEL))
    sharing = p["sharing"]
    if sharing not in SHARING_CHOICES:
        errs.append("%s: sharing must be one of %s, got %r" % (where, ", ".join(SHARING_CHOICES), sharing))
        return errs
    if p["mig_strategy"] not in MIG_STRATEGIES:
        errs.append("%s: mig_strategy must be one of %s, got %r (device plugin: unknown MIG strategy)"
                    % (where, ", ".join(MIG_STRATEGIES), p["mig_strategy"]))
    # flags passthrough
    flags = p.get("flags") or {}
    if not isinstance(flags, dict):
        errs.append("%s: flags must be a dict" % where)
        flags = {}
    for key, value in flags.items():
        if key == "migStrategy":
            errs.append("%s: set the MIG strategy with mig_strategy, not flags.migStrategy" % where)
        elif key == "plugin":
            if not isinstance(value, dict):
                errs.append("%s: flags.plugin must be a dict" % where)
                continue
            for pkey, pval in value.items():
                if pkey not in PLUGIN_FLAG_KEYS:
                    errs.append("%s: unknown flag plugin.%s; known: %s (the plugin drops unknown keys silently)"
                                % (where, pkey, ", ".join(sorted(PLUGIN_FLAG_KEYS))))
                elif not isinstance(pval, PLUGIN_FLAG_KEYS[pkey]):
                    errs.append("%s: flag plugin.%s has the wrong type" % (where, pkey))
                if pkey == "sharedDevicesAllocationPolicy":
                    if pval not in ("distributed", "packed"):
                        errs.append("%s: plugin.sharedDevicesAllocationPolicy must be distributed or packed" % where)
                    if chart_version and not version_at_least(chart_version, ALLOCATION_POLICY_CHART):
                        errs.append("%s: plugin.sharedDevicesAllocationPolicy needs chart >= %s (added in v0.20.0), "
                                    "chart is %s" % (where, ALLOCATION_POLICY_CHART, chart_version))
        elif key not in FLAG_KEYS:
            errs.append("%s: unknown flag %s; known: %s, plugin.* (the plugin drops unknown keys silently)"
                        % (where, key, ", ".join(sorted(FLAG_KEYS))))
        elif not isinstance(value, FLAG_KEYS[key]):
            errs.append("%s: flag %s must be %s" % (where, key, FLAG_KEYS[key].__name__))
    if sharing == "none":
        for key in ("replicas", "resources"):
            if p.get(key) not in (None, []):
                errs.append("%s: %s only applies to sharing time-slicing or mps" % (where, key))
        return errs
    # sharing: time-slicing or mps
    resources = p.get("resources")
    if resources in (None, []):
        if p.get("replicas") is None:
            errs.append("%s: no replicas specified (device plugin rule: every shared resource needs replicas)" % where)
            resources = []
        else:
            resources = [{"name": "nvidia.com/gpu", "replicas": p["replicas"]}]
    elif p.get("replicas") is not None:
        errs.append("%s: give either replicas (for nvidia.com/gpu) or resources, not both" % where)
    if not isinstance(resources, list):
        errs.append("%s: resources must be a list of {name, replicas}" % where)
        resources = []
    seen = set()
    for i, res in enumerate(resources):
        rwhere = "%s resources[%d]" % (where, i)
        if not isinstance(res, dict):
            errs.append("%s: must be a dict with name and replicas" % rwhere)
            continue
        extra = sorted(set(res) - {"name", "replicas", "devices", "rename"})
        if extra:
            errs.append("%s: unknown key(s) %s; valid: name, replicas" % (rwhere, ", ".join(extra)))
        errs.extend(resource_name_errors(res.get("name"), rwhere))
        full = full_resource_name(res.get("name") or "")
        if full in seen:
            errs.append("%s: resource %s listed twice" % (rwhere, full))
        seen.add(full)
        if full != "nvidia.com/gpu":
            if not _MIG_RESOURCE.match(full):
                errs.append("%s: resource %s cannot be shared: the device plugin advertises nvidia.com/gpu, and "
                            "nvidia.com/mig-<profile> under mig_strategy mixed" % (rwhere, full))
            elif p["mig_strategy"] != "mixed":
                errs.append("%s: %s exists only with mig_strategy mixed (single advertises MIG devices as "
                            "nvidia.com/gpu)" % (rwhere, full))
            elif sharing == "mps":
                errs.append("%s: sharing using MPS is not supported for MIG devices (device plugin rule)" % rwhere)
        replicas = res.get("replicas")
        if replicas is None:
            errs.append("%s: no replicas specified (device plugin rule)" % rwhere)
        elif not _is_int(replicas):
            errs.append("%s: replicas must be a whole number, got %r" % (rwhere, replicas))
        elif replicas < 2:
            errs.append("%s: number of replicas must be >= 2 (device plugin rule, also for MPS), got %d"
                        % (rwhere, replicas))
        elif sharing == "mps" and replicas > MPS_MAX_REPLICAS_VOLTA_PLUS:
            errs.append("%s: invalid MPS configuration: invalid device maximum allowed replicas exceeded: %d > %d "
                        "(MPS serves at most 48 clients per GPU at compute capability >= 7.5, 16 below)"
                        % (rwhere, replicas, MPS_MAX_REPLICAS_VOLTA_PLUS))
        if "devices" in res and res["devices"] != "all":
            errs.append("%s: devices %r is refused: the device plugin resets 'devices' to 'all' (\"Customizing the "
                        "'devices' field in sharing.%s.resources is not yet supported\"), so sharing always covers "
                        "every GPU of the node (\"You cannot configure sharing on a per-GPU basis\"). Use one profile "
                        "per kind of node instead."
                        % (rwhere, res["devices"], "mps" if sharing == "mps" else "timeSlicing"))
        if res.get("rename") is not None:
            errs.append("%s: rename %r is refused: the device plugin drops a custom rename with a warning and keeps "
                        "the original name; set rename_by_default: true to advertise <name>.shared (e.g. "
                        "nvidia.com/gpu.shared) instead" % (rwhere, res["rename"]))
    if sharing == "mps":
        if p["mig_strategy"] == "mixed":
            errs.append("%s: using --mig-strategy=mixed is not supported with MPS (device plugin rule); use "
                        "mig_strategy none, or time-slicing for MIG devices" % where)
        if chart_version and not version_at_least(chart_version, MPS_MIN_CHART):
            errs.append("%s: MPS needs chart >= %s (sharing.mps was added in v0.15.0), chart is %s"
                        % (where, MPS_MIN_CHART, chart_version))
        if p.get("fail_requests_greater_than_one") is False and chart_version \
                and not version_at_least(chart_version, MPS_FAIL_FLAG_CHART):
            errs.append("%s: fail_requests_greater_than_one: false is ignored under MPS before chart %s (v0.15.0 to "
                        "v0.19.x force it to true; chart is %s); remove it or use chart >= %s"
                        % (where, MPS_FAIL_FLAG_CHART, chart_version, MPS_FAIL_FLAG_CHART))
    return errs


def profile_resources(p):
    if p["sharing"] == "none":
        return []
    if p.get("resources"):
        return [{"name": full_resource_name(r["name"]), "replicas": r["replicas"]} for r in p["resources"]]
    return [{"name": "nvidia.com/gpu", "replicas": p["replicas"]}]


def profile_config(p):
    """The device plugin config (api/config/v1) for one normalized, valid profile, as a dict."""
    flags = {"migStrategy": p["mig_strategy"]}
    for key, value in sorted((p.get("flags") or {}).items()):
        flags[key] = dict(sorted(value.items())) if isinstance(value, dict) else value
    config = {"version": "v1", "flags": flags}
    if p["sharing"] != "none":
        block = {"renameByDefault": bool(p["rename_by_default"])}
        if p.get("fail_requests_greater_than_one") is not None:
            block["failRequestsGreaterThanOne"] = bool(p["fail_requests_greater_than_one"])
        block["resources"] = profile_resources(p)
        config["sharing"] = {"mps" if p["sharing"] == "mps" else "timeSlicing": block}
    return config


def dump_config(config, yaml_module):
    return yaml_module.safe_dump(config, default_flow_style=False, sort_keys=False).rstrip("\n")


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(prefix + [key], sub, out)
    else:
        out.append(".".join(prefix))


# The required node-affinity terms of NVIDIA's chart (its values.yaml `affinity`, the same in v0.17.0 and v0.20.0,
# NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/values.yaml): a node with an NVIDIA PCI device as
# node-feature-discovery labels it, a Tegra node, or a node labelled nvidia.com/gpu.present=true. Helm replaces a
# list value whole, so the terms are given again with the pause expression added to each.
# The NFD terms are _kube_names.NFD_CHART_GPU_LABELS (what gpuops.nvidia.node_labels' gpu_present=auto reads): NVIDIA's
# chart does not name NFD's class-prefixed pci-0302_10de / pci-0300_10de, so a node NFD labels only so is admitted by
# nvidia.com/gpu.present=true, which node_labels sets there.
CHART_AFFINITY_TERMS = tuple(
    {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    for key, value in NFD_CHART_GPU_LABELS + (("nvidia.com/gpu.present", "true"),))


def pausable_affinity(affinity=None):
    """The chart's ``affinity`` value made pausable (``_gpu_pods.pausable_affinity``); without the user's own terms,
    the chart's default terms (CHART_AFFINITY_TERMS) are used."""
    return _gpu_pods.pausable_affinity(affinity, CHART_AFFINITY_TERMS)


def extra_values_errors(values):
    """Chart values the user passes beside the generated ones: refuse those that defeat per-node configs."""
    errs = []
    for key, (env, flag) in sorted(GLOBAL_OVERRIDES.items()):
        if key in (values or {}) and values[key] is not None:
            errs.append("helm value %s is refused: the chart renders it as the environment variable %s on every "
                        "node, and a flag or environment variable beats the config file (device plugin precedence: "
                        "flag > environment > config file), so it would override %s in every per-node config; set "
                        "it per profile instead" % (key, env, flag))
    errs.extend(_gpu_pods.affinity_errors((values or {}).get("affinity"), "helm value affinity"))
    config = (values or {}).get("config")
    if isinstance(config, dict):
        if config.get("name"):
            errs.append("helm value config.name is refused: this module builds config.map, and the chart refuses "
                        "both (\"Only one of 'config.name' or 'config.map' should ever be set\")")
        for key in ("map", "default"):
            if key in config:
                errs.append("helm value config.%s is refused: the module builds it from profiles and default_profile"
                            % key)
    return errs


def merge_values(base, extra):
    out = dict(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def expected_allocatable(profile, gpus):
    """What the node should advertise under ``profile`` given its GPU facts: {resource: count}."""
    gpus = _gpus_of(gpus) or []
    p = profile
    replicas = dict((r["name"], r["replicas"]) for r in profile_resources(p))
    suffix = ".shared" if p["sharing"] != "none" and p["rename_by_default"] else ""
    out = {}
    mig_gpus = _mig_enabled(gpus)
    if p["mig_strategy"] == "mixed":
        for g in gpus:
            if g.get("mig_mode_current") == "Enabled":
                for dev in g.get("mig_devices") or []:
                    name = mig_resource_name(dev.get("profile"))
                    if name:
                        out[name] = out.get(name, 0) + 1
            else:
                out["nvidia.com/gpu"] = out.get("nvidia.com/gpu", 0) + 1
    elif p["mig_strategy"] == "single" and mig_gpus:
        out["nvidia.com/gpu"] = sum(len(g.get("mig_devices") or []) for g in gpus)
    else:
        out["nvidia.com/gpu"] = len(gpus)
    final = {}
    for name, count in out.items():
        if name in replicas:
            final[name + suffix] = count * replicas[name]
        else:
            final[name] = count
    return final


def build(profiles, default_profile, chart_version=None, nodes=None, extra_values=None, gfd=None,
          yaml_module=None):
    """Validate everything and return the chart values plus what each node gets.

    profiles: list of profile dicts (see PROFILE_KEYS); default_profile: the name used for unlabelled nodes
    (config.default); nodes: optional list of {name, profile, gpus} where gpus are GPU facts (the ``gpus`` list or
    the whole gpu_info facts); extra_values: other chart values (refused where they defeat per-node configs);
    gfd: None = enable GPU feature discovery when any profile uses MPS; True/False = as given (False refused with
    MPS: the MPS daemon only runs where GFD labelled nvidia.com/mps.capable=true).

    Returns dict(values=..., configs={name: config dict}, node_labels={node: profile}, shares={node: ...},
    expected={node: {resource: count}}, warnings=[...]). Raises DevicePluginConfigError listing every problem.
    """
    if yaml_module is None:
        import yaml as yaml_module
    errors, warnings = [], []
    if not profiles:
        errors.append("no profiles given: declare at least one (e.g. {name: default, sharing: none})")
    norm = []
    names = []
    for raw in profiles or []:
        if not isinstance(raw, dict):
            errors.append("every profile must be a dict, got %r" % (raw,))
            continue
        p = normalize_profile(raw)
        errors.extend(profile_errors(p, chart_version))
        if p.get("name") in names:
            errors.append("profile %r is declared twice" % p["name"])
        names.append(p.get("name"))
        norm.append(p)
    by_name = dict((p["name"], p) for p in norm if isinstance(p.get("name"), str))
    if default_profile is None:
        if len(norm) > 1 and "default" not in by_name:
            errors.append("default_profile is required with more than one profile: the chart needs a config for "
                          "nodes without the %s label (\"A default config must be provided when more than one "
                          "configuration is set in 'config.map'\")" % CONFIG_LABEL)
        default_profile = "default" if "default" in by_name else (norm[0]["name"] if len(norm) == 1 else None)
    elif default_profile not in by_name:
        errors.append("default_profile %r is not a declared profile (declared: %s); config-manager would fail with "
                      "\"specified config %s does not exist\"" % (default_profile, ", ".join(sorted(by_name)),
                                                                  default_profile))
    errors.extend(extra_values_errors(extra_values))
    uses_mps = any(p["sharing"] == "mps" for p in norm)
    extra_gfd = ((extra_values or {}).get("gfd") or {}).get("enabled") if isinstance(
        (extra_values or {}).get("gfd"), dict) else None
    if uses_mps and (gfd is False or extra_gfd is False):
        errors.append("gfd: false is refused with an MPS profile: the chart's MPS control daemon runs only on nodes "
                      "labelled nvidia.com/mps.capable=true, which GPU feature discovery writes; without it MPS "
                      "never starts")
    node_labels, shares, expected = {}, {}, {}
    for i, node in enumerate(nodes or []):
        nname = (node or {}).get("name")
        pname = (node or {}).get("profile") or default_profile
        if not nname:
            errors.append("nodes[%d]: name is required" % i)
            continue
        if pname not in by_name:
            errors.append("node %s: profile %r is not declared; config-manager would fail with \"specified config %s "
                          "does not exist\"" % (nname, pname, pname))
            continue
        p = by_name[pname]
        node_labels[nname] = pname
        gpus = _gpus_of(node.get("gpus"))
        if gpus is None:
            continue
        if p["sharing"] == "mps":
            if _mig_enabled(gpus):
                errors.append("node %s: profile %s uses MPS but GPU(s) %s have MIG enabled: sharing using MPS is not "
                              "supported for MIG devices (device plugin rule)"
                              % (nname, pname, ", ".join(str(g.get("index")) for g in _mig_enabled(gpus))))
            limit = mps_replica_limit(gpus)
            for res in profile_resources(p):
                if limit and _is_int(res["replicas"]) and res["replicas"] > limit:
                    errors.append("node %s: profile %s: invalid MPS configuration: invalid device maximum allowed "
                                  "replicas exceeded: %d > %d (compute capability %s: MPS allows 48 clients per GPU "
                                  "at >= 7.5, 16 below)"
                                  % (nname, pname, res["replicas"], limit,
                                     min(g.get("compute_capability") for g in gpus)))
        if p["mig_strategy"] in ("single", "mixed") and gpus and not _mig_enabled(gpus):
            warnings.append("node %s: profile %s uses mig_strategy %s but no GPU has MIG enabled"
                            % (nname, pname, p["mig_strategy"]))
        subs = sorted(set(d.get("profile") for g in _mig_enabled(gpus or []) for d in g.get("mig_devices") or []
                          if not mig_resource_name(d.get("profile"))))
        if p["mig_strategy"] == "mixed" and subs:
            warnings.append("node %s: profile %s uses mig_strategy mixed but MIG devices of compute-instance "
                            "sub-profile(s) %s exist: the device plugin advertises only full GPU-instance profiles "
                            "and fails on a MIG device it cannot match; use mig_strategy single or lay out full "
                            "profiles" % (nname, pname, ", ".join(subs)))
        if not errors:
            expected[nname] = expected_allocatable(p, gpus)
            if p["sharing"] != "none" and gpus and not _mig_enabled(gpus):
                try:
                    share = replica_shares(gpus, profile_resources(p)[0]["replicas"])
                except ShareError as exc:
                    errors.append("node %s: %s" % (nname, exc))
                    continue
                share["enforced"] = p["sharing"] == "mps"
                share["sharing"] = p["sharing"]
                if p["sharing"] != "mps":
                    share["note"] = ("time-slicing does not isolate memory or compute: these are fair shares, not "
                                     "limits")
                shares[nname] = share
    if errors:
        raise DevicePluginConfigError(errors)
    configs = dict((p["name"], profile_config(p)) for p in norm)
    values = {"config": {"map": dict((name, dump_config(cfg, yaml_module)) for name, cfg in sorted(configs.items())),
                         "default": default_profile}}
    if gfd is not None or uses_mps:
        values["gfd"] = {"enabled": bool(gfd) or uses_mps}
    values = merge_values(values, extra_values)
    values["affinity"] = pausable_affinity((extra_values or {}).get("affinity"))
    return dict(values=values, configs=configs, node_labels=node_labels, shares=shares, expected=expected,
                warnings=warnings, default_profile=default_profile, label=CONFIG_LABEL)
