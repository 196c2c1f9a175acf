# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""STAND-IN for ``nvidia-ctk`` -- NOT the real NVIDIA Container Toolkit CLI.

The real nvidia-ctk (Go, NVIDIA/nvidia-container-toolkit) cannot be installed on the machines these tests run
on. This script reproduces what ``nvidia-ctk runtime configure --runtime=containerd`` does, as documented in
the project's reference (shared/reference/containerd.md sections 1.1-1.7, which record the real tool's exact
outputs for v1.17.8, v1.18.0 and v1.20.0 on named inputs), so that the module can be tested end to end:

* the algorithm of section 1.3 (source load, version pick, CRI key, runtime options copied from the default
  runtime / runc / crun or the fallback, ``BinaryName``, default runtime, ``enable_cdi``, drop-in mode);
* the go-toml v1.9.5 serialisation of section 1.4 (comments dropped, keys sorted with plain values before
  tables, a blank line before every table, 2-space indent per level, double-quoted strings, empty parent
  tables written out), a non-atomic truncate-and-write, new files 0644 and parent directories 0755;
* the per-version behaviour of section 1.2/1.7, chosen with ``NVIDIA_CTK_STANDIN_VERSION`` (default 1.20.0):
  1.17.x edits in place (no ``--drop-in-config`` flag); 1.18.0 defaults to ``/etc/containerd/config.d/…``
  and drops existing ``imports``; 1.18.1+ uses ``conf.d`` and keeps imports; 1.20.0 fills in
  ``runtime_type``; ``--drop-in-config=""`` on 1.18+ reproduces the documented broken result;
  a config without ``version`` is treated as version 1, and ``--cdi.enabled`` on a version 1 config sets
  ``enable_cdi`` under ``[plugins.cri.containerd]``, where the real tool puts it (issue 36; its recorded outputs
  are tests/fixtures/nvidia-ctk/v1-*.toml).

What it does NOT reproduce: go-toml's own parser (Python's tomllib parses here, so error messages differ),
``--config-source=command``, hook mode, the crio/docker runtimes, and anything not documented in the reference.
Golden-output tests (tests/unit/plugins/module_utils/test_containerd.py) compare this script's output with the
reference's exact TOML; a mismatch there means the stand-in, not the module, is wrong.

Besides (issue 23), held to outputs of the real nvidia-ctk v1.20.0 recorded in tests/fixtures/nvidia-ctk/:
* ``config [--in-place] --set KEY=VALUE [--config FILE]`` and ``config default`` (below): nvidia-ctk's own
  config.toml as api/config/v1/toml.go writes it (go-toml with no indent, unset defaults as ``#key = value``
  lines, rewritten in place every time); only the keys the default config shows are accepted;
* ``cdi generate`` and ``cdi list`` for the simulated GPUs: tests/support/nvidia_ctk_cdi.py, beside this file;
* ``system create-dev-char-symlinks`` on the simulated node's root (issue 51): tests/support/nvidia_ctk_devchar.py.
Tests: tests/unit/test_nvidia_ctk_config_standin.py, tests/unit/test_nvidia_ctk_cdi_standin.py.
"""

import copy
import json
import os
import sys

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11 on the test machine
    import tomli as tomllib


def _collections_path():
    """Where ``ansible_collections.gpuops.nvidia`` is importable from: the repository's .collections beside this
    file, else an entry of ANSIBLE_COLLECTIONS_PATH (a copy of this script elsewhere, run by ansible-playbook)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    for path in [os.path.join(here, ".collections")] + os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
        if path and os.path.isdir(os.path.join(path, "ansible_collections", "gpuops", "nvidia", "plugins")):
            return path
    sys.stderr.write("stand-in nvidia-ctk: the gpuops.nvidia collection (for its config_version) is neither in the"
                     " repository beside this script nor in ANSIBLE_COLLECTIONS_PATH\n")
    sys.exit(1)


