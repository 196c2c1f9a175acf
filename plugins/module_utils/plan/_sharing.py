# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each replica of a shared GPU gets, computed the way NVIDIA's device plugin computes it.

Pure functions over GPU facts (the ``gpus`` list that ``gpu_info`` returns); no I/O.

The device plugin's MPS control daemon (k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go) sets, per
device index, ``set_default_device_pinned_mem_limit <index> <total_bytes / replicas / 1MiB>M`` with integer
division, and once ``set_default_active_thread_percentage <100 / replicas>``, also integer division.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re as _re

MIB = 1024 * 1024

SHARE_MODES = ("per_gpu", "pool")


class ShareError(ValueError):
    """Input that cannot be shared as asked; the message says what is wrong and what is valid."""


def check_gpu_facts(gpus):
    """Raise ShareError unless ``gpus`` is a list of GPU facts as gpu_info returns them: mappings with a whole
    ``index`` >= 0 and a positive whole ``memory_total_bytes`` or ``memory_total_mib`` (``uuid`` a string if given).
    Returns the list."""
    what = "GPU facts (gpu_info's gpus: a list of mappings with index and memory_total_mib)"
    if not isinstance(gpus, (list, tuple)):
        raise ShareError("%s expected, got %s" % (what, type(gpus).__name__))
    for n, gpu in enumerate(gpus):
        where = "gpus[%d]" % n
        if not isinstance(gpu, dict):
            raise ShareError("%s: %s is %s, not a mapping" % (what, where, type(gpu).__name__))
        index = gpu.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ShareError("%s: %s.index must be a whole number >= 0, got %r" % (what, where, index))
        sizes = [(k, gpu.get(k)) for k in ("memory_total_bytes", "memory_total_mib") if gpu.get(k) is not None]
        if not sizes:
            raise ShareError("%s: %s has neither memory_total_bytes nor memory_total_mib" % (what, where))
        for key, size in sizes:
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ShareError("%s: %s.%s must be a whole number > 0, got %r" % (what, where, key, size))
        if gpu.get("uuid") is not None and not isinstance(gpu["uuid"], str):
            raise ShareError("%s: %s.uuid must be a string, got %r" % (what, where, gpu["uuid"]))
    return list(gpus)


def gpu_total_bytes(gpu):
    """A GPU's memory in bytes from its facts (memory_total_bytes, else memory_total_mib)."""
    if gpu.get("memory_total_bytes"):
        return int(gpu["memory_total_bytes"])
    return int(gpu["memory_total_mib"]) * MIB


def replica_shares(gpus, replicas, mode="per_gpu"):
    """Return what each replica gets.

    ``mode='per_gpu'``: every GPU is split into ``replicas`` replicas (the device plugin's own meaning of
    ``replicas``: capacity = GPUs x replicas).
    ``mode='pool'``: ``replicas`` is the node's total, spread evenly over its GPUs; it must divide by the
    number of GPUs, because the device plugin gives every GPU of a resource the same replica count.
    """
    if mode not in SHARE_MODES:
        raise ShareError("mode must be one of %s, got %r" % (", ".join(SHARE_MODES), mode))
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ShareError("replicas must be a whole number, got %r" % (replicas,))
    gpus = check_gpu_facts(gpus if gpus is not None else [])
    if not gpus:
        raise ShareError("no GPUs to share: the GPU facts list no GPU")
    if mode == "pool":
        if replicas < 2 * len(gpus) or replicas % len(gpus):
            raise ShareError(
                "pool replicas must be a multiple of the GPU count (%d) and at least 2 per GPU, got %d"
                % (len(gpus), replicas))
        per_gpu = replicas // len(gpus)
    else:
        if replicas < 2:
            raise ShareError("number of replicas must be >= 2 (the device plugin's rule), got %d" % replicas)
        per_gpu = replicas
    out = []
    for gpu in gpus:
        total = gpu_total_bytes(gpu)
        out.append({
            "index": gpu.get("index"),
            "uuid": gpu.get("uuid"),
            "name": gpu.get("name"),
            "replicas": per_gpu,
            "memory_total_mib": total // MIB,
            "memory_per_replica_mib": total // per_gpu // MIB,
            "active_thread_percentage": 100 // per_gpu,
        })
    return {
        "mode": mode,
        "replicas_per_gpu": per_gpu,
        "replicas_total": per_gpu * len(gpus),
        "active_thread_percentage": 100 // per_gpu,
        "memory_per_replica_mib_min": min(g["memory_per_replica_mib"] for g in out),
        "gpus": out,
    }


