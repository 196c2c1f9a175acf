# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each replica of a shared GPU gets, computed the way NVIDIA's device plugin computes it.

Pure functions over GPU facts (the ``gpus`` list that ``gpu_info`` returns); no I/O.

The device plugin's MPS control daemon (k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go) sets, per
device index, ``set_default_device_pinned_mem_limit <index> <total_bytes / replicas / 1MiB>M`` with integer
division, and once ``set_default_active_thread_percentage <100 / replicas>``, also integer division.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MIB = 1024 * 1024

SHARE_MODES = ("per_gpu", "pool")


class ShareError(ValueError):
    """Input that cannot be shared as asked; the message says what is wrong and what is valid."""


def _gpu_total_bytes(gpu):
    if gpu.get("memory_total_bytes"):
        return int(gpu["memory_total_bytes"])
    return int(gpu["memory_total_mib"]) * MIB


def replica_shares(gpus, replicas, mode="per_gpu"):
    """Return what each replica gets.

    ``mode='per_gpu'``: every GPU is split into ``replicas`` replicas (the device plugin's own meaning of
    ``replicas``: capacity = GPUs x replicas).
    ``mode='pool'``: ``replicas`` is the node's total, spread evenly over its GPUs; it must divide by the
    number of GPUs, because the device plugin gives every GPU of a resource the same replica count.
    """
    if mode not in SHARE_MODES:
        raise ShareError("mode must be one of %s, got %r" % (", ".join(SHARE_MODES), mode))
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ShareError("replicas must be a whole number, got %r" % (replicas,))
    gpus = list(gpus or [])
    if not gpus:
        raise ShareError("no GPUs to share: the GPU facts list no GPU")
    if mode == "pool":
        if replicas < 2 * len(gpus) or replicas % len(gpus):
            raise ShareError(
                "pool replicas must be a multiple of the GPU count (%d) and at least 2 per GPU, got %d"
                % (len(gpus), replicas))
        per_gpu = replicas // len(gpus)
    else:
        if replicas < 2:
            raise ShareError("number of replicas must be >= 2 (the device plugin's rule), got %d" % replicas)
        per_gpu = replicas
    out = []
    for gpu in gpus:
        total = _gpu_total_bytes(gpu)
        out.append({
            "index": gpu.get("index"),
            "uuid": gpu.get("uuid"),
            "name": gpu.get("name"),
            "replicas": per_gpu,
            "memory_total_mib": total // MIB,
            "memory_per_replica_mib": total // per_gpu // MIB,
            "active_thread_percentage": 100 // per_gpu,
        })
    return {
        "mode": mode,
        "replicas_per_gpu": per_gpu,
        "replicas_total": per_gpu * len(gpus),
        "active_thread_percentage": 100 // per_gpu,
        "memory_per_replica_mib_min": min(g["memory_per_replica_mib"] for g in out),
        "gpus": out,
    }
