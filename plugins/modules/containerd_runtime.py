#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: containerd_runtime
short_description: Configure containerd's NVIDIA runtime with nvidia-ctk, idempotently, with check mode and diff
version_added: 0.1.0
description:
  - Defines the NVIDIA container runtime in containerd's configuration (optionally as the default runtime, and
    optionally with CDI enabled) using C(nvidia-ctk runtime configure --runtime=containerd), the tool NVIDIA keeps
    in step with containerd.
  - nvidia-ctk never touches the live files. It runs on copies in a private temporary directory; the result is
    mapped back to the real paths, validated with C(containerd --config FILE config dump) (when the containerd
    binary is present), checked for the known traps, compared with the live files, and only then written
    atomically, keeping each file's mode and owner. So the module knows whether anything changed, shows a diff,
    and writes nothing in check mode.
  - nvidia-ctk re-serialises every file it writes, which removes comments and sorts keys (nvidia-ctk 1.18+ does
    this to the top-level config too, when it adds the C(imports) line). Use O(backup=true) to keep the
    previous files.
  - Refuses, changing nothing, when a live file is not TOML, when containerd cannot load today's config, when
    the config has no C(version) key (for example Docker's C(disabled_plugins = ["cri"])), when the CRI plugin
    is disabled, when a runtime would lose C(SystemdCgroup = true), when nvidia-ctk 1.18.0 drops existing
    C(imports), or when containerd does not load the candidate or does not see the runtime in it.
  - Does not restart containerd; it returns O(ignore:restart_required). The C(gpuops.nvidia.containerd_runtime)
    role restarts containerd through a handler only when this module reports a change.
  - Creating the C(nvidia) RuntimeClass in the cluster is not done here.
options:
  config_path:
    description:
      - containerd's top-level configuration file (nvidia-ctk's C(--config)). Any absolute path is accepted,
        for example k3s/rke2 paths, but see the notes about k3s and rke2.
      - A missing file is created (as nvidia-ctk does), with a warning that it has no C(SystemdCgroup).
    type: path
    default: /etc/containerd/config.toml
  drop_in_path:
    description:
      - The drop-in file nvidia-ctk 1.18.1+ writes (C(--drop-in-config)); its directory's C(*.toml) is added to
        the top-level C(imports). Used when the edit mode is C(drop_in). Must end in C(.toml).
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  edit_mode:
    description:
      - V(drop_in) writes the runtime to O(drop_in_path) (nvidia-ctk 1.18+ only).
      - V(in_place) edits O(config_path) itself (nvidia-ctk 1.17.x and older only; nvidia-ctk 1.18.0-1.20.0 break
        in-place editing, so the module refuses it there).
      - V(auto) uses what the installed nvidia-ctk does by default, V(drop_in) from 1.18, V(in_place) before.
    type: str
    choices: [auto, drop_in, in_place]
    default: auto
  runtime_name:
    description: Name of the runtime table (nvidia-ctk's C(--nvidia-runtime-name)) and of the RuntimeClass handler.
    type: str
    default: nvidia
  set_as_default:
    description:
      - Make the runtime containerd's C(default_runtime_name). When false and the current default is
        O(runtime_name), nvidia-ctk removes C(default_runtime_name) (containerd then uses runc).
    type: bool
    default: false
  cdi_enabled:
    description:
      - Set C(enable_cdi = true) on the CRI plugin. False leaves C(enable_cdi) as it is (nvidia-ctk never writes
        false). containerd 2.x enables CDI by default; 1.6 ignores the key (a warning says so).
    type: bool
    default: false
  runtime_path:
    description: Absolute path of nvidia-container-runtime, written as the runtime's C(options.BinaryName).
    type: path
    default: /usr/bin/nvidia-container-runtime
  nvidia_ctk_path:
    description:
      - Path of nvidia-ctk. When omitted it is searched in PATH, C(/usr/bin) and C(/usr/local/bin).
      - nvidia-ctk comes with the C(nvidia-container-toolkit) package.
    type: path
  containerd_path:
    description:
      - Path of the containerd binary that will load the config, used for C(containerd --config FILE config dump)
        validation. When omitted it is searched in PATH, C(/usr/bin), C(/usr/local/bin); when none is found the
        module warns and relies on its own checks. When given, it must exist.
    type: path
  backup:
    description: Keep a timestamped copy of every file before it is replaced.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: nvidia-ctk runs on private copies; nothing under O(config_path) or O(drop_in_path) is written.
  diff_mode:
    support: full
    details: One before/after diff per file that changes.
  idempotent:
    support: full
    details: nvidia-ctk's output is byte-identical on its own output, so a second run reports no change.
notes:
  - "B(k3s and rke2) regenerate C(config.toml) from C(config.toml.tmpl) at every start, so changes to the generated
    C(config.toml) are lost, and nvidia-ctk cannot parse a Go template C(config.toml.tmpl). Prefer their built-in
    nvidia runtime detection or C(default-runtime: nvidia) in their C(config.yaml); see the collection's
    docs/containerd.md."
  - On containerd 1.6/1.7 a drop-in's plugin section replaces the whole section of the main file. nvidia-ctk's
    drop-in therefore holds a copy of the whole CRI section; later edits to that section in config.toml are shadowed
    until this module runs again, which regenerates the drop-in.
requirements:
  - nvidia-ctk (package C(nvidia-container-toolkit)) on the target.
  - Python 3.11+ on the target, or the C(tomli) (or C(tomlkit)) package for older Pythons.
  - Optionally the containerd binary, for validation.
seealso:
  - name: NVIDIA Container Toolkit install guide
    description: How nvidia-ctk configures containerd.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
extends_documentation_fragment:
  - gpuops.nvidia.attributes
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Define the nvidia runtime (drop-in on nvidia-ctk 1.18+, in place before)
  gpuops.nvidia.containerd_runtime:
  register: runtime

- name: Make it the default runtime, with CDI, keeping backups
  gpuops.nvidia.containerd_runtime:
    set_as_default: true
    cdi_enabled: true
    backup: true

- name: Restart containerd only when the configuration changed
  ansible.builtin.systemd_service:
    name: containerd
    state: restarted
  when: runtime.restart_required

- name: Non-default paths, validated with a specific containerd binary
  gpuops.nvidia.containerd_runtime:
    config_path: /etc/containerd/config.toml
    drop_in_path: /etc/containerd/conf.d/99-nvidia.toml
    nvidia_ctk_path: /usr/local/bin/nvidia-ctk
    containerd_path: /usr/local/bin/containerd
"""

RETURN = r"""
files_changed:
  description: Files that were (or in check mode would be) created or replaced.
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/conf.d/99-nvidia.toml, /etc/containerd/config.toml]
files:
  description: Per file, what happens (V(create), V(update), V(delete), V(none)) and the backup made.
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/containerd/config.toml, action: update, backup_file: /etc/containerd/config.toml.1234.bak}]
restart_required:
  description: Whether containerd must be restarted for the change to take effect (true exactly when changed).
  returned: always
  type: bool
  sample: true
