"""STAND-IN for DKMS (dkms status, dkms install), acting on a lab root. NOT the real tool.

The root is the directory named by GPUOPS_SIMULATED_ROOT (docs/simulator.md); without it the stand-in refuses to run,
so one on PATH never acts on this machine's own /. What it reads and writes follows the real tool's layout (dkms(8),
github.com/dell/dkms): a module's source is ``R/usr/src/<module>-<version>/`` with its ``dkms.conf``
(PACKAGE_NAME, PACKAGE_VERSION; the lab's fake nvidia-dkms packages put it there, with a ``# gpuops-test
flavour=<open|proprietary>`` line saying which modules it "builds"), a build for kernel K needs K's headers
(``R/lib/modules/K/build`` or ``R/usr/src/linux-headers-K``, what linux-headers-K installs), and a built module is
installed under ``R/lib/modules/K/updates/dkms/`` (Ubuntu's dkms default). The modules are tests/support/
driver_files.py's placeholders, unsigned (DKMS builds are unsigned unless a MOK signs them).

- ``dkms status``: one line per source and kernel, dkms 3's format: ``nvidia/580.95.05, 6.8.0-90-generic, x86_64:
  installed`` where the kernel has the build, ``nvidia/580.95.05: added`` for a source without one.
- ``dkms install <module>/<version> -k <kernel>``: the build and install for that kernel; refused without the source
  (``Error! Could not find module source directory``) or the kernel's headers (``Error! Your kernel headers for
  kernel <kernel> cannot be found``), as dkms words them.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from tests.support import driver_files as df  # noqa: E402  pylint: disable=wrong-import-position

MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
ARCH = "x86_64"


def sources(root):
    """[(module, version, flavour)] of the sources under R/usr/src with a dkms.conf."""
    out = []
    base = df.path(root, "usr/src")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        conf = df.read(root, "usr/src/%s/dkms.conf" % name)
        if conf is None:
            continue
        fields = dict(re.findall(r'^(PACKAGE_NAME|PACKAGE_VERSION)="?([^"\n]*)"?', conf, re.M))
        flavour = re.search(r"^# gpuops-test flavour=(\w+)", conf, re.M)
        if "PACKAGE_NAME" in fields and "PACKAGE_VERSION" in fields:
            out.append((fields["PACKAGE_NAME"], fields["PACKAGE_VERSION"], flavour.group(1) if flavour else "open"))
    return out


def built(root, module, version):
    """The kernels with this source's build installed (R/lib/modules/K/updates/dkms/<module>.ko of that version)."""
    out = []
    base = df.path(root, "lib/modules")
    for kernel in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        text = df.read(root, "lib/modules/%s/updates/dkms/%s" % (kernel, df.module_file_name(module)))
        info = df.parse_placeholder(text) if text else None
        if info and info["version"] == version:
            out.append(kernel)
    return out


def status(root):
    for module, version, _flavour in sources(root):
        kernels = built(root, module, version)
        for kernel in kernels:
            print("%s/%s, %s, %s: installed" % (module, version, kernel, ARCH))
        if not kernels:
            print("%s/%s: added" % (module, version))
    return 0


def install(root, args):
    spec, kernel = None, None
    it = iter(args)
    for arg in it:
        if arg == "-k":
            kernel = next(it, None)
        elif spec is None:
            spec = arg
    if not spec or "/" not in spec or not kernel:
        print("STAND-IN dkms: usage: dkms install <module>/<version> -k <kernel>", file=sys.stderr)
        return 1
    module, version = spec.split("/", 1)
    found = [s for s in sources(root) if s[:2] == (module, version)]
    if not found:
        print("Error! Could not find module source directory.\nDirectory: /usr/src/%s-%s does not exist."
              % (module, version), file=sys.stderr)
        return 1
    if not (os.path.lexists(df.path(root, "lib/modules/%s/build" % kernel))
            or os.path.isdir(df.path(root, "usr/src/linux-headers-%s" % kernel))):
        print("Error! Your kernel headers for kernel %s cannot be found at /lib/modules/%s/build or "
              "/lib/modules/%s/source." % (kernel, kernel, kernel), file=sys.stderr)
        return 1
    df.install_module_files(root, version, flavour=found[0][2], signed=False, kernel=kernel, subdir="updates/dkms",
                            modules=MODULES)
    print("Building module(s)... done.\nInstalling /lib/modules/%s/updates/dkms/nvidia.ko" % kernel)
    return 0


def main(argv):
    root = os.environ.get(df.ENV_ROOT)
    if not root:
        print("STAND-IN dkms: %s is not set; refusing to act on this machine" % df.ENV_ROOT, file=sys.stderr)
        return 2
    if argv[:1] == ["status"]:
        return status(root)
    if argv[:1] == ["install"]:
        return install(root, argv[1:])
    print("STAND-IN dkms: unsupported arguments %s (supported: status, install <module>/<version> -k <kernel>)"
          % argv, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
