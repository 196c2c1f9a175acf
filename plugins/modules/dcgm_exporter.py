#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dcgm_exporter
short_description: Install or upgrade NVIDIA's DCGM exporter as a Helm release, pointed at the nodes' DCGM host engine
version_added: 0.3.0
description:
  - Installs or upgrades NVIDIA's C(dcgm-exporter) Helm chart (NVIDIA/dcgm-exporter, chart 4.8.2 and later) with the
    real C(helm) binary, so that every GPU node serves its GPUs' telemetry on C(/metrics) (port 9400).
  - The exporter does not start a host engine of its own. It connects to the node's (C(nv-hostengine), the
    C(nvidia-dcgm) service) through C(DCGM_REMOTE_HOSTENGINE_INFO=localhost:<host_engine_port>) (the exporter's
    C(--remote-hostengine-info) / C(-r) flag), with the pod on the host network, where C(localhost) is the node - as
    NVIDIA's GPU Operator does for a host engine on the node. The exporter and C(dcgmi) on the node then share one
    host engine; two engines on one node lose the profiling metrics (NVIDIA/dcgm-exporter issues 22 and 707).
  - "Owns these chart values: C(hostNetwork=true), the C(DCGM_REMOTE_HOSTENGINE_INFO) entry of C(extraEnv) (the
    user's other entries are kept), and C(affinity) - the user's terms, or the device plugin chart's GPU-node terms
    (NVIDIA's exporter chart has none and would run on every node), each with the expression that lets
    M(gpuops.nvidia.node_gpu_pods) pause the exporter on a node around a disruptive change. C(serviceMonitor.enabled)
    defaults to false (a ServiceMonitor needs the Prometheus Operator's CRD); a user's value is kept."
  - O(values) that set C(hostNetwork), an C(-r) / C(--remote-hostengine-info) argument or an C(extraEnv) entry
    C(DCGM_REMOTE_HOSTENGINE_INFO) are refused before anything runs, naming the key and why.
  - Idempotent without the helm-diff plugin (chart version and values compared); check mode runs only read-only helm
    commands and reports the values diff; a failed upgrade is rolled back (O(rollback_on_failure)); a release left
    pending by a dead helm is recovered first (O(pending_timeout), O(record_dir)) - the same release handling as
    M(gpuops.nvidia.device_plugin).
  - Under NVIDIA's GPU Operator the operator deploys its own exporter; do not use this module there.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia._kube_auth
  - gpuops.nvidia.helm_release
options:
  state:
    description: C(present) installs or upgrades; C(absent) uninstalls the release.
    type: str
    choices: [present, absent]
    default: present
  release_name:
    description: Helm release name.
    type: str
    default: dcgm-exporter
  namespace:
    description: Namespace of the release.
    type: str
    default: nvidia-dcgm-exporter
  chart_ref:
    description: Chart name in the repository.
    type: str
    default: dcgm-exporter
  chart_repo_url:
    description: Helm repository URL (used unless O(chart_path) is given).
    type: str
    default: https://nvidia.github.io/dcgm-exporter/helm-charts
  chart_version:
    description:
      - Pinned chart version (e.g. C(4.8.2)), required with a repository (an unpinned chart would change under you).
      - With O(chart_path) the version is read from the chart and this, if given, must match.
    type: str
  chart_path:
    description: Local chart directory or C(.tgz) for air-gapped sites (read where the module runs).
    type: path
  host_engine_port:
    description: The TCP port the nodes' DCGM host engine (C(nv-hostengine)) listens on, from 1 to 65535.
    type: int
    default: 5555
  values:
    description:
      - Other chart values (e.g. C(image), C(arguments), C(tolerations), C(resources), C(kubernetesDRA.enabled)).
      - Owned keys are refused (see the description).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Only read-only helm commands run; the values diff is reported.
  diff_mode:
    support: full
  idempotent:
    support: full
seealso:
  - module: gpuops.nvidia.dcgm_exporter_verify
  - module: gpuops.nvidia.node_gpu_pods
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: NVIDIA's DCGM exporter, reading each node's nv-hostengine
  gpuops.nvidia.dcgm_exporter:
    chart_version: 4.8.2
  delegate_to: localhost
  run_once: true
  register: exporter

- name: Air-gapped, with a host engine on another port and a ServiceMonitor
  gpuops.nvidia.dcgm_exporter:
    chart_path: /opt/charts/dcgm-exporter-4.8.2.tgz
    host_engine_port: 5556
    values:
      serviceMonitor:
        enabled: true
"""

RETURN = r"""
chart_version:
  description: Chart version applied (or that would be).
  returned: with state=present
  type: str
  sample: 4.8.2
chart_values:
  description: The complete chart values applied (or that would be).
  returned: with state=present
  type: dict
host_engine:
  description: Where the exporter reaches the node's host engine (C(DCGM_REMOTE_HOSTENGINE_INFO)).
  returned: with state=present
  type: str
  sample: localhost:5555
exporter:
  description:
    - The exporter DaemonSet (C(namespace), C(name)), the label selector of its pods and their metrics port, as
      M(gpuops.nvidia.node_gpu_pods) and M(gpuops.nvidia.dcgm_exporter_verify) take them.
  returned: with state=present
  type: dict
  sample: {"namespace": "nvidia-dcgm-exporter", "name": "dcgm-exporter", "port": 9400,
           "selector": "app.kubernetes.io/name=dcgm-exporter,app.kubernetes.io/instance=dcgm-exporter"}
changes:
  description: Why the release changes (empty when it is as declared).
  returned: with state=present
  type: list
  elements: str
release:
  description: The release as C(helm list) shows it after the run (before it in check mode).
  returned: always
  type: dict
commands:
  description: Helm commands run (argument lists; credentials go through the environment, never here).
  returned: always
  type: list
rolled_back_to:
  description: Revision restored after a failed upgrade.
  returned: on failure with a rollback
  type: int
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dcgm_exporter
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _helm_release
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import run_module

ARGUMENT_SPEC = _helm_release.release_argument_spec(release_name="dcgm-exporter", namespace="nvidia-dcgm-exporter",
                                                    chart_ref="dcgm-exporter",
                                                    chart_repo_url="https://nvidia.github.io/dcgm-exporter/helm-charts")
ARGUMENT_SPEC.update(
    host_engine_port=dict(type="int", default=_dcgm_exporter.DEFAULT_HOST_ENGINE_PORT),
)


class DcgmExporterRelease(_helm_release.HelmRelease):
    """NVIDIA's dcgm-exporter chart as a helm release (the lifecycle is _helm_release.HelmRelease's), its pods on the
    host network reading the node's host engine, pausable like the device plugin's."""

    namespace_hint = "nvidia-dcgm-exporter"
    version_example = "4.8.2"
    argument_spec = ARGUMENT_SPEC
    values_prefix = "gpuops-dcgm-exporter-"

    def extra_errors(self):
        p = self.params
        errors = _dcgm_exporter.values_errors(p["values"])
        error = _dcgm_exporter.port_error("host_engine_port", p["host_engine_port"])
        if error:
            errors.append(error)
        return errors

    def build(self, chart_version):
        p = self.params
        values = _dcgm_exporter.build_values(p["values"], p["host_engine_port"])
        name, selector = _dcgm_exporter.names(values, p["release_name"])
        additions = dict(host_engine=_dcgm_exporter.host_engine_address(p["host_engine_port"]),
                         exporter=dict(namespace=p["namespace"], name=name, selector=selector,
                                       port=_dcgm_exporter.metrics_port(values)))
        return values, additions, None


def main():
    run_module(DcgmExporterRelease)


if __name__ == "__main__":
    main()
