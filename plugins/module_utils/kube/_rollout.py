# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rollout verification of NVIDIA's device plugin (PRIVATE): poll until nodes advertise what their config promises
(GPUs x replicas under the expected resource name: NVIDIA/k8s-device-plugin at commit 1b826acc,
internal/rm/device_map.go) and, on MPS nodes, run a ready pod of the MPS control daemon DaemonSet (the chart's
``<release>-mps-control-daemon`` and the GPU Operator's ``nvidia-device-plugin-mps-control-daemon`` both end so).
Shared by device_plugin and device_plugin_verify."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import wait


def _allocatable_int(value):
    try:
        return int(str(value))
    except ValueError:
        return None


def rollout_state(kube, expected, mps_nodes, namespace):
    """(problems, {node: its nvidia.com/ allocatable}): how the nodes differ from ``expected`` and from a ready MPS
    daemon pod on each of ``mps_nodes``, as read now."""
    problems, found = [], {}
    for node_name, want in sorted(expected.items()):
        node = kube.get("read node %s" % node_name, _kube.node_path(node_name))
        alloc = (node.get("status") or {}).get("allocatable") or {}
        found[node_name] = dict((k, v) for k, v in alloc.items() if k.startswith("nvidia.com/"))
        for res, count in sorted(want.items()):
            have = _allocatable_int(alloc.get(res, 0))
            if have != count:
                problems.append("node %s advertises %s=%s, expected %d"
                                % (node_name, res, alloc.get(res, 0), count))
    for node_name in sorted(mps_nodes):
        pods = kube.get("list pods in %s" % namespace, _kube.pods_path(namespace),
                        fieldSelector="spec.nodeName=%s" % node_name)
        ready = False
        seen = False
        for pod in pods.get("items") or []:
            owners = pod["metadata"].get("ownerReferences") or []
            if not any(o.get("kind") == "DaemonSet" and o.get("name", "").endswith("-mps-control-daemon")
                       for o in owners):
                continue
            seen = True
            conds = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                ready = True
        if not ready:
            problems.append("node %s: %s" % (node_name, "MPS control daemon pod is not ready" if seen else
                                             "no MPS control daemon pod (is nvidia.com/mps.capable=true set by "
                                             "GPU feature discovery?)"))
    return problems, found


def verify_rollout(kube, expected, mps_nodes, namespace, timeout, interval=None, sleep=time.sleep):
    """Read until every node advertises what ``expected`` says and MPS nodes run a ready MPS daemon pod (the table's
    ``rollout``; ``interval`` None: its default)."""
    polled = wait("rollout", lambda: rollout_state(kube, expected, mps_nodes, namespace), timeout, interval,
                  sleep=sleep)
    if not polled.done:
        raise _kube.KubeError("rollout verification failed after %ss: %s" % (timeout, "; ".join(polled.seen[0])))
    return polled.seen[1]
