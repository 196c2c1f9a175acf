#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dcgm_exporter_verify
short_description: Scrape the DCGM exporter on one node and check it lists a GPU temperature for every GPU
version_added: 0.3.0
description:
  - Finds the Ready pod of NVIDIA's DCGM exporter on the node (the release of M(gpuops.nvidia.dcgm_exporter), found by
    O(namespace) and O(selector)), reads its C(/metrics) once through the API server's proxy to the pod (the
    controller needs no route to the pod network), and checks that it lists a C(DCGM_FI_DEV_GPU_TEMP) series for
    every GPU of the node (O(gpus), the GPU facts the collection read on the node), matched by GPU UUID (the
    exporter's C(UUID) label), else by index (its C(gpu) label).
  - Polls until that holds or O(timeout) seconds passed (the exporter starts, then collects every 30 s by default),
    then fails naming each GPU with no series, what the exporter listed, and what to check (the node's
    C(nvidia-dcgm) host engine).
  - Read-only (C(changed) is always false). In check mode it reads once, and a missing pod or series (the release
    may not be installed yet in a check run) is a warning, not a failure.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.wait_options
options:
  node_name:
    description: The Node's name as C(kubectl get nodes) shows it.
    type: str
    required: true
  gpus:
    description:
      - The node's GPUs - the C(nvidia_gpus) fact of M(gpuops.nvidia.gpu_info) or M(gpuops.nvidia.gpu_node_plan), or
        its C(gpus) list; each GPU needs C(index), and C(uuid) where known.
    type: raw
    required: true
  namespace:
    description: The exporter release's namespace.
    type: str
    default: nvidia-dcgm-exporter
  selector:
    description: The label selector of the exporter's pods (the C(exporter.selector) M(gpuops.nvidia.dcgm_exporter) returns).
    type: str
    default: app.kubernetes.io/name=dcgm-exporter,app.kubernetes.io/instance=dcgm-exporter
  port:
    description: The exporter's metrics port (the chart's C(service.port)), from 1 to 65535.
    type: int
    default: 9400
  timeout:
    default: 300
  interval:
    default: 5.0
attributes:
  check_mode:
    support: full
    details: Reads once; what is missing is a warning.
  diff_mode:
    support: none
  idempotent:
    support: full
seealso:
  - module: gpuops.nvidia.dcgm_exporter
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: The DCGM exporter lists every GPU of this node
  gpuops.nvidia.dcgm_exporter_verify:
    node_name: "{{ inventory_hostname }}"
    gpus: "{{ nvidia_gpus }}"
  delegate_to: localhost
"""

RETURN = r"""
pod:
  description: The exporter pod read (C(namespace/name)); null when none was found.
  returned: always
  type: str
  sample: nvidia-dcgm-exporter/dcgm-exporter-x7k2q
temperatures:
  description: The C(DCGM_FI_DEV_GPU_TEMP) value per GPU index the exporter listed (degrees C).
  returned: always
  type: dict
  sample: {"0": 34.0, "1": 36.0}
missing:
  description: The indexes of the node's GPUs the exporter lists no temperature for (empty when the check passed).
  returned: always
  type: list
  elements: int
problems:
  description: What the last read found wrong (empty when the check passed).
  returned: always
  type: list
  elements: str
