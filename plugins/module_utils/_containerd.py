# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's NVIDIA runtime, configured by nvidia-ctk on private copies (PRIVATE to gpuops.nvidia).

nvidia-ctk (``nvidia-ctk runtime configure --runtime=containerd``) is the engine: NVIDIA keeps it in step with
containerd. But it always rewrites its files, has no "changed" signal, strips comments, writes non-atomically,
and its ``--dry-run`` output is not a diff (shared/reference/containerd.md 1.4, 1.6). So this module never lets
it touch live files:

1. read and check the live files (pure trap detection: ``analyse_source``);
2. copy them into a private temporary directory that mirrors their absolute paths, run nvidia-ctk there
   (``NvidiaCtkRunner.compute``), map the temporary import path back to the real one (``substitute``);
3. validate the candidate with the containerd binary that will load it (``containerd --config FILE config
   dump``) and check the merged result (``check_candidate_dump``, ``effective_changes``);
4. compare with the live files (``plan_files``). Only then are files written, atomically (``run_module``).
5. record what was verified (``Stamp``): the digests of every file containerd loads, the identity of both
   binaries, the parameters and this file's own code. A later run that finds all of them unchanged knows the
   result without running either tool again (see ``Stamp`` for why that cannot hide a change).

Everything but ``NvidiaCtkRunner``, ``Stamp`` and the module run at the end is pure (no I/O) and unit-tested
directly. The module file (plugins/modules/containerd_runtime.py) holds only its documentation and argument spec:
everything that decides its result is here, so the stamp's code digest (of this file) covers it.
Target-side code: Python 3.9+. TOML is read with tomllib (3.11+), else tomli, else tomlkit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import glob
import hashlib
import io
import json
import os
import re
import shutil
import tempfile

from ansible_collections.gpuops.nvidia.plugins.module_utils._input_file import InputFileError, read_bytes, read_text

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
)
RUNTIME_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Characters that would need escaping inside a TOML string; refused in paths so that the
# temporary-directory mapping below works on plain quoted strings.
_UNSAFE_PATH_CHARS = re.compile(r"[\"'\\\x00-\x1f\x7f]")
K3S_RKE2_MARKERS = ("/var/lib/rancher/k3s/", "/var/lib/rancher/rke2/")


class ContainerdConfigError(Exception):
    """Something the user must fix; the message says what is wrong and what is valid. Nothing was changed."""


class TomlLibraryMissing(ContainerdConfigError):
    """No TOML reader on the target (Python < 3.11 without tomli or tomlkit)."""


# ------------------------------------------------------------------------------------------------------
# TOML reading (never writing: the output is nvidia-ctk's)
# ------------------------------------------------------------------------------------------------------
def _toml_reader():
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
    loads, error, _name = _toml_reader()
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
    """nvidia-ctk's parseVersion: empty -> 2, keys but no ``version`` -> 1, else the integer."""
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


def _toml_list(items):
    return "[" + ", ".join('"%s"' % i for i in items) + "]"


def parse_ctk_version(text):
    """(major, minor, patch) from ``nvidia-ctk --version`` output, or None."""
    match = re.search(r"version\s+v?(\d+)\.(\d+)\.(\d+)", text or "")
    if not match:
        return None
    return tuple(int(g) for g in match.groups())


def parse_containerd_version(text):
    """The version word of ``containerd --version`` ("containerd github.com/containerd/containerd 1.6.20~ds1 …")."""
    match = re.search(r"\s(v?\d+\.\d+\.\d+\S*)", text or "")
    return match.group(1) if match else None


def version_string(version):
    return ".".join(str(v) for v in version) if version else "unknown"


