"""Fake NVIDIA driver packages for the driver role's tests, in a local signed apt repository laid out as NVIDIA's CUDA
repository (``<url>/ubuntu2404/x86_64/``: a flat repository), built with Debian's own tools (tests/support/apt_rig.py:
Keyring, Root).

The packages are NOT NVIDIA's or Canonical's: each is built here with dpkg-deb, named and versioned like the real ones
(plugins/module_utils/driver/_driver_plan.py says where each name comes from) and depending on each other at the exact
version as the real ones do. Two driver versions (570.195.03 and 580.95.05), the open and proprietary flavours, DKMS
packages, NVIDIA's Fabric Manager at each version (depending on the driver at exactly its version), and the Ubuntu
archive's packages of 580 with a precompiled ``linux-modules-nvidia-580-server-open-<KERNEL>`` for one kernel.

What they install is what the lab's reading code looks at: a kernel module placeholder under
``lib/modules/<KERNEL>/`` (text naming version, flavour and whether signed) and the userspace library marker
``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version>`` (the path the driver layer's simulator reads; until that
constant lands it is written here), nvidia-smi and nvidia-persistenced stand-ins (the latter runs the simulated node's daemon), and the persistenced unit.
"""
import os
import subprocess
import sys
from email.utils import formatdate
import hashlib

import yaml

from tests.support import apt_rig, driver_files

KERNEL = "6.8.0-87-generic"
# A newer kernel an upgrade installs (its headers are in the repository, so DKMS can build for it) and the kernel
# metapackage at the version that pulls it in (the kernel hold's subject).
NEXT_KERNEL = "6.8.0-90-generic"
KERNEL_META = "linux-image-generic"
KERNEL_META_VERSIONS = ("6.8.0-87.88", "6.8.0-90.91")
OLD, NEW = "570.195.03", "580.95.05"
CUDA_REVISION = "0ubuntu1"
ARCHIVE_REVISION = "0ubuntu0.24.04.2"
PRECOMPILED_VERSION = "6.8.0-87.88+1"
LIBRARY_MARKER = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s"
# What the fake Fabric Manager package's nv-fabricmanager runs (the simulated node's Fabric Manager)
FM_STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fabricmanager_standin.py")
# What the fake nvidia-compute-utils package's nvidia-persistenced runs (the simulated node's daemon)
PERSISTENCED_STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "persistenced_standin.py")


# The kernel modules one driver package installs (as placeholders: tests/support/driver_files.py's format, which the
# kmod stand-ins and the simulated boot read).
MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
# NVML's library link (what the simulated NVML opens: plugins/module_utils/sim/_simulator_host.NVML_LIBRARY_LINK).
LIBRARY_LINK = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def module_text(version, flavour, signed, module="nvidia"):
    """A placeholder module file (NOT NVIDIA's module): driver_files' format."""
    return driver_files.render_placeholder(module, version, flavour, signed)


def module_files(directory, version, flavour, signed):
    """{path: text} of every module of one driver under ``directory`` (lib/modules/<kernel>/...)."""
    return dict(("%s/%s" % (directory, driver_files.module_file_name(m)), module_text(version, flavour, signed, m))
                for m in MODULES)


def library_files(version, text):
    """The NVML library and its link (a ("symlink", target) value is a symbolic link in the package)."""
    return {LIBRARY_MARKER % version: text, LIBRARY_LINK: ("symlink", os.path.basename(LIBRARY_MARKER % version))}


