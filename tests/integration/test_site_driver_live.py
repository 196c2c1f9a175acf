"""site.yml upgrades the NVIDIA driver of a live node under the standalone chart: 570 -> 580 (tests/support/driver_rig.py
OLD -> NEW) on a one-GPU H200 node with a declared MIG layout (group mig_nodes: all-balanced), the compute mode
step (persistence mode on) and CDI on, its device plugin pods run by the fake cluster
(tests/support/fake_daemonsets.py over the fake API server, the real helm and the fixture chart, as
test_site_chart_flow.py runs them).

The driver's packages are installed with Debian's real apt and dpkg into the node's scratch root from the rig's local
signed repository (as test_site_driver.py does); the modules are unloaded and loaded by the kmod stand-ins; the
simulated GPUs lose their MIG instances, compute and persistence mode, and (Hopper) MIG mode when the driver is loaded
again (plugins/module_utils/sim/_simulator.py, _follow_driver_load), so "the layout is back" is something the run must do.

The node at OLD, converged under the chart, is the lab variant "driver-live-old" (tests/support/converged_lab.py):
converged once per session (per xdist worker at most), each test takes a fresh copy of it. The rig lives inside the
variant's directory, so the copy's apt sources name a repository that exists wherever the copy is taken.
"""
import json
import os
import pathlib
import signal
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.integration.site_helpers import HELM, Site
from tests.integration.test_site_chart_flow import PAUSED, _kill_when, _released
from tests.integration.test_site_driver import _node_files
from tests.support import apt_rig, driver_files, driver_rig
from tests.support.ansible_run import ROOT
from tests.support.fake_cluster import FakeCluster, node_writes
from tests.support.fake_daemonsets import FakeDaemonSets, advertised
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.reliability_sample import skip_unless_sampled
from tests.support.stop_points import STANDIN_LOG, STANDIN_STOP_AT, standin_log, standin_stopped, wait_stopped

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup"),
              pytest.mark.skipif(bool(apt_rig.missing_tools()),
                                 reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

OLD, NEW = driver_rig.OLD, driver_rig.NEW
NODE, SHAPE = "drv-live", "h200-x1"
CDI_SPEC = "var/run/cdi/nvidia.yaml"


class LiveNode(FakeCluster):
    """The node ``NODE`` on the fake cluster, every file under ``directory``; with ``restore`` (the variant's record)
    the API server's objects and the fake controller's state of that converge, whose files the copy holds."""

    default_node = NODE

    def __init__(self, directory, restore=None):
        directory = pathlib.Path(str(directory))
        if restore is None:
            rig = driver_rig.DriverRig(directory / "rig")
            rig.close()
            self.url, self.key = rig.url, rig.key
        else:
            self.url, self.key = restore["url"], restore["key"]
        self.api = FakeKubeApi(tokens=None).start()
        kubeconfig = str(directory / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(self.api.kubeconfig(), handle)
        if restore is None:
            self.api.add_node(NODE, internal_ip="10.0.0.31", labels={"nvidia.com/gpu.present": "true"})
        else:
            self.api.restore(restore["api"])
        self.site = Site(directory, limit=(NODE,), gpuops_serial="100%", gpuops_kubeconfig=kubeconfig,
                         cluster_device_plugin_helm=HELM, gpu_node_verify_timeout=60, gpu_node_quiesce_timeout=60,
                         gpu_node_operator_poll_interval=0.5)
        self.site.extra["cluster_device_plugin_chart_path"] = self.site.chart()
        self.root = str(self.site.state / NODE)
        host = dict(driver_rig.node_vars(self.root, self.url, self.key, OLD, "driver=%s" % OLD),
                    gpuops_simulated_machine=SHAPE, gpuops_repo_dir=ROOT,
                    gpu_node_containerd_initial_config=os.path.join(
                        ROOT, "inventories", "lab-files", "containerd-config.toml"),
                    gpu_node_cdi=True, gpu_node_runtime_mode="cdi")
        self.inventory = str(directory / "driver-live.yml")
        with open(self.inventory, "w") as handle:
            yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {"mig_nodes": {"hosts": {NODE: host}}}}}}},
                           handle)
        state = str(self.site.state / ("%s.json" % NODE))
        if restore is None:
            # the machine made with its host tree (the driver brought by the image at OLD) before the fake
            # controller's own backend, which knows no root, would make it without one
            SimulatedBackend(state, shape=SHAPE, root=self.root, host_options=host["gpuops_simulated_host"])
        self.fake = FakeDaemonSets(self.api, {NODE: (state, SHAPE)})
        if restore is not None:
            self.fake.restore(restore["fake"])
        self.fake.start()

    def run(self, **extra):
        return self.site.run(args=("-i", self.inventory), **extra)

    def gpus(self):
        return self.site.gpus(NODE)

    def loaded(self):
        return (driver_files.read(self.root, "sys/module/nvidia/version") or "").strip() or None

    def spec(self):
        return driver_files.read(self.root, CDI_SPEC) or ""

    def layout(self):
        """What a user sees of the GPU: MIG mode, its instances (profile, placement), compute and persistence mode, read
        through the simulator (Site.gpus: a reload's losses whether or not the state file was written since)."""
        gpu = self.gpus()["gpus"][0]
        # persistence mode as NVML reads it: while nvidia-persistenced runs (its one owner here) the GPU reads Enabled
        read = SimulatedBackend(str(self.site.state / ("%s.json" % NODE)), shape=SHAPE, root=self.root).read_all()
        return {"mig": gpu["mig_current"], "instances": sorted((gi["profile_id"], gi["start"], len(
            gi["compute_instances"])) for gi in gpu["gpu_instances"]), "compute_mode": gpu["compute_mode"],
            "persistence_mode": read["gpus"][0]["persistence_mode"]}


