"""STAND-IN for ``nvidia-ctk system create-dev-char-symlinks`` -- NOT NVIDIA's code (issue 51).

Run through tests/support/nvidia_ctk_standin.py (``nvidia-ctk system ...``). It does what the real command does, as
read in NVIDIA/nvidia-container-toolkit v1.20.0 (commit 5505e2f9) cmd/nvidia-ctk/system/create-dev-char-symlinks/ and
the code it calls, and as the real command built from that source did on a simulated /dev tree
(docs/readings/dev-char-symlinks-real-ctk.md; tests/fixtures/nvidia-ctk/dev-char-symlinks-real.json is what it created,
and tests/unit/test_nvidia_ctk_devchar_standin.py holds this file to it):

* The host it reads is the node's root ``R`` named by GPUOPS_SIMULATED_ROOT (``/`` without it): the real command
  always reads the real ``/`` (its ``--driver-root`` only says where kernel modules are loaded from; the /dev root is
  never set from a flag). The links' targets are the host's paths (``/dev/nvidia0``), as the real command writes them.
* Without ``--create-all``: every character device ``R/dev/nvidia*`` and ``R/dev/nvidia-caps/nvidia-*`` (glob order),
  except names starting ``nvidia-fs``, ``nvidia-nvswitch`` or ``nvidia-nvlink``, linked as ``<dev-char-path>/M:m``
  after the node's own major and minor. A character device is a real one (``lstat``), or, in a simulated tree that an
  unprivileged test cannot ``mknod`` in, a regular file whose first line is ``char MAJOR:MINOR`` (this stand-in's
  convention; the real command skips regular files).
* With ``--create-all``: the majors from ``R/proc/devices`` (``nvidia``, else ``nvidia-frontend`` before driver 550;
  ``nvidia-uvm``; ``nvidia-caps`` required only where ``R/proc/driver/nvidia-caps/mig-minors`` exists), the GPUs from
  PCI sysfs ``R/sys/bus/pci/devices/*`` (vendor 0x10de, class 0x0300xx or 0x0302xx), and links in this order:
  nvidia-modeset (major:254), nvidiactl (:255), nvidia-uvm (uvm:0), nvidia-uvm-tools (uvm:1), the MIG ``config`` and
  ``monitor`` caps, then per GPU i ``/dev/nvidia<i>`` (i) and its caps ``gpu<i>/gi<g>/access`` and
  ``gpu<i>/gi<g>/ci<c>/access`` (g and c from 0 while the minors file lists them), as ``/dev/nvidia-caps/nvidia-cap<m>``.
  No device node is read: the links may dangle (nvidia-modeset where it is not loaded).
* Each link is logged ``Creating link L => T`` (stderr, logrus' text format) and made with symlink(2); an existing
  name is NOT replaced (``Could not create symlink: ... file exists`` warning, exit 0). The directory is made (0755)
  only when there is a link to make; ``--dry-run`` logs the same lines and makes nothing. No device: ``No NVIDIA
  devices found in /``, exit 0. Errors (exit 1): ``/proc/devices`` without an NVIDIA major; a required major missing.
  A missing ``/proc/devices`` makes the real command panic (exit 2): reproduced as exit 2 with Go's panic line.
* ``--load-kernel-modules`` / ``--create-device-nodes`` without ``--create-all`` are ignored with the real warning;
  with it, this stand-in refuses them (it does not model loading modules or making device nodes).

Not reproduced: PCI sysfs files the real reader also needs (numa_node, resource: the real command fails on a device
directory without them; this stand-in reads vendor and class only), the IOMMU warnings, environment-variable forms of
the flags (DEV_CHAR_PATH, CREATE_ALL, ...).
"""
import glob
import os
import stat
import sys
import time

ENV_ROOT = "GPUOPS_SIMULATED_ROOT"
BLOCKED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
NVIDIA_VENDOR = 0x10DE
GPU_CLASSES = (0x0300, 0x0302)      # VGA and 3D controller: nvpci's IsVGAController / Is3DController
MODESET_MINOR, CTL_MINOR, UVM_MINOR, UVM_TOOLS_MINOR = 254, 255, 0, 1
FLAGS_STRING = ("dev-char-path", "driver-root")
FLAGS_BOOL = ("create-all", "load-kernel-modules", "create-device-nodes", "dry-run")