def cuda_packages(version):
    """{name: (package version, depends, files)} of NVIDIA's CUDA repository (Ubuntu) for one driver version."""
    b = version.split(".")[0]
    v = "%s-%s" % (version, CUDA_REVISION)
    lib = "libnvidia-compute-%s" % b
    out = {
        lib: (v, None, library_files(version, "TEST STAND-IN libnvidia-ml %s\n" % version)),
        "nvidia-utils-%s" % b: (v, "%s (= %s)" % (lib, v), {
            "usr/bin/nvidia-smi": "#!/bin/sh\necho 'TEST STAND-IN nvidia-smi %s'\n" % version}),
        "nvidia-compute-utils-%s" % b: (v, "%s (= %s)" % (lib, v), {
            # runs the simulated node's daemon (tests/support/persistenced_standin.py)
            "usr/bin/nvidia-persistenced": "#!/bin/sh\n# TEST STAND-IN nvidia-persistenced %s\nexec %s %s %s \"$@\"\n" % (
                version, sys.executable, PERSISTENCED_STANDIN, version),
            # started as Ubuntu's unit starts it (--no-persistence-mode: docs/driver.md); the stand-in's ExecStopPost
            # stops the simulated daemon
            "lib/systemd/system/nvidia-persistenced.service":
                "[Unit]\nDescription=TEST STAND-IN NVIDIA Persistence Daemon\n[Service]\nType=forking\n"
                "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n"
                "ExecStopPost=/usr/bin/nvidia-persistenced --gpuops-standin-stop\n[Install]\n"
                "WantedBy=multi-user.target\n"}),
    }
    for flavour, suffix in (("open", "-open"), ("proprietary", "")):
        dkms = "nvidia-dkms-%s%s" % (b, suffix)
        files = module_files("lib/modules/%s/updates/dkms" % KERNEL, version, flavour, False)
        # the source DKMS builds from for another kernel (tests/support/dkms_standin.py reads it)
        files["usr/src/nvidia-%s/dkms.conf" % version] = (
            'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="%s"\n# gpuops-test flavour=%s\n' % (version, flavour))
        out[dkms] = (v, lib + " (= %s)" % v, files)
        out["nvidia-headless-%s%s" % (b, suffix)] = (v, "%s (= %s), nvidia-compute-utils-%s (= %s), %s (= %s)" % (
            dkms, v, b, v, lib, v), {"usr/share/doc/nvidia-headless-%s%s/README" % (b, suffix): "TEST STAND-IN\n"})
    fm = "nvidia-fabricmanager" if int(b) >= 580 else "nvidia-fabricmanager-%s" % b
    out[fm] = ("%s-1" % version, "%s (= %s)" % (lib, v), {
        "usr/bin/nv-fabricmanager": "#!/bin/sh\n# TEST STAND-IN nv-fabricmanager %s\nexec %s %s %s \"$@\"\n" % (
            version, sys.executable, FM_STANDIN, version),
        "usr/share/nvidia/nvswitch/fabricmanager.cfg": "# TEST STAND-IN\n",
        # the unit the real package installs starts nv-fabricmanager with its config (NVIDIA/gpu-driver-container at
        # 06a208ca, ubuntu24.04/nvidia-driver _start_daemons runs the same command on NVSwitch systems); the stand-in's
        # ExecStopPost stops the simulated Fabric Manager
        "lib/systemd/system/nvidia-fabricmanager.service":
            "[Unit]\nDescription=TEST STAND-IN NVIDIA fabric manager service\n[Service]\nType=forking\n"
            "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
            "ExecStopPost=/usr/bin/nv-fabricmanager --stop\n[Install]\nWantedBy=multi-user.target\n"})
    return out


def archive_packages(version):
    """The Ubuntu archive's -server-open packages of one driver version, with the precompiled modules for KERNEL."""
    b = version.split(".")[0]
    v = "%s-%s" % (version, ARCHIVE_REVISION)
    lib = "libnvidia-compute-%s-server" % b
    return {
        lib: (v, None, library_files(version, "TEST STAND-IN libnvidia-ml %s (archive)\n" % version)),
        "nvidia-utils-%s-server" % b: (v, "%s (= %s)" % (lib, v), {
            "usr/bin/nvidia-smi": "#!/bin/sh\necho 'TEST STAND-IN nvidia-smi %s'\n" % version}),
        "nvidia-compute-utils-%s-server" % b: (v, "%s (= %s)" % (lib, v), {
            "usr/bin/nvidia-persistenced": "#!/bin/sh\necho 'TEST STAND-IN nvidia-persistenced %s'\n" % version}),
        "nvidia-headless-no-dkms-%s-server-open" % b: (v, "nvidia-compute-utils-%s-server (= %s), %s (= %s)" % (
            b, v, lib, v), {"usr/share/doc/nvidia-headless-no-dkms-%s-server-open/README" % b: "TEST STAND-IN\n"}),
        "linux-modules-nvidia-%s-server-open-%s" % (b, KERNEL): (PRECOMPILED_VERSION, "%s (>= %s)" % (lib, version),
                                                                 module_files("lib/modules/%s/kernel/nvidia-%ssrv"
                                                                              % (KERNEL, b), version, "open", True)),
    }


