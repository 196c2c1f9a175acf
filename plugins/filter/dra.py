# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the DRA provider: the ResourceClaimTemplates to publish (plugins/module_utils/plan/_dra.py); documented in
dra_templates.yml and dra_node_templates.yml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The planners are imported where a filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process, and compiles the
# collection's Python from source each time (issue 36; in git history:
# docs/readings/fleet-compare-issue36-2cores.md at dd40865).


def _planners():
    """(_dra, _sharing), imported on first use."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra, _sharing
    return _dra, _sharing


def _interval(interval):
    _dra = _planners()[0]
    if interval not in _dra.INTERVALS:
        raise AnsibleFilterError("the DRA time-slice interval %r is not one of %s" % (interval, ", ".join(_dra.INTERVALS)))
    return interval


def _profiles(profiles, who):
    _dra = _planners()[0]
    if not isinstance(profiles, list) or not all(isinstance(p, dict) for p in profiles):
        raise AnsibleFilterError("%s: the input must be the fleet's device plugin profiles (a list of mappings, as "
                                 "gpuops.nvidia.device_plugin_profiles returns them), got %s"
                                 % (who, type(profiles).__name__))
    for p in profiles:
        try:
            _dra.base_name(p)
        except (TypeError, ValueError, OverflowError):
            raise AnsibleFilterError("%s: profile %.200r has no whole replica count" % (who, p))
    return profiles


def dra_templates(profiles, explicit=None, interval="Default"):
    """The fleet's templates: a whole GPU, one per time-slicing profile, and the user's explicit ones."""
    _dra = _planners()[0]
    _profiles(profiles, "dra_templates")
    try:
        fleet = _dra.fleet_templates(profiles, _interval(interval))
        mine = _dra.explicit_templates(explicit)
    except _dra.DraError as exc:
        raise AnsibleFilterError(str(exc))
    clash = sorted(set(t["name"] for t in fleet) & set(t["name"] for t in mine))
    if clash:
        raise AnsibleFilterError("gpuops_dra_claim_templates: %s %s the name of a template the collection publishes for "
                                 "the fleet's profiles; choose another name" % (", ".join(clash),
                                                                                "is" if len(clash) == 1 else "are"))
    return fleet + mine


def dra_node_templates(gpus, profile, node_name, per_gpu=False, interval="Default"):
    """A node's GPU-dependent templates, as {'shared': [...], 'node': [...]}: MPS per GPU product and MIG per profile
    (shared by every node with the same GPUs), and with per_gpu one per GPU of the node."""
    _dra, _sharing = _planners()
    gpus = gpus.get("gpus") if isinstance(gpus, dict) else gpus
    if not isinstance(gpus, list) or not isinstance(profile, dict):
        raise AnsibleFilterError("dra_node_templates: give the node's GPU facts and its device plugin profile")
    _profiles([profile], "dra_node_templates")
    try:
        gpus = _sharing.check_gpu_facts(gpus)
    except _sharing.ShareError as exc:
        raise AnsibleFilterError("dra_node_templates: %s" % exc)
    for gpu in gpus:
        if not isinstance(gpu.get("uuid"), str) or not isinstance(gpu.get("mig_devices") or [], list) or not all(
                isinstance(d, dict) and isinstance(d.get("profile"), str) and isinstance(d.get("uuid"), str)
                for d in gpu.get("mig_devices") or []):
            raise AnsibleFilterError("dra_node_templates: GPU %r has no uuid, or MIG devices without uuid and profile "
                                     "(gpu_info's facts expected)" % (gpu.get("index"),))
    try:
        templates = _dra.node_templates(profile, gpus, node_name, per_gpu, _interval(interval))
    except (_dra.DraError, _sharing.ShareError) as exc:
        raise AnsibleFilterError("node %s: %s" % (node_name, exc))
    return {"shared": [t for t in templates if t["profile"] != "per-gpu"],
            "node": [t for t in templates if t["profile"] == "per-gpu"]}


def dra_profile_names(profiles):
    """The template profile labels the fleet's profiles keep (mps-4, ts-2, mig, default)."""
    _profiles(profiles, "dra_profile_names")
    _dra = _planners()[0]
    return sorted(set(_dra.base_name(p) for p in profiles or []))


class FilterModule(object):
    def filters(self):
        return {"dra_templates": dra_templates, "dra_node_templates": dra_node_templates,
                "dra_profile_names": dra_profile_names}
