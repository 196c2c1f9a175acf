# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which containerd serves the kubelet, and k3s/RKE2's own containerd (PRIVATE to gpuops.nvidia).

Pure: no subprocess, no file reads or writes. The reads are node/_containerd_distribution.py's; this file decides.

1. ``kubelet_endpoint_*`` read the kubelet's ``--container-runtime-endpoint`` from its command line, the flag files
   kubeadm and the packages write, and its KubeletConfiguration (``containerRuntimeEndpoint``); ``resolve`` names the
   containerd the declaration targets (plain containerd, k3s or RKE2) and refuses, naming both, where the kubelet
   talks to another one.
2. k3s and RKE2 generate containerd's config at every start of their agent from a base template, with the NVIDIA
   runtimes they find in the agent's PATH. Facts, from k3s-io/k3s (pkg/agent/containerd/runtimes.go at commit
   cd1fadb931e0, nvidia.go at 2570a9b176c7, pkg/agent/templates) and the k3s docs (k3s-io/docs,
   docs/advanced/advanced.md, "Configuring containerd", "Alternative Container Runtime Support"); RKE2 runs the same
   agent code (rancher/rke2 v1.35.7+rke2r1's go.mod: k3s-io/k3s release-1.35 at 7464a828f03e):
   - runtimes ``nvidia`` (nvidia-container-runtime), ``nvidia-experimental`` (nvidia-container-runtime-experimental)
     and ``nvidia-cdi`` (nvidia-container-runtime.cdi), found in the service's PATH (else /usr/local/nvidia/toolkit),
     type io.containerd.runc.v2, ``options.BinaryName`` the path found;
   - the user's template is ``config-v3.toml.tmpl`` (containerd 2.x, config version 3, preferred) or
     ``config.toml.tmpl`` (version 2, containerd 1.7 and older, or 2.x without a v3 template), a Go template that may
     start with ``{{ template "base" . }}`` (the stock config, September 2023 releases and later);
   - ``default-runtime`` in /etc/rancher/{k3s,rke2}/config.yaml names the node's default runtime.
   ``template_text`` writes only what the distribution does not generate (a runtime it would not find) after the
   base; a key in a table the base already defines (``enable_cdi`` in the CRI table) cannot be added: a second
   header for a table is a TOML error that containerd refuses ("duplicated tables").
Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex

DISTRIBUTION_CHOICES = ("auto", "containerd", "k3s", "rke2")
PLAIN_SOCKET = "/run/containerd/containerd.sock"
RANCHER_SOCKET = "/run/k3s/containerd/containerd.sock"  # k3s and RKE2 alike
# The agent's PATH as the k3s/RKE2 units run it, then the GPU Operator's toolkit directory k3s also searches.
AGENT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
              "/usr/local/nvidia/toolkit")
# runtime name -> the executable the agent looks for
DETECTED_RUNTIMES = (("nvidia", "nvidia-container-runtime"),
                     ("nvidia-experimental", "nvidia-container-runtime-experimental"),
                     ("nvidia-cdi", "nvidia-container-runtime.cdi"))
BASE_ACTION = '{{ template "base" . }}'
MARKER = "# Managed by gpuops.nvidia (containerd_runtime): additions to %s's own containerd config."
KUBELET_FLAG_FILES = ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet")
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"


class Distribution(object):
    """One of k3s and RKE2: where its agent keeps containerd's config, its config.yaml, its units."""

    def __init__(self, name, services):
        self.name = name
        self.containerd_dir = "/var/lib/rancher/%s/agent/etc/containerd" % name
        self.generated = self.containerd_dir + "/config.toml"
        self.config_yaml = "/etc/rancher/%s/config.yaml" % name
        self.config_yaml_d = "/etc/rancher/%s/config.yaml.d" % name
        self.services = services  # server unit first, then agent unit
        self.socket = RANCHER_SOCKET

    def template(self, version):
        return self.containerd_dir + ("/config-v3.toml.tmpl" if version == 3 else "/config.toml.tmpl")


DISTRIBUTIONS = {"k3s": Distribution("k3s", ("k3s", "k3s-agent")),
                 "rke2": Distribution("rke2", ("rke2-server", "rke2-agent"))}


class TargetError(Exception):
    """The declaration cannot be applied to this node; the message names what was found and what to set."""


