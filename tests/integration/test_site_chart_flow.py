"""site.yml on a live node under the standalone chart: quiesce the node's GPU pods, change, restore, verify, uncordon.

The cluster is the fake API server with the real helm and the fixture chart (NVIDIA's v0.20.0 values interface), and
tests/support/fake_daemonsets.py: a fake DaemonSet controller and kubelet that run the release's pods where the
rendered node affinity admits them, and a fake device plugin whose pods hold the node's simulated GPUs (a GPU reset
fails IN_USE while they run) and advertise what the GPUs were when the pod started (stale after a MIG change until it
restarts). Nodes start labelled nvidia.com/gpu.present=true, so the release's pods run on them before the first node
play, as on a live cluster.

The tests that start from the converged lab take a copy of this session's one converge of it (the ``converged``
fixture, tests/support/converged_lab.py) instead of converging again; the test of the converge itself asserts on what
that converge recorded.
"""
import os
import pathlib
import signal
import subprocess
import time

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _device_plugin_health as _dph
from tests.integration.site_helpers import HELM, Site
from tests.support.ansible_run import ROOT
from tests.support.fake_cluster import FakeCluster, node_writes
from tests.support.fake_daemonsets import FakeDaemonSets, advertised
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.lab_cluster import lab_nodes
from tests.support.reliability_sample import skip_unless_sampled
from tests.support.stop_points import wait_child_stopped

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")]

A100, H200 = "lab-dgx-a100", "lab-hgx-h200"
PAUSED = "gpuops.nvidia/gpu-pods-paused"
CORDONED_BY = "gpuops.nvidia/cordoned-by"
PAUSED_BY = "gpuops.nvidia/gpu-pods-paused-by"
# The steps of the sequence on a node with a MIG change, by the task that starts each (killed as it starts).
STEPS = ("Pause the node's GPU DaemonSet pods", "Apply MIG mode and layout", "Label the node with its device plugin",
         "Let the node's GPU DaemonSet pods back", "The node advertises what its device plugin config promises",
         "Uncordon the node if this collection cordoned it")
# Each kill is a run and a re-run (about 80 s of CPU): make test kills before, during and after the change (the three
# states the node can be left in: paused, changing, restored); GPUOPS_RELIABILITY=full kills at every step.
SAMPLED_STEPS = (STEPS[0], STEPS[1], STEPS[4])


class Cluster(FakeCluster):
    """The lab's two nodes on the fake cluster, all under ``tmp_path``; with ``restore`` (a converged lab's record,
    _converge), the API server's objects and the fake controller's state of that converge, whose files a
    converged_labs copy has put under ``tmp_path``."""

    def __init__(self, tmp_path, restore=None):
        tmp_path = pathlib.Path(str(tmp_path))
        self.api = FakeKubeApi(tokens=None).start()
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        if restore is None:
            for i, node in enumerate((A100, H200)):
                self.api.add_node(node, internal_ip="10.0.0.%d" % (11 + i), labels={"nvidia.com/gpu.present": "true"})
        else:
            self.api.restore(restore["api"])
        self.site = Site(tmp_path, gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                         gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60, gpu_node_operator_poll_interval=0.5)
        self.site.extra["cluster_device_plugin_chart_path"] = self.site.chart()
        shapes = lab_nodes()
        self.fake = FakeDaemonSets(self.api, dict((n, (str(self.site.state / ("%s.json" % n)), shapes[n]))
                                                  for n in (A100, H200)))
        if restore is not None:
            self.fake.restore(restore["fake"])
        self.fake.start()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def _converge(directory):
    """The lab variant "chart-flow": site.yml converges the fresh cluster once; recorded are what a copy restores
    besides its files (the API server's objects, the fake controller's state) and what the converge showed (its
    result, the controller's events, the API requests), for the test that asserts on the converge itself."""
    c = Cluster(directory)
    try:
        res = c.site.run()
        assert res.rc == 0, res
        c.wait_settled()
    finally:
        c.stop()
    return {"api": c.api.snapshot(), "fake": c.fake.snapshot(), "result": res, "events": list(c.fake.events),
            "requests": list(c.api.requests)}


@pytest.fixture
def converged(converged_labs, tmp_path, request):
    """A Cluster converged by site.yml from scratch: a fresh copy of this session's converge of the chart-flow lab
    (tests/support/converged_lab.py); ``converged.first`` is what that converge recorded (_converge)."""
    with converged_labs.copy("chart-flow", _converge, keep_in=tmp_path, test=request.node.nodeid) as (slot, record):
        c = Cluster(slot, restore=record)
        c.first = record
        try:
            yield c
        finally:
            c.stop()


