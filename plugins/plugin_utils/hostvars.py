# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One node's variables out of ``hostvars`` for the filters that read the fleet's declarations (controller only)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def node_variables(hostvars, node, who):
    """``hostvars[node]``, or AnsibleFilterError in the words of the filter ``who``: a node that is not there, variables
    that are not a mapping."""
    if not isinstance(node, str) or node not in hostvars:
        raise AnsibleFilterError("%s: node %r is not in the input (a mapping of node name to variables, such as "
                                 "hostvars)" % (who, node))
    variables = hostvars[node]
    if not hasattr(variables, "get"):
        raise AnsibleFilterError("%s: the variables of node %s are not a mapping, got %s"
                                 % (who, node, type(variables).__name__))
    return variables