def _socket_path(endpoint):
    """``unix:///run/x.sock`` or a bare path -> the normalised path (``/var/run`` is ``/run`` on every systemd
    distribution); None for other schemes."""
    if not endpoint:
        return None
    if endpoint.startswith("unix://"):
        endpoint = endpoint[len("unix://"):]
    elif "://" in endpoint:
        return None
    if not endpoint:
        return None
    path = os.path.normpath(endpoint)
    return "/run/" + path[len("/var/run/"):] if path.startswith("/var/run/") else path


def kubelet_endpoint_from_args(args):
    """The value of ``--container-runtime-endpoint`` in an argument list (the last one wins, as for the kubelet)."""
    found = None
    for index, arg in enumerate(args):
        if arg.startswith("--container-runtime-endpoint="):
            found = arg.split("=", 1)[1]
        elif arg == "--container-runtime-endpoint" and index + 1 < len(args):
            found = args[index + 1]
    return found


def kubelet_endpoint_from_env_file(text):
    """The endpoint in a flag file (``KUBELET_KUBEADM_ARGS="..."``, ``KUBELET_EXTRA_ARGS=...``); None without one."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        value = line.split("=", 1)[1]
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        args = [w for word in words for w in word.split()]
        found = kubelet_endpoint_from_args(args) or found
    return found


_YAML_KEY = r"^%s\s*:\s*(.*?)\s*$"


def yaml_scalar(text, key):
    """A top-level scalar of a simple YAML file (the kubelet's config, k3s's config.yaml), without a YAML library on
    the target: ``key: value`` at column 0, quotes and a trailing comment removed; None when absent."""
    pattern = re.compile(_YAML_KEY % re.escape(key))
    value = None
    for line in text.splitlines():
        match = pattern.match(line)
        if match:
            raw = match.group(1)
            if raw[:1] in ("'", '"'):
                quote = raw[0]
                end = raw.find(quote, 1)
                value = raw[1:end] if end > 0 else raw[1:]
            else:
                value = raw.split(" #", 1)[0].strip()
    return value or None


def set_yaml_scalar(text, key, value):
    """``text`` with the top-level ``key`` set to ``value`` (None removes it), every other line kept."""
    pattern = re.compile(_YAML_KEY % re.escape(key))
    lines = text.splitlines(True)
    out, done = [], False
    for line in lines:
        if pattern.match(line.rstrip("\n")):
            if value is not None and not done:
                out.append('%s: "%s"\n' % (key, value))
            done = True
            continue
        out.append(line)
    if value is not None and not done:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append('%s: "%s"\n' % (key, value))
    return "".join(out)


class Containerd(object):
    """A containerd found on the node: what it is (``containerd``, ``k3s``, ``rke2``), its config and socket."""

    def __init__(self, kind, config, socket):
        self.kind = kind
        self.config = config
        self.socket = socket

    def describe(self):
        return "%s's containerd (config %s, socket %s)" % (self.kind, self.config, self.socket)


class Readings(object):
    """What node/_containerd_distribution.read_node found: the containerds present, the kubelet's endpoint and where
    it was read (None when no kubelet is configured yet)."""

    def __init__(self, present, endpoint, endpoint_source, plain_socket=PLAIN_SOCKET):
        self.present = present  # kind -> Containerd
        self.endpoint = endpoint
        self.endpoint_source = endpoint_source
        self.plain_socket = plain_socket


def serving(readings):
    """The Containerd the kubelet talks to, or None when its endpoint is unknown or names none of them."""
    socket = _socket_path(readings.endpoint)
    if socket is None:
        return None
    for kind in ("k3s", "rke2", "containerd"):
        found = readings.present.get(kind)
        if found is not None and _socket_path(found.socket) == socket:
            return found
    return None


def resolve(distribution, config_path, readings):
    """The containerd the declaration targets: (kind, Containerd). ``auto`` is the one serving the kubelet, else the
    only distribution present, else plain containerd. Raises TargetError, naming both, where the kubelet talks to
    another containerd than the one targeted."""
    serves = serving(readings)
    if distribution == "auto":
        if serves is not None:
            kind = serves.kind
        else:
            found = [k for k in ("k3s", "rke2") if k in readings.present]
            kind = found[0] if len(found) == 1 else "containerd"
    else:
        kind = distribution
    if kind == "containerd":
        target = Containerd("containerd", config_path, readings.plain_socket)
    else:
        target = readings.present.get(kind) or Containerd(kind, DISTRIBUTIONS[kind].generated, RANCHER_SOCKET)
    if readings.endpoint is None:
        return kind, target
    socket = _socket_path(readings.endpoint)
    if socket is not None and socket == _socket_path(target.socket):
        return kind, target
    other = serves.describe() if serves is not None else "a runtime at %s" % readings.endpoint
    hint = (" Set containerd_runtime_distribution: %s (or auto)." % serves.kind) if serves is not None else ""
    raise TargetError(
        "the declaration (distribution %s, config_path %s) targets %s, but the kubelet talks to %s (its"
        " --container-runtime-endpoint %s, read from %s): a runtime written there would never serve a pod; nothing"
        " changed.%s" % (distribution, config_path, target.describe(), other, readings.endpoint,
                         readings.endpoint_source, hint))


def detected_runtimes(executables):
    """The NVIDIA runtimes the agent adds at its start: name -> BinaryName, from ``executables`` (path -> True for
    each executable file that exists), searched in the agent's PATH order."""
    found = {}
    for name, binary in DETECTED_RUNTIMES:
        for directory in AGENT_PATH:
            path = directory + "/" + binary
            if executables.get(path):
                found[name] = path
                break
    return found


