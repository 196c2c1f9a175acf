"""site.yml with the driver step on lab nodes that declare a driver (driver_version): the driver's packages installed
with Debian's real apt and dpkg into the node's scratch root (APT_CONFIG, DPKG_ROOT) from a local signed repository
of fake packages (tests/support/driver_rig.py, one per session), the modules loaded by the kmod stand-ins
(tests/support/kmod_standin.py), NVML following the simulated host (_simulator_host). Small one-GPU nodes of their
own (an inventory added to the lab's), only those converged (--limit).

What a user would notice: check mode changes nothing; a fresh node gets the driver installed with open modules and
loaded, no reboot, NVML up, nvidia-persistenced the one owner of persistence mode (running with --persistence-mode, no
NVML persistence call), and a re-run changes nothing; a node with nouveau reboots exactly once (guarded) and then
serves; a version-mismatch node is repaired by a reload; on an HGX H200 the Fabric Manager is installed at the driver's
version, enabled and started, and every GPU's fabric is registered before the node is released, while a node whose
fabric never completes fails naming its GPU and is not released; what the
driver role refuses (Blackwell with the proprietary flavour, a Fabric Manager pinned at another version, DKMS under
Secure Boot) stops the node's run with a message saying what is wrong and what to do, and changes nothing on it. The
live upgrade under the chart, a holder and a refusal on a live node: test_site_driver_live.py."""
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_services as ds
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_host
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.integration.site_helpers import HELM, Site
from tests.support import apt_rig, driver_files, driver_rig
from tests.support.ansible_run import ROOT
from tests.support.fake_cluster import node_writes
from tests.support.fake_daemonsets import FakeDaemonSets
from tests.support.fake_kube_api import FakeKubeApi

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

OLD, NEW = driver_rig.OLD, driver_rig.NEW


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    yield from driver_rig.module_rig(tmp_path_factory)


def driver_site(tmp_path, rig, nodes, machine="h200-x1", host_vars=None):
    """A Site over the lab plus ``nodes`` ({name: host options, or (host options, more host vars)}), each a
    ``machine`` node (unless its vars say another) declaring driver NEW, its scratch root an apt/dpkg root
    (``host_vars``: {name: more host variables})."""
    state = tmp_path / "lab-state"
    hosts = {}
    for name, options in nodes.items():
        options, more = options if isinstance(options, tuple) else (options, {})
        hosts[name] = dict(driver_rig.node_vars(str(state / name), rig.url, rig.key, NEW, options),
                           gpuops_simulated_machine=machine, gpuops_repo_dir=ROOT,
                           gpu_node_containerd_initial_config=os.path.join(
                               ROOT, "inventories", "lab-files", "containerd-config.toml"))
        hosts[name].update(more)
        hosts[name].update((host_vars or {}).get(name, {}))
    path = tmp_path / "driver-nodes.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {
        "mps_nodes": {"hosts": hosts}}}}}}))
    site = Site(tmp_path, limit=tuple(nodes), gpuops_serial="100%")
    return site, ("-i", str(path))


def loaded(site, node):
    return (driver_files.read(str(site.state / node), "sys/module/nvidia/version") or "").strip() or None


