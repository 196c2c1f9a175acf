# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one table of the collection's waits (PRIVATE to gpuops.nvidia).

Every wait of a module or a runner is a row of ``WAITS``: what is waited for, the condition that ends the wait (in
words, and as the predicate over what the wait's read returns), and the default timeout and interval of the options
that set them (a module's argument spec takes its defaults from here, so a default is written once; the option names
stay each module's own). ``wait(name, read, ...)`` reads until the row's condition holds or the timeout passes, on
``_poll.poll``: the clock and the sleep are parameters, so a test drives any wait with a fake clock. The reads stay
with their callers (a Node's label, a node's pods, NVML's fabric state, a pid): the table says when to stop.

The shape of kubernetes.core's waiter (ansible-collections/kubernetes.core at commit 1317159,
plugins/module_utils/k8s/waiter.py: one predicate per resource kind, one ``Waiter.wait`` with timeout and sleep);
the rows and the code here are this collection's own. Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections

from ansible_collections.gpuops.nvidia.plugins.module_utils.common._poll import poll

# what: what is waited for (and who waits); until: the condition that ends the wait, in words; done: that condition
# as a predicate over what the wait's read returns; timeout, interval: the defaults, in seconds, of the options that
# set them (None: the caller's own, documented beside it).
Wait = collections.namedtuple("Wait", ["what", "until", "done", "timeout", "interval"])


def _nothing_left(pending):
    return not pending


def _no_problem(seen):
    """(problems, found) of a verification read: done when it found no problem."""
    return not seen[0]


def _arrived(seen):
    """(slices arrived, slices expected) of the lease's barrier."""
    return len(seen[0]) >= seen[1]


WAITS = {
    "mig_manager": Wait(
        "the GPU Operator's MIG manager's verdict on a node's MIG config (gpu_operator_mig)",
        "the node's label nvidia.com/mig.config.state is success or failed",
        lambda state: state in ("success", "failed"), 600, 5.0),
    "pods_gone": Wait(
        "the pods of a node's GPU DaemonSets to leave it after a pause (node_gpu_pods, state=paused)",
        "no pod of those DaemonSets is left on the node", _nothing_left, 300, 2.0),
    "pods_ready": Wait(
        "the GPU DaemonSets recorded at a pause to run on the node again (node_gpu_pods, state=running)",
        "each of them that still exists has a Ready pod on the node", _nothing_left, 300, 2.0),
    "drain": Wait(
        "the GPU pods evicted from a cordoned node (node_cordon, drain=true)",
        "none of them is left on the node (one refused by a PodDisruptionBudget is asked again at each read)",
        _nothing_left, 300, 1.0),
    "rollout": Wait(
        "the device plugin's rollout (device_plugin with verify=true, device_plugin_verify)",
        "every node advertises the allocatable GPUs its profile promises, and an MPS node runs a Ready MPS control "
        "daemon pod", _no_problem, 300, 5.0),
    "exporter_metrics": Wait(
        "the DCGM exporter's metrics on a node (dcgm_exporter_verify)",
        "a Ready exporter pod runs on the node and its /metrics lists a GPU temperature series for every GPU of the "
        "node", _no_problem, 300, 5.0),
    "dra_slices": Wait(
        "the ResourceSlices of gpu.nvidia.com that a node publishes (dra_node_verify)",
        "they list exactly the devices of the node's GPUs", lambda seen: not seen[1], 300, 5.0),
    "fabric": Wait(
        "every GPU's NVLink fabric registration once the Fabric Manager runs (driver_services)",
        "no GPU is still registering", _nothing_left, 300, 5.0),
    "daemon_exit": Wait(
        "a daemon stopped through its pid file with SIGTERM before the driver unloads (driver_modules)",
        "its process is gone", lambda alive: not alive, 5, 0.1),
    "mps_up": Wait(
        "the MPS control daemon after a start (mps_control)", "it answers on its pipe directory",
        lambda running: running, 30, 0.2),
    "mps_down": Wait(
        "the MPS control daemon after a stop (mps_control)", "it no longer answers", lambda running: not running,
        30, 0.2),
    "processes_exit": Wait(
        "the processes a forced MIG change ended with SIGTERM (mig_layout, force=true)",
        "none of them is alive (those still alive then get SIGKILL)", _nothing_left, 30, 0.5),
    "node_lock": Wait(
        "the node lock another run holds (every module that changes the node: lock_timeout)",
        "this run holds the lock", bool, 600, 0.05),
    "lease_free": Wait(
        "the cluster lease another run holds (cluster_lease, state=acquired)",
        "the lease is free, expired or this run's", lambda seen: seen[2] != "wait", 900, 1.0),
    "lease_arrivals": Wait(
        "the other slices of a run at the cluster lease (cluster_lease, run_slices)",
        "run_slices slices of the run have arrived", _arrived, 120, 1.0),
}


def wait(name, read, timeout=None, interval=None, clock=None, sleep=None):
    """Call ``read()`` until the condition of the wait ``name`` (a key of WAITS) holds for what it returned, or
    ``timeout`` seconds have passed, sleeping ``interval`` seconds between reads (None: the row's defaults).
    ``clock`` and ``sleep`` (None: time.monotonic and time.sleep) are a test's. Returns _poll.Polled(done, seen,
    waited): what the last read saw, for the message of a timeout."""
    row = WAITS[name]
    extra = {}
    if clock is not None:
        extra["clock"] = clock
    if sleep is not None:
        extra["sleep"] = sleep
    return poll(read, row.done, row.timeout if timeout is None else timeout,
                row.interval if interval is None else interval, **extra)
