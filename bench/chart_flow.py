"""Benchmark: the disruption window of a live node under the standalone chart (docs/kubernetes.md, "A live node under
the standalone chart"): per node, cordon to uncordon, split into quiesce, change, restore and verify; GPU resets and
reboots taken.

The fleet is bench/fleet.py's inventory (simulated nodes, the lab's group_vars) in a fake cluster: the fake API server
(tests/support/fake_kube_api.py), the real helm installing the test fixture chart, and the fake DaemonSet controller,
kubelet and device plugin (tests/support/fake_daemonsets.py), whose pods hold the node's simulated GPUs while they
run. Two scenarios, each at every --nodes count:

- mig-on: DGX A100 nodes (8 x A100-SXM4-40GB) converged with no sharing (MIG disabled, the device plugin's pods
  running), then site.yml with MIG all-balanced: MIG mode on needs a GPU reset, which succeeds only once the pods
  have left; 0 reboots is the expected figure.
- mps-4-to-8: HGX H200 nodes converged with MPS 4 replicas, then site.yml with 8 replicas.

Phases per node, from the times the fake API server received the node's PATCHes and the fake kubelet's pod events
(what a workload on the cluster sees): quiesce = cordon -> the last GPU pod gone; change = -> the pause lifted (MIG,
compute mode, containerd, label, and the play's own steps between); restore = -> the GPU pods Running and Ready again;
verify = -> uncordon (the node plan's poll for Ready, device_plugin_verify's read of allocatable). The fake starts and
ends a pod in 0.2 s: on a real cluster add the pods' termination grace period and start time (image pull, plugin
registration) to quiesce and restore. Poll intervals are the role defaults (node_gpu_pods 2 s, verify 5 s).

Usage: python bench/chart_flow.py [--nodes 1,10] [--forks 10] [--scenarios mig-on,mps-4-to-8] [--out DIR]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from fleet_common import SITE, Run, inventory, save_report  # noqa: E402  (bench/fleet_common.py, beside this file)
from node_window import node_marks, phases  # noqa: E402  (bench/node_window.py)
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend  # noqa: E402
from tests.support.fake_daemonsets import FakeDaemonSets  # noqa: E402
from tests.support.fake_kube_api import FakeKubeApi  # noqa: E402

HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
# scenario -> (machine shape, share of MIG nodes, extra vars of the converge before, extra vars of the measured run)
SCENARIOS = {
    "mig-on": ("dgx-a100-40gb", 1.0, ["-e", "gpu_node_sharing=none"], []),
    "mps-4-to-8": ("hgx-h200", 0.0, [], ["-e", "gpu_node_replicas=8"]),
}

# each phase ends at its mark (bench/node_window.py): quiesce from the cordon to the last GPU pod gone, change to the
# pause lifted, restore to the GPU pods Running again, verify to the uncordon
SPANS = (("quiesce", "gone"), ("change", "resume"), ("restore", "ready"), ("verify", "uncordon"))
PHASES = tuple(phase for phase, mark in SPANS)


def node_windows(api_requests, events, nodes, since):
    """{node: {phase: seconds, "window": seconds}} from the fake server's requests and the fake kubelet's events
    after ``since``; a node without a cordon and an uncordon is left out (it was not disrupted)."""
    return dict((node, phases(marks, SPANS)) for node, marks in node_marks(api_requests, events, nodes, since).items())


def measure(scenario, nodes, forks):
    shape, mig_share, before, after = SCENARIOS[scenario]
    tmp = tempfile.mkdtemp(prefix="gpuops-chart-flow-")
    api = FakeKubeApi(tokens=None).start()
    fake = None
    try:
        inv, dummy = inventory(tmp, nodes, shape, mig_share=mig_share)
        names = ["node-%03d" % i for i in range(nodes)]
        for i, name in enumerate(names):
            api.add_node(name, internal_ip="10.1.%d.%d" % (i // 250, i % 250 + 1),
                         labels={"nvidia.com/gpu.present": "true"})
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as handle:
            json.dump(api.kubeconfig(), handle)
        chart = os.path.join(tmp, "chart")
        shutil.copytree(CHART, chart)
        state = os.path.join(tmp, "state")
        fake = FakeDaemonSets(api, dict((n, (os.path.join(state, "%s.json" % n), shape)) for n in names)).start()
        env = {"HOME": tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}
        common = ["-e", "gpuops_kubeconfig=%s" % kubeconfig, "-e", "cluster_device_plugin_helm=%s" % HELM,
                  "-e", "cluster_device_plugin_chart_path=%s" % chart]
        Run(SITE, inv, forks, env, args=common + before)
        call_logs = dict((n, len(SimulatedBackend(os.path.join(state, "%s.json" % n), shape=shape)
                                 .raw_state()["call_log"])) for n in names)
        seen = len(api.requests)
        since = api.requests[-1]["time"] if api.requests else 0.0
        run = Run(SITE, inv, forks, env, args=common + after)
        windows = node_windows(api.requests[seen:], list(fake.events), names, since)
        resets = reboots = 0
        for n in names:
            log = SimulatedBackend(os.path.join(state, "%s.json" % n), shape=shape).raw_state()["call_log"]
            new = log[call_logs[n]:]
            resets += sum(1 for c in new if c.get("call") == "reset_gpu")
            reboots += sum(1 for c in new if c.get("event") == "reboot")
        assert not fake.errors, fake.errors[0]
        return {"scenario": scenario, "nodes": nodes, "shape": shape, "disrupted": len(windows),
                "windows": windows, "resets": resets, "reboots": reboots,
                "run": run.figures()}
    finally:
        if fake is not None:
            fake.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def summary(row):
    windows = list(row["windows"].values())

    def med(key):
        return statistics.median(w[key] for w in windows) if windows else float("nan")

    def top(key):
        return max(w[key] for w in windows) if windows else float("nan")
    return ("| %s | %d | %d/%d | %s | %.1f / %.1f | %d | %d | %.0f / %.0f |" % (
        row["scenario"], row["nodes"], row["disrupted"], row["nodes"],
        " | ".join("%.1f" % med(p) for p in PHASES), med("window"), top("window"), row["resets"], row["reboots"],
        row["run"]["wall"], row["run"]["cpu"]))


def report(rows):
    head = ("| scenario | nodes | disrupted | quiesce s | change s | restore s | verify s | window s (median / max) | "
            "GPU resets | reboots | run wall / CPU s |")
    lines = [head, "|" + "---|" * 11]
    lines += [summary(r) for r in rows]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nodes", default="1,10")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--scenarios", default=",".join(sorted(SCENARIOS)))
    parser.add_argument("--out", help="directory for chart-flow-<cores>cores.md and .json")
    args = parser.parse_args(argv)
    rows = []
    for scenario in args.scenarios.split(","):
        for nodes in [int(n) for n in args.nodes.split(",")]:
            row = measure(scenario, nodes, args.forks)
            rows.append(row)
            print(summary(row))
            sys.stdout.flush()
    text = report(rows)
    print(text)
    if args.out:
        note = ("Disruption window per node under the standalone chart (bench/chart_flow.py), %d cores. Phases are "
                "medians over the disrupted nodes; the fake starts and ends pods in 0.2 s." % os.cpu_count())
        save_report(args.out, "chart-flow-%dcores" % os.cpu_count(), note + "\n\n" + text + "\n", rows)
    bad = [r for r in rows if r["disrupted"] != r["nodes"] or (r["scenario"] == "mig-on" and r["reboots"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
