"""A local apt repository of the NVIDIA Container Toolkit's four packages, and throwaway roots to install them into,
with Debian's own tools (dpkg-deb, dpkg-scanpackages, gpg, apt-get, dpkg): nothing of this machine's package set,
/etc/apt or apt lists is read or changed.

The packages are NOT NVIDIA's: each is built here with dpkg-deb, named and versioned like NVIDIA's and depending on
each other at the exact version like NVIDIA's. ``nvidia-container-toolkit-base`` puts the project's nvidia-ctk
STAND-IN (tests/support/nvidia_ctk_standin.py, at the package's version) where NVIDIA's package puts nvidia-ctk
(/usr/bin/nvidia-ctk); the other files are placeholders. The repository is a flat one, laid out as NVIDIA's
(``<url>/deb/$(ARCH)``: Packages, Release, InRelease), signed with a throwaway gpg key made for the test session.

A throwaway root is a directory holding what apt and dpkg need (etc/apt, var/lib/apt, var/cache/apt, var/lib/dpkg);
``Root.env`` points the package tools at it: APT_CONFIG (apt's Dir, state, cache and etc directories) and DPKG_ROOT
(dpkg's installation and administrative directories).
"""
import hashlib
import os
import shutil
import subprocess
import sys
from email.utils import formatdate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "tests", "support", "nvidia_ctk_standin.py")
PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1")


TOOLS = ("dpkg", "dpkg-deb", "dpkg-query", "dpkg-scanpackages", "apt-get", "apt-cache", "gpg", "gpgconf")


def missing_tools():
    """The Debian tools the rig needs that this machine lacks (the tests are skipped there, naming them)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def run(cmd, **kwargs):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
                          **kwargs)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d: %s%s" % (cmd, proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


def arch():
    return run(["dpkg", "--print-architecture"]).strip()


class Keyring(object):
    """A throwaway gpg home with one signing key (ed25519, no passphrase)."""

    def __init__(self, home, name):
        self.home = str(home)
        os.makedirs(self.home, mode=0o700, exist_ok=True)
        self.gpg = ["gpg", "--homedir", self.home, "--batch", "--quiet", "--pinentry-mode", "loopback",
                    "--passphrase", ""]
        run(self.gpg + ["--quick-gen-key", "%s <%s@gpuops-test.invalid>" % (name, name), "ed25519", "sign", "never"])
        self.armored = run(self.gpg + ["--armor", "--export"])

    def clearsign(self, src, dest):
        run(self.gpg + ["--yes", "--clearsign", "--digest-algo", "SHA256", "-o", dest, src])

    def close(self):
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "gpg-agent"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, check=False)


def build_package(workdir, name, version, arch_name):
    """One .deb like NVIDIA's (name, version, exact-version dependencies), with the stand-in or placeholders."""
    upstream = version.split("-")[0]
    tree = os.path.join(str(workdir), "%s_%s" % (name, version))
    os.makedirs(os.path.join(tree, "DEBIAN"))
    depends = {
        "nvidia-container-toolkit": "nvidia-container-toolkit-base (= %s), libnvidia-container-tools (>= %s), "
                                    "libnvidia-container-tools (<< 2.0.0)" % (version, version),
        "libnvidia-container-tools": "libnvidia-container1 (>= %s)" % version,
    }.get(name)
    control = ["Package: %s" % name, "Version: %s" % version, "Architecture: %s" % arch_name,
               "Maintainer: gpuops.nvidia tests <tests@gpuops-test.invalid>", "Section: utils", "Priority: optional"]
    if depends:
        control.append("Depends: %s" % depends)
    control.append("Description: TEST STAND-IN for NVIDIA's %s %s (not NVIDIA's package)" % (name, version))
    files = {
        "nvidia-container-toolkit-base": {
            "usr/bin/nvidia-ctk": "#!/bin/sh\n# TEST STAND-IN packaged as nvidia-ctk %s (tests/support/apt_rig.py), "
                                  "NOT NVIDIA's nvidia-ctk\nNVIDIA_CTK_STANDIN_VERSION=%s exec %s %s \"$@\"\n"
                                  % (upstream, upstream, sys.executable, STANDIN)},
        "nvidia-container-toolkit": {
            "usr/bin/nvidia-container-runtime": "#!/bin/sh\necho 'TEST STAND-IN nvidia-container-runtime %s'\n" % upstream},
        "libnvidia-container-tools": {
            "usr/bin/nvidia-container-cli": "#!/bin/sh\necho 'TEST STAND-IN nvidia-container-cli %s'\n" % upstream},
        "libnvidia-container1": {"usr/lib/gpuops-test/libnvidia-container.so.1": "TEST STAND-IN %s\n" % upstream},
    }[name]
    for rel, text in files.items():
        path = os.path.join(tree, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
        os.chmod(path, 0o755 if "/bin/" in path else 0o644)
    with open(os.path.join(tree, "DEBIAN", "control"), "w") as handle:
        handle.write("\n".join(control) + "\n")
    deb = os.path.join(str(workdir), "%s_%s_%s.deb" % (name, version, arch_name))
    owner = ["--root-owner-group"] if os.geteuid() == 0 else []
    run(["dpkg-deb", "-Zgzip", "--build"] + owner + [tree, deb])
    return deb


class Repository(object):
    """A flat apt repository at ``<path>/deb/<arch>`` (NVIDIA's layout), signed by ``keyring`` (or unsigned)."""

    def __init__(self, path, debs, keyring=None):
        self.path = str(path)
        self.arch = arch()
        folder = os.path.join(self.path, "deb", self.arch)
        os.makedirs(folder)
        for deb in debs:
            os.link(deb, os.path.join(folder, os.path.basename(deb)))
        packages = run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=folder)
        with open(os.path.join(folder, "Packages"), "w") as handle:
            handle.write(packages)
        data = packages.encode()
        release = ("Origin: gpuops-test\nLabel: gpuops-test (NOT NVIDIA)\nDate: %s\nArchitectures: %s\n"
                   "SHA256:\n %s %d Packages\n" % (formatdate(usegmt=True), self.arch,
                                                   hashlib.sha256(data).hexdigest(), len(data)))
        with open(os.path.join(folder, "Release"), "w") as handle:
            handle.write(release)
        if keyring is not None:
            keyring.clearsign(os.path.join(folder, "Release"), os.path.join(folder, "InRelease"))

    @property
    def url(self):
        return "file://" + self.path


