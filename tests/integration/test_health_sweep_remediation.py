"""The fleet health sweep's remediation with consent (health.yml, issue 50 part 2) on a fake cluster of three simulated
one-GPU nodes: the sweep resets an idle GPU's pending row remap and releases the node after two healthy sweeps, does
not reset a GPU a process holds, and stops at the cap with the NeedsOperator condition; the remediation's reboot checks
the next boot's kernel first (driver_next_kernel refuse, then ensure). Nothing is timed."""
import json
import os
import shutil

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.integration.test_health_sweep import Fleet
from tests.integration.test_site_driver_kernel import newer_kernel_installed
from tests.support import apt_rig, driver_files, driver_rig
from tests.support.rigs import snapshot

pytestmark = [pytest.mark.slow]

NODES = ["remedy-0", "remedy-1", "remedy-2"]
RECORD = "gpuops.nvidia/health-remediation"
REMEDIATION = "GpuopsNvidiaGpuRemediation"
# every node may be quarantined at once (3 of 3), and each consents to a GPU reset
SETTINGS = {"gpuops_health_breaker_percent": 100, "gpu_node_health_remediation": "reset"}


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path, nodes=NODES)
    try:
        yield f
    finally:
        f.stop()


def attempts(fleet, name):
    text = (fleet.node(name)["metadata"].get("annotations") or {}).get(RECORD)
    return None if text is None else json.loads(text)["attempts"]


def remediation_condition(fleet, name):
    found = [c for c in fleet.node(name)["status"].get("conditions") or [] if c["type"] == REMEDIATION]
    return found[0] if found else None


def resets(fleet, name):
    return [c["args"]["index"] for c in fleet.sims[name].raw_state()["call_log"] if c.get("call") == "reset_gpu"]


def test_reset_with_consent_idle_only_released_after_two_healthy_sweeps_and_capped(fleet):
    idle, busy, stuck = NODES
    for name in NODES:
        fleet.sims[name].inject_health(0, "row_remap_pending")
    fleet.sims[busy].add_process(0, 4242, "python", used_memory_mib=1024)

    # bad input: refused naming what is valid, before any node is read (no read task ran); the nodes' objects, their
    # simulated GPUs and every file under the lab's state (cursors, reports) exactly as they were
    before = (snapshot(fleet.state), dict((n, fleet.node(n)) for n in NODES), fleet.api.writes(dry_run=False))
    bad = fleet.sweep(**dict(SETTINGS, gpu_node_health_remediation="yes"))
    assert bad.rc != 0 and "none, reset, reboot" in str(bad.proc.stdout), bad
    assert bad.task("read the GPUs' health") == {}
    capped = fleet.sweep(**dict(SETTINGS, gpuops_health_remediation_max_attempts=0))
    # (the errors are computed once; the refusal runs on every host, each with the same message)
    refused = capped.task("refuse invalid settings")
    assert capped.rc != 0 and sorted(refused) == NODES and all(
        "remediation_max_attempts must be a whole number from 1 to 100, got 0" in r["msg"] for r in refused.values()), \
        capped
    assert capped.task("read the GPUs' health") == {}
    assert (snapshot(fleet.state), dict((n, fleet.node(n)) for n in NODES), fleet.api.writes(dry_run=False)) == before

    # check mode: says it would reset, records and resets nothing
    check = fleet.sweep(check=True, **SETTINGS)
    assert check.rc == 0, check
    assert check.rows()[idle]["actions"] == ["quarantined", "would reset GPU 0 (attempt 1)"]
    assert [n for n in NODES if fleet.mutations(n)] == [] and fleet.api.writes(dry_run=False) == []

    # sweep 1: all three quarantined; the idle GPUs reset (each attempt recorded first), the busy one refused
    first = fleet.sweep(**SETTINGS)
    assert first.rc == 0, first
    assert fleet.quarantined() == NODES
    assert resets(fleet, idle) == [0] and resets(fleet, stuck) == [0] and resets(fleet, busy) == []
    rows = first.rows()
    assert rows[idle]["actions"] == ["quarantined", "GPU 0 reset (attempt 1): row_remap_pending cleared"]
    assert rows[busy]["actions"][1].startswith("attempt 1: GPU 0 (") and "PID 4242 python" in rows[busy]["actions"][1]
    assert [len(attempts(fleet, n)) for n in NODES] == [1, 1, 1]
    # the stuck GPU's remap is pending again (a reset that does not take)
    fleet.sims[stuck].inject_health(0, "row_remap_pending")

    # sweep 2: the idle node's first healthy sweep; the other two tried a second time
    second = fleet.sweep(**SETTINGS)
    assert second.rc == 0, second
    assert second.rows()[idle]["actions"] == ["healthy sweep 1 of 2"]
    assert resets(fleet, idle) == [0] and resets(fleet, stuck) == [0, 0] and resets(fleet, busy) == []
    assert [len(attempts(fleet, n)) for n in NODES] == [1, 2, 2]
    assert remediation_condition(fleet, stuck) is None
    fleet.sims[stuck].inject_health(0, "row_remap_pending")

    # sweep 3: the idle node released; the other two at the cap: kept quarantined, NeedsOperator, no third reset
    third = fleet.sweep(**SETTINGS)
    assert third.rc == 0, third
    assert fleet.quarantined() == [busy, stuck]
    assert third.rows()[idle]["state"] == "released"
    assert resets(fleet, stuck) == [0, 0] and resets(fleet, busy) == [] and resets(fleet, idle) == [0]
    assert [len(attempts(fleet, n)) for n in NODES] == [1, 2, 2]
    for name in (busy, stuck):
        condition = remediation_condition(fleet, name)
        assert (condition["status"], condition["reason"]) == ("False", "NeedsOperator"), condition
        assert condition["message"].startswith("2 remediation attempt(s) in 24 h") and \
            "row_remap_pending on GPU 0" in condition["message"]
        assert third.rows()[name]["actions"][1].startswith("needs an operator")
    assert remediation_condition(fleet, idle) is None
    # the GPUs were changed only by those resets
    assert [fleet.mutations(n) for n in NODES] == [["reset_gpu"], [], ["reset_gpu", "reset_gpu"]]


