# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's CDI spec for NVIDIA GPUs: what it must list, how ``nvidia-ctk cdi list`` is read, and the record of
what cdi_spec verified (PRIVATE to gpuops.nvidia; its file is a _live_file stamp). No I/O here: cdi_spec runs the
tools and writes, gpu_node_plan reads the node; both decide with these functions.

Facts from NVIDIA's code (NVIDIA/nvidia-container-toolkit, tag v1.20.0, commit 5505e2f9; docs/cdi.md has the
details):

* ``nvidia-ctk cdi generate`` names each device once per ``--device-name-strategy`` (pkg/nvcdi/namer.go; default
  ``index`` then ``uuid``): a full GPU ``<i>``, ``gpu<i>`` (type-index) or its ``GPU-`` UUID; a MIG device ``<i>:<j>``,
  ``mig<i>:<j>`` or its ``MIG-`` UUID, where ``j`` is the device's position among the GPU's MIG device handles
  (go-nvlib ``VisitMigDevices``), not a GPU- or compute-instance id. A merged device ``all`` holds them all.
* A GPU in MIG mode gets no entry of its own, only its MIG devices' (pkg/nvcdi/lib-nvml.go); with none, it is
  absent. A spec with no device at all is refused when saved ("invalid device, empty device edits", or "invalid
  spec, no devices" without ``all``): exit 1, nothing written.
* ``nvidia-ctk cdi list`` prints ``nvidia.com/gpu=<name>`` lines and exits 0 even when a spec fails to load: the
  problems are ``level=warning`` lines on stderr (cmd/nvidia-ctk/cdi/list/list.go).

So a listing is checked by name: every full GPU and every MIG device UUID exactly, and for the position-numbered
MIG names, that each GPU has as many as it has MIG devices (the driver's handle order is not known here).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _live_file

KIND = "nvidia.com/gpu"
STRATEGIES = ("index", "uuid", "type-index")
DEFAULT_STRATEGIES = ["index", "uuid"]
DEFAULT_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
# what nvidia-ctk prints when the GPUs leave it no device to write (vendor/tags.cncf.io/container-device-interface,
# pkg/cdi/device.go and spec.go)
EMPTY_SPEC_ERRORS = ("invalid device, empty device edits", "invalid spec, no devices")
STAMP_SCHEMA = 1
# Beside the spec; no .yaml/.json ending, so `cdi list` (which reads hidden files too) never loads it.
STAMP_SUFFIX = ".gpuops-verified"
_LOG_PROBLEM = re.compile(r"level=(warning|error|fatal)")
# A spec of this kind, in YAML or JSON (a text match: the node's Python may have no YAML parser).
_KIND_LINE = re.compile(r'(^|[{,\s])"?kind"?\s*:\s*"?nvidia\.com/gpu"?\s*($|[,}\n])', re.MULTILINE)

# cdi_spec's parameters; gpu_node_plan takes the same ones (its ``cdi`` option) to check the recorded state.
ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["present", "absent"], default="present"),
    spec_path=dict(type="path", default="/var/run/cdi/nvidia.yaml"),
    spec_dirs=dict(type="list", elements="path", default=list(DEFAULT_SPEC_DIRS)),
    device_name_strategy=dict(type="list", elements="str", choices=list(STRATEGIES), default=list(DEFAULT_STRATEGIES)),
    nvidia_ctk_path=dict(type="path"),
    backup=dict(type="bool", default=False),
)


class CdiError(Exception):
    """A declaration or a result that cdi_spec refuses, or a failure of its run (_cdi_run); ``msg`` (also ``str()``)
    says what is wrong and what is valid, ``fields`` what the failure reports besides (``changed``, ``spec_path``,
    ``devices``): cdi_spec lists it in its ``errors``, the MIG boot script reports its message."""

    def __init__(self, msg, **fields):
        super(CdiError, self).__init__(msg)
        self.msg = msg
        self.fields = fields


def param_problems(spec_path, spec_dirs, strategies):
    """What is wrong with cdi_spec's parameters (a list of messages; empty when they are usable)."""
    problems = []
    if any("\x00" in path for path in [spec_path or ""] + list(spec_dirs or [])):
        return ["spec_path and spec_dirs must be paths without a NUL character"]
    if not spec_path or not os.path.isabs(spec_path):
        problems.append("spec_path %r must be an absolute path" % (spec_path,))
    elif os.path.splitext(spec_path)[1] not in (".yaml", ".json"):
        problems.append("spec_path %s must end in .yaml or .json: CDI readers (containerd, nvidia-ctk cdi list) load"
                        " only those files" % spec_path)
    bad_dirs = [d for d in spec_dirs if not os.path.isabs(d)]
    if bad_dirs or not spec_dirs:
        problems.append("spec_dirs must be absolute directories (default %s), got %s"
                        % (", ".join(DEFAULT_SPEC_DIRS), spec_dirs))
    elif spec_path and os.path.isabs(spec_path) and \
            os.path.normpath(os.path.dirname(spec_path)) not in [os.path.normpath(d) for d in spec_dirs]:
        problems.append("spec_path %s is not in a CDI spec directory (spec_dirs: %s): containerd would never read"
                        " it" % (spec_path, ", ".join(spec_dirs)))
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies or len(set(strategies)) != len(strategies):
        problems.append("device_name_strategy must be one or more distinct of %s, got %s"
                        % (", ".join(STRATEGIES), strategies))
    return problems


