# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's configuration, read and analysed for containerd_runtime (PRIVATE to gpuops.nvidia).

Pure: no subprocess, no file reads or writes, no imports of the collection. The module's parameters and their
defaults (``ARGUMENT_SPEC``, shared with gpu_node_plan), TOML reading (never writing: the output is nvidia-ctk's),
the config version and CRI plugin key rules of nvidia-ctk, trap detection on the live config (``analyse_source``),
the checks of containerd's merged view of a candidate (``check_candidate_dump``, ``effective_changes``,
``systemd_cgroup_findings``) and the comparison of live and candidate files (``plan_files``, ``diff_entries``).

nvidia-ctk's rules cited below are those of NVIDIA/nvidia-container-toolkit v1.20.0,
pkg/config/engine/containerd/containerd.go (``parseVersion``, ``criRuntimePluginName``) and
pkg/config/engine/engine.go (``GetDefaultRuntimeOptions``); docs/containerd.md describes the traps.
Target-side code: Python 3.9+. TOML is read with tomllib (3.11+), else tomli, else tomlkit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os
import re

DEFAULT_CONFIG = "/etc/containerd/config.toml"
DEFAULT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
DEFAULT_RUNTIME_PATH = "/usr/bin/nvidia-container-runtime"
CTK_PACKAGE = "nvidia-container-toolkit"
CONTAINERD_PACKAGE = "containerd"
# nvidia-ctk 1.18.0's wrong default drop-in (NVIDIA/nvidia-container-toolkit#1404, fixed in 1.18.1).
WRONG_DROP_IN_1180 = "/etc/containerd/config.d/99-nvidia.toml"
EDIT_MODES = ("auto", "drop_in", "in_place")
CRI_PLUGIN_IDS = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
# containerd_runtime's options (but backup), shared with gpu_node_plan: the stamp compares parameters, so both
# must resolve them with the same defaults.
ARGUMENT_SPEC = dict(
    config_path=dict(type="path", default=DEFAULT_CONFIG),
    drop_in_path=dict(type="path", default=DEFAULT_DROP_IN),
    edit_mode=dict(type="str", default="auto", choices=list(EDIT_MODES)),
    runtime_name=dict(type="str", default="nvidia"),
    set_as_default=dict(type="bool", default=False),
    cdi_enabled=dict(type="bool", default=False),
    runtime_path=dict(type="path", default=DEFAULT_RUNTIME_PATH),
    nvidia_ctk_path=dict(type="path"),
    containerd_path=dict(type="path"),
    distribution=dict(type="str", default="auto", choices=["auto", "containerd", "k3s", "rke2"]),
)
RUNTIME_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Characters that would need escaping inside a TOML string; refused in paths so that the
# temporary-directory mapping below works on plain quoted strings.
_UNSAFE_PATH_CHARS = re.compile(r"[\"'\\\x00-\x1f\x7f]")
K3S_RKE2_MARKERS = ("/var/lib/rancher/k3s/", "/var/lib/rancher/rke2/")


class ContainerdConfigError(Exception):
    """Something the user must fix; the message says what is wrong and what is valid; nothing changed."""


class TomlLibraryMissing(ContainerdConfigError):
    """No TOML reader on the target (Python < 3.11 without tomli or tomlkit)."""


# ------------------------------------------------------------------------------------------------------
# TOML reading (never writing: the output is nvidia-ctk's)
# ------------------------------------------------------------------------------------------------------
def toml_reader():
    """(loads, its error class, the library's name) of the first TOML reader found; (None, None, None) without."""
    try:
        import tomllib  # Python 3.11+

        return tomllib.loads, tomllib.TOMLDecodeError, "tomllib"
    except ImportError:
        pass
    try:
        import tomli

        return tomli.loads, tomli.TOMLDecodeError, "tomli"
    except ImportError:
        pass
    try:
        import tomlkit
        from tomlkit.exceptions import TOMLKitError

        return (lambda text: tomlkit.parse(text).unwrap()), TOMLKitError, "tomlkit"
    except ImportError:
        pass
    return None, None, None


