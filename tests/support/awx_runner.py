"""Run a playbook of this repository the way an AWX job runs it: through ansible-runner (the library AWX's jobs run
on), from a private data directory laid out as AWX lays out a job's (issue 50, docs/awx.md "Tested with AWX's engine").

Followed (read, not copied): ansible/awx at commit e21dd0a0933fd544d1fe2513c54fe41203775eb5,

- ``awx/main/tasks/jobs.py``: ``BaseTask.build_private_data_dir`` (``inventory/`` and ``env/``),
  ``RunProjectUpdate.make_local_copy`` (``project/``: the checkout without ``.git``, links kept; the collections the
  project sync installed in ``requirements_collections/``), ``BaseTask.write_inventory_file`` / ``build_inventory``
  (``inventory/hosts``: an executable script printing the inventory's JSON, the slice's hosts only),
  ``RunJob.build_extra_vars_file`` / ``BaseTask._write_extra_vars_file`` (``env/extravars``),
  ``RunJob.build_args`` / ``write_args_file`` (``env/cmdline``), ``RunJob.build_env`` (the environment, passed to
  ansible-runner as ``envvars`` with ``suppress_env_files``, so no ``env/envvars`` file: as AWX does), the runner
  settings written to ``env/settings``, and the ``ansible_runner`` call's parameters (``ident`` the job id,
  ``playbook`` relative to the project, ``inventory``, ``fact_cache_type``);
- ``awx/main/models/inventory.py``: ``Inventory.get_script_data`` and ``get_sliced_hosts`` (the enabled hosts by name,
  slice k of N gets ``[k-1::N]``; every group with its variables, a group listing the slice's hosts only;
  ``_meta.hostvars`` with ``remote_host_id`` / ``remote_tower_id``);
- ``awx/main/models/unified_jobs.py`` and ``jobs.py``: ``awx_meta_vars`` (``awx_job_id``, ``awx_workflow_job_id``,
  ``awx_job_template_name``, ... each also as ``tower_...``), which override the job's extra variables;
- ``awx/main/utils/safe_yaml.py``: ``safe_dump``: every extra variable that is not one of the job template's own
  (survey answers, the meta variables) is written with its strings tagged ``!unsafe`` (never templated);
- ``awx/main/tasks/jobs.py`` ``RunInventoryUpdate.build_args``: a project-sourced inventory is imported from
  ``ansible-inventory --list --export`` (group variables stay on their groups, templates are not rendered).

What is not AWX here: no container (the execution environment is this checkout's .venv, first on PATH), no receptor
(ansible-runner runs in this process), no machine credential (the lab's nodes are local), and the tests' own
instruments in the environment (the run counter's callback directory, the compile cache) as every test's ansible run
has them (tests/support/ansible_run.py). The one credential a job can have here is the Kubernetes bearer token, whose
environment is set as its injector sets it.
"""
import contextlib
import glob
import json
import os
import subprocess

import yaml

from tests.support.ansible_run import BIN, ROOT, ansible_env, with_compile_cache

