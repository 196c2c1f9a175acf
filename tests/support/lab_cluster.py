"""Run a command (ansible-playbook on the lab inventory) against a FAKE Kubernetes cluster.

    python -m tests.support.lab_cluster -- ansible-playbook -i inventories/lab site.yml -e ...

`make lab ARGS='-e gpuops_device_plugin_provider=gpu_operator'` (or `=chart`) runs site.yml through this. It starts,
for the run only, the fake API server the tests use (fake_kube_api.py, 127.0.0.1, a free port) with the lab
inventory's hosts as Nodes, writes a kubeconfig, appends ``-e gpuops_kubeconfig=<it>`` to the command, and stops the
fakes afterwards. What runs in the cluster depends on the provider the command names:

- ``gpu_operator``: the fake GPU Operator (fake_gpu_operator.py: NOT NVIDIA's operator) acting on the lab's simulated
  GPUs. Objects kept in lab-state/fake-cluster/objects.json.
- ``chart`` (the collection's default when none is named): the real helm installs the test fixture chart
  (tests/fixtures/charts/nvidia-device-plugin: NVIDIA's v0.20.0 values interface, not NVIDIA's chart; a copy, given as
  ``-e cluster_device_plugin_chart_path=...``), and the fake DaemonSet controller, kubelet and device plugin
  (fake_daemonsets.py) run its pods on the nodes its affinity admits, holding the simulated GPUs, so the node flow's
  quiesce, change, restore and verify run as on a live cluster. Objects kept in lab-state/fake-cluster-chart/.
- ``dra``: NVIDIA's DRA driver for GPUs. The fake API server serves Kubernetes v1.34 (resource.k8s.io/v1); the real
  helm installs the test fixture chart tests/fixtures/charts/nvidia-dra-driver-gpu (a stand-in, not NVIDIA's chart; a
  copy, given as ``-e cluster_dra_chart_path=...``), and the same fake DaemonSet controller runs its kubelet
  plugin, which publishes each node's ResourceSlice from the simulated GPUs (fake_daemonsets.py). Objects kept in
  lab-state/fake-cluster-dra/.

A second `make lab` finds the cluster as the first left it (delete lab-state/ to start afresh, as for the simulated
GPUs).

With a real cluster configured (``gpuops_kubeconfig`` in the command, or K8S_AUTH_KUBECONFIG / K8S_AUTH_HOST in the
environment) no fake is started and the command runs as it is.
"""

import json
import os
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from tests.support.fake_daemonsets import FakeDaemonSets  # noqa: E402  (needs the collection path above)
from tests.support.fake_gpu_operator import FakeGpuOperator  # noqa: E402
from tests.support.fake_kube_api import FakeKubeApi  # noqa: E402

INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
DRA_CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-dra-driver-gpu")
STATE_DIRS = {"gpu_operator": "fake-cluster", "chart": "fake-cluster-chart", "dra": "fake-cluster-dra"}
BANNER = "=" * 100


def lab_nodes(inventory=INVENTORY):
    """{host: simulated machine shape} of the lab inventory."""
    with open(inventory) as handle:
        doc = yaml.safe_load(handle)
    out = {}

    def walk(group):
        for host, hostvars in ((group or {}).get("hosts") or {}).items():
            out[host] = (hostvars or {}).get("gpuops_simulated_machine")
        for child in ((group or {}).get("children") or {}).values():
            walk(child)
    walk(doc.get("all"))
    return out


def _extra_vars(cmd):
    extra = [cmd[i + 1] for i, arg in enumerate(cmd[:-1]) if arg in ("-e", "--extra-vars")]
    return extra + [arg.split("=", 1)[1] for arg in cmd if arg.startswith("--extra-vars=")]


def _real_cluster(cmd):
    """A cluster given to ansible-playbook: gpuops_kubeconfig in its extra vars, or the K8S_AUTH_* environment."""
    return any("gpuops_kubeconfig" in arg for arg in _extra_vars(cmd)) or bool(os.environ.get("K8S_AUTH_KUBECONFIG")) \
        or bool(os.environ.get("K8S_AUTH_HOST"))


def _provider(cmd):
    """The device plugin provider the command names (key=value extra vars), else the collection's default, chart."""
    for arg in _extra_vars(cmd):
        for word in arg.split():
            if word.startswith("gpuops_device_plugin_provider="):
                return word.split("=", 1)[1].strip("'\"")
    return "chart"