def parse_toml(text, path):
    """Parse ``text`` (the content of ``path``) into plain dicts, or raise ContainerdConfigError."""
    loads, error, _name = toml_reader()
    if loads is None:
        raise TomlLibraryMissing("reading %s needs a TOML parser: Python 3.11+ (tomllib) or the tomli package" % path)
    try:
        return loads(text)
    except RecursionError:
        raise ContainerdConfigError("%s nests too deeply to parse (past Python's recursion limit); it is left "
                                    "untouched." % path)
    except error as exc:
        hint = ""
        if "{{" in text:
            hint = (" It looks like a Go template (k3s/rke2 config.toml.tmpl): nvidia-ctk cannot parse templates;"
                    " see docs/containerd.md (k3s and rke2).")
        raise ContainerdConfigError("%s is not valid TOML (%s); it is left untouched.%s" % (path, exc, hint))


# ------------------------------------------------------------------------------------------------------
# Pure helpers
# ------------------------------------------------------------------------------------------------------
def cri_key(version):
    """The CRI runtime plugin key nvidia-ctk and containerd use for a config ``version``."""
    if version <= 1:
        return "cri"
    if version == 2:
        return "io.containerd.grpc.v1.cri"
    return "io.containerd.cri.v1.runtime"


def config_version(tree, path="config"):
    """nvidia-ctk's ``parseVersion``, the rule ``runtime configure`` uses (NVIDIA/nvidia-container-toolkit
    v1.20.0, pkg/config/engine/containerd/containerd.go): a missing or empty config -> 2 (its
    ``defaultConfigVersion``), keys but no ``version`` -> 1, an integer ``version`` -> that integer, any other
    type -> an error. The nvidia-ctk stand-in of the tests imports this function, so the two cannot drift apart."""
    if not tree:
        return 2
    if "version" not in tree:
        return 1
    version = tree["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ContainerdConfigError("%s: `version` must be an integer (2 for containerd 1.6/1.7, 3 or 4 for 2.x),"
                                    " got %r" % (path, version))
    return version


def get_in(tree, keys, default=None):
    node = tree
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def runtimes_of(tree, version):
    runtimes = get_in(tree, ["plugins", cri_key(version), "containerd", "runtimes"], {})
    return runtimes if isinstance(runtimes, dict) else {}


def source_runtime_name(tree, version):
    """Which runtime table nvidia-ctk deep-copies for the new runtime (engine.go GetDefaultRuntimeOptions).

    The current ``default_runtime_name`` unless it starts with ``nvidia``, then ``runc``, then ``crun``;
    None means nvidia-ctk's fallback (runc v2 options with no SystemdCgroup) is used.
    """
    runtimes = runtimes_of(tree, version)
    default = get_in(tree, ["plugins", cri_key(version), "containerd", "default_runtime_name"])
    names = []
    if isinstance(default, str) and default and not default.startswith("nvidia"):
        names.append(default)
    names += ["runc", "crun"]
    for name in names:
        if isinstance(runtimes.get(name), dict):
            return name
    return None


def systemd_cgroup_runtimes(tree, version):
    """Names of runtimes with ``options.SystemdCgroup = true``."""
    out = []
    for name, table in sorted(runtimes_of(tree, version).items()):
        if isinstance(table, dict) and get_in(table, ["options", "SystemdCgroup"]) is True:
            out.append(name)
    return out


def disabled_cri(tree):
    disabled = tree.get("disabled_plugins") or []
    if not isinstance(disabled, list):
        return []
    return [p for p in disabled if p in CRI_PLUGIN_IDS]


def validate_params(config_path, drop_in_path, edit_mode, runtime_name, runtime_path):
    """Check the user's parameters before anything runs; raise ContainerdConfigError with what is valid."""
    if edit_mode not in EDIT_MODES:
        raise ContainerdConfigError("edit_mode must be one of %s, got %r" % (", ".join(EDIT_MODES), edit_mode))
    paths = [("config_path", config_path), ("runtime_path", runtime_path)]
    if edit_mode != "in_place":
        paths.append(("drop_in_path", drop_in_path))
    for name, value in paths:
        if not value or not os.path.isabs(value):
            raise ContainerdConfigError("%s must be an absolute path, got %r" % (name, value))
        if _UNSAFE_PATH_CHARS.search(value):
            raise ContainerdConfigError("%s must not contain quotes, backslashes or control characters, got %r"
                                        % (name, value))
        if value.endswith("/"):
            raise ContainerdConfigError("%s must name a file, not a directory: %r" % (name, value))
    if edit_mode != "in_place":
        if os.path.normpath(drop_in_path) == os.path.normpath(config_path):
            raise ContainerdConfigError("drop_in_path must differ from config_path (both are %r); use"
                                        " edit_mode=in_place to edit config_path itself" % config_path)
        if not drop_in_path.endswith(".toml"):
            raise ContainerdConfigError("drop_in_path must end in .toml (nvidia-ctk imports <its directory>/*.toml),"
                                        " got %r" % drop_in_path)
    if not RUNTIME_NAME_RE.match(runtime_name or ""):
        raise ContainerdConfigError("runtime_name must be letters, digits, '.', '_' or '-' (starting with a letter or"
                                    " digit), got %r" % (runtime_name,))