edit_mode:
  description: The edit mode used (V(drop_in) or V(in_place)).
  returned: always
  type: str
  sample: drop_in
config_version:
  description: The containerd config version of O(config_path) (2 when missing or empty).
  returned: always
  type: int
  sample: 2
nvidia_ctk_version:
  description: Version reported by C(nvidia-ctk --version).
  returned: always
  type: str
  sample: 1.18.1
containerd_version:
  description: Version reported by C(containerd --version), or null when no containerd binary was found.
  returned: always
  type: str
  sample: 1.6.20~ds1
validated:
  description: Whether containerd loaded the candidate config (C(config dump)) before anything was written.
  returned: always
  type: bool
  sample: true
trap_warnings:
  description: Known traps found (also emitted as warnings).
  returned: always
  type: list
  elements: str
effective_changes:
  description:
    - Settings of containerd's merged configuration that change besides the runtime, the default runtime name
      and C(enable_cdi) (for example a drop-in copy shadowing another drop-in on containerd 1.x). Also warned.
  returned: always
  type: list
  elements: str
  sample: []
"""

import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.nvidia.plugins.module_utils import _containerd as cd
from ansible_collections.gpuops.nvidia.plugins.module_utils._input_file import InputFileError, read_text


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


def run_module(module):
    p = module.params
    try:
        cd.validate_params(p["config_path"], p["drop_in_path"], p["edit_mode"], p["runtime_name"], p["runtime_path"])
    except cd.ContainerdConfigError as exc:
        module.fail_json(msg=str(exc))
    if cd._toml_reader()[0] is None:
        module.fail_json(msg=missing_required_lib("tomli", reason="to read containerd's TOML on Python < 3.11"))

    ctk = find_binary(module, p["nvidia_ctk_path"], "nvidia-ctk", "nvidia_ctk_path",
                      required_msg="nvidia-ctk was not found (looked in PATH, /usr/bin, /usr/local/bin): install the"
                                   " %s package, which provides it, or set nvidia_ctk_path" % cd.CTK_PACKAGE)
    containerd = find_binary(module, p["containerd_path"], "containerd", "containerd_path")
    runner = cd.NvidiaCtkRunner(module.run_command, ctk, containerd, tmp_parent=module.tmpdir)
    warnings = []
    config_path, drop_in_path = p["config_path"], p["drop_in_path"]

    ctk_version = runner.ctk_version()
    mode, mode_warnings = cd.choose_edit_mode(p["edit_mode"], ctk_version)
    warnings += mode_warnings
    containerd_version = runner.containerd_version()

    live = {config_path: read_live(module, config_path, "config_path")}
    if mode == "drop_in":
        live[drop_in_path] = read_live(module, drop_in_path, "drop_in_path")
        if live[drop_in_path] is not None:
            cd.parse_toml(live[drop_in_path], "drop_in_path " + drop_in_path)  # never overwrite a file that is not TOML
    config_exists = live[config_path] is not None
    source = cd.parse_toml(live[config_path], "config_path " + config_path) if config_exists else {}
    version, errors, source_warnings = cd.analyse_source(source, config_path, config_exists)
    warnings += source_warnings
    if errors:
        raise cd.ContainerdConfigError(" ".join(errors) + " Nothing was changed.")
    wrong = cd.wrong_drop_in_1180(drop_in_path) if mode == "drop_in" else None
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
        raise cd.ContainerdConfigError("nvidia-ctk wrote files other than the ones asked for: %s%s. Nothing was changed."
                                       % (", ".join(candidate.stray),
                                          " (nvidia-ctk 1.18.0's wrong drop-in directory, #1404)"
                                          if any("/config.d/" in s for s in candidate.stray) else ""))
    if candidate.files.get(config_path) is None and mode == "in_place":
        raise cd.ContainerdConfigError("nvidia-ctk left no %s; nothing was changed" % config_path)
    lost = cd.lost_imports(source, candidate.trees.get(config_path, {}))
    if lost:
        raise cd.ContainerdConfigError("nvidia-ctk %s would drop existing imports %s from %s (the 1.18.0 bug, PR"
                                       " #1382, fixed in 1.18.1); nothing was changed. Upgrade %s."
                                       % (cd.version_string(ctk_version), lost, config_path, cd.CTK_PACKAGE))
    if mode == "drop_in" and candidate.files.get(drop_in_path) is None:
        raise cd.ContainerdConfigError("nvidia-ctk %s did not write the drop-in %s; nothing was changed"
                                       % (cd.version_string(ctk_version), drop_in_path))

    # What containerd will run: its own merged view when it can be asked, else the files' approximation.
    if candidate.dump is not None:
        after_view, before_view = candidate.dump, before_dump
        view_version = cd.config_version(candidate.dump, "config dump")
        before_version = cd.config_version(before_dump, "config dump") if before_dump else view_version
        problems, dump_warnings = cd.check_candidate_dump(candidate.dump, p["runtime_name"], p["runtime_path"],
                                                          p["set_as_default"], p["cdi_enabled"], containerd_version)
        if problems:
            raise cd.ContainerdConfigError("containerd %s would not run this candidate, so it was refused and nothing"
                                           " was changed: %s" % (containerd_version, "; ".join(problems)))
        warnings += dump_warnings
    else:
        after_view = cd.effective_cri_tree(candidate.trees.get(config_path), candidate.trees.get(drop_in_path),
                                           version)
        before_view = cd.effective_cri_tree(source, cd.parse_toml(live[drop_in_path], "drop_in_path " + drop_in_path)
                                            if live.get(drop_in_path) else None, version)
        view_version = before_version = version
        if not isinstance(cd.runtimes_of(after_view, version).get(p["runtime_name"]), dict):
            raise cd.ContainerdConfigError("nvidia-ctk's result defines no runtime %r; nothing was changed"
                                           % p["runtime_name"])
    sc_errors, sc_warnings = cd.systemd_cgroup_findings(before_view if before_version == view_version else None,
                                                        after_view, view_version, p["runtime_name"],
                                                        cd.source_runtime_name(source, version))
    if sc_errors:
        raise cd.ContainerdConfigError(" ".join(sc_errors) + " Nothing was changed.")
    warnings += sc_warnings
    changes = []
    if candidate.dump is not None and before_view is not None:
        changes = cd.effective_changes(before_view, after_view, p["runtime_name"], before_version, view_version)
        if changes:
            warnings.append("containerd's merged configuration also changes: %s" % "; ".join(changes))

    plan = cd.plan_files(live, candidate.files)
    changed = any(item["action"] != "none" for item in plan)
    files = []
    for item in plan:
        entry = {"path": item["path"], "action": item["action"]}
        if changed and not module.check_mode and item["action"] in ("update", "delete") and p["backup"]:
            entry["backup_file"] = module.backup_local(item["path"])
        files.append(entry)
    if changed and not module.check_mode:
        for item in plan:
            if item["action"] in ("create", "update"):
                write_atomic(module, item["path"], item["after"])
            elif item["action"] == "delete":
                os.unlink(item["path"])
        for item in plan:
            now = read_live(module, item["path"], "written file")
            if now != item["after"]:
                module.fail_json(msg="%s does not hold what was written (changed underneath?)" % item["path"],
                                 changed=True, files=files)

    for warning in warnings:
        module.warn(warning)
    result = {
        "changed": changed,
        "files_changed": [item["path"] for item in plan if item["action"] != "none"],
        "files": files,
        "restart_required": changed,
        "edit_mode": mode,
        "config_version": version,
        "nvidia_ctk_version": cd.version_string(ctk_version),
        "containerd_version": containerd_version,
        "validated": candidate.dump is not None,
        "trap_warnings": warnings,
        "effective_changes": changes,
    }
    if module._diff:
        result["diff"] = cd.diff_entries(plan)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config_path=dict(type="path", default=cd.DEFAULT_CONFIG),
            drop_in_path=dict(type="path", default=cd.DEFAULT_DROP_IN),
            edit_mode=dict(type="str", default="auto", choices=list(cd.EDIT_MODES)),
            runtime_name=dict(type="str", default="nvidia"),
            set_as_default=dict(type="bool", default=False),
            cdi_enabled=dict(type="bool", default=False),
            runtime_path=dict(type="path", default=cd.DEFAULT_RUNTIME_PATH),
            nvidia_ctk_path=dict(type="path"),
            containerd_path=dict(type="path"),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        run_module(module)
    except cd.TomlLibraryMissing as exc:
        module.fail_json(msg=missing_required_lib("tomli", reason=str(exc)))
    except cd.ContainerdConfigError as exc:
        module.fail_json(msg=str(exc), changed=False)
    except (IOError, OSError) as exc:
        module.fail_json(msg="containerd_runtime: %s" % exc, exception=traceback.format_exc())


if __name__ == "__main__":
    main()
