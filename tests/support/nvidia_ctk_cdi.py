# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""STAND-IN for ``nvidia-ctk cdi generate`` and ``nvidia-ctk cdi list`` -- NOT NVIDIA's tool.

Loaded by tests/support/nvidia_ctk_standin.py (the ``nvidia-ctk`` stand-in's entry point). It reproduces the shape
of what the real nvidia-ctk v1.20.0 (NVIDIA/nvidia-container-toolkit@5505e2f9, tag v1.20.0) printed on the lent H100
machine (tests/fixtures/nvidia-ctk/, README.md there), for the GPUs of the simulator (the state file named by
GPUOPS_SIMULATED_GPUS), MIG devices included. Every rule below names the NVIDIA code it follows (paths in that
repository at that commit; ``vendor/`` paths are the libraries it vendors):

* devices (pkg/nvcdi/lib-nvml.go ``getDeviceSpecGeneratorsForAllDevices``): one entry per name of every GPU whose
  MIG mode is not enabled, then one per name of every MIG device; a GPU with MIG enabled gets no entry of its own,
  so a MIG-enabled GPU without MIG devices gets none at all;
* names (pkg/nvcdi/namer.go): per ``--device-name-strategy`` in the order given (default ``index`` then ``uuid``):
  ``index`` -> ``<i>`` and ``<i>:<j>``, ``type-index`` -> ``gpu<i>`` and ``mig<i>:<j>``, ``uuid`` -> the GPU's or the
  MIG device's UUID; ``i`` is the GPU's NVML index, ``j`` the MIG device's index on it
  (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go ``VisitMigDevices``). The simulator numbers a
  GPU's MIG devices 0, 1, ... in its own order (GPU instances by placement, then compute instances); the order real
  NVML gives ``nvmlDeviceGetMigDeviceHandleByIndex`` is the driver's and was not read (MIG stayed disabled);
* edits (internal/platform-support/dgpu/nvml.go): a GPU gets ``/dev/nvidia<minor>``; a MIG device its parent's
  node and the ``/dev/nvidia-caps/nvidia-cap<N>`` nodes of its GPU instance and compute instance
  (internal/nvcaps/nvcaps.go), N from /proc/driver/nvidia-caps/mig-minors, whose lines on the lent machine were
  ``gpu<g>/gi<i>/access 3 + 135 g + 9 i`` and ``gpu<g>/gi<i>/ci<c>/access 4 + 135 g + 9 i + c``
  (h100-machine.txt); the simulator's GPU minor number is its index;
* the ``all`` device (pkg/nvcdi/transform/merged-device.go) merges every device's edits; the spec is then
  deduplicated and sorted (pkg/nvcdi/transform/{simplify,deduplicate,sorter}.go): devices by name, device nodes
  and mounts by path depth then path, byte order;
* cdiVersion is the lowest the content needs (vendor/tags.cncf.io/container-device-interface/specs-go/version.go
  ``MinimumRequiredVersion``): 0.3.0, 0.5.0 once a device name starts with a digit;
* output: YAML as gopkg.in/yaml.v3 writes it (``---`` first, 4-space indent, ``"0"`` and ``"0:1"`` quoted), or compact
  JSON; written through a temporary file in the same directory and renamed, mode 0644
  (vendor/.../pkg/cdi/spec.go ``write``, pkg/nvcdi/spec/spec.go ``Save``);
* the failures of the real tool: no NVML (no simulator here) -> the "failed to initialize NVML" error recorded
  without a driver; no device at all (say every GPU in MIG mode without MIG devices) -> the spec is refused at
  save, "invalid device, empty device edits" for the empty ``all`` device ("invalid spec, no devices" with
  --no-all-device), the output file untouched (both seen with NVIDIA's NVML mock, mig-enabled-no-devices.txt);
* ``cdi list`` (cmd/nvidia-ctk/cdi/list/list.go, vendor/.../pkg/cdi/{cache,spec-dirs,spec}.go): every ``*.yaml`` and
  ``*.json`` file of each ``--spec-dir`` (hidden ones too), later directories winning; the same device in two specs
  of one directory is dropped from both; a spec that fails to load is reported and skipped; exit code 0 always.

Host-specific content (driver libraries, binaries, firmware, config files, device majors, the hook path) is the lent
machine's, as its real spec recorded it (LENT_HOST below), with the simulator's driver version. Not reproduced:
DRM nodes and their hooks (that machine had no /dev/dri), other discovery modes (csv, wsl, management, ...),
``--device-id`` other than ``all``, ``--driver-root``/``--dev-root``, feature flags, the coherent/noncoherent split,
the debug log, and the YAML parser's own error wording in ``cdi list``.
"""

import json
import os
import re
import sys
import tempfile
import time

VENDOR = "nvidia.com"
CLASS = "gpu"
DEFAULT_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
STRATEGIES = ("index", "uuid", "type-index")
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
FILE_MODE_RW = 0o666       # /dev/nvidia* on the lent machine (fileMode: 438)
FILE_MODE_CAP = 0o444      # MIG access caps: world-readable, as nvidia-cap2 (monitor) there; GI/CI nodes not seen

# The lent H100 machine's driver installation as its real `cdi generate` found it (h100-nvidia.yaml):
# libraries are (name, SONAME suffix or None when the SONAME is the versioned file name), all with their SONAME and
# `.so` links present on the host.
LENT_HOST = {
    "lib_dir": "/usr/local/nvidia/lib64",
    "bin_dir": "/usr/local/nvidia/bin",
    "firmware_dir": "/usr/local/nvidia/firmware/nvidia",
    "firmware": ["gsp_ga10x.bin", "gsp_tu10x.bin"],
    "binaries": ["nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-debugdump", "nvidia-persistenced",
                 "nvidia-smi"],
    "libraries": [
        ("libEGL_nvidia", "0"), ("libGLESv1_CM_nvidia", "1"), ("libGLESv2_nvidia", "2"), ("libGLX_nvidia", "0"),
        ("libcuda", "1"), ("libcudadebugger", "1"), ("libnvcuvid", "1"), ("libnvidia-allocator", "1"),
        ("libnvidia-cfg", "1"), ("libnvidia-eglcore", None), ("libnvidia-encode", "1"), ("libnvidia-fbc", "1"),
        ("libnvidia-glcore", None), ("libnvidia-glsi", None), ("libnvidia-glvkspirv", None),
        ("libnvidia-gpucomp", None), ("libnvidia-ml", "1"), ("libnvidia-nvvm", "4"), ("libnvidia-opencl", "1"),
        ("libnvidia-opticalflow", "1"), ("libnvidia-pkcs11-openssl3", None), ("libnvidia-ptxjitcompiler", "1"),
        ("libnvidia-rtcore", None), ("libnvidia-tls", None), ("libnvoptix", "1"), ("libvdpau_nvidia", "1"),
    ],
    # (host path, container path)
    "config_files": [("/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json"),
                     ("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json")],
    # (path, major, minor); /dev/nvidia-modeset was absent there
    "control_nodes": [("/dev/nvidia-uvm", 238, 0), ("/dev/nvidia-uvm-tools", 238, 1), ("/dev/nvidiactl", 195, 255)],
    "gpu_major": 195,
    "caps_major": 241,
    # nvidia-cdi-hook was not on the PATH: the default path is written (api/config/v1/config.go)
    "hook_path": "/usr/bin/nvidia-cdi-hook",
}

NO_NVML = ("failed to generate CDI spec: failed to create device CDI specs: failed to construct device spec "
           "generators: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")


class CdiError(Exception):
    pass


def log(level, message):
    sys.stderr.write('level=%s msg=%s\n' % (level, json.dumps(message)))


# --------------------------------------------------------------------------------------------------------
# the simulated GPUs
# --------------------------------------------------------------------------------------------------------
def read_gpus():
    """(driver version, [gpu facts]) of the simulator, or CdiError(NO_NVML) when there is none."""
    path = os.environ.get("GPUOPS_SIMULATED_GPUS")
    if not path or not os.path.isfile(path):
        raise CdiError(NO_NVML)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
    facts = SimulatedBackend(path).read_all()
    return facts["driver_version"], sorted(facts["gpus"], key=lambda g: g["index"])


def cap_minor(gpu_minor, gi_id, ci_id=None):
    base = 3 + 135 * gpu_minor + 9 * gi_id
    return base if ci_id is None else base + 1 + ci_id


def _node(path, major, minor, mode, host=None):
    node = {"path": path}
    if host:
        node["hostPath"] = host
    if major:
        node["major"] = major
    if minor:
        node["minor"] = minor
    node["fileMode"] = mode
    node["permissions"] = "rwm"
    return node


def gpu_names(strategies, index, uuid):
    return [{"index": "%d" % index, "type-index": "gpu%d" % index, "uuid": uuid}[s] for s in strategies]


def mig_names(strategies, index, mig_index, uuid):
    return [{"index": "%d:%d" % (index, mig_index), "type-index": "mig%d:%d" % (index, mig_index),
             "uuid": uuid}[s] for s in strategies]


def device_specs(gpus, strategies, host=None):
    """The device entries before simplification, in the real tool's order: full GPUs, then MIG devices."""
    host = host or LENT_HOST
    out = []
    for gpu in gpus:
        if gpu.get("mig_mode_current") == "Enabled":
            continue
        node = _node("/dev/nvidia%d" % gpu["index"], host["gpu_major"], gpu["index"], FILE_MODE_RW)
        for name in gpu_names(strategies, gpu["index"], gpu["uuid"]):
            out.append({"name": name, "containerEdits": {"deviceNodes": [dict(node)]}})
    for gpu in gpus:
        if gpu.get("mig_mode_current") != "Enabled":
            continue
        parent = _node("/dev/nvidia%d" % gpu["index"], host["gpu_major"], gpu["index"], FILE_MODE_RW)
        for j, mig in enumerate(gpu.get("mig_devices") or []):
            gi = cap_minor(gpu["index"], mig["gi_id"])
            ci = cap_minor(gpu["index"], mig["gi_id"], mig["ci_id"])
            nodes = [parent,
                     _node("/dev/nvidia-caps/nvidia-cap%d" % gi, host["caps_major"], gi, FILE_MODE_CAP),
                     _node("/dev/nvidia-caps/nvidia-cap%d" % ci, host["caps_major"], ci, FILE_MODE_CAP)]
            for name in mig_names(strategies, gpu["index"], j, mig["uuid"]):
                out.append({"name": name, "containerEdits": {"deviceNodes": [dict(n) for n in nodes]}})
    return out


def _hook(*args):
    return {"hookName": "createContainer", "path": LENT_HOST["hook_path"],
            "args": ["nvidia-cdi-hook"] + list(args), "env": ["NVIDIA_CTK_DEBUG=false"]}


def _mount(host_path, container_path=None):
    return {"hostPath": host_path, "containerPath": container_path or host_path, "options": list(MOUNT_OPTIONS)}


def common_edits(driver_version, host=None):
    """The spec-level edits (pkg/nvcdi/common-nvml.go, driver-nvml.go, internal/discover/symlinks.go)."""
    host = host or LENT_HOST
    lib = host["lib_dir"]
    links = []
    for name, soname in sorted(host["libraries"]):
        versioned = "%s.so.%s" % (name, driver_version)
        soname_file = "%s.so.%s" % (name, soname) if soname else versioned
        special = {"libcuda": "libcuda.so.1::%s/libcuda.so" % lib,
                   "libGLX_nvidia": "%s::%s/libGLX_indirect.so.0" % (versioned, lib),
                   "libnvidia-opticalflow": "libnvidia-opticalflow.so.1::%s/libnvidia-opticalflow.so" % lib}
        candidates = [special.get(name)]
        if soname:
            candidates.append("%s::%s/%s" % (versioned, lib, soname_file))
        candidates.append("%s::%s/%s.so" % (soname_file, lib, name))
        for link in candidates:
            if link and link not in links:
                links.append(link)
    hooks = []
    if any(name == "libnvidia-allocator" for name, _s in host["libraries"]):
        hooks.append(_hook("create-symlinks", "--link", "../libnvidia-allocator.so.1::%s/gbm/nvidia-drm_gbm.so" % lib))
    hooks.append(_hook("create-symlinks", *[a for link in links for a in ("--link", link)]))
    hooks.append(_hook("enable-cuda-compat", "--host-driver-version=%s" % driver_version))
    hooks.append(_hook("update-ldcache", "--folder", lib))
    hooks.append(_hook("disable-device-node-modification"))
    hooks.append(_hook("update-application-profile"))
    mounts = [_mount(h, c) for h, c in host["config_files"]]
    mounts += [_mount("%s/%s" % (host["bin_dir"], b)) for b in host["binaries"]]
    mounts += [_mount("%s/%s.so.%s" % (lib, name, driver_version)) for name, _s in host["libraries"]]
    mounts += [_mount("%s/%s/%s" % (host["firmware_dir"], driver_version, f)) for f in host["firmware"]]
    return {
        "env": ["NVIDIA_CTK_LIBCUDA_DIR=%s" % lib, "NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [_node(p, major, minor, FILE_MODE_RW) for p, major, minor in host["control_nodes"]],
        "hooks": hooks,
        "mounts": mounts,
    }


# --------------------------------------------------------------------------------------------------------
# simplify, merge, version (pkg/nvcdi/transform, vendor/.../specs-go/version.go)
# --------------------------------------------------------------------------------------------------------
def _key(entity):
    return json.dumps(entity, sort_keys=True)


def _dedupe(items):
    seen, out = set(), []
    for item in items:
        if _key(item) not in seen:
            seen.add(_key(item))
            out.append(item)
    return out


def _depth_then(path):
    return (os.path.normpath(path).count("/"), path.encode("utf-8"))


def _sorted_edits(edits):
    out = {}
    for field in ("env", "deviceNodes", "hooks", "mounts"):
        values = _dedupe(edits.get(field) or [])
        if field == "deviceNodes":
            values.sort(key=lambda n: _depth_then(n["path"]))
        elif field == "mounts":
            values.sort(key=lambda m: _depth_then(m["containerPath"]))
        if values:
            out[field] = values
    return out


def simplify(spec):
    """dedupe, drop spec-level entities from devices (unless that empties one), sort devices and edits."""
    spec["containerEdits"] = _sorted_edits(spec["containerEdits"])
    common = set(_key(e) for field in ("env", "deviceNodes", "hooks", "mounts")
                 for e in spec["containerEdits"].get(field, []))
    devices = []
    for device in spec["devices"]:
        edits = _sorted_edits(device["containerEdits"])
        kept = dict((f, [e for e in v if _key(e) not in common]) for f, v in edits.items())
        kept = dict((f, v) for f, v in kept.items() if v)
        devices.append(dict(device, containerEdits=kept or edits))
    spec["devices"] = sorted(devices, key=lambda d: d["name"].encode("utf-8"))
    return spec


def merge_all(spec, name="all"):
    if any(d["name"] == name for d in spec["devices"]):
        return spec
    merged = {}
    for device in spec["devices"]:
        for field, values in device["containerEdits"].items():
            merged.setdefault(field, []).extend(values)
    spec["devices"].append({"name": name, "containerEdits": merged})
    return simplify(spec)


def minimum_version(spec):
    version = "0.3.0"
    devices = spec.get("devices") or []
    edits = [d.get("containerEdits") or {} for d in devices] + [spec.get("containerEdits") or {}]
    if any(any(m.get("type") for m in e.get("mounts") or []) for e in edits):
        version = "0.4.0"
    if (any(str(d.get("name", ""))[:1].isdigit() for d in devices)
            or any(any(n.get("hostPath") for n in e.get("deviceNodes") or []) for e in edits)):
        version = "0.5.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in spec["kind"].partition("/")[2]:
        version = "0.6.0"
    if any(e.get("additionalGids") or e.get("intelRdt") for e in edits):
        version = "0.7.0"
    return version


def build_spec(driver_version, gpus, strategies, no_all=False, vendor=VENDOR, klass=CLASS):
    spec = {"cdiVersion": None, "kind": "%s/%s" % (vendor, klass),
            "devices": device_specs(gpus, strategies), "containerEdits": common_edits(driver_version)}
    spec = simplify(spec)
    if not no_all:
        spec = merge_all(spec)
    spec["cdiVersion"] = minimum_version(spec)
    return spec


# --------------------------------------------------------------------------------------------------------
# gopkg.in/yaml.v3 and encoding/json look-alikes for the spec's shapes
# --------------------------------------------------------------------------------------------------------
_BASE60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
_INT = re.compile(r"^[-+]?(0b[01_]+|0o?[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$")
_OLD_BOOL = {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off", "OFF"}
_RESERVED = {"", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE"}


def _yaml_string(text):
    if text in _RESERVED or text in _OLD_BOOL or _INT.match(text) or _FLOAT.match(text) or _BASE60.match(text):
        return json.dumps(text)           # yaml.v3 stringv: would not read back as a string -> double-quoted
    plain = (text[0] not in "-?:,[]{}#&*!|>'\"%@`" or (text[0] in "-?:" and len(text) > 1 and text[1] != " "))
    plain = plain and ": " not in text and " #" not in text and not text.endswith(":") and text == text.strip()
    plain = plain and all(" " <= c <= "~" for c in text)
    return text if plain else "'%s'" % text.replace("'", "''")


def _yaml_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _yaml_string(str(value))


def _yaml_map(node, indent, lines, child=None):
    """A block mapping with keys at ``indent`` and its nested blocks at ``child`` (indent + 4; in a sequence item,
    whose keys follow "- ", the sequence's indent + 4: yaml.v3's emitter counts from the dash)."""
    pad = " " * indent
    child = indent + 4 if child is None else child
    for key, value in node.items():
        if isinstance(value, dict):
            lines.append("%s%s:" % (pad, key))
            _yaml_map(value, child, lines)
        elif isinstance(value, list):
            if not value:
                lines.append("%s%s: []" % (pad, key))
            else:
                lines.append("%s%s:" % (pad, key))
                _yaml_seq(value, child, lines)
        else:
            lines.append("%s%s: %s" % (pad, key, _yaml_scalar(value)))


def _yaml_seq(items, indent, lines):
    pad = " " * indent
    for item in items:
        if isinstance(item, dict):
            sub = []
            _yaml_map(item, indent + 2, sub, child=indent + 4)
            sub[0] = pad + "- " + sub[0][indent + 2:]
            lines.extend(sub)
        else:
            lines.append("%s- %s" % (pad, _yaml_scalar(item)))


def to_yaml(spec):
    lines = ["---"]
    _yaml_map(spec, 0, lines)
    return "\n".join(lines) + "\n"


def to_json(spec):
    text = json.dumps(spec, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# --------------------------------------------------------------------------------------------------------
# cdi generate
# --------------------------------------------------------------------------------------------------------
def _parse(argv, strings, slices, bools):
    opts = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            raise CdiError("stand-in: unexpected argument %r" % arg)
        name, has_value, value = arg.lstrip("-").partition("=")
        if name in bools:
            opts[bools[name]] = value.lower() in ("true", "1") if has_value else True
        elif name in strings or name in slices:
            if not has_value:
                i += 1
                if i >= len(argv):
                    raise CdiError("flag needs an argument: -%s" % name)
                value = argv[i]
            if name in slices:
                opts.setdefault(slices[name], []).append(value)
            else:
                opts[strings[name]] = value
        else:
            raise CdiError("stand-in: flag -%s of nvidia-ctk is not reproduced (or not defined)" % name)
        i += 1
    return opts


def _write_atomic(path, text):
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, 0o755, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix="spec.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    os.chmod(path, 0o644)


def invalid_reason(spec):
    """What the CDI library says when it refuses to write or load this spec, or None."""
    names = set()
    for device in spec["devices"]:
        problem = _device_name_problem(device["name"])
        if problem:
            return "failed add device %s: %s" % (json.dumps(device["name"]), problem)
        if not any(device["containerEdits"].get(f) for f in ("env", "deviceNodes", "hooks", "mounts")):
            return "failed add device %s: invalid device, empty device edits" % json.dumps(device["name"])
        if device["name"] in names:
            return "invalid spec, multiple device %s" % json.dumps(device["name"])
        names.add(device["name"])
    if not names:
        return "invalid spec, no devices"
    return None


def generate(argv):
    opts = _parse(argv, {"output": "output", "format": "format", "vendor": "vendor", "cdi-vendor": "vendor",
                         "class": "class", "cdi-class": "class", "mode": "mode", "discovery-mode": "mode"},
                  {"device-name-strategy": "strategies", "device-id": "device_ids", "device-ids": "device_ids"},
                  {"no-all-device": "no_all"})
    output = opts.get("output", os.environ.get("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH", ""))
    fmt = opts.get("format", "yaml").lower()
    if fmt not in ("yaml", "json"):
        raise CdiError("invalid output format: %s" % fmt)
    if opts.get("mode", "auto") not in ("auto", "nvml"):
        raise CdiError("stand-in: only --mode=auto/nvml is reproduced")
    strategies = opts.get("strategies") or ["index", "uuid"]
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise CdiError("invalid device name strategy: %s" % strategy)
    if (opts.get("device_ids") or ["all"]) != ["all"]:
        raise CdiError("stand-in: only --device-id=all is reproduced")
    ext = os.path.splitext(output)[1].lower()
    if ext in (".json", ".yaml", ".yml") and "format" not in opts:
        fmt = "json" if ext == ".json" else "yaml"
    driver_version, gpus = read_gpus()
    log("info", "Using %s/libnvidia-ml.so.%s" % (LENT_HOST["lib_dir"], driver_version))
    log("info", "Auto-detected mode as 'nvml'")
    log("info", "Using driver version %s" % driver_version)
    spec = build_spec(driver_version, gpus, strategies, opts.get("no_all", False),
                      opts.get("vendor", VENDOR), opts.get("class", CLASS))
    problem = invalid_reason(spec)
    log("info", "Generated CDI spec with version %s" % spec["cdiVersion"])
    if problem:
        raise CdiError("failed to write spec: invalid CDI Spec: %s" % problem)
    if not output:
        sys.stdout.write(to_json(spec) if fmt == "json" else to_yaml(spec))
        return 0
    if os.path.splitext(output)[1] not in (".yaml", ".json"):
        output += "." + fmt
    # the file's extension, not --format, picks the encoding (vendor/.../pkg/cdi/spec.go write)
    _write_atomic(os.path.abspath(output), to_yaml(spec) if output.endswith(".yaml") else to_json(spec))
    return 0


# --------------------------------------------------------------------------------------------------------
# cdi list
# --------------------------------------------------------------------------------------------------------
_SPEC_KEYS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_KEYS = {"name", "annotations", "containerEdits"}
_EDIT_KEYS = {"env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids"}
_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")


def _alnum(c):
    return c.isascii() and c.isalnum()


def _device_name_problem(name):
    if not name:
        return "invalid (empty) device name"
    if not _alnum(name[0]):
        return "invalid class %s, should start with a letter or digit" % json.dumps(name)
    for c in name[1:-1]:
        if not (_alnum(c) or c in "_-.:"):
            return "invalid character '%s' in device name %s" % (c, json.dumps(name))
    if not _alnum(name[-1]):
        return "invalid name %s, should end with a letter or digit" % json.dumps(name)
    return None


def _version_tuple(text):
    return tuple(int(p) for p in text.split("."))


def load_spec(path):
    """The spec's devices as {name: spec}, or CdiError with the library's message (its parser's wording aside)."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        if path.endswith(".json"):
            raw = json.loads(data.decode("utf-8"))
        else:
            import yaml
            raw = yaml.safe_load(data.decode("utf-8"))
    except Exception as exc:  # the parser's own message; NVIDIA's is sigs.k8s.io/yaml's
        raise CdiError("failed to load CDI Spec failed to parse CDI Spec %s: failed to unmarshal CDI Spec: %s"
                       % (json.dumps(path), str(exc).replace("\n", " ")))
    if raw is None:
        raise CdiError("failed to load CDI Spec failed to parse CDI Spec %s, no Spec data" % json.dumps(path))
    if not isinstance(raw, dict) or set(raw) - _SPEC_KEYS or not isinstance(raw.get("devices") or [], list) or any(
            not isinstance(d, dict) or set(d) - _DEVICE_KEYS or not isinstance(d.get("name", ""), str)
            or set(d.get("containerEdits") or {}) - _EDIT_KEYS for d in raw.get("devices") or []):
        raise CdiError("failed to load CDI Spec failed to parse CDI Spec %s: failed to unmarshal CDI Spec: "
                       "unknown field or wrong type" % json.dumps(path))
    version = str(raw.get("cdiVersion", ""))
    if version not in _VERSIONS:
        raise CdiError("failed to load CDI Spec invalid CDI Spec: invalid version %s" % json.dumps(version))
    spec = {"kind": str(raw.get("kind", "")), "devices": raw.get("devices") or [],
            "containerEdits": raw.get("containerEdits") or {}, "annotations": raw.get("annotations")}
    needed = minimum_version(spec)
    if _version_tuple(needed) > _version_tuple(version):
        raise CdiError("failed to load CDI Spec invalid CDI Spec: the spec version must be at least v%s" % needed)
    problem = invalid_reason({"devices": [dict(d, containerEdits=d.get("containerEdits") or {})
                                          for d in spec["devices"]]})
    if problem:
        raise CdiError("failed to load CDI Spec invalid CDI Spec: %s" % problem)
    return dict(("%s=%s" % (spec["kind"], d["name"]), path) for d in spec["devices"])


def list_devices(spec_dirs):
    """({qualified name: path}, {path: [error]}) as the CDI cache's refresh builds them."""
    devices, priorities, errors, conflicts = {}, {}, {}, set()
    for priority, directory in enumerate(spec_dirs):
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path = os.path.normpath(os.path.join(directory, name))
            if os.path.isdir(path) or os.path.splitext(name)[1] not in (".json", ".yaml"):
                continue
            try:
                found = load_spec(path)
            except CdiError as exc:
                errors.setdefault(path, []).append(str(exc))
                continue
            for qualified in found:
                if qualified in devices and priorities[qualified] == priority:
                    message = "conflicting device %s (specs %s, %s)" % (
                        json.dumps(qualified), json.dumps(path), json.dumps(devices[qualified]))
                    errors.setdefault(path, []).append(message)
                    errors.setdefault(devices[qualified], []).append(message)
                    conflicts.add(qualified)
                    continue
                devices[qualified] = path
                priorities[qualified] = priority
    for qualified in conflicts:
        devices.pop(qualified, None)
    return devices, errors


def list_command(argv):
    opts = _parse(argv, {}, {"spec-dir": "spec_dirs"}, {})
    hang = os.environ.get("NVIDIA_CTK_STANDIN_HANG_ON_LIST")
    if hang:  # tests only: announce the listing in that file, then wait to be killed (not in the real tool)
        with open(hang, "w") as handle:
            handle.write("pgid %d listing %s\n" % (os.getpgrp(), " ".join(opts.get("spec_dirs") or [])))
        time.sleep(600)
    spec_dirs = opts.get("spec_dirs")
    if not spec_dirs:
        env = os.environ.get("NVIDIA_CTK_CDI_SPEC_DIRS")
        spec_dirs = [env] if env else list(DEFAULT_SPEC_DIRS)
    devices, errors = list_devices(spec_dirs)
    if errors:
        log("warning", "The following registry errors were reported:")
        for path in sorted(errors):  # NVIDIA's order is a Go map's (random); sorted here
            log("warning", "%s: [%s]" % (path, " ".join(errors[path])))
    log("info", "Found %d CDI devices" % len(devices))
    for name in sorted(devices):
        sys.stdout.write(name + "\n")
    return 0


def main(argv):
    """``cdi generate ...`` / ``cdi list ...`` (argv after ``cdi``) -> exit code."""
    commands = {"generate": generate, "list": list_command}
    if not argv or argv[0] not in commands:
        log("error", "stand-in: only `cdi generate` and `cdi list` are reproduced")
        return 1
    try:
        return commands[argv[0]](argv[1:])
    except CdiError as exc:
        log("error", str(exc))
        return 1
