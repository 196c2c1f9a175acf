# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real helm binary, driven with argument lists (PRIVATE: do not use from other collections).

Idempotency without the helm-diff plugin: the release's deployed chart version (``helm list -o json``) and the
values it was installed with (``helm get values -o json``) are compared with what would be applied. Because every
upgrade passes the complete values with ``--reset-values``, "values applied" equals "values given", so the
comparison is exact for everything this collection sets.

Credentials reach helm through its environment (HELM_KUBEAPISERVER, HELM_KUBETOKEN, ...), as kubernetes.core's helm
module does, never through the command line where ``ps`` would show them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import fcntl
import json
import os
import re
import socket
import tempfile
import time


class HelmError(Exception):
    def __init__(self, msg, rc=None, stdout="", stderr="", command=None):
        super(HelmError, self).__init__(msg)
        self.msg, self.rc, self.stdout, self.stderr, self.command = msg, rc, stdout, stderr, command


def helm_env(params, tmpdir=None):
    """Environment for helm from the kubernetes.core-style auth parameters. Returns (env, secrets, files)."""
    env, secrets, files = {}, set(), []
    kubeconfig = params.get("kubeconfig")
    if isinstance(kubeconfig, dict) or (isinstance(kubeconfig, str) and "\n" in kubeconfig.strip()):
        fd, path = tempfile.mkstemp(prefix="gpuops-kubeconfig-", dir=tmpdir)
        with os.fdopen(fd, "w") as handle:
            if isinstance(kubeconfig, dict):
                json.dump(kubeconfig, handle)
            else:
                handle.write(kubeconfig)
        os.chmod(path, 0o600)
        files.append(path)
        env["KUBECONFIG"] = path
    elif kubeconfig:
        env["KUBECONFIG"] = os.path.expanduser(kubeconfig)
    if params.get("context"):
        env["HELM_KUBECONTEXT"] = params["context"]
    if params.get("host"):
        env["HELM_KUBEAPISERVER"] = params["host"]
    if params.get("api_key"):
        env["HELM_KUBETOKEN"] = params["api_key"]
        secrets.add(params["api_key"])
    if params.get("ca_cert"):
        env["HELM_KUBECAFILE"] = params["ca_cert"]
    if params.get("validate_certs") is False:
        env["HELM_KUBEINSECURE_SKIP_TLS_VERIFY"] = "true"
    return env, secrets, files


def explain(text):
    """A hint for the helm errors users hit most, keyed on helm's (client-go's) own wording."""
    low = text.lower()
    if "cluster unreachable" in low and ("connection refused" in low or "no such host" in low
                                         or "i/o timeout" in low or "dial tcp" in low):
        return (" -- helm cannot reach the Kubernetes API: check host / kubeconfig (K8S_AUTH_HOST, "
                "K8S_AUTH_KUBECONFIG), the network path and that the API server is up")
    if "unauthorized" in low or "provide credentials" in low:
        return (" -- the API server refused the credentials (401): check api_key / K8S_AUTH_API_KEY or the "
                "kubeconfig user; note that client-go sends tokens only over https")
    if "forbidden" in low:
        return " -- the credentials lack RBAC permission (403) for what helm needs in this namespace"
    return ""


class Helm(object):
    """Runs helm through a ``run(argv, environ_update)`` callable returning (rc, stdout, stderr)."""

    def __init__(self, binary, run, env=None):
        self.binary = binary
        self._run = run
        self.env = dict(env or {})
        self.commands = []     # every argv run, for the module's result and for tests

    def run(self, args, check=True, what=None):
        argv = [self.binary] + list(args)
        self.commands.append(argv)
        rc, out, err = self._run(argv, self.env)
        if check and rc != 0:
            text = (err or out).strip()
            raise HelmError("helm %s failed (rc=%s): %s%s" % (what or args[0], rc, text, explain(text)),
                            rc=rc, stdout=out, stderr=err, command=argv)
        return rc, out, err

    def run_output(self, args, what=None):
        return self.run(args, what=what)[1]

    def release(self, name, namespace):
        """The release as ``helm list`` shows it (deployed, failed or pending), or None.

        ``--deployed --failed --pending`` rather than ``--all``: helm 4 removed ``--all``; these work in 3 and 4.
        """
        out = self.run_output(["list", "--namespace", namespace, "--filter", "^%s$" % re.escape(name), "--deployed",
                              "--failed", "--pending", "--output", "json"], what="list")
        for item in json.loads(out or "[]") or []:
            if item.get("name") == name:
                return item
        return None

    def values(self, name, namespace):
        out = self.run_output(["get", "values", name, "--namespace", namespace, "--output", "json"],
                              what="get values")
        data = json.loads(out or "null")
        return data or {}

    @staticmethod
    def chart_args(chart_ref, chart_version=None, repo_url=None):
        args = [chart_ref]
        if repo_url:
            args += ["--repo", repo_url]
        if chart_version:
            args += ["--version", chart_version]
        return args

    def show_chart(self, chart_ref, chart_version=None, repo_url=None, yaml_module=None):
        out = self.run_output(["show", "chart"] + self.chart_args(chart_ref, chart_version, repo_url),
                              what="show chart")
        if yaml_module is None:
            import yaml as yaml_module
        return yaml_module.safe_load(out) or {}

    def template(self, name, namespace, chart_ref, values_file, chart_version=None, repo_url=None):
        out = self.run_output(["template", name] + self.chart_args(chart_ref, chart_version, repo_url) +
                              ["--namespace", namespace, "--values", values_file], what="template")
        return out

    def upgrade_args(self, name, namespace, chart_ref, values_file, chart_version=None, repo_url=None,
                     create_namespace=True, wait=False, timeout=None, extra=None):
        args = ["upgrade", "--install", name] + self.chart_args(chart_ref, chart_version, repo_url) + [
            "--namespace", namespace, "--values", values_file, "--reset-values"]
        if create_namespace:
            args.append("--create-namespace")
        if wait:
            args.append("--wait")
            if timeout:
                args += ["--timeout", timeout]
        args += list(extra or [])
        return args

    def upgrade(self, *a, **kw):
        return self.run(self.upgrade_args(*a, **kw), what="upgrade --install")

    def history(self, name, namespace):
        """The release's revisions (``helm history -o json``), oldest first."""
        out = self.run_output(["history", name, "--namespace", namespace, "--max", "256", "--output", "json"],
                              what="history")
        return json.loads(out or "[]") or []

    def uninstall(self, name, namespace, wait=False, timeout=None):
        args = ["uninstall", name, "--namespace", namespace]
        if wait:
            args += ["--wait", "--timeout", timeout] if timeout else ["--wait"]
        return self.run(args, what="uninstall")

    def rollback(self, name, namespace, revision, wait=False, timeout=None):
        args = ["rollback", name, str(revision), "--namespace", namespace]
        if wait:
            args.append("--wait")
            if timeout:
                args += ["--timeout", timeout]
        return self.run(args, what="rollback")