class DevCharError(Exception):
    """A failure the real command reports at level=error and exit 1 (``code`` 2: its panic)."""

    def __init__(self, message, code=1):
        Exception.__init__(self, message)
        self.code = code


def _log(level, msg):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sys.stderr.write('time="%s" level=%s msg="%s"\n' % (stamp, level, msg.replace('"', '\\"')))


def _root():
    return os.environ.get(ENV_ROOT) or "/"


def _under(root, path):
    return os.path.join(root, path.lstrip("/"))


def char_device(path):
    """(major, minor) of a character device node, or of the stand-in's ``char M:m`` placeholder file; else None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISCHR(info.st_mode):
        return os.major(info.st_rdev), os.minor(info.st_rdev)
    if stat.S_ISREG(info.st_mode):
        try:
            with open(path) as handle:
                first = handle.readline().split()
        except (IOError, OSError, UnicodeDecodeError):
            return None
        if len(first) == 2 and first[0] == "char":
            major, dummy, minor = first[1].partition(":")
            if major.isdigit() and minor.isdigit():
                return int(major), int(minor)
    return None


def existing_nodes(root):
    """[(target, major, minor)] of the NVIDIA device nodes under ``root`` (the command without --create-all)."""
    out = []
    for pattern in ("/dev/nvidia*", "/dev/nvidia-caps/nvidia-*"):
        for path in sorted(glob.glob(_under(root, pattern))):
            name = os.path.basename(path)
            if name.startswith(BLOCKED_PREFIXES):
                continue
            numbers = char_device(path)
            if numbers is None:
                continue
            out.append(("/" + os.path.relpath(path, root), numbers[0], numbers[1]))
    return out


def proc_devices(root):
    """{name: major} of the NVIDIA entries of R/proc/devices (internal/info/proc/devices): every ``%d %s`` line, names
    starting with ``nvidia``. None when the file does not exist."""
    path = _under(root, "/proc/devices")
    if not os.path.exists(path):
        return None
    found = {}
    with open(path) as handle:
        for line in handle:
            parts = line.split()
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].startswith("nvidia"):
                found[parts[1]] = int(parts[0])
    if not found:
        raise DevCharError("failed to create symlink creator: failed to create all possible device lister: failed "
                           "reading device majors: no NVIDIA devices found")
    return found


def _major(devices, name):
    if name in ("nvidia", "nvidia-frontend"):
        for candidate in ("nvidia", "nvidia-frontend"):
            if candidate in devices:
                return devices[candidate]
        return None
    return devices.get(name)


def mig_minors(root):
    """{cap: minor} of R/proc/driver/nvidia-caps/mig-minors (internal/nvcaps), or None where the file is absent."""
    path = _under(root, "/proc/driver/nvidia-caps/mig-minors")
    if not os.path.exists(path):
        return None
    caps = {}
    with open(path) as handle:
        for line in handle:
            parts = line.rstrip("\n").split(" ")
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                caps[parts[0]] = int(parts[1])
    return caps


def gpu_count(root):
    """The NVIDIA GPUs of PCI sysfs (go-nvlib nvpci GetGPUs: vendor 0x10de, class VGA or 3D controller)."""
    count = 0
    for device in sorted(glob.glob(_under(root, "/sys/bus/pci/devices/*"))):
        try:
            with open(os.path.join(device, "vendor")) as handle:
                vendor = int(handle.read().strip(), 0)
            if vendor != NVIDIA_VENDOR:
                continue
            with open(os.path.join(device, "class")) as handle:
                pci_class = int(handle.read().strip(), 0)
        except (IOError, OSError, ValueError) as exc:
            raise DevCharError("failed to create links: failed to get device nodes: failed to get GPU information: "
                               "error getting all NVIDIA devices: %s" % exc)
        if (pci_class >> 8) in GPU_CLASSES:
            count += 1
    return count


def all_possible(root):
    """[(target, major, minor)] of every possible NVIDIA device node (the command with --create-all)."""
    devices = proc_devices(root)
    if devices is None:
        raise DevCharError("panic: runtime error: invalid memory address or nil pointer dereference", code=2)
    caps = mig_minors(root)
    required = (["nvidia-caps"] if caps is not None else []) + ["nvidia", "nvidia-uvm"]
    for name in required:
        if _major(devices, name) is None:
            raise DevCharError("failed to create symlink creator: failed to create all possible device lister: "
                               "missing required device major %s" % name)
    caps = caps or {}
    count = gpu_count(root)
    if count == 0:
        return None
    gpu, uvm, cap = _major(devices, "nvidia"), _major(devices, "nvidia-uvm"), _major(devices, "nvidia-caps") or 0
    nodes = [("/dev/nvidia-modeset", gpu, MODESET_MINOR), ("/dev/nvidiactl", gpu, CTL_MINOR),
             ("/dev/nvidia-uvm", uvm, UVM_MINOR), ("/dev/nvidia-uvm-tools", uvm, UVM_TOOLS_MINOR)]
    nodes += [("/dev/nvidia-caps/nvidia-cap%d" % caps[name], cap, caps[name]) for name in ("config", "monitor")
              if name in caps]
    for index in range(count):
        nodes.append(("/dev/nvidia%d" % index, gpu, index))
        gi = 0
        while "gpu%d/gi%d/access" % (index, gi) in caps:
            minors = [caps["gpu%d/gi%d/access" % (index, gi)]]
            ci = 0
            while "gpu%d/gi%d/ci%d/access" % (index, gi, ci) in caps:
                minors.append(caps["gpu%d/gi%d/ci%d/access" % (index, gi, ci)])
                ci += 1
            nodes += [("/dev/nvidia-caps/nvidia-cap%d" % minor, cap, minor) for minor in minors]
            gi += 1
    return nodes


def parse_args(argv):
    opts = {"dev-char-path": "/dev/char", "driver-root": "/"}
    opts.update((name, False) for name in FLAGS_BOOL)
    i = 0
    while i < len(argv):
        name, has_value, value = argv[i].lstrip("-").partition("=")
        if name in FLAGS_STRING:
            if not has_value:
                i += 1
                if i >= len(argv):
                    raise DevCharError("flag needs an argument: --%s" % name)
                value = argv[i]
            opts[name] = value
        elif name in FLAGS_BOOL:
            opts[name] = (value.lower() in ("true", "1")) if has_value else True
        elif name in ("help", "h"):
            raise DevCharError("stand-in: --help is not reproduced")
        else:
            raise DevCharError("flag provided but not defined: -%s" % name)
        i += 1
    return opts


def main(argv):
    try:
        opts = parse_args(argv)
        for flag in ("load-kernel-modules", "create-device-nodes"):
            if opts[flag] and not opts["create-all"]:
                _log("warning", "%s is only applicable when create-all is set; ignoring" % flag)
                opts[flag] = False
            elif opts[flag]:
                raise DevCharError("stand-in: --%s is not reproduced (it loads modules / makes device nodes)" % flag)
        root = _root()
        nodes = all_possible(root) if opts["create-all"] else (existing_nodes(root) or None)
    except DevCharError as exc:
        if exc.code == 2:
            sys.stderr.write("%s\n\ngoroutine 1 [running]:\n(stand-in: the real command panics here)\n" % exc)
        else:
            _log("error", str(exc))
        return exc.code
    if not nodes:
        _log("info", "No NVIDIA devices found in /")
        return 0
    dev_char = opts["dev-char-path"]
    if not opts["dry-run"]:
        os.makedirs(dev_char, 0o755, exist_ok=True)
    for target, major, minor in nodes:
        link = os.path.join(dev_char, "%d:%d" % (major, minor))
        _log("info", "Creating link %s => %s" % (link, target))
        if opts["dry-run"]:
            continue
        try:
            os.symlink(target, link)
        except OSError as exc:
            _log("warning", "Could not create symlink: symlink %s %s: %s" % (target, link, _go_errno(exc)))
    return 0


def _go_errno(exc):
    """Go's wording of an errno (syscall.Errno.Error): lower case, e.g. ``file exists``."""
    return (exc.strerror or str(exc)).lower()
