# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: the options of a module's wait (O(timeout), O(interval)) for the modules that name them so:
gpu_operator_mig, node_gpu_pods, dra_node_verify and device_plugin_verify. What each waits for and when it ends is a
row of the one table of waits (plugins/module_utils/common/_waits.py, WAITS), and so is each default, which the module
states in its own documentation (the fragment's text is shared; a default is the module's own)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The shape of kubernetes.core's k8s_wait_options (ansible-collections/kubernetes.core,
    # plugins/doc_fragments/k8s_wait_options.py); the text is this collection's own.
    DOCUMENTATION = r"""
options:
  timeout:
    description:
      - Seconds to wait for what the module waits for (its description says what, and the condition that ends the
        wait), from 0 to 86400 (one day). V(0) reads once.
      - When the condition does not hold by then, the module fails and says what it saw at its last read.
    type: int
  interval:
    description: Seconds between two reads while waiting, from 0.01 to 3600.
    type: float
"""