def _converge_old(directory):
    """The lab variant "driver-live-old": the node converged at OLD under the chart (installed, MIG laid out, CDI spec
    written, device plugin serving), and what a copy restores besides its files."""
    live = LiveNode(directory)
    try:
        res = live.run()
        assert res.rc == 0, res
        live.wait_settled()
    finally:
        live.stop()
    return {"api": live.api.snapshot(), "fake": live.fake.snapshot(), "url": live.url, "key": live.key,
            "result": res}


@pytest.fixture
def live(converged_labs, tmp_path, request):
    """The node at OLD, converged and serving: a fresh copy of the session's converge (``live.first``: its result)."""
    with converged_labs.copy("driver-live-old", _converge_old, keep_in=tmp_path, test=request.node.nodeid) \
            as (slot, record):
        node = LiveNode(slot, restore=record)
        node.first = record["result"]
        try:
            yield node
        finally:
            node.stop()


def test_570_to_580_on_a_live_mig_node_reloads_without_reboot_and_brings_layout_compute_mode_and_cdi_back(live):
    assert live.first.rc == 0
    assert live.loaded() == OLD and driver_rig.installed(apt_rig.Root(live.root))["nvidia-headless-570-open"][0] \
        == "%s-0ubuntu1" % OLD
    before = live.layout()
    assert before["mig"] is True and before["instances"] and before["persistence_mode"] is True, before
    spec_before = live.spec()
    assert ".so.%s" % OLD in spec_before and ".so.%s" % NEW not in spec_before
    serving = live.allocatable()
    assert serving and "nvidia.com/gpu" not in serving, serving           # MIG devices (mig-mixed)
    boot = live.gpus()["boot_id"]
    seen, events = len(live.api.requests), len(live.fake.events)

    res = live.run(driver_version=NEW)
    assert res.rc == 0, res
    # the driver: 580's packages, the modules reloaded at 580, no reboot
    assert live.loaded() == NEW and "Open Kernel Module" in driver_files.read(live.root, "proc/driver/nvidia/version")
    assert driver_rig.installed(apt_rig.Root(live.root))["nvidia-headless-580-open"][0] == "%s-0ubuntu1" % NEW
    gpus = live.gpus()
    assert gpus["boot_id"] == boot and "reboot" not in [c.get("event") for c in gpus["call_log"]]
    assert [t["version"] for t in res.task("Load the driver (none loaded) or reload it", NODE)] == [NEW]
    # the reload lost the layout (the simulated driver load), and the run made it again: MIG mode, the same
    # instances, then the CDI spec from the new driver's files; persistence mode came back with nvidia-persistenced
    # (driver_modules started it again after the load), its one owner where a driver is declared: no NVML call sets it
    loads = [c for c in gpus["call_log"] if c.get("event") == "driver_loaded"]
    assert len(loads) == 1, loads
    again = [c["call"] for c in gpus["call_log"] if c.get("n", 0) >= loads[0]["n"] and c.get("call")]
    assert "create_gpu_instance" in again and "set_persistence_mode" not in again, again
    assert live.layout() == before
    spec_after = live.spec()
    assert ".so.%s" % NEW in spec_after and ".so.%s" % OLD not in spec_after
    # the node was cordoned and its device plugin pods paused around the change, in this order: cordon and pause,
    # the pods gone, the modules loaded at 580, the pods back (advertising the MIG devices again), uncordon
    writes = node_writes(live.api.requests[seen:], NODE)
    assert [(w["body"].get("spec") or {}).get("unschedulable") for w in writes
            if "unschedulable" in (w["body"].get("spec") or {})] == [True, False]
    assert [((w["body"].get("metadata") or {}).get("labels") or {}).get(PAUSED, "-") for w in writes
            if PAUSED in ((w["body"].get("metadata") or {}).get("labels") or {})] == ["true", None]
    loaded_at = os.path.getmtime(os.path.join(live.root, "sys/module/nvidia/version"))
    mine = [(t, what) for t, n, what in live.fake.events[events:] if n == NODE]
    ended = [t for t, what in mine if what.startswith("ended")]
    registered = [t for t, what in mine if what.startswith("registered")]
    assert ended and max(ended) < loaded_at, mine
    assert registered and min(registered) > loaded_at, mine
    assert live.allocatable() == serving == dict(
        (k, str(v)) for k, v in advertised(live.fake._backend(NODE).read_all()["gpus"], {}, "mixed").items())
    assert _released(live.node()), live.node()["metadata"]

    # a re-run changes nothing: no task changed, no node write, no pod restarted
    seen, events = len(live.api.requests), len(live.fake.events)
    rerun = live.run(driver_version=NEW)
    assert rerun.rc == 0, rerun
    assert rerun.changed(NODE) == 0, rerun
    assert node_writes(live.api.requests[seen:], NODE) == [] and live.fake.events[events:] == []


