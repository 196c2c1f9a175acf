# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_node role's variables as the step registry's controller-side rules read them (controller only).

The lookup gpuops.nvidia.node_steps and gpuops.nvidia.gpu_node_plan's action read variables through this: each is
templated by ansible-core's own ``ansible.builtin.vars`` lookup (the one the role's templates would use), so a
variable's value is what a task would see on every supported ansible-core version, only when a rule asks for it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.loader import lookup_loader

from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_steps import RoleVars


def role_vars(loader, templar, variables):
    """A ``RoleVars`` over ``variables`` (a task's variables), each templated on first use; a name not defined
    raises KeyError inside it (the rule's default applies)."""
    # (by its short name where ansible-core's collection loader is not installed: a test's process)
    lookup = (lookup_loader.get("ansible.builtin.vars", loader=loader, templar=templar)
              or lookup_loader.get("vars", loader=loader, templar=templar))

    def get(name):
        if name not in variables:
            raise KeyError(name)
        return lookup.run([name], variables)[0]

    return RoleVars(get)
