# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lifecycle of one helm release, shared by the modules that install a chart (PRIVATE: do not use from other
collections).

validate -> connect -> read the chart -> build the values (chart-specific) -> read-only pre-checks (chart-specific)
-> read the release (one left pending by a dead helm recovered first) -> plan (reasons + diff) -> apply outside check
mode (helm upgrade --install, rolled back on failure) -> after-apply checks (chart-specific). A subclass fills the
hooks: ``extra_errors``, ``build``, ``pre_checks``, ``after_apply``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _helm
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._bounds import seconds_error
from ansible_collections.gpuops.nvidia.plugins.module_utils.common._module_run import (
    NOTHING_CHANGED, Failure, ModuleRun, Refusal, nothing_changed)

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover
    yaml = None
    HAS_YAML = False

LEFT_PENDING = ("helm reported that %s finished, but release %s/%s is left %s: helm could not save the release's "
                "final status (it only logs that and still exits 0; an API error or timeout while writing the release "
                "secret does this). Nothing more was done; the next run recovers the release at once (rollback to its "
                "newest deployed revision, or uninstall if it never deployed) and then converges")


def release_argument_spec(release_name, namespace, chart_ref, chart_repo_url):
    """The options every chart module shares (the release, its chart, helm's behaviour, the cluster credentials),
    with the module's own defaults for the four that name its chart."""
    spec = dict(
        state=dict(type="str", default="present", choices=["present", "absent"]),
        release_name=dict(type="str", default=release_name),
        namespace=dict(type="str", default=namespace),
        create_namespace=dict(type="bool", default=True),
        chart_ref=dict(type="str", default=chart_ref),
        chart_repo_url=dict(type="str", default=chart_repo_url),
        chart_version=dict(type="str"),
        chart_path=dict(type="path"),
        values=dict(type="dict", default={}),
        wait=dict(type="bool", default=False),
        timeout=dict(type="str", default="5m0s"),
        rollback_on_failure=dict(type="bool", default=True),
        pending_timeout=dict(type="int", default=900),
        record_dir=dict(type="path", default="~/.ansible/gpuops"),
        render_check=dict(type="bool", default=True),
        binary_path=dict(type="path"),
    )
    spec.update(_kube.AUTH_ARG_SPEC)
    return spec