AWX_SOURCE = "ansible/awx@e21dd0a0933fd544d1fe2513c54fe41203775eb5"
JOB_VARIABLE_PREFIXES = ("awx", "tower")     # awx/main/constants.py
CALLBACKS = os.path.join(ROOT, "tests", "support", "callback_plugins")
# settings.ANSIBLE_* of awx/settings/defaults.py, which RunJob.build_env puts in every job's environment
AWX_ANSIBLE_SETTINGS = {"ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PARAMIKO_RECORD_HOST_KEYS": "False",
                        "ANSIBLE_FORCE_COLOR": "True", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True"}
# what a job must not inherit from the machine running the tests (an execution environment has none of it)
NOT_INHERITED = ("ANSIBLE_", "K8S_AUTH_", "KUBECONFIG")


class Inventory(object):
    """An inventory as AWX holds it after importing a project-sourced inventory: its variables (``all``'s), its groups
    (variables, direct hosts, children) and its hosts (their own variables, an id each)."""

    def __init__(self, variables, groups, hosts):
        self.variables, self.groups, self.hosts = variables, groups, hosts
        self.ids = dict((name, i + 1) for i, name in enumerate(sorted(hosts)))

    @classmethod
    def import_source(cls, source):
        """Import ``source`` (a path under the checkout) as AWX's inventory update does: ``ansible-inventory --list
        --export`` (RunInventoryUpdate.build_args), ``ungrouped`` not a group, ``all``'s variables the inventory's."""
        proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", source, "--list", "--export"],
                              cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120, check=True)
        data = json.loads(proc.stdout)
        hosts = dict(data.get("_meta", {}).get("hostvars", {}))
        groups = {}
        for name, entry in data.items():
            if name in ("_meta", "all", "ungrouped"):
                continue
            groups[name] = {"vars": entry.get("vars", {}), "hosts": list(entry.get("hosts", [])),
                            "children": list(entry.get("children", []))}
            for host in entry.get("hosts", []):
                hosts.setdefault(host, {})
        for host in data.get("ungrouped", {}).get("hosts", []):
            hosts.setdefault(host, {})
        return cls(data.get("all", {}).get("vars", {}), groups, hosts)

    def sliced_hosts(self, slice_number=1, slice_count=1):
        """Inventory.get_sliced_hosts: the hosts by name, and for slice k of N (N > 1) every N-th from the k-th."""
        hosts = sorted(self.hosts)
        if slice_count > 1 and slice_number > 0:
            hosts = hosts[slice_number - 1::slice_count]
        return hosts

    def script_data(self, slice_number=1, slice_count=1):
        """Inventory.get_script_data(hostvars=True, towervars=True, slice_number, slice_count): what inventory/hosts
        prints. Every group is there with its variables and children; its hosts and _meta.hostvars are the slice's."""
        hosts = self.sliced_hosts(slice_number, slice_count)
        in_slice = set(hosts)
        data = {"all": {}}
        if self.variables:
            data["all"]["vars"] = self.variables
        grouped = set()
        for name in sorted(self.groups):
            group, info = self.groups[name], {}
            members = [h for h in group["hosts"] if h in in_slice]
            if members:
                info["hosts"] = members
                grouped.update(members)
            if group["children"]:
                info["children"] = group["children"]
            if group["vars"]:
                info["vars"] = group["vars"]
            if info:
                data[name] = info
        data["all"]["hosts"] = [h for h in hosts if h not in grouped]
        if self.groups:
            data["all"]["children"] = sorted(self.groups)
        hostvars = {}
        for host in hosts:
            hostvars[host] = dict(self.hosts[host])
            for prefix in ("host", "tower"):
                hostvars[host]["remote_%s_enabled" % prefix] = "true"
                hostvars[host]["remote_%s_id" % prefix] = self.ids[host]
        data["_meta"] = {"hostvars": hostvars}
        return data


class _UnsafeDumper(yaml.SafeDumper):
    """safe_yaml.SafeStringDumper's rule: every string, keys included, as ``!unsafe``."""

    def represent_data(self, data):
        if isinstance(data, str):
            return self.represent_scalar("!unsafe", data)
        return super(_UnsafeDumper, self).represent_data(data)


def extravars_yaml(extra_vars, template_vars):
    """safe_yaml.safe_dump(extra_vars, safe_dict=template_vars): one YAML document per key, plain where the key and its
    value are the job template's own, else with every string tagged !unsafe."""
    parts = []
    for key, value in extra_vars.items():
        safe = key in template_vars and template_vars[key] == value
        parts.append(yaml.dump_all([{key: value}], None, Dumper=yaml.SafeDumper if safe else _UnsafeDumper,
                                   default_flow_style=False))
    return "".join(parts)


