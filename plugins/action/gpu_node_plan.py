# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of gpuops.nvidia.gpu_node_plan: ansible-core's own ``normal`` action (the module runs, with its
arguments, check mode, async and module_defaults, exactly as it would without this file), with Python's cyclic
garbage collector paused while the action runs.

Why (issue 36 item 7, docs/readings/rerun-gc-pause-session10.md): before the module runs, ansible-core builds its
payload in the task's worker process, parsing every file of the module's import closure into an AST
(module_common.recursive_finder: about 100 files, a third of a million new objects for the node plan). The worker
is a fork of ansible-playbook's main process and inherits its whole heap (inventory, plays, variables, facts); the
allocations start collections of the oldest generation, and each walks that inherited heap. For one node's
converged re-run that was a third of the payload build: 0.376 CPU s with the collector running, 0.244 paused.
Nothing the build or the result needs the cyclic collector (ASTs, the zip and the JSON result are freed by
reference counting); it runs again when the action returns, and the worker ends with the task. The pause is the
action's only difference from ``normal``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc

from ansible.plugins.action.normal import ActionModule as NormalAction


class ActionModule(NormalAction):

    def run(self, tmp=None, task_vars=None):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return super(ActionModule, self).run(tmp, task_vars)
        finally:
            if was_enabled:
                gc.enable()