_COLLECTIONS = _collections_path()
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
# nvidia-ctk's version rule (parseVersion, NVIDIA/nvidia-container-toolkit v1.20.0 = 5505e2f9,
# pkg/config/engine/containerd/containerd.go; the same in v1.17.8 and v1.18.0): a missing or empty config is
# version 2, keys without `version` are version 1, an integer is itself, any other type is an error. The
# collection's config_version is that same rule, so the stand-in imports it instead of keeping a copy that could
# drift; only the error's wording below is nvidia-ctk's. (get_in is a plain walk down nested tables.)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (  # noqa: E402
    ContainerdConfigError, config_version, get_in)

VERSION_ENV = "NVIDIA_CTK_STANDIN_VERSION"
DEFAULT_VERSION = "1.20.0"
# Test hook: when set, every invocation's argv is appended (one JSON list per line) to this file.
CALL_LOG_ENV = "NVIDIA_CTK_STANDIN_CALL_LOG"


# --------------------------------------------------------------------------------------------------------
# go-toml v1.9.5 Tree.Marshal look-alike
# --------------------------------------------------------------------------------------------------------
def _bare(key):
    return key != "" and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)


def _key(key):
    return key if _bare(key) else _string(key)


def _string(value):
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):  # only reached inside arrays
        return "{" + ", ".join("%s = %s" % (_key(k), _value(v)) for k, v in sorted(value.items())) + "}"
    return _string(str(value))


def _is_table_array(value):
    return isinstance(value, list) and value and all(isinstance(v, dict) for v in value)


class Commented(object):
    """A value go-toml writes as a commented-out line (``#key = value``): nvidia-ctk's config defaults."""

    def __init__(self, value):
        self.value = value


def _write_tree(tree, path, depth, lines, step):
    simple = sorted(k for k, v in tree.items() if not isinstance(v, dict) and not _is_table_array(v))
    complex_ = sorted(k for k in tree if k not in simple)
    indent = step * depth
    for k in simple:
        if isinstance(tree[k], Commented):
            lines.append("%s#%s = %s" % (indent, _key(k), _value(tree[k].value)))
        else:
            lines.append("%s%s = %s" % (indent, _key(k), _value(tree[k])))
    for k in complex_:
        sub = path + [_key(k)]
        if isinstance(tree[k], dict):
            lines.append("")
            lines.append("%s[%s]" % (indent, ".".join(sub)))
            _write_tree(tree[k], sub, depth + 1, lines, step)
        else:
            for item in tree[k]:
                lines.append("")
                lines.append("%s[[%s]]" % (indent, ".".join(sub)))
                _write_tree(item, sub, depth + 1, lines, step)


def marshal(tree, indentation="  "):
    """Serialise ``tree`` the way go-toml v1.9.5 does (reference section 1.4); ``indentation`` is the encoder's
    per-level indent: two spaces by default (runtime configure), none for nvidia-ctk's own config (``config``)."""
    lines = []
    _write_tree(tree, [], 0, lines, indentation)
    if not lines:
        return ""
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------
# runtime configure (reference section 1.3)
# --------------------------------------------------------------------------------------------------------
class CtkError(Exception):
    pass


def _version_tuple(text):
    parts = []
    for part in text.split("-")[0].split("."):
        parts.append(int(part))
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts[:3])


def _cri_key(version):
    """nvidia-ctk's criRuntimePluginName (NVIDIA/nvidia-container-toolkit v1.20.0 = 5505e2f9,
    pkg/config/engine/containerd/containerd.go). Kept independent of the collection's cri_key on purpose: NVIDIA's
    maps every version but 1 and 2 (0 and negative ones too) to the version 3 key, where cri_key maps versions
    below 1 to "cri"; the stand-in models the real tool."""
    if version == 1:
        return "cri"
    if version == 2:
        return "io.containerd.grpc.v1.cri"
    return "io.containerd.cri.v1.runtime"


def _set(tree, keys, value):
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value


def _delete(tree, keys):
    node = get_in(tree, keys[:-1])
    if isinstance(node, dict):
        node.pop(keys[-1], None)


