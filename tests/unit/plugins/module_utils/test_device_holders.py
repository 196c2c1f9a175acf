"""Who holds the NVIDIA device files: the cgroup parser over real-world /proc/<pid>/cgroup lines, and the /proc walker
against real child processes holding files open under a temporary "dev" directory (found by PID and command, matched
by what they opened, not by the name they opened it by)."""
import os
import subprocess
import tempfile
import textwrap

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _device_holders as dh

UID = "5c1f8a2e-3b4d-4e6f-9a0b-1c2d3e4f5a6b"
CID = "0f3a9c27b1d84e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f"

# (cgroup file text, pod_uid, container_id, unit): lines as kubelet, containerd, CRI-O, docker and systemd write them.
CGROUP_LINES = [
    # cgroup v2, kubelet's systemd driver, containerd
    ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope\n"
     % (UID.replace("-", "_"), CID), UID, CID, None),
    # cgroup v2, burstable and guaranteed QoS, CRI-O
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/crio-%s.scope\n"
     % (UID.replace("-", "_"), CID), UID, CID, None),
    ("0::/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope\n" % (UID.replace("-", "_"), CID),
     UID, CID, None),
    # CRI-O's monitor (conmon) sits in the pod but is not the container
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/crio-conmon-%s.scope\n"
     % (UID.replace("-", "_"), CID), UID, None, None),
    # cgroup v2, kubelet's cgroupfs driver
    ("0::/kubepods/besteffort/pod%s/%s\n" % (UID, CID), UID, CID, None),
    # cgroup v1, cgroupfs driver: one line per hierarchy
    ("12:memory:/kubepods/burstable/pod%s/%s\n11:cpu,cpuacct:/kubepods/burstable/pod%s/%s\n"
     "1:name=systemd:/kubepods/burstable/pod%s/%s\n" % (UID, CID, UID, CID, UID, CID), UID, CID, None),
    # cgroup v1, systemd driver, docker
    ("4:pids:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/docker-%s.scope\n"
     "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/docker-%s.scope\n"
     % (UID.replace("-", "_"), CID, UID.replace("-", "_"), CID), UID, CID, None),
    # a static pod: its UID is the manifest's hash, 32 hex digits
    ("0::/kubepods/burstable/podd41d8cd98f00b204e9800998ecf8427e/%s\n" % CID,
     "d41d8cd98f00b204e9800998ecf8427e", CID, None),
    # kind: the node's kubelet nested under its own slice
    ("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     "kubelet-kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope\n" % (UID.replace("-", "_"), CID),
     UID, CID, None),
    # not in a pod: a systemd service (v2, and v1 where only name=systemd says it), a login session
    ("0::/system.slice/nvidia-persistenced.service\n", None, None, "nvidia-persistenced.service"),
    ("9:name=systemd:/system.slice/nv-hostengine.service\n4:memory:/system.slice/nv-hostengine.service\n",
     None, None, "nv-hostengine.service"),
    ("0::/user.slice/user-0.slice/session-3.scope\n", None, None, "session-3.scope"),
    # a container with its own cgroup namespace sees only "/", and an empty or unreadable file says nothing
    ("0::/\n", None, None, None),
    ("", None, None, None),
    (None, None, None, None),
]


@pytest.mark.parametrize("text,pod_uid,container_id,unit", CGROUP_LINES)
def test_cgroup_lines_name_pod_container_or_unit(text, pod_uid, container_id, unit):
    got = dh.parse_cgroup(text)
    assert (got["pod_uid"], got["container_id"], got["unit"]) == (pod_uid, container_id, unit)


