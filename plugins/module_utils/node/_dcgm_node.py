# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM on the node, read (PRIVATE to gpuops.nvidia): the package database and the host engine's unit, for
gpuops.nvidia.dcgm_host_engine and the node plan's step dcgm (one read, one planner: plan/_dcgm_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_plan, _packages


def find_systemctl(module, given):
    """The systemctl command (an argument list): ``given`` where set, else systemctl on PATH; None where none is."""
    if given:
        return list(given)
    found = module.get_bin_path("systemctl", opt_dirs=["/usr/bin", "/bin"])
    return [found] if found else None


def read_node(module, params, systemctl):
    """{manager, names, installed, unit}: the package manager (``package_manager``, auto resolved from the tools the
    node has), DCGM's package names (``cuda``, ``proprietary``), what the package database holds of them, and the
    unit ``service`` as ``systemctl`` answers (never enabled nor running where there is no systemctl). Raises
    DcgmPlanError or PackageError."""
    found = dict((tool, module.get_bin_path(tool) is not None) for tool in ("dpkg-query", "apt-get", "rpm", "dnf"))
    manager = _dcgm_plan.resolve_manager(params["package_manager"], found)
    names = _dcgm_plan.package_names(params["cuda"], params["proprietary"])
    installed = _packages.read_installed(module, manager, names)
    unit = unit_state(module.run_command, systemctl, params["service"])
    return {"manager": manager, "names": names, "installed": installed, "unit": unit}


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
    """{path: (package name, version)} of each package file as dpkg-deb (apt) or rpm (dnf) reads it, or an error
    text where it cannot be read."""
    out = {}
    for path in paths:
        if manager == "apt":
            argv = [module.get_bin_path("dpkg-deb") or "dpkg-deb", "-f", path, "Package", "Version"]
        else:
            argv = [module.get_bin_path("rpm") or "rpm", "-qp", "--qf", "%{NAME}\n%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n",
                    path]
        try:
            rc, stdout, stderr = module.run_command(argv)
        except (IOError, OSError) as exc:
            out[path] = "cannot be read: %s" % exc
            continue
        if rc != 0:
            out[path] = "is not a package file (%s: %s)" % (argv[0].rsplit("/", 1)[-1],
                                                            (stderr or stdout).strip()[:300] or "rc %d" % rc)
            continue
        fields = dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line) if manager == "apt" else {}
        if manager == "apt":
            out[path] = (fields.get("Package", ""), fields.get("Version", ""))
        else:
            lines = stdout.splitlines()
            evr = lines[1] if len(lines) > 1 else ""
            out[path] = (lines[0] if lines else "", evr[2:] if evr.startswith("0:") else evr)
    return out
