# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: node_steps
short_description: What the gpuops.nvidia.gpu_node role manages on a node, decided from its variables by the step registry
version_added: 0.3.0
description:
  - The gpu_node role's one decision, before its node plan, of which of its steps the collection manages on this
    node and which the node plan checks, made from the role's variables (its defaults, the inventory, the other
    roles' variables) by the step registry (C(plugins/module_utils/node/_node_steps.py)), each step's own rule -
    who owns it (the GPU Operator, NVIDIA's DRA driver, the collection), whether the node declares it.
  - Takes no terms. Reads only variables; changes nothing, contacts nothing.
  - Internal to the gpuops.nvidia.gpu_node role (its C(converge.yml) sets C(__gpu_node) from it, and molecule's gpu
    verify does the same); the shape of the answer may change between releases.
options: {}
"""

EXAMPLES = r"""
- name: Decide which steps run on this node (the gpu_node role's variables must be in scope)
  ansible.builtin.set_fact:
    __gpu_node: "{{ lookup('gpuops.nvidia.node_steps') }}"
"""

RETURN = r"""
_raw:
  description:
    - One mapping - C(kube) (the node is on a cluster), C(standalone) (the device plugin chart or the DRA driver is
      this collection's), C(managed) (step -> whether the collection manages it here), C(planned) (step -> whether
      the node plan checks it), C(mig) (what the mig role is given - C(manage), C(layout), C(config_name), C(cdi),
      and C(blockers), the units it stops before a GPU reset - the step registry's daemons that hold the GPUs, after
      any other unit C(mig_blocker_services) names).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpuops.nvidia.plugins.plugin_utils.role_vars import role_vars


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("gpuops.nvidia.node_steps takes no terms, got %r" % (terms,))
        # the registry is imported here, not when ansible-core loads this file
        from ansible_collections.gpuops.nvidia.plugins.module_utils.node._node_steps import resolve
        try:
            return [resolve(role_vars(self._loader, self._templar, variables or {}))]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AnsibleLookupError("gpuops.nvidia.node_steps: the gpu_node role's variables are not what it "
                                     "expects (%s: %s); run it inside the role, after its validation" %
                                     (type(exc).__name__, exc))