def main(argv):
    cmd = argv[argv.index("--") + 1:] if "--" in argv else argv[1:]
    if not cmd:
        sys.stderr.write(__doc__)
        return 2
    if _real_cluster(cmd):
        print("lab_cluster: a cluster is configured (gpuops_kubeconfig / K8S_AUTH_*): no fake cluster started")
        return subprocess.call(cmd)
    provider = _provider(cmd)
    if provider not in STATE_DIRS:
        sys.stderr.write("lab_cluster: gpuops_device_plugin_provider=%s: the fake cluster runs 'chart', 'dra' or "
                         "'gpu_operator'\n" % provider)
        return 2
    if provider == "dra" and not os.path.isdir(DRA_CHART):
        sys.stderr.write("lab_cluster: gpuops_device_plugin_provider=dra needs the test fixture chart %s, which is "
                         "not there\n" % DRA_CHART)
        return 2
    state_dir = os.environ.get("GPUOPS_LAB_STATE_DIR") or os.path.join(ROOT, "lab-state")
    own = os.path.join(state_dir, STATE_DIRS[provider])
    if not os.path.isdir(own):
        os.makedirs(own)
    saved = os.path.join(own, "objects.json")
    nodes = dict((host, (os.path.join(state_dir, "%s.json" % host), shape)) for host, shape in lab_nodes().items())
    # DRA needs resource.k8s.io/v1: a v1.34 server (DRA GA); the other providers keep the fake's default version.
    api = (FakeKubeApi(tokens=None, server_version="v1.34.1") if provider == "dra" else FakeKubeApi(tokens=None)).start()
    if os.path.exists(saved):
        with open(saved) as handle:
            data = json.load(handle)
        if isinstance(data, list):          # written by an earlier version: the objects alone
            for obj in data:
                api.put(obj)
        else:
            api.restore(data)
    if provider == "gpu_operator":
        fake = FakeGpuOperator(api, nodes)
        if not os.path.exists(saved):
            for i, host in enumerate(sorted(nodes)):
                api.add_node(host, internal_ip="10.0.0.%d" % (11 + i))
            fake.install()
        what = "a FAKE GPU Operator (tests/support/fake_gpu_operator.py) - neither is Kubernetes nor NVIDIA's operator"
    else:
        fake = FakeDaemonSets(api, nodes)
        if not os.path.exists(saved):
            for i, host in enumerate(sorted(nodes)):
                api.add_node(host, internal_ip="10.0.0.%d" % (11 + i), labels={"nvidia.com/gpu.present": "true"})
        chart = os.path.join(own, "chart")
        if not os.path.isdir(chart):
            shutil.copytree(DRA_CHART if provider == "dra" else CHART, chart)
        if provider == "dra":
            # the workload namespace the lab's claim templates go to (inventories/lab: gpuops_dra_namespaces)
            if api.get("", "namespaces", "gpu-workloads") is None:
                api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-workloads"}})
            cmd = cmd + ["-e", "cluster_dra_chart_path=%s" % chart]
            what = ("the test fixture chart nvidia-dra-driver-gpu (a stand-in, not NVIDIA's chart) installed by the "
                    "real\nhelm, and a FAKE DaemonSet controller, kubelet and DRA kubelet plugin "
                    "(tests/support/fake_daemonsets.py) - not Kubernetes, not NVIDIA's")
        else:
            cmd = cmd + ["-e", "cluster_device_plugin_chart_path=%s" % chart]
            what = ("the test fixture chart (NVIDIA's v0.20.0 values interface, not NVIDIA's chart) installed by the "
                    "real\nhelm, and a FAKE DaemonSet controller, kubelet and device plugin "
                    "(tests/support/fake_daemonsets.py) - not Kubernetes, not NVIDIA's")
    fake.start()
    kubeconfig = os.path.join(own, "kubeconfig")
    with open(kubeconfig, "w") as handle:
        yaml.safe_dump(api.kubeconfig(), handle)
    print("%s\nFAKE CLUSTER for the lab: a fake Kubernetes API server (tests/support/fake_kube_api.py) at %s with\n"
          "%s. Nodes: %s.\n"
          "kubeconfig: %s. To use a real cluster instead: make lab ARGS='... -e gpuops_kubeconfig=/path/to/kubeconfig'\n"
          "%s" % (BANNER, api.url, what, ", ".join(sorted(nodes)), kubeconfig, BANNER))
    sys.stdout.flush()
    try:
        rc = subprocess.call(cmd + ["-e", "gpuops_kubeconfig=%s" % kubeconfig])
    finally:
        fake.stop()
        with open(saved + ".tmp", "w") as handle:
            json.dump(api.snapshot(), handle, indent=1, sort_keys=True)
        os.replace(saved + ".tmp", saved)
        api.stop()
    if provider == "gpu_operator":
        for node, config, state in fake.history:
            print("fake GPU Operator: MIG manager on %s: nvidia.com/mig.config=%s -> %s" % (node, config, state))
    else:
        for when, node, event in fake.events:
            print("fake cluster: %s %s" % (node, event))
    for error in fake.errors:
        print("fake cluster: INTERNAL ERROR\n%s" % error)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