# ---------------------------------------------------------------------------------------------------------
# Per-workload MPS limits (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
#
# Measured on a real H200 (docs/readings/h200-mps-caps.txt, docs/sharing-mps.md): CUDA silently ignores a malformed
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and then applies no cap at all, not even the daemon's default. One space,
# one quote character or a missing device makes the whole variable void. So the grammar below is strict:
# exactly ``<device>=<amount><unit>[,<device>=<amount><unit>...]``, nothing else.
# ---------------------------------------------------------------------------------------------------------

GIB = 1024 * MIB

# Units CUDA was seen to accept (readings: M, G, GB; NVIDIA's MPS docs also show MB). Binary multiples.
MEM_UNITS = {"M": MIB, "MB": MIB, "G": GIB, "GB": GIB}
# What the control daemon's set_default_device_pinned_mem_limit takes: an integer plus G or M.
DAEMON_MEM_UNITS = ("M", "G")

_UUID_RE = _re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_UUID_ANYCASE_RE = _re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_INDEX_RE = _re.compile(r"^(0|[1-9][0-9]{0,2})$")
_AMOUNT_RE = _re.compile(r"^([0-9]+)([A-Za-z]*)$")
_PCT_RE = _re.compile(r"^(100|[1-9][0-9]?)$")

ENV_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_MEMORY = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

_GRAMMAR = ("write it as <device>=<amount><unit>[,<device>=<amount><unit>...], e.g. 0=8G or "
            "0=8G,1=4096M or GPU-<uuid>=8GB; device: a GPU index or a full GPU UUID; units: %s; "
            "no spaces, no quotes" % ", ".join(sorted(MEM_UNITS)))


class LimitError(ShareError):
    """A per-workload MPS limit that CUDA would ignore or that makes no sense; never passed on."""


def parse_thread_percentage(value):
    """Validate CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: a whole number 1..100, as int or plain digits."""
    what = "%s must be a whole number from 1 to 100" % ENV_THREADS
    if isinstance(value, bool):
        raise LimitError("%s, got the boolean %r" % (what, value))
    if isinstance(value, int):
        if 1 <= value <= 100:
            return value
        raise LimitError("%s, got %d" % (what, value))
    if isinstance(value, float):
        raise LimitError("%s (no fractions), got %r" % (what, value))
    if not isinstance(value, str):
        raise LimitError("%s, got %s %r" % (what, type(value).__name__, value))
    if value == "":
        raise LimitError("%s, got an empty string" % what)
    if value != value.strip():
        raise LimitError("%s without spaces (CUDA ignores the variable otherwise), got %r" % (what, value))
    if any(q in value for q in "\"'"):
        raise LimitError("%s without quote characters (CUDA ignores the variable otherwise), got %r"
                         % (what, value))
    if value.endswith("%"):
        raise LimitError("%s without a %% sign, got %r" % (what, value))
    if _PCT_RE.match(value):
        return int(value)
    if _re.match(r"^[0-9]+\.[0-9]*$", value):
        raise LimitError("%s (no fractions), got %r" % (what, value))
    if _re.match(r"^0[0-9]+$", value):
        raise LimitError("%s without leading zeros, got %r" % (what, value))
    if _re.match(r"^-?[0-9]+$", value):
        raise LimitError("%s, got %s" % (what, value))
    raise LimitError("%s, got %r" % (what, value))


_MEM_MAX_BYTES = 1 << 50
_MEM_CEILING = "a limit must be below 1048576G (2**50 bytes)"


