# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime's run: evaluate, write, record (PRIVATE to gpuops.nvidia).

The module (plugins/modules/containerd_runtime.py) calls ``ContainerdRun``'s steps in order; nvidia-ctk is never
let near a live file:

1. read and check the live files (``read_current``: pure trap detection in ``analyse_source``), and have
   containerd load today's config: one it cannot load is never overwritten;
2. choose the edit mode the installed nvidia-ctk supports (``choose_edit_mode``);
3. copy the files into a private temporary directory that mirrors their absolute paths and run nvidia-ctk there
   (``NvidiaCtkRunner.compute``), mapping the temporary import path back to the real one;
4. validate the candidate with the containerd binary that will load it (``containerd --config FILE config
   dump``) and check the merged result (``check_candidate_dump``, ``effective_changes``);
5. compare with the live files (``plan_files``). Only then, outside check mode, are files written, atomically;
6. record what was verified (``Stamp``): a later run with every input unchanged returns the result without
   running either tool.

Steps 1-5 change nothing (``evaluate``). The pure parts are in _containerd_config, the tools in _nvidia_ctk, the
stamp in _containerd_stamp; every module_utils file this run imports is in the stamp's CODE_MODULES, whose code
digest the stamp records, and the module file holds only its documentation, argument spec and the order of the
steps. Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (
    CTK_PACKAGE, ContainerdConfigError, TomlLibraryMissing, analyse_source, check_candidate_dump, config_version,
    cri_key, diff_entries, effective_changes, effective_cri_tree, get_in, lost_imports, parse_toml, plan_files,
    runtimes_of, source_runtime_name, systemd_cgroup_findings, toml_reader, validate_params, version_1_drop_in_error,
    wrong_drop_in_1180)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._containerd_stamp import Stamp, find_tools
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import ToolNotFound, read_live, write_atomic
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Failure, Refusal
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._nvidia_ctk import (
    NvidiaCtkRunner, choose_edit_mode, version_string)


class Evaluation(object):
    """One full check of the live files: the plan (live vs nvidia-ctk's candidate, validated by containerd), the
    result fields that describe it, and the warnings."""

    def __init__(self, plan, fields, warnings):
        self.plan = plan
        self.fields = fields
        self.warnings = warnings
        self.changed = any(item["action"] != "none" for item in plan)


class Current(object):
    """The live state a plan starts from: the edit mode, the live texts ({path: text or None}), the parsed config
    and its version, containerd's merged view of it (None when it cannot be asked or the config is absent), and
    the warnings so far."""

    def __init__(self, mode, live, source, version, before_dump, warnings):
        self.mode = mode
        self.live = live
        self.source = source
        self.version = version
        self.before_dump = before_dump
        self.warnings = warnings


def read_current(module, runner, p, ctk_version):
    """Steps 1 and 2 of this file's docstring: the edit mode, the live files, their traps, containerd's view of them.
    Changes nothing; raises ContainerdConfigError (or _live_file's LiveFileError) when they must not be touched."""
    warnings = []
    config_path, drop_in_path = p["config_path"], p["drop_in_path"]
    mode, mode_warnings = choose_edit_mode(p["edit_mode"], ctk_version)
    warnings += mode_warnings
    containerd = runner.containerd_path
    live = {config_path: read_live(config_path, "config_path")}
    if mode == "drop_in":
        live[drop_in_path] = read_live(drop_in_path, "drop_in_path")
        if live[drop_in_path] is not None:
            parse_toml(live[drop_in_path], "drop_in_path " + drop_in_path)  # never overwrite a file that is not TOML
    config_exists = live[config_path] is not None
    source = parse_toml(live[config_path], "config_path " + config_path) if config_exists else {}
    version, errors, source_warnings = analyse_source(source, config_path, config_exists)
    warnings += source_warnings
    if errors:
        raise ContainerdConfigError(" ".join(errors).rstrip(".") + "; nothing changed")
    if config_exists and version == 1 and mode == "drop_in":
        raise ContainerdConfigError(version_1_drop_in_error(config_path, drop_in_path, version_string(ctk_version)))
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
                                                    " cannot load today; nothing changed)" % config_path)
    return Current(mode, live, source, version, before_dump, warnings)