def test_fresh_node_check_then_install_load_and_rerun(tmp_path, rig):
    site, args = driver_site(tmp_path, rig, {"drv-fresh": "driver=none"})
    root = str(site.state / "drv-fresh")

    res = site.run(check=True, args=args)
    assert res.rc == 0, res
    assert driver_rig.installed(apt_rig.Root(root)) == {}
    assert loaded(site, "drv-fresh") is None
    said = " ".join(str(r.get("msg")) for r in res.task("Report the package changes", "drv-fresh"))
    assert "nvidia-headless-580-open: not installed -> %s-0ubuntu1 (install)" % NEW in said, said

    boot = site.gpus("drv-fresh")["boot_id"]
    res = site.run(args=args)
    assert res.rc == 0, res
    assert loaded(site, "drv-fresh") == NEW
    assert "Open Kernel Module" in driver_files.read(root, "proc/driver/nvidia/version")
    assert site.gpus("drv-fresh")["boot_id"] == boot                      # no reboot
    versions = dict((n, v) for n, (v, s) in driver_rig.installed(apt_rig.Root(root)).items())
    assert versions["nvidia-headless-580-open"] == "%s-0ubuntu1" % NEW
    # the second pass planned with NVML up: the GPU steps ran with the GPUs read
    assert res.task("Read the GPUs and plan every step", "drv-fresh")[-1]["ansible_facts"]["nvidia_gpus"]["gpus"]
    # one owner of persistence mode: nvidia-persistenced runs (with --persistence-mode, started after the load), and
    # no NVML persistence call was made (compute_mode says why)
    units = json.loads(driver_files.read(root, ".standin-systemd.json"))["units"]
    assert units["nvidia-persistenced.service"]["active"] and units["nvidia-persistenced.service"]["enabled"]
    assert _simulator_host.persistenced_mode(root) is True
    assert "--persistence-mode" in driver_files.read(root, ds.PERSISTENCED_DROPIN)
    state = site.gpus("drv-fresh")
    assert not [c for c in state["call_log"] if c.get("call") == "set_persistence_mode"], state["call_log"]
    read = SimulatedBackend(str(site.state / "drv-fresh.json"), root=root).read_all()
    assert [g["persistence_mode"] for g in read["gpus"]] == [True]
    modes = [t for t in res.task("Set compute mode", "drv-fresh") if not t.get("skipped")]
    assert modes and all(t["persistence"]["owner"] == "nvidia-persistenced" for t in modes), modes
    boot_unit = driver_files.read(root, "etc/systemd/system/gpuops-compute-mode.service")
    assert " -c DEFAULT" in boot_unit and " -pm " not in boot_unit, boot_unit     # no second writer at boot either

    again = site.run(args=args)
    assert again.rc == 0, again
    assert again.changed("drv-fresh") == 0, again
    assert not [t for t in again.task("Install the driver", "drv-fresh") if not t.get("skipped")]


def test_nouveau_reboots_once_and_a_mismatch_is_reloaded(tmp_path, rig):
    site, args = driver_site(tmp_path, rig, {"drv-nouveau": "driver=none,nouveau", "drv-mismatch": "driver=570.195.03"})
    mismatch = apt_rig.Root(site.state / "drv-mismatch")
    # the mismatch node: 580's packages installed under its loaded 570 module (the library is 580: NVML refuses)
    res = site.run(check=True, args=args)
    assert res.rc == 0, res
    assert [t["msg"] for t in res.task("Show the reboot a real run would do", "drv-nouveau")] == [
        "Would reboot once: node drv-nouveau: nouveau is loaded: it holds the GPUs until a reboot with it blacklisted "
        "(driver %s)" % NEW]
    mismatch.dpkg_install(rig.debs[(n, v)] for n, v in (
        ("libnvidia-compute-580", NEW + "-0ubuntu1"), ("nvidia-compute-utils-580", NEW + "-0ubuntu1"),
        ("nvidia-dkms-580-open", NEW + "-0ubuntu1"), ("nvidia-utils-580", NEW + "-0ubuntu1"),
        ("nvidia-headless-580-open", NEW + "-0ubuntu1")))
    boots = dict((n, site.gpus(n)["boot_id"]) for n in ("drv-nouveau", "drv-mismatch"))

    res = site.run(args=args)
    assert res.rc == 0, res
    # nouveau: exactly one reboot, after which the installed driver is loaded and nouveau is not
    assert site.gpus("drv-nouveau")["boot_id"] == boots["drv-nouveau"] + 1
    assert loaded(site, "drv-nouveau") == NEW
    assert "nouveau" not in driver_files.loaded(str(site.state / "drv-nouveau"))
    assert not os.path.exists(str(site.state / "drv-nouveau" / "var/lib/gpuops/driver-reboot-attempted"))
    # the mismatch: reloaded at 580, no reboot
    assert loaded(site, "drv-mismatch") == NEW and site.gpus("drv-mismatch")["boot_id"] == boots["drv-mismatch"]
    assert [t["version"] for t in res.task("Load the driver (none loaded) or reload it", "drv-mismatch")] == [NEW]

    again = site.run(args=args)
    assert again.rc == 0, again
    assert again.changed("drv-nouveau") == 0 and again.changed("drv-mismatch") == 0, again
    assert site.gpus("drv-nouveau")["boot_id"] == boots["drv-nouveau"] + 1