def _load(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CtkError("unable to load config: failed to load config: %s: %s" % (path, exc))


def _parse_version(tree):
    try:
        return config_version(tree)
    except ContainerdConfigError:
        raise CtkError("unable to load config: failed to parse config version: unsupported type for version field: %r"
                       % (tree["version"],))


def _default_runtime_options(tree, cri):
    runtimes = get_in(tree, ["plugins", cri, "containerd", "runtimes"]) or {}
    default = get_in(tree, ["plugins", cri, "containerd", "default_runtime_name"])
    candidates = []
    if isinstance(default, str) and default and not default.startswith("nvidia"):
        candidates.append(default)
    candidates += ["runc", "crun"]
    for name in candidates:
        if isinstance(runtimes.get(name), dict):
            return copy.deepcopy(runtimes[name])
    return {
        "runtime_type": "io.containerd.runc.v2",
        "runtime_root": "",
        "runtime_engine": "",
        "privileged_without_host_devices": False,
    }


def _add_runtime(tree, version, opts, ctk_version):
    cri = _cri_key(version)
    tree["version"] = version
    runtime = _default_runtime_options(tree, cri)
    if ctk_version >= (1, 20, 0) and not runtime.get("runtime_type"):
        runtime["runtime_type"] = "io.containerd.runc.v2"
    options = runtime.get("options")
    if not isinstance(options, dict):
        options = {}
        runtime["options"] = options
    options["BinaryName"] = opts["runtime_path"]
    if version == 1:
        options["Runtime"] = opts["runtime_path"]
    _set(tree, ["plugins", cri, "containerd", "runtimes", opts["name"]], runtime)
    default_keys = ["plugins", cri, "containerd", "default_runtime_name"]
    if opts["set_as_default"]:
        _set(tree, default_keys, opts["name"])
    elif get_in(tree, default_keys) == opts["name"]:
        _delete(tree, default_keys)
    if opts["cdi"]:
        # EnableCDI: the CRI plugin's table for version 2+ (config.go), but [plugins.cri.containerd] for version 1
        # (config_v1.go, the same at v1.17.8, v1.18.0 and v1.20.0), a table whose enable_cdi containerd's CRI
        # plugin never reads; recorded from the real tool in tests/fixtures/nvidia-ctk/v1-*.toml.
        _set(tree, ["plugins", cri] + (["containerd"] if version == 1 else []) + ["enable_cdi"], True)


def _write(path, text):
    """os.Create + write: truncates in place (not atomic), keeps an existing file's mode; zero bytes delete."""
    if text == "":
        if os.path.exists(path):
            os.remove(path)
        return
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    with open(path, "w") as handle:
        handle.write(text)


def configure(opts, ctk_version):
    source = _load(opts["config"])
    version = _parse_version(source)
    drop_in = opts["drop_in"]
    outputs = []  # (path, text)
    if ctk_version < (1, 18, 0) or version == 1:
        tree = copy.deepcopy(source)
        _add_runtime(tree, version, opts, ctk_version)
        target = opts["config"] if ctk_version < (1, 18, 0) or not drop_in else drop_in
        outputs.append((target, marshal(tree)))
        return outputs
    cri = _cri_key(version)
    top = copy.deepcopy(source)
    drop_tree = {"version": version}
    section = get_in(source, ["plugins", cri])
    if isinstance(section, dict):
        drop_tree["plugins"] = {cri: copy.deepcopy(section)}
    # steps 5-7 on the drop-in copy; the default runtime options come from the source tree
    runtime_source = copy.deepcopy(source)
    _add_runtime(runtime_source, version, opts, ctk_version)
    drop_tree.setdefault("plugins", {})[cri] = runtime_source["plugins"][cri]
    if drop_in:
        pattern = os.path.join(os.path.dirname(drop_in), "*.toml")
        import_pattern = "/etc/containerd/conf.d/*.toml" if opts["dry_run"] else pattern
        if ctk_version == (1, 18, 0):
            imports = []  # v1.18.0 drops existing imports (PR #1382)
        else:
            imports = list(top.get("imports") or [])
        if import_pattern not in imports:
            imports.append(import_pattern)
        if not top:
            top["version"] = version
        top["imports"] = imports
        outputs.append((drop_in, marshal(drop_tree)))
        outputs.append((opts["config"], marshal(top)))
    else:
        # --drop-in-config="" on 1.18+: the drop-in lands on config.toml and is then overwritten by the
        # top-level content with a self-glob import (reference section 1.7): no nvidia runtime at all.
        pattern = os.path.join(os.path.dirname(opts["config"]), "*.toml")
        imports = [] if ctk_version == (1, 18, 0) else list(top.get("imports") or [])
        if pattern not in imports:
            imports.append(pattern)
        if not top:
            top["version"] = version
        top["imports"] = imports
        outputs.append((opts["config"], marshal(drop_tree)))
        outputs.append((opts["config"], marshal(top)))
    return outputs


# --------------------------------------------------------------------------------------------------------
# config (nvidia-ctk's own config.toml: cmd/nvidia-ctk/config/config.go, api/config/v1/toml.go, v1.20.0)
# --------------------------------------------------------------------------------------------------------
# `nvidia-ctk config default` as recorded (tests/fixtures/nvidia-ctk/config-default.toml; `ldconfig` is the
# building host's: "@/sbin/ldconfig", or "@/sbin/ldconfig.real" where that exists), less its commented lines.
DEFAULT_CONFIG = {
    "disable-require": False,
    "supported-driver-capabilities": "compat32,compute,display,graphics,ngx,utility,video",
    "nvidia-container-cli": {"environment": [], "ldconfig": "@/sbin/ldconfig", "load-kmods": True},
    "nvidia-container-runtime": {
        "log-level": "info", "mode": "auto", "runtimes": ["runc", "crun"],
        "modes": {
            "cdi": {"annotation-prefixes": ["cdi.k8s.io/"], "default-kind": "nvidia.com/gpu",
                    "spec-dirs": ["/etc/cdi", "/var/run/cdi"]},
            "csv": {"mount-spec-path": "/etc/nvidia-container-runtime/host-files-for-container.d"},
            "legacy": {"cuda-compat-mode": "ldconfig"},
        },
    },
    "nvidia-container-runtime-hook": {"path": "nvidia-container-runtime-hook", "skip-mode-detection": False},
    "nvidia-ctk": {"path": "nvidia-ctk"},
}
# Toml.commentDefaults: written as `#key = value` unless the key was loaded or set.
COMMENTED_DEFAULTS = {
    "swarm-resource": "DOCKER_RESOURCE_GPU",
    "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
    "accept-nvidia-visible-devices-as-volume-mounts": False,
    "nvidia-container-cli.root": "/run/nvidia/driver",
    "nvidia-container-cli.path": "/usr/bin/nvidia-container-cli",
    "nvidia-container-cli.debug": "/var/log/nvidia-container-toolkit.log",
    "nvidia-container-cli.ldcache": "/etc/ld.so.cache",
    "nvidia-container-cli.no-cgroups": False,
    "nvidia-container-cli.user": "root:video",
    "nvidia-container-runtime.debug": "/var/log/nvidia-container-runtime.log",
}


def _flatten(tree, prefix=""):
    for key, value in tree.items():
        full = prefix + key
        yield full, value
        if isinstance(value, dict):
            yield from _flatten(value, full + ".")


def _config_schema():
    """{dotted key: type} of the settings `--set` accepts here: the default config's and the commented ones
    (nvidia-ctk checks the Config struct, which has a few more; those are refused here)."""
    schema = {}
    for key, value in list(_flatten(DEFAULT_CONFIG)) + list(COMMENTED_DEFAULTS.items()):
        schema[key] = dict if isinstance(value, dict) else type(value)
    for key in list(schema):
        parts = key.split(".")
        for n in range(1, len(parts)):
            schema.setdefault(".".join(parts[:n]), dict)
    return schema


def _parse_bool(text):
    """Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise CtkError('invalid format: strconv.ParseBool: parsing %s: invalid syntax' % _go_quote(text))


def _set_value(item, separator):
    """setFlagToKeyValue: ``key[=value]`` -> (key, typed value)."""
    key, has_value, text = item.partition("=")
    schema = _config_schema()
    walked = []
    for part in key.split("."):
        walked.append(part)
        if ".".join(walked) not in schema:
            raise CtkError("invalid --set option %s: invalid config option: undefined field: %s"
                           % (item, _go_quote(part)))
    kind = schema[key]
    try:
        if not has_value:
            if kind is bool:
                return key, True
            raise CtkError("invalid format: expected key=value; got %s" % item)
        if kind is bool:
            return key, _parse_bool(text)
        if kind is list:
            for sep in (separator, ","):
                if sep in text:
                    return key, text.split(sep)
            return key, [text]
        if kind is str:
            return key, text
    except CtkError as exc:
        raise CtkError("invalid --set option %s: %s" % (item, exc))
    raise CtkError("unsupported type for %s (%s)" % (item, kind.__name__))


def config_command(argv):
    opts = {"config": os.environ.get("NVIDIA_CTK_CONFIG_FILE_PATH") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or "/etc", "nvidia-container-runtime", "config.toml"),
        "sets": [], "in_place": False, "output": "", "separator": ":"}
    names = {"config-file": "config", "config": "config", "c": "config", "output": "output", "o": "output",
             "set-list-separator": "separator"}
    i = 0
    if argv[:1] in (["default"], ["create-default"], ["generate-default"]):
        argv = ["--config-file="] + argv[1:]
    while i < len(argv):
        name, has_value, value = argv[i].lstrip("-").partition("=")
        if name in ("in-place", "i"):
            opts["in_place"] = (value.lower() in ("true", "1")) if has_value else True
        elif name == "set" or name in names:
            if not has_value:
                i += 1
                if i >= len(argv):
                    raise CtkError("flag needs an argument: -%s" % name)
                value = argv[i]
            if name == "set":
                opts["sets"].append(value)
            else:
                opts[names[name]] = value
        else:
            raise CtkError("flag provided but not defined: -%s" % name)
        i += 1
    if opts["config"] and os.path.exists(opts["config"]):
        try:
            tree = _load(opts["config"])
        except CtkError as exc:
            raise CtkError("unable to create config: failed to load specified config file: %s"
                           % str(exc).rpartition(": ")[2])
        loaded = set(key for key, _v in _flatten(tree))
    else:
        tree, loaded = copy.deepcopy(DEFAULT_CONFIG), set()
    for item in opts["sets"]:
        key, value = _set_value(item, opts["separator"])
        parts = key.split(".")
        _set(tree, parts, value)
        loaded.add(key)
    for key, value in COMMENTED_DEFAULTS.items():
        parts = key.split(".")
        current = get_in(tree, parts)
        if key not in loaded and (current is None or current == value or current == ""):
            _set(tree, parts, Commented(value))
    text = marshal(tree, indentation="")
    output = opts["config"] if opts["in_place"] else opts["output"]
    if not output:
        sys.stdout.write(text)
        return
    if os.path.dirname(output):
        os.makedirs(os.path.dirname(output), 0o755, exist_ok=True)
    with open(output, "w") as handle:  # os.Create: truncated in place, not atomic; always rewritten
        handle.write(text)


# --------------------------------------------------------------------------------------------------------
# command line (urfave/cli style flags: --flag=value or --flag value; booleans as --flag or --flag=true)
# --------------------------------------------------------------------------------------------------------
STRING_FLAGS = {
    "runtime": "runtime", "config": "config", "drop-in-config": "drop_in",
    "nvidia-runtime-name": "name", "nvidia-runtime-path": "runtime_path", "runtime-path": "runtime_path",
    "config-source": "config_source", "config-mode": "config_mode", "executable-path": "executable_path",
}
BOOL_FLAGS = {
    "dry-run": "dry_run", "nvidia-set-as-default": "set_as_default", "set-as-default": "set_as_default",
    "cdi.enabled": "cdi", "cdi.enable": "cdi", "enable-cdi": "cdi",
}


def _go_quote(text):
    """Go's %q for the plain strings used here: a double-quoted string with JSON-style escapes."""
    return json.dumps(text)


def parse_args(argv, ctk_version):
    opts = {
        "runtime": "docker", "config": "/etc/containerd/config.toml", "name": "nvidia",
        "runtime_path": "nvidia-container-runtime", "dry_run": False, "set_as_default": False, "cdi": False,
        "config_source": "file", "config_mode": "", "executable_path": "",
        "drop_in": ("/etc/containerd/config.d/99-nvidia.toml" if ctk_version == (1, 18, 0)
                    else "/etc/containerd/conf.d/99-nvidia.toml"),
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            raise CtkError("unexpected argument %r" % arg)
        name, has_value, value = arg.lstrip("-").partition("=")
        if name == "drop-in-config" and ctk_version < (1, 18, 0):
            raise CtkError("flag provided but not defined: -drop-in-config")
        if name in STRING_FLAGS:
            if not has_value:
                i += 1
                if i >= len(argv):
                    raise CtkError("flag needs an argument: -%s" % name)
                value = argv[i]
            elif value == "" and ctk_version == (1, 18, 0):
                raise CtkError("flag needs an argument: -%s" % name)
            opts[STRING_FLAGS[name]] = value
        elif name in BOOL_FLAGS:
            opts[BOOL_FLAGS[name]] = (value.lower() in ("true", "1")) if has_value else True
        else:
            raise CtkError("flag provided but not defined: -%s" % name)
        i += 1
    if opts["runtime"] != "containerd":
        raise CtkError("stand-in: only --runtime=containerd is reproduced, got %r" % opts["runtime"])
    if opts["config_source"] != "file":
        raise CtkError("stand-in: only --config-source=file is reproduced")
    if opts["runtime_path"] == "nvidia-container-runtime":
        opts["runtime_path"] = "/usr/bin/nvidia-container-runtime"
    if not os.path.isabs(opts["runtime_path"]):
        raise CtkError("the NVIDIA runtime path %s is not an absolute path" % _go_quote(opts["runtime_path"]))
    if opts["drop_in"] and not os.path.isabs(opts["drop_in"]):
        raise CtkError("the drop-in-config path %s is not an absolute path" % _go_quote(opts["drop_in"]))
    return opts


def _cdi_module():
    """tests/support/nvidia_ctk_cdi.py, beside this script (``cdi generate`` / ``cdi list``)."""
    return _sibling("nvidia_ctk_cdi")


def _sibling(name):
    """tests/support/<name>.py, beside this script (nvidia_ctk_cdi: ``cdi``; nvidia_ctk_devchar: ``system
    create-dev-char-symlinks``)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    log = os.environ.get(CALL_LOG_ENV)
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps(argv) + "\n")
    version_text = os.environ.get(VERSION_ENV, DEFAULT_VERSION)
    ctk_version = _version_tuple(version_text)
    if argv[:1] in (["--version"], ["-v"], ["version"]):
        sys.stdout.write("NVIDIA Container Toolkit CLI version %s\ncommit: stand-in (not the real nvidia-ctk)\n"
                         % version_text)
        return 0
    while argv and argv[0] in ("--debug", "-d", "--quiet") or argv[:1] and argv[0].startswith("--config="):
        argv = argv[1:]  # global flags (logging, the toolkit config path): no effect on what is reproduced
    if argv[:1] == ["cdi"]:
        return _cdi_module().main(argv[1:])
    if argv[:2] == ["system", "create-dev-char-symlinks"]:
        return _sibling("nvidia_ctk_devchar").main(argv[2:])
    if argv[:1] == ["config"]:
        try:
            config_command(argv[1:])
        except CtkError as exc:
            sys.stderr.write('level=error msg=%s\n' % json.dumps(str(exc)))
            return 1
        return 0
    if argv[:2] != ["runtime", "configure"]:
        sys.stderr.write("stand-in nvidia-ctk: only `runtime configure`, `cdi generate`, `cdi list`, `config`,"
                         " `system create-dev-char-symlinks` and `--version` are reproduced\n")
        return 1
    try:
        opts = parse_args(argv[2:], ctk_version)
        outputs = configure(opts, ctk_version)
    except CtkError as exc:
        sys.stderr.write('level=error msg="%s"\n' % exc)
        return 1
    if opts["dry_run"]:
        texts = [text for _path, text in outputs]
        sys.stdout.write("\n".join(texts))
        return 0
    for path, text in outputs:
        _write(path, text)
        sys.stderr.write('level=info msg="Wrote updated config to %s"\n' % path)
    sys.stderr.write('level=info msg="It is recommended that containerd daemon be restarted."\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