def build(workdir, name, version, depends, files, arch_name):
    tree = os.path.join(str(workdir), "%s_%s" % (name, version))
    os.makedirs(os.path.join(tree, "DEBIAN"))
    # each branch's packages replace the other branch's (as Ubuntu's do through their shared virtual names)
    base = name.replace("570", "B").replace("580", "B")
    control = ["Package: %s" % name, "Version: %s" % version, "Architecture: %s" % arch_name,
               "Maintainer: gpuops.nvidia tests <tests@gpuops-test.invalid>", "Section: non-free/libs",
               "Priority: optional", "Provides: gpuops-test-%s" % base, "Conflicts: gpuops-test-%s" % base,
               "Replaces: gpuops-test-%s" % base]
    if name.startswith("nvidia-dkms-"):
        # the open and proprietary modules of one branch exclude each other
        other = name[:-5] if name.endswith("-open") else name + "-open"
        control.append("Conflicts: gpuops-test-%s, %s" % (base, other))
        control.remove("Conflicts: gpuops-test-%s" % base)
    if depends:
        control.append("Depends: %s" % depends)
    control.append("Description: TEST STAND-IN for %s %s (not NVIDIA's or Canonical's package)" % (name, version))
    for rel, text in files.items():
        path = os.path.join(tree, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(text, tuple):
            os.symlink(text[1], path)
            continue
        with open(path, "w") as handle:
            handle.write(text)
        os.chmod(path, 0o755 if "/bin/" in rel else 0o644)
    with open(os.path.join(tree, "DEBIAN", "control"), "w") as handle:
        handle.write("\n".join(control) + "\n")
    deb = os.path.join(str(workdir), "%s_%s_%s.deb" % (name, version, arch_name))
    owner = ["--root-owner-group"] if os.geteuid() == 0 else []
    apt_rig.run(["dpkg-deb", "-Zgzip", "--build"] + owner + [tree, deb])
    return deb


def flat_repository(folder, debs, keyring):
    """A flat repository (Packages, Release, InRelease signed by ``keyring``) in ``folder``."""
    os.makedirs(folder)
    for deb in debs:
        os.link(deb, os.path.join(folder, os.path.basename(deb)))
    packages = apt_rig.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=folder)
    with open(os.path.join(folder, "Packages"), "w") as handle:
        handle.write(packages)
    data = packages.encode()
    with open(os.path.join(folder, "Release"), "w") as handle:
        handle.write("Origin: gpuops-test\nLabel: gpuops-test (NOT NVIDIA)\nDate: %s\nArchitectures: %s\n"
                     "SHA256:\n %s %d Packages\n" % (formatdate(usegmt=True), apt_rig.arch(),
                                                     hashlib.sha256(data).hexdigest(), len(data)))
    keyring.clearsign(os.path.join(folder, "Release"), os.path.join(folder, "InRelease"))


