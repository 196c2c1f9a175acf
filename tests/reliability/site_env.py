"""A whole site.yml converge, small enough to run dozens of times: the lab inventory's two nodes, each reduced to ONE
simulated H200 (gpuops_simulated_machine=h200-x1), in one batch, against the fake Kubernetes API server (real HTTP,
the real kubernetes client) with the real helm binary and the fixture chart.

- lab-dgx-a100: MIG all-balanced (MIG mode, 4 GPU instances, 4 compute instances: 9 NVML changes), cordoned and
  drained (a GPU pod runs there) while MIG changes;
- lab-hgx-h200: MPS x4; its GPU starts in compute mode Prohibited (left by an earlier setup), MPS needs Default (one
  NVML change);
- both: containerd's nvidia runtime (validated by the real containerd, through a wrapper that can fail), node labels;
- once: the device plugin release (helm, through a wrapper that can fail) and the RuntimeClass, under the cluster
  lock (a Lease; its renewals are not counted as steps: how many there are depends on the run's pace).

`declared(...)` reads back everything a converge declares (GPUs, files, API objects, the helm release) so a run can
be compared with a clean converge; `check_integrity(...)` asserts that no file is corrupt or half-written.
"""
import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys

import tomlkit
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube._lease import RENEWER_FIELD_MANAGER
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._gpu_pods import PAUSE_LABEL, PAUSED_BY
from ansible_collections.gpuops.nvidia.plugins.modules.node_cordon import OWNER_ANNOTATION
from tests.integration.site_helpers import HELM, NODES, Site
from tests.support.ansible_run import ROOT
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.reliability_sample import FULL

CONTAINERD = os.path.join(ROOT, "tools", "bin", "containerd")
SEED_CONFIG = os.path.join(ROOT, "inventories", "lab-files", "containerd-config.toml")
MIG_NODE, MPS_NODE = NODES
RELEASE_NS = "nvidia-device-plugin"
# cluster_lock_duration: a run killed while it holds the cluster lock delays the next one by this much at most
SMALL = dict(gpuops_simulated_machine="h200-x1", gpuops_serial="100%", gpu_node_drain=True, cluster_lock_duration=10)
# tools whose n-th "mutating" invocation can be made to fail: helm upgrade/rollback/uninstall, containerd config dump
TOOLS = {"helm": (HELM, ["upgrade", "install", "rollback", "uninstall"]), "containerd": (CONTAINERD, ["dump"])}


def write_faulty_tool(tmp_path, name):
    """A wrapper around the real tool (tests/support/faulty_tool.py) with its own config file."""
    real, words = TOOLS[name]
    conf = tmp_path / ("%s-fault.json" % name)
    conf.write_text(json.dumps({"real": real, "match": words, "fail_at": 0, "counter": str(tmp_path / (name + ".n"))}))
    path = tmp_path / ("faulty-" + name)
    path.write_text("#!/bin/sh\nexec %s %s %s \"$@\"\n" % (
        sys.executable, os.path.join(ROOT, "tests", "support", "faulty_tool.py"), conf))
    path.chmod(0o755)
    return str(path), str(conf)