class Job(object):
    """One AWX job (one slice of a sliced job): its template's settings, its survey answers, its ids."""

    def __init__(self, playbook, inventory, job_id, template_name, template_id=7, template_vars=None, survey=None,
                 workflow_job_id=None, slice_number=1, slice_count=1, job_type="run", limit="", forks=5,
                 diff_mode=False, become=False, launch_type="manual", inventory_id=3, inventory_name="GPU fleet",
                 kubernetes_credential=None):
        self.playbook, self.inventory, self.job_id = playbook, inventory, job_id
        self.template_name, self.template_id = template_name, template_id
        self.template_vars, self.survey = dict(template_vars or {}), dict(survey or {})
        self.workflow_job_id, self.slice_number, self.slice_count = workflow_job_id, slice_number, slice_count
        self.job_type, self.limit, self.forks, self.diff_mode, self.become = job_type, limit, forks, diff_mode, become
        self.launch_type, self.inventory_id, self.inventory_name = launch_type, inventory_id, inventory_name
        # an "OpenShift or Kubernetes API Bearer Token" credential's inputs: host, bearer_token, verify_ssl
        self.kubernetes_credential = kubernetes_credential

    def credential_env(self):
        """What the kubernetes_bearer_token credential type's injector puts in the job's environment (AWX's
        CredentialType.inject_credential; awx/main/tests/unit/test_tasks.py test_k8s_credential shows the values).
        Without a CA certificate: no K8S_AUTH_SSL_CA_CERT file."""
        cred = self.kubernetes_credential
        if not cred:
            return {}
        return {"K8S_AUTH_HOST": cred["host"], "K8S_AUTH_API_KEY": cred["bearer_token"],
                "K8S_AUTH_VERIFY_SSL": str(bool(cred.get("verify_ssl", False)))}

    def meta_vars(self):
        """awx_meta_vars of a job launched from a template (inside a workflow where it is a slice)."""
        out = {}
        for name in JOB_VARIABLE_PREFIXES:
            out["%s_job_id" % name] = self.job_id
            out["%s_job_launch_type" % name] = self.launch_type
            if self.workflow_job_id is not None:
                out["%s_workflow_job_id" % name] = self.workflow_job_id
                out["%s_workflow_job_name" % name] = self.template_name
                out["%s_workflow_job_launch_type" % name] = self.launch_type
            out["%s_inventory_id" % name] = self.inventory_id
            out["%s_inventory_name" % name] = self.inventory_name
            out["%s_project_revision" % name] = _revision()
            out["%s_project_scm_branch" % name] = ""
            out["%s_job_template_id" % name] = self.template_id
            out["%s_job_template_name" % name] = self.template_name
        return out

    def extra_vars(self):
        """RunJob.build_extra_vars_file's dict: the template's extra vars, the survey's answers over them (as the
        launch merged them into the job), the meta variables over both."""
        out = dict(self.template_vars)
        out.update(self.survey)
        out.update(self.meta_vars())
        return out

    def cmdline(self):
        """RunJob.build_args without a machine credential: the SSH user root, forks, the options of the template."""
        args = ["--check"] if self.job_type == "check" else []
        args += ["-u", "root"]
        if self.become:
            args.append("--become")
        if self.diff_mode:
            args.append("--diff")
        if self.forks:
            args.append("--forks=%d" % self.forks)
        if self.limit:
            args += ["-l", self.limit]
        return args


def _revision():
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True, check=False)
    return proc.stdout.strip()


def _write(path, text, mode=0o600):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)
    return path


def private_data_dir(base_dir, job_id):
    """The job's private data directory under ``base_dir`` (BaseTask.build_private_data_dir: awx_<id>_...)."""
    return os.path.join(str(base_dir), "awx_%s_job" % job_id)


def project_dir(base_dir, job_id):
    """Where the job's project is (what a job template's extra variable can name before the job runs)."""
    return os.path.join(private_data_dir(base_dir, job_id), "project")


def lay_out(job, base_dir, env=None):
    """The job's private data directory under ``base_dir`` and the environment RunJob.build_env gives it (``env``
    added: the run's own, e.g. HOME). Returns (directory, envvars)."""
    pdd = private_data_dir(base_dir, job.job_id)
    os.makedirs(pdd, mode=0o700)
    for sub in ("inventory", "env"):
        os.mkdir(os.path.join(pdd, sub))
    # project/: RunProjectUpdate.make_local_copy copies the checkout without .git, links kept. Here each top-level
    # entry is a link to the checkout's (the same tree, without copying the build outputs).
    project = project_dir(base_dir, job.job_id)
    os.mkdir(project)
    for name in sorted(os.listdir(ROOT)):
        if name != ".git":
            os.symlink(os.path.join(ROOT, name), os.path.join(project, name))
    # requirements_collections/: what the project sync's `ansible-galaxy collection install -r
    # collections/requirements.yml` installs: this collection from the checkout itself (`name: .`, `type: dir`).
    installed = os.path.join(pdd, "requirements_collections", "ansible_collections", "gpuops")
    os.makedirs(installed)
    os.symlink(ROOT, os.path.join(installed, "nvidia"))
    os.mkdir(os.path.join(pdd, "cp"), 0o700)
    # inventory/hosts: BaseTask.write_inventory_file, an executable script printing the JSON
    script = json.dumps(job.inventory.script_data(job.slice_number, job.slice_count))
    _write(os.path.join(pdd, "inventory", "hosts"),
           "#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n" % script, mode=0o700)
    _write(os.path.join(pdd, "env", "extravars"), extravars_yaml(job.extra_vars(), job.template_vars))
    _write(os.path.join(pdd, "env", "cmdline"), " ".join(job.cmdline()))
    _write(os.path.join(pdd, "env", "settings"), json.dumps(
        {"job_timeout": 0, "suppress_ansible_output": True, "suppress_output_file": True}))
    # RunJob.build_env: the ANSIBLE_* settings, the job's ids, the collections path with the synced collections first
    # (then the project ansible.cfg's collections_path, then ansible's defaults), retry files off
    envvars = dict(AWX_ANSIBLE_SETTINGS)
    envvars.update({
        "AWX_PRIVATE_DATA_DIR": pdd, "JOB_ID": str(job.job_id), "INVENTORY_ID": str(job.inventory_id),
        "PROJECT_REVISION": _revision(), "ANSIBLE_RETRY_FILES_ENABLED": "False", "MAX_EVENT_RES": "700000",
        "AWX_HOST": "https://platformhost", "ANSIBLE_SSH_CONTROL_PATH_DIR": os.path.join(pdd, "cp"),
    })
    for var in ("ANSIBLE_COLLECTIONS_PATHS", "ANSIBLE_COLLECTIONS_PATH"):
        envvars[var] = os.pathsep.join([os.path.join(pdd, "requirements_collections"),
                                        os.path.join(project, ".collections"),
                                        "~/.ansible/collections", "/usr/share/ansible/collections"])
    envvars.update(job.credential_env())
    envvars["ANSIBLE_ROLES_PATH"] = os.pathsep.join([os.path.join(pdd, "requirements_roles"), "~/.ansible/roles",
                                                     "/usr/share/ansible/roles", "/etc/ansible/roles"])
    # the execution environment's commands (this checkout's .venv) and the tests' instruments: the run counter's
    # callback (ansible-runner adds its own directory after it), the compile cache, the modules' bytecode cache
    home = (env or {}).get("HOME") or os.environ.get("HOME") or os.path.expanduser("~")
    envvars.update({"PATH": BIN + os.pathsep + os.environ.get("PATH", ""), "ANSIBLE_CALLBACK_PLUGINS": CALLBACKS,
                    "GPUOPS_BYTECODE_CACHE": os.path.join(home, ".cache", "gpuops.nvidia", "bytecode")})
    envvars.update(env or {})
    return pdd, with_compile_cache(envvars)


