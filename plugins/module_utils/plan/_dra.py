# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dynamic Resource Allocation with NVIDIA's DRA driver for GPUs: what the collection publishes and checks.

Pure functions, no I/O. Facts from NVIDIA's driver (kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1, commit
fc69d98528027bfe06efff81e6fd99c98ede8ff7; docs/readings/dra-driver-facts.md):

- the kubelet plugin's driver name is ``gpu.nvidia.com``; the chart's DeviceClasses are ``gpu.nvidia.com`` (devices of
  type gpu) and ``mig.nvidia.com`` (type mig) (deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-*.yaml);
- it publishes one device per GPU with MIG disabled, and the MIG devices (not the GPU) of a GPU with MIG enabled, with
  the attributes ``type``, ``uuid``, ``productName``, ... and for MIG devices ``parentUUID`` and ``profile``, and the
  capacity ``memory`` (cmd/gpu-kubelet-plugin/deviceinfo.go, nvlib.go). No attribute carries the GPU's index: a
  template for one GPU selects its UUID;
- a claim's opaque config for driver gpu.nvidia.com is a ``GpuConfig`` (resource.nvidia.com/v1beta1) whose
  ``sharing`` is ``TimeSlicing`` (``timeSlicingConfig.interval``: Default, Short, Medium, Long) or ``MPS``
  (``mpsConfig``: defaultActiveThreadPercentage 0..100, defaultPinnedDeviceMemoryLimit a quantity, and
  defaultPerDevicePinnedMemoryLimit keyed by the claim's device index or UUID) (api/nvidia.com/resource/v1beta1),
  both behind the feature gates TimeSlicingSettings and MPSSupport, which the collection's chart values turn on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import decimal as _decimal
import re as _re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _sharing
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_names import is_dns_subdomain

DRIVER = "gpu.nvidia.com"
DEVICE_CLASSES = {"gpu": "gpu.nvidia.com", "mig": "mig.nvidia.com"}
CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
CONFIG_KIND = "GpuConfig"
INTERVALS = ("Default", "Short", "Medium", "Long")
REQUEST = "gpu"

MANAGED_BY = ("app.kubernetes.io/managed-by", "gpuops.nvidia")
SET_LABEL = "gpuops.nvidia/claim-template-set"
PROFILE_LABEL = "gpuops.nvidia/profile"

SHARING = ("none", "time-slicing", "mps")
EXPLICIT_KEYS = ("name", "sharing", "interval", "active_thread_percentage", "pinned_memory_limit",
                 "per_device_pinned_memory_limit", "device_class", "mig_profile", "product", "count")

_UUID_KEY = _re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")
_CEL_TEXT = _re.compile(r"^[-A-Za-z0-9 ._()+/]*$")


class DraError(ValueError):
    """A declaration that cannot become a claim template; the message says what is wrong and what is valid."""


# ---- GpuConfig -----------------------------------------------------------------------------------------------------
def gpu_config(sharing="none", interval=None, active_thread_percentage=None, pinned_memory_limit=None,
               per_device_pinned_memory_limit=None):
    """The GpuConfig for a claim: exclusive (``none``), TimeSlicing with its interval, or MPS with its limits.
    Limits are already valid (``mps_limits``): the thread percentage an int, memory as Kubernetes quantities."""
    config = {"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND}
    if sharing == "time-slicing":
        config["sharing"] = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval or "Default"}}
    elif sharing == "mps":
        mps = {}
        if active_thread_percentage is not None:
            mps["defaultActiveThreadPercentage"] = active_thread_percentage
        if pinned_memory_limit is not None:
            mps["defaultPinnedDeviceMemoryLimit"] = pinned_memory_limit
        if per_device_pinned_memory_limit:
            mps["defaultPerDevicePinnedMemoryLimit"] = dict(per_device_pinned_memory_limit)
        config["sharing"] = {"strategy": "MPS", "mpsConfig": mps}
    return config


