# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU's NVLink fabric facts, as NVML's GPU fabric info gives them, in the one shape both backends report: pure
functions, no I/O (the NVML backend reads the struct, the simulator keeps the same raw values; both call ``facts``).

NVML's GPU fabric info (nvmlDeviceGetGpuFabricInfoV with the v2 struct, else nvmlDeviceGetGpuFabricInfo, which has
no health mask) holds the cluster UUID (16 bytes), the clique id (unsigned 32 bit), the probe state, the probe status
(an nvmlReturn_t, "must be checked only if Probe state returns complete") and, from v2 on, the health mask. Facts
from nvml.h as NVIDIA/go-nvml@2f9e261 (gen/nvml/nvml.h) carries it; the GFM-state field (bits 14-15) is named by
pynvml of nvidia-ml-py 13.615.71 and not by that header.

The health mask is a set of fields, each ``width`` bits at ``shift`` (nvml.h's NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*
and _WIDTH_*, read with its NVML_GPU_FABRIC_HEALTH_GET macro). In every field 0 means the driver does not report it
(NOT_SUPPORTED). A GPU's fabric facts:

    {"state": "not_started" | "in_progress" | "completed", "status": "SUCCESS" or an NVML error name,
     "cluster_uuid": "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower case), "clique_id": int,
     "health_mask": "0x%08x" (NOT_SUPPORTED without the v2 struct),
     "health": {"degraded_bandwidth", "route_recovery_in_progress", "route_unhealthy",
                "access_timeout_recovery", "partition_assigned": True/False/NOT_SUPPORTED,
                "incorrect_configuration": "none" or what is wrong / NOT_SUPPORTED,
                "gfm_state": "connected" | "disconnected" | NOT_SUPPORTED,
                "unknown_bits": "0x..." (bits no field above names; absent when there are none)}
                (NOT_SUPPORTED as a whole without the v2 struct)}

or NOT_SUPPORTED where the GPU has no fabric (NVML answers NOT_SUPPORTED, or the state is NOT_SUPPORTED).