@pytest.fixture
def dev(tmp_path):
    root = tmp_path / "dev"
    (root / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1", "null-ish"):
        (root / name).write_text("")
    return root


def _by_pid(found):
    return dict((h["pid"], h) for h in found["holders"])


def test_walker_finds_real_processes_by_pid_and_command_and_what_they_opened(holders, dev, tmp_path):
    exporter = holders("fake-dcgm-exporter", dev / "nvidia0", dev / "nvidiactl", dev / "nvidia0")
    plugin = holders("fake-device-plugin", dev / "nvidia1", dev / "nvidia-caps" / "nvidia-cap1")
    # the same file opened under another name (a container's own /dev, a link): matched by what is open
    (tmp_path / "elsewhere").mkdir()
    os.link(str(dev / "nvidia-uvm"), str(tmp_path / "elsewhere" / "uvm"))
    uvm = holders("fake-uvm-user", tmp_path / "elsewhere" / "uvm")
    bystander = holders("fake-bystander", dev / "null-ish")

    found = dh.find_holders("/proc", dh.device_patterns(str(dev)))
    got = _by_pid(found)
    assert got[exporter]["command"] == "fake-dcgm-exporter"
    assert got[exporter]["paths"] == [str(dev / "nvidia0"), str(dev / "nvidiactl")]
    assert got[plugin]["paths"] == [str(dev / "nvidia-caps" / "nvidia-cap1"), str(dev / "nvidia1")]
    assert got[uvm]["paths"] == [str(dev / "nvidia-uvm")]
    assert bystander not in got and os.getpid() not in got
    assert found["unreadable"] == []
    # this test's processes run where pytest runs: the cgroup says no pod
    assert got[exporter]["pod_uid"] is None

    # GPU 0's holders: its own file's, and those holding only files no single GPU owns; not GPU 1's plugin
    gpu0 = _by_pid(dh.for_device(found, str(dev / "nvidia0")))
    assert set(gpu0) == {exporter, uvm}
    assert set(_by_pid(dh.for_device(found, str(dev / "nvidia1")))) == {plugin, uvm}
    text = dh.describe(dh.for_device(found, str(dev / "nvidia0")))
    assert "PID %d fake-dcgm-exporter holds %s" % (exporter, dev / "nvidia0") in text
    assert "fake-device-plugin" not in text


def test_a_holder_that_ended_is_gone_and_no_device_files_means_no_holders(holders, dev, tmp_path):
    pid = holders("fake-short-lived", dev / "nvidia0")
    assert pid in _by_pid(dh.find_holders("/proc", dh.device_patterns(str(dev))))
    assert dh.find_holders("/proc", dh.device_patterns(str(tmp_path / "no-such-dev"))) == {
        "holders": [], "unreadable": [], "files": []}


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to start a process as another user, and a Python that user can run")
def test_processes_it_cannot_read_are_counted_and_named_not_dropped(holders):
    # A root process holds a world-readable file open; the walker, run as nobody, cannot read root's descriptors.
    shared = tempfile.mkdtemp()
    try:
        os.chmod(shared, 0o755)
        path = os.path.join(shared, "nvidia0")
        open(path, "w").close()
        os.chmod(path, 0o644)
        module = os.path.join(shared, "walker.py")
        with open(dh.__file__.replace(".pyc", ".py")) as src, open(module, "w") as dst:
            dst.write(src.read())
        os.chmod(module, 0o644)
        pid = holders("fake-root-holder", path)
        walker = textwrap.dedent("""
            import importlib.util, json, sys
            spec = importlib.util.spec_from_file_location("dh", sys.argv[1])
            dh = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(dh)
            print(json.dumps(dh.find_holders("/proc", [sys.argv[2]])))
        """)

        def as_nobody():
            os.setgid(65534)
            os.setuid(65534)

        out = subprocess.run([SYSTEM_PYTHON, "-c", walker, module, path],
                             stdout=subprocess.PIPE, preexec_fn=as_nobody, check=True)
        found = __import__("json").loads(out.stdout)
        assert pid in found["unreadable"] and pid not in [h["pid"] for h in found["holders"]]
        text = dh.describe(found)
        assert "%d process(es) could not be read (permission denied; run as root to see them): PID " % len(
            found["unreadable"]) in text
    finally:
        for name in os.listdir(shared):
            os.unlink(os.path.join(shared, name))
        os.rmdir(shared)


def test_describe_names_pod_by_uid_or_name_and_units():
    holder = dh.holder_record(4242, "dcgm-exporter", ["/dev/nvidia0", "/dev/nvidiactl"],
                              "0::/kubepods/besteffort/pod%s/%s\n" % (UID, CID))
    assert dh.describe_holder(holder) == (
        "PID 4242 dcgm-exporter (pod UID %s, container %s) holds /dev/nvidia0, /dev/nvidiactl" % (UID, CID[:12]))
    assert "(pod monitoring/dcgm-exporter-x7k2p, container" in dh.describe_holder(
        holder, {UID: "monitoring/dcgm-exporter-x7k2p"})
    daemon = dh.holder_record(1639, "nvidia-persistenced", ["/dev/nvidia0"],
                              "0::/system.slice/nvidia-persistenced.service\n")
    assert dh.describe_holder(daemon) == "PID 1639 nvidia-persistenced (unit nvidia-persistenced.service) holds " \
                                         "/dev/nvidia0"
    assert dh.describe({"holders": [holder]}, own_pid=4242).startswith(
        "1 process(es) hold the device files open: PID 4242 dcgm-exporter (this run itself, through its NVML session, "
        "pod UID")
    assert dh.describe({"holders": [], "unreadable": []}).startswith(
        "no process that could be read holds the device files open")
