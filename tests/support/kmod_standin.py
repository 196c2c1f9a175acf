"""STAND-IN for kmod's modprobe, rmmod and modinfo, acting on a lab root. Not the real tools.

The root is the directory named by the environment variable GPUOPS_SIMULATED_ROOT (docs/simulator.md); without it
the stand-ins refuse to run, so one on PATH never acts on this machine's own /. The files they read and change, the
placeholder module file's format and the fault hook are tests/support/driver_files.py's (its docstring).

- ``modprobe [-a] MODULE...``: loads each module after the modules it needs (driver_files.DEPENDS), reading version
  and flavour from the placeholder under R/lib/modules/<running kernel>/; a loaded module is left as it is (exit 0,
  as modprobe does). Refused, with kmod's wording ("modprobe: ERROR: could not insert '<m>': <reason>"), when a fault
  hook names the module, when Secure Boot is on (R/sys/firmware/efi/efivars/SecureBoot-<guid>, value byte 1) and the
  placeholder is unsigned ("Key was rejected by service", what a kernel enforcing signatures answers), or when a
  module's version differs from the loaded module it links against ("Invalid argument": the kernel refuses a module
  whose symbol versions disagree). A missing file: "modprobe: FATAL: Module <m> not found in directory
  /lib/modules/<kernel>". A module file of another version than the loaded user-space driver is loaded: that
  mismatch is NVML's to report, not the kernel's. Once nvidia is loaded, the simulated GPUs' state file
  (GPUOPS_SIMULATED_GPUS) is written as the load leaves them (``gpus_follow_load``).
- ``rmmod MODULE...``: removes each in the order given; one that is used by a loaded module ("rmmod: ERROR: Module
  <m> is in use by: <users>"), that has references ("rmmod: ERROR: Module <m> is in use") or that is not loaded
  ("rmmod: ERROR: Module <m> is not currently loaded") is left, the others are still tried, and the exit status is
  1 when any failed (kmod's rmmod goes on with the next name the same way).
- ``modprobe nvidia`` takes the ``options nvidia ...`` lines of the root's modprobe.d into R/proc/driver/nvidia/params
  (plugins/module_utils/sim/_nvreg_params.py), and refuses ("Invalid argument") an integer parameter's value that
  the kernel does not parse. ``modinfo [-k KERNEL] -p nvidia`` lists that module's parameters.
- ``modinfo [-k KERNEL] -F FIELD MODULE``: ``version``, ``filename``, ``license`` (``Dual MIT/GPL`` for the open
  flavour, ``NVIDIA`` for the proprietary one, as their MODULE_LICENSE lines say) and ``signer`` (empty when
  unsigned) of the module file for that kernel (the running one when -k is not given).
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from tests.support import driver_files as df  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.stop_points import standin_done  # noqa: E402  pylint: disable=wrong-import-position

SECURE_BOOT = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def secure_boot(root):
    try:
        with open(df.path(root, SECURE_BOOT), "rb") as handle:
            data = handle.read()
    except (IOError, OSError):
        return False
    return len(data) >= 5 and data[4] == 1


def placeholder(root, module, kernel=None):
    file_path = df.find_module_file(root, module, kernel)
    if file_path is None:
        return None, None
    with open(file_path) as handle:
        return file_path, df.parse_placeholder(handle.read())


def insert(root, module, kernel):
    """0, or 1 after printing kmod's message."""
    mod = df.name(module)
    if mod in df.loaded(root):
        return 0
    for dep in df.DEPENDS.get(mod, []):
        if insert(root, dep, kernel):
            return 1
    file_path, info = placeholder(root, mod)
    if file_path is None:
        print("modprobe: FATAL: Module %s not found in directory /lib/modules/%s" % (mod, kernel), file=sys.stderr)
        return 1
    if info is None:
        print("modprobe: ERROR: could not insert '%s': Exec format error" % mod, file=sys.stderr)
        return 1
    fault = df.load_fault(root, mod)
    if fault:
        print("modprobe: ERROR: could not insert '%s': %s" % (mod, fault), file=sys.stderr)
        return 1
    if secure_boot(root) and not info["signed"]:
        print("modprobe: ERROR: could not insert '%s': Key was rejected by service" % mod, file=sys.stderr)
        return 1
    if mod == "nvidia":
        _values, error = df.nvreg_params().load_values(root)
        if error:
            # the kernel refuses the whole load where a parameter's value does not parse (kstrtoint)
            print("modprobe: ERROR: could not insert '%s': %s" % (mod, error), file=sys.stderr)
            return 1
    for dep in df.DEPENDS.get(mod, []):
        dep_version = (df.read(root, "sys/module/%s/version" % dep, "") or "").strip()
        if dep_version and dep_version != info["version"]:
            print("modprobe: ERROR: could not insert '%s': Invalid argument" % mod, file=sys.stderr)
            return 1
    df.load_module(root, mod, info)
    return 0