def analyse_source(tree, path, exists):
    """Trap detection on the live top-level config. Returns (version, errors, warnings)."""
    errors, warnings = [], []
    version = config_version(tree, path)
    cri_off = disabled_cri(tree)
    if exists and tree and "version" not in tree:
        msg = ("%s has no `version` key, so containerd and nvidia-ctk read it as a deprecated version 1 config;"
               " nvidia-ctk would write a version 1 runtime that does not take effect"
               " (NVIDIA/nvidia-container-toolkit#1430)." % path)
        if cri_off:
            msg += (" It also disables the CRI plugin (disabled_plugins = %s): this is Docker's containerd.io"
                    " default, and Kubernetes cannot use this containerd." % _toml_list(cri_off))
        msg += (" Replace it with a version 2 config (containerd 1.6/1.7: `containerd config default`) or version 3"
                " (containerd 2.x) that keeps your settings, then run again.")
        errors.append(msg)
    elif cri_off:
        errors.append("%s disables the CRI plugin (disabled_plugins = %s): Kubernetes cannot use this containerd and"
                      " an nvidia runtime there would never take effect. Remove %s from disabled_plugins (after"
                      " checking nothing else relies on it) and run again."
                      % (path, _toml_list(cri_off), _toml_list(cri_off)))
    imports = tree.get("imports") or []
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        errors.append("%s: `imports` must be a list of paths, got %r" % (path, imports))
    if any(marker in path for marker in K3S_RKE2_MARKERS):
        warnings.append("%s is under a k3s/rke2 data directory: k3s and rke2 regenerate config.toml at every start,"
                        " so this change will be lost. Use k3s/rke2's own nvidia runtime detection or"
                        " `default-runtime: nvidia` in their config.yaml (see docs/containerd.md)." % path)
    if version > 4:
        warnings.append("%s has version %d; the newest known containerd config version is 4 (containerd 2.3)"
                        % (path, version))
    return version, errors, warnings


def version_1_drop_in_error(path, drop_in_path, ctk_version_text):
    """Why a ``version = 1`` config is refused in drop-in mode (nvidia-ctk 1.18+), before nvidia-ctk runs."""
    return ("%s is a version 1 config (`version = 1`): nvidia-ctk %s writes a version 1 config whole to the drop-in %s"
            " and adds no import for it, so neither the runtime nor enable_cdi would take effect"
            " (NVIDIA/nvidia-container-toolkit#1430). Convert it to a version 2 config (`version = 2`, plugin"
            " `io.containerd.grpc.v1.cri`; `containerd config default` on 1.6/1.7 shows the layout) that keeps your"
            " settings, then run again; nothing changed" % (path, ctk_version_text, drop_in_path))


# nvidia-ctk's EnableCDI for a version 1 config sets plugins.cri.containerd.enable_cdi (ConfigV1.EnableCDI,
# pkg/config/engine/containerd/config_v1.go, the same at NVIDIA/nvidia-container-toolkit v1.17.8, v1.18.0 and
# v1.20.0), but containerd's CRI plugin reads enable_cdi from its own table, [plugins.cri] in version 1
# (PluginConfig.EnableCDI, containerd/containerd v1.7.34 pkg/cri/config/config.go): CDI would stay off.
_CRI_V1_HEADER = re.compile(r"^([ \t]*)\[[ \t]*plugins[ \t]*\.[ \t]*(?:cri|\"cri\")[ \t]*\][ \t]*(?:#.*)?$", re.M)


