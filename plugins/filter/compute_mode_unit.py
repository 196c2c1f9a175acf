# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: compute_mode_unit
short_description: The systemd unit that re-applies NVIDIA GPU compute modes at boot
version_added: 0.2.0
description:
  - From the C(gpus) of a M(gpuops.nvidia.compute_mode) result, the text of a systemd oneshot unit that runs
    C(nvidia-smi -i <UUID> -pm 1) (with O(persistence)) and C(nvidia-smi -i <UUID> -c <MODE>) for each GPU, by
    UUID, in index order. Compute mode returns to Default on every reboot; the gpuops.nvidia.compute_mode role
    installs this unit.
  - M(gpuops.nvidia.gpu_node_plan) builds the same text with the same code to tell whether the installed unit is
    still right.
positional: _input
options:
  _input:
    description: The C(gpus) list of a compute_mode result (C(index), C(uuid), C(nvidia_smi_mode) per GPU).
    type: list
    elements: dict
    required: true
  persistence:
    description: Also set persistence mode at boot.
    type: bool
    default: true
  nvidia_smi:
    description: Path of nvidia-smi on the host.
    type: path
    default: /usr/bin/nvidia-smi
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Install the boot-time re-apply unit
  ansible.builtin.copy:
    content: "{{ result.gpus | gpuops.nvidia.compute_mode_unit(persistence=true) }}"
    dest: /etc/systemd/system/gpuops-compute-mode.service
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The unit file's text.
  type: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

# The planners are imported where a filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process, and compiles the
# collection's Python from source each time (issue 36; in git history:
# docs/readings/fleet-compare-issue36-2cores.md at dd40865).


# What may stand in a unit's ExecStart line: a UUID as NVML reports it (GPU-<hex and dashes>), an absolute path
# without white space or control characters (systemd splits the line on white space; a line break would start a
# new directive).
# patterns, compiled (and cached by re) where a filter first matches one: this file is loaded, with every other
# filter file of the collection, in each worker that looks up any gpuops.nvidia filter (issue 36 item 7)
_UUID = r"^(?:GPU|MIG)-[0-9A-Fa-f-]{1,80}$"
_PATH = r"^/[^\s\x00-\x1f\x7f]{0,4095}$"
_SHOWN = 120


def _shown(value):
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _gpu_errors(gpus):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import NVIDIA_SMI_MODE
    if not isinstance(gpus, list):
        return ["compute_mode_unit expects the gpus list of a compute_mode result (index, uuid, nvidia_smi_mode per "
                "GPU), got %s" % _shown(gpus)]
    errors = []
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict) or not {"index", "uuid", "nvidia_smi_mode"} <= set(gpu):
            errors.append("gpus[%d] must be a compute_mode result entry with index, uuid and nvidia_smi_mode, got %s"
                          % (i, _shown(gpu)))
            continue
        if isinstance(gpu["index"], bool) or not isinstance(gpu["index"], int) or not 0 <= gpu["index"] < 1024:
            errors.append("gpus[%d].index must be a GPU index (0 to 1023), got %s" % (i, _shown(gpu["index"])))
        if not isinstance(gpu["uuid"], str) or not re.match(_UUID, gpu["uuid"]):
            errors.append("gpus[%d].uuid must be a GPU UUID as NVML reports it (GPU-...), got %s"
                          % (i, _shown(gpu["uuid"])))
        if gpu["nvidia_smi_mode"] is not None and gpu["nvidia_smi_mode"] not in NVIDIA_SMI_MODE.values():
            errors.append("gpus[%d].nvidia_smi_mode must be one of %s (or null: not known), got %s"
                          % (i, ", ".join(sorted(NVIDIA_SMI_MODE.values())), _shown(gpu["nvidia_smi_mode"])))
    return errors


def compute_mode_unit(gpus, persistence=True, nvidia_smi="/usr/bin/nvidia-smi"):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._compute_mode import boot_unit
    errors = _gpu_errors(gpus)
    if not isinstance(nvidia_smi, str) or not re.match(_PATH, nvidia_smi):
        errors.append("nvidia_smi must be an absolute path without white space or control characters, got %s"
                      % _shown(nvidia_smi))
    if not isinstance(persistence, (bool, str, int)) or isinstance(persistence, float):
        errors.append("persistence must be a boolean, got %s" % _shown(persistence))
    if errors:
        raise AnsibleFilterError("compute_mode_unit: " + "; ".join(errors[:5]))
    try:
        persist = boolean(persistence, strict=True)
    except TypeError:
        raise AnsibleFilterError("compute_mode_unit: persistence must be a boolean, got %s" % _shown(persistence))
    return boot_unit(gpus, persist, nvidia_smi)


class FilterModule(object):
    def filters(self):
        return {"compute_mode_unit": compute_mode_unit}
