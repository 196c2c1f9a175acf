# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_summary
short_description: One readable line per GPU from gpu_info facts
version_added: 0.1.0
description:
  - Turns the C(nvidia_gpus) fact (or a registered gpu_info result) into short lines a person can read
    in a play's output; a MIG-enabled GPU gets one more line per MIG device.
positional: _input
options:
  _input:
    description: The gpu_info result or the C(nvidia_gpus) fact.
    type: dict
    required: true
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Show the GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_gpus | gpuops.nvidia.gpu_summary }}"
"""

RETURN = r"""
_value:
  description: Lines of text, the first naming the backend and driver.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


def gpu_summary(facts):
    if not isinstance(facts, dict) or not isinstance(facts.get("gpus"), list):
        raise AnsibleFilterError("gpu_summary expects the gpu_info result or the nvidia_gpus fact "
                                 "(a dict with a 'gpus' list), got %s" % type(facts).__name__)
    lines = ["%s GPUs, driver %s, CUDA %s" % (
        facts.get("backend", "?"), facts.get("driver_version", "?"), facts.get("cuda_driver_version", "?"))]
    for n, g in enumerate(facts["gpus"]):
        try:
            lines.extend(_gpu_lines(g))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise AnsibleFilterError("gpu_summary: gpus[%d] is not a GPU as gpu_info reports it (index, name, "
                                     "memory_total_mib, compute_capability, compute_mode, mig_devices...): %s: %s"
                                     % (n, type(exc).__name__, exc))
    return lines


def _gpu_lines(g):
    """The summary lines of one GPU (raises KeyError/TypeError/... on what is not gpu_info's shape)."""
    lines = []
    if g.get("mig_supported"):
        mig = "MIG %s" % g.get("mig_mode_current")
        if g.get("mig_mode_pending") != g.get("mig_mode_current"):
            mig += " (pending %s)" % g.get("mig_mode_pending")
    else:
        mig = "no MIG"
    name = g["name"][len("NVIDIA "):] if g["name"].startswith("NVIDIA ") else g["name"]
    lines.append("GPU%s %s %dMiB cc%s %s %s %dproc%s" % (
        g["index"], name, g["memory_total_mib"], g["compute_capability"], mig, g["compute_mode"],
        len(g.get("processes") or []),
        " %dMIGdev" % len(g.get("mig_devices") or []) if g.get("mig_devices") else ""))
    for d in g.get("mig_devices") or []:
        lines.append("  MIG %s GI%s/CI%s @%s %s" % (
            d["profile"], d["gi_id"], d["ci_id"], d["placement"]["start"], d["uuid"]))
    return lines


class FilterModule(object):
    def filters(self):
        return {"gpu_summary": gpu_summary}
