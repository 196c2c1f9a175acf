# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: mig_plan_summary
short_description: One readable line per GPU from the check-mode results of mig_layout and mig_mode
version_added: 0.1.0
description:
  - Joins the C(gpus) of a M(gpuops.nvidia.mig_layout) result and of a M(gpuops.nvidia.mig_mode) result (check mode
    or not) into lines a person reads before a fleet change, for example
    C(GPU0 A100-SXM4-40GB - MIG Disabled -> Enabled (set_mig_mode, reset_gpu); create 2g.10gb@0, 1g.5gb@2)
    (with a colon after the GPU name).
  - GPUs that would not change are left out.
positional: _input
options:
  _input:
    description: The C(gpus) list of a mig_layout result.
    type: list
    elements: dict
    required: true
  mode_gpus:
    description: The C(gpus) list of a mig_mode result.
    type: list
    elements: dict
    default: []
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Show what MIG would change
  ansible.builtin.debug:
    msg: "{{ layout_plan.gpus | gpuops.nvidia.mig_plan_summary(mode_plan.gpus) }}"
"""

RETURN = r"""
_value:
  description: One line per GPU that would change.
  type: list
  elements: str
"""


from ansible.errors import AnsibleFilterError


def _short(name):
    name = name or "?"
    return name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name


def _instances(entries):
    out = []
    for e in entries or []:
        if e.get("kind", "gpu_instance") != "gpu_instance":
            continue
        where = (e.get("placement") or {}).get("start")
        out.append("%s%s" % (e.get("profile", "?"), "" if where is None else "@%s" % where))
    return out


def _entries(value, what):
    """The GPU entries of a mig_layout / mig_mode result's ``gpus``; AnsibleFilterError for anything else."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(g, dict) for g in value):
        raise AnsibleFilterError("mig_plan_summary: %s must be the gpus list of a %s result (a list of mappings), "
                                 "got %r" % (what, "mig_layout" if what == "layout_gpus" else "mig_mode", value))
    return value


def mig_plan_summary(layout_gpus, mode_gpus=None):
    try:
        return _summary(_entries(layout_gpus, "layout_gpus"), _entries(mode_gpus, "mode_gpus"))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise AnsibleFilterError("mig_plan_summary: the GPU entries are not as mig_layout and mig_mode return them "
                                 "(index, name, changed, destroyed, created, before, desired, actions...): %s: %s"
                                 % (type(exc).__name__, exc))


def _summary(layout_gpus, mode_gpus):
    by_index = {}
    for g in mode_gpus:
        by_index.setdefault(g.get("index"), {})["mode"] = g
    for g in layout_gpus:
        by_index.setdefault(g.get("index"), {})["layout"] = g
    lines = []
    for index in sorted(by_index, key=lambda i: (i is None, i)):
        mode, layout = by_index[index].get("mode"), by_index[index].get("layout")
        parts = []
        if mode and mode.get("changed"):
            before = (mode.get("before") or {}).get("current")
            parts.append("MIG %s -> %s (%s)" % (before, mode.get("desired"), ", ".join(mode.get("actions") or [])))
        if mode and mode.get("reboot_required"):
            parts.append("REBOOT required: %s" % mode.get("reason"))
        if layout and layout.get("changed"):
            destroyed, created = _instances(layout.get("destroyed")), _instances(layout.get("created"))
            if destroyed:
                parts.append("destroy %s" % ", ".join(destroyed))
            if created:
                parts.append("create %s" % ", ".join(created))
            busy = layout.get("busy_destroyed") or []
            if busy:
                parts.append("BUSY instances destroyed: %d" % len(busy))
        if parts:
            name = _short((mode or layout).get("name"))
            lines.append("GPU%s %s: %s" % (index, name, "; ".join(parts)))
    return lines


class FilterModule(object):
    def filters(self):
        return {"mig_plan_summary": mig_plan_summary}
