"""site.yml on the lab inventory (simulated DGX A100 with MIG all-balanced, simulated HGX H200 with MPS x4), from
scratch, through real ansible-playbook: check mode (on every lab node, the HGX B200 too) shows each node's GPUs,
reports changes and touches nothing, apply converges, a second
run changes nothing, makes no GPU call (no reset, no reboot) and includes no role (the node plan found nothing);
whatever is then changed behind its back (a boot file, the reboot marker, a compute mode, a unit's mode, the
containerd drop-in) is found by the node plan and put back by exactly the role that owns it; a bad declaration
fails before any change."""
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from tests.integration.site_helpers import BLACKWELL_NODE, NODES, Site

pytestmark = pytest.mark.slow


def test_check_then_apply_then_nothing_to_do(tmp_path):
    # gpu_node_dev_char_symlinks left at its default (auto): the /dev/char step where the runtime is not in CDI mode
    site = Site(tmp_path, limit=NODES + (BLACKWELL_NODE,))

    # --check --diff first, on every lab node: changes are reported, each node's GPUs are read and shown, the
    # simulated GPUs see no mutating call, no file is written but the simulators' state files (and their locks).
    res = site.run(check=True, diff=True)
    assert res.rc == 0, res
    assert sorted(res.stats) == sorted(NODES + (BLACKWELL_NODE,)), res.stats
    assert all(stats["failures"] == 0 for stats in res.stats.values()), res.stats
    for node in NODES + (BLACKWELL_NODE,):
        assert res.changed(node) > 0, res
        assert site.gpus(node)["call_log"] == [], node
        assert site.files(node) == {}, node
    shown = dict((node, "\n".join(res.task("Show the GPUs as they are now", node)[0]["msg"]))
                 for node in NODES + (BLACKWELL_NODE,))
    assert "GPU0 A100-SXM4-40GB" in shown["lab-dgx-a100"] and "GPU7 H200 143771MiB" in shown["lab-hgx-h200"], shown
    assert "GPU7 B200 183359MiB" in shown[BLACKWELL_NODE], shown
    state_files = ["%s.json" % node for node in NODES + (BLACKWELL_NODE,)]
    listed = sorted(os.listdir(str(site.state)))
    assert [f for f in listed if not f.endswith(".lock") and f not in NODES + (BLACKWELL_NODE,)] == sorted(
        state_files), listed
    assert set("%s.lock" % f for f in state_files) <= set(listed), listed
    assert all(f.startswith(tuple(state_files)) for f in listed if f.endswith(".lock")), listed
    site.limit = NODES   # the rest converges the two nodes (test_site_blackwell converges the B200)
    plan = res.task("Show what MIG would change", "lab-dgx-a100")[0]["msg"]
    assert len(plan) == 8 and plan[0].startswith("GPU0 A100-SXM4-40GB: MIG Disabled -> Enabled"), plan
    assert "create 2g.10gb@0, 1g.5gb@2, 1g.5gb@3, 3g.20gb@4" in plan[0], plan
    assert res.task("No cluster configured", "lab-dgx-a100")[0]["msg"].startswith("No Kubernetes cluster configured")

    # The A100's runtime is in CDI mode: a link and a rule already there (an earlier run's, from before the node moved to
    # CDI) are neither removed nor added to by the default (auto) - docs/containerd.md.
    a100_root = site.state / "lab-dgx-a100"
    (a100_root / "dev" / "char").mkdir(parents=True)
    os.symlink("/dev/nvidia0", str(a100_root / "dev" / "char" / "195:0"))
    (a100_root / "lib" / "udev" / "rules.d").mkdir(parents=True)
    (a100_root / "lib" / "udev" / "rules.d" / "71-nvidia-dev-char.rules").write_text("# left by an earlier run\n")

    # Apply.
    res = site.run()
    assert res.rc == 0, res
    a100 = site.gpus("lab-dgx-a100")
    for gpu in a100["gpus"]:
        assert gpu["mig_current"] is True, gpu
        # all-balanced on an A100-40GB: 2g.10gb at 0, 1g.5gb at 2 and 3, 3g.20gb at 4, one compute instance each
        assert sorted(gi["start"] for gi in gpu["gpu_instances"]) == [0, 2, 3, 4], gpu
        assert all(len(gi["compute_instances"]) == 1 for gi in gpu["gpu_instances"]), gpu
    h200 = site.gpus("lab-hgx-h200")
    assert all(g["mig_current"] is False and not g["gpu_instances"] for g in h200["gpus"])
    calls = dict((n, len(site.gpus(n)["call_log"])) for n in NODES)
    assert calls["lab-dgx-a100"] > 0
    for node in NODES:
        files = site.files(node)
        drop_in = files["etc/containerd/conf.d/99-nvidia.toml"].decode()
        assert "nvidia-container-runtime" in drop_in and "runtimes.nvidia" in drop_in
        assert b"conf.d/*.toml" in files["etc/containerd/config.toml"]
        assert "etc/systemd/system/gpuops-compute-mode.service" in files
    assert "etc/systemd/system/gpuops-mig.service" in site.files("lab-dgx-a100")
    # the /dev/char links (issue 51), by default, where the runtime is not in CDI mode (the H200); none where it is (the
    # A100: auto makes nothing there)
    h200_files = site.files("lab-hgx-h200")
    links = dict((p, t) for p, t in h200_files.items() if p.startswith("dev/char/"))
    assert links["dev/char/195:7"] == b"-> /dev/nvidia7" and links["dev/char/238:1"] == b"-> /dev/nvidia-uvm-tools"
    assert len(links) == 4 + 2 + 8 * (1 + 15 * 9), len(links)
    assert b"system create-dev-char-symlinks --create-all" in h200_files["lib/udev/rules.d/71-nvidia-dev-char.rules"]
    assert dict((p, t) for p, t in site.files("lab-dgx-a100").items() if p.startswith(("dev/", "lib/udev/"))) == {
        "dev/char/195:0": b"-> /dev/nvidia0", "lib/udev/rules.d/71-nvidia-dev-char.rules": b"# left by an earlier run\n"}
    facts = res.task("Decide which steps this node's declaration manages", "lab-hgx-h200")[0]["ansible_facts"]
    assert facts["gpu_node_device_plugin_config"] == "mps-4"

    # Re-run: nothing changes, no GPU call at all (no reset, no reboot), no file rewritten.
    before = dict((n, site.files(n)) for n in NODES)
    boot = site.gpus("lab-dgx-a100")["boot_id"]
    res = site.run()
    assert res.rc == 0, res
    for node in NODES:
        assert res.changed(node) == 0, res
        assert len(site.gpus(node)["call_log"]) == calls[node], node
        assert site.files(node) == before[node], node
    assert site.gpus("lab-dgx-a100")["boot_id"] == boot
    for node in NODES:
        plan = res.task("Read the GPUs and plan every step", node)[0]
        assert all(reasons == [] for reasons in plan["steps"].values()), plan["steps"]
        assert _role_tasks(res, node) == set(), node

    # Behind the play's back: each change must be found by the plan and undone by the role that owns it, only that.
    mig_lib = site.state / "lab-dgx-a100" / "usr/local/lib/gpuops/gpuops-mig-lib.json"
    mig_lib.write_bytes(mig_lib.read_bytes() + b" ")
    (site.state / "lab-dgx-a100" / "var/lib/gpuops/mig-reboot-attempted").write_text("{}\n")
    os.chmod(str(site.state / "lab-hgx-h200" / "etc/systemd/system/gpuops-compute-mode.service"), 0o600)
    SimulatedBackend(str(site.state / "lab-hgx-h200.json")).set_compute_mode(3, "Prohibited")
    drop_in = site.state / "lab-hgx-h200" / "etc/containerd/conf.d/99-nvidia.toml"
    drop_in.write_text(drop_in.read_text() + "# edited by hand\n")
    res = site.run()
    assert res.rc == 0, res
    assert _role_tasks(res, "lab-dgx-a100") == {"mig"}, res.stats
    assert _role_tasks(res, "lab-hgx-h200") == {"compute_mode", "containerd_runtime"}, res.stats
    for node in NODES:
        assert res.changed(node) > 0
        assert _no_backups(site.files(node)) == _no_backups(before[node]), node
    assert [g["compute_mode"] for g in site.gpus("lab-hgx-h200")["gpus"]] == ["Default"] * 8
    assert os.stat(str(site.state / "lab-hgx-h200" / "etc/systemd/system/gpuops-compute-mode.service")).st_mode & 0o777 == 0o644
    res = site.run()
    assert res.rc == 0 and all(res.changed(n) == 0 and _role_tasks(res, n) == set() for n in NODES), res


