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

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuops.nvidia.plugins.module_utils._compute_mode import boot_unit


def compute_mode_unit(gpus, persistence=True, nvidia_smi="/usr/bin/nvidia-smi"):
    if not isinstance(gpus, list) or not all(isinstance(g, dict) and {"index", "uuid", "nvidia_smi_mode"} <= set(g)
                                             for g in gpus):
        raise AnsibleFilterError("compute_mode_unit expects the gpus list of a compute_mode result (index, uuid, "
                                 "nvidia_smi_mode per GPU), got %r" % (gpus,))
    return boot_unit(gpus, boolean(persistence, strict=False), nvidia_smi)


class FilterModule(object):
    def filters(self):
        return {"compute_mode_unit": compute_mode_unit}