class SmallSite(object):
    """site.yml on the small two-node fleet; ``tools[name]`` holds the fault config of the helm/containerd wrapper."""

    def __init__(self, tmp_path):
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp_path
        self.api = FakeKubeApi(tokens=None).start()
        # the cluster lock's renewals come from a background process, as many as the run's pace makes: not steps
        self.api.uncounted = lease_renewal
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        self.api.add_node(MIG_NODE, internal_ip="10.0.0.11")
        self.api.add_node(MPS_NODE, internal_ip="10.0.0.12")
        self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
        self.api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "default"},
                      "spec": {"nodeName": MIG_NODE, "containers": [
                          {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                      "status": {"phase": "Running"}})
        self.tools = {}
        helm, self.tools["helm"] = write_faulty_tool(tmp_path, "helm")
        containerd, self.tools["containerd"] = write_faulty_tool(tmp_path, "containerd")
        self.site = Site(tmp_path, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=helm,
                         containerd_runtime_containerd_path=containerd, **SMALL)
        self.site.extra["cluster_device_plugin_chart_path"] = self.site.chart()
        # one line per task start (tests/support/callback_plugins/task_progress.py): where a run got to
        self.progress_file = tmp_path / "progress.txt"
        self.site.env.update(GPUOPS_TEST_PROGRESS=str(self.progress_file), ANSIBLE_CALLBACKS_ENABLED="task_progress")
        self.site.state.mkdir()
        # the device plugin release's pods on the nodes, holding their GPUs (tests/support/fake_daemonsets.py)
        self.daemonsets = FakeDaemonSets(self.api, dict((n, (self.state_file(n), SMALL["gpuops_simulated_machine"]))
                                                        for n in NODES)).start()
        mps = self.backend(MPS_NODE)
        mps.set_compute_mode(0, "Prohibited")
        mps.clear_call_log()

    def close(self):
        self.daemonsets.stop()
        self.api.stop()

    def state_file(self, node):
        return str(self.site.state / ("%s.json" % node))

    def backend(self, node):
        return SimulatedBackend(self.state_file(node), shape="h200-x1")

    def run(self, **extra):
        return self.site.run(**extra)

    def use_module_server(self, env):
        """The later runs fork their modules from the server ``env`` names (tests/conftest.py, module_server_env;
        {}: as before): for runs whose module processes the test does not look at."""
        self.site.env.update(env)

    def command(self):
        """The ansible-playbook command line and environment of run() (for tests that start it themselves)."""
        return self.site.command()

    def set_tool_fault(self, name, fail_at):
        with open(self.tools[name]) as handle:
            conf = json.load(handle)
        conf["fail_at"] = fail_at
        with open(self.tools[name], "w") as handle:
            json.dump(conf, handle)
        reset_counter(conf["counter"])

    def progress(self):
        """How far a run got, in mutating steps: NVML calls per node, API writes (not dry runs), helm and
        containerd invocations that count as changes."""
        out = {"api": len(self.api.writes(dry_run=False, counted=True)),
               "helm": self.tool_calls("helm"), "containerd": self.tool_calls("containerd")}
        for node in NODES:
            out[node] = len(self.backend(node).raw_state()["call_log"])
        return out

    def tasks_started(self):
        try:
            with open(str(self.progress_file)) as handle:
                return handle.read().splitlines()
        except FileNotFoundError:
            return []

    def tool_calls(self, name):
        with open(self.tools[name]) as handle:
            return read_counter(json.load(handle)["counter"])


def lease_renewal(request):
    """A write of the cluster lock's renewer (plugins/module_utils/kube/_lease.py names itself as field manager)."""
    return request["query"].get("fieldManager") == [RENEWER_FIELD_MANAGER]


@contextlib.contextmanager
def session_lock(directory, name):
    """Hold ``directory/name.lock`` exclusively: for files the pytest-xdist workers of a session share."""
    with open(str(directory / ("%s.lock" % name)), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def reset_counter(path):
    with open(path, "w") as handle:
        handle.write("0")


def read_counter(path):
    try:
        with open(path) as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            return int(handle.read() or 0)
    except FileNotFoundError:
        return 0


# Simulated UUIDs are seeded by the state file's path, so they differ between fleets (each node has one GPU here)
_UUID = re.compile(rb"\b(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def _comparable(site, data):
    """File bytes as if every fleet lived in the same place with the same GPU: tmp path and UUIDs replaced."""
    return _UUID.sub(rb"\1-<uuid>", data.replace(str(site.tmp).encode(), b"<tmp>"))


def _is_backup(name):
    return name.endswith("~")


def _is_stamp(name):
    """containerd_runtime's verified-state stamp and cdi_spec's record: caches of what a run verified, not declared
    state (they name the binaries' inodes, which differ between fleets); they must parse whenever they are there."""
    return name.endswith(".gpuops-verified.json") or name.endswith(".gpuops-verified")


_CDI_NAME = re.compile(rb'^\s*- name: (.+)$', re.MULTILINE)


def _cdi_devices(data):
    """A CDI spec as the devices it names: its bytes depend on the GPU- and compute-instance ids (the device nodes'
    minors), which a run that recovered from a fault may have numbered otherwise for the same declared layout."""
    return b"\n".join(sorted(_CDI_NAME.findall(data)))


def node_files(site, node):
    """{relative path: bytes} of what the collection wrote on a node (Site.files: the simulated host's own files, the
    kernel's views under proc/ and sys/ and the image's driver, left out), backups, stamps and lock files left out."""
    out = {}
    for rel, data in site.site.files(node).items():
        name = os.path.basename(rel)
        if _is_backup(name) or _is_stamp(name) or name.endswith(".lock"):
            continue
        # files may name their own paths: compare them as if every fleet lived in the same place
        data = _comparable(site, data)
        out[rel] = _cdi_devices(data) if rel.startswith(os.path.join("var", "run", "cdi")) else data
    return out


def declared(site):
    """What a converge declares, read back: per node the GPUs (MIG mode, MIG devices, compute mode) and files, the
    nodes' labels, schedulability and cordon mark, the device plugin's objects and the helm release's status."""
    out = {}
    for node in NODES:
        gpus = []
        for gpu in site.backend(node).read_all()["gpus"]:
            gpus.append({"mig": (gpu["mig_mode_current"], gpu["mig_mode_pending"]), "mode": gpu["compute_mode"],
                         "devices": sorted((d["profile"], d["placement"]["start"]) for d in gpu["mig_devices"])})
        obj = site.api.get("", "nodes", node)
        out[node] = {"gpus": gpus, "files": node_files(site, node),
                     "labels": dict(obj["metadata"].get("labels") or {}),
                     "unschedulable": bool((obj.get("spec") or {}).get("unschedulable")),
                     "cordon_mark": (obj["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION)}
    objects = {}
    for (group, plural, namespace, name), obj in site.api.objects.items():
        if plural in ("configmaps", "daemonsets", "runtimeclasses", "serviceaccounts") and (
                namespace in ("", RELEASE_NS)):
            objects["%s/%s/%s" % (plural, namespace, name)] = {k: obj.get(k) for k in ("data", "handler", "spec")}
    out["objects"] = objects
    out["release"] = helm_release_status(site)
    return out


def differences(got, want, path=""):
    """Where two declared() results differ, as readable lines (for assertion messages)."""
    if isinstance(got, dict) and isinstance(want, dict):
        out = []
        for key in sorted(set(got) | set(want), key=str):
            out += differences(got.get(key, "<absent>"), want.get(key, "<absent>"), "%s/%s" % (path, key))
        return out
    if got != want:
        return ["%s: %r != declared %r" % (path, got if not isinstance(got, bytes) else got[:400],
                                           want if not isinstance(want, bytes) else want[:400])]
    return []


def helm_release_status(site):
    proc = subprocess.run([HELM, "list", "-n", RELEASE_NS, "-o", "json", "--kubeconfig",
                           str(site.tmp / "kubeconfig")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False, env=dict(os.environ, HOME=str(site.tmp)))
    assert proc.returncode == 0, proc.stderr
    return sorted((r["name"], r["status"]) for r in json.loads(proc.stdout or "[]"))


def check_integrity(site, reference):
    """No corrupted file after a failed or killed run: every state file loads, every node file is either absent, as
    the clean converge left it, or (containerd's config) the seed it started from; TOML parses; every backup is an
    earlier whole version; no node is left cordoned or with its GPU pods paused unless it carries our mark (so the
    next run releases it).
    Returns the files that are not yet as declared (for the test's report)."""
    with open(SEED_CONFIG, "rb") as handle:
        seed = _comparable(site, handle.read())
    behind = []
    for node in NODES:
        site.backend(node).read_all()                     # raises on a corrupt or half-written state file
        want = reference[node]["files"]
        for rel, data in node_files(site, node).items():
            assert rel in want, (node, rel, "a file a clean converge does not write")
            if rel.endswith(".toml"):
                tomlkit.parse(data.decode("utf-8"))
            if data != want[rel]:
                assert rel.endswith("config.toml") and data == seed, (node, rel, "neither the old nor the new bytes")
                behind.append((node, rel))
        root = str(site.site.state / node)
        for dirpath, dummy, names in os.walk(root):
            for name in names:
                if _is_stamp(name):
                    with open(os.path.join(dirpath, name)) as handle:
                        json.load(handle)                 # written atomically: never half a stamp
                if _is_backup(name):
                    with open(os.path.join(dirpath, name), "rb") as handle:
                        assert _comparable(site, handle.read()) == seed, (node, name, "a backup that is not the config it replaced")
        obj = site.api.get("", "nodes", node)
        if (obj.get("spec") or {}).get("unschedulable"):
            mark = (obj["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION)
            assert mark == "gpuops.nvidia.gpu_node", (node, "cordoned without our mark: no run would release it")
        if PAUSE_LABEL in (obj["metadata"].get("labels") or {}):
            mark = (obj["metadata"].get("annotations") or {}).get(PAUSED_BY)
            assert mark == "gpuops.nvidia.gpu_node", (node, "GPU pods paused without our mark: no run would resume them")
    return behind


# How much of the fault and kill series `make test` runs. Each case is a whole site.yml converge and re-run (about a
# minute of one worker on the 2-core CI machine); all of them take longer than the suite's whole budget.
# GPUOPS_RELIABILITY=full runs every fault step and every kill (about 55 minutes on 2 cores); the default runs a fixed
# sample that keeps the first and the last step of each kind and every eighth one between (every eighth kill), so
# every kind of step and the whole span of the converge stay covered (10 of the 43 fault steps, 4 of the 20 kills:
# the sample was every fourth until the suite outgrew its 35-minute budget; the full series is the one to run after
# a change to the converge's order or to what a re-run recovers).
SAMPLE_EVERY = 8


def sampled(index, count, first=1):
    """Whether step ``index`` of ``count`` (numbered from ``first``) runs: always under GPUOPS_RELIABILITY=full, else
    the first, the last and every SAMPLE_EVERY-th."""
    position = index - first
    return FULL or position % SAMPLE_EVERY == 0 or index == first + count - 1
