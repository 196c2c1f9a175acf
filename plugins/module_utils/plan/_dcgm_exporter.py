# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's dcgm-exporter chart as a helm release pointed at the node's DCGM host engine, and the reading of what the
exporter serves on /metrics (PRIVATE: do not use from other collections). Pure functions, no I/O.

Facts from NVIDIA/dcgm-exporter at tag 4.5.3-4.8.2 (commit 691c92762eb551313c825f6efe4ceeee20982801; chart
dcgm-exporter 4.8.2 in deployment/), in the collection's words:

- pkg/cmd/app.go: the flag ``--remote-hostengine-info`` (alias ``-r``, environment ``DCGM_REMOTE_HOSTENGINE_INFO``)
  makes the exporter connect to a running host engine at HOST:PORT instead of starting an embedded one
  (internal/pkg/dcgmprovider/dcgm.go: ``dcgm.Init(dcgm.Standalone, ...)`` when the flag is set). A flag given on the
  command line beats the environment (urfave/cli), so an ``-r`` in the chart's ``arguments`` is refused.
- The chart's pod is not on the host network by default (values.yaml ``hostNetwork: false``), where ``localhost`` is
  the pod itself. NVIDIA's GPU Operator, for a host engine running on the node, sets the same variable to
  ``localhost:5555`` and turns the pod's host network on (NVIDIA/gpu-operator v26.7.0,
  controllers/object_controls.go, TransformDCGMExporter); the collection does the same.
- values.yaml ``affinity: {}`` and no nodeSelector: without terms of its own the chart runs on every node, GPU or
  not. The collection gives it the device plugin chart's GPU-node terms, each with the pause expression
  (_gpu_pods), so that gpuops.nvidia.node_gpu_pods pauses it around a disruptive change like the device plugin.
- values.yaml ``serviceMonitor.enabled: true``: a ServiceMonitor (monitoring.coreos.com/v1) that a cluster without the
  Prometheus Operator's CRD cannot take; the collection defaults it to false, a user's value is kept.
- internal/pkg/rendermetrics/render_metrics.go: each GPU's series is
  ``FIELD{gpu="<index>",UUID="<uuid>",pci_bus_id="...",device="nvidia<index>",modelName="..."[,GPU_I_PROFILE=...,
  GPU_I_ID=...][,Hostname="<node>"]...} VALUE`` (label ``uuid`` instead of ``UUID`` with --use-old-namespace);
  etc/default-counters.csv lists DCGM_FI_DEV_GPU_TEMP (gauge, GPU temperature in C).
- templates/_helpers.tpl: the DaemonSet is ``<release>-<chart name>`` (the release name alone when it contains the
  chart name; ``fullnameOverride`` beats both), its pods labelled app.kubernetes.io/name=<name> and
  app.kubernetes.io/instance=<release>.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods

CHART_NAME = "dcgm-exporter"
HOST_ENGINE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"
# The flag's spellings urfave/cli accepts (one or two dashes, the name or its alias), alone or as NAME=VALUE.
HOST_ENGINE_FLAGS = ("-r", "--r", "-remote-hostengine-info", "--remote-hostengine-info")
DEFAULT_HOST_ENGINE_PORT = 5555
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
METRICS_PORT = 9400

OWNED = (
    ("hostNetwork", "the exporter reaches the node's host engine at localhost, which is the node only on the host "
                    "network (NVIDIA's GPU Operator does the same for a host engine on the node)"),
)


def _is_flag(argument):
    text = str(argument)
    return any(text == flag or text.startswith(flag + "=") for flag in HOST_ENGINE_FLAGS)


def values_errors(values):
    """The user's ``values`` that the module cannot take, each saying why and what to do instead."""
    errors = []
    values = values or {}
    for key, why in OWNED:
        if key in values:
            errors.append("values.%s is set by the module and cannot be given (%s); got %r" % (key, why, values[key]))
    arguments = values.get("arguments")
    if arguments is not None:
        if not isinstance(arguments, list):
            errors.append("values.arguments must be a list of the exporter's command-line arguments, got %r"
                          % (arguments,))
        elif any(_is_flag(a) for a in arguments):
            errors.append("values.arguments %r point the exporter at a host engine (-r/--remote-hostengine-info): the "
                          "module sets %s from the option host_engine_port, and a flag would beat it; remove it"
                          % (arguments, HOST_ENGINE_ENV))
    env = values.get("extraEnv")
    if env is not None:
        if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
            errors.append("values.extraEnv must be a list of environment entries (mappings with name and value), "
                          "got %r" % (env,))
        elif any(e.get("name") == HOST_ENGINE_ENV for e in env):
            errors.append("values.extraEnv sets %s, which the module sets from the option host_engine_port; remove "
                          "it" % HOST_ENGINE_ENV)
    errors.extend(_gpu_pods.affinity_errors(values.get("affinity"), "values.affinity"))
    return errors


