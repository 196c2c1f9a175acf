"""Package files shaped like NVIDIA DCGM 4's (NOT NVIDIA's packages: built here with dpkg-deb, named and versioned as
NVIDIA's CUDA repository names them), to install with Debian's real apt and dpkg into a throwaway root (apt_rig.Root).

``datacenter-gpu-manager-4-core`` carries, where NVIDIA's does (NVIDIA/DCGM at commit 0d22068, scripts/
verify_package_contents/datacenter-gpu-manager-core_amd64.deb.txt): /usr/bin/nv-hostengine (a STAND-IN that records
in <root>/run/nvidia-dcgm/host-engine that it runs, and removes that record on ``-t``), /usr/bin/dcgmi (the lab's
dcgmi stand-in, tests/support/dcgmi_standin.py) and the unit /usr/lib/systemd/system/nvidia-dcgm.service (our own
text, run by the systemctl stand-in). ``datacenter-gpu-manager-4-cuda12`` depends on core at its exact version and
holds a placeholder."""
import os
import shutil
import sys

from tests.support import apt_rig, driver_rig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD, NEW = "1:4.4.2-1", "1:4.5.2-1"
NAMES = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12")
UNIT = "nvidia-dcgm.service"
ENGINE_RECORD = os.path.join("run", "nvidia-dcgm", "host-engine")

_UNIT_TEXT = """[Unit]
Description=TEST STAND-IN for DCGM's host engine (tests/support/dcgm_rig.py; not NVIDIA's unit)

[Service]
ExecStart=/usr/bin/nv-hostengine
ExecStop=/usr/bin/nv-hostengine -t

[Install]
WantedBy=multi-user.target
"""

_ENGINE = """#!%s
# TEST STAND-IN for nv-hostengine %s (tests/support/dcgm_rig.py), NOT NVIDIA's: records that the host engine runs
import os, sys
record = os.path.join(os.environ["GPUOPS_SIMULATED_ROOT"], "run", "nvidia-dcgm", "host-engine")
if sys.argv[1:] == ["-t"]:
    if os.path.exists(record):
        os.remove(record)
    sys.exit(0)
os.makedirs(os.path.dirname(record), exist_ok=True)
with open(record, "w") as handle:
    handle.write("version=%s port=5555\\n")
"""


def contents(version):
    """{name: (depends, {relative path: text})} of the two packages at ``version``."""
    upstream = version.split(":", 1)[-1].split("-")[0]
    core = {"usr/bin/nv-hostengine": _ENGINE % (sys.executable, upstream, upstream),
            "usr/bin/dcgmi": "#!/bin/sh\n# TEST STAND-IN packaged as dcgmi %s, NOT NVIDIA's\nexec %s \"$@\"\n"
                             % (upstream, os.path.join(ROOT, "tests", "support", "bin", "dcgmi")),
            "usr/lib/systemd/system/%s" % UNIT: _UNIT_TEXT}
    return {NAMES[0]: (None, core),
            NAMES[1]: ("%s (= %s)" % (NAMES[0], version),
                       {"usr/lib/gpuops-test/dcgm-cuda12": "TEST STAND-IN %s\n" % upstream})}


def build(workdir, version):
    """{name: deb path} of the two packages at ``version``."""
    arch = apt_rig.arch()
    folder = os.path.join(str(workdir), version.replace(":", "_"))
    os.makedirs(folder)
    return dict((name, driver_rig.build(folder, name, version, depends, files, arch))
                for name, (depends, files) in contents(version).items())


def repository(folder, debs, keyring, root):
    """A signed flat repository in ``folder`` holding ``debs`` (deb paths), laid out as NVIDIA's CUDA repository's
    folder for one distribution, configured in the apt root ``root`` (an apt_rig.Root) as the driver role configures
    the CUDA repository: a .list with signed-by, the key in usr/share/keyrings."""
    driver_rig.flat_repository(str(folder), debs, keyring)
    key = os.path.join(root.path, "usr", "share", "keyrings", "cuda-archive-keyring.asc")
    with open(key, "w") as handle:
        handle.write(keyring.armored)
    with open(os.path.join(root.path, "etc", "apt", "sources.list.d", "cuda.list"), "w") as handle:
        handle.write("deb [signed-by=%s] file://%s /\n" % (key, folder))


def rpm_state(versions):
    """The rpm/dnf stand-in's state (tests/support/rpm_dnf_standin.py): nothing installed, a repository with the two
    packages at each of ``versions`` (RPM's [epoch:]version-release)."""
    available = {}
    for version in versions:
        for name, (dummy, files) in contents(version).items():
            available.setdefault(name, {})[version] = files
    return {"installed": {}, "available": available, "calls": []}


def place(debs, folder):
    """Copy the package files into ``folder`` (made), named as the repository names them (no epoch: apt-get reads a
    colon in a file's name as something else); their paths, in NAMES order."""
    os.makedirs(str(folder), exist_ok=True)
    out = []
    for name in NAMES:
        out.append(os.path.join(str(folder), os.path.basename(debs[name]).replace("_1:", "_")))
        shutil.copy(debs[name], out[-1])
    return out


def engine_running(root):
    """What the stand-in host engine recorded under ``root`` (None where it does not run)."""
    path = os.path.join(str(root), ENGINE_RECORD)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return handle.read().strip()
