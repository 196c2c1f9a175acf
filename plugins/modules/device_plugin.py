#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: device_plugin
short_description: Install or upgrade NVIDIA's device plugin chart with one config per sharing profile
version_added: 0.1.0
description:
  - Builds the values of NVIDIA's C(nvidia-device-plugin) Helm chart from sharing profiles - one named config per
    profile in C(config.map), C(config.default) for unlabelled nodes - and installs or upgrades the release with the
    real C(helm) binary.
  - Each node picks its profile through the label C(nvidia.com/device-plugin.config=<profile name>); set it with
    M(gpuops.nvidia.node_labels) (the module returns the value for every node in O(nodes)).
  - Validates with the device plugin's own rules before helm runs (a bad config makes the plugin exit and
    crash-loop on every node) - replicas >= 2; MPS at most 48 replicas at compute capability >= 7.5 and 16 below;
    no MPS with C(mig_strategy=mixed) or on MIG-enabled GPUs; resource-name syntax; C(devices) and a custom
    C(rename), which the plugin silently ignores, refused; chart values that would override every per-node config
    refused; MPS needs chart >= 0.15.0. Every error quotes the rule.
  - Idempotent without the helm-diff plugin - the deployed chart version (C(helm list -o json)) and values
    (C(helm get values -o json)) are compared with what would be applied. Upgrades pass the complete values with
    C(--reset-values), so the comparison is exact.
  - Check mode runs only read-only helm commands (C(list), C(get values), C(show chart), C(template)) and reports
    the values diff.
  - Before any change the chart is rendered with C(helm template), so chart-side checks fail before the cluster is
    touched.
  - A failed upgrade is rolled back to the previous revision (O(rollback_on_failure)).
  - A release left C(pending-install), C(pending-upgrade) or C(pending-rollback) by a helm operation that died (helm
    itself refuses every later operation on it) is recovered first - rolled back to its newest deployed revision, or
    uninstalled when it never deployed - but only when that operation is known to be dead (it was started by this
    module on this controller and its process is gone, see O(record_dir)) or the release has been pending for
    longer than O(pending_timeout). Otherwise the module fails, names the release and changes nothing.
  - Optionally verifies the rollout - each node in O(nodes) must advertise GPUs x replicas under the expected
    resource name (C(nvidia.com/gpu), C(nvidia.com/gpu.shared) or C(nvidia.com/mig-*)), and the MPS control daemon
    pod must be ready on MPS nodes.
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
    default: nvdp
  namespace:
    description: Namespace of the release. NVIDIA's chart refuses C(default).
    type: str
    default: nvidia-device-plugin
  chart_ref:
    description: Chart name in the repository.
    type: str
    default: nvidia-device-plugin
  chart_repo_url:
    description: Helm repository URL (used unless O(chart_path) is given).
    type: str
    default: https://nvidia.github.io/k8s-device-plugin
  chart_version:
    description:
      - Pinned chart version, required with a repository (an unpinned chart would change under you).
      - With O(chart_path) the version is read from the chart and this, if given, must match.
    type: str
  chart_path:
    description: Local chart directory or C(.tgz) for air-gapped sites (read where the module runs).
    type: path
  profiles:
    description: Sharing profiles; each becomes one named config in C(config.map). Required with O(state=present).
    type: list
    elements: dict
    suboptions:
      name:
        description: Profile name - the C(config.map) key and the node label value. A valid label value.
        type: str
        required: true
      sharing:
        description: C(none), C(time-slicing) or C(mps) (MPS needs chart >= 0.15.0).
        type: str
        choices: [none, time-slicing, mps]
        default: none
      replicas:
        description: Replicas per GPU for C(nvidia.com/gpu) (>= 2). Capacity is GPUs x replicas.
        type: int
      rename_by_default:
        description: Advertise shared GPUs as C(<name>.shared), e.g. C(nvidia.com/gpu.shared).
        type: bool
        default: false
      fail_requests_greater_than_one:
        description:
          - Refuse containers asking for more than one replica. Time-slicing default false; under MPS the plugin
            forces true before v0.20.0, so C(false) with MPS needs chart >= 0.20.0.
        type: bool
      mig_strategy:
        description: MIG strategy of nodes using this profile.
        type: str
        choices: [none, single, mixed]
        default: none
      resources:
        description:
          - Instead of O(profiles[].replicas) - resources to share, each C({name, replicas}); with
            C(mig_strategy=mixed) time-slicing may share C(nvidia.com/mig-<profile>) resources, named as the device
            plugin names them - C(+) written as C(.) (C(nvidia.com/mig-1g.24gb.gfx), C(nvidia.com/mig-1g.24gb.me.all),
            C(nvidia.com/mig-1g.24gb-me)); compute-instance sub-profiles such as C(1c.3g.20gb) get no resource.
          - C(devices) and C(rename) are refused - the plugin resets C(devices) to C(all) and drops custom renames.
        type: list
        elements: dict
      flags:
        description: Extra device plugin flags for this profile (C(failOnInitError), C(nvidiaDriverRoot), C(plugin.*), ...).
        type: dict
  default_profile:
    description: Profile used by nodes without the label (C(config.default)). Required with more than one profile
      unless one is named C(default).
    type: str
  nodes:
    description:
      - Optional nodes and their profile, with their GPU facts from M(gpuops.nvidia.gpu_info) (C(gpus) may be the
        whole facts dict or its C(gpus) list). Used for per-node checks (MPS replica limit by compute capability, MPS
        refused on MIG-enabled GPUs), per-replica shares, and O(verify).
    type: list
    elements: dict
    suboptions:
      name:
        description: Kubernetes node name.
        type: str
        required: true
      profile:
        description: Profile of this node (default O(default_profile)).
        type: str
      gpus:
        description: GPU facts of the node.
        type: raw
  gfd:
    description:
      - Enable GPU feature discovery (C(gfd.enabled)). Left unset it is enabled when a profile uses MPS (the MPS
        daemon runs only on nodes GFD labelled C(nvidia.com/mps.capable=true)); C(false) with MPS is refused.
    type: bool
  values:
    description:
      - Other chart values (e.g. C(runtimeClassName), C(nfd.enabled), C(tolerations)). Values the chart renders as
        environment variables on every node (C(migStrategy), C(deviceListStrategy), ...) are refused because they
        override every per-node config; set them per profile under C(flags).
    type: dict
    default: {}
  skip_xids:
    description:
      - The Xids the device plugin skips in its health check besides its own (13, 31, 43, 45, 68, and 109 from
        chart 0.17.1) - a list of Xid codes, or C(all) to turn its Xid check off. The plugin marks a GPU unhealthy on
        any other Xid and never takes that back while it runs, so an Xid that the health gate's policy does not block
        would keep a GPU out of the allocatable count for good; the gpuops.nvidia.cluster role computes this list
        from every node's C(gpu_node_health_policy) (see docs/health.md).
      - NVIDIA's chart has no value for it (no chart value sets an environment variable on the plugin container), so
        the module writes C(DP_DISABLE_HEALTHCHECKS) on the plugin container (C(nvidia-device-plugin-ctr)) of the
        release's plugin DaemonSet, by a strategic merge patch that names only that variable, and records the value
        it wrote in the DaemonSet's annotation C(gpuops.nvidia/dp-disable-healthchecks). Helm upgrades leave it
        (helm applies only the fields its chart renders). A value it did not write (an administrator's) is left
        alone, with a warning. C([]) removes the value it wrote. Changing it restarts the plugin pods (a DaemonSet
        rollout), which also clears the devices they had marked unhealthy.
      - Unset (the default), the module leaves the variable as it is.
    type: raw
  verify:
    description: After a change, check every node in O(nodes) advertises the expected allocatable GPUs and, for MPS,
      runs a ready MPS control daemon pod.
    type: bool
    default: false
  verify_timeout:
    description: Seconds to wait for O(verify) to pass, from 0 to 86400 (one day).
    type: int
    default: 300
attributes:
  check_mode:
    support: full
    details: Only read-only helm commands run; the values diff is reported.
  diff_mode:
    support: full
  idempotent:
    support: full
author:
  - gpuops.nvidia developers (@gpuops)
"""

EXAMPLES = r"""
- name: Device plugin with a default config, 4-way time-slicing and 4-way MPS profiles
  gpuops.nvidia.device_plugin:
    chart_version: 0.20.0
    default_profile: default
    profiles:
      - name: default
      - name: ts-4
        sharing: time-slicing
        replicas: 4
      - name: mps-4
        sharing: mps
        replicas: 4
        rename_by_default: true
    nodes:
      - name: gpu-node-17
        profile: mps-4
        gpus: "{{ hostvars['gpu-node-17'].gpu_facts }}"
    values:
      runtimeClassName: nvidia
    wait: true
    verify: true
  delegate_to: localhost
  run_once: true
  register: dp

- name: Air-gapped - a chart tarball copied next to the playbook
  gpuops.nvidia.device_plugin:
    chart_path: /opt/charts/nvidia-device-plugin-0.20.0.tgz
    profiles:
      - name: default
        sharing: time-slicing
        replicas: 2
"""

RETURN = r"""
chart_version:
  description: Chart version applied (or that would be).
  returned: always
  type: str
  sample: 0.20.0
chart_values:
  description:
    - The complete chart values applied (or that would be).
    - Named C(chart_values), not C(values), so that Jinja reads it with dot notation (C(result.values) is the dict's
      own C(values) method).
  returned: always
  type: dict
configs:
  description: The device plugin config of each profile.
  returned: always
  type: dict
node_labels:
  description: For each node in O(nodes), the value of C(nvidia.com/device-plugin.config) that selects its profile.
  returned: always
  type: dict
  sample: {"gpu-node-17": "mps-4"}
shares:
  description:
    - Per node, what each replica gets - C(memory_per_replica_mib) and C(active_thread_percentage) per GPU, as the
      MPS daemon computes them. C(enforced) is true for MPS; for time-slicing they are fair shares, not limits.
  returned: always
  type: dict
expected_allocatable:
  description: Per node, the resources and counts the node should advertise.
  returned: always
  type: dict
  sample: {"gpu-node-17": {"nvidia.com/gpu.shared": 32}}
release:
  description: The release as C(helm list) shows it after the run (before it in check mode).
  returned: always
  type: dict
commands:
  description: Helm commands run (argument lists; credentials go through the environment, never here).
  returned: always
  type: list
verified:
  description: Per node, the allocatable resources found when O(verify) passed.
  returned: when verify ran
  type: dict
health_checks:
  description:
    - With O(skip_xids), the plugin's Xid health check - C(value) (C(DP_DISABLE_HEALTHCHECKS) as written, null when
      nothing is added to the plugin's own list), C(daemonsets) (each plugin DaemonSet, C(namespace/name), with
      C(action) (none, set, remove, unmark, foreign - a value this module did not write, left alone - or missing, a
      DaemonSet not created yet), C(before) and C(after)), and C(plugin_skips_blocked) (Xids the plugin skips on its
      own although O(skip_xids) does not list them).
  returned: when skip_xids is given
  type: dict
  sample: {"value": "8,11,25", "daemonsets": {"nvidia-device-plugin/nvdp-nvidia-device-plugin":
           {"action": "set", "before": null, "after": "8,11,25"}}, "plugin_skips_blocked": [109]}