# ---- memory limits: Kubernetes quantities ---------------------------------------------------------------------------
# GpuConfig's pinned memory limits are resource.Quantity values (api/nvidia.com/resource/v1beta1/sharing.go), so they
# take Kubernetes' grammar and meaning (kubernetes/apimachinery v0.36.3, pkg/api/resource/quantity.go and suffix.go): a
# signed decimal number, then no suffix (bytes), a binary suffix (Ki = 2**10 ... Ei = 2**60), a decimal one (n u m k M
# G T P E: 10**-9 ... 10**18) or an exponent (e9, E+9). Not CUDA's notation of the host MPS path (_sharing.py), where M
# and G are MiB and GiB: here 1G is 10**9 bytes. kubernetes.utils.parse_quantity computes the value, but it takes more
# than Kubernetes does (spaces, '_', NaN, Infinity, 1K, 1e3Mi), so the form is checked against the grammar first.
_QUANTITY = _re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?\Z")
QUANTITY_FORMS = ("a Kubernetes quantity: a number followed by a binary suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of "
                  "1024), a decimal suffix k, M, G, T, P, E (powers of 1000), an exponent (1e9) or nothing (bytes), "
                  "e.g. 8Gi, 512Mi, 10G")
# NVIDIA's driver starts the MPS daemon with Value()/1024/1024 "M" and refuses a claim whose limit comes to 0M
# (sharing.go limit.Megabyte; tests/fixtures/dra/gpuconfig-verdicts-v25.8.1.json, mps-pinned-1ki). The ceiling is the
# host path's (_sharing.parse_mem_amount): no GPU has 1Pi of memory.
MIN_LIMIT_BYTES = _sharing.MIB
MAX_LIMIT_BYTES = 1 << 50


def _quantity_value(text, where):
    """The exact value of ``text`` (already in Kubernetes' grammar) as a Decimal, by the Kubernetes client."""
    try:
        # imported here: the client costs over half a second to import, and most callers of this file never get here
        from kubernetes.utils import parse_quantity
    except ImportError:
        raise DraError("%s: reading a memory limit needs the kubernetes Python client on the controller (the "
                       "collection's requirements.txt)" % where)
    with _decimal.localcontext() as ctx:
        ctx.prec = len(text) + 40  # exact: the number's digits times a suffix of at most 19 digits
        ctx.traps[_decimal.Inexact] = True
        try:
            return parse_quantity(text)
        except (ValueError, ArithmeticError):
            raise DraError("%s %.80r has an exponent out of any range: give %s" % (where, text, QUANTITY_FORMS))