def _released(node):
    meta = node["metadata"]
    return not (node.get("spec") or {}).get("unschedulable") and PAUSED not in (meta.get("labels") or {}) \
        and not [k for k in meta.get("annotations") or {} if k.startswith("gpuops.nvidia/")]


def _expected(cluster, node, config, strategy):
    gpus = cluster.fake._backend(node).read_all()["gpus"]
    return dict((k, str(v)) for k, v in advertised(gpus, config, strategy).items())


def test_mig_change_on_a_live_a100_quiesces_resets_without_reboot_and_serves_the_new_devices(converged):
    # The converge from scratch is the session's converge of this lab: its result, events and requests as it
    # recorded them (converged.first), the cluster and the GPUs as it left them (a copy).
    cluster, first = converged, converged.first
    res = first["result"]
    assert res.rc == 0, res
    a100 = cluster.site.gpus(A100)
    # MIG mode went on with a GPU reset, on every GPU, and no reboot: the plugin pods had left the node first.
    assert all(g["mig_current"] is True for g in a100["gpus"])
    calls = [c.get("call") or c.get("event") for c in a100["call_log"]]
    assert calls.count("reset_gpu") == 8 and "reboot" not in calls and a100["boot_id"] == 1
    assert a100.get("holders"), "the device plugin pods hold the GPUs again once they are back"
    # The node advertises exactly the new MIG devices (mig-mixed: one resource per profile), computed by the fake
    # plugin from the GPUs when its new pod started.
    advertised_now = cluster.allocatable(A100)
    assert advertised_now == _expected(cluster, A100, {}, "mixed")
    assert advertised_now["nvidia.com/mig-1g.5gb"] == "16" and "nvidia.com/gpu" not in advertised_now
    # The H200 went from the default config to MPS: paused too, and serves 8 GPUs x 4 replicas with its daemon.
    assert cluster.allocatable(H200) == {"nvidia.com/gpu": "32"}
    for node in (A100, H200):
        assert _released(cluster.node(node)), cluster.node(node)["metadata"]
    # In order on the A100: cordon + pause, the old pods ended, the GPUs changed, resumed, new pods, uncordon.
    ended = [t for t, n, what in first["events"] if n == A100 and what.startswith("ended")]
    registered = [(t, what) for t, n, what in first["events"] if n == A100 and what.startswith("registered")]
    assert ended and registered and registered[-1][0] > max(ended)
    assert "mig-" in registered[-1][1] and "mig-" not in registered[0][1]
    spec_changes = [(r["body"].get("spec") or {}).get("unschedulable") for r in node_writes(first["requests"], A100)
                    if "unschedulable" in (r["body"].get("spec") or {})]
    assert spec_changes == [True, False]
    # The device plugin skips every Xid the lab's (default) health policy does not block: DP_DISABLE_HEALTHCHECKS on
    # its container, marked as the collection's, and the run says so.
    expected = _dph.env_value(_dph.fleet_skips({A100: {}, H200: {}})["skip"], "0.20.0")
    plugin = cluster.api.get("apps", "daemonsets", "nvdp-nvidia-device-plugin", "nvidia-device-plugin")
    ctr = [c for c in plugin["spec"]["template"]["spec"]["containers"] if c["name"] == "nvidia-device-plugin-ctr"][0]
    assert {"name": "DP_DISABLE_HEALTHCHECKS", "value": expected} in ctr["env"]
    assert plugin["metadata"]["annotations"]["gpuops.nvidia/dp-disable-healthchecks"] == expected
    assert expected.startswith("8,11,25,32,") and ",109" not in expected
    shown = (res.task("Show the device plugin's health check", A100)
             or res.task("Show the device plugin's health check", H200))[0]["msg"]
    # (read from every host of the lab's gpu_nodes group: the B200 too, which this run's --limit leaves out)
    assert shown.startswith("the device plugin skips Xid 8, 11, 13, ") and "of 3 node(s)" in shown, shown

    # Again: nothing changes, nobody is paused or cordoned, no pod restarts.
    seen, events = len(cluster.api.requests), len(cluster.fake.events)
    res = cluster.site.run()
    assert res.rc == 0, res
    assert res.changed(A100) == 0 and res.changed(H200) == 0, res
    assert cluster.node_writes(A100, seen) == [] and cluster.node_writes(H200, seen) == []
    assert cluster.fake.events[events:] == []
    assert not [r for r in cluster.api.requests[seen:] if "/daemonsets/" in r["path"] and r["method"] != "GET"]
    # ... and the node plan finds no work on either node: the copy is the converged lab, verified-state stamps and all
    for node in (A100, H200):
        steps = res.task("Read the GPUs and plan every step", node)[0]["steps"]
        assert all(reasons == [] for reasons in steps.values()), (node, steps)