def test_reboot_with_consent_drains_and_reboots_and_reset_consent_does_not(tmp_path):
    """A lost GPU needs a reboot: the node whose group consents to `reboot` is drained and rebooted (the simulator's
    boot), healthy again and released after two healthy sweeps; the node that consents only to `reset` is left
    quarantined, its row saying why. Per-host consent, from the inventory."""
    rebooted, reset_only = "boot-0", "boot-1"
    fleet = Fleet(tmp_path, nodes=[rebooted, reset_only])
    try:
        with open(fleet.inventory) as handle:
            inventory = yaml.safe_load(handle)
        hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
        hosts[rebooted]["gpu_node_health_remediation"] = "reboot"
        hosts[reset_only]["gpu_node_health_remediation"] = "reset"
        with open(fleet.inventory, "w") as handle:
            yaml.safe_dump(inventory, handle)
        for name in (rebooted, reset_only):
            fleet.sims[name].inject_health(0, "lost")
        boots = dict((n, fleet.sims[n].raw_state()["boot_id"]) for n in (rebooted, reset_only))
        limit = {"gpuops_health_breaker_percent": 100}

        first = fleet.sweep(**limit)
        assert first.rc == 0, first
        rows = first.rows()
        assert rows[rebooted]["actions"] == ["quarantined", "drained and rebooted the node (attempt 1)"]
        assert rows[reset_only]["actions"] == [
            "quarantined", "not remediated: gpu_lost needs a node reboot, and gpu_node_health_remediation is reset "
                           "(reboot allows it)"]
        assert fleet.sims[rebooted].raw_state()["boot_id"] == boots[rebooted] + 1
        assert fleet.sims[reset_only].raw_state()["boot_id"] == boots[reset_only]
        assert attempts(fleet, rebooted) is not None and len(attempts(fleet, rebooted)) == 1
        assert attempts(fleet, reset_only) is None
        # (drained: the eviction listing ran against the node; it has no GPU pods to evict)
        assert [r for r in fleet.api.requests if r["method"] == "GET" and r["path"] == "/api/v1/pods"]

        fleet.sweep(**limit)
        third = fleet.sweep(**limit)
        assert third.rc == 0, third
        assert fleet.quarantined() == [reset_only]
        assert third.rows()[rebooted]["state"] == "released"
        assert fleet.sims[rebooted].raw_state()["boot_id"] == boots[rebooted] + 1      # one reboot only
    finally:
        fleet.stop()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    yield from driver_rig.module_rig(tmp_path_factory)


