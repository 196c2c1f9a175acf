"""The driver role with Debian's real apt and dpkg, against a local signed repository laid out as NVIDIA's CUDA
repository, of fake driver packages built by the test (tests/support/driver_rig.py), each node installing into its
own throwaway root (APT_CONFIG, DPKG_ROOT). The node's PCI devices and driver state are given in the driver layer's
shapes (driver_devices, driver_node_state). One rig per session; scenarios share ansible-playbook runs.

What a user would notice: check mode reports the packages and writes nothing; the apply installs the driver at its
exact version in one transaction, held, with the nouveau blacklist (the initramfs rebuilt once) and a reboot reported
where nouveau is loaded; a second run changes nothing; 570 -> 580 replaces the packages; a downgrade, a Fabric Manager
pinned at another version, Secure Boot with DKMS and proprietary modules on Blackwell are refused naming the node with
nothing written or installed; package files install an air-gapped node (with the Fabric Manager on an NVSwitch
system); the dnf branch in check mode."""
import json
import os
import sys

import pytest
import yaml

from tests.support import apt_rig, driver_rig
from tests.support.ansible_run import first_failure, run_playbook

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

OLD, NEW, KERNEL = driver_rig.OLD, driver_rig.NEW, driver_rig.KERNEL

PLAY = """
- name: The driver role
  hosts: all
  gather_facts: false
  environment: "{{ gpuops_environment }}"
  tasks:
    - name: Apply the role
      ansible.builtin.include_role:
        name: gpuops.nvidia.driver
"""


def gpu(bus, name, arch):
    return {"bus_id": bus, "vendor": 0x10de, "device": 0x2335, "subsystem_vendor": 0x10de,
            "subsystem_device": 0x18be, "class": 0x030200, "kind": "gpu", "bound_driver": None, "name": name,
            "architecture": arch, "open_modules": True}


H200 = [gpu("0000:18:00.0", "NVIDIA H200", "hopper"), gpu("0000:2a:00.0", "NVIDIA H200", "hopper")]
B200 = [gpu("0000:1b:00.0", "NVIDIA B200", "blackwell")]


def node_state(**kw):
    out = {"kernel": KERNEL, "loaded": None, "nouveau_loaded": False, "secure_boot": False, "nvswitch": False,
           "nvlink5": False}
    out.update(kw)
    return out


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    yield from driver_rig.module_rig(tmp_path_factory)


def node_vars(tmp_path, name, rig, **extra):
    root = apt_rig.Root(tmp_path / name)
    os.makedirs(os.path.join(root.path, "etc/modprobe.d"))
    marker = os.path.join(root.path, "initramfs-rebuilt")
    out = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
           "gpuops_environment": root.env, "driver_environment": root.env,
           "driver_package_manager": "apt", "driver_version": OLD, "driver_repo_url": rig.url,
           "driver_repo_key": rig.key, "driver_repo_distribution": "ubuntu2404", "driver_repo_architecture": "x86_64",
           "driver_root": root.path, "driver_devices": H200, "driver_node_state": node_state(),
           "driver_start_persistenced": False,
           "driver_initramfs_command": [sys.executable, "-c", "open(%r, 'a').write('rebuilt\\n')" % marker]}
    out.update(extra)
    return root, out


def play(tmp_path, hosts, check=False, diff=False):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    data, proc = run_playbook(str(playbook), inventory=str(inventory), check=check, diff=diff)
    assert data is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = dict((h, {}) for h in hosts)
    for play_data in data["plays"]:
        for task in play_data["tasks"]:
            for host, res in task["hosts"].items():
                out[host].setdefault(task["task"]["name"].split(" : ", 1)[-1], res)
    return out, data, proc


def cuda_set(version, flavour="open", fm=False):
    b = version.split(".")[0]
    suffix = "-open" if flavour == "open" else ""
    v = "%s-0ubuntu1" % version
    out = dict((n, v) for n in ("nvidia-headless-%s%s" % (b, suffix), "nvidia-utils-%s" % b,
                                "nvidia-compute-utils-%s" % b, "libnvidia-compute-%s" % b, "nvidia-dkms-%s%s" % (b, suffix)))
    if fm:
        out["nvidia-fabricmanager" if int(b) >= 580 else "nvidia-fabricmanager-%s" % b] = "%s-1" % version
    return out


def versions(root):
    return dict((n, v) for n, (v, s) in driver_rig.installed(root).items() if not n.startswith("linux-headers"))


