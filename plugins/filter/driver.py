# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver role's declared packages and its modprobe.d file of the nvidia module's parameters (its ``declared``
entry point), from the pure planners. Documentation in driver_packages.yml and driver_params_conf.yml next to this
file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def driver_packages(declaration, node, hold=True):
    # imported where the filter runs (plugins/filter/declared.py says why)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_plan
    if not isinstance(declaration, dict) or not isinstance(node, dict):
        raise AnsibleFilterError("driver_packages: the declaration and the node must be dicts")
    try:
        return _driver_plan.declared_packages(declaration, node, hold=hold)
    except (_driver_plan.DriverPlanError, KeyError) as exc:
        raise AnsibleFilterError("driver_packages: %s" % exc)


def driver_params_conf(parameters):
    """The modprobe.d file's text for driver_module_parameters (_driver_params.render, the text driver_params writes);
    empty where there are none."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params
    try:
        return _driver_params.render(_driver_params.check(parameters)) or ""
    except _driver_params.DriverParamsError as exc:
        raise AnsibleFilterError("driver_params_conf: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"driver_packages": driver_packages, "driver_params_conf": driver_params_conf}
