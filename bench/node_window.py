"""What a workload sees of a node's disruption on the fake cluster, shared by bench/chart_flow.py (MIG and MPS changes)
and bench/driver_flow.py (a driver upgrade): the marks of each node's window, read from the times at which the fake API
server (tests/support/fake_kube_api.py) received the node's PATCHes and from the fake kubelet's pod events
(tests/support/fake_daemonsets.py), and the phases between consecutive marks.

The marks, per node:
- cordon: the first PATCH that set spec.unschedulable true;
- pause: the first PATCH that set the GPU pods' pause label (gpuops.nvidia/gpu-pods-paused=true);
- gone: the last of the node's GPU pods ended between the pause and the resume (the pause itself where none ran);
- resume: the last PATCH that removed that label;
- ready: the last of the node's GPU pods Running after the resume (the resume itself where none came back);
- uncordon: the last PATCH that set spec.unschedulable false.
"""
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._gpu_pods import PAUSE_LABEL

MARKS = ("cordon", "pause", "gone", "resume", "ready", "uncordon")


def node_marks(api_requests, events, nodes, since):
    """{node: {mark: time}} (MARKS) from the fake server's requests and the fake kubelet's (time, node, what) events
    after ``since``; a node without a cordon, a pause, a resume and an uncordon is left out (it was not disrupted)."""
    out = {}
    for node in nodes:
        patches = [r for r in api_requests if r["time"] >= since and r["method"] == "PATCH"
                   and r["path"] == "/api/v1/nodes/%s" % node and not r["query"].get("dryRun")]
        spec = [(r["time"], ((r["body"] or {}).get("spec") or {}).get("unschedulable")) for r in patches]
        cordon = [t for t, v in spec if v is True]
        uncordon = [t for t, v in spec if v is False]
        labels = [(r["time"], (((r["body"] or {}).get("metadata") or {}).get("labels") or {})) for r in patches]
        pause = [t for t, lab in labels if lab.get(PAUSE_LABEL) == "true"]
        resume = [t for t, lab in labels if PAUSE_LABEL in lab and lab[PAUSE_LABEL] is None]
        if not (cordon and uncordon and pause and resume):
            continue
        ended = [t for t, n, what in events if n == node and what.startswith("ended") and pause[0] <= t <= resume[-1]]
        running = [t for t, n, what in events if n == node and what.startswith("running") and t >= resume[-1]]
        out[node] = {"cordon": cordon[0], "pause": pause[0], "gone": max(ended) if ended else pause[0],
                     "resume": resume[-1], "ready": max(running) if running else resume[-1],
                     "uncordon": uncordon[-1]}
    return out


def phases(marks, spans):
    """{phase: seconds, "window": seconds} of one node: ``spans`` is [(phase, mark)] in order, each phase lasting from
    the previous mark (the first from "cordon") to its own; the window is cordon to the last span's mark."""
    out, start = {}, marks["cordon"]
    for phase, mark in spans:
        out[phase] = marks[mark] - start
        start = marks[mark]
    out["window"] = start - marks["cordon"]
    return out