def gpus_follow_load(root):
    """The simulated GPUs of this root (GPUOPS_SIMULATED_GPUS, where the lab names them) once nvidia is loaded: their
    state file says at once what the load did to them (SimulatedBackend.driver_loaded), as a real GPU has lost its
    MIG instances the moment the module is inserted; a test that stops the run right after this modprobe reads the
    truth from the file. Nothing where nvidia is not loaded or no state file is named."""
    state = os.environ.get("GPUOPS_SIMULATED_GPUS")
    if not state or not os.path.isfile(state) or "nvidia" not in df.loaded(root):
        return
    collections = os.path.join(REPO, ".collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
    SimulatedBackend(state, root=root).driver_loaded()


def modprobe(root, args):
    names = [a for a in args if not a.startswith("-")]
    flags = [a for a in args if a.startswith("-")]
    if any(f not in ("-a", "--all") for f in flags) or not names or (len(names) > 1 and not flags):
        print("STAND-IN modprobe: unsupported arguments %s (supported: [-a] MODULE...)" % args, file=sys.stderr)
        return 1
    kernel = df.running_kernel(root)
    try:
        for module in names:
            if insert(root, module, kernel):
                return 1
        return 0
    finally:
        gpus_follow_load(root)


def rmmod(root, args):
    if not args or any(a.startswith("-") for a in args):
        print("STAND-IN rmmod: unsupported arguments %s (supported: MODULE...)" % args, file=sys.stderr)
        return 1
    rc = 0
    for module in args:
        mod = df.name(module)
        modules = df.loaded(root)
        if mod not in modules:
            print("rmmod: ERROR: Module %s is not currently loaded" % mod, file=sys.stderr)
            rc = 1
        elif modules[mod]["users"]:
            print("rmmod: ERROR: Module %s is in use by: %s" % (mod, " ".join(modules[mod]["users"])),
                  file=sys.stderr)
            rc = 1
        elif modules[mod]["refcnt"] > 0:
            print("rmmod: ERROR: Module %s is in use" % mod, file=sys.stderr)
            rc = 1
        else:
            df.unload_module(root, mod)
    return rc


def modinfo(root, args):
    kernel, field, names = None, None, []
    it = iter(args)
    for arg in it:
        if arg == "-k":
            kernel = next(it, None)
        elif arg == "-F":
            field = next(it, None)
        elif arg == "-p":
            field = "parm"
        else:
            names.append(arg)
    if field == "parm" and len(names) == 1:
        file_path, info = placeholder(root, names[0], kernel or df.running_kernel(root))
        if file_path is None or info is None:
            print("modinfo: ERROR: Module %s not found." % names[0], file=sys.stderr)
            return 1
        if df.name(names[0]) == "nvidia":
            sys.stdout.write(df.nvreg_params().modinfo_p_text())
        return 0
    if field not in ("version", "filename", "license", "signer") or len(names) != 1:
        print("STAND-IN modinfo: unsupported arguments %s (supported: [-k KERNEL] -F version|filename|license|"
              "signer MODULE)" % args, file=sys.stderr)
        return 1
    kernel = kernel or df.running_kernel(root)
    file_path, info = placeholder(root, names[0], kernel)
    if file_path is None:
        print("modinfo: ERROR: Module %s not found." % names[0], file=sys.stderr)
        return 1
    if info is None:
        print("modinfo: ERROR: could not get modinfo from '%s': Invalid argument" % names[0], file=sys.stderr)
        return 1
    value = {"version": info["version"], "license": "Dual MIT/GPL" if info["flavour"] == "open" else "NVIDIA",
             "signer": "gpuops lab signing key" if info["signed"] else "",
             "filename": "/" + os.path.relpath(file_path, root)}[field]
    if value:
        print(value)
    return 0


def main(argv):
    tool, args = os.path.basename(argv[1]), argv[2:]
    root = os.environ.get(df.ENV_ROOT)
    if not root:
        print("STAND-IN %s: %s is not set; the stand-in acts only on a lab root" % (tool, df.ENV_ROOT),
              file=sys.stderr)
        return 1
    rc = {"modprobe": modprobe, "rmmod": rmmod, "modinfo": modinfo}[tool](root, args)
    standin_done(tool, args)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