def choose_edit_mode(requested, ctk_version):
    """The edit mode to use with this nvidia-ctk, or ContainerdConfigError. Returns (mode, warnings)."""
    warnings = []
    drop_in_capable = ctk_version >= (1, 18, 0)
    if ctk_version == (1, 18, 0):
        warnings.append("nvidia-ctk 1.18.0 has two drop-in bugs fixed in 1.18.1: its default drop-in directory is the"
                        " wrong /etc/containerd/config.d (NVIDIA/nvidia-container-toolkit#1404; this module always"
                        " passes the drop-in path explicitly) and it drops existing `imports` (PR #1382; this module"
                        " refuses such a result). Upgrade nvidia-container-toolkit to 1.18.1 or newer.")
    if requested == "auto":
        return ("drop_in" if drop_in_capable else "in_place"), warnings
    if requested == "drop_in" and not drop_in_capable:
        raise ContainerdConfigError("edit_mode=drop_in needs nvidia-ctk 1.18.1 or newer; nvidia-ctk %s only edits"
                                    " config_path in place. Use edit_mode=in_place (or auto), or upgrade %s."
                                    % (version_string(ctk_version), CTK_PACKAGE))
    if requested == "in_place" and drop_in_capable:
        raise ContainerdConfigError("edit_mode=in_place is broken in nvidia-ctk %s: --drop-in-config=\"\" writes a"
                                    " config with no nvidia runtime and a self-glob import (1.18.0-1.20.0, see"
                                    " docs/containerd.md). Use edit_mode=drop_in (or auto)."
                                    % version_string(ctk_version))
    return requested, warnings


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


def configure_args(ctk_path, config_path, drop_in_path, mode, runtime_name, runtime_path, set_as_default,
                   cdi_enabled):
    """The argv of ``nvidia-ctk runtime configure`` (a list, never a shell string)."""
    args = [ctk_path, "runtime", "configure", "--runtime=containerd", "--config=%s" % config_path]
    if mode == "drop_in":
        args.append("--drop-in-config=%s" % drop_in_path)
    args += ["--nvidia-runtime-name=%s" % runtime_name, "--nvidia-runtime-path=%s" % runtime_path]
    if set_as_default:
        args.append("--nvidia-set-as-default")
    if cdi_enabled:
        args.append("--cdi.enabled")
    return args


def substitute(text, pairs, quotes=("\"", "'")):
    """Replace quoted TOML strings: for each (old, new), ``"old"`` / ``'old'`` become ``"new"``.

    Used to point the copy's imports at the temporary directory and the result back at the real paths.
    Only whole quoted strings are replaced, so a path that merely starts with ``old`` is left alone.
    """
    if text is None:
        return None
    for old, new in pairs:
        for quote in quotes:
            text = text.replace(quote + old + quote, "\"" + new + "\"")
    return text


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
    if cdi_enabled and section.get("enable_cdi") is not True:
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


# ------------------------------------------------------------------------------------------------------
# The runner: nvidia-ctk and containerd on private copies (I/O, read-only on live files)
# ------------------------------------------------------------------------------------------------------
class Candidate(object):
    """What nvidia-ctk produced, mapped back to the real paths, plus what containerd said about it."""

    def __init__(self):
        self.files = {}          # real path -> text (None: nvidia-ctk left no file)
        self.trees = {}          # real path -> parsed tree
        self.dump = None         # parsed `config dump` of the candidate, or None when not validated
        self.stray = []          # files nvidia-ctk wrote outside the expected paths (real-path form)
        self.ctk_stdout = ""
        self.ctk_stderr = ""