def held(root):
    return sorted(n for n, (v, s) in driver_rig.installed(root).items() if s.startswith("hold "))


REPORT = "Report the package changes (check mode - nothing is installed)"


def test_driver_role_check_apply_again_upgrade_refusals_air_gapped(tmp_path, rig):
    root, node1 = node_vars(tmp_path, "node1", rig, driver_node_state=node_state(nouveau_loaded=True))
    uroot, upgrade = node_vars(tmp_path, "upgrade", rig, driver_version=NEW)
    uroot.dpkg_install(rig.debs[(n, v)] for n, v in cuda_set(OLD).items())
    droot, downgrade = node_vars(tmp_path, "downgrade", rig)
    droot.dpkg_install(rig.debs[(n, v)] for n, v in cuda_set(NEW).items())

    # check mode: the packages reported, nothing written or installed
    res, data, proc = play(tmp_path, {"node1": node1, "upgrade": upgrade}, check=True, diff=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "nvidia-headless-570-open: not installed -> %s-0ubuntu1 (install)" % OLD in res["node1"][REPORT]["msg"]
    assert "nvidia-headless-580-open: not installed -> %s-0ubuntu1 (install)" % NEW in res["upgrade"][REPORT]["msg"]
    assert root.files() == {"etc/modprobe.d"} - {"etc/modprobe.d"} and driver_rig.installed(root) == {}
    assert versions(uroot) == cuda_set(OLD)

    # apply, beside the refusals and the air-gapped NVSwitch node
    bad = {
        "fm-mismatch": dict(driver_version=NEW, driver_fabric_manager_version="580.82.07",
                            driver_node_state=node_state(nvswitch=True)),
        "secure-boot": dict(driver_node_state=node_state(secure_boot=True)),
        "blackwell": dict(driver_flavour="proprietary", driver_devices=B200),
    }
    roots, hosts = {}, {"node1": node1, "upgrade": upgrade, "downgrade": downgrade}
    for name, extra in bad.items():
        roots[name], hosts[name] = node_vars(tmp_path, name, rig, **extra)
    gapped_set = cuda_set(NEW, fm=True)
    roots["air-gapped"], hosts["air-gapped"] = node_vars(
        tmp_path, "air-gapped", rig, driver_version=NEW, driver_package_source="files",
        driver_node_state=node_state(nvswitch=True),
        driver_package_files=[rig.debs[(n, v)] for n, v in gapped_set.items()]
        + [rig.debs[("linux-headers-%s" % KERNEL, "6.8.0-87.88")]])
    res, data, proc = play(tmp_path, hosts, diff=True)

    assert first_failure(data, "node1") is None, first_failure(data, "node1")
    assert versions(root) == cuda_set(OLD) and held(root) == sorted(cuda_set(OLD))
    module = open(os.path.join(root.path, "lib/modules/%s/updates/dkms/nvidia.ko" % KERNEL)).read()
    assert "version=%s" % OLD in module and "flavour=open" in module
    assert os.path.exists(os.path.join(root.path, driver_rig.LIBRARY_MARKER % OLD))
    assert "blacklist nouveau\n" in open(os.path.join(root.path, "etc/modprobe.d/blacklist-nouveau.conf")).read()
    assert open(os.path.join(root.path, "initramfs-rebuilt")).read() == "rebuilt\n"
    pin = open(os.path.join(root.path, "etc/apt/preferences.d/nvidia-driver-gpuops")).read()
    assert "Package: nvidia-headless-570-open\nPin: version %s-0ubuntu1\n" % OLD in pin
    listing = open(os.path.join(root.path, "etc/apt/sources.list.d/cuda-gpuops-driver.list")).read()
    assert "%s/ubuntu2404/x86_64/ /" % rig.url in listing
    facts = res["node1"]["Report the driver and whether a reboot is needed"]["ansible_facts"]
    assert facts["driver_reboot_needed"] is True and "nouveau" in facts["driver_reboot_reason"]
    assert facts["driver_installed"] == cuda_set(OLD)

    # 570 -> 580: the 580 packages in one transaction, the 570 ones gone, held at 580
    assert first_failure(data, "upgrade") is None, first_failure(data, "upgrade")
    assert versions(uroot) == cuda_set(NEW) and held(uroot) == sorted(cuda_set(NEW))
    assert "version=%s" % NEW in open(os.path.join(uroot.path, "lib/modules/%s/updates/dkms/nvidia.ko" % KERNEL)).read()
    upgrade_facts = res["upgrade"]["Report the driver and whether a reboot is needed"]["ansible_facts"]
    assert upgrade_facts["driver_reboot_needed"] is False

    expect = {
        "downgrade": "refusing to downgrade",
        "fm-mismatch": "the Fabric Manager is pinned at 580.82.07 and the driver at %s" % NEW,
        "secure-boot": "Secure Boot is on and the kernel modules would be built with DKMS",
        "blackwell": "NVIDIA B200 at 0000:1b:00.0 is a Blackwell GPU",
    }
    for name, words in expect.items():
        failure = first_failure(data, name)
        assert failure is not None, (name, res[name])
        assert ("node %s:" % name) in failure["text"] and words in failure["text"], (name, failure["text"])
        assert "nothing changed" in failure["text"]
    assert versions(droot) == cuda_set(NEW) and held(droot) == []
    for name in bad:
        assert driver_rig.installed(roots[name]) == {}, name
        assert roots[name].files() == set(), (name, roots[name].files())

    gapped = roots["air-gapped"]
    assert first_failure(data, "air-gapped") is None, first_failure(data, "air-gapped")
    assert versions(gapped) == gapped_set and "nvidia-fabricmanager" in held(gapped)

    # again: nothing changes, no initramfs rebuild
    again = {"node1": node1, "upgrade": upgrade, "air-gapped": hosts["air-gapped"]}
    res, data, proc = play(tmp_path, again)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in again:
        assert data["stats"][name]["changed"] == 0, (name, [t for t, r in res[name].items() if r.get("changed")])
    assert open(os.path.join(root.path, "initramfs-rebuilt")).read() == "rebuilt\n"


RPM_DNF = """#!%(python)s
# TEST STAND-IN for %(tool)s (tests/integration/test_driver_role.py), NOT the real tool: it records its arguments and
# answers as the real one does for a node with none of the packages and NVIDIA's rhel9 repository with driver %(new)s.
import json, sys
with open(%(log)r, "a") as log:
    log.write(json.dumps(sys.argv) + "\\n")
args = sys.argv[1:]
if %(tool)r == "rpm":
    names = [a for a in args if not a.startswith("-") and "%%" not in a]
    for name in names:
        print("package %%s is not installed" %% name)
    sys.exit(len(names))
if "makecache" in args:
    sys.exit(0)
for name in args[args.index("--available") + 1:]:
    version = "%(new)s-1" if name == "nvidia-fabricmanager" else "3:%(new)s-1.el9"
    print("%%s.x86_64    %%s    cuda-rhel9-x86_64" %% (name, version))
"""


def test_dnf_branch_in_check_mode(tmp_path, rig):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = str(tmp_path / "calls.log")
    for tool in ("rpm", "dnf"):
        path = bindir / tool
        path.write_text(RPM_DNF % {"python": sys.executable, "tool": tool, "log": log, "new": NEW})
        path.chmod(0o755)
    root, hv = node_vars(tmp_path, "rhel", rig, driver_package_manager="dnf", driver_version=NEW,
                         driver_repo_distribution="rhel9", driver_kernel="5.14.0-427.13.1.el9_4.x86_64",
                         driver_node_state=node_state(kernel="5.14.0-427.13.1.el9_4.x86_64", nvswitch=True),
                         driver_repo_url="https://developer.download.nvidia.com/compute/cuda/repos")
    hv["gpuops_environment"] = dict(hv["gpuops_environment"], PATH="%s:%s" % (bindir, os.environ["PATH"]))
    hv["driver_environment"] = hv["gpuops_environment"]
    for folder in ("etc/pki/rpm-gpg", "etc/yum.repos.d"):
        os.makedirs(os.path.join(root.path, folder))
    res, data, proc = play(tmp_path, {"rhel": hv}, check=True, diff=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    msg = res["rhel"][REPORT]["msg"]
    for line in ("nvidia-driver: not installed -> 3:%s-1.el9 (install)" % NEW,
                 "kmod-nvidia-open-dkms: not installed -> 3:%s-1.el9 (install)" % NEW,
                 "nvidia-fabricmanager: not installed -> %s-1 (install)" % NEW):
        assert line in msg, msg
    plan = res["rhel"]["Read the node and plan the driver (nothing changes; refusals stop here)"]["plan"]
    assert plan["stream"] == "nvidia-driver:580-open"
    assert root.files() == set()
    calls = [json.loads(line) for line in open(log)]
    assert any("makecache" in c for c in calls) and calls[-1][0].endswith("rpm")