def _user_daemonset(cluster, name, pausable):
    """A user's GPU DaemonSet in namespace monitoring; with ``pausable`` its affinity keeps it off a paused node."""
    expressions = [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]
    if pausable:
        expressions.append({"key": PAUSED, "operator": "NotIn", "values": ["true"]})
    cluster.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}})
    cluster.api.put({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "monitoring", "labels": {"app": name}},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {
                     "containers": [{"name": "exporter", "image": name}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}}}}})


def _wait_running(cluster, node, prefix, bound_s=60):
    """Wait (bounded) until a pod whose name starts with ``prefix`` runs on ``node``."""
    deadline = time.monotonic() + bound_s
    while not [p for p in cluster.fake.pods_on(node) if p["metadata"]["name"].startswith(prefix)
               and p["status"].get("phase") == "Running"]:
        assert time.monotonic() < deadline, "no %s pod ran on %s within %d s" % (prefix, node, bound_s)
        time.sleep(0.1)


def _dcgm_exporter(cluster):
    """A user's DCGM exporter DaemonSet whose affinity keeps it off a paused node; its pods hold the GPUs."""
    _user_daemonset(cluster, "dcgm-exporter", pausable=True)
    cluster.fake.holders.append({"app": "dcgm-exporter"})
    return [{"namespace": "monitoring", "selector": "app=dcgm-exporter"}]


def test_a_reset_refused_by_a_pod_the_run_does_not_pause_names_its_process_and_pod_uid(cluster):
    """An exporter DaemonSet that nobody declared for the pause keeps the A100's GPUs open: NVML's error names nobody,
    the run's message names the pod's process, its UID and container, as the collection reads them from /proc."""
    cluster.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}})
    cluster.api.put({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "gpu-exporter", "namespace": "monitoring", "labels": {"app": "gpu-exporter"}},
        "spec": {"selector": {"matchLabels": {"app": "gpu-exporter"}},
                 "template": {"metadata": {"labels": {"app": "gpu-exporter"}}, "spec": {
                     "containers": [{"name": "gpu-exporter", "image": "gpu-exporter"}],
                     "nodeSelector": {"nvidia.com/gpu.present": "true"}}}}})
    cluster.fake.holders.append({"app": "gpu-exporter"})
    deadline = time.time() + 60
    running = []
    while not running and time.time() < deadline:
        running = [p for p in cluster.fake.pods_on(A100) if p["metadata"]["name"].startswith("gpu-exporter")
                   and p["status"].get("phase") == "Running" and cluster.site.gpus(A100).get("holders")]
        time.sleep(0.2)
    assert running, "the exporter pod never ran on the A100"
    uid = running[0]["metadata"]["uid"]
    res = cluster.site.run(args=("--limit", A100))
    assert res.rc != 0
    msgs = [m for host, task, m in res.failures() if host == A100]
    named = [m for m in msgs if "In use by another client" in m]
    assert named, msgs
    assert "gpu-exporter (pod UID %s, container %s) holds /dev/nvidia0" % (uid, uid.replace("-", "")[:12]) \
        in named[0], named[0]
    assert not [g for g in cluster.site.gpus(A100)["gpus"] if g["mig_current"]], "no GPU was reset"


def test_mps_replicas_change_serves_eight_per_gpu_with_a_dcgm_exporter_paused_too(converged):
    cluster = converged
    exporter = _dcgm_exporter(cluster)
    _wait_running(cluster, H200, "dcgm-exporter")
    res = cluster.site.run(args=("--limit", H200), gpu_node_replicas=8, gpu_node_quiesce_daemonsets=exporter)
    assert res.rc == 0, res
    assert cluster.allocatable(H200) == {"nvidia.com/gpu": "64"}
    assert _released(cluster.node(H200))
    paused = res.task("Pause the node's GPU DaemonSet pods", H200)
    assert paused and paused[0]["changed"]
    assert {"nvidia-device-plugin/nvdp-nvidia-device-plugin", "monitoring/dcgm-exporter"} <= set(paused[0]["holding"])
    left = [e for t, n, e in cluster.fake.events if n == H200 and e.startswith("ended dcgm-exporter")]
    back = [p for p in cluster.fake.pods_on(H200) if p["metadata"]["name"].startswith("dcgm-exporter")]
    assert left and back and back[0]["status"]["phase"] == "Running"
    mps = [p for p in cluster.fake.pods_on(H200) if p["metadata"]["name"].startswith(
        "nvdp-nvidia-device-plugin-mps-control-daemon")]
    assert mps and mps[0]["status"]["phase"] == "Running"