class NvidiaCtkRunner(object):
    """Runs nvidia-ctk on copies in a private temporary directory, and containerd's ``config dump``.

    ``run_command(argv) -> (rc, stdout, stderr)`` is AnsibleModule.run_command (argv lists only).
    Live files are only read. The temporary directory (mode 0700) is removed afterwards.
    """

    def __init__(self, run_command, ctk_path, containerd_path=None, tmp_parent=None):
        self.run_command = run_command
        self.ctk_path = ctk_path
        self.containerd_path = containerd_path
        self.tmp_parent = tmp_parent

    # -- versions -----------------------------------------------------------------------------------
    def ctk_version(self):
        rc, out, err = self.run_command([self.ctk_path, "--version"])
        version = parse_ctk_version(out) or parse_ctk_version(err)
        if rc != 0 or version is None:
            raise ContainerdConfigError("`%s --version` did not report a version (rc=%s): %s"
                                        % (self.ctk_path, rc, (err or out).strip()))
        return version

    def containerd_version(self):
        if not self.containerd_path:
            return None
        rc, out, err = self.run_command([self.containerd_path, "--version"])
        if rc != 0:
            raise ContainerdConfigError("`%s --version` failed (rc=%s): %s"
                                        % (self.containerd_path, rc, (err or out).strip()))
        return parse_containerd_version(out) or out.strip()

    # -- containerd ---------------------------------------------------------------------------------
    def dump(self, config_path):
        """``containerd --config FILE config dump`` -> (rc, stdout, stderr). The file must exist (2.x prints
        defaults with rc 0 for a missing file, reference 4.1)."""
        if not os.path.isfile(config_path):
            raise ContainerdConfigError("internal: %s must exist before it is dumped" % config_path)
        return self.run_command([self.containerd_path, "--config", config_path, "config", "dump"])

    def dump_tree(self, config_path, what):
        rc, out, err = self.dump(config_path)
        if rc != 0:
            raise ContainerdConfigError("%s: containerd cannot load it (`containerd --config %s config dump`"
                                        " exit %s): %s" % (what, config_path, rc, (err or out).strip()))
        return parse_toml(out, "containerd config dump of %s" % config_path)

    # -- nvidia-ctk on copies -----------------------------------------------------------------------
    def compute(self, config_path, drop_in_path, mode, runtime_name, runtime_path, set_as_default, cdi_enabled,
                live_texts, validate=True):
        """Run nvidia-ctk on copies of ``live_texts`` ({real path: text or None}) and return a Candidate."""
        tmp = tempfile.mkdtemp(prefix="gpuops-containerd-", dir=self.tmp_parent)
        try:
            return self._compute(tmp, config_path, drop_in_path, mode, runtime_name, runtime_path, set_as_default,
                                 cdi_enabled, live_texts, validate)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _compute(self, tmp, config_path, drop_in_path, mode, runtime_name, runtime_path, set_as_default,
                 cdi_enabled, live_texts, validate):
        root = os.path.join(tmp, "root")

        def mirror(path):
            return root + path

        pairs_to_tmp, pairs_back = [], []
        if mode == "drop_in":
            real_pattern = import_pattern(drop_in_path)
            pairs_to_tmp = [(real_pattern, mirror(real_pattern)), (drop_in_path, mirror(drop_in_path))]
            pairs_back = [(mirror(real_pattern), real_pattern), (mirror(drop_in_path), drop_in_path)]
        expected = {mirror(config_path)}
        if mode == "drop_in":
            expected.add(mirror(drop_in_path))
        copied = set()

        config_text = live_texts.get(config_path)
        if config_text is not None:
            _write_private(mirror(config_path), substitute(config_text, pairs_to_tmp))
        # Other files of the drop-in directory, so that containerd validates the set it will really load.
        if mode == "drop_in":
            for other in sorted(glob.glob(import_pattern(drop_in_path))):
                if os.path.normpath(other) == os.path.normpath(drop_in_path) or not os.path.isfile(other):
                    continue
                _copy_private(other, mirror(other))
                copied.add(mirror(other))
        # Relative imports resolve against the importing file's directory: mirror what they match.
        if config_text is not None:
            tree = parse_toml(config_text, config_path)
            for entry in list_strings(tree, "imports"):
                if os.path.isabs(entry):
                    continue
                pattern = os.path.join(os.path.dirname(config_path), entry)
                for match in sorted(glob.glob(pattern)):
                    if os.path.isfile(match) and mirror(match) not in expected:
                        _copy_private(match, mirror(match))
                        copied.add(mirror(match))

        args = configure_args(self.ctk_path, mirror(config_path), mirror(drop_in_path), mode, runtime_name,
                              runtime_path, set_as_default, cdi_enabled)
        rc, out, err = self.run_command(args)
        candidate = Candidate()
        candidate.ctk_stdout, candidate.ctk_stderr = out, err
        if rc != 0:
            raise ContainerdConfigError("nvidia-ctk failed on a private copy (exit %s), nothing was changed: %s"
                                        % (rc, (err or out).strip()))
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                if full not in expected and full not in copied:
                    candidate.stray.append(full[len(root):])
        for real in ([drop_in_path] if mode == "drop_in" else []) + [config_path]:
            text = _read_optional(mirror(real))
            mapped = substitute(text, pairs_back, quotes=("\"",))
            if mapped is not None and tmp in mapped:
                raise ContainerdConfigError("internal: the candidate %s still names the private directory %s"
                                            % (real, tmp))
            candidate.files[real] = mapped
            if mapped is not None:
                candidate.trees[real] = parse_toml(mapped, "nvidia-ctk's output for %s" % real)
        if validate and self.containerd_path and os.path.isfile(mirror(config_path)):
            candidate.dump = self.dump_tree(mirror(config_path), "the candidate config (refused, nothing changed)")
        return candidate