class DriverRig(object):
    """Built once per test session: the key, the packages, the repository (``url``: the CUDA repository's base; the
    node's folder is ``<url>/ubuntu2404/x86_64``) and the same packages as an Ubuntu archive stand-in."""

    def __init__(self, base):
        base = str(base)
        self.keyring = apt_rig.Keyring(os.path.join(base, "gpg"), "driver")
        self.key = self.keyring.armored
        arch_name = apt_rig.arch()
        debs_dir = os.path.join(base, "debs")
        os.makedirs(debs_dir)
        self.debs = {}
        for version in (OLD, NEW):
            for name, (pv, depends, files) in cuda_packages(version).items():
                self.debs[(name, pv)] = build(debs_dir, name, pv, depends, files, arch_name)
        for name, (pv, depends, files) in archive_packages(NEW).items():
            self.debs[(name, pv)] = build(debs_dir, name, pv, depends, files, arch_name)
        # the running kernel's headers, which DKMS builds against (the distribution's, in the same repository here)
        headers = "linux-headers-%s" % KERNEL
        self.debs[(headers, "6.8.0-87.88")] = build(debs_dir, headers, "6.8.0-87.88", None, {
            "usr/src/%s/Makefile" % headers: "# TEST STAND-IN\n"}, arch_name)
        # the newer kernel's headers (with the build link DKMS looks for), and the kernel metapackage at two versions
        headers = "linux-headers-%s" % NEXT_KERNEL
        self.debs[(headers, "6.8.0-90.91")] = build(debs_dir, headers, "6.8.0-90.91", None, {
            "usr/src/%s/Makefile" % headers: "# TEST STAND-IN\n",
            "lib/modules/%s/build" % NEXT_KERNEL: ("symlink", "/usr/src/%s" % headers)}, arch_name)
        for meta in KERNEL_META_VERSIONS:
            self.debs[(KERNEL_META, meta)] = build(debs_dir, KERNEL_META, meta, None, {
                "usr/share/doc/%s/README" % KERNEL_META: "TEST STAND-IN %s\n" % meta}, arch_name)
        self.base = os.path.join(base, "repo")
        flat_repository(os.path.join(self.base, "ubuntu2404", "x86_64"), self.debs.values(), self.keyring)

    @property
    def url(self):
        return "file://" + self.base

    def close(self):
        self.keyring.close()


def module_rig(tmp_path_factory):
    """A test module's rig (yield it from a module-scoped fixture), closed at the end, with the check that this
    machine's own package set did not change while the module's tests installed into their throwaway roots."""
    before = apt_rig.host_installed()
    made = DriverRig(tmp_path_factory.mktemp("driver-rig"))
    try:
        yield made
    finally:
        made.close()
    assert apt_rig.host_installed() == before, "this machine's own package set changed"


def lab_group_environment():
    """The lab's gpuops_environment for its GPU nodes (inventories/lab/group_vars/gpu_nodes.yml, as written): what a
    node's own gpuops_environment must carry, since a host's value replaces the group's."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "inventories", "lab", "group_vars", "gpu_nodes.yml")) as handle:
        return yaml.safe_load(handle)["gpuops_environment"]


def node_vars(root, url, key, version, simulated_host):
    """The host variables of a lab node that declares driver ``version`` from the repository at ``url`` (signed with
    ``key``: a DriverRig's), its package
    database the apt/dpkg root at ``root`` (made, with etc/modprobe.d as on any distribution's image) for the driver
    role and for every task (the node plan reads the installed packages), the simulated host ``simulated_host``
    (GPUOPS_SIMULATED_HOST options). Shared by the driver site tests and bench/driver_flow.py."""
    apt = apt_rig.Root(root)
    os.makedirs(os.path.join(apt.path, "etc", "modprobe.d"), exist_ok=True)
    return {"gpuops_simulated_host": simulated_host, "driver_version": version, "driver_repo_url": url,
            "driver_repo_key": key, "driver_environment": apt.env,
            "gpuops_environment": dict(apt.env, **lab_group_environment())}


def installed(root, names=None):
    """{package: (version, status)} installed in ``root`` (an apt_rig.Root)."""
    proc = subprocess.run(["dpkg-query", "--admindir=%s/var/lib/dpkg" % root.path, "-W",
                           "-f", "${Package}\t${Version}\t${Status}\n"] + list(names or []),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    out = {}
    for line in proc.stdout.splitlines():
        name, version, status = line.split("\t")
        if status.endswith(" installed"):
            out[name] = (version, status)
    return out