CORDONED_BY = "gpuops.nvidia/cordoned-by"
HOLDER_PID, HOLDER = 4242, ["/usr/bin/python3", "train.py", "--epochs", "90"]
# the one task that fails a run whose driver reload processes would refuse (roles/gpu_node/tasks/driver_preflight.yml)
PREFLIGHT_STOP = ("gpuops.nvidia.gpu_node : The NVIDIA driver - stop where processes hold it (its packages, modules and "
                  "daemons unchanged)")


def _failure(res):
    return " ".join(str(m) for host, task, m in res.failures() if host == NODE)


def test_a_process_holding_the_gpus_refuses_the_upgrade_before_anything_changes_then_a_reboot_allowed_reboots_once(
        live):
    """A holder with no reboot allowed (issue 47): named, and refused before anything changes - the packages, the
    loaded modules, the daemons and the node as they were (not cordoned, its GPU pods serving); the message says to stop
    the process and run again, or to allow the reboot. The next run, the holder still there, allows the reboot:
    exactly one reboot, then the node serves its layout and is released. (A re-run after a kill, which resumes a
    cordoned, paused node and reloads without reboot, is the kill test below.)"""
    # a user's process (not a pod the run pauses) keeps /dev/nvidia0 and /dev/nvidiactl open
    driver_files.add_holder(live.root, HOLDER_PID, HOLDER)
    before, boot, serving = live.layout(), live.gpus()["boot_id"], live.allocatable()
    packages, files = driver_rig.installed(apt_rig.Root(live.root)), _node_files(live.site, NODE)
    seen, events = len(live.api.requests), len(live.fake.events)

    res = live.run(driver_version=NEW, gpu_node_driver_allow_reboot=False)
    assert res.rc != 0
    said = _failure(res)
    # (the program's name, as _device_holders names a process: argv[0]'s base name)
    assert "PID %d python3 (unit session-1.scope) holds " % HOLDER_PID in said and "/dev/nvidia0" in said, said
    assert "Stop the processes named" in said and "run again" in said, said
    assert "gpu_node_driver_allow_reboot: true" in said and "the node was not cordoned" in said, said
    failed = [task for host, task, m in res.failures() if host == NODE]
    assert failed == [PREFLIGHT_STOP], failed
    # nothing changed: the packages (not even downloaded into the node's files), the old driver loaded, no reboot, the
    # node not written, its device plugin pods not touched and still serving
    assert driver_rig.installed(apt_rig.Root(live.root)) == packages and _node_files(live.site, NODE) == files
    assert live.gpus()["boot_id"] == boot and live.loaded() == OLD
    assert node_writes(live.api.requests[seen:], NODE) == [] and live.fake.events[events:] == []
    assert _released(live.node()) and live.allocatable() == serving and live.layout() == before

    # the process is still there; the next run allows the reboot: exactly one, then the node serves and is released
    res = live.run(driver_version=NEW, gpu_node_driver_allow_reboot=True)
    assert res.rc == 0, res
    assert live.gpus()["boot_id"] == boot + 1                               # exactly one reboot
    assert [c for c in live.gpus()["call_log"] if c.get("event") == "reboot"][-1]["boot_id"] == boot + 1
    assert live.loaded() == NEW and not os.path.exists(os.path.join(live.root, "proc", str(HOLDER_PID)))
    assert not os.path.exists(os.path.join(live.root, "var/lib/gpuops/driver-reboot-attempted"))
    assert live.layout() == before and live.allocatable() == serving
    assert _released(live.node()), live.node()["metadata"]
    assert ".so.%s" % NEW in live.spec()