def _write_private(path, text):
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o700)
    with io.open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _copy_private(src, dst):
    parent = os.path.dirname(dst)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o700)
    shutil.copyfile(src, dst)


def _read_optional(path):
    try:
        with io.open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except (IOError, OSError):
        if os.path.exists(path):
            raise
        return None


# ------------------------------------------------------------------------------------------------------
# The module's run (I/O: reads the live files, runs the tools, writes)
# ------------------------------------------------------------------------------------------------------
def read_live(module, path, what):
    """Text of a live file, None when absent; not a regular file, unreadable, over 16 MiB or not UTF-8 -> clear
    failure (nothing changed)."""
    if not os.path.lexists(path):
        return None
    try:
        return read_text(path, what)
    except InputFileError as exc:
        module.fail_json(msg="%s; it is left untouched and nothing was changed" % exc)


def find_binary(module, given, name, option, required_msg=None):
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            module.fail_json(msg="%s %s does not exist or is not executable (give the path of the %s program)"
                             % (option, given, name))
        return given
    path = module.get_bin_path(name, opt_dirs=["/usr/bin", "/usr/local/bin", "/usr/sbin"])
    if path is None and required_msg:
        module.fail_json(msg=required_msg)
    return path


def write_atomic(module, path, text):
    """Write ``text`` to ``path`` through a temporary file in the same directory and atomic_move
    (an existing file keeps its mode, owner and SELinux context; a new one gets 0644 under umask 022)."""
    path = os.path.realpath(path)  # a symlinked config stays a symlink; its target is replaced
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class Evaluation(object):
    """One full check of the live files: the plan (live vs nvidia-ctk's candidate, validated by containerd), the
    result fields that describe it, and the warnings."""

    def __init__(self, plan, fields, warnings):
        self.plan = plan
        self.fields = fields
        self.warnings = warnings
        self.changed = any(item["action"] != "none" for item in plan)


