"""Run a command (ansible-playbook on the lab inventory) against a FAKE Kubernetes cluster run by a FAKE GPU Operator.

    python -m tests.support.lab_cluster -- ansible-playbook -i inventories/lab site.yml -e ...

`make lab ARGS='-e gpuops_device_plugin_provider=gpu_operator'` runs site.yml through this. It starts, for the run
only, the fake API server the tests use (fake_kube_api.py, 127.0.0.1, a free port) with the lab inventory's hosts as
Nodes, and the fake GPU Operator (fake_gpu_operator.py: NOT NVIDIA's operator) acting on the lab's simulated GPUs;
writes a kubeconfig, appends ``-e gpuops_kubeconfig=<it>`` to the command, and stops both afterwards. The cluster's
objects are kept in lab-state/fake-cluster/objects.json, so a second `make lab` finds the cluster as the first left it
(delete lab-state/ to start afresh, as for the simulated GPUs).

With a real cluster configured (``gpuops_kubeconfig`` in the command, or K8S_AUTH_KUBECONFIG / K8S_AUTH_HOST in the
environment) no fake is started and the command runs as it is.
"""

import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from tests.support.fake_gpu_operator import FakeGpuOperator  # noqa: E402  (needs the collection path above)
from tests.support.fake_kube_api import FakeKubeApi  # noqa: E402

INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
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


def _real_cluster(cmd):
    """A cluster given to ansible-playbook: gpuops_kubeconfig in its extra vars, or the K8S_AUTH_* environment."""
    extra = [cmd[i + 1] for i, arg in enumerate(cmd[:-1]) if arg in ("-e", "--extra-vars")]
    extra += [arg.split("=", 1)[1] for arg in cmd if arg.startswith("--extra-vars=")]
    return any("gpuops_kubeconfig" in arg for arg in extra) or bool(os.environ.get("K8S_AUTH_KUBECONFIG")) \
        or bool(os.environ.get("K8S_AUTH_HOST"))


def main(argv):
    cmd = argv[argv.index("--") + 1:] if "--" in argv else argv[1:]
    if not cmd:
        sys.stderr.write(__doc__)
        return 2
    if _real_cluster(cmd):
        print("lab_cluster: a cluster is configured (gpuops_kubeconfig / K8S_AUTH_*): no fake cluster started")
        return subprocess.call(cmd)
    state_dir = os.environ.get("GPUOPS_LAB_STATE_DIR") or os.path.join(ROOT, "lab-state")
    own = os.path.join(state_dir, "fake-cluster")
    if not os.path.isdir(own):
        os.makedirs(own)
    saved = os.path.join(own, "objects.json")
    nodes = dict((host, (os.path.join(state_dir, "%s.json" % host), shape)) for host, shape in lab_nodes().items())
    api = FakeKubeApi(tokens=None).start()
    operator = FakeGpuOperator(api, nodes)
    if os.path.exists(saved):
        with open(saved) as handle:
            for obj in json.load(handle):
                api.put(obj)
    else:
        for i, host in enumerate(sorted(nodes)):
            api.add_node(host, internal_ip="10.0.0.%d" % (11 + i))
        operator.install()
    operator.start()
    kubeconfig = os.path.join(own, "kubeconfig")
    with open(kubeconfig, "w") as handle:
        yaml.safe_dump(api.kubeconfig(), handle)
    print("%s\nFAKE CLUSTER for the lab: a fake Kubernetes API server (tests/support/fake_kube_api.py) at %s with a FAKE\n"
          "GPU Operator (tests/support/fake_gpu_operator.py) - neither is Kubernetes nor NVIDIA's operator. Nodes: %s.\n"
          "kubeconfig: %s. To use a real cluster instead: make lab ARGS='... -e gpuops_kubeconfig=/path/to/kubeconfig'\n"
          "%s" % (BANNER, api.url, ", ".join(sorted(nodes)), kubeconfig, BANNER))
    sys.stdout.flush()
    try:
        rc = subprocess.call(cmd + ["-e", "gpuops_kubeconfig=%s" % kubeconfig])
    finally:
        operator.stop()
        with open(saved + ".tmp", "w") as handle:
            json.dump(operator.snapshot(), handle, indent=1, sort_keys=True)
        os.replace(saved + ".tmp", saved)
        api.stop()
    for node, config, state in operator.history:
        print("fake GPU Operator: MIG manager on %s: nvidia.com/mig.config=%s -> %s" % (node, config, state))
    for error in operator.errors:
        print("fake GPU Operator: INTERNAL ERROR\n%s" % error)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
