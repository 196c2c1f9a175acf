# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters over MPS sharing: replica shares, daemon defaults, validated per-workload limits.

Documentation of each filter lives next to this file (mps_shares.yml, mps_daemon_defaults.yml,
mps_limits.yml) so that ``ansible-doc -t filter gpuops.nvidia.<name>`` renders it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

display = Display()

# The planners are imported where a filter runs, not when this file loads: ansible-core loads every filter file of
# the collection to find any one gpuops.nvidia filter, in every task's fresh worker process, and compiles the
# collection's Python from source each time (issue 36; in git history:
# docs/readings/fleet-compare-issue36-2cores.md at dd40865).


def _planner():
    """The _sharing planner, imported on first use."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _sharing
    return _sharing


def _gpus(value):
    """Accept the gpu_info result, its facts, or the bare ``gpus`` list."""
    if isinstance(value, dict):
        if "gpus" in value:
            return value["gpus"]
        if "gpu_facts" in value and isinstance(value["gpu_facts"], dict):
            return value["gpu_facts"].get("gpus")
        raise AnsibleFilterError("expected GPU facts (a mapping with 'gpus') or a list of GPUs, got a mapping "
                                 "with keys %s" % ", ".join(sorted(str(k) for k in value)))
    if isinstance(value, (list, tuple)):
        return list(value)
    raise AnsibleFilterError("expected GPU facts (a mapping with 'gpus') or a list of GPUs, got %s"
                             % type(value).__name__)


def mps_shares(gpus, replicas, mode="per_gpu"):
    _sharing = _planner()
    try:
        return _sharing.replica_shares(_gpus(gpus), replicas, mode)
    except _sharing.ShareError as e:
        raise AnsibleFilterError("mps_shares: %s" % e)


def mps_daemon_defaults(gpus, replicas, mode="per_gpu"):
    _sharing = _planner()
    try:
        return _sharing.daemon_defaults(_gpus(gpus), replicas, mode)
    except _sharing.ShareError as e:
        raise AnsibleFilterError("mps_daemon_defaults: %s" % e)


def mps_limits(limits, gpus=None, replicas=None, mode="per_gpu", warn=True):
    if not isinstance(limits, dict):
        raise AnsibleFilterError("mps_limits: input must be a mapping with active_thread_percentage and/or "
                                 "pinned_device_mem_limit, got %s" % type(limits).__name__)
    unknown = sorted(set(limits) - set(["active_thread_percentage", "pinned_device_mem_limit"]))
    if unknown:
        raise AnsibleFilterError("mps_limits: unknown key(s) %s; valid: active_thread_percentage, "
                                 "pinned_device_mem_limit" % ", ".join(str(k) for k in unknown))
    if replicas is not None and gpus is None:
        raise AnsibleFilterError("mps_limits: replicas needs gpus (the GPU facts) to compute the shares")
    _sharing = _planner()
    try:
        out = _sharing.workload_limits(limits.get("active_thread_percentage"), limits.get("pinned_device_mem_limit"),
                                       gpus=_gpus(gpus) if gpus is not None else None, replicas=replicas, mode=mode)
    except _sharing.ShareError as e:
        raise AnsibleFilterError("mps_limits: %s" % e)
    if warn:
        for w in out["warnings"]:
            display.warning("mps_limits: %s" % w)
    return out


class FilterModule(object):
    def filters(self):
        return {
            "mps_shares": mps_shares,
            "mps_daemon_defaults": mps_daemon_defaults,
            "mps_limits": mps_limits,
        }