def set_cri_v1_enable_cdi(text, path):
    """``text`` (a version 1 config as nvidia-ctk wrote it) with ``enable_cdi = true`` as the first key of its
    ``[plugins.cri]`` table, where containerd's CRI plugin reads it. Raises ContainerdConfigError when the file has
    no such table header or the result does not parse with that setting (nothing changed then)."""
    match = _CRI_V1_HEADER.search(text)
    if match is None:
        raise ContainerdConfigError("nvidia-ctk's version 1 output for %s has no [plugins.cri] table to set"
                                    " enable_cdi = true in (containerd's CRI plugin does not read the enable_cdi"
                                    " nvidia-ctk sets under [plugins.cri.containerd]); nothing changed. Convert"
                                    " the config to version 2 (`version = 2`)." % path)
    line = "\n%s  enable_cdi = true" % match.group(1)
    out = text[:match.end()] + line + text[match.end():]
    if get_in(parse_toml(out, "%s with [plugins.cri] enable_cdi = true" % path), ["plugins", "cri", "enable_cdi"]) \
            is not True:
        raise ContainerdConfigError("could not set enable_cdi = true under [plugins.cri] in %s; nothing changed."
                                    " Convert the config to version 2 (`version = 2`)." % path)
    return out


def _toml_list(items):
    return "[" + ", ".join('"%s"' % i for i in items) + "]"


# ------------------------------------------------------------------------------------------------------
# Where nvidia-ctk puts a drop-in and what it imports (paths only; nothing is read)
# ------------------------------------------------------------------------------------------------------
def wrong_drop_in_1180(drop_in_path):
    """Where nvidia-ctk 1.18.0 would have put this drop-in: a sibling ``config.d`` instead of its directory
    (its default was /etc/containerd/config.d/99-nvidia.toml, NVIDIA/nvidia-container-toolkit#1404)."""
    directory = os.path.dirname(drop_in_path)
    if os.path.basename(directory) == "config.d":
        return None
    return os.path.join(os.path.dirname(directory), "config.d", os.path.basename(drop_in_path))


def import_pattern(drop_in_path):
    """The ``imports`` entry nvidia-ctk adds for a drop-in file: ``<dir>/*.toml``."""
    return os.path.join(os.path.dirname(drop_in_path), "*.toml")


# ------------------------------------------------------------------------------------------------------
# A candidate (nvidia-ctk's output, containerd's merged view of it) against the live files
# ------------------------------------------------------------------------------------------------------
def lost_imports(before_tree, after_tree):
    """Imports of the live config that the candidate no longer has (nvidia-ctk 1.18.0 drops them, PR #1382)."""
    after = set(list_strings(after_tree or {}, "imports"))
    return [i for i in list_strings(before_tree or {}, "imports") if i not in after]


def list_strings(tree, key):
    value = tree.get(key) or []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def effective_cri_tree(top_tree, drop_tree, version):
    """Approximate the merged config when containerd cannot be asked: the drop-in's CRI section replaces the
    top-level one (containerd 1.x semantics; nvidia-ctk's drop-in holds a full copy, so 2.x gives the same)."""
    merged = copy.deepcopy(top_tree or {})
    key = cri_key(version)
    section = get_in(drop_tree or {}, ["plugins", key])
    if isinstance(section, dict):
        merged.setdefault("plugins", {})[key] = copy.deepcopy(section)
    return merged


def check_candidate_dump(dump, runtime_name, runtime_path, set_as_default, cdi_enabled, containerd_version):
    """What containerd's merged view of the candidate says. Returns (problems, warnings); a problem refuses it."""
    problems, warnings = [], []
    version = config_version(dump, "config dump")
    if disabled_cri(dump):
        problems.append("the merged config disables the CRI plugin (disabled_plugins = %s)"
                        % _toml_list(disabled_cri(dump)))
    section = get_in(dump, ["plugins", cri_key(version)])
    if not isinstance(section, dict):
        problems.append("containerd %s shows no CRI plugin section (%s) in the merged config"
                        % (containerd_version or "", cri_key(version)))
        return problems, warnings
    runtimes = runtimes_of(dump, version)
    runtime = runtimes.get(runtime_name)
    if not isinstance(runtime, dict):
        problems.append("containerd %s does not see runtime %r in the merged config (for example a version 3 config"
                        " is silently dropped by containerd 1.6/1.7 before 1.6.32/1.7.17)"
                        % (containerd_version or "", runtime_name))
    elif get_in(runtime, ["options", "BinaryName"]) != runtime_path:
        problems.append("containerd sees runtime %r with BinaryName %r, expected %r"
                        % (runtime_name, get_in(runtime, ["options", "BinaryName"]), runtime_path))
    default = get_in(section, ["containerd", "default_runtime_name"])
    if set_as_default and default != runtime_name:
        problems.append("the merged config's default_runtime_name is %r, expected %r" % (default, runtime_name))
    if default and default not in runtimes:
        problems.append("default_runtime_name %r names no configured runtime: containerd would fail to start"
                        " (no corresponding runtime configured in containerd.runtimes)" % default)
    if cdi_enabled and "enable_cdi" in section and section["enable_cdi"] is not True:
        problems.append("containerd %s reads enable_cdi = %r from the merged config's CRI plugin (%s): CDI would stay"
                        " off" % (containerd_version or "", section["enable_cdi"], cri_key(version)))
    elif cdi_enabled and section.get("enable_cdi") is not True:
        warnings.append("containerd %s does not know enable_cdi (CDI support needs containerd 1.7 or newer); the"
                        " setting is written but ignored" % (containerd_version or ""))
    return problems, warnings