def evaluate(module, runner, p, ctk_version, containerd_version):
    """Steps 1-4 of the module docstring, changing nothing. Raises ContainerdConfigError (nothing changed)."""
    warnings = []
    config_path, drop_in_path = p["config_path"], p["drop_in_path"]
    mode, mode_warnings = choose_edit_mode(p["edit_mode"], ctk_version)
    warnings += mode_warnings
    containerd = runner.containerd_path
    live = {config_path: read_live(module, config_path, "config_path")}
    if mode == "drop_in":
        live[drop_in_path] = read_live(module, drop_in_path, "drop_in_path")
        if live[drop_in_path] is not None:
            parse_toml(live[drop_in_path], "drop_in_path " + drop_in_path)  # never overwrite a file that is not TOML
    config_exists = live[config_path] is not None
    source = parse_toml(live[config_path], "config_path " + config_path) if config_exists else {}
    version, errors, source_warnings = analyse_source(source, config_path, config_exists)
    warnings += source_warnings
    if errors:
        raise ContainerdConfigError(" ".join(errors) + " Nothing was changed.")
    wrong = wrong_drop_in_1180(drop_in_path) if mode == "drop_in" else None
    if wrong and os.path.exists(wrong):
        warnings.append("%s exists: nvidia-ctk 1.18.0 wrote its drop-in to this wrong directory"
                        " (NVIDIA/nvidia-container-toolkit#1404); containerd does not load it unless something imports"
                        " it. Remove it once %s is in place." % (wrong, drop_in_path))
    before_dump = None
    if containerd is None:
        warnings.append("containerd binary not found: the candidate could not be validated with `containerd config"
                        " dump` (set containerd_path)")
    elif config_exists:
        before_dump = runner.dump_tree(config_path, "the current config %s (refusing to overwrite a config containerd"
                                                    " cannot load today; nothing was changed)" % config_path)
    candidate = runner.compute(config_path, drop_in_path, mode, p["runtime_name"], p["runtime_path"],
                               p["set_as_default"], p["cdi_enabled"], live)
    if candidate.stray:
        raise ContainerdConfigError("nvidia-ctk wrote files other than the ones asked for: %s%s. Nothing was changed."
                                    % (", ".join(candidate.stray),
                                       " (nvidia-ctk 1.18.0's wrong drop-in directory, #1404)"
                                       if any("/config.d/" in s for s in candidate.stray) else ""))
    if candidate.files.get(config_path) is None and mode == "in_place":
        raise ContainerdConfigError("nvidia-ctk left no %s; nothing was changed" % config_path)
    lost = lost_imports(source, candidate.trees.get(config_path, {}))
    if lost:
        raise ContainerdConfigError("nvidia-ctk %s would drop existing imports %s from %s (the 1.18.0 bug, PR"
                                    " #1382, fixed in 1.18.1); nothing was changed. Upgrade %s."
                                    % (version_string(ctk_version), lost, config_path, CTK_PACKAGE))
    if mode == "drop_in" and candidate.files.get(drop_in_path) is None:
        raise ContainerdConfigError("nvidia-ctk %s did not write the drop-in %s; nothing was changed"
                                    % (version_string(ctk_version), drop_in_path))
    # What containerd will run: its own merged view when it can be asked, else the files' approximation.
    if candidate.dump is not None:
        after_view, before_view = candidate.dump, before_dump
        view_version = config_version(candidate.dump, "config dump")
        before_version = config_version(before_dump, "config dump") if before_dump else view_version
        problems, dump_warnings = check_candidate_dump(candidate.dump, p["runtime_name"], p["runtime_path"],
                                                       p["set_as_default"], p["cdi_enabled"], containerd_version)
        if problems:
            raise ContainerdConfigError("containerd %s would not run this candidate, so it was refused and nothing"
                                        " was changed: %s (the candidate built from config_path %s%s)"
                                        % (containerd_version, "; ".join(problems), config_path,
                                           "" if config_exists else ", which does not exist: from an empty config"))
        warnings += dump_warnings
    else:
        after_view = effective_cri_tree(candidate.trees.get(config_path), candidate.trees.get(drop_in_path),
                                        version)
        before_view = effective_cri_tree(source, parse_toml(live[drop_in_path], "drop_in_path " + drop_in_path)
                                         if live.get(drop_in_path) else None, version)
        view_version = before_version = version
        if not isinstance(runtimes_of(after_view, version).get(p["runtime_name"]), dict):
            raise ContainerdConfigError("nvidia-ctk's result defines no runtime %r; nothing was changed"
                                        % p["runtime_name"])
    sc_errors, sc_warnings = systemd_cgroup_findings(before_view if before_version == view_version else None,
                                                     after_view, view_version, p["runtime_name"],
                                                     source_runtime_name(source, version))
    if sc_errors:
        raise ContainerdConfigError(" ".join(sc_errors) + " Nothing was changed.")
    warnings += sc_warnings
    changes = []
    if candidate.dump is not None and before_view is not None:
        changes = effective_changes(before_view, after_view, p["runtime_name"], before_version, view_version)
        if changes:
            warnings.append("containerd's merged configuration also changes: %s" % "; ".join(changes))
    fields = {
        "edit_mode": mode,
        "config_version": version,
        "nvidia_ctk_version": version_string(ctk_version),
        "containerd_version": containerd_version,
        "validated": candidate.dump is not None,
        "effective_changes": changes,
    }
    return Evaluation(plan_files(live, candidate.files), fields, warnings)