def port_error(option, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        return "%s must be a TCP port number from 1 to 65535, got %r" % (option, value)
    return None


def host_engine_address(port):
    return "localhost:%d" % port


def build_values(values, host_engine_port=DEFAULT_HOST_ENGINE_PORT):
    """The complete chart values: the user's, with the pod on the host network and pointed at the node's host engine
    (DCGM_REMOTE_HOSTENGINE_INFO=localhost:<port>, after the user's extraEnv), the affinity made pausable (the device
    plugin chart's GPU-node terms where the user gives none) and no ServiceMonitor unless the user asks for one."""
    out = copy.deepcopy(values or {})
    out["hostNetwork"] = True
    env = [e for e in (out.get("extraEnv") or []) if e.get("name") != HOST_ENGINE_ENV]
    env.append({"name": HOST_ENGINE_ENV, "value": host_engine_address(host_engine_port)})
    out["extraEnv"] = env
    affinity = out.get("affinity") or None
    out["affinity"] = _device_plugin.pausable_affinity(affinity)
    monitor = out.setdefault("serviceMonitor", {})
    if isinstance(monitor, dict):
        monitor.setdefault("enabled", False)
    return out


def names(values, release, chart_name=CHART_NAME):
    """(DaemonSet name, its pods' label selector) as NVIDIA's _helpers.tpl names them."""
    values = values or {}
    name = str(values.get("nameOverride") or chart_name)[:63].rstrip("-")
    if values.get("fullnameOverride"):
        full = str(values["fullnameOverride"])[:63].rstrip("-")
    elif name in release:
        full = release[:63].rstrip("-")
    else:
        full = ("%s-%s" % (release, name))[:63].rstrip("-")
    return full, "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s" % (name, release)


def metrics_port(values):
    service = (values or {}).get("service") or {}
    port = service.get("port", METRICS_PORT)
    return port if isinstance(port, int) and not isinstance(port, bool) else METRICS_PORT


# ---- /metrics ------------------------------------------------------------------------------------------------------
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


class MetricsError(ValueError):
    pass


def _labels(text, number):
    out = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise MetricsError("line %d: cannot read the labels at %r" % (number, text[pos:pos + 40]))
        out[m.group(1)] = re.sub(r"\\(.)", lambda e: _UNESCAPE.get(e.group(1), "\\" + e.group(1)), m.group(2))
        pos = m.end()
    return out


def parse_metrics(text):
    """The samples of a Prometheus text exposition (version 0.0.4, what the exporter serves): a list of
    (name, labels, value text). Comments and blank lines are skipped; a line that is no sample raises MetricsError
    naming it."""
    samples = []
    for number, line in enumerate(str(text).splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsError("line %d is not a metric sample: %r" % (number, line[:120]))
        samples.append((m.group(1), _labels(m.group(3) or "", number), m.group(4)))
    return samples


def _number(text):
    try:
        return float(text)
    except ValueError:
        return None


def temperature_check(samples, gpus, node, metric=TEMPERATURE):
    """Which of ``gpus`` (dicts with index and uuid, the node's GPUs as the collection read them) have a ``metric``
    series in ``samples``. A series belongs to a GPU by its UUID label (``UUID``, or ``uuid`` under the old
    namespace), else by its ``gpu`` index label; a series whose ``Hostname`` label names another node is not this
    node's. Returns {"found": {index: value}, "missing": [gpu, ...], "others": [labels of series no GPU of the node
    claims]}."""
    found, others = {}, []
    by_uuid = dict((str(g.get("uuid")), g) for g in gpus if g.get("uuid"))
    by_index = dict((str(g.get("index")), g) for g in gpus)
    for name, labels, value in samples:
        if name != metric:
            continue
        host = labels.get("Hostname", labels.get("hostname"))
        if host not in (None, "", node):
            others.append(labels)
            continue
        uuid = labels.get("UUID", labels.get("uuid"))
        gpu = by_uuid.get(uuid) if uuid else by_index.get(labels.get("gpu"))
        if gpu is None:
            others.append(labels)
            continue
        found.setdefault(int(gpu["index"]), _number(value))
    missing = [g for g in gpus if int(g["index"]) not in found]
    return {"found": found, "missing": missing, "others": others}


def describe_missing(check, node, pod, metric=TEMPERATURE):
    """The failure message for a check with missing GPUs: which GPUs, what the exporter did list, what to look at."""
    gpus = ", ".join("GPU %s (%s)" % (g["index"], g.get("uuid") or "no UUID read") for g in check["missing"])
    listed = ", ".join("GPU %d" % i for i in sorted(check["found"])) or "no GPU of this node"
    others = ""
    if check["others"]:
        others = "; it lists %d %s series of GPUs this node does not have (%s)" % (
            len(check["others"]), metric, ", ".join(
                "%s/%s" % (o.get("gpu"), o.get("UUID", o.get("uuid"))) for o in check["others"][:4]))
    return ("the DCGM exporter on node %s (pod %s) serves no %s series for %s: it lists %s%s. The exporter reads the "
            "GPUs through the node's host engine (nv-hostengine): check that nvidia-dcgm.service runs on the node and "
            "sees every GPU (dcgmi discovery -l), and the exporter pod's log"
            % (node, pod, metric, gpus, listed, others))
