# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-ctk, run on private copies, and containerd's ``config dump`` (PRIVATE to gpuops.nvidia).

nvidia-ctk always rewrites the files it is given (truncating them in place, not atomically), strips their
comments, has no "changed" signal, and its ``--dry-run`` output is not a diff (NVIDIA/nvidia-container-toolkit
v1.20.0, pkg/config/raw.go and pkg/config/engine/containerd/config_drop_in.go; docs/containerd.md). So it is
never pointed at a live file: ``NvidiaCtkRunner`` runs it in a private temporary directory (mode 0700, removed
afterwards) on copies that mirror the live files' absolute paths, and maps its output back to the real paths.

Here: reading the tools' versions, choosing the edit mode an nvidia-ctk version supports, the argument list of
``nvidia-ctk runtime configure``, and the runner. The runner's ``command`` and ``private_directory`` are the parts
another nvidia-ctk step (``cdi generate``, ``cdi list``, ``config --set``) reuses. Everything here takes the
command runner (AnsibleModule.run_command: argument lists only, never a shell string) as a parameter, and only
reads live files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import glob
import io
import os
import re
import shutil
import tempfile

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (
    CTK_PACKAGE, ContainerdConfigError, config_version, get_in, import_pattern, list_strings, parse_toml,
    set_cri_v1_enable_cdi)


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
        self.cri_v1_cdi_set = False  # [plugins.cri] enable_cdi = true was set on nvidia-ctk's version 1 output
        self.ctk_stdout = ""
        self.ctk_stderr = ""


class NvidiaCtkRunner(object):
    """Runs nvidia-ctk (``command``, in a ``private_directory`` when it writes files) and containerd's
    ``config dump``; ``compute`` is ``nvidia-ctk runtime configure`` on private copies of the live files.

    ``run_command(argv) -> (rc, stdout, stderr)`` is AnsibleModule.run_command (argv lists only).
    Live files are only read. The temporary directory (mode 0700) is removed afterwards.
    """

    def __init__(self, run_command, ctk_path, containerd_path=None, tmp_parent=None):
        self.run_command = run_command
        self.ctk_path = ctk_path
        self.containerd_path = containerd_path
        self.tmp_parent = tmp_parent

    # -- nvidia-ctk ---------------------------------------------------------------------------------
    def command(self, *args):
        """``nvidia-ctk ARGS...`` -> (rc, stdout, stderr)."""
        return self.run_command([self.ctk_path] + list(args))

    @contextlib.contextmanager
    def private_directory(self):
        """A new directory (mode 0700) under ``tmp_parent`` for nvidia-ctk to write in, removed afterwards."""
        tmp = tempfile.mkdtemp(prefix="gpuops-nvidia-ctk-", dir=self.tmp_parent)
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- versions -----------------------------------------------------------------------------------
    def ctk_version(self):
        """(major, minor, patch) of ``nvidia-ctk --version``, or ContainerdConfigError."""
        rc, out, err = self.command("--version")
        version = parse_ctk_version(out) or parse_ctk_version(err)
        if rc != 0 or version is None:
            raise ContainerdConfigError("`%s --version` did not report a version (rc=%s): %s"
                                        % (self.ctk_path, rc, (err or out).strip()))
        return version

    def containerd_version(self):
        """The version word of ``containerd --version``; None without a containerd binary."""
        if not self.containerd_path:
            return None
        rc, out, err = self.run_command([self.containerd_path, "--version"])
        if rc != 0:
            raise ContainerdConfigError("`%s --version` failed (rc=%s): %s"
                                        % (self.containerd_path, rc, (err or out).strip()))
        return parse_containerd_version(out) or out.strip()

    # -- containerd ---------------------------------------------------------------------------------
    def dump(self, config_path):
        """``containerd --config FILE config dump`` -> (rc, stdout, stderr). The file must exist: containerd 2.x
        prints its defaults with rc 0 for a missing file (docs/containerd.md)."""
        if not os.path.isfile(config_path):
            raise ContainerdConfigError("internal: %s must exist before it is dumped" % config_path)
        return self.run_command([self.containerd_path, "--config", config_path, "config", "dump"])

    def dump_tree(self, config_path, what):
        """containerd's merged view of ``config_path``, parsed; ContainerdConfigError naming ``what`` if it
        cannot load it."""
        rc, out, err = self.dump(config_path)
        if rc != 0:
            raise ContainerdConfigError("%s: containerd cannot load it (`containerd --config %s config dump`"
                                        " exit %s): %s" % (what, config_path, rc, (err or out).strip()))
        return parse_toml(out, "containerd config dump of %s" % config_path)

    # -- nvidia-ctk on copies -----------------------------------------------------------------------
    def compute(self, config_path, drop_in_path, mode, runtime_name, runtime_path, set_as_default, cdi_enabled,
                live_texts, validate=True):
        """Run nvidia-ctk on copies of ``live_texts`` ({real path: text or None}) and return a Candidate."""
        with self.private_directory() as tmp:
            return self._compute(tmp, config_path, drop_in_path, mode, runtime_name, runtime_path, set_as_default,
                                 cdi_enabled, live_texts, validate)

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
            raise ContainerdConfigError("nvidia-ctk failed on a private copy (exit %s), nothing changed: %s"
                                        % (rc, (err or out).strip()))
        if cdi_enabled and mode == "in_place":
            candidate.cri_v1_cdi_set = self._cri_v1_cdi(args, mirror(config_path), config_path)
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

    def _cri_v1_cdi(self, args, private_config, config_path):
        """On a version 1 output without ``[plugins.cri] enable_cdi = true`` (nvidia-ctk sets it only under
        ``[plugins.cri.containerd]``, which containerd's CRI plugin does not read): set it in the private copy,
        then run nvidia-ctk (``args``) on that copy again, so that the candidate is in nvidia-ctk's own form and
        is what nvidia-ctk leaves unchanged on the next run. Returns whether it was set."""
        text = _read_optional(private_config)
        if text is None:
            return False
        tree = parse_toml(text, "nvidia-ctk's output for %s" % config_path)
        if config_version(tree, config_path) != 1 or get_in(tree, ["plugins", "cri", "enable_cdi"]) is True:
            return False
        _write_private(private_config, set_cri_v1_enable_cdi(text, config_path))
        rc, out, err = self.run_command(args)
        if rc != 0:
            raise ContainerdConfigError("nvidia-ctk failed on a private copy with [plugins.cri] enable_cdi = true"
                                        " (exit %s), nothing changed: %s" % (rc, (err or out).strip()))
        again = parse_toml(_read_optional(private_config) or "", "nvidia-ctk's output for %s" % config_path)
        if get_in(again, ["plugins", "cri", "enable_cdi"]) is not True:
            raise ContainerdConfigError("nvidia-ctk dropped [plugins.cri] enable_cdi = true from %s; nothing"
                                        " changed. Convert the config to version 2 (`version = 2`)." % config_path)
        return True


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