@contextlib.contextmanager
def _job_environment():
    """ansible-runner starts ansible-playbook with this process's environment under the job's: for the run, leave out
    what a job in an execution environment would not have (ANSIBLE_*, K8S_AUTH_*, KUBECONFIG of this machine)."""
    saved = dict((k, v) for k, v in os.environ.items() if k.startswith(NOT_INHERITED))
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


class Outcome(object):
    """What AWX shows of a finished job: ansible-runner's status and rc, and from artifacts/<ident>/ the job events
    (each host's events) and the playbook_on_stats event's artifact_data (the job's artifacts: set_stats)."""

    def __init__(self, pdd, ident, status, rc):
        self.pdd, self.ident, self.status, self.rc = pdd, str(ident), status, rc
        self.artifact_dir = os.path.join(pdd, "artifacts", self.ident)
        self.events = []
        for path in glob.glob(os.path.join(self.artifact_dir, "job_events", "*.json")):
            if path.endswith("-partial.json"):
                continue
            with open(path) as handle:
                self.events.append(json.load(handle))
        self.events.sort(key=lambda event: event["counter"])
        stats = [e for e in self.events if e["event"] == "playbook_on_stats"]
        self.stats = stats[-1]["event_data"] if stats else None
        self.artifacts = (self.stats or {}).get("artifact_data", {})

    def host_events(self, host=None):
        """The events that name a host (runner_on_ok, runner_on_failed, ...): all, or ``host``'s."""
        return [e for e in self.events if e.get("event_data", {}).get("host") and
                (host is None or e["event_data"]["host"] == host)]

    def hosts(self):
        return sorted(set(e["event_data"]["host"] for e in self.host_events()))

    def failures(self):
        return [(e["event_data"]["host"], e["event_data"].get("task"), e["event_data"].get("res", {}).get("msg"))
                for e in self.host_events() if e["event"] in ("runner_on_failed", "runner_on_unreachable")
                and not e["event_data"].get("ignore_errors")]

    def stdout(self):
        return "\n".join(e.get("stdout", "") for e in self.events if e.get("stdout"))

    def __str__(self):
        return "status=%s rc=%s failures=%s\n%s" % (self.status, self.rc, self.failures(), self.stdout()[-4000:])

    __repr__ = __str__


def run(job, base_dir, env=None):
    """Lay the job out under ``base_dir`` and run it with ansible_runner.run as AWX calls it; returns an Outcome."""
    import ansible_runner

    pdd, envvars = lay_out(job, base_dir, env)
    with _job_environment():
        runner = ansible_runner.run(private_data_dir=pdd, ident=job.job_id, playbook=job.playbook,
                                    inventory=os.path.join(pdd, "inventory", "hosts"), envvars=envvars,
                                    suppress_env_files=True, fact_cache_type="", quiet=True)
    return Outcome(pdd, job.job_id, runner.status, runner.rc)
