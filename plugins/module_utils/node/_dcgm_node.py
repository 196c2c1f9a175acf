# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM on the node, read (PRIVATE to gpuops.nvidia): the package database and the host engine's unit, for
gpuops.nvidia.dcgm_host_engine and the node plan's step dcgm (one read, one planner: plan/_dcgm_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _package_repo
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_plan, _packages

# apt's answer to ``apt-config shell D Dir::Etc::PreferencesParts/d`` (a directory, single-quoted by apt)
_SHELL_LINE = re.compile(r"^D='([^']+)'$")
DEFAULT_PREFERENCES = "/etc/apt/preferences.d"


def find_systemctl(module, given):
    """The systemctl command (an argument list): ``given`` where set, else systemctl on PATH; None where none is."""
    if given:
        return list(given)
    found = module.get_bin_path("systemctl", opt_dirs=["/usr/bin", "/bin"])
    return [found] if found else None


def read_node(module, params, systemctl):
    """{manager, names, installed, unit, pin_path, pin}: the package manager (``package_manager``, auto resolved from
    the tools the node has), DCGM's package names (``cuda``, ``proprietary``), what the package database holds of them
    (versions and dpkg holds), the unit ``service`` as ``systemctl`` answers (never enabled nor running where there is
    no systemctl), and on apt the preferences pin's path and text (None where the file is not there). Raises
    DcgmPlanError or PackageError."""
    found = dict((tool, module.get_bin_path(tool) is not None) for tool in ("dpkg-query", "apt-get", "rpm", "dnf"))
    manager = _dcgm_plan.resolve_manager(params["package_manager"], found)
    names = _dcgm_plan.package_names(params["cuda"], params["proprietary"])
    installed = _packages.read_installed(module, manager, names)
    unit = unit_state(module.run_command, systemctl, params["service"])
    path = pin_path(module) if manager == "apt" else None
    return {"manager": manager, "names": names, "installed": installed, "unit": unit, "pin_path": path,
            "pin": read_text(path) if path else None}


def preferences_dir(run, apt_config):
    """The directory apt reads preferences files from (``Dir::Etc::PreferencesParts``, as apt's own configuration
    resolves it: /etc/apt/preferences.d on a node, the throwaway root's under APT_CONFIG in the tests); the default
    where there is no apt-config. Raises PackageError where apt-config does not answer with a directory."""
    if apt_config is None:
        return DEFAULT_PREFERENCES
    argv = [apt_config, "shell", "D", "Dir::Etc::PreferencesParts/d"]
    rc, out, err = run(argv)
    match = _SHELL_LINE.match(out.strip()) if rc == 0 else None
    if not match or not match.group(1).startswith("/"):
        raise _packages.PackageError("apt-config did not say where apt's preferences are (%s exited %d: %s)"
                                     % (" ".join(argv[1:]), rc, (err or out).strip()[:300] or "no output"))
    return match.group(1).rstrip("/")


def pin_path(module):
    """Where DCGM's apt preferences pin is (PIN_NAME in apt's preferences directory)."""
    return os.path.join(preferences_dir(module.run_command, module.get_bin_path("apt-config")), _dcgm_plan.PIN_NAME)


def read_text(path):
    """The file's text, or None where there is none."""
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def unit_state(run, systemctl, service):
    """The host engine's unit as the planner takes it, {enabled, active, known} (``known``: systemctl has the unit, a
    package installed it), from the driver's own reading of ``systemctl is-enabled`` and ``is-active``
    (_driver_services.unit_state and its ENABLED_STATES); none of it where there is no systemctl."""
    if systemctl is None:
        return {"enabled": False, "active": False, "known": False}
    read = _driver_services.unit_state(run, systemctl, service)
    return {"enabled": read["enabled"] in _driver_services.ENABLED_STATES, "active": read["active"] == "active",
            "known": read["enabled"] != "not-found"}


def read_files(module, manager, paths):
    """{path: (package name, version)} of each package file as dpkg-deb (apt) or rpm (dnf) reads it (the package
    plan's own reader: _package_repo.file_command and parse_file), or an error text where it cannot be read."""
    out = {}
    for path in paths:
        argv = _package_repo.file_command(manager, path, dpkg_deb=module.get_bin_path("dpkg-deb") or "dpkg-deb",
                                          rpm=module.get_bin_path("rpm") or "rpm")
        try:
            rc, stdout, stderr = module.run_command(argv)
        except (IOError, OSError) as exc:
            out[path] = "cannot be read: %s" % exc
            continue
        found = _package_repo.parse_file(manager, stdout) if rc == 0 else None
        if found is None:
            out[path] = "is not a package file (%s: %s)" % (argv[0].rsplit("/", 1)[-1],
                                                            (stderr or stdout).strip()[:300] or "rc %d" % rc)
            continue
        out[path] = found
    return out