@pytest.mark.skipif(bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))
def test_remediation_reboot_checks_the_next_kernel_refuse_then_ensure(tmp_path, rig):
    """The remediation's reboot and the next kernel (driver_next_kernel, issue 51): a node that declares driver NEW,
    installed (DKMS, built for the running kernel) and loaded, a lost GPU and consent to a reboot, and a newer kernel
    installed as the boot loader's default with no NVIDIA modules for it (an unattended upgrade's result). refuse: the
    sweep does not reboot the node and names the kernel and the fix; ensure: the headers installed and the modules
    built for that kernel before the reboot, and the node comes back on it with the driver loaded."""
    name = "kernel-0"
    fleet = Fleet(tmp_path, nodes=[name])
    try:
        # the node without an image's driver (so a boot into a kernel without modules loads none), its driver
        # installed by dpkg from the rig's packages and its apt sources the rig's repository
        root = str(fleet.state / name)
        os.remove(str(fleet.state / ("%s.json" % name)))
        shutil.rmtree(root)
        host = dict(driver_rig.node_vars(root, rig.url, rig.key, driver_rig.NEW, "driver=none"),
                    gpu_node_health_remediation="reboot")
        with open(fleet.inventory) as handle:
            inventory = yaml.safe_load(handle)
        inventory["all"]["children"]["gpu_nodes"]["hosts"][name].update(host)
        with open(fleet.inventory, "w") as handle:
            yaml.safe_dump(inventory, handle)
        sim = fleet.sims[name] = SimulatedBackend(str(fleet.state / ("%s.json" % name)), shape="h200-x1", root=root,
                                                  host_options="driver=none")
        apt = apt_rig.Root(root)
        version = "%s-%s" % (driver_rig.NEW, driver_rig.CUDA_REVISION)
        apt.dpkg_install([rig.debs[(n, version)] for n in (
            "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-utils-580", "nvidia-dkms-580-open",
            "nvidia-headless-580-open")])
        driver_files.write(root, "etc/apt/sources.list.d/gpuops-test.list",
                           "deb [trusted=yes] %s/ubuntu2404/x86_64 /\n" % rig.url)
        apt_rig.run(["apt-get", "-q", "update"], env=dict(os.environ, **apt.env))
        sim.reboot()
        assert driver_files.running_kernel(root) == driver_rig.KERNEL
        assert loaded(root) == driver_rig.NEW
        sim.inject_health(0, "lost")
        newer_kernel_installed(root)
        boot = sim.raw_state()["boot_id"]
        limit = {"gpuops_health_breaker_percent": 100}
        unbuilt = os.path.join(root, "lib/modules", driver_rig.NEXT_KERNEL, "updates")

        refused = fleet.sweep(driver_next_kernel="refuse", **limit)
        # not rebooted, nothing built for the next kernel; the node's row names the kernel and the fix
        assert refused.rc != 0, refused
        assert sim.raw_state()["boot_id"] == boot
        assert driver_files.running_kernel(root) == driver_rig.KERNEL and not os.path.exists(unbuilt)
        said = " ".join(refused.rows()[name]["actions"])
        assert "the next boot runs kernel %s" % driver_rig.NEXT_KERNEL in said, said
        assert "dkms install nvidia/%s -k %s" % (driver_rig.NEW, driver_rig.NEXT_KERNEL) in said, said
        assert fleet.quarantined() == [name]

        ensured = fleet.sweep(**limit)
        assert ensured.rc == 0, ensured
        assert ensured.rows()[name]["actions"][-1] == "drained and rebooted the node (attempt 2)", ensured.rows()
        assert sim.raw_state()["boot_id"] == boot + 1
        assert driver_files.running_kernel(root) == driver_rig.NEXT_KERNEL
        assert loaded(root) == driver_rig.NEW
        assert driver_files.find_module_file(root, "nvidia", driver_rig.NEXT_KERNEL).endswith(
            "/%s/updates/dkms/nvidia.ko" % driver_rig.NEXT_KERNEL)
        assert "linux-headers-%s" % driver_rig.NEXT_KERNEL in driver_rig.installed(apt)
    finally:
        fleet.stop()


def loaded(root):
    return (driver_files.read(root, "sys/module/nvidia/version") or "").strip() or None