POD_HOLDER_PID, POD_UID, CONTAINER = 4545, "5f0c3b1e-7a2d-4e9f-8c61-0d4b2a9e7f13", "c" * 64


def test_a_pod_process_still_holding_the_gpus_after_the_quiesce_refuses_before_the_packages_change(live):
    """Issue 47, 2: a process inside a pod that the quiesce does not end (a user's pod, not one of the paused GPU
    DaemonSets', that keeps /dev/nvidia0 open). Before the quiesce it is left to the quiesce; after it, with the
    packages fetched and none installed, it refuses the upgrade: the packages and the loaded driver as they were, the
    message naming the process and the node's state (cordoned, its GPU pods paused, until a run completes). Once the
    process is gone, the next run reloads without a reboot and releases the node."""
    cgroup = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope"
              % (POD_UID.replace("-", "_"), CONTAINER))
    driver_files.add_holder(live.root, POD_HOLDER_PID, ["/usr/bin/python3", "infer.py"], cgroup=cgroup)
    before, boot, serving = live.layout(), live.gpus()["boot_id"], live.allocatable()
    packages = driver_rig.installed(apt_rig.Root(live.root))

    res = live.run(driver_version=NEW, gpu_node_driver_allow_reboot=False)
    assert res.rc != 0
    said = _failure(res)
    assert "PID %d python3 (pod UID %s, container %s) holds" % (POD_HOLDER_PID, POD_UID, CONTAINER[:12]) in said, said
    assert "fetched its packages into the package cache (none installed)" in said, said
    assert "cordoned the node and paused its GPU pods: it stays so until a run completes" in said, said
    assert [task for host, task, m in res.failures() if host == NODE] == [PREFLIGHT_STOP], res.failures()
    assert res.task("Download the driver's packages without installing them (apt)", NODE)
    assert driver_rig.installed(apt_rig.Root(live.root)) == packages
    assert live.loaded() == OLD and live.gpus()["boot_id"] == boot
    node = live.node()
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["annotations"].get(CORDONED_BY) == "gpuops.nvidia.gpu_node"
    assert node["metadata"]["labels"].get(PAUSED) == "true"

    driver_files.remove_holder(live.root, POD_HOLDER_PID)
    res = live.run(driver_version=NEW, gpu_node_driver_allow_reboot=False)
    assert res.rc == 0, res
    assert live.loaded() == NEW and live.gpus()["boot_id"] == boot            # reloaded, no reboot
    assert live.layout() == before and live.allocatable() == serving
    assert _released(live.node()), live.node()["metadata"]


def test_a_refused_upgrade_on_a_live_node_leaves_it_serving_not_cordoned_nor_paused(live):
    # 580 declared with the Fabric Manager pinned at another version: the driver role refuses it in its plan, which
    # gpu_node runs before it quiesces the node
    files, boot = live.site.files(NODE), live.gpus()["boot_id"]
    seen, events, serving = len(live.api.requests), len(live.fake.events), live.allocatable()
    res = live.run(driver_version=NEW, driver_fabric_manager_version="580.82.07")
    assert res.rc != 0
    said = _failure(res)
    assert "Pin both at one version" in said and "nothing changed" in said, said
    assert node_writes(live.api.requests[seen:], NODE) == [] and live.fake.events[events:] == []
    assert _released(live.node()) and live.allocatable() == serving
    assert live.loaded() == OLD and live.gpus()["boot_id"] == boot and live.site.files(NODE) == files
    assert driver_rig.installed(apt_rig.Root(live.root))["nvidia-headless-570-open"][0] == "%s-0ubuntu1" % OLD