def test_hgx_fabric_manager_started_and_the_fabric_waited_for(tmp_path, rig):
    nodes = {"drv-hgx": "driver=none", "drv-hgx-stuck": "driver=none"}
    site, args = driver_site(tmp_path, rig, nodes, machine="hgx-h200",
                             host_vars={"drv-hgx-stuck": {"gpu_node_driver_fabric_timeout": 1}})
    # the stuck node's GPU 4 never completes its fabric registration (a fault placed before the run)
    stuck = SimulatedBackend(str(site.state / "drv-hgx-stuck.json"), shape="hgx-h200",
                             root=str(site.state / "drv-hgx-stuck"), host_options="driver=none")
    stuck.inject_health(4, "fabric_state", "in_progress")
    gpu4 = stuck.raw_state()["gpus"][4]["pci_bus_id"]

    res = site.run(check=True, args=args)
    assert res.rc == 0, res
    plan = res.task("Read the GPUs and plan every step", "drv-hgx")[0]["driver"]
    assert plan["fabric_manager"]["wanted"] is True and "NVSwitch" in plan["fabric_manager"]["reason"], plan
    services = res.task("Start nvidia-persistenced and the Fabric Manager", "drv-hgx")[0]
    assert "nvidia-fabricmanager.service" in services["deferred"], services     # started once the driver is loaded
    assert _simulator_host.fabric_manager_version(str(site.state / "drv-hgx")) is None
    assert driver_rig.installed(apt_rig.Root(str(site.state / "drv-hgx"))) == {}

    res = site.run(args=args)
    assert res.rc != 0, res
    # the HGX: driver and Fabric Manager at one version, the FM enabled and running, every GPU's fabric registered
    versions = dict((n, v) for n, (v, s) in driver_rig.installed(apt_rig.Root(str(site.state / "drv-hgx"))).items())
    assert versions["nvidia-fabricmanager"] == NEW + "-1" and versions["nvidia-headless-580-open"] == NEW + "-0ubuntu1"
    assert _simulator_host.fabric_manager_version(str(site.state / "drv-hgx")) == NEW
    services = res.task("Start nvidia-persistenced and the Fabric Manager", "drv-hgx")[0]
    assert services["units"]["nvidia-fabricmanager.service"]["active"] == "active", services
    assert services["units"]["nvidia-fabricmanager.service"]["enabled"] == "enabled", services
    assert services["fabric"]["pending"] == [], services
    health = SimulatedBackend(str(site.state / "drv-hgx.json"), root=str(site.state / "drv-hgx")).read_health()
    assert set((g["fabric"]["state"], g["fabric"]["status"]) for g in health["gpus"]) == {("completed", "SUCCESS")}
    assert not [f for f in res.failures() if f[0] == "drv-hgx"], res
    # the stuck node: the run fails at the wait naming GPU 4, and the node is not released (its later passes never ran)
    failed = [f for f in res.failures() if f[0] == "drv-hgx-stuck"]
    assert len(failed) == 1 and failed[0][1].endswith(
        "Start nvidia-persistenced and the Fabric Manager (NVSwitch systems); wait for every GPU's fabric"), failed
    assert "GPU 4 (%s): fabric state in_progress, status SUCCESS" % gpu4 in failed[0][2], failed
    assert "journalctl -u nvidia-fabricmanager" in failed[0][2]
    assert not res.task("Plan the steps after the driver again, with the new driver", "drv-hgx-stuck")