class Root(object):
    """A throwaway root for apt and dpkg, and the environment that points them at it."""

    def __init__(self, path):
        self.path = str(path)
        for sub in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "etc/apt/apt.conf.d", "etc/apt/trusted.gpg.d",
                    "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg/info",
                    "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/log/apt", "usr/share/keyrings"):
            os.makedirs(os.path.join(self.path, sub), exist_ok=True)
        for name in ("status", "available"):
            open(os.path.join(self.path, "var/lib/dpkg", name), "a").close()
        self.apt_config = os.path.join(self.path, "apt.conf")
        with open(self.apt_config, "w") as handle:
            handle.write('Dir "%s/";\n' % self.path
                         + 'Dir::State::status "%s/var/lib/dpkg/status";\n' % self.path
                         + 'APT::Sandbox::User "root";\n')
        self.env = dict(python_apt_env(), APT_CONFIG=self.apt_config, DPKG_ROOT=self.path)

    def dpkg_install(self, debs):
        """Install ``debs`` into the root with dpkg alone (a node whose toolkit came another way: not held, no pin)."""
        extra = ["--force-not-root"] if os.geteuid() != 0 else []
        run(["dpkg", "--root=%s" % self.path] + extra + ["-i"] + list(debs))

    def installed(self):
        """{package: (version, status)} as dpkg-query reads the root's own database."""
        proc = subprocess.run(["dpkg-query", "--admindir=%s/var/lib/dpkg" % self.path, "-W",
                               "-f", "${Package}\t${Version}\t${Status}\n"] + list(PACKAGES),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        out = {}
        for line in proc.stdout.splitlines():
            name, version, status = line.split("\t")
            if status.endswith(" installed"):
                out[name] = (version, status)
        return out

    def files(self):
        """Every regular file under the root (relative paths), without the scaffolding this class made."""
        out = set()
        for folder, dummy, names in os.walk(self.path):
            for name in names:
                rel = os.path.relpath(os.path.join(folder, name), self.path)
                if rel not in ("apt.conf", "var/lib/dpkg/status", "var/lib/dpkg/available"):
                    out.add(rel)
        return out


def host_installed():
    """The toolkit's packages as this machine's own dpkg database has them (must stay as it was)."""
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n"] + list(PACKAGES),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return proc.stdout


class Rig(object):
    """Everything a test needs, made once: two signing keys (the repository's and another), the four packages at each
    of ``versions``, the signed repository and an unsigned copy. ``close()`` stops the keys' gpg agents."""

    def __init__(self, base, versions):
        base = str(base)
        self.keyring = Keyring(os.path.join(base, "g1"), "signing")
        self.other = Keyring(os.path.join(base, "g2"), "other")
        self.key, self.other_key = self.keyring.armored, self.other.armored
        os.makedirs(os.path.join(base, "debs"))
        name_arch = arch()
        self.debs = dict(((n, v), build_package(os.path.join(base, "debs"), n, v, name_arch))
                         for v in versions for n in PACKAGES)
        self.repo = Repository(os.path.join(base, "repo"), self.debs.values(), self.keyring)
        self.unsigned = Repository(os.path.join(base, "unsigned"), self.debs.values(), None)

    def close(self):
        self.keyring.close()
        self.other.close()

    def package_files(self, root):
        """Every file the packages installed into ``root`` (dpkg-query -L in the root's database)."""
        proc = subprocess.run(["dpkg-query", "--admindir=%s/var/lib/dpkg" % root.path, "-L"] + list(PACKAGES),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        return [os.path.join(root.path, line.lstrip("/")) for line in proc.stdout.splitlines()
                if line.startswith("/") and line != "/."]


def python_apt_env():
    """PYTHONPATH for Debian's python3-apt where scripts/setup.d/python3-apt.sh unpacked it (the system's python3
    lacks it); empty where the system has it. ansible.builtin.apt needs it."""
    unpacked = os.path.join(ROOT, "tools", "python3-apt", "usr", "lib", "python3", "dist-packages")
    return {"PYTHONPATH": unpacked} if os.path.isdir(unpacked) else {}
