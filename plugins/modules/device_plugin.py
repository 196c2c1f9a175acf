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
  create_namespace:
    description: Create the namespace when missing (C(--create-namespace)).
    type: bool
    default: true
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
  wait:
    description: Wait for the rollout (C(helm --wait)).
    type: bool
    default: false
  timeout:
    description: Helm timeout (Go duration) with O(wait).
    type: str
    default: 5m0s
  rollback_on_failure:
    description: Roll back to the previous revision when an upgrade fails.
    type: bool
    default: true
  pending_timeout:
    description:
      - Seconds after which a release still C(pending-*) is taken as abandoned by whoever started the operation
        and recovered. A pending release that this controller's own dead run left is recovered at once.
      - From 0 to 86400 (one day).
    type: int
    default: 900
  record_dir:
    description:
      - Directory on the host running this module (the controller when delegated to localhost) where the helm
        operation in progress is recorded, held under a lock while helm runs, so a later run can tell that a
        pending release was left by a run that died. Keep it on persistent storage in execution environments.
    type: path
    default: ~/.ansible/gpuops
  render_check:
    description: Render the chart with C(helm template) before any change (catches the chart's own checks).
    type: bool
    default: true
  verify:
    description: After a change, check every node in O(nodes) advertises the expected allocatable GPUs and, for MPS,
      runs a ready MPS control daemon pod.
    type: bool
    default: false
  verify_timeout:
    description: Seconds to wait for O(verify) to pass, from 0 to 86400 (one day).
    type: int
    default: 300
  binary_path:
    description: Path of the helm binary (default - C(helm) on PATH).
    type: path
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

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.nvidia.plugins.module_utils import _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils import _helm
from ansible_collections.gpuops.nvidia.plugins.module_utils import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils import _rollout
from ansible_collections.gpuops.nvidia.plugins.module_utils._bounds import seconds_error

# helm's own check of a release name (pkg/chartutil ValidateReleaseName: a DNS-1123 subdomain of at most 53).
_RELEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover
    HAS_YAML = False

NODE_OPTIONS = dict(name=dict(type="str", required=True), profile=dict(type="str"), gpus=dict(type="raw"))


LEFT_PENDING = ("helm reported that %s finished, but release %s/%s is left %s: helm could not save the release's "
                "final status (it only logs that and still exits 0; an API error or timeout while writing the release "
                "secret does this). Nothing more was done; the next run recovers the release at once (rollback to its "
                "newest deployed revision, or uninstall if it never deployed) and then converges")

ARGUMENT_SPEC = dict(
    state=dict(type="str", default="present", choices=["present", "absent"]),
    release_name=dict(type="str", default="nvdp"),
    namespace=dict(type="str", default="nvidia-device-plugin"),
    create_namespace=dict(type="bool", default=True),
    chart_ref=dict(type="str", default="nvidia-device-plugin"),
    chart_repo_url=dict(type="str", default="https://nvidia.github.io/k8s-device-plugin"),
    chart_version=dict(type="str"),
    chart_path=dict(type="path"),
    profiles=dict(type="list", elements="dict", options=_device_plugin.PROFILE_ARG_SPEC),
    default_profile=dict(type="str"),
    nodes=dict(type="list", elements="dict", options=NODE_OPTIONS),
    gfd=dict(type="bool"),
    values=dict(type="dict", default={}),
    wait=dict(type="bool", default=False),
    timeout=dict(type="str", default="5m0s"),
    rollback_on_failure=dict(type="bool", default=True),
    pending_timeout=dict(type="int", default=900),
    record_dir=dict(type="path", default="~/.ansible/gpuops"),
    render_check=dict(type="bool", default=True),
    verify=dict(type="bool", default=False),
    verify_timeout=dict(type="int", default=300),
    binary_path=dict(type="path"),
)
ARGUMENT_SPEC.update(_kube.AUTH_ARG_SPEC)


class DevicePluginRelease(object):
    """The device plugin's helm release: validate -> read (the chart, the release and its values; a release left
    pending by a dead helm is recovered first) -> plan (reasons + diff) -> apply outside check mode (helm upgrade
    --install, rolled back on failure) -> verify the rollout when asked. ``result`` is what the module returns, also
    when a helm or API error ends the run."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.result = dict(changed=False)
        self.helm = None
        self.record = None
        if self.params["chart_path"]:
            self.chart_ref, self.repo_url = self.params["chart_path"], None
        else:
            self.chart_ref, self.repo_url = self.params["chart_ref"], self.params["chart_repo_url"]

    # ---- validate ------------------------------------------------------------------------------------------------
    def validate(self):
        """Every parameter checked before anything runs: all that is wrong, in one failure that changes nothing."""
        p = self.params
        if not HAS_YAML:
            self.module.fail_json(msg=missing_required_lib("PyYAML"))
        errors = _kube.auth_param_errors(p)
        errors.extend(_kube_names.dns_label_errors(p["namespace"], "namespace"))
        if p["namespace"] == "default" and not (p["values"] or {}).get("allowDefaultNamespace"):
            errors.append("namespace 'default' is refused by NVIDIA's chart (\"Running in the 'default' namespace is "
                          "not recommended\"); use a dedicated namespace such as nvidia-device-plugin")
        if p["state"] == "present" and not p["profiles"]:
            errors.append("profiles must list at least one sharing profile with state=present, got %r"
                          % (p["profiles"],))
        if p["state"] == "present" and not p["chart_path"] and not p["chart_version"]:
            errors.append("chart_version is required with a chart repository (no chart_path given): pin it (e.g. "
                          "0.20.0) so the chart does not change under you between runs")
        if not p["release_name"] or len(p["release_name"]) > 53 or not _RELEASE_NAME.match(p["release_name"]):
            errors.append("release_name %s is not a helm release name (lowercase letters, digits, '-' and '.', "
                          "starting and ending with a letter or digit, at most 53 characters)"
                          % repr(p["release_name"])[:80])
        if p["binary_path"] and not (os.path.isfile(p["binary_path"]) and os.access(p["binary_path"], os.X_OK)):
            errors.append("binary_path %s is not an executable file (give the path of the helm program)"
                          % p["binary_path"])
        if os.path.lexists(p["record_dir"]) and not os.path.isdir(p["record_dir"]):
            errors.append("record_dir %s exists and is not a directory; give a directory (created when missing)"
                          % p["record_dir"])
        if p["chart_path"] and not os.path.exists(p["chart_path"]):
            errors.append("chart_path %s does not exist" % p["chart_path"])
        for option in ("pending_timeout", "verify_timeout"):
            error = seconds_error(option, p[option])
            if error:
                errors.append(error)
        if p["verify"] and not p["nodes"]:
            errors.append("verify needs nodes (with their gpus facts) to know what each node must advertise")
        if errors:
            self.module.fail_json(msg="invalid input, nothing changed: " + "; ".join(errors), errors=errors)

    def connect(self):
        """helm with the credentials in its environment (secrets masked, temporary files cleaned up), and the record
        of the helm operation this run starts."""
        module, p = self.module, self.params
        _kube.mask_kubeconfig_secrets(module)
        env, secrets, files = _helm.helm_env(p, tmpdir=module.tmpdir)
        module.no_log_values.update(secrets)
        for path in files:
            module.add_cleanup_file(path)
        binary = p["binary_path"] or module.get_bin_path("helm", required=False, opt_dirs=[
            os.path.join(os.getcwd(), "tools", "bin")])
        if not binary:
            module.fail_json(msg="helm not found: install helm on the host that runs this task (the controller/EE "
                                 "when delegated to localhost) or give binary_path")

        def run(argv, environ):
            return module.run_command(argv, environ_update=environ)

        self.helm = _helm.Helm(binary, run, env=env)
        self.record = _helm.OperationRecord(p["record_dir"], p["namespace"], p["release_name"])
        self.result["commands"] = self.helm.commands

    # ---- read ----------------------------------------------------------------------------------------------------
    def chart(self):
        """(chart version, chart name) of the chart to install; fails, changing nothing, when helm cannot read it."""
        p, helm = self.params, self.helm
        try:
            chart_meta = helm.show_chart(self.chart_ref, p["chart_version"] if not p["chart_path"] else None,
                                         self.repo_url, yaml_module=yaml)
        except _helm.HelmError as exc:
            if not p["chart_path"]:
                self.module.fail_json(msg="cannot read chart %s version %s from chart_repo_url %s: %s. Check "
                                          "chart_version, chart_repo_url and the network path to the repository (or "
                                          "give chart_path). Nothing was changed."
                                          % (p["chart_ref"], p["chart_version"], self.repo_url, exc.msg),
                                      commands=helm.commands)
            self.module.fail_json(msg="chart_path %s is not a helm chart (a chart directory or .tgz archive) that helm "
                                      "can read: %s. Nothing was changed." % (p["chart_path"], exc.msg),
                                  commands=helm.commands)
        chart_version = str(chart_meta.get("version") or "")
        if p["chart_path"] and p["chart_version"] and p["chart_version"] != chart_version:
            self.module.fail_json(msg="chart_version %s was given but the chart at %s is version %s; nothing changed"
                                      % (p["chart_version"], p["chart_path"], chart_version), commands=helm.commands)
        return chart_version, chart_meta.get("name") or p["chart_ref"]

    def desired(self, chart_version):
        """The built configs and the values to install (written to a temporary file, rendered by helm template when
        render_check is on). Returns (built, values, values file)."""
        p = self.params
        try:
            built = _device_plugin.build([dict((k, v) for k, v in prof.items() if v is not None or k == "name")
                                          for prof in p["profiles"]],
                                         p["default_profile"], chart_version=chart_version, nodes=p["nodes"],
                                         extra_values=p["values"], gfd=p["gfd"], yaml_module=yaml)
        except _device_plugin.DevicePluginConfigError as exc:
            self.module.fail_json(msg="invalid device plugin configuration, nothing changed: " + "; ".join(exc.errors),
                                  errors=exc.errors, commands=self.helm.commands)
        for warning in built["warnings"]:
            self.module.warn(warning)
        desired = _helm.normalize(built["values"])
        self.result.update(chart_version=chart_version, chart_values=desired, configs=built["configs"],
                           node_labels=built["node_labels"], shares=built["shares"],
                           expected_allocatable=built["expected"], node_label_key=built["label"])
        fd, values_file = tempfile.mkstemp(prefix="gpuops-dp-values-", suffix=".json", dir=self.module.tmpdir)
        with os.fdopen(fd, "w") as handle:
            json.dump(desired, handle, sort_keys=True)
        self.module.add_cleanup_file(values_file)
        if p["render_check"]:
            self.helm.template(p["release_name"], p["namespace"], self.chart_ref, values_file,
                               p["chart_version"] if not p["chart_path"] else None, self.repo_url)
        return built, desired, values_file

    def current(self, chart_name):
        """The installed release (a pending one recovered first), its values and chart version. Returns
        (release or None, values, chart version, what the recovery did or None)."""
        p, helm = self.params, self.helm
        current = helm.release(p["release_name"], p["namespace"])
        recovered = None
        if _helm.is_pending(current):
            recovered = self.recover_pending(current)
            self.result["recovered"] = recovered
            if not self.module.check_mode:
                current = helm.release(p["release_name"], p["namespace"])
        current_values = helm.values(p["release_name"], p["namespace"]) if current else {}
        current_version = _helm.chart_version_of(current, chart_name) if current else None
        self.result["release"] = current or {}
        return current, current_values, current_version, recovered

    # ---- plan ----------------------------------------------------------------------------------------------------
    def plan(self, current, current_values, current_version, recovered, chart_version, desired):
        """Why the release must change (empty: it is as declared), and the diff when diff mode is on."""
        p = self.params
        reasons = [recovered] if recovered else []
        if not current:
            reasons.append("release %s is not installed in namespace %s" % (p["release_name"], p["namespace"]))
        else:
            if current.get("status") != "deployed":
                reasons.append("release status is %s" % current.get("status"))
            if current_version != chart_version:
                reasons.append("chart version %s -> %s" % (current_version, chart_version))
            changed_paths = _helm.values_diff(_helm.normalize(current_values), desired)
            if changed_paths:
                reasons.append("values differ at %s" % ", ".join(item[0] for item in changed_paths))
        self.result["changes"] = reasons
        if self.module._diff:
            self.result["diff"] = dict(
                before=dict(chart_version=current_version, values=_helm.normalize(current_values)) if current else {},
                after=dict(chart_version=chart_version, values=desired),
                before_header="helm release %s/%s" % (p["namespace"], p["release_name"]),
                after_header="helm release %s/%s" % (p["namespace"], p["release_name"]))
        return reasons

    # ---- apply ---------------------------------------------------------------------------------------------------
    def remove(self):
        """state=absent: uninstall the release when there is one."""
        p, helm = self.params, self.helm
        current = helm.release(p["release_name"], p["namespace"])
        self.result["release"] = current or {}
        if current:
            self.result["changed"] = True
            if self.module._diff:
                self.result["diff"] = dict(before={"release": current}, after={})
            if not self.module.check_mode:
                self.record.begin("uninstall")
                try:
                    helm.uninstall(p["release_name"], p["namespace"], wait=p["wait"], timeout=p["timeout"])
                finally:
                    self.record.end()
        return self.result

    def apply(self, current, current_values, current_version, chart_version, desired, values_file):
        """helm upgrade --install; on failure roll back to the deployed revision (or re-apply its chart and values)
        and fail saying what is left. Then check that the release holds the values applied."""
        p, helm = self.params, self.helm
        previous_revision = None
        if current and current.get("status") == "deployed":
            previous_revision = int(current.get("revision"))
        self.record.begin("upgrade --install")
        try:
            helm.upgrade(p["release_name"], p["namespace"], self.chart_ref, values_file,
                         chart_version=p["chart_version"] if not p["chart_path"] else None, repo_url=self.repo_url,
                         create_namespace=p["create_namespace"], wait=p["wait"], timeout=p["timeout"])
        except _helm.HelmError as exc:
            self.rollback(exc, previous_revision, chart_version, current_version, current_values)
        after, left = self.settle("helm upgrade --install")
        self.result["release"] = after or {}
        if left:
            self.module.fail_json(msg=left, **self.result)
        after_values = _helm.normalize(helm.values(p["release_name"], p["namespace"]))
        if after_values != desired:
            self.module.fail_json(msg="helm reported success but the release's values differ from those applied at %s"
                                  % ", ".join(item[0] for item in _helm.values_diff(after_values, desired)),
                                  **self.result)

    def rollback(self, exc, previous_revision, chart_version, current_version, current_values):
        """After a failed upgrade: back to ``previous_revision`` when rollback_on_failure; always fails."""
        p, helm = self.params, self.helm
        fail = dict(self.result, msg=exc.msg, stdout=exc.stdout, stderr=exc.stderr)
        if p["rollback_on_failure"] and previous_revision:
            try:
                helm.rollback(p["release_name"], p["namespace"], previous_revision, wait=p["wait"],
                              timeout=p["timeout"])
                fail["rolled_back_to"] = previous_revision
                fail["msg"] += "; rolled back to revision %d" % previous_revision
            except _helm.HelmError as rb_exc:
                # helm rollback refuses when the failed revision left objects in the cluster that its own
                # manifest does not list ("original object ... not found"). Re-applying the previous
                # revision's chart and values with upgrade reaches the same state.
                fail["rollback_error"] = rb_exc.msg
                restore = self.restore_previous(chart_version, current_version, current_values)
                if restore is True:
                    fail["rolled_back_to"] = previous_revision
                    fail["msg"] += ("; helm rollback failed (%s), so revision %d's chart and values were "
                                    "re-applied with helm upgrade" % (rb_exc.msg, previous_revision))
                else:
                    fail["msg"] += "; ROLLBACK to revision %d ALSO FAILED: %s; %s" % (
                        previous_revision, rb_exc.msg, restore)
        elif not previous_revision:
            fail["msg"] += "; there was no deployed revision to roll back to"
        try:
            left = self.settle("the failed upgrade" + (
                " and its rollback" if previous_revision and p["rollback_on_failure"] else ""))[1]
        except _helm.HelmError as read_exc:
            left = "the release could not be read afterwards: %s" % read_exc.msg
        if left:
            fail["msg"] += "; " + left
        self.module.fail_json(**fail)

    def restore_previous(self, chart_version, previous_version, previous_values):
        """Re-apply the previous chart version and values; True, or a string saying why it could not."""
        p = self.params
        if previous_version != chart_version and not self.repo_url:
            return ("the previous revision used chart %s, which the local chart_path (%s) no longer is; restore it "
                    "with helm rollback by hand" % (previous_version, chart_version))
        fd, path = tempfile.mkstemp(prefix="gpuops-dp-previous-", suffix=".json", dir=self.module.tmpdir)
        with os.fdopen(fd, "w") as handle:
            json.dump(previous_values or {}, handle, sort_keys=True)
        try:
            self.helm.upgrade(p["release_name"], p["namespace"], self.chart_ref, path,
                              chart_version=previous_version if self.repo_url else None, repo_url=self.repo_url,
                              create_namespace=False, wait=p["wait"], timeout=p["timeout"])
        except _helm.HelmError as exc:
            return "re-applying the previous values with helm upgrade failed too: %s" % exc.msg
        finally:
            os.unlink(path)
        return True

    def recover_pending(self, current):
        """Clear a release left pending by a dead helm operation (helm refuses any other operation on it): roll back
        to its newest deployed revision or uninstall it. Fails, changing nothing, when the operation may still be
        running. Returns what was (in check mode: would be) done."""
        module, p, helm, record = self.module, self.params, self.helm, self.record
        name, namespace, status = p["release_name"], p["namespace"], current.get("status")
        age = _helm.release_age(current)
        seen = record.probe()
        if seen == "running":
            module.fail_json(msg="release %s/%s is %s and a helm operation on it is running now from this controller "
                             "(%s); nothing changed. Let it finish." % (namespace, name, status, record.describe()))
        if seen != "died" and (age is None or age < p["pending_timeout"]):
            module.fail_json(msg="release %s/%s is %s (updated %s, %s s ago): another helm operation may still be "
                             "running on it, so it is not touched and nothing changed. If nothing is running, it is "
                             "recovered (rolled back, or uninstalled if it never deployed) by a run after "
                             "pending_timeout=%d s, or lower pending_timeout." % (
                                 namespace, name, status, current.get("updated"),
                                 "?" if age is None else int(age), p["pending_timeout"]))
        action, revision = _helm.pending_recovery(helm.history(name, namespace))
        why = "its helm operation died (%s)" % record.describe() if seen == "died" else "pending for %d s" % age
        done = ("release was %s, %s: %s" % (status, why, "rolled back to revision %d" % revision
                                            if action == "rollback" else "uninstalled (it never deployed)"))
        if module.check_mode:
            return "would be " + done.replace(": rolled", ": would roll").replace(": uninstalled", ": would uninstall")
        record.begin("recover %s: %s" % (status, action))
        try:
            if action == "rollback":
                helm.rollback(name, namespace, revision, wait=p["wait"], timeout=p["timeout"])
            else:
                helm.uninstall(name, namespace, wait=p["wait"], timeout=p["timeout"])
        except _helm.HelmError:
            record.end()
            raise
        left = self.settle("the recovery (%s)" % action)[1]
        if left:
            module.fail_json(msg="release %s/%s was %s, %s; %s" % (namespace, name, status, why, left))
        return done

    def settle(self, what):
        """Read the release after a helm operation returned and close the operation's record: ended when the release
        settled, kept when it is still pending (the next run then recovers it at once). Returns (release item, None)
        or (release item, why it is not settled)."""
        p = self.params
        try:
            after = self.helm.release(p["release_name"], p["namespace"])
        except _helm.HelmError:
            self.record.keep()       # outcome unknown: a later run recovers the release only if it really is pending
            raise
        if self.record.close(after):
            return after, None
        return after, LEFT_PENDING % (what, p["namespace"], p["release_name"], after.get("status"))

    def verify(self, built):
        """Wait until the nodes advertise what their configs promise (and MPS nodes run the MPS daemon)."""
        p = self.params
        kube = _kube.Kube.from_params(p)
        mps_nodes = [n for n, prof in built["node_labels"].items()
                     if built["configs"][prof].get("sharing", {}).get("mps")]
        self.result["verified"] = _rollout.verify_rollout(kube, built["expected"], mps_nodes, p["namespace"],
                                                          p["verify_timeout"])

    # ---- the run -------------------------------------------------------------------------------------------------
    def run(self):
        self.validate()
        self.connect()
        if self.params["state"] == "absent":
            return self.remove()
        chart_version, chart_name = self.chart()
        built, desired, values_file = self.desired(chart_version)
        current, current_values, current_version, recovered = self.current(chart_name)
        reasons = self.plan(current, current_values, current_version, recovered, chart_version, desired)
        if not reasons:
            return self.result
        self.result["changed"] = True
        if recovered and not self.module.check_mode and len(reasons) == 1:
            return self.result     # the rollback itself restored the declared release
        if self.module.check_mode:
            return self.result
        self.apply(current, current_values, current_version, chart_version, desired, values_file)
        if self.params["verify"]:
            self.verify(built)
        return self.result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[("state", "present", ["profiles"])])
    release = DevicePluginRelease(module)
    try:
        module.exit_json(**release.run())
    except _helm.HelmError as exc:
        module.fail_json(msg=exc.msg, rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr, **release.result)
    except _kube.KubeError as exc:
        module.fail_json(msg=exc.msg, status=exc.status, **release.result)


if __name__ == "__main__":
    main()
