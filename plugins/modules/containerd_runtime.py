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
  - After a run (not in check mode) it records what it verified in a stamp beside O(config_path)
    (C(.config.toml.gpuops-verified.json)), namely the sha256 of every file containerd loads (the config, the drop-in,
    the other C(*.toml) files of the drop-in directory, everything they import), the identity of the nvidia-ctk and
    containerd binaries (path, inode, size, mtime, ctime), the parameters and the module's own code. After a
    change, the written files are first evaluated again exactly as the next run would, and only a result with
    nothing to change is recorded. A later run, check mode included, that finds every one of these unchanged
    returns the recorded result (with RV(verified_earlier)) without running either tool; any difference is a full
    run. Deleting the stamp only makes the next run a full one.
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
      - On a C(version = 1) config nvidia-ctk writes C(enable_cdi) under C([plugins.cri.containerd]), which
        containerd's CRI plugin does not read; the module then also sets C(enable_cdi = true) under
        C([plugins.cri]) (in place, nvidia-ctk up to 1.17) and warns. A version 1 config in drop-in mode (nvidia-ctk
        1.18+) is refused; convert it to C(version = 2). A result in which containerd's CRI plugin would not have
        C(enable_cdi = true) is refused, nothing changed.
    type: bool
    default: false
  runtime_path:
    description: Absolute path of nvidia-container-runtime, written as the runtime's C(options.BinaryName).
    type: path
    default: /usr/bin/nvidia-container-runtime
  nvidia_ctk_path:
    description:
      - Path of nvidia-ctk. When omitted it is searched in PATH, C(/usr/bin), C(/usr/local/bin) and C(/usr/sbin).
      - nvidia-ctk comes with the C(nvidia-container-toolkit) package.
    type: path
  containerd_path:
    description:
      - Path of the containerd binary that will load the config, used for C(containerd --config FILE config dump)
        validation. When omitted it is searched in PATH, C(/usr/bin), C(/usr/local/bin) and C(/usr/sbin); when none
        is found the module warns and relies on its own checks. When given, it must exist.
    type: path
  distribution:
    description:
      - Which containerd is configured. V(containerd) is a containerd with its own config (O(config_path)), edited
        with nvidia-ctk as described above.
      - V(k3s) and V(rke2) are the containerd their agent runs and generates the config of at every start
        (C(/var/lib/rancher/k3s/agent/etc/containerd/), the same under C(rke2)). nvidia-ctk is not used. The agent
        adds the C(nvidia), C(nvidia-experimental) and C(nvidia-cdi) runtimes itself when it finds their executables
        in its PATH; the module sets C(default-runtime) in C(/etc/rancher/<distribution>/config.yaml) (with
        O(set_as_default)) and writes a template (C(config-v3.toml.tmpl) where the agent generates a version 3
        config, that is containerd 2.x, else C(config.toml.tmpl)) holding C({{ template "base" . }}) and only what the
        agent does not generate (a runtime under another name or path). RV(restart_required) says whether the
        agent (RV(restart_service)) must restart, which is when a file changed or the config it generated last does not
        yet serve the declaration.
      - V(auto) is the containerd the kubelet talks to (its C(--container-runtime-endpoint), from its command line,
        C(/var/lib/kubelet/kubeadm-flags.env), C(/etc/default/kubelet), C(/etc/sysconfig/kubelet) or
        C(/var/lib/kubelet/config.yaml); k3s/RKE2's embedded kubelet uses C(/run/k3s/containerd/containerd.sock)),
        else the only distribution present, else V(containerd).
      - Whatever the choice, a declaration aimed at a containerd that does not serve the kubelet is refused, naming
        both, before anything changes.
    type: str
    choices: [auto, containerd, k3s, rke2]
    default: auto
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
  - "B(k3s and rke2) regenerate C(config.toml) at every start of their agent, so changes to the generated file are
    lost, and nvidia-ctk cannot parse their Go templates. With O(distribution=k3s) or O(distribution=rke2) (or
    V(auto) on such a node) the module works through the distribution's own mechanisms instead; see the
    collection's docs/containerd.md, section k3s and RKE2."
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
  description:
    - Whether containerd must be restarted for the change to take effect (with a plain containerd, true exactly when
      changed; with k3s or rke2, also when the config the agent generated last does not serve the declaration yet).
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
distribution:
  description: The containerd configured (V(k3s) or V(rke2)); only on that path.
  returned: when the distribution is k3s or rke2
  type: str
  sample: k3s
restart_service:
  description:
    - The distribution's unit to restart (C(k3s), C(k3s-agent), C(rke2-server), C(rke2-agent)). Where both of its
      units are installed (RKE2's tarball), the enabled one; null where not exactly one is enabled and no restart is
      needed (a needed restart is refused then, naming both units).
  returned: when the distribution is k3s or rke2
  type: str
  sample: k3s-agent
restart_reasons:
  description: Why the distribution's agent must restart (a file changed; what its generated config lacks).
  returned: when the distribution is k3s or rke2
  type: list
  elements: str
template_path:
  description: The template the distribution reads (written only when it has something to add).
  returned: when the distribution is k3s or rke2
  type: str
  sample: /var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl
detected_runtimes:
  description: The NVIDIA runtimes the distribution's agent finds in its PATH (and adds itself).
  returned: when the distribution is k3s or rke2
  type: list
  elements: str
  sample: [nvidia, nvidia-cdi]
verified_earlier:
  description:
    - Present (true) when every file containerd loads, both binaries, the parameters and the module's code were
      exactly as an earlier run verified them, so the earlier result was returned without running nvidia-ctk or
      containerd.
  returned: when the stamp matched
  type: bool
  sample: true
"""

import traceback

from ansible.module_utils.basic import missing_required_lib

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _containerd_config as containerd_config
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _containerd_run as containerd_run
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _containerd_distribution as distribution
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_target import TargetError
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import LiveFileError
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    Done, Failure, ModuleRun, run_module)


class ContainerdRuntime(ModuleRun):
    """validate (the parameters, a TOML reader and both tools: _containerd_run.ContainerdRun) -> read: a verified
    state that still holds is the answer (Done, no tool run), else both tools' versions, the live files, containerd's
    view -> plan (nvidia-ctk on private copies, validated by containerd, compared with the live files) -> apply
    outside check mode (backups, atomic writes, read back) -> after: the result, and the verified state recorded."""

    argument_spec = dict(containerd_config.ARGUMENT_SPEC, backup=dict(type="bool", default=False))
    errors = (containerd_config.ContainerdConfigError, LiveFileError, IOError, OSError)
    refusals = (TargetError,)

    def failing(self, exc):
        if isinstance(exc, containerd_config.TomlLibraryMissing):
            return Failure(missing_required_lib("tomli", reason=str(exc)), changed=False)
        if isinstance(exc, (IOError, OSError)):
            return Failure("containerd_runtime: %s" % exc, exception=traceback.format_exc(), changed=False)
        return None

    def read(self):
        p = self.params
        containerd_config.validate_params(p["config_path"], p["drop_in_path"], p["edit_mode"], p["runtime_name"],
                                          p["runtime_path"])
        # first: the containerd the kubelet talks to (a declaration aimed at another one is refused, naming both)
        self.kind = distribution.target(self.params)[0]
        if self.kind != "containerd":  # k3s / RKE2: their agent generates the config; no nvidia-ctk
            self.root = distribution.node_root()
            return None
        self.run_ = containerd_run.ContainerdRun(self.module)
        earlier = self.run_.verified_earlier()
        if earlier is not None:
            raise Done(**earlier)
        self.files = None
        return self.run_.read_current()

    def plan(self, current):
        if self.kind != "containerd":
            self.planned = distribution.plan_distribution(self.kind, self.params, self.root)
            self.files = None
            return self.planned if self.planned.changed else None
        self.planned = self.run_.plan(current)
        return self.planned if self.planned.changed else None

    def apply(self, current, changes):
        if self.kind != "containerd":
            self.files = distribution.apply_distribution(self.module, changes, self.root)
            return
        self.files = self.run_.apply(changes)       # no rollback: see ContainerdRun.apply

    def after(self, current, changes):
        if self.kind != "containerd":
            files = self.files if self.files is not None else [
                {"path": item["path"], "action": item["action"]} for item in self.planned.plan]
            self.result = distribution.distribution_result(self.module, self.planned, files)
            return
        files = self.files if self.files is not None else self.run_.files(self.planned)
        self.result = self.run_.result(self.planned, files)
        if not self.module.check_mode:
            self.run_.record(self.planned)  # the verified state, for the next run and gpu_node_plan


def main():
    run_module(ContainerdRuntime)


if __name__ == "__main__":
    main()