def plan(runner, p, current, ctk_version, containerd_version):
    """Steps 3 to 5 of this file's docstring, changing nothing: nvidia-ctk's candidate on private copies, validated
    and checked, compared with the live files. Raises ContainerdConfigError (nothing changed)."""
    config_path, drop_in_path, mode, live = p["config_path"], p["drop_in_path"], current.mode, current.live
    source, version, before_dump = current.source, current.version, current.before_dump
    config_exists = live[config_path] is not None
    warnings = list(current.warnings)
    candidate = runner.compute(config_path, drop_in_path, mode, p["runtime_name"], p["runtime_path"],
                               p["set_as_default"], p["cdi_enabled"], live)
    if candidate.stray:
        raise ContainerdConfigError("nvidia-ctk wrote files other than the ones asked for: %s%s; nothing changed"
                                    % (", ".join(candidate.stray),
                                       " (nvidia-ctk 1.18.0's wrong drop-in directory, #1404)"
                                       if any("/config.d/" in s for s in candidate.stray) else ""))
    if candidate.files.get(config_path) is None and mode == "in_place":
        raise ContainerdConfigError("nvidia-ctk left no %s; nothing changed" % config_path)
    lost = lost_imports(source, candidate.trees.get(config_path, {}))
    if lost:
        raise ContainerdConfigError("nvidia-ctk %s would drop existing imports %s from %s (the 1.18.0 bug, PR"
                                    " #1382, fixed in 1.18.1); nothing changed. Upgrade %s."
                                    % (version_string(ctk_version), lost, config_path, CTK_PACKAGE))
    if mode == "drop_in" and candidate.files.get(drop_in_path) is None:
        raise ContainerdConfigError("nvidia-ctk %s did not write the drop-in %s; nothing changed"
                                    % (version_string(ctk_version), drop_in_path))
    files_view = effective_cri_tree(candidate.trees.get(config_path), candidate.trees.get(drop_in_path), version)
    if p["cdi_enabled"] and get_in(files_view, ["plugins", cri_key(version), "enable_cdi"]) is not True:
        raise ContainerdConfigError("nvidia-ctk %s's result does not set enable_cdi = true in [plugins.%s], the table"
                                    " containerd's CRI plugin reads it from, so CDI would stay off; nothing"
                                    " changed.%s" % (version_string(ctk_version), _toml_key(cri_key(version)),
                                                     " Convert the config to version 2 (`version = 2`)."
                                                     if version == 1 else ""))
    if candidate.cri_v1_cdi_set:
        warnings.append("%s is a version 1 config: nvidia-ctk %s puts enable_cdi under [plugins.cri.containerd], where"
                        " containerd's CRI plugin does not read it, so [plugins.cri] enable_cdi = true was set as well"
                        " (CDI on). Version 1 is deprecated (containerd 1.6/1.7 say it is removed in 2.0): convert the"
                        " config to version 2 (`version = 2`)." % (config_path, version_string(ctk_version)))
    # What containerd will run: its own merged view when it can be asked, else the files' approximation.
    if candidate.dump is not None:
        after_view, before_view = candidate.dump, before_dump
        view_version = config_version(candidate.dump, "config dump")
        before_version = config_version(before_dump, "config dump") if before_dump else view_version
        problems, dump_warnings = check_candidate_dump(candidate.dump, p["runtime_name"], p["runtime_path"],
                                                       p["set_as_default"], p["cdi_enabled"], containerd_version)
        if problems:
            raise ContainerdConfigError("containerd %s would not run this candidate, so it was refused,"
                                        " nothing changed: %s (the candidate built from config_path %s%s)"
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
            raise ContainerdConfigError("nvidia-ctk's result defines no runtime %r; nothing changed"
                                        % p["runtime_name"])
    sc_errors, sc_warnings = systemd_cgroup_findings(before_view if before_version == view_version else None,
                                                     after_view, view_version, p["runtime_name"],
                                                     source_runtime_name(source, version))
    if sc_errors:
        raise ContainerdConfigError(" ".join(sc_errors).rstrip(".") + "; nothing changed")
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


def _toml_key(key):
    return key if "." not in key else '"%s"' % key


def evaluate(module, runner, p, ctk_version, containerd_version):
    """One full check of the live files (read_current, then plan), changing nothing."""
    return plan(runner, p, read_current(module, runner, p, ctk_version), ctk_version, containerd_version)


class ContainerdRun(object):
    """containerd_runtime on one node, in the steps of its main: validate (the constructor), ``verified_earlier``,
    ``read_current``, ``plan``, ``apply`` (outside check mode), ``result``, ``record`` (outside check mode)."""

    def __init__(self, module):
        """Validate the parameters, a TOML reader and both tools before anything is read or run; a problem is a
        Refusal raised to the base (TomlLibraryMissing is the module's to report) and nothing changes. Built in the
        module's ``converge``, inside run_module's try."""
        self.module = module
        self.params = p = module.params
        try:
            validate_params(p["config_path"], p["drop_in_path"], p["edit_mode"], p["runtime_name"], p["runtime_path"])
        except ContainerdConfigError as exc:
            raise Refusal(str(exc)) from exc
        if toml_reader()[0] is None:
            raise TomlLibraryMissing("to read containerd's TOML on Python < 3.11")
        try:
            self.ctk, self.containerd = find_tools(module.get_bin_path, p)
        except ToolNotFound as exc:
            raise Refusal(str(exc)) from exc
        self.stamp = Stamp(p, self.ctk, self.containerd)
        self.runner = self.ctk_version = self.containerd_version = None

    def verified_earlier(self):
        """The result an earlier run verified, when every file, tool, parameter and the code are as it recorded
        them (its trap warnings warned again, an empty diff); None otherwise. Runs no tool."""
        earlier = self.stamp.verified_result()
        if earlier is None:
            return None
        for warning in earlier["trap_warnings"]:
            self.module.warn(warning)
        if self.module._diff:
            earlier["diff"] = []
        return earlier

    def read_current(self):
        """Both tools' versions, then the live state (``read_current``)."""
        self.runner = NvidiaCtkRunner(self.module.run_command, self.ctk, self.containerd,
                                      tmp_parent=self.module.tmpdir)
        self.ctk_version = self.runner.ctk_version()
        self.containerd_version = self.runner.containerd_version()
        return read_current(self.module, self.runner, self.params, self.ctk_version)

    def plan(self, current):
        """The Evaluation of ``current``: the per-file plan, its reasons (warnings) and the fields of the result."""
        return plan(self.runner, self.params, current, self.ctk_version, self.containerd_version)

    @staticmethod
    def files(evaluation):
        """The ``files`` of the result: per file, its action."""
        return [{"path": item["path"], "action": item["action"]} for item in evaluation.plan]

    def apply(self, evaluation):
        """Back up (when asked) and replace each changed file atomically, the drop-in before the config that imports
        it, then read each back. There is no rollback: a file that does not hold what was written fails the module,
        changed. Returns ``files`` with the backups made."""
        module = self.module
        files = self.files(evaluation)
        for entry in files:
            if entry["action"] in ("update", "delete") and self.params["backup"]:
                entry["backup_file"] = module.backup_local(entry["path"])
        for item in evaluation.plan:
            if item["action"] in ("create", "update"):
                write_atomic(module, item["path"], item["after"])
            elif item["action"] == "delete":
                os.unlink(item["path"])
        for item in evaluation.plan:
            now = read_live(item["path"], "written file")
            if now != item["after"]:
                raise Failure("%s does not hold what was written (changed underneath?)" % item["path"],
                              changed=True, files=files)
        return files

    def result(self, evaluation, files):
        """The module's result for ``evaluation`` (its warnings warned; the diff in diff mode)."""
        for warning in evaluation.warnings:
            self.module.warn(warning)
        result = dict(evaluation.fields, changed=evaluation.changed, files=files, restart_required=evaluation.changed,
                      trap_warnings=evaluation.warnings,
                      files_changed=[item["path"] for item in evaluation.plan if item["action"] != "none"])
        if self.module._diff:
            result["diff"] = diff_entries(evaluation.plan)
        return result

    def record(self, evaluation):
        """Write the stamp for the files as they are now. After a change, the new files are first evaluated again
        exactly as the next run would (nvidia-ctk on them, containerd loading them): only when that finds nothing
        to change is its result recorded. A failure here never fails the module (the files are written and
        containerd must still be restarted): it only leaves no stamp, so the next run checks in full."""
        module = self.module
        try:
            again = evaluation if not evaluation.changed else evaluate(
                module, self.runner, self.params, self.ctk_version, self.containerd_version)
            if again.changed:
                module.warn("nvidia-ctk changes its own output again when run on it (%s): not recording a verified "
                            "state, the next run checks in full" % ", ".join(
                                item["path"] for item in again.plan if item["action"] != "none"))
                return
            text = self.stamp.record(again)
            if text is not None:
                write_atomic(module, self.stamp.path, text)
        except (ContainerdConfigError, IOError, OSError) as exc:
            module.warn("the written configuration was not recorded as verified (%s); the next run checks it in full"
                        % exc)