class HelmRelease(ModuleRun):
    """One chart's helm release: a ModuleRun whose ``run`` is the release's lifecycle (validate -> connect -> chart
    -> values -> pre-checks -> read -> plan -> apply or report). ``result`` is what the module returns, also when a
    helm or API error ends the run (the base's error mapping: ``errors``).

    Class attributes a subclass sets: ``argument_spec`` (``release_argument_spec`` and its own options),
    ``namespace_hint`` (a dedicated namespace named in the error for 'default'),
    ``version_example`` (a chart version named in the error for a missing chart_version), ``values_prefix`` (of the
    temporary values files)."""

    namespace_hint = "a dedicated namespace"
    version_example = "1.0.0"
    values_prefix = "gpuops-helm-"
    errors = (_helm.HelmError, _kube.KubeError)

    def __init__(self, module):
        super(HelmRelease, self).__init__(module)
        self.helm = None
        self.record = None
        self.values_file = None
        self.rendered = None        # helm template's output for the desired values (render_check), else None
        if self.params["chart_path"]:
            self.chart_ref, self.repo_url = self.params["chart_path"], None
        else:
            self.chart_ref, self.repo_url = self.params["chart_ref"], self.params["chart_repo_url"]

    # ---- hooks ---------------------------------------------------------------------------------------------------
    def extra_errors(self):
        """The chart's own parameter errors (strings), checked with the release's before anything runs."""
        return []

    def build(self, chart_version):
        """The values to install for ``chart_version``: (values, what to add to the result, context passed to
        ``after_apply``). Raises a Refusal (nothing changed) when the input cannot make a valid release."""
        raise NotImplementedError

    def pre_checks(self, context):
        """Read-only checks of the cluster before any helm write (check mode too); raise a Refusal to refuse."""

    def after_apply(self, context):
        """Checks after a successful upgrade --install (not after a recovery alone)."""

    def beside_release(self, context):
        """What the module keeps beside the release (what the chart's values cannot set), after the release is as
        declared or would be (check mode); it sets ``changed`` itself when it changes something."""

    # ---- validate ------------------------------------------------------------------------------------------------
    def validate(self):
        """Every parameter checked before anything runs: all that is wrong (``run`` refuses them in one failure)."""
        p = self.params
        if not HAS_YAML:
            raise Refusal(missing_required_lib("PyYAML"))
        errors = _kube.auth_param_errors(p)
        errors.extend(_kube_names.dns_label_errors(p["namespace"], "namespace"))
        if p["namespace"] == "default" and not (p["values"] or {}).get("allowDefaultNamespace"):
            errors.append("namespace 'default' is refused by NVIDIA's chart (\"Running in the 'default' namespace is "
                          "not recommended\"); use a dedicated namespace such as %s" % self.namespace_hint)
        errors.extend(self.extra_errors())
        if p["state"] == "present" and not p["chart_path"] and not p["chart_version"]:
            errors.append("chart_version is required with a chart repository (no chart_path given): pin it (e.g. "
                          "%s) so the chart does not change under you between runs" % self.version_example)
        # helm's own check (pkg/chartutil ValidateReleaseName): a DNS-1123 subdomain of at most 53 characters
        release = p["release_name"]
        if not release or len(release) > 53 or not _kube_names.is_dns_subdomain(release):
            errors.append("release_name %s is not a helm release name (lowercase letters, digits, '-' and '.', "
                          "starting and ending with a letter or digit, at most 53 characters)"
                          % repr(release)[:80])
        if p["binary_path"] and not (os.path.isfile(p["binary_path"]) and os.access(p["binary_path"], os.X_OK)):
            errors.append("binary_path %s is not an executable file (give the path of the helm program)"
                          % p["binary_path"])
        if not p["record_dir"] or not str(p["record_dir"]).strip():
            errors.append("record_dir is empty: give the directory where helm operations in progress are recorded "
                          "(default ~/.ansible/gpuops; created when missing)")
        elif os.path.lexists(p["record_dir"]) and not os.path.isdir(p["record_dir"]):
            errors.append("record_dir %s exists and is not a directory; give a directory (created when missing)"
                          % p["record_dir"])
        if p["chart_path"] and not os.path.exists(p["chart_path"]):
            errors.append("chart_path %s does not exist" % p["chart_path"])
        error = seconds_error("pending_timeout", p["pending_timeout"])
        if error:
            errors.append(error)
        return errors

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
            raise Refusal("helm not found: install helm on the host that runs this task (the controller/EE "
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
                raise Refusal(nothing_changed(
                    "cannot read chart %s version %s from chart_repo_url %s: %s. Check chart_version, chart_repo_url "
                    "and the network path to the repository (or give chart_path)"
                    % (p["chart_ref"], p["chart_version"], self.repo_url, exc.msg)), commands=helm.commands) from exc
            raise Refusal(nothing_changed("chart_path %s is not a helm chart (a chart directory or .tgz archive) that "
                                          "helm can read: %s" % (p["chart_path"], exc.msg)),
                          commands=helm.commands) from exc
        chart_version = str(chart_meta.get("version") or "")
        if p["chart_path"] and p["chart_version"] and p["chart_version"] != chart_version:
            raise Refusal(nothing_changed("chart_version %s was given but the chart at %s is version %s"
                                          % (p["chart_version"], p["chart_path"], chart_version)),
                          commands=helm.commands)
        return chart_version, chart_meta.get("name") or p["chart_ref"]

    def desired(self, chart_version):
        """The values to install (written to a temporary file, rendered by helm template when render_check is on).
        Returns (build context, values, values file)."""
        p = self.params
        values, additions, context = self.build(chart_version)
        desired = _helm.normalize(values)
        self.result.update(chart_version=chart_version, chart_values=desired)
        self.result.update(additions)
        fd, values_file = tempfile.mkstemp(prefix=self.values_prefix + "values-", suffix=".json",
                                           dir=self.module.tmpdir)
        with os.fdopen(fd, "w") as handle:
            json.dump(desired, handle, sort_keys=True)
        self.module.add_cleanup_file(values_file)
        self.values_file = values_file
        if p["render_check"]:
            self.rendered = self.render()
        return context, desired, values_file

    def render(self):
        """The chart rendered with the desired values (helm template's output: YAML documents)."""
        p = self.params
        return self.helm.template(p["release_name"], p["namespace"], self.chart_ref, self.values_file,
                                  p["chart_version"] if not p["chart_path"] else None, self.repo_url)

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
            raise Failure(left)         # with the result so far (changed, release, ...), as the base adds it
        after_values = _helm.normalize(helm.values(p["release_name"], p["namespace"]))
        if after_values != desired:
            raise Failure("helm reported success but the release's values differ from those applied at %s"
                          % ", ".join(item[0] for item in _helm.values_diff(after_values, desired)))

    def rollback(self, exc, previous_revision, chart_version, current_version, current_values):
        """After a failed upgrade: back to ``previous_revision`` when rollback_on_failure; always fails."""
        p, helm = self.params, self.helm
        msg, fail = exc.msg, dict(stdout=exc.stdout, stderr=exc.stderr)    # the base adds the result so far
        if p["rollback_on_failure"] and previous_revision:
            try:
                helm.rollback(p["release_name"], p["namespace"], previous_revision, wait=p["wait"],
                              timeout=p["timeout"])
                fail["rolled_back_to"] = previous_revision
                msg += "; rolled back to revision %d" % previous_revision
            except _helm.HelmError as rb_exc:
                # helm rollback refuses when the failed revision left objects in the cluster that its own
                # manifest does not list ("original object ... not found"). Re-applying the previous
                # revision's chart and values with upgrade reaches the same state.
                fail["rollback_error"] = rb_exc.msg
                restore = self.restore_previous(chart_version, current_version, current_values)
                if restore is True:
                    fail["rolled_back_to"] = previous_revision
                    msg += ("; helm rollback failed (%s), so revision %d's chart and values were "
                            "re-applied with helm upgrade" % (rb_exc.msg, previous_revision))
                else:
                    msg += "; ROLLBACK to revision %d ALSO FAILED: %s; %s" % (
                        previous_revision, rb_exc.msg, restore)
        elif not previous_revision:
            msg += "; there was no deployed revision to roll back to"
        try:
            left = self.settle("the failed upgrade" + (
                " and its rollback" if previous_revision and p["rollback_on_failure"] else ""))[1]
        except _helm.HelmError as read_exc:
            left = "the release could not be read afterwards: %s" % read_exc.msg
        if left:
            msg += "; " + left
        raise Failure(msg, **fail)

    def restore_previous(self, chart_version, previous_version, previous_values):
        """Re-apply the previous chart version and values; True, or a string saying why it could not."""
        p = self.params
        if previous_version != chart_version and not self.repo_url:
            return ("the previous revision used chart %s, which the local chart_path (%s) no longer is; restore it "
                    "with helm rollback by hand" % (previous_version, chart_version))
        fd, path = tempfile.mkstemp(prefix=self.values_prefix + "previous-", suffix=".json", dir=self.module.tmpdir)
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
            raise Refusal("release %s/%s is %s and a helm operation on it is running now from this controller "
                          "(%s); %s. Let it finish." % (namespace, name, status, record.describe(), NOTHING_CHANGED))
        if seen != "died" and (age is None or age < p["pending_timeout"]):
            raise Refusal("release %s/%s is %s (updated %s, %s s ago): another helm operation may still be "
                          "running on it, so it is not touched; %s. If nothing is running, it is "
                          "recovered (rolled back, or uninstalled if it never deployed) by a run after "
                          "pending_timeout=%d s, or lower pending_timeout." % (
                              namespace, name, status, current.get("updated"), NOTHING_CHANGED,
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
        if left:   # the recovery changed the release, but this failure reported no change (changed=False, as before)
            raise Failure("release %s/%s was %s, %s; %s" % (namespace, name, status, why, left), changed=False)
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

    # ---- the run -------------------------------------------------------------------------------------------------
    def run(self):
        errors = self.validate()
        if errors:
            self.refuse_input(errors)
        self.connect()
        if self.params["state"] == "absent":
            return self.remove()
        chart_version, chart_name = self.chart()
        context, desired, values_file = self.desired(chart_version)
        self.pre_checks(context)
        current, current_values, current_version, recovered = self.current(chart_name)
        reasons = self.plan(current, current_values, current_version, recovered, chart_version, desired)
        if reasons:
            self.result["changed"] = True
        # (a recovery alone: the rollback itself restored the declared release)
        if reasons and not self.module.check_mode and not (recovered and len(reasons) == 1):
            self.apply(current, current_values, current_version, chart_version, desired, values_file)
            self.after_apply(context)
        self.beside_release(context)
        return self.result
