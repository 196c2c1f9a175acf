# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime on the node's own terms (PRIVATE to gpuops.nvidia): which containerd serves the kubelet, and
the k3s/RKE2 path (their agent generates containerd's config; the collection adds only what it does not generate).

``read_node`` reads the containerds present and the kubelet's endpoint under a root (``node_root``: "/" on a real
node, the simulated node's root in the lab and the tests); ``target`` decides with _containerd_target.resolve.
``DistributionRun`` plans and writes the distribution's files: its ``config.yaml``'s ``default-runtime`` and the
collection's containerd template (``{{ template "base" . }}`` and what the agent would not generate), and says whether
the agent must restart: a file changed, or the config it generated last does not yet serve the declaration.
Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (
    ContainerdConfigError, config_version, diff_entries, get_in, parse_toml, plan_files, runtimes_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_target import (
    AGENT_PATH, DETECTED_RUNTIMES, DISTRIBUTIONS, KUBELET_CONFIG, KUBELET_FLAG_FILES, PLAIN_SOCKET, RANCHER_SOCKET,
    Containerd, Readings, TargetError, detected_runtimes, generated_findings, is_ours, kubelet_endpoint_from_args,
    kubelet_endpoint_from_env_file, resolve, runtime_table, set_yaml_scalar, template_text, template_version,
    would_detect, yaml_scalar)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node._live_file import LiveFileError, read_live, write_atomic

UNIT_DIRS = ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")


def node_root():
    """"/" on a real node; the simulated node's root where the GPUs are simulated (GPUOPS_SIMULATED_ROOT, read as
    gpu/_gpu reads it: not imported, so that this file's code is all the stamp's code digest needs)."""
    if os.environ.get("GPUOPS_SIMULATED_GPUS"):
        return os.environ.get("GPUOPS_SIMULATED_ROOT") or "/"
    return "/"


def _under(root, path):
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def _text(root, path):
    """The file's text, None when absent or unreadable (a file the run itself needs is read again, and its error
    reported, where it is needed)."""
    try:
        return read_live(_under(root, path), path)
    except (IOError, OSError, ContainerdConfigError, LiveFileError):
        return None


def _running_kubelet(root):
    """The argument list of a running kubelet process (its comm is ``kubelet``), on a real node only."""
    if root not in ("", "/"):
        return None
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            with open(comm) as handle:
                if handle.read().strip() != "kubelet":
                    continue
            with open(os.path.join(os.path.dirname(comm), "cmdline"), "rb") as handle:
                return [a.decode("utf-8", "replace") for a in handle.read().split(b"\0") if a]
        except (IOError, OSError):
            continue
    return None


def _plain_socket(config_path):
    """The socket of the containerd whose config is ``config_path`` (a path as the module writes it, not under the
    node root: the lab's already names its root): its ``[grpc] address``, else containerd's default."""
    text = _text("/", config_path)
    if text:
        try:
            address = get_in(parse_toml(text, config_path), ["grpc", "address"])
        except ContainerdConfigError:
            address = None
        if isinstance(address, str) and address:
            return address
    return PLAIN_SOCKET


def read_node(root, config_path):
    """Readings: the containerds present under ``root`` and the kubelet's endpoint with where it was read."""
    present = {}
    if os.path.exists(config_path) or any(os.path.exists(_under(root, p)) for p in ("/etc/containerd", PLAIN_SOCKET)):
        present["containerd"] = Containerd("containerd", config_path, _plain_socket(config_path))
    for name, dist in DISTRIBUTIONS.items():
        if os.path.isdir(_under(root, dist.containerd_dir)) or os.path.isdir(_under(root, os.path.dirname(
                dist.config_yaml))):
            present[name] = Containerd(name, dist.generated, dist.socket)
    endpoint = source = None
    args = _running_kubelet(root)
    if args:
        endpoint, source = kubelet_endpoint_from_args(args), "the running kubelet's command line"
    if endpoint is None:
        for path in KUBELET_FLAG_FILES:
            text = _text(root, path)
            found = kubelet_endpoint_from_env_file(text) if text else None
            if found:
                endpoint, source = found, path
                break
    if endpoint is None:
        text = _text(root, KUBELET_CONFIG)
        found = yaml_scalar(text, "containerRuntimeEndpoint") if text else None
        if found:
            endpoint, source = found, KUBELET_CONFIG
    if endpoint is None:
        for name in ("k3s", "rke2"):
            if name in present:
                dist = DISTRIBUTIONS[name]
                text = _text(root, dist.config_yaml)
                own = yaml_scalar(text, "container-runtime-endpoint") if text else None
                endpoint = own or "unix://" + RANCHER_SOCKET
                source = ("%s (container-runtime-endpoint)" % dist.config_yaml if own
                          else "%s's embedded kubelet (its default endpoint)" % name)
                break
    return Readings(present, endpoint, source, _plain_socket(config_path))


def target(params, root=None):
    """(kind, Containerd) the declaration targets on this node; raises TargetError naming both containerds where the
    kubelet talks to another one."""
    root = node_root() if root is None else root
    return resolve(params.get("distribution") or "auto", params["config_path"], read_node(root, params["config_path"]))


class DistributionPlan(object):
    """The files to write (``plan``: _containerd_config.plan_files entries, root-relative paths), whether the agent
    must restart and why, the unit to restart, and the warnings."""

    def __init__(self, plan, restart_reasons, service, fields, warnings):
        self.plan = plan
        self.restart_reasons = restart_reasons
        self.service = service
        self.fields = fields
        self.warnings = warnings

    @property
    def changed(self):
        return any(item["action"] != "none" for item in self.plan)


def _service(root, dist):
    """(unit, note): the unit that runs the agent. RKE2's tarball installs both rke2-server and rke2-agent (its docs,
    "Installation Methods": lib holds the server and agent units) and the node enables one; restarting the other
    would start a server on an agent node, or an agent on a server. So where both are installed, the enabled one
    (``systemctl enable`` links it into a target's .wants directory under /etc/systemd/system); None, with the note
    saying why, where that does not tell."""
    installed = [name for name in dist.services
                 if any(os.path.exists(_under(root, "%s/%s.service" % (d, name))) for d in UNIT_DIRS)]
    if not installed:
        return dist.services[0], "no %s unit found in %s; restarting %s" % (
            " or ".join(dist.services), ", ".join(UNIT_DIRS), dist.services[0])
    if len(installed) == 1:
        return installed[0], None
    enabled = [name for name in installed
               if glob.glob(_under(root, "/etc/systemd/system/*.wants/%s.service" % name))]
    if len(enabled) == 1:
        return enabled[0], None
    return None, ("the %s units are both installed and %s enabled: which one runs this node is not known, and"
                  " restarting the other would start a second %s here; enable the one this node runs (systemctl"
                  " enable %s)" % (" and ".join(installed), "both are" if enabled else "neither is", dist.name,
                                   " or ".join(installed)))


def plan_distribution(kind, params, root):
    """What k3s or RKE2 needs for the declaration (changing nothing). Raises TargetError (its message starting with
    the option, ``distribution k3s: ...``) where it cannot be done through the distribution's own mechanisms."""
    try:
        return _plan_distribution(kind, params, root)
    except TargetError as exc:
        raise TargetError("distribution %s: %s" % (kind, exc))


def _plan_distribution(kind, params, root):
    dist = DISTRIBUTIONS[kind]
    name, path = params["runtime_name"], params["runtime_path"]
    warnings = []
    generated_text = _text(root, dist.generated)
    generated = parse_toml(generated_text, dist.generated) if generated_text else None
    version = template_version(config_version(generated, dist.generated) if generated is not None else None, None)
    if version is None:
        raise TargetError("%s has generated no containerd config yet (%s is absent): start its agent once (%s), so"
                          " that the template's version (config.toml.tmpl for containerd 1.x, config-v3.toml.tmpl"
                          " for 2.x) can be read from it; nothing changed" % (kind, dist.generated,
                                                                              " or ".join(dist.services)))
    candidates = [d + "/" + binary for d in AGENT_PATH for (_name, binary) in DETECTED_RUNTIMES]
    executables = dict((p, True) for p in candidates if os.access(_under(root, p), os.X_OK))
    detected = detected_runtimes(executables)
    additions = []
    if would_detect(name, path):
        if name in detected and detected[name] != path:
            raise TargetError("%s's agent defines the runtime %r itself with %s (the first it finds in its PATH), not"
                              " runtime_path %s; set runtime_path to %s or remove that file; nothing changed"
                              % (kind, name, detected[name], path, detected[name]))
    elif name in dict(DETECTED_RUNTIMES):
        raise TargetError("%s's agent defines the runtime %r itself (from %s in its PATH %s), so a template cannot"
                          " define it again with runtime_path %s (a second table is a TOML error); use another"
                          " runtime_name or the path it finds; nothing changed"
                          % (kind, name, dict(DETECTED_RUNTIMES)[name], ":".join(AGENT_PATH), path))
    else:
        additions.append(runtime_table(version, name, path))
    plugin = "io.containerd.cri.v1.runtime" if version == 3 else "io.containerd.grpc.v1.cri"
    cdi = get_in(generated, ["plugins", plugin, "enable_cdi"]) if generated is not None else None
    if params["cdi_enabled"] and (cdi is False or (version == 2 and cdi is not True)):
        raise TargetError("cdi_enabled: %s's containerd config (%s, version %d) has no enable_cdi = true, and a"
                          " template cannot add a key to the CRI table its base already defines (containerd refuses a"
                          " second [plugins.%s] table: \"duplicated tables\"); a %s release with containerd 2"
                          " enables CDI by default; nothing changed" % (kind, dist.generated, version, plugin, kind))
    before, after = {}, {}
    tmpl = dist.template(version)
    other = dist.template(5 - version)
    wanted = template_text(kind, version, additions)
    for tpath, text in ((tmpl, wanted), (other, None)):
        live = _text(root, tpath)
        if live is not None and not is_ours(live):
            if tpath == tmpl:
                raise TargetError("%s is the administrator's own template (it lacks the collection's first line);"
                                  " the collection does not overwrite it. Add %s to it yourself, or remove it;"
                                  " nothing changed" % (tpath, "what follows: " + " ".join(additions)
                                                        if additions else "nothing (the agent generates the runtime)"))
            warnings.append("%s is the administrator's own template; %s reads %s first" % (tpath, kind, tmpl))
            continue
        before[tpath], after[tpath] = live, text
    yaml_text = _text(root, dist.config_yaml)
    current = yaml_scalar(yaml_text, "default-runtime") if yaml_text else None
    desired = name if params["set_as_default"] else (None if current == name else current)
    for drop in sorted(glob.glob(_under(root, dist.config_yaml_d + "/*.yaml"))):
        with open(drop) as handle:
            value = yaml_scalar(handle.read(), "default-runtime")
        # a later file wins for a scalar: one that sets another default than the declared one (or, with
        # set_as_default false, this runtime) would override what config.yaml says
        if value is not None and (value != name if params["set_as_default"] else value == name):
            raise TargetError("%s sets default-runtime: %s, which overrides %s; set_as_default is %s for runtime %s;"
                              " nothing changed" % (drop[len(root.rstrip("/")):] if root not in ("", "/") else drop,
                                                    value, dist.config_yaml, params["set_as_default"], name))
    if desired != current:
        before[dist.config_yaml] = yaml_text
        after[dist.config_yaml] = set_yaml_scalar(yaml_text or "", "default-runtime", desired)
    plan = plan_files(before, after)
    reasons = ["%s changes" % item["path"] for item in plan if item["action"] != "none"]
    installed = os.access(_under(root, path), os.X_OK)
    if not installed:
        warnings.append("%s is not installed yet: %s's agent adds the runtime at its first start after it is"
                        " (the container_toolkit role installs it)" % (path, kind))
    elif generated is not None:
        found = generated_findings(generated, version, name, path, params["set_as_default"], params["cdi_enabled"],
                                   runtimes_of, get_in)
        reasons += ["%s: %s" % (dist.generated, reason) for reason in found]
    service, note = _service(root, dist)
    if service is None and reasons:
        raise TargetError("%s must restart (%s), but %s; nothing changed" % (kind, "; ".join(reasons), note))
    if note:
        warnings.append(note)
    fields = {"distribution": kind, "template_path": tmpl, "config_version": version,
              "detected_runtimes": sorted(detected), "restart_service": service}
    return DistributionPlan(plan, reasons, service, fields, warnings)


def apply_distribution(module, evaluation, root):
    """Write (atomically) or delete each changed file; returns ``files``."""
    files = []
    for item in evaluation.plan:
        real = _under(root, item["path"])
        entry = {"path": item["path"], "action": item["action"]}
        if item["action"] in ("update", "delete") and module.params.get("backup"):
            entry["backup_file"] = module.backup_local(real)
        if item["action"] in ("create", "update"):
            directory = os.path.dirname(real)
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
            write_atomic(module, real, item["after"])
        elif item["action"] == "delete":
            os.unlink(real)
        files.append(entry)
    return files


def distribution_result(module, evaluation, files):
    for warning in evaluation.warnings:
        module.warn(warning)
    result = dict(evaluation.fields, changed=evaluation.changed, files=files, trap_warnings=evaluation.warnings,
                  restart_required=bool(evaluation.restart_reasons), restart_reasons=evaluation.restart_reasons,
                  files_changed=[item["path"] for item in evaluation.plan if item["action"] != "none"],
                  edit_mode="distribution", validated=False, effective_changes=[])
    if module._diff:
        result["diff"] = diff_entries(evaluation.plan)
    return result
