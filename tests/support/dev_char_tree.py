"""Simulated node roots for ``nvidia-ctk system create-dev-char-symlinks`` (issue 51), and the cases both the real
command and the stand-in (tests/support/nvidia_ctk_devchar.py) are run on.

NOT NVIDIA's code. A root holds what the command reads: PCI sysfs (two H100-like GPUs of class 0x030200, an NVSwitch
and an Intel bridge, with every file go-nvlib's nvpci reads for an NVIDIA device), ``proc/devices`` (the majors of
the real H100 host of tests/fixtures/nvidia-ctk/h100-machine.txt: nvidia 195, nvidia-uvm 238, nvidia-caps 241),
``proc/driver/nvidia-caps/mig-minors`` in the driver's layout (``config 1``, ``monitor 2``, then per GPU 0..31 and GPU
instance 0..14 its access minor followed by compute instances 0..7: 4322 lines, as the H100 host's file has), and the
device nodes of ``dev/``. ``nodes="mknod"`` makes real character devices (root only: the recording of the real
command, tests/support/dev_char_reading.py), ``nodes="file"`` the stand-in's ``char MAJOR:MINOR`` placeholder files.
"""
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._char_devices import mig_minors_text

PROC_DEVICES = ("Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n 10 misc\n195 nvidia\n238 nvidia-uvm\n"
                "241 nvidia-caps\n242 nvidia-nvswitch\n\nBlock devices:\n  8 sd\n259 blkext\n")
NODES = (("dev/nvidia0", 195, 0), ("dev/nvidia1", 195, 1), ("dev/nvidiactl", 195, 255), ("dev/nvidia-uvm", 238, 0),
         ("dev/nvidia-uvm-tools", 238, 1), ("dev/nvidia-caps/nvidia-cap1", 241, 1),
         ("dev/nvidia-caps/nvidia-cap2", 241, 2), ("dev/nvidia-nvswitchctl", 242, 255))
GPU_BUS_IDS = ("0000:18:00.0", "0000:2a:00.0")
DEVICE_PATHS = ("dev/nvidia0", "dev/nvidia1", "dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools",
                "dev/nvidia-caps", "dev/nvidia-nvswitchctl")


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def _pci(root, bus_id, vendor, device, pci_class):
    base = "sys/bus/pci/devices/" + bus_id
    for name, text in (("vendor", "0x%04x" % vendor), ("device", "0x%04x" % device), ("class", "0x%06x" % pci_class),
                       ("numa_node", "-1"), ("subsystem_vendor", "0x%04x" % vendor), ("subsystem_device", "0x0000"),
                       ("resource", "0x0000000000000000 0x0000000000000000 0x0000000000000000")):
        _write(root, base + "/" + name, text + "\n")


def make_node(root, path, major, minor, nodes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if nodes == "mknod":
        os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))
    else:
        with open(path, "w") as handle:
            handle.write("char %d:%d\n" % (major, minor))


def build(root, nodes="file"):
    """The default tree (two GPUs, MIG minors, device nodes for both GPUs, no nvidia-modeset)."""
    _pci(root, "0000:00:1f.0", 0x8086, 0x1234, 0x060100)
    for bus_id in GPU_BUS_IDS:
        _pci(root, bus_id, 0x10DE, 0x2330, 0x030200)
    _pci(root, "0000:c0:00.0", 0x10DE, 0x22A3, 0x068000)
    _write(root, "proc/devices", PROC_DEVICES)
    _write(root, "proc/driver/nvidia-caps/mig-minors", mig_minors_text())
    for rel, major, minor in NODES:
        make_node(root, os.path.join(root, rel), major, minor, nodes)


def _remove(root, rel):
    path = os.path.join(root, rel)
    if os.path.isdir(path) and not os.path.islink(path):
        for dirpath, dirs, files in os.walk(path, topdown=False):
            for name in files + dirs:
                full = os.path.join(dirpath, name)
                (os.rmdir if os.path.isdir(full) and not os.path.islink(full) else os.unlink)(full)
        os.rmdir(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _frontend_no_caps(root):
    _write(root, "proc/devices", "Character devices:\n195 nvidia-frontend\n237 nvidia-uvm\n")
    _remove(root, "proc/driver/nvidia-caps")


def _wrong_links(root):
    os.makedirs(os.path.join(root, "dev/char"))
    os.symlink("/dev/null", os.path.join(root, "dev/char/195:0"))
    os.symlink("../nvidia1", os.path.join(root, "dev/char/195:1"))


# name -> (what is changed in the default tree, the command's arguments after `system create-dev-char-symlinks`,
# how many times it runs). The links are made under DEV/char (the default --dev-char-path, /dev/char of the root).
CASES = {
    "existing": (None, [], 1),
    "existing-twice": (None, [], 2),
    "create-all": (None, ["--create-all"], 1),
    "create-all-twice": (None, ["--create-all"], 2),
    "create-all-dry-run": (None, ["--create-all", "--dry-run"], 1),
    "existing-dry-run": (None, ["--dry-run"], 1),
    "frontend-name-no-mig-minors": (_frontend_no_caps, ["--create-all"], 1),
    "no-nvidia-major": (lambda r: _write(r, "proc/devices", "Character devices:\n  1 mem\n"), ["--create-all"], 1),
    "caps-major-missing": (lambda r: _write(r, "proc/devices", "Character devices:\n195 nvidia\n237 nvidia-uvm\n"),
                           ["--create-all"], 1),
    "no-proc-devices": (lambda r: _remove(r, "proc/devices"), ["--create-all"], 1),
    "no-gpu": (lambda r: [_remove(r, "sys/bus/pci/devices/" + b) for b in GPU_BUS_IDS], ["--create-all"], 1),
    "no-device-nodes": (lambda r: [_remove(r, rel) for rel in DEVICE_PATHS], [], 1),
    "links-present-wrong-and-relative": (_wrong_links, [], 1),
    "load-kernel-modules-without-create-all": (None, ["--load-kernel-modules", "--dry-run"], 1),
}


def prepare(root, case, nodes="file"):
    build(root, nodes)
    change = CASES[case][0]
    if change is not None:
        change(root)


def links(dev_char):
    """{name: link text} of the symlinks in a /dev/char directory (None when it does not exist)."""
    if not os.path.isdir(dev_char):
        return None
    return dict((name, os.readlink(os.path.join(dev_char, name))) for name in sorted(os.listdir(dev_char))
                if os.path.islink(os.path.join(dev_char, name)))


def messages(stderr):
    """The command's log lines without their time stamps, the IOMMU-FD warnings of go-nvlib (this tree has no
    vfio-dev) and a panic's goroutine trace (its first line kept)."""
    out = []
    for line in stderr.splitlines():
        if line.startswith("goroutine ") or line.startswith("\t") or line.startswith("github.com/") \
                or line.startswith("main.") or line.startswith("[signal") or line.startswith("("):
            continue
        if not line.strip():
            continue
        if line.startswith('time="'):
            line = line.split('" ', 1)[1]
        if "unable to detect IOMMU FD" in line:
            continue
        out.append(line)
    return out