def quantity_bytes(value, where="pinned_memory_limit"):
    """A memory limit of a GpuConfig -> (bytes, the text to write). The text is the user's own (an int: its digits),
    so Kubernetes reads exactly the bytes checked here. Refused, naming ``where``: anything outside Kubernetes'
    grammar, a value that is not a whole number of bytes, below 1Mi or from 1Pi on."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DraError("%s must be %s; got %s %.80r%s" % (where, QUANTITY_FORMS, type(value).__name__, value,
                                                          " (quote it)" if isinstance(value, float) else ""))
    if isinstance(value, str):
        if not _QUANTITY.match(value):
            hint = ""
            if _re.match(r"^[+-]?[0-9.]+[KMGTPEkmgtpe]?i?[Bb]\Z", value):
                hint = " (Kubernetes writes no B: 8G is 8 * 10**9 bytes, 8Gi is 8 * 2**30)"
            elif value.strip() != value or " " in value:
                hint = " (no spaces)"
            raise DraError("%s %.80r is not %s%s" % (where, value, QUANTITY_FORMS, hint))
        amount = _quantity_value(value, where)
    else:
        amount = value
    # an int's digits only where it is small: str() refuses ints of over 4300 digits
    what = "%s %.80r" % (where, value) if isinstance(value, str) or abs(value) < MAX_LIMIT_BYTES else where
    if amount <= 0:
        raise DraError("%s is %s: give a limit of at least 1Mi" % (what, "zero" if amount == 0 else "negative"))
    if amount >= MAX_LIMIT_BYTES:
        raise DraError("%s is larger than any GPU: a limit must be below 1Pi (2**50 bytes)" % what)
    if amount != int(amount):
        shown = "%s" % amount
        raise DraError("%s is %snot a whole number of bytes (Kubernetes would round it up): give whole bytes, e.g. in "
                       "Mi or Gi" % (what, "%s bytes, " % shown if len(shown) <= 24 else ""))
    if amount < MIN_LIMIT_BYTES:
        raise DraError("%s is %d bytes, below 1Mi: NVIDIA's DRA driver hands the MPS daemon the limit in whole MiB "
                       "(Value()/1024/1024) and refuses a claim whose limit comes to 0" % (what, amount))
    return int(amount), value if isinstance(value, str) else str(value)


def mps_limits(active_thread_percentage=None, pinned_memory_limit=None, per_device_pinned_memory_limit=None,
               where="mps", count=1):
    """Validate a workload's MPS limits and return them as GpuConfig wants them: (thread percentage or None, memory
    quantity or None, {device: quantity}). The percentage is read as mps_control reads it
    (plugins/module_utils/plan/_sharing.py), the memory limits as Kubernetes quantities (quantity_bytes). A garbage limit
    is refused, never passed on to silently lift the cap; each message names its place once."""
    pct = memory = None
    per_device = {}
    if active_thread_percentage is not None:
        try:
            pct = _sharing.parse_thread_percentage(active_thread_percentage)
        except _sharing.ShareError as exc:
            raise DraError("%s.%s" % (where, str(exc).replace(_sharing.ENV_THREADS, "active_thread_percentage", 1)))
    if pinned_memory_limit is not None:
        memory = quantity_bytes(pinned_memory_limit, where + ".pinned_memory_limit")[1]
    if per_device_pinned_memory_limit is not None:
        if not isinstance(per_device_pinned_memory_limit, dict) or not per_device_pinned_memory_limit:
            raise DraError("%s.per_device_pinned_memory_limit must be a non-empty mapping of a device of the claim (its "
                           "index in the claim, 0, 1, ..., or a GPU/MIG UUID) to a limit such as 8Gi, got %.80r"
                           % (where, per_device_pinned_memory_limit))
        for key, value in sorted(per_device_pinned_memory_limit.items(), key=lambda kv: str(kv[0])):
            text = str(key)
            if isinstance(key, bool) or not (text.isdigit() and (text == "0" or not text.startswith("0"))
                                             or _UUID_KEY.match(text)):
                raise DraError("%s.per_device_pinned_memory_limit: device %r is neither an index in the claim (0, 1, "
                               "...) nor a GPU or MIG UUID (GPU-..., MIG-...)" % (where, key))
            if text.isdigit() and int(text) >= count:
                # the driver counts the claim's own devices (its sorted UUIDs) and refuses an index past them when it
                # prepares the claim (api/nvidia.com/resource/v1beta1/sharing.go uuidSet.Normalize)
                raise DraError("%s.per_device_pinned_memory_limit: device index %s is not one of the claim's %d "
                               "device(s) (0..%d): NVIDIA's driver refuses it when it prepares the claim"
                               % (where, text, count, count - 1))
            per_device[text] = quantity_bytes(value, "%s.per_device_pinned_memory_limit[%s]" % (where, text))[1]
    return pct, memory, per_device


def config_limit_errors(config, where="config"):
    """What is wrong with the memory limits of a GpuConfig, one sentence each: every pinned memory limit must be one
    quantity_bytes takes (for a config built by hand, which no filter has checked)."""
    mps = (config.get("sharing") or {}) if isinstance(config, dict) else {}
    mps = (mps.get("mpsConfig") or {}) if isinstance(mps, dict) else {}
    if not isinstance(mps, dict):
        return []
    at = where + ".sharing.mpsConfig."
    limits = []
    if mps.get("defaultPinnedDeviceMemoryLimit") is not None:
        limits.append((at + "defaultPinnedDeviceMemoryLimit", mps["defaultPinnedDeviceMemoryLimit"]))
    per_device = mps.get("defaultPerDevicePinnedMemoryLimit")
    for key, value in sorted(per_device.items(), key=lambda kv: str(kv[0])) if isinstance(per_device, dict) else ():
        limits.append(("%sdefaultPerDevicePinnedMemoryLimit[%s]" % (at, key), value))
    errors = []
    for name, value in limits:
        try:
            quantity_bytes(value, name)
        except DraError as exc:
            errors.append(str(exc))
    return errors


# ---- names and selectors -------------------------------------------------------------------------------------------
def slug(text):
    """A product or MIG profile name as part of a Kubernetes name: 'NVIDIA H200' -> 'h200', '1g.10gb+me' ->
    '1g.10gb-me'."""
    out = _re.sub(r"[^a-z0-9.]+", "-", str(text).lower())
    if out.startswith("nvidia-"):
        out = out[len("nvidia-"):]
    return _re.sub(r"-+", "-", out).strip("-.") or "gpu"


def _cel_string(value):
    text = str(value)
    if not _CEL_TEXT.match(text):
        raise DraError("%r cannot be put in a CEL selector: use letters, digits, spaces and . _ - ( ) + /" % (text,))
    return "'%s'" % text


def attribute_selector(name, value):
    return "device.attributes['%s'].%s == %s" % (DRIVER, name, _cel_string(value))


def memory_selector(nbytes):
    return "device.capacity['%s'].memory.compareTo(quantity('%d')) == 0" % (DRIVER, int(nbytes))


def name_errors(name, where="name"):
    if not isinstance(name, str) or not name or len(name) > 253 or not is_dns_subdomain(name):
        return ["%s %r is not a Kubernetes object name (lowercase letters, digits, '-' and '.', starting and ending "
                "with a letter or digit, at most 253 characters)" % (where, name)]
    return []


# ---- what is published ---------------------------------------------------------------------------------------------
def declaration(name, profile, device_class="gpu", selectors=(), config=None, count=1):
    """One template as the module takes it (its ``templates`` option)."""
    return {"name": name, "profile": profile, "device_class": device_class, "selectors": list(selectors),
            "config": config, "count": count}


def template_object(decl, namespace, template_set):
    """The ResourceClaimTemplate (at _kube.DRA_API_VERSION) for one declaration, with the labels that mark it the
    collection's. Defaults the API server would add (allocationMode, count) are written out, so that what is read
    back compares equal."""
    # imported here: this file stays free of the Kubernetes client where the controller's filters load it, and only
    # the modules, which import _kube anyway, build the object
    from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube import DRA_API_VERSION
    exactly = {"deviceClassName": DEVICE_CLASSES[decl["device_class"]], "allocationMode": "ExactCount",
               "count": int(decl.get("count") or 1)}
    if decl.get("selectors"):
        exactly["selectors"] = [{"cel": {"expression": s}} for s in decl["selectors"]]
    devices = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    if decl.get("config"):
        devices["config"] = [{"requests": [REQUEST], "opaque": {"driver": DRIVER, "parameters": decl["config"]}}]
    return {"apiVersion": DRA_API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": {"name": decl["name"], "namespace": namespace,
                         "labels": {MANAGED_BY[0]: MANAGED_BY[1], SET_LABEL: template_set,
                                    PROFILE_LABEL: decl.get("profile") or "explicit"}},
            "spec": {"spec": {"devices": devices}}}


def profile_sharing(profile):
    """(sharing, replicas) of a device plugin profile (gpuops.nvidia.device_plugin_profiles)."""
    if profile.get("mig_strategy"):
        return "mig", None
    return profile.get("sharing") or "none", profile.get("replicas")


def base_name(profile):
    """A profile's name without the device list strategy suffix (irrelevant to DRA): mps-4, ts-2, mig-mixed,
    default."""
    sharing, replicas = profile_sharing(profile)
    if sharing == "mig":
        return "mig"
    if sharing == "none":
        return "default"
    return "%s-%d" % ("mps" if sharing == "mps" else "ts", int(replicas))


def fleet_templates(profiles, interval="Default", prefix="gpu"):
    """Templates that need no GPU facts, from the fleet's profiles: a whole GPU (``<prefix>``, always) and, per
    time-slicing profile, ``<prefix>-ts-<N>`` with the TimeSlicing interval. MPS and MIG templates depend on the GPUs
    and come from node_templates."""
    out = {prefix: declaration(prefix, "default")}
    for profile in profiles:
        sharing, dummy = profile_sharing(profile)
        if sharing == "time-slicing":
            name = "%s-%s" % (prefix, base_name(profile))
            out[name] = declaration(name, base_name(profile), config=gpu_config("time-slicing", interval=interval))
    return [out[k] for k in sorted(out)]


def node_templates(profile, gpus, node_name=None, per_gpu=False, interval="Default", prefix="gpu"):
    """Templates that depend on a node's GPUs (GPU facts as gpu_info returns them):

    - MPS profile ``mps-<N>``: per GPU product and memory size, ``<prefix>-mps-<N>-<product>`` selecting that product
      and memory, with the device plugin's share math (thread percentage 100 // N, pinned memory total // N MiB);
    - MIG: per MIG profile on the node, ``mig-<profile>`` selecting it (device class mig.nvidia.com);
    - ``per_gpu``: per GPU, ``<node>-gpu<index>`` selecting its UUID, with the node's sharing (seed 003's individual
      per-GPU resources).
    """
    sharing, replicas = profile_sharing(profile)
    gpus = list(gpus or [])
    out = {}
    configs = {}
    for gpu in gpus:
        if gpu.get("mig_mode_current") == "Enabled":
            for dev in gpu.get("mig_devices") or []:
                name = "mig-%s" % slug(dev["profile"])
                out[name] = declaration(name, "mig", "mig", [attribute_selector("profile", dev["profile"])])
            continue
        config = None
        if sharing == "mps":
            share = _sharing.replica_shares([gpu], replicas)
            config = gpu_config("mps", active_thread_percentage=share["active_thread_percentage"],
                                pinned_memory_limit="%dMi" % share["gpus"][0]["memory_per_replica_mib"])
            name = "%s-%s-%s" % (prefix, base_name(profile), slug(gpu.get("name") or "gpu"))
            if name in out and out[name]["config"] != config:
                name = "%s-%dmi" % (name, _sharing.gpu_total_bytes(gpu) // _sharing.MIB)
            out[name] = declaration(name, base_name(profile), selectors=[
                attribute_selector("productName", gpu.get("name") or ""),
                memory_selector(_sharing.gpu_total_bytes(gpu))], config=config)
        elif sharing == "time-slicing":
            config = gpu_config("time-slicing", interval=interval)
        configs[gpu["index"]] = config
    if per_gpu and node_name:
        for gpu in gpus:
            if gpu.get("mig_mode_current") == "Enabled":
                continue
            name = "%s-gpu%d" % (node_name, gpu["index"])
            out[name] = declaration(name, "per-gpu", selectors=[attribute_selector("uuid", gpu["uuid"])],
                                    config=configs.get(gpu["index"]))
    return [out[k] for k in sorted(out)]


def explicit_templates(declared, where="gpuops_dra_claim_templates"):
    """Per-workload templates the user declares (seed 002's per-workload MPS limits), validated: returns the
    declarations, or raises DraError listing everything wrong."""
    if declared in (None, ""):
        return []
    if not isinstance(declared, list):
        raise DraError("%s must be a list of templates, got %s" % (where, type(declared).__name__))
    errors, out, seen = [], [], set()
    for n, item in enumerate(declared):
        at = "%s[%d]" % (where, n)
        if not isinstance(item, dict):
            errors.append("%s must be a mapping with at least a name, got %r" % (at, item))
            continue
        unknown = sorted(set(item) - set(EXPLICIT_KEYS))
        if unknown:
            errors.append("%s: unknown keys %s (valid: %s)" % (at, ", ".join(unknown), ", ".join(EXPLICIT_KEYS)))
        name = item.get("name")
        errors.extend(name_errors(name, at + ".name"))
        if name in seen:
            errors.append("%s: name %r is declared twice" % (at, name))
        seen.add(name)
        sharing = item.get("sharing", "none")
        device_class = item.get("device_class", "gpu")
        if sharing not in SHARING:
            errors.append("%s.sharing %r is not one of %s" % (at, sharing, ", ".join(SHARING)))
        if device_class not in DEVICE_CLASSES:
            errors.append("%s.device_class %r is not one of gpu, mig" % (at, device_class))
        count = item.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > 16:
            errors.append("%s.count must be a whole number from 1 to 16, got %r" % (at, count))
        interval = item.get("interval")
        if interval is not None and (sharing != "time-slicing" or interval not in INTERVALS):
            errors.append("%s.interval %r: give one of %s, and only with sharing time-slicing"
                          % (at, interval, ", ".join(INTERVALS)))
        limits = [k for k in ("active_thread_percentage", "pinned_memory_limit", "per_device_pinned_memory_limit")
                  if item.get(k) is not None]
        if limits and sharing != "mps":
            errors.append("%s: %s only apply with sharing mps, got sharing %s" % (at, ", ".join(limits), sharing))
        if device_class == "mig" and sharing != "none":
            errors.append("%s: a MIG device template takes no sharing (the collection writes GpuConfig, which applies to "
                          "full GPUs; MIG devices are already partitions), got %s" % (at, sharing))
        if device_class == "mig" and not item.get("mig_profile"):
            errors.append("%s: device_class mig needs mig_profile (e.g. 1g.10gb)" % at)
        if device_class == "gpu" and item.get("mig_profile") is not None:
            errors.append("%s: mig_profile needs device_class mig" % at)
        config = None
        try:
            selectors = []
            if item.get("product"):
                selectors.append(attribute_selector("productName", item["product"]))
            if device_class == "mig" and item.get("mig_profile"):
                selectors.append(attribute_selector("profile", item["mig_profile"]))
            if sharing == "mps" and device_class == "gpu":
                pct, memory, per_device = mps_limits(item.get("active_thread_percentage"),
                                                     item.get("pinned_memory_limit"),
                                                     item.get("per_device_pinned_memory_limit"), where=at,
                                                     count=count if isinstance(count, int) and count > 0 else 1)
                config = gpu_config("mps", active_thread_percentage=pct, pinned_memory_limit=memory,
                                    per_device_pinned_memory_limit=per_device)
            elif sharing == "time-slicing" and device_class == "gpu":
                config = gpu_config("time-slicing", interval=interval if interval in INTERVALS else "Default")
        except DraError as exc:
            errors.append(str(exc))
            continue
        out.append(declaration(name, "explicit", device_class, selectors, config, count))
    if errors:
        raise DraError("; ".join(errors))
    return out


# ---- what a node must publish --------------------------------------------------------------------------------------
def expected_devices(gpus):
    """{uuid: {type, parentUUID?, profile?}} a node's ResourceSlices must list for these GPU facts."""
    out = {}
    for gpu in gpus or []:
        if gpu.get("mig_mode_current") == "Enabled":
            for dev in gpu.get("mig_devices") or []:
                out[dev.get("uuid")] = {"type": "mig", "parentUUID": gpu.get("uuid"), "profile": dev.get("profile")}
        else:
            out[gpu.get("uuid")] = {"type": "gpu"}
    return out


def _attr(device, name):
    attrs = device.get("attributes") or {}
    value = attrs.get(name, attrs.get("%s/%s" % (DRIVER, name))) or {}
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return value[kind]
    return None


def published_devices(slices, node_name):
    """(devices {uuid: {name, type, parentUUID?, profile?}}, problems) from the node's ResourceSlices of driver
    gpu.nvidia.com: only the pool's newest generation counts, and a pool with fewer slices than it announces is
    incomplete."""
    mine = [s for s in slices or [] if (s.get("spec") or {}).get("driver") == DRIVER
            and (s.get("spec") or {}).get("nodeName") == node_name]
    problems, devices = [], {}
    if not mine:
        return devices, ["node %s has no ResourceSlice of driver %s" % (node_name, DRIVER)]
    pools = {}
    for s in mine:
        pool = s["spec"].get("pool") or {}
        pools.setdefault(pool.get("name"), []).append(s)
    for pool_name, items in sorted(pools.items(), key=lambda kv: str(kv[0])):
        newest = max(int((s["spec"].get("pool") or {}).get("generation") or 0) for s in items)
        current = [s for s in items if int((s["spec"].get("pool") or {}).get("generation") or 0) == newest]
        want = int((current[0]["spec"].get("pool") or {}).get("resourceSliceCount") or 1)
        if len(current) < want:
            problems.append("pool %s generation %d has %d of its %d slices" % (pool_name, newest, len(current), want))
        for s in current:
            for dev in s["spec"].get("devices") or []:
                uuid = _attr(dev, "uuid")
                entry = {"name": dev.get("name"), "type": _attr(dev, "type")}
                if entry["type"] == "mig":
                    entry.update(parentUUID=_attr(dev, "parentUUID"), profile=_attr(dev, "profile"))
                if uuid in devices:
                    problems.append("device %s is published twice (%s, %s)" % (uuid, devices[uuid]["name"], dev.get("name")))
                devices[uuid] = entry
    return devices, problems


def slice_problems(slices, node_name, gpus):
    """What differs between the node's ResourceSlices and the devices its GPUs promise; empty when exact."""
    devices, problems = published_devices(slices, node_name)
    if not devices and problems:
        return problems
    expected = expected_devices(gpus)
    for uuid, want in sorted(expected.items(), key=lambda kv: str(kv[0])):
        have = devices.get(uuid)
        what = ("MIG device %s (%s on GPU %s)" % (uuid, want.get("profile"), want.get("parentUUID"))
                if want["type"] == "mig" else "GPU %s" % uuid)
        if have is None:
            problems.append("%s is not published" % what)
            continue
        for key in ("type", "parentUUID", "profile"):
            if want.get(key) != have.get(key):
                problems.append("%s is published with %s %r, expected %r" % (what, key, have.get(key), want.get(key)))
    for uuid in sorted(set(devices) - set(expected), key=str):
        have = devices[uuid]
        problems.append("%s %s (%s) is published but the node has no such device%s" % (
            "MIG device" if have.get("type") == "mig" else "device", uuid, have.get("name"),
            " (a GPU whose MIG mode changed: the kubelet plugin enumerates only when it starts)"
            if have.get("type") == "gpu" else ""))
    return problems


# ---- ComputeDomains (multi-node NVLink) ----------------------------------------------------------------------------
# NVIDIA's ComputeDomain CRD (chart v25.12.0, crds/resource.nvidia.com_computedomains.yaml; NVIDIA/k8s-dra-driver-gpu
# commit 0882da8720c28763137e0987778ec476ec4cf8df): spec.numNodes (integer, required; "must be zero or greater", which
# the schema does not enforce), spec.channel.allocationMode (Single, the default, or All) and
# spec.channel.resourceClaimTemplate.name (required). The spec is immutable (x-kubernetes-validations). NVIDIA's
# controller creates the ResourceClaimTemplate of that name in the ComputeDomain's namespace itself
# (cmd/compute-domain-controller/computedomain.go, resourceclaimtemplate.go: one request "channel" of the DeviceClass
# compute-domain-default-channel.nvidia.com with a ComputeDomainChannelConfig), so the collection builds the
# ComputeDomain and the workload's reference to that template, never the template.
COMPUTE_DOMAIN_API_VERSION = "resource.nvidia.com/v1beta1"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
CHANNEL_ALLOCATION_MODES = ("Single", "All")
COMPUTE_DOMAIN_KEYS = ("name", "namespace", "num_nodes", "channel_allocation_mode", "claim_template")
COMPUTE_DOMAIN_CLAIM = "compute-domain-channel"


def compute_domain_errors(decl, where="compute domain"):
    """What is wrong with one ComputeDomain declaration (a mapping with COMPUTE_DOMAIN_KEYS), each naming the key,
    what was given and what is valid; [] when it is good."""
    if not isinstance(decl, dict):
        return ["%s must be a mapping with the keys %s, got %r" % (where, ", ".join(COMPUTE_DOMAIN_KEYS), decl)]
    errors = []
    unknown = sorted(str(k) for k in decl if k not in COMPUTE_DOMAIN_KEYS)
    if unknown:
        errors.append("%s has unknown keys %s (valid: %s)" % (where, ", ".join(unknown), ", ".join(COMPUTE_DOMAIN_KEYS)))
    for key in ("name", "namespace", "num_nodes"):
        if key not in decl:
            errors.append("%s.%s is required" % (where, key))
    name = decl.get("name")
    if "name" in decl:
        errors.extend(name_errors(name, "%s.name" % where))
    namespace = decl.get("namespace")
    if "namespace" in decl and (not isinstance(namespace, str) or not namespace or len(namespace) > 63
                                or not _re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", namespace)):
        errors.append("%s.namespace %r is not a namespace name (lowercase letters, digits and '-', starting and ending "
                      "with a letter or digit, at most 63 characters)" % (where, namespace))
    nodes = decl.get("num_nodes")
    if "num_nodes" in decl and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0):
        errors.append("%s.num_nodes must be a whole number of nodes, 0 or more (NVIDIA recommends 0 with its default "
                      "IMEXDaemonsWithDNSNames gate: the workload then decides when its peers are up), got %r"
                      % (where, nodes))
    mode = decl.get("channel_allocation_mode", "Single")
    if mode not in CHANNEL_ALLOCATION_MODES:
        errors.append("%s.channel_allocation_mode must be one of %s (Single: one IMEX channel per workload pod; All: "
                      "every channel of the IMEX domain), got %r" % (where, ", ".join(CHANNEL_ALLOCATION_MODES), mode))
    if decl.get("claim_template") is not None:
        errors.extend(name_errors(decl["claim_template"], "%s.claim_template" % where))
    elif isinstance(name, str) and not name_errors(name) and name_errors(name + "-channel"):
        errors.append("%s.name %r is too long to derive the claim template's name %r from it: give claim_template"
                      % (where, name, name + "-channel"))
    return errors


def compute_domain_claim_template(decl):
    """The name of the ResourceClaimTemplate NVIDIA's controller creates for the declaration (claim_template, or
    <name>-channel)."""
    return decl.get("claim_template") or "%s-channel" % decl["name"]


def compute_domain_object(decl):
    """The ComputeDomain for a good declaration (raises DraError naming every problem of a bad one). Defaults the
    API server would add (allocationMode Single) are written out, so that what is read back compares equal."""
    errors = compute_domain_errors(decl)
    if errors:
        raise DraError("; ".join(errors))
    return {"apiVersion": COMPUTE_DOMAIN_API_VERSION, "kind": COMPUTE_DOMAIN_KIND,
            "metadata": {"name": decl["name"], "namespace": decl["namespace"],
                         "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
            "spec": {"numNodes": decl["num_nodes"],
                     "channel": {"allocationMode": decl.get("channel_allocation_mode", "Single"),
                                 "resourceClaimTemplate": {"name": compute_domain_claim_template(decl)}}}}


def compute_domain_pod_claims(decl, claim=COMPUTE_DOMAIN_CLAIM):
    """What a workload pod's spec adds to join the ComputeDomain: its ``resourceClaims`` entry (the template NVIDIA's
    controller creates) and the ``resources.claims`` entry each container that uses the IMEX channel names."""
    return {"resourceClaims": [{"name": claim, "resourceClaimTemplateName": compute_domain_claim_template(decl)}],
            "container_claims": [{"name": claim}]}