ROLE_TASKS = {"mig": "Lay out GPU and compute instances", "compute_mode": "Set compute mode (and persistence mode)",
              "containerd_runtime": "Configure containerd's NVIDIA runtime (nvidia-ctk"}


def _no_backups(files):
    return dict((path, data) for path, data in files.items() if not path.endswith("~"))


def _role_tasks(res, node):
    """The roles whose main task ran on ``node``."""
    return set(role for role, task in ROLE_TASKS.items() if res.task(task, node))


@pytest.mark.parametrize("extra,words", [
    ({"gpu_node_sharing": "mps-please"}, ['gpu_node_sharing="mps-please"', "valid: mig, mps, time-slicing, none"]),
    ({"gpu_node_sharing": "time-slicing", "gpu_node_replicas": 1}, ["needs gpu_node_replicas", "got 1"]),
])
def test_bad_declaration_fails_before_any_change(tmp_path, extra, words):
    site = Site(tmp_path)
    res = site.run(**extra)
    assert res.rc != 0
    failures = res.failures()
    assert sorted(h for h, dummy, dummy2 in failures) == sorted(NODES), res
    for host, dummy, msg in failures:
        assert msg.startswith("node %s:" % host), msg
        for word in words:
            assert word in msg, msg
    assert not site.state.exists() or not any(site.state.iterdir()), list(site.state.iterdir())


@pytest.mark.parametrize("extra,words", [
    ({"gpu_node_disable_mig": "perhaps"}, ["gpu_node_disable_mig", "bool"]),
    # a role default that is a template of a fleet-wide variable (gpu_node_device_plugin_managed from
    # cluster_device_plugin): checked with the role's defaults in the first play
    ({"cluster_device_plugin": "perhaps"}, ["gpu_node_device_plugin_managed", "bool"]),
])
def test_bad_variable_type_fails_before_any_change(tmp_path, extra, words):
    """site.yml's node play runs gpu_node's converge entry point, without the role's entry-point argument check: the
    first play's check of every variable against the roles' argument specs (validate.yml) is what refuses a bad
    type, on every node, before anything changes."""
    site = Site(tmp_path)
    res = site.run(**extra)
    assert res.rc != 0
    failures = res.failures()
    assert sorted(h for h, dummy, dummy2 in failures) == sorted(NODES), res
    for host, task, msg in failures:
        assert task.endswith("Check every variable of the roles site.yml runs against the role's argument spec"), task
        assert msg.startswith("Validation of arguments failed"), msg
        for word in words:
            assert word in msg, msg
    assert not site.state.exists() or not any(site.state.iterdir()), list(site.state.iterdir())