rolled_back_to:
  description:
    - Revision restored after a failed upgrade - by C(helm rollback), or, when helm refuses that (objects left by
      the failed revision that its manifest does not list), by C(helm upgrade) with that revision's chart and values.
  returned: on failure with a rollback
  type: int
rollback_error:
  description: Why C(helm rollback) failed, when the previous revision was re-applied with C(helm upgrade) instead.
  returned: when helm rollback failed
  type: str
"""


# (first: the collection's module_utils below are compiled once, or read from the node's bytecode cache)
from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _bytecode_cache
_bytecode_cache.install()
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin_health
# _helm stays reachable as device_plugin._helm (the tests write the helm operation record through it)
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import (  # noqa: F401 pylint: disable=unused-import
    _helm)
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _helm_release
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    NOTHING_CHANGED, Failure, Refusal, run_module)
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_service
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _rollout
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._waits import WAITS

NODE_OPTIONS = dict(name=dict(type="str", required=True), profile=dict(type="str"), gpus=dict(type="raw"))

ARGUMENT_SPEC = _helm_release.release_argument_spec(release_name="nvdp", namespace="nvidia-device-plugin",
                                                    chart_ref="nvidia-device-plugin",
                                                    chart_repo_url="https://nvidia.github.io/k8s-device-plugin")
ARGUMENT_SPEC.update(
    profiles=dict(type="list", elements="dict", options=_device_plugin.PROFILE_ARG_SPEC),
    default_profile=dict(type="str"),
    nodes=dict(type="list", elements="dict", options=NODE_OPTIONS),
    gfd=dict(type="bool"),
    skip_xids=dict(type="raw"),
    verify=dict(type="bool", default=False),
    verify_timeout=dict(type="int", default=WAITS["rollout"].timeout),
)


class DevicePluginRelease(_helm_release.HelmRelease):
    """The device plugin's helm release (the lifecycle is _helm_release.HelmRelease's): the values are built from the
    sharing profiles, and the rollout is verified when asked."""

    namespace_hint = "nvidia-device-plugin"
    version_example = "0.20.0"
    argument_spec = ARGUMENT_SPEC
    module_options = dict(required_if=[("state", "present", ["profiles"])])
    values_prefix = "gpuops-dp-"

    def extra_errors(self):
        p = self.params
        errors = []
        if p["state"] == "present" and not p["profiles"]:
            errors.append("profiles must list at least one sharing profile with state=present, got %r"
                          % (p["profiles"],))
        error = seconds_error("verify_timeout", p["verify_timeout"])
        if error:
            errors.append(error)
        if p["verify"] and not p["nodes"]:
            errors.append("verify needs nodes (with their gpus facts) to know what each node must advertise")
        if p["skip_xids"] is not None:
            errors.extend(_device_plugin_health.setting_errors(p["skip_xids"], "skip_xids", auto=False))
        return errors

    def build(self, chart_version):
        """The built configs and the values to install."""
        p = self.params
        try:
            built = _device_plugin.build([dict((k, v) for k, v in prof.items() if v is not None or k == "name")
                                          for prof in p["profiles"]],
                                         p["default_profile"], chart_version=chart_version, nodes=p["nodes"],
                                         extra_values=p["values"], gfd=p["gfd"], yaml_module=_helm_release.yaml)
        except _device_plugin.DevicePluginConfigError as exc:
            raise Refusal("invalid device plugin configuration, %s: %s" % (NOTHING_CHANGED, "; ".join(exc.errors)),
                          errors=exc.errors, commands=self.helm.commands) from exc
        for warning in built["warnings"]:
            self.module.warn(warning)
        additions = dict(configs=built["configs"], node_labels=built["node_labels"], shares=built["shares"],
                         expected_allocatable=built["expected"], node_label_key=built["label"])
        built["chart_version"] = chart_version
        return built["values"], additions, built

    def beside_release(self, context):
        """DP_DISABLE_HEALTHCHECKS on the plugin container of the release's plugin DaemonSet (skip_xids)."""
        p = self.params
        if p["skip_xids"] is None or p["state"] != "present":
            return
        skip = p["skip_xids"] if p["skip_xids"] == _device_plugin_health.ALL else sorted(set(p["skip_xids"]))
        value = _device_plugin_health.env_value(skip, context["chart_version"])
        report = {"value": value, "daemonsets": {},
                  "plugin_skips_blocked": _device_plugin_health.plugin_skips_blocked(skip, context["chart_version"])}
        self.result["health_checks"] = report
        if self.rendered is None:
            self.rendered = self.render()
        documents = list(_helm_release.yaml.safe_load_all(self.rendered or ""))
        kube = _kube.Kube.from_params(p)
        for namespace, name in _device_plugin_health.plugin_daemonsets(documents, p["namespace"]):
            report["daemonsets"]["%s/%s" % (namespace, name)] = self.health_env(kube, namespace, name, value)

    def health_env(self, kube, namespace, name, value):
        """Make one plugin DaemonSet's DP_DISABLE_HEALTHCHECKS ``value`` (None: unset) where this module owns it; a
        concurrent write (409) is read and planned again once (_kube_service.retry_on_conflict). Returns the plan
        carried out."""
        module, path = self.module, _kube.daemonsets_path(namespace, name)
        what = "read the device plugin DaemonSet %s/%s" % (namespace, name)

        def attempt():
            daemonset = _kube.read_or_none(kube, what, path)
            plan = _device_plugin_health.env_plan(daemonset, value)
            action = plan["action"]
            if action == "foreign":
                module.warn("%s=%s on the device plugin DaemonSet %s/%s was not written by gpuops.nvidia (no %s "
                            "annotation with that value), so it is left as it is; the health policy asks for %s. "
                            "Remove it from the DaemonSet, or set skip_xids (the cluster role's "
                            "cluster_device_plugin_skip_xids) to what it says"
                            % (_device_plugin_health.DISABLE_ENV, plan["before"], namespace, name,
                               _device_plugin_health.MARK, "nothing beyond the plugin's own list" if value is None
                               else value))
            if action == "missing" and value is not None:
                if not module.check_mode:
                    raise Failure("the device plugin DaemonSet %s/%s, which the chart renders, does not exist after "
                                  "the release was applied, so %s could not be set on it"
                                  % (namespace, name, _device_plugin_health.DISABLE_ENV))
                self.result["changed"] = True     # the release is not installed yet: it would be set after
            if action not in ("set", "remove", "unmark"):
                return plan
            self.result["changed"] = True
            if module._diff and isinstance(self.result.get("diff"), dict):
                key = "%s %s/%s" % (_device_plugin_health.DISABLE_ENV, namespace, name)
                self.result["diff"].setdefault("before", {})[key] = plan["before"]
                self.result["diff"].setdefault("after", {})[key] = plan["after"]
            if module.check_mode:
                return plan
            patch = {"metadata": {"annotations": {_device_plugin_health.MARK: None}}} if action == "unmark" \
                else _device_plugin_health.env_patch(value)
            patch["metadata"]["resourceVersion"] = daemonset["metadata"].get("resourceVersion")
            kube.patch("set %s on the device plugin DaemonSet %s/%s" % (_device_plugin_health.DISABLE_ENV,
                                                                        namespace, name),
                       path, patch, strategic=True)
            return plan

        return _kube_service.retry_on_conflict(attempt, tries=2)

    def after_apply(self, context):
        if self.params["verify"]:
            self.verify(context)

    def verify(self, built):
        """Wait until the nodes advertise what their configs promise (and MPS nodes run the MPS daemon)."""
        p = self.params
        kube = _kube.Kube.from_params(p)
        mps_nodes = [n for n, prof in built["node_labels"].items()
                     if built["configs"][prof].get("sharing", {}).get("mps")]
        self.result["verified"] = _rollout.verify_rollout(kube, built["expected"], mps_nodes, p["namespace"],
                                                          p["verify_timeout"])


def main():
    run_module(DevicePluginRelease)


if __name__ == "__main__":
    main()
