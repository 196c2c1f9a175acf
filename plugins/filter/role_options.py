# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: role_options
short_description: The options of several roles' main entry points, merged, for one validate_argument_spec task
version_added: 0.3.0
description:
  - Reads C(meta/argument_specs.yml) of each named role under O(roles_dir) and merges the options of their C(main)
    entry points into one argument spec, with the options' C(default) dropped (a variable the inventory does not set
    is not checked; the roles check their own defaults when they start) and the C(description) texts left out.
  - What gpuops.nvidia.gpu_node's validation gives C(ansible.builtin.validate_argument_spec), so that one task
    checks every variable of the roles site.yml runs (the same result as merging the specs in Jinja, at a
    fraction of the controller's time).
positional: _input, roles_dir
options:
  _input:
    description: Role names (directories under O(roles_dir)).
    type: list
    elements: str
    required: true
  roles_dir:
    description: The directory that holds the roles.
    type: path
    required: true
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Check every variable of two roles
  ansible.builtin.validate_argument_spec:
    argument_spec: "{{ ['gpu_node', 'mig'] | gpuops.nvidia.role_options(role_path ~ '/..') }}"
"""

RETURN = r"""
_value:
  description: Option name to its spec (type, elements, choices, options, ...), without its default and descriptions.
  type: dict
"""

import os
import re

import yaml
from ansible.errors import AnsibleFilterError

# patterns, compiled (and cached by re) where a filter first matches one: this file is loaded, with every other
# filter file of the collection, in each worker that looks up any gpuops.nvidia filter (issue 36 item 7)
_ROLE = r"^[a-z][a-z0-9_]{0,63}$"
_MAX_BYTES = 1024 * 1024
_DOCS = ("description", "version_added")


def role_options(roles, roles_dir):
    if not isinstance(roles, (list, tuple)) or not all(isinstance(r, str) and re.match(_ROLE, r) for r in roles):
        raise AnsibleFilterError("role_options expects a list of role names (lower-case letters, digits and _, "
                                 "starting with a letter), got %r" % (roles,))
    if not isinstance(roles_dir, str) or not roles_dir or "\x00" in roles_dir:
        raise AnsibleFilterError("role_options: roles_dir must be a directory path, got %r" % (roles_dir,))
    options = {}
    for role in roles:
        spec = _main_options(role, os.path.join(roles_dir, role, "meta", "argument_specs.yml"))
        for name, option in spec.items():
            if name in options:
                raise AnsibleFilterError("role_options: option %s is declared by two of the roles %s"
                                         % (name, ", ".join(roles)))
            options[name] = dict((k, v) for k, v in _strip(option).items() if k != "default")
    return options


def _main_options(role, path):
    if not os.path.isfile(path):  # checked before opening: a FIFO or a device is never opened
        raise AnsibleFilterError("role_options: role %s has no argument spec file %s" % (role, path))
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except (IOError, OSError, ValueError) as exc:
        raise AnsibleFilterError("role_options: cannot read role %s's argument spec %s: %s" % (role, path, exc))
    if len(data) > _MAX_BYTES:
        raise AnsibleFilterError("role_options: %s is larger than %d bytes" % (path, _MAX_BYTES))
    try:
        options = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["argument_specs"]["main"]["options"]
    except Exception as exc:  # pylint: disable=broad-except  # not YAML, not a spec: said, never a traceback
        raise AnsibleFilterError("role_options: %s has no argument_specs.main.options (%s: %s)"
                                 % (path, type(exc).__name__, exc))
    if not isinstance(options, dict):
        raise AnsibleFilterError("role_options: argument_specs.main.options of %s is not a mapping" % path)
    return options


def _strip(option):
    """The option's spec without its documentation (description, version_added), also in its suboptions (whose
    defaults stay: they shape a value the inventory sets)."""
    if not isinstance(option, dict):
        return option
    out = dict((k, v) for k, v in option.items() if k not in _DOCS)
    if isinstance(out.get("options"), dict):
        out["options"] = dict((k, _strip(v)) for k, v in out["options"].items())
    return out


class FilterModule(object):
    def filters(self):
        return {"role_options": role_options}
