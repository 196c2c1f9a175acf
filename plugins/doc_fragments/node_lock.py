# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The node lock every GPU-changing module takes (plugins/module_utils/node/_node_lock.py).
    DOCUMENTATION = r"""
options:
  lock_timeout:
    description:
      - Seconds to wait for the node lock, which every GPU-changing module of this collection holds for its whole
        read, plan and apply, so that two runs on one node never interleave GPU changes.
      - When another run holds it longer, the module fails before reading or changing anything, naming the holder
        (PID, host, module, start time).
      - V(0) fails at once if the lock is held; at most 86400 (one day). When not set, the environment variable
        E(GPUOPS_NODE_LOCK_TIMEOUT), else 600.
      - The lock file is E(GPUOPS_NODE_LOCK) if set; on simulated GPUs C(<state file>.node.lock); otherwise
        C(/run/gpuops/node.lock). It is an flock lock, released by the kernel when the holder exits, even when killed.
    type: int
"""