def test_without_the_pause_a_stale_node_fails_verification_and_stays_cordoned_then_a_rerun_serves_it(converged):
    cluster = converged
    stale = cluster.allocatable(A100)
    # A layout change on GPUs already in MIG mode needs no reset: without the pause the plugin keeps running and
    # keeps advertising the old devices.
    res = cluster.site.run(args=("--limit", A100), gpu_node_quiesce=False, gpu_node_verify_timeout=3,
                           gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc != 0
    failed = [f for f in res.failures() if f[0] == A100]
    assert failed and A100 in failed[-1][2] and "nvidia.com/mig-1g.5gb" in failed[-1][2], failed
    assert cluster.allocatable(A100) == stale
    node = cluster.node(A100)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][CORDONED_BY] == "gpuops.nvidia.gpu_node"
    # The next run (the pause on, as by default) takes the sequence again: the pods restart and the node serves the
    # layout it has, then it is released.
    res = cluster.site.run(args=("--limit", A100), gpu_node_mig_config_name="all-1g.5gb")
    assert res.rc == 0, res
    assert cluster.allocatable(A100) == _expected(cluster, A100, {}, "mixed")
    assert cluster.allocatable(A100)["nvidia.com/mig-1g.5gb"] == "56"
    assert _released(cluster.node(A100))


def test_a_run_killed_while_paused_is_resumed_and_an_administrators_cordon_is_kept(converged):
    cluster = converged
    # What a kill right after the pause leaves: our cordon and our pause, the GPU pods gone.
    node = cluster.node(A100)
    node["spec"]["unschedulable"] = True
    node["metadata"].setdefault("annotations", {}).update({
        CORDONED_BY: "gpuops.nvidia.gpu_node", "gpuops.nvidia/gpu-pods-paused-by": "gpuops.nvidia.gpu_node",
        "gpuops.nvidia/gpu-pods-paused-daemonsets": '["nvidia-device-plugin/nvdp-nvidia-device-plugin"]'})
    node["metadata"]["labels"][PAUSED] = "true"
    cluster.api.put(node)
    # An administrator cordoned the H200 by hand.
    h200 = cluster.node(H200)
    h200["spec"]["unschedulable"] = True
    cluster.api.put(h200)
    res = cluster.site.run()
    assert res.rc == 0, res
    assert _released(cluster.node(A100))
    assert cluster.allocatable(A100) == _expected(cluster, A100, {}, "mixed")
    assert cluster.node(H200)["spec"]["unschedulable"] is True


def test_check_mode_prints_the_sequence_and_touches_nothing(cluster):
    res = cluster.site.run(check=True)
    assert res.rc == 0, res
    said = " ".join(str(r.get("msg")) for r in res.task("The sequence a real run takes", A100))
    assert "cordon" in said and "pause the GPU pods of" in said and "change MIG" in said and "uncordon" in said
    assert cluster.node_writes(A100) == [] and cluster.node_writes(H200) == []
    assert not [c for c in cluster.site.gpus(A100)["call_log"] if c.get("call")]