def _gpu_name(strategy, gpu):
    return {"index": "%d" % gpu["index"], "type-index": "gpu%d" % gpu["index"], "uuid": gpu["uuid"]}[strategy]


def expected_devices(gpus, strategies):
    """What the spec must list for these GPUs (gpu_info's facts): ``names``, the exact names (full GPUs, MIG device
    UUIDs, ``all``), ``counted``, {name prefix: how many} for the position-numbered MIG names (``0:`` -> 7), and
    ``devices``, how many GPUs and MIG devices that is."""
    exact, counted, devices = set(), {}, 0
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        if gpu.get("mig_mode_current") != "Enabled":
            exact.update(_gpu_name(s, gpu) for s in strategies)
            devices += 1
            continue
        migs = gpu.get("mig_devices") or []
        devices += len(migs)
        for strategy in strategies:
            if strategy == "uuid":   # a MIG device whose UUID NVML did not give is then "not the GPUs'": refused
                exact.update(m["uuid"] for m in migs if m.get("uuid"))
            elif migs:
                counted["%s%d:" % ("mig" if strategy == "type-index" else "", gpu["index"])] = len(migs)
    if exact or counted:
        exact.add("all")
    return {"names": sorted(exact), "counted": dict(sorted(counted.items())), "devices": devices}


def device_count(expected):
    """How many devices (full GPUs and MIG devices, not names) the spec describes, ``all`` not counted."""
    return expected.get("devices", 0)


def parse_list(stdout, stderr):
    """(device names of kind nvidia.com/gpu, problem lines) from ``nvidia-ctk cdi list``."""
    prefix = KIND + "="
    names = [line.strip()[len(prefix):] for line in (stdout or "").splitlines() if line.strip().startswith(prefix)]
    problems = [line.strip() for line in (stderr or "").splitlines() if _LOG_PROBLEM.search(line)]
    return names, problems


def listing_problems(names, expected):
    """How a listing differs from what the GPUs need (a list of messages; empty when it is exactly right)."""
    out = []
    listed = set(names)
    missing = [n for n in expected["names"] if n not in listed]
    extra, counted = [], {}
    for name in sorted(listed):
        if name in expected["names"]:
            continue
        prefix = next((p for p in expected["counted"] if name.startswith(p) and name[len(p):].isdigit()), None)
        if prefix is None:
            extra.append(name)
        else:
            counted[prefix] = counted.get(prefix, 0) + 1
    if missing:
        out.append("missing %s" % ", ".join(missing))
    for prefix, want in expected["counted"].items():
        if counted.get(prefix, 0) != want:
            out.append("%d MIG device name(s) %s<n> where the GPU has %d MIG device(s)"
                       % (counted.get(prefix, 0), prefix, want))
    if extra:
        out.append("devices the GPUs do not have: %s" % ", ".join(extra))
    if len(names) != len(listed):
        out.append("names listed more than once")
    return out


def has_gpu_kind(text):
    """Whether a spec's text declares devices of kind nvidia.com/gpu."""
    return bool(_KIND_LINE.search(text or ""))


def is_empty_spec_error(text):
    return any(message in (text or "") for message in EMPTY_SPEC_ERRORS)


def stamp_path(spec_path):
    """``/var/run/cdi/.nvidia.yaml.gpuops-verified``: beside the spec, so that it goes where the spec goes (a
    transient spec under /var/run is gone after a reboot, and so is its stamp)."""
    return _live_file.stamp_path(spec_path, STAMP_SUFFIX)


def stamp_inputs(params, expected, driver_version, ctk_identity):
    """Everything the spec's content depends on, as cdi_spec records it and gpu_node_plan compares it: the
    parameters, the devices the GPUs have, the driver (its version is in the spec's hooks and library names) and
    the nvidia-ctk binary (another version may write another spec)."""
    return {"schema": STAMP_SCHEMA, "spec_path": params["spec_path"], "state": params["state"],
            "device_name_strategy": list(params["device_name_strategy"]), "expected": expected,
            "driver_version": driver_version, "nvidia_ctk": ctk_identity}


def stamp_text(inputs, spec_digest):
    return _live_file.stamp_text(dict(inputs, spec_sha256=spec_digest), indent=1)


def stamp_reason(recorded_text, inputs, spec_digest):
    """Why the spec must be generated again (a short reason), or None when the record says the spec on the node is
    the one cdi_spec verified for exactly these inputs."""
    if recorded_text is None:
        return "no record of a verified CDI spec"
    recorded = _live_file.parse_stamp(recorded_text)
    if recorded is None:
        return "the record of the verified CDI spec is unreadable"
    if recorded.get("spec_sha256") != spec_digest:
        return "the CDI spec %s is not the one verified (changed or removed since)" % inputs["spec_path"]
    changed = sorted(k for k in inputs if recorded.get(k) != inputs[k])
    if "expected" in changed:
        return "the GPUs' devices changed (MIG layout or mode, GPUs)"
    if changed:
        return "changed since the CDI spec was verified: %s" % ", ".join(
            {"driver_version": "driver version", "nvidia_ctk": "nvidia-ctk binary"}.get(k, k) for k in changed)
    return None