def would_detect(runtime_name, runtime_path):
    """Whether the agent would itself define ``runtime_name`` with ``runtime_path`` once that file exists: the name and
    the executable's name are one of its pairs and the file is in a directory of its PATH (the toolkit's packages
    install in /usr/bin). That no earlier directory holds another is checked on the files (``detected_runtimes``)."""
    for name, binary in DETECTED_RUNTIMES:
        if name == runtime_name:
            return os.path.basename(runtime_path) == binary and os.path.dirname(runtime_path) in AGENT_PATH
    return False


def template_version(generated_version, containerd_major):
    """Which template the distribution reads: 3 (config-v3.toml.tmpl) where its containerd is 2.x, else 2. Read from
    the config it generated last (its ``version``), else from its containerd's major version; None when neither."""
    if generated_version in (2, 3):
        return generated_version
    if containerd_major is not None:
        return 3 if containerd_major >= 2 else 2
    return None


def runtime_table(version, name, path):
    """The TOML of one runtime in the distribution's config version, SystemdCgroup from the agent's own value."""
    plugin = "'io.containerd.cri.v1.runtime'" if version == 3 else '"io.containerd.grpc.v1.cri"'
    return ("[plugins.%s.containerd.runtimes.'%s']\n"
            "  runtime_type = \"io.containerd.runc.v2\"\n"
            "[plugins.%s.containerd.runtimes.'%s'.options]\n"
            "  BinaryName = \"%s\"\n"
            "  SystemdCgroup = {{ .SystemdCgroup }}\n" % (plugin, name, plugin, name, path))


def template_text(dist_name, version, additions):
    """The collection's template: the distribution's base, then ``additions`` (TOML texts); None when there is
    nothing to add (the distribution generates everything itself, so no template is written)."""
    if not additions:
        return None
    return "%s\n%s\n\n%s" % (MARKER % dist_name, BASE_ACTION, "\n".join(additions))


def is_ours(text):
    return text is not None and text.startswith("# Managed by gpuops.nvidia (containerd_runtime)")


def generated_findings(tree, version, runtime_name, runtime_path, set_as_default, cdi_enabled, runtimes_of, get_in):
    """What the config the agent generated last lacks of the declaration (each a short reason); empty when it already
    serves it. ``runtimes_of`` / ``get_in`` are _containerd_config's readers (passed in: this file imports nothing)."""
    reasons = []
    runtimes = runtimes_of(tree, version)
    runtime = runtimes.get(runtime_name)
    if not isinstance(runtime, dict):
        reasons.append("no runtime %r" % runtime_name)
    elif get_in(runtime, ["options", "BinaryName"]) != runtime_path:
        reasons.append("runtime %r runs %s, not %s" % (runtime_name, get_in(runtime, ["options", "BinaryName"]),
                                                       runtime_path))
    plugin = "io.containerd.cri.v1.runtime" if version == 3 else "io.containerd.grpc.v1.cri"
    default = get_in(tree, ["plugins", plugin, "containerd", "default_runtime_name"])
    if set_as_default and default != runtime_name:
        reasons.append("default runtime %s, not %r" % (default or "runc", runtime_name))
    if not set_as_default and default == runtime_name:
        reasons.append("default runtime still %r" % runtime_name)
    if cdi_enabled and get_in(tree, ["plugins", plugin, "enable_cdi"]) is False:
        reasons.append("enable_cdi = false")
    return reasons