# Where a site run is killed during the upgrade (each then re-run): at the start of the task that loads the driver
# (580's packages installed under the loaded 570: NVML's version mismatch; the node cordoned, its pods paused), and
# inside the reload, right after the kmod stand-in removed nvidia (no module loaded, nvidia-persistenced's unit
# recorded, nothing loaded yet): stopped there by the stand-in (tests/support/stop_points.py, STANDIN_STOP_AT); and
# right after the stand-in loaded 580's nvidia, before MIG is re-applied (the GPU has lost its layout, and its state
# file says so already). Every internal step of the reload is killed at module level
# (tests/reliability/test_sigkill_driver_modules.py).
SITE_KILLS = {"before-load": ("task", "Load the driver (none loaded) or reload it"),
              "mid-reload": ("standin", "rmmod nvidia"), "after-load": ("standin", "modprobe nvidia")}
# make test kills inside the reload (no module loaded: the state a run must not leave); GPUOPS_RELIABILITY=full at both
# points.
SAMPLED_KILLS = ("mid-reload",)


def _kill_at_standin(site, tmp_path, command, args):
    """Run site.yml in its own process group; the first stand-in that runs ``command`` stops the module that ran it,
    and the test SIGKILLs the run there. Returns the stand-ins' log."""
    log = str(tmp_path / "standin.log")
    site.env.update({STANDIN_LOG: log, STANDIN_STOP_AT: command})
    try:
        cmd, env = site.command(args=args)
        with open(str(tmp_path / "killed-run.out"), "w") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                pid = wait_stopped(lambda: standin_stopped(log), lambda: proc.poll() is None)
                assert pid, "the run ended before a stand-in ran %r" % command
                os.killpg(proc.pid, signal.SIGKILL)
                try:
                    os.kill(pid, signal.SIGKILL)         # the module, should it have left the run's process group
                except OSError:
                    pass
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    finally:
        for name in (STANDIN_LOG, STANDIN_STOP_AT):
            del site.env[name]
    return standin_log(log)


@pytest.mark.parametrize("point", sorted(SITE_KILLS))
def test_a_kill_during_the_upgrade_then_a_rerun_ends_serving_released_with_the_layout_back(live, tmp_path, point):
    skip_unless_sampled(point, SAMPLED_KILLS)
    kind, where = SITE_KILLS[point]
    before, boot, serving = live.layout(), live.gpus()["boot_id"], live.allocatable()
    live.site.extra["driver_version"] = NEW
    if kind == "task":
        started = _kill_when(live.site, tmp_path, where, ("-i", live.inventory))
        assert started and where in started[-1], started[-3:]
        assert live.loaded() == OLD
    else:
        ran = _kill_at_standin(live.site, tmp_path, where, ("-i", live.inventory))
        assert ran and ran[-1] == where, ran
        assert live.loaded() == (NEW if point == "after-load" else None)
    if point == "after-load":
        # loaded again, nothing re-applied: the layout is gone, in what NVML answers and in the state file itself
        assert live.layout() == {"mig": False, "instances": [], "compute_mode": "Default", "persistence_mode": False}
        with open(str(live.site.state / ("%s.json" % NODE))) as handle:
            assert json.load(handle)["gpus"][0]["gpu_instances"] == []
    # what the kill left: 580's packages, the node cordoned with the collection's mark, its device plugin paused
    assert driver_rig.installed(apt_rig.Root(live.root))["nvidia-headless-580-open"][0] == "%s-0ubuntu1" % NEW
    node = live.node()
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["annotations"].get(CORDONED_BY) == "gpuops.nvidia.gpu_node"

    res = live.run()
    assert res.rc == 0, res
    assert live.loaded() == NEW and live.gpus()["boot_id"] == boot
    assert live.layout() == before and live.allocatable() == serving
    assert ".so.%s" % NEW in live.spec()
    assert _released(live.node()), live.node()["metadata"]