def _node_files(site, node):
    """The node's files as the collection left them, the systemctl stand-in's bookkeeping replaced by what it says
    of the units: those enabled or running (its state file also logs the read-only calls, is-enabled and is-active,
    that the node plan makes on every run)."""
    files = site.files(node)
    state = json.loads(files.pop(".standin-systemd.json", b"{}") or b"{}")
    files["units enabled or running"] = sorted(
        name for name, unit in state.get("units", {}).items() if unit.get("active") or unit.get("enabled"))
    return files


def _kernel_view(root):
    """What the kernel shows of the driver: /proc/modules and the loaded version."""
    return driver_files.read(root, "proc/modules"), driver_files.read(root, "sys/module/nvidia/version")


def test_refusals_blackwell_proprietary_fabric_manager_mismatch_secure_boot_dkms_change_nothing(tmp_path, rig):
    # three nodes with 570 loaded by their image, each declaring 580 as the driver role refuses it
    nodes = {"drv-bw": ("driver=%s" % OLD, {"gpuops_simulated_machine": "hgx-b200", "driver_flavour": "proprietary"}),
             "drv-fm": ("driver=%s" % OLD, {"driver_fabric_manager_version": "580.82.07"}),
             "drv-sb": ("driver=%s,secure-boot=on" % OLD, {})}
    site, args = driver_site(tmp_path, rig, nodes)
    machines = {"drv-bw": "hgx-b200", "drv-fm": "h200-x1", "drv-sb": "h200-x1"}
    for name, (host, _more) in nodes.items():
        # each machine made first (its host tree: the image's driver), so that "before" is the node as it was
        SimulatedBackend(str(site.state / ("%s.json" % name)), shape=machines[name], root=str(site.state / name),
                         host_options=host)
    before = dict((n, (_node_files(site, n), _kernel_view(str(site.state / n)), site.gpus(n))) for n in nodes)

    # each node reaches its own refusal: the Fabric Manager pin is refused by the node plan, a task before the
    # driver role's refusals, which would end the batch there (site.yml's max_fail_percentage, 0 by default)
    res = site.run(args=args + ("-e", "gpuops_max_fail_percentage=100"))
    assert res.rc != 0
    said = dict((n, " ".join(str(m) for host, task, m in res.failures() if host == n)) for n in nodes)
    # each message names what is wrong and what to do
    assert "proprietary" in said["drv-bw"] and "NVIDIA B200" in said["drv-bw"] and "open" in said["drv-bw"], said
    # the eight GPUs in one sentence, not eight sentences (issue 47)
    assert said["drv-bw"].count("Blackwell GPU") == 1 and "8 x NVIDIA B200 at 0000:07:00.0, " in said["drv-bw"], said
    assert "580.82.07" in said["drv-fm"] and NEW in said["drv-fm"] and "Pin both at one version" in said["drv-fm"], said
    assert "Secure Boot" in said["drv-sb"] and "DKMS" in said["drv-sb"] and "precompiled" in said["drv-sb"], said
    for node in nodes:
        assert "nothing changed" in said[node].lower(), said[node]
        # nothing changed: no package installed, the modules and every file as they were, the GPUs untouched
        root = str(site.state / node)
        assert driver_rig.installed(apt_rig.Root(root)) == {}, node
        assert _kernel_view(root) == before[node][1], node
        assert _node_files(site, node) == before[node][0], node
        after = site.gpus(node)
        assert after["mutating_calls"] == before[node][2]["mutating_calls"], node
        assert after["boot_id"] == before[node][2]["boot_id"], node
        # refused in the driver's plan, before the node would be quiesced or the packages installed
        assert not res.task("Install the driver's packages at the pin", node), node