def _kill_when(site, tmp_path, step, args):
    """Run site.yml in its own process group and SIGKILL it at the start of the first task whose name contains
    ``step``: ansible-playbook stops itself there (tests/support/callback_plugins/task_progress.py), before any
    worker of that task runs, so the kill lands there however loaded the machine is. Returns the tasks started."""
    progress = tmp_path / "progress.txt"
    site.env.update(GPUOPS_TEST_PROGRESS=str(progress), ANSIBLE_CALLBACKS_ENABLED="task_progress",
                    GPUOPS_TEST_STOP_AT_NAME=step)
    try:
        cmd, env = site.command(args=args)
        with open(str(tmp_path / "killed-run.out"), "w") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                if wait_child_stopped(proc):
                    os.killpg(proc.pid, signal.SIGKILL)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    finally:
        for name in ("GPUOPS_TEST_PROGRESS", "ANSIBLE_CALLBACKS_ENABLED", "GPUOPS_TEST_STOP_AT_NAME"):
            del site.env[name]
    return progress.read_text().splitlines() if progress.exists() else []


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_at_each_step_leaves_the_node_marked_and_a_rerun_serves_it_without_reboot(cluster, tmp_path, step):
    skip_unless_sampled(step, SAMPLED_STEPS)
    started = _kill_when(cluster.site, tmp_path, step, ("--limit", A100))
    assert started and step in started[-1], "the run did not stop at %r: %s" % (step, started[-3:])
    # What the kill left: the node cordoned by us (so a run releases it); a pause, if any, marked as ours too.
    node = cluster.node(A100)
    meta = node["metadata"]
    assert node["spec"].get("unschedulable") is True
    assert meta["annotations"][CORDONED_BY] == "gpuops.nvidia.gpu_node"
    if PAUSED in (meta.get("labels") or {}):
        assert meta["annotations"][PAUSED_BY] == "gpuops.nvidia.gpu_node"
    # The next run resumes and ends with the node serving its layout, released, with no reboot taken.
    res = cluster.site.run(args=("--limit", A100))
    assert res.rc == 0, res
    assert cluster.allocatable(A100) == _expected(cluster, A100, {}, "mixed")
    assert "nvidia.com/mig-1g.5gb" in cluster.allocatable(A100)
    assert _released(cluster.node(A100)), cluster.node(A100)["metadata"]
    a100 = cluster.site.gpus(A100)
    assert all(g["mig_current"] is True for g in a100["gpus"])
    assert a100["boot_id"] == 1 and "reboot" not in [c.get("event") for c in a100["call_log"]]


def _unpausable_daemonset(cluster):
    """A user's DaemonSet whose affinity lacks the pause expression (its pods would stay on a paused node)."""
    _user_daemonset(cluster, "gpu-exporter", pausable=False)
    return [{"namespace": "monitoring", "name": "gpu-exporter"}]


def test_a_daemonset_that_cannot_be_paused_is_refused_before_the_node_is_cordoned(cluster):
    unpausable = _unpausable_daemonset(cluster)
    for check in (True, False):
        # The A100 has disruptive work (a MIG change): refused, and the batch stops there (the H200 is not reached).
        res = cluster.site.run(check=check, gpu_node_quiesce_daemonsets=unpausable)
        assert res.rc != 0, res
        failed = [f for f in res.failures() if f[0] == A100]
        assert failed, res
        msg = failed[-1][2]
        assert "DaemonSet monitoring/gpu-exporter does not keep its pods off a paused node" in msg, msg
        assert '"key": "%s"' % PAUSED in msg and '"operator": "NotIn"' in msg and "; nothing changed" in msg, msg
        # The refusal came before the cordon: nothing was written to a node, no pod left one or was evicted, and the
        # GPUs were not touched.
        assert res.task("Cordon the node", A100) == [], res.task("Cordon the node", A100)
        for node in (A100, H200):
            assert cluster.node_writes(node) == []
            live = cluster.node(node)
            assert not (live.get("spec") or {}).get("unschedulable"), live
            assert CORDONED_BY not in (live["metadata"].get("annotations") or {}), live["metadata"]
            assert PAUSED not in (live["metadata"].get("labels") or {}), live["metadata"]
            assert [e for t, n, e in cluster.fake.events if n == node and e.startswith("ended")] == []
        assert cluster.site.gpus(A100)["call_log"] == []
        assert [r for r in cluster.api.requests if r["path"].endswith("/eviction")] == []


def test_invalid_quiesce_settings_are_refused_before_the_node_is_cordoned(cluster):
    # What the pause task checks itself (no role-level check sees these): its timeout's range, and each entry's shape.
    res = cluster.site.run(args=("--limit", A100), gpu_node_quiesce_timeout=-1, gpu_node_quiesce_daemonsets=[
        {"namespace": "monitoring", "name": "dcgm-exporter", "selector": "app=dcgm-exporter"}])
    assert res.rc != 0, res
    failed = [f for f in res.failures() if f[0] == A100]
    assert failed, res
    msg = failed[-1][2]
    assert "timeout must be a whole number of seconds from 0 to 86400" in msg and "got -1" in msg, msg
    assert "daemonsets entry in monitoring: give a name or a selector, not both" in msg, msg
    assert res.task("Cordon the node", A100) == [], res.task("Cordon the node", A100)
    assert cluster.node_writes(A100) == [] and not cluster.node(A100)["spec"].get("unschedulable")
    assert cluster.site.gpus(A100)["call_log"] == []