def run_module(module):
    """The containerd_runtime module: a stamp hit, or a full evaluation, then the writes and a new stamp."""
    p = module.params
    try:
        validate_params(p["config_path"], p["drop_in_path"], p["edit_mode"], p["runtime_name"], p["runtime_path"])
    except ContainerdConfigError as exc:
        module.fail_json(msg=str(exc))
    if _toml_reader()[0] is None:
        raise TomlLibraryMissing("to read containerd's TOML on Python < 3.11")
    ctk = find_binary(module, p["nvidia_ctk_path"], "nvidia-ctk", "nvidia_ctk_path",
                      required_msg="nvidia-ctk was not found (looked in PATH, /usr/bin, /usr/local/bin): install the"
                                   " %s package, which provides it, or set nvidia_ctk_path" % CTK_PACKAGE)
    containerd = find_binary(module, p["containerd_path"], "containerd", "containerd_path")
    stamp = Stamp(p, ctk, containerd)
    earlier = stamp.verified_result()
    if earlier is not None:
        for warning in earlier["trap_warnings"]:
            module.warn(warning)
        if module._diff:
            earlier["diff"] = []
        module.exit_json(**earlier)

    runner = NvidiaCtkRunner(module.run_command, ctk, containerd, tmp_parent=module.tmpdir)
    ctk_version = runner.ctk_version()
    containerd_version = runner.containerd_version()
    ev = evaluate(module, runner, p, ctk_version, containerd_version)
    files = []
    for item in ev.plan:
        entry = {"path": item["path"], "action": item["action"]}
        if ev.changed and not module.check_mode and item["action"] in ("update", "delete") and p["backup"]:
            entry["backup_file"] = module.backup_local(item["path"])
        files.append(entry)
    if ev.changed and not module.check_mode:
        for item in ev.plan:
            if item["action"] in ("create", "update"):
                write_atomic(module, item["path"], item["after"])
            elif item["action"] == "delete":
                os.unlink(item["path"])
        for item in ev.plan:
            now = read_live(module, item["path"], "written file")
            if now != item["after"]:
                module.fail_json(msg="%s does not hold what was written (changed underneath?)" % item["path"],
                                 changed=True, files=files)
    for warning in ev.warnings:
        module.warn(warning)
    result = dict(ev.fields, changed=ev.changed, files=files, restart_required=ev.changed, trap_warnings=ev.warnings,
                  files_changed=[item["path"] for item in ev.plan if item["action"] != "none"])
    if module._diff:
        result["diff"] = diff_entries(ev.plan)
    if not module.check_mode:
        _record(module, stamp, runner, p, ctk_version, containerd_version, None if ev.changed else ev)
    module.exit_json(**result)


def _record(module, stamp, runner, p, ctk_version, containerd_version, unchanged):
    """Write the stamp for the files as they are now. After a change, the new files are first evaluated again
    exactly as the next run would (nvidia-ctk on them, containerd loading them): only when that finds nothing to
    change is its result recorded. A failure here never fails the module (the files are written and containerd
    must still be restarted): it only leaves no stamp, so the next run checks in full."""
    try:
        again = unchanged or evaluate(module, runner, p, ctk_version, containerd_version)
        if again.changed:
            module.warn("nvidia-ctk changes its own output again when run on it (%s): not recording a verified "
                        "state, the next run checks in full" % ", ".join(
                            item["path"] for item in again.plan if item["action"] != "none"))
            return
        stamp.write(module, again)
    except (ContainerdConfigError, IOError, OSError) as exc:
        module.warn("the written configuration was not recorded as verified (%s); the next run checks it in full"
                    % exc)


# ------------------------------------------------------------------------------------------------------
# The verified-state stamp: a later run with nothing changed skips nvidia-ctk and containerd
# ------------------------------------------------------------------------------------------------------
STAMP_SCHEMA = 1
STAMP_SUFFIX = ".gpuops-verified.json"
# every parameter that the result depends on (backup only matters when something is written)
STAMP_PARAMS = ("config_path", "drop_in_path", "edit_mode", "runtime_name", "set_as_default", "cdi_enabled",
                "runtime_path")


def stamp_path(config_path):
    """``/etc/containerd/.config.toml.gpuops-verified.json``: beside the config, like the backups; never matched
    by a ``*.toml`` import."""
    directory, name = os.path.split(config_path)
    return os.path.join(directory, "." + name + STAMP_SUFFIX)


def file_digest(path):
    """sha256 of a file's bytes; None when absent; a marker (never equal to a digest) for anything else: not a
    regular file (a FIFO is never opened, a device never read), over the size read_live accepts, unreadable."""
    if not os.path.lexists(path):
        return None
    try:
        return hashlib.sha256(read_bytes(path, "file")).hexdigest()
    except InputFileError as exc:
        return "unusable: %s" % exc


def binary_identity(path):
    """What identifies an installed binary without reading it: its real path and the inode's number, size,
    mtime and ctime (a package upgrade or any rewrite gives a new inode or a new ctime; ctime cannot be set back
    by user tools). Files up to 64 KiB (scripts) are also hashed."""
    if not path:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        return ["unreadable", real, exc.__class__.__name__]
    out = [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]
    if st.st_size <= 65536:
        out.append(file_digest(real))
    return out