@pytest.mark.skipif(not os.path.exists(HELM), reason="helm not installed: run make setup")
def test_a_refused_plan_still_marks_a_node_whose_fabric_is_lost(tmp_path, rig):
    """Issue 47, 1: an HGX H200 on a cluster under the chart, declaring the 570 its image runs, whose Fabric Manager
    package was replaced by 580's (its daemon down: every GPU's fabric not_started). The driver step refuses the plan
    (installing the pin would downgrade the Fabric Manager) - and the node, whose fabric is lost, is still marked out
    of service (cordoned as the collection's, tainted, the condition set), the run naming both the refusal and the
    findings. Nothing else on the node changes."""
    node = "drv-fabric-lost"
    api = FakeKubeApi(tokens=None).start()
    fake = None
    try:
        kubeconfig = str(tmp_path / "kubeconfig")
        with open(kubeconfig, "w") as handle:
            yaml.safe_dump(api.kubeconfig(), handle)
        api.add_node(node, internal_ip="10.0.0.41", labels={"nvidia.com/gpu.present": "true"})
        site, args = driver_site(tmp_path, rig, {node: "driver=%s" % OLD}, machine="hgx-h200",
                                 host_vars={node: {"driver_version": OLD}})
        site.extra.update(gpuops_kubeconfig=kubeconfig, cluster_device_plugin_helm=HELM,
                          cluster_device_plugin_chart_path=site.chart(), gpu_node_verify_timeout=60)
        root = str(site.state / node)
        sim = SimulatedBackend(str(site.state / ("%s.json" % node)), shape="hgx-h200", root=root,
                               host_options="driver=%s" % OLD)
        gpus = sim.read_all()["gpus"]
        for gpu in gpus:
            sim.inject_health(gpu["index"], "fabric_state", "not_started")
        # 580's Fabric Manager package put in by hand over the node's 570 (its dependency on 580's library forced)
        fm = [path for (name, version), path in rig.debs.items() if name == "nvidia-fabricmanager"]
        apt_rig.run(["dpkg", "--root=%s" % root, "--force-depends"]
                    + (["--force-not-root"] if os.geteuid() != 0 else []) + ["-i"] + fm)
        fake = FakeDaemonSets(api, {node: (str(site.state / ("%s.json" % node)), "hgx-h200")})
        fake.start()
        files, kernel, calls = _node_files(site, node), _kernel_view(root), site.gpus(node)["mutating_calls"]

        res = site.run(args=args)
        assert res.rc != 0
        said = " ".join(str(m) for host, task, m in res.failures() if host == node)
        assert "installing the pin would downgrade it" in said and "driver_allow_downgrade" in said, said
        assert "GPU health also keeps it out of service" in said, said
        assert "NVLink fabric registration not completed" in said and "state not_started" in said, said
        assert "cordoned, tainted gpuops.nvidia/gpu-unhealthy:NoSchedule" in said, said
        # the node is out of service, marked as the health gate marks it
        marked = api.get("", "nodes", node)
        assert marked["spec"].get("unschedulable") is True, marked["spec"]
        assert marked["metadata"]["annotations"].get("gpuops.nvidia/cordoned-by") == "gpuops.nvidia.gpu_node"
        assert [t["key"] for t in marked["spec"].get("taints", [])] == ["gpuops.nvidia/gpu-unhealthy"], marked["spec"]
        condition = [c for c in marked["status"]["conditions"] if c["type"] == "GpuopsNvidiaGpuHealthy"]
        assert len(condition) == 1 and condition[0]["status"] == "False", marked["status"]["conditions"]
        assert all(g["pci_bus_id"] in condition[0]["message"] for g in gpus), condition
        # nothing else changed: the packages, the modules, the node's files and its GPUs as they were
        assert node_writes(api.requests, node), "the node was not marked"
        assert dict((n, v) for n, (v, s) in driver_rig.installed(apt_rig.Root(root)).items()) == {
            "nvidia-fabricmanager": "%s-1" % NEW}
        assert _kernel_view(root) == kernel and _node_files(site, node) == files
        assert site.gpus(node)["mutating_calls"] == calls
        assert not res.task("Install the driver's packages at the pin", node)
    finally:
        if fake is not None:
            fake.stop()
        api.stop()
