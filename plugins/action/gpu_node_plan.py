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
reference counting); it runs again when the action returns, and the worker ends with the task.
Inside the gpuops.nvidia.gpu_node role (its variables resolved: the fact ``__gpu_node``, from the lookup
gpuops.nvidia.node_steps), a task that gives no step's options is given every planned step's options from the role's
variables by the step registry (plugins/module_utils/node/_node_steps.py: each step's ``inputs``, and its role's
declaration for the files, units and packages), and its result gets ``gates`` (each node step -> whether it runs,
and ``disruptive``) and ``runs`` (the steps that are not disruptive and run, in order), decided by the registry from
the plan, the steps the role manages, check mode, whether this plan follows a change of this run
(``__gpu_node_plan_after_change``) and the node's marks (``__gpu_node_kube_node``, where the node was read).
The module's payload is kept between runs on the controller (plugins/plugin_utils/payload_store.py): a run whose
sources are those of an earlier run reads that run's payload instead of building it again (issue 48).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import payload_store
from ansible_collections.gpuops.nvidia.plugins.plugin_utils.role_vars import role_vars

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_FQN = "ansible_collections.gpuops.nvidia.plugins.modules.gpu_node_plan"


class ActionModule(NormalAction):

    def run(self, tmp=None, task_vars=None):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            task_vars = task_vars if task_vars is not None else {}
            role = self._from_role(task_vars)
            result = super(ActionModule, self).run(tmp, task_vars)
            if role is not None and not result.get("failed"):
                self._gates(role, result)
            return result
        finally:
            if was_enabled:
                gc.enable()

    def _configure_module(self, module_name, module_args, task_vars):
        build = super(ActionModule, self)._configure_module
        return payload_store.around_build(
            MODULE_FQN, os.path.join(COLLECTION, "plugins", "modules", "gpu_node_plan.py"),
            [os.path.join(COLLECTION, "plugins", "module_utils")],
            lambda: build(module_name, module_args, task_vars))

    def _from_role(self, task_vars):
        """Where the role's decision is in scope and the task gives no step's options: the arguments from the role's
        variables (the task's own ``steps`` and ``lock_timeout`` kept). Returns what the gates need, or None."""
        if "__gpu_node" not in task_vars:
            return None
        from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps
        from ansible_collections.gpuops.nvidia.plugins.filter.declared import node_plan_checks
        options = set(option for step in _node_steps.STEPS for option in step.option_names)
        if options & set(self._task.args):
            return None
        v = role_vars(self._loader, self._templar, task_vars)
        decided = v("__gpu_node")
        try:
            inputs = _node_steps.role_inputs(v, decided["planned"])
            inputs["declared"] = node_plan_checks(inputs["declared"])
            args = _node_steps.plan_args(inputs, self._task.args.get("steps"))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail("gpu_node_plan: the gpu_node role's variables are not what the step registry "
                                    "expects (%s: %s)" % (type(exc).__name__, exc))
        self._task.args = dict(self._task.args, **args)
        return {"managed": decided["managed"], "after_change": v.flag("__gpu_node_plan_after_change"),
                "node": v("__gpu_node_kube_node") if decided["kube"] else None}

    def _gates(self, role, result):
        from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _node_steps
        managed = dict((name, role["managed"][name]) for name in _node_steps.node_steps())
        node = role["node"] if isinstance(role["node"], dict) and not role["node"].get("skipped") else None
        try:
            gates = _node_steps.gates(result, managed, self._task.check_mode, after_change=role["after_change"],
                                      node=node)
        except ValueError as exc:
            raise AnsibleActionFail("gpu_node_plan: %s" % exc)
        result["gates"] = gates
        result["runs"] = _node_steps.runs(gates)