What nvidia-smi -q prints of the same in its "Fabric" section: State, Status, CliqueId, ClusterUUID and, under
Health, Bandwidth (Full / Degraded: degraded_bandwidth), Route Recovery in progress, Route Unhealthy, Access Timeout
Recovery (True / False), and on newer drivers Summary (the v3 struct's healthSummary, not read here); docs/gpu-info.md
has the table.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import uuid

# (NOT_SUPPORTED, and nvmlGpuFabricState_t's names: 0 NOT_SUPPORTED, the GPU has no fabric; 1..3 named there)
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_health import FABRIC_STATES, NOT_SUPPORTED

FABRIC_STATE_CODES = dict((name, code) for code, name in FABRIC_STATES.items())
UUID_LEN = 16       # NVML_GPU_FABRIC_UUID_LEN
CLIQUE_ID_MAX = 0xFFFFFFFF

_BOOL = {1: True, 2: False}     # the *_TRUE (1) and *_FALSE (2) values of the two-bit fields
# NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*: 1 NONE (a correct configuration), 2.. what is wrong
INCORRECT_CONFIGURATION = {1: "none", 2: "incorrect_sysguid", 3: "incorrect_chassis_sn", 4: "no_partition",
                           5: "insufficient_nvlinks", 6: "incompatible_gpu_fw", 7: "invalid_location",
                           8: "gpu_state_invalid"}
GFM_STATES = {1: "connected", 2: "disconnected"}
# Each field of the health mask: (name in the facts, shift, width, the values it names (code -> value)).
HEALTH_FIELDS = (
    ("degraded_bandwidth", 0, 0x3, _BOOL),
    ("route_recovery_in_progress", 2, 0x3, _BOOL),
    ("route_unhealthy", 4, 0x3, _BOOL),
    ("access_timeout_recovery", 6, 0x3, _BOOL),
    ("incorrect_configuration", 8, 0xF, INCORRECT_CONFIGURATION),
    ("partition_assigned", 12, 0x3, _BOOL),
    ("gfm_state", 14, 0x3, GFM_STATES),
)
HEALTH_FIELD_NAMES = tuple(f[0] for f in HEALTH_FIELDS)
# What a health field says is wrong, for the words of a problem: (field, value) -> words.
HEALTH_TROUBLE = {
    ("degraded_bandwidth", True): "NVLink bandwidth degraded",
    ("route_recovery_in_progress", True): "route recovery in progress",
    ("route_unhealthy", True): "a route is unhealthy",
    ("access_timeout_recovery", True): "access timeout recovery in progress",
    ("gfm_state", "disconnected"): "the global fabric manager is disconnected",
}


class FabricValueError(ValueError):
    """A fabric value out of NVML's range (the simulator's faults and the encoder refuse it, naming what is valid)."""


def cluster_uuid_text(raw):
    """NVML's 16-byte cluster UUID -> its canonical lower-case text (as GFD's uuid.FromBytes(...).String() gives
    it)."""
    data = bytes(bytearray(raw))
    if len(data) != UUID_LEN:
        raise FabricValueError("a cluster UUID is %d bytes; got %d" % (UUID_LEN, len(data)))
    return str(uuid.UUID(bytes=data))


def cluster_uuid_bytes(text):
    """A cluster UUID's text -> its 16 bytes (FabricValueError naming the form on bad input)."""
    try:
        return uuid.UUID(str(text)).bytes
    except (ValueError, TypeError, AttributeError):
        raise FabricValueError("a cluster UUID is 32 hex digits as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; got %r"
                               % (text,))


def decode_health(mask):
    """The health mask -> {field: value} (every field of HEALTH_FIELDS; 0 -> NOT_SUPPORTED; a code no name is known for
    -> "unknown (N)"), plus "unknown_bits" where bits outside the named fields are set."""
    out = {}
    known = 0
    for name, shift, width, values in HEALTH_FIELDS:
        code = (mask >> shift) & width
        known |= width << shift
        out[name] = NOT_SUPPORTED if code == 0 else values.get(code, "unknown (%d)" % code)
    rest = mask & ~known & 0xFFFFFFFF
    if rest:
        out["unknown_bits"] = "0x%08x" % rest
    return out


def encode_health(fields):
    """{field: value} -> the health mask (a field absent or NOT_SUPPORTED is 0). The inverse of ``decode_health`` on
    every mask whose bits are in named fields with named codes."""
    mask = 0
    for name, shift, dummy, values in HEALTH_FIELDS:
        value = fields.get(name, NOT_SUPPORTED)
        if value == NOT_SUPPORTED:
            continue
        codes = [c for c, v in values.items() if v == value and type(v) is type(value)]
        if not codes:
            raise FabricValueError("fabric health %s needs one of %s; got %r" % (
                name, ", ".join(repr(v) for v in sorted(values.values(), key=str)), value))
        mask |= codes[0] << shift
    return mask


def facts(state, status_name, cluster_uuid, clique_id, health_mask=None):
    """One GPU's fabric facts from NVML's values: ``state`` (nvmlGpuFabricState_t's code), ``status_name`` (the
    probe status by NVML's name, "SUCCESS" for 0), ``cluster_uuid`` (16 bytes), ``clique_id``, ``health_mask`` (None:
    the v1 struct, no mask). NOT_SUPPORTED for state 0 (or any code nvml.h does not name)."""
    if state not in FABRIC_STATES:
        return NOT_SUPPORTED
    return {
        "state": FABRIC_STATES[state],
        "status": status_name,
        "cluster_uuid": cluster_uuid_text(cluster_uuid),
        "clique_id": int(clique_id),
        "health_mask": NOT_SUPPORTED if health_mask is None else "0x%08x" % health_mask,
        "health": NOT_SUPPORTED if health_mask is None else decode_health(health_mask),
    }


def health_entry(fabric):
    """The health read's "fabric" entry ({"state", "status", "degraded_bandwidth"}, _gpu_health's shape) from the
    facts: the same read, the fields the health policy judges."""
    if not isinstance(fabric, dict):
        return fabric
    health = fabric.get("health")
    degraded = health.get("degraded_bandwidth", NOT_SUPPORTED) if isinstance(health, dict) else NOT_SUPPORTED
    return {"state": fabric["state"], "status": fabric["status"], "degraded_bandwidth": degraded}


def troubles(fabric):
    """What the facts' health says is wrong, in words (empty when nothing is, or the mask is not reported)."""
    health = fabric.get("health") if isinstance(fabric, dict) else None
    if not isinstance(health, dict):
        return []
    out = [HEALTH_TROUBLE[(name, health.get(name))] for name in HEALTH_FIELD_NAMES
           if (name, health.get(name)) in HEALTH_TROUBLE]
    wrong = health.get("incorrect_configuration")
    if wrong not in (NOT_SUPPORTED, "none", None):
        out.append("incorrect configuration (%s)" % wrong)
    return out