"""

# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_exporter
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _gpu_pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import interval_error, seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._kube_service import KubeRun
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import Done, Failure, run_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS


def gpu_list(gpus):
    """The GPUs of the ``gpus`` option (a fact with ``gpus``, or the list), or None when it is neither."""
    gpus = gpus.get("gpus") if isinstance(gpus, dict) else gpus
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        return None
    return gpus


def gpus_errors(gpus):
    listed = gpu_list(gpus)
    if listed is None:
        return ["gpus must be the GPU facts of gpuops.nvidia.gpu_info (the nvidia_gpus fact or its gpus list), got %r"
                % (gpus,)[:200]]
    errors = []
    for position, gpu in enumerate(listed):
        index = gpu.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            errors.append("gpus[%d].index must be a GPU index (a whole number from 0), got %r" % (position, index))
        uuid = gpu.get("uuid")
        if uuid is not None and not isinstance(uuid, str):
            errors.append("gpus[%d].uuid must be a GPU UUID string (GPU-...), got %r" % (position, uuid))
    return errors


class DcgmExporterVerify(KubeRun):
    """validate -> read (the exporter pod on the node and its /metrics, polled until every GPU has a temperature
    series or the timeout) -> plan: nothing to change."""

    argument_spec = dict(
        node_name=dict(type="str", required=True),
        gpus=dict(type="raw", required=True),
        namespace=dict(type="str", default="nvidia-dcgm-exporter"),
        selector=dict(type="str", default="app.kubernetes.io/name=dcgm-exporter,"
                                          "app.kubernetes.io/instance=dcgm-exporter"),
        port=dict(type="int", default=_dcgm_exporter.METRICS_PORT),
        timeout=dict(type="int", default=WAITS["exporter_metrics"].timeout),
        interval=dict(type="float", default=WAITS["exporter_metrics"].interval),
        **_kube.AUTH_ARG_SPEC
    )

    def validate(self):
        p = self.params
        errors = _kube.auth_param_errors(p)
        errors.extend(_kube_names.dns_subdomain_errors(p["node_name"], "node_name"))
        errors.extend(_kube_names.dns_label_errors(p["namespace"], "namespace"))
        if not p["selector"] or not p["selector"].strip():
            errors.append("selector must be the label selector of the exporter's pods (e.g. "
                          "app.kubernetes.io/instance=dcgm-exporter), got %r" % (p["selector"],))
        errors.extend(gpus_errors(p["gpus"]))
        errors.extend(e for e in (_dcgm_exporter.port_error("port", p["port"]), seconds_error("timeout", p["timeout"]),
                                  interval_error("interval", p["interval"])) if e)
        return errors

    def scrape(self):
        """(problems, what was read) of one read: the node's Ready exporter pod, its metrics, the check."""
        p = self.params
        gpus = gpu_list(p["gpus"])
        listing = self.kube.get("list the DCGM exporter pods on node %s" % p["node_name"],
                                _kube.pods_path(p["namespace"]), labelSelector=p["selector"],
                                fieldSelector="spec.nodeName=%s" % p["node_name"])
        pods = [pod for pod in listing.get("items") or [] if isinstance(pod, dict)]
        ready = [pod for pod in pods if _gpu_pods.pod_ready(pod)]
        seen = {"pod": None, "found": {}, "missing": [int(g["index"]) for g in gpus]}
        if not ready:
            return (["no Ready DCGM exporter pod on node %s (namespace %s, selector %s; %s)" % (
                p["node_name"], p["namespace"], p["selector"],
                "pods there: %s" % ", ".join("%s %s" % (x["metadata"]["name"], (x.get("status") or {}).get("phase"))
                                             for x in pods) if pods else "none: is the release installed, and does "
                "its affinity admit the node (a node labelled gpuops.nvidia/gpu-pods-paused=true runs none)?")], seen)
        name = ready[0]["metadata"]["name"]
        seen["pod"] = "%s/%s" % (p["namespace"], name)
        try:
            text = self.kube.request("read /metrics of DCGM exporter pod %s" % seen["pod"], "GET",
                                     _kube.pod_proxy_path(p["namespace"], name, p["port"], "metrics"), text=True)
            samples = _dcgm_exporter.parse_metrics(text)
        except _kube.KubeError as exc:
            if exc.status in (401, 403):
                raise
            return (["reading /metrics of pod %s failed: %s" % (seen["pod"], exc)], seen)
        except _dcgm_exporter.MetricsError as exc:
            return (["pod %s serves /metrics that are not Prometheus text: %s" % (seen["pod"], exc)], seen)
        check = _dcgm_exporter.temperature_check(samples, gpus, p["node_name"])
        seen.update(found=check["found"], missing=[int(g["index"]) for g in check["missing"]])
        if check["missing"]:
            return ([_dcgm_exporter.describe_missing(check, p["node_name"], seen["pod"])], seen)
        return ([], seen)

    def read(self):
        p = self.params
        timeout = 0 if self.module.check_mode else p["timeout"]
        polled = self.wait("exporter_metrics", self.scrape, timeout, p["interval"])
        problems, seen = polled.seen
        self.result.update(pod=seen["pod"], missing=seen["missing"], problems=problems,
                           temperatures=dict((str(k), v) for k, v in sorted(seen["found"].items())))
        if problems and self.module.check_mode:
            self.module.warn("check mode: %s" % "; ".join(problems))
        elif problems:
            raise Failure("after %ss: %s" % (p["timeout"], "; ".join(problems)))
        raise Done()

    def plan(self, current):
        return None


def main():
    run_module(DcgmExporterVerify)


if __name__ == "__main__":
    main()