def _imports_of(path):
    """The import patterns of a TOML file, resolved against its directory; [] when it cannot be read or parsed
    (its digest is recorded either way, so any change to it is still seen)."""
    loads, error, _name = _toml_reader()
    try:
        tree = loads(read_text(path, "file"))
    except Exception:  # pylint: disable=broad-except  # unreadable, not UTF-8, not TOML: recorded by digest
        return []
    return [entry if os.path.isabs(entry) else os.path.join(os.path.dirname(path), entry)
            for entry in list_strings(tree, "imports")]


def watched_files(config_path, drop_in_path):
    """Every file whose bytes the result depends on: the config, the drop-in, nvidia-ctk 1.18.0's wrong drop-in
    (a warning depends on it), every file of the drop-in directory's ``*.toml`` (validated with it), and every
    file any of them imports, followed through imports of imports."""
    paths = set([config_path, drop_in_path])
    wrong = wrong_drop_in_1180(drop_in_path)
    if wrong:
        paths.add(wrong)
    todo = [config_path] + sorted(glob.glob(import_pattern(drop_in_path)))
    paths.update(todo)
    seen = set()
    while todo:
        path = todo.pop()
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        for pattern in _imports_of(path):
            matches = sorted(glob.glob(pattern))  # a file added later is a new key: a miss
            paths.update(matches)
            todo.extend(matches)
    paths.discard(stamp_path(config_path))
    return sorted(paths)


def _code_digest():
    """sha256 of this file's source (the code that decides the result), or None when the loader cannot give it
    (then nothing is ever recorded or trusted)."""
    try:
        source = __loader__.get_source(__name__)  # noqa: F821  # pylint: disable=undefined-variable
    except Exception:  # pylint: disable=broad-except
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest() if source else None


class Stamp(object):
    """What a full run verified, recorded beside the config (``stamp_path``), and its check.

    Why a hit cannot hide a change: the result of a full run is a function of (1) the bytes of the files it reads
    (``watched_files``: the config, the drop-in, the other ``*.toml`` files of the drop-in directory, everything
    they import), (2) the parameters (``STAMP_PARAMS``), (3) what nvidia-ctk and containerd do, fixed by their
    binaries (``binary_identity``), (4) this code (``_code_digest``) and the TOML reader. The stamp records all of
    them, as they were after a full evaluation found nothing to change, with that evaluation's result. A later
    run recomputes them; only when every one is equal does it return the recorded result without running the
    tools. Any difference (a file edited, added to conf.d or deleted, a package upgrade, another parameter, a
    new collection version) is a miss and a full run. Assumed, not checked: that the tools read no other input
    (environment variables, other files) than the arguments the module passes and the files above; a wrapper
    script that runs another file is identified by its own bytes only.
    """

    def __init__(self, params, ctk_path, containerd_path):
        self.path = stamp_path(params["config_path"])
        self.params = params
        self.ctk_path = ctk_path
        self.containerd_path = containerd_path

    def inputs(self):
        code = _code_digest()
        if code is None:
            return None
        return {"schema": STAMP_SCHEMA, "code": code, "toml": _toml_reader()[2],
                "params": dict((k, self.params[k]) for k in STAMP_PARAMS),
                "nvidia_ctk": binary_identity(self.ctk_path), "containerd": binary_identity(self.containerd_path),
                "files": dict((path, file_digest(path))
                              for path in watched_files(self.params["config_path"], self.params["drop_in_path"]))}

    def verified_result(self):
        """The recorded result when every input is as recorded, else None."""
        try:
            with open(self.path) as handle:
                recorded = json.load(handle)
        except (IOError, OSError, ValueError):
            return None
        now = self.inputs()
        if now is None or not isinstance(recorded, dict) or recorded.get("inputs") != json.loads(json.dumps(now)):
            return None
        result = recorded.get("result")
        return dict(result, verified_earlier=True) if isinstance(result, dict) else None

    def write(self, module, evaluation):
        now = self.inputs()
        if now is None:
            return
        result = dict(evaluation.fields, changed=False, restart_required=False, files_changed=[],
                      files=[{"path": item["path"], "action": "none"} for item in evaluation.plan],
                      trap_warnings=evaluation.warnings)
        write_atomic(module, self.path, json.dumps({"inputs": now, "result": result}, sort_keys=True) + "\n")