def is_pending(release_item):
    """pending-install, pending-upgrade, pending-rollback: a helm operation started and has not finished (or died)."""
    return str((release_item or {}).get("status") or "").startswith("pending")


def pending_recovery(history):
    """How to clear a release a dead helm operation left pending: ("rollback", revision) to the newest revision
    that finished deploying (status deployed or superseded), or ("uninstall", None) when none ever did (a first
    install that died; there is nothing to go back to)."""
    done = [int(h["revision"]) for h in history if h.get("status") in ("deployed", "superseded")]
    if done:
        return "rollback", max(done)
    return "uninstall", None


def release_age(release_item, now=None):
    """Seconds since the release was last updated, from helm's "updated" field
    ("2026-11-22 02:31:37.884857 +0000 UTC"); None when it cannot be read."""
    text = str((release_item or {}).get("updated") or "")
    match = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? ([+-])(\d\d)(\d\d)", text)
    if not match:
        return None
    stamp = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    offset = (int(match.group(3)) * 3600 + int(match.group(4)) * 60) * (1 if match.group(2) == "+" else -1)
    return (time.time() if now is None else now) - (stamp - offset)


class OperationRecord(object):
    """A controller-local record of the helm operation in progress on one release, so that a later run can tell a
    release left pending by a run of its own that died (killed, lost power) from one another run is still working
    on. The record is a file held under ``flock`` while helm runs: the kernel drops the lock when the holder dies,
    so "content written, lock free" means the operation died; "lock held" means it is still running."""

    def __init__(self, directory, namespace, name):
        self.path = os.path.join(directory, "helm-%s-%s.json" % (namespace, name))
        self._handle = None

    def probe(self):
        """'running' (another live process holds it), 'died' (an operation started and never finished), or None."""
        try:
            handle = open(self.path, "r+")
        except (IOError, OSError):
            return None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except (IOError, OSError):
                return "running"
            return "died" if handle.read().strip() else None

    def describe(self):
        try:
            with open(self.path) as handle:
                return json.load(handle)
        except (IOError, OSError, ValueError):
            return {}

    def begin(self, operation):
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o700, exist_ok=True)  # (another slice's helm step may create it at once)
        self._handle = open(self.path, "a+")
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        self._handle.seek(0)
        self._handle.truncate()
        json.dump({"pid": os.getpid(), "host": socket.gethostname(), "operation": operation,
                   "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}, self._handle)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def end(self):
        """The operation finished (whatever helm answered): the release is no longer left pending by us."""
        if self._handle is not None:
            self._handle.seek(0)
            self._handle.truncate()
            self._handle.flush()
            self._handle.close()
            self._handle = None

    def keep(self):
        """The operation returned but left the release pending: keep the record and let go of the lock, so that a
        later run sees an operation of ours that died and recovers the release at once."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def close(self, release_item):
        """After helm returned: end the record, or keep it when ``release_item`` (read after the operation) is
        still pending. Returns True when the release is settled (not pending)."""
        if is_pending(release_item):
            self.keep()
            return False
        self.end()
        return True


def chart_version_of(release_item, chart_name):
    """'nvidia-device-plugin-0.17.0' -> '0.17.0' (chart names may contain '-')."""
    chart = (release_item or {}).get("chart") or ""
    if chart.startswith(chart_name + "-"):
        return chart[len(chart_name) + 1:]
    m = re.match(r"^(.*?)-(v?\d+\.\d+\.\d+.*)$", chart)
    return m.group(2) if m else None


def normalize(values):
    """Values as helm stores them (JSON round trip: ints stay ints, keys sorted for comparison)."""
    return json.loads(json.dumps(values or {}, sort_keys=True))


def values_diff(current, desired, prefix=""):
    """Paths that differ between two value trees: list of (path, before, after)."""
    out = []
    keys = sorted(set(current or {}) | set(desired or {}))
    for key in keys:
        path = "%s.%s" % (prefix, key) if prefix else key
        a, b = (current or {}).get(key), (desired or {}).get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(values_diff(a, b, path))
        elif a != b:
            out.append((path, a, b))
    return out