def _flatten(node, prefix, out):
    if isinstance(node, dict):
        for key in sorted(node):
            _flatten(node[key], prefix + [key], out)
    else:
        out[".".join(prefix)] = node
    return out


def effective_changes(before, after, runtime_name, version_before, version_after):
    """Settings of the merged config that change, other than the ones this module is asked to set.

    ``before``/``after`` are merged views (config dumps). Returns a sorted list of "key: old -> new" strings.
    """
    if version_before != version_after:
        return []
    key = cri_key(version_after)
    old = _flatten(get_in(before, ["plugins", key], {}), [], {})
    new = _flatten(get_in(after, ["plugins", key], {}), [], {})
    ours = ("containerd.runtimes.%s." % runtime_name, "containerd.runtimes.%s" % runtime_name)
    own_keys = ("containerd.default_runtime_name", "enable_cdi")
    out = []
    for flat in sorted(set(old) | set(new)):
        if flat.startswith(ours) or flat in own_keys:
            continue
        if old.get(flat) != new.get(flat):
            out.append("plugins.%s.%s: %r -> %r" % (key, flat, old.get(flat), new.get(flat)))
    return out


def systemd_cgroup_findings(before, after, version, runtime_name, source_runtime):
    """SystemdCgroup traps. ``before``/``after`` are merged views. Returns (errors, warnings)."""
    errors, warnings = [], []
    had = systemd_cgroup_runtimes(before, version) if before else []
    has = systemd_cgroup_runtimes(after, version)
    after_runtimes = runtimes_of(after, version)
    for name in had:
        if name not in has and (name == runtime_name or name in after_runtimes):
            errors.append("runtime %r would lose SystemdCgroup = true (nvidia-ctk replaces the %r table with a copy of"
                          " %s, and containerd 1.x replaces whole plugin sections from drop-ins). Set SystemdCgroup ="
                          " true on the runtime nvidia-ctk copies (%s) in the config, then run again."
                          % (name, runtime_name, source_runtime or "its fallback", source_runtime or "runc"))
    if runtime_name not in has:
        others = [n for n in has if n != runtime_name]
        if others:
            warnings.append("runtime %r gets no SystemdCgroup = true although %s %s it: nvidia-ctk copied %s. With"
                            " kubelet's systemd cgroup driver, GPU pods can fail (NVIDIA/nvidia-docker#1788)."
                            % (runtime_name, ", ".join(others), "has" if len(others) == 1 else "have",
                               source_runtime or "its fallback"))
        elif source_runtime is None:
            warnings.append("the config defines no default, runc or crun runtime, so nvidia-ctk gives %r its fallback"
                            " options without SystemdCgroup. If kubelet uses the systemd cgroup driver (kubeadm's"
                            " default), define runc with SystemdCgroup = true in the config first"
                            " (NVIDIA/nvidia-docker#1788)." % runtime_name)
    return errors, warnings


def plan_files(before, after):
    """Compare live texts with candidate texts, per path (None = file absent).

    Returns a list of {"path", "action": create|update|delete|none, "before", "after"} in write order
    (drop-ins before the top-level file that imports them: the order of ``after``).
    """
    plan = []
    for path, new in after.items():
        old = before.get(path)
        if new is None:
            action = "none" if old is None else "delete"
        elif old is None:
            action = "create"
        elif old != new:
            action = "update"
        else:
            action = "none"
        plan.append({"path": path, "action": action, "before": old, "after": new})
    return plan


def diff_entries(plan):
    """Ansible diff dicts (one per changed file) for ``--diff``."""
    out = []
    for item in plan:
        if item["action"] == "none":
            continue
        out.append({
            "before_header": item["path"] if item["before"] is not None else "%s (absent)" % item["path"],
            "after_header": item["path"] if item["after"] is not None else "%s (absent)" % item["path"],
            "before": item["before"] or "",
            "after": item["after"] or "",
        })
    return out