def _clipped(text, limit=40):
    """repr() of ``text``, cut after ``limit`` characters (a message quotes what the user typed, not 5000 digits)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "... (%d characters)" % len(text)


def parse_mem_amount(text, units=None, where=""):
    """``'8G'`` -> bytes. Strict: a whole positive number immediately followed by one of ``units``."""
    units = tuple(units or MEM_UNITS)
    prefix = "%s: " % where if where else ""
    valid = "a whole number followed by one of %s (e.g. 8G, 8192M)" % ", ".join(units)
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise LimitError("%smemory limit must be %s, got %r" % (prefix, valid, text))
    if isinstance(text, int):
        raise LimitError("%smemory limit %d has no unit: write %dM or %dG" % (prefix, text, text, text))
    if text == "":
        raise LimitError("%smemory limit is empty: give %s" % (prefix, valid))
    if text != text.strip() or " " in text:
        raise LimitError("%smemory limit %r contains spaces; CUDA then ignores the whole variable: give %s"
                         % (prefix, text, valid))
    if text.startswith("-"):
        raise LimitError("%smemory limit %r is negative: give %s" % (prefix, text, valid))
    if _re.match(r"^[0-9]*[.,][0-9]*", text):
        raise LimitError("%smemory limit %r has a fraction: give %s" % (prefix, text, valid))
    m = _AMOUNT_RE.match(text)
    if not m:
        raise LimitError("%smemory limit %r is not %s" % (prefix, text, valid))
    digits, unit = m.group(1), m.group(2)
    if unit == "":
        raise LimitError("%smemory limit %r has no unit: write %sM or %sG" % (prefix, text, digits, digits))
    if unit not in units:
        hint = ""
        if unit.upper() in units:
            hint = " (units are upper case: %s)" % unit.upper()
        elif unit.upper() in ("MIB", "GIB"):
            hint = " (write %s: CUDA's M/G are already binary)" % unit[0].upper()
        elif unit.upper() in ("K", "KB", "KIB", "T", "TB", "TIB", "B"):
            hint = " (CUDA takes megabytes or gigabytes here)"
        raise LimitError("%smemory limit %r has unit %r, which is not one of %s%s"
                         % (prefix, text, unit, ", ".join(units), hint))
    significant = digits.lstrip("0") or "0"
    # Bounded before int(): no GPU holds 10**16 M, and int() refuses strings of more than 4300 digits.
    if len(significant) > 16:
        raise LimitError("%smemory limit %s is larger than any GPU: %s"
                         % (prefix, _clipped(text), _MEM_CEILING))
    if len(digits) > 1 and digits.startswith("0"):
        raise LimitError("%smemory limit %s has leading zeros: write %s%s"
                         % (prefix, _clipped(text), significant, unit))
    amount = int(digits)
    if amount <= 0:
        raise LimitError("%smemory limit %r is zero: a limit must be at least 1M" % (prefix, text))
    if amount * MEM_UNITS[unit] >= _MEM_MAX_BYTES:
        raise LimitError("%smemory limit %r is larger than any GPU: %s" % (prefix, text, _MEM_CEILING))
    return amount * MEM_UNITS[unit]


def _gpu_lookup(gpus):
    by_index, by_uuid = {}, {}
    for gpu in gpus or []:
        if gpu.get("index") is not None:
            by_index[int(gpu["index"])] = gpu
        if gpu.get("uuid"):
            by_uuid[gpu["uuid"]] = gpu
    return by_index, by_uuid


def _parse_device(key, gpus, where):
    """'0' / 0 / 'GPU-...' -> ('index', 0) or ('uuid', 'GPU-...')."""
    by_index, by_uuid = _gpu_lookup(gpus)
    if isinstance(key, bool):
        raise LimitError("%s: device %r is not a GPU index or GPU UUID" % (where, key))
    if isinstance(key, int):
        key = str(key)
    if not isinstance(key, str) or key == "":
        raise LimitError("%s: device is missing (CUDA then applies no cap at all): %s" % (where, _GRAMMAR))
    if _INDEX_RE.match(key):
        index = int(key)
        if gpus and by_index and index >= len(by_index):
            raise LimitError("%s: device index %d does not exist: this node has %d GPU(s), indices 0..%d "
                             "(indices count the GPUs the workload sees)"
                             % (where, index, len(by_index), len(by_index) - 1))
        return ("index", index)
    if _re.match(r"^-?[0-9]+$", key):
        raise LimitError("%s: device index %r is not valid: use 0, 1, 2 ... without signs or leading zeros"
                         % (where, key))
    if key.startswith("MIG-"):
        raise LimitError("%s: device %r is a MIG device; MPS memory limits take a GPU index or a GPU UUID "
                         "(GPU-...)" % (where, key))
    if key.upper().startswith("GPU-"):
        if not _UUID_ANYCASE_RE.match(key):
            raise LimitError("%s: device %r is not a full GPU UUID (GPU- then 8-4-4-4-12 hex digits, as "
                             "nvidia-smi -L prints it)" % (where, key))
        if not _UUID_RE.match(key):
            raise LimitError("%s: GPU UUID %r must be written as nvidia-smi -L prints it: 'GPU-' and lower-case "
                             "hex digits" % (where, key))
        if gpus and by_uuid and key not in by_uuid:
            raise LimitError("%s: GPU UUID %s is not on this node (it has %s); CUDA ignores a UUID the "
                             "workload cannot see" % (where, key, ", ".join(sorted(by_uuid))))
        return ("uuid", key)
    raise LimitError("%s: device %r is neither a GPU index nor a GPU UUID: %s" % (where, key, _GRAMMAR))


def parse_mem_limit(value, gpus=None):
    """Validate CUDA_MPS_PINNED_DEVICE_MEM_LIMIT given as the env string or a mapping device -> amount.

    Returns a list of ``{"device": 0 | "GPU-...", "kind": "index"|"uuid", "limit": "8G", "bytes": ...,
    "mib": ...}`` in the order given. Raises LimitError for anything CUDA might ignore.
    """
    entries = []
    if gpus is not None:
        check_gpu_facts(gpus)
    if isinstance(value, dict):
        if not value:
            raise LimitError("%s mapping is empty: give at least one device, e.g. {0: 8G}" % ENV_MEMORY)
        pairs = [(k, v, "%s entry %r" % (ENV_MEMORY, k)) for k, v in value.items()]
    elif isinstance(value, str):
        if value == "":
            raise LimitError("%s is empty: %s" % (ENV_MEMORY, _GRAMMAR))
        if any(q in value for q in "\"'`"):
            raise LimitError("%s %r contains quote characters; CUDA then ignores the whole variable and applies "
                             "no cap: %s" % (ENV_MEMORY, value, _GRAMMAR))
        if any(c.isspace() for c in value):
            raise LimitError("%s %r contains spaces; CUDA then ignores the whole variable and applies no cap: %s"
                             % (ENV_MEMORY, value, _GRAMMAR))
        if ";" in value:
            raise LimitError("%s %r uses ';' between devices: separate devices with ',': %s"
                             % (ENV_MEMORY, value, _GRAMMAR))
        pairs = []
        for n, part in enumerate(value.split(",")):
            where = "%s entry %d (%r)" % (ENV_MEMORY, n + 1, part)
            if part == "":
                raise LimitError("%s %r has an empty entry (a stray comma): %s" % (ENV_MEMORY, value, _GRAMMAR))
            if part.count("=") == 0:
                if ":" in part:
                    raise LimitError("%s: separate device and amount with '=', not ':': %s" % (where, _GRAMMAR))
                raise LimitError("%s: no device given (e.g. 0=%s); CUDA then applies no cap at all: %s"
                                 % (where, part, _GRAMMAR))
            if part.count("=") > 1:
                raise LimitError("%s: more than one '=': %s" % (where, _GRAMMAR))
            dev, amount = part.split("=")
            pairs.append((dev, amount, where))
    else:
        raise LimitError("%s must be a string like 0=8G or a mapping {device: amount}, got %s"
                         % (ENV_MEMORY, type(value).__name__))
    seen = {}
    by_index = _gpu_lookup(gpus)[0]
    for dev, amount, where in pairs:
        kind, key = _parse_device(dev, gpus, where)
        limit_bytes = parse_mem_amount(amount, where=where)
        # The same GPU named twice: the same key twice, or, on a one-GPU node, its index and its UUID.
        ident = (kind, key)
        if len(by_index) == 1:
            only = list(by_index.values())[0]
            if (kind == "index" and key == 0) or (kind == "uuid" and key == only.get("uuid")):
                ident = ("gpu", only.get("uuid") or 0)
        if ident in seen:
            raise LimitError("%s: the same GPU is given more than once (first as %r)" % (where, seen[ident]))
        seen[ident] = key
        entries.append({"device": key, "kind": kind, "limit": amount, "bytes": limit_bytes,
                        "mib": limit_bytes // MIB})
    return entries


def render_mem_limit(entries):
    """Entries from parse_mem_limit -> the exact env value, ``key=value[,key=value]``."""
    return ",".join("%s=%s" % (e["device"], e["limit"]) for e in entries)


def daemon_mem_amount(limit_bytes):
    """Bytes -> what set_default_device_pinned_mem_limit takes: G when whole GiB, else M (rounded down)."""
    if limit_bytes % GIB == 0:
        return "%dG" % (limit_bytes // GIB)
    return "%dM" % (limit_bytes // MIB)


def workload_limits(active_thread_percentage=None, pinned_device_mem_limit=None, gpus=None, replicas=None,
                    mode="per_gpu"):
    """Validate per-workload MPS limits and render them for a pod spec.

    Returns ``{"env": [{"name":..., "value":...}], "active_thread_percentage": int|None,
    "pinned_device_mem_limit": str|None, "devices": [...], "warnings": [...]}``. With ``gpus`` (GPU facts)
    and ``replicas``, warns where a limit exceeds the per-replica share the daemon gives: a client can only
    lower the daemon's defaults, never raise them (measured on H200).
    """
    if active_thread_percentage is None and pinned_device_mem_limit is None:
        raise LimitError("give %s and/or %s" % (ENV_THREADS, ENV_MEMORY))
    shares = None
    if replicas is not None:
        shares = replica_shares(gpus, replicas, mode)
    warnings = []
    env = []
    pct = None
    if active_thread_percentage is not None:
        pct = parse_thread_percentage(active_thread_percentage)
        if shares and pct > shares["active_thread_percentage"]:
            warnings.append(
                "%s=%d exceeds the per-replica share of %d%% (%d replicas per GPU): a client cannot raise the "
                "daemon's default, so the workload gets %d%%" % (ENV_THREADS, pct, shares["active_thread_percentage"],
                                                                 shares["replicas_per_gpu"],
                                                                 shares["active_thread_percentage"]))
        env.append({"name": ENV_THREADS, "value": str(pct)})
    rendered = None
    entries = []
    if pinned_device_mem_limit is not None:
        entries = parse_mem_limit(pinned_device_mem_limit, gpus)
        rendered = render_mem_limit(entries)
        if shares:
            by_uuid = dict((g["uuid"], g) for g in shares["gpus"] if g.get("uuid"))
            for e in entries:
                if e["kind"] == "uuid" and e["device"] in by_uuid:
                    share = by_uuid[e["device"]]["memory_per_replica_mib"]
                    what = "GPU %s" % e["device"]
                else:
                    # An index is the workload's own visible ordinal, not the host's: compare with the
                    # smallest share on the node, the one it may land on.
                    share = shares["memory_per_replica_mib_min"]
                    what = "device %s (the smallest per-replica share on this node)" % e["device"]
                if e["mib"] > share:
                    warnings.append(
                        "%s=%s: %s MiB on %s exceeds the per-replica share of %d MiB: a client cannot raise the "
                        "daemon's default, so the workload gets %d MiB" % (
                            ENV_MEMORY, rendered, e["mib"], what, share, share))
        env.append({"name": ENV_MEMORY, "value": rendered})
    return {"env": env, "active_thread_percentage": pct, "pinned_device_mem_limit": rendered,
            "devices": entries, "warnings": warnings}


def daemon_defaults(gpus, replicas, mode="per_gpu"):
    """What NVIDIA's device plugin sets on its MPS daemon for this many replicas, as mps_control input."""
    shares = replica_shares(gpus, replicas, mode)
    return {
        "default_active_thread_percentage": shares["active_thread_percentage"],
        "default_pinned_device_mem_limit": dict(
            (int(g["index"]), "%dM" % g["memory_per_replica_mib"]) for g in shares["gpus"]),
    }
