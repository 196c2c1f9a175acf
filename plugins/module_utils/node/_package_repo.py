# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A package repository checked before it is configured (PRIVATE to gpuops.nvidia).

gpuops.nvidia.package_plan asks the node's own package manager whether a repository definition that is not written
yet works: apt-get (or dnf) reads it from a private scratch directory (mode 0700, removed afterwards) with its own
lists and cache there, so the node's configured sources, lists and cache are never read or changed. What it finds
decides whether the container_toolkit role changes anything: a mirror that does not answer, a repository whose
signature the given key does not verify (or that is not signed), and a pinned version the repository does not have
are each refused before the first file is written.

The commands (argument lists, no shell) and the reading of their output are pure functions here; ``probe`` runs
them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile

# apt-get's words for the two ways a source fails (apt 2.x; the English messages, LANG=C)
_SIGNATURE = ("NO_PUBKEY", "BADSIG", "EXPKEYSIG", "REVKEYSIG", "is not signed", "GPG error",
              "signatures were invalid", "signatures couldn't be verified", "The following signatures",
              "NODATA", "Clearsigned file isn't valid", "OpenPGP signature verification failed",
              "GPG signature verification error", "repomd.xml GPG signature", "Bad GPG signature",
              "public key", "not signed")
_UNREACHABLE = ("Failed to fetch", "Could not connect", "Could not resolve", "Connection failed",
                "Unable to connect", "404  Not Found", "File not found", "Temporary failure resolving", "timed out",
                "Cannot download repomd.xml", "Curl error", "Cannot find a valid baseurl", "Connection refused")


# The largest package file read (dpkg-deb --show, rpm -qp): a driver's packages are hundreds of MiB, none is 4 GiB.
MAX_PACKAGE_BYTES = 4 * 1024 * 1024 * 1024

# The options of a repository as it will be configured, which driver_plan and package_plan take (their docs: the doc
# fragment package_repository): the text of its apt .list or dnf .repo file, its signing key and where the key goes.
REPOSITORY_OPTIONS = dict(
    sources=dict(type="str", required=True),
    key=dict(type="str", required=True, no_log=False),
    key_path=dict(type="path", required=True, no_log=False),
)


class RepositoryError(Exception):
    """The repository cannot be used: ``kind`` is ``signature``, ``unreachable`` or ``other``."""

    def __init__(self, kind, message, output=""):
        super(RepositoryError, self).__init__(message)
        self.kind = kind
        self.output = output


# Read after the node's own configuration (apt's -c): the node's hooks do not run for the probe (Debian's docker images
# clean /var/cache/apt after every update, Ubuntu refreshes its command-not-found database); everything else of the
# node's configuration (a proxy, timeouts) applies.
APT_PROBE_CONF = """#clear APT::Update::Pre-Invoke;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
#clear APT::Update::Post-Invoke-Stats;
"""


def apt_options(scratch):
    """apt-get / apt-cache options that keep every read and write of the probe in ``scratch``."""
    return ["-c", os.path.join(scratch, "apt.conf"),
            "-o", "Dir::Etc::SourceList=%s" % os.path.join(scratch, "sources.list"),
            "-o", "Dir::Etc::SourceParts=%s" % os.path.join(scratch, "parts"),
            "-o", "Dir::Etc::Preferences=%s" % os.path.join(scratch, "preferences"),
            "-o", "Dir::Etc::PreferencesParts=%s" % os.path.join(scratch, "parts"),
            "-o", "Dir::State::Lists=%s" % os.path.join(scratch, "lists"),
            "-o", "Dir::Cache=%s" % os.path.join(scratch, "cache"),
            "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
            # the scratch directory is root's, mode 0700: no download as the unprivileged _apt user
            "-o", "APT::Sandbox::User=root",
            "-o", "Acquire::Retries=0", "-o", "Acquire::http::Timeout=30", "-o", "Acquire::https::Timeout=30"]


def apt_commands(apt_get, apt_cache, scratch, names):
    """(update, madison) argument lists."""
    opts = apt_options(scratch)
    return ([apt_get, "-q"] + opts + ["update"], [apt_cache] + opts + ["madison"] + list(names))


def dnf_commands(dnf, scratch, names):
    """(makecache, list) argument lists: only the repositories of the scratch directory, its own cache."""
    opts = ["-y", "--noplugins", "--setopt=reposdir=%s" % os.path.join(scratch, "repos"),
            "--setopt=cachedir=%s" % os.path.join(scratch, "cache"), "--setopt=keepcache=0",
            "--setopt=skip_if_unavailable=0", "--setopt=retries=1", "--setopt=timeout=30"]
    return ([dnf, "-q"] + opts + ["makecache"],
            [dnf, "-q"] + opts + ["list", "--showduplicates", "--available"] + list(names))


def problems(text):
    """apt-get's error and warning lines (``E:``, ``W:``, ``Err:``) in its output."""
    return [line.strip() for line in text.splitlines()
            if line.startswith(("E:", "W:", "Err:", "Error:", "Errors during downloading metadata"))
            or "GPG" in line]


def classify(lines):
    """``unreachable`` (a connection or fetch failed: checked first, since apt may then also say the repository is
    not signed), ``signature`` or ``other``."""
    text = "\n".join(lines)
    if any(word in text for word in _UNREACHABLE):
        return "unreachable"
    if any(word in text for word in _SIGNATURE):
        return "signature"
    return "other"


def parse_madison(out, names):
    """{name: [versions, as listed]} from ``apt-cache madison``'s ``name | version | source`` lines."""
    found = dict((n, []) for n in names)
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and parts[0] in found and parts[1] not in found[parts[0]]:
            found[parts[0]].append(parts[1])
    return found


def parse_dnf_list(out, names):
    """{name: [version-release, ...]} from ``dnf list --showduplicates``' ``name.arch  [epoch:]ver-rel  repo``."""
    found = dict((n, []) for n in names)
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 3 or "." not in parts[0]:
            continue
        name = parts[0].rsplit(".", 1)[0]
        evr = parts[1]
        if evr.startswith("0:"):
            evr = evr[2:]
        if name in found and evr not in found[name]:
            found[name].append(evr)
    return found


def scratch_sources(sources, key_path, scratch_key):
    """The repository definition as it will be written, pointed at the scratch copy of its key."""
    return sources.replace(key_path, scratch_key) if key_path else sources


def probe(module, manager, sources, key, key_path, names):
    """{name: [available versions]} from the repository ``sources`` (the text of the .list or .repo file) signed
    by ``key`` (armored), read into a private scratch directory. Raises RepositoryError."""
    scratch = tempfile.mkdtemp(prefix="gpuops-repo-")
    env = {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}
    try:
        for sub in ("parts", "lists/partial", "cache/archives/partial", "repos"):
            os.makedirs(os.path.join(scratch, sub))
        scratch_key = os.path.join(scratch, "key.asc")
        with open(scratch_key, "w") as handle:
            handle.write(key or "")
        os.chmod(scratch_key, 0o644)
        text = scratch_sources(sources, key_path, scratch_key)
        if manager == "apt":
            with open(os.path.join(scratch, "sources.list"), "w") as handle:
                handle.write(text)
            with open(os.path.join(scratch, "apt.conf"), "w") as handle:
                handle.write(APT_PROBE_CONF)
            update, madison = apt_commands(module.get_bin_path("apt-get", required=True),
                                           module.get_bin_path("apt-cache", required=True), scratch, names)
            rc, out, err = module.run_command(update, environ_update=env)
            found = problems(out + "\n" + err)
            if rc != 0 or found:
                raise RepositoryError(classify(found), "; ".join(found) or "apt-get update exited %d" % rc, out + err)
            rc, out, err = module.run_command(madison, environ_update=env)
            if rc != 0:
                raise RepositoryError("other", "apt-cache madison exited %d: %s" % (rc, err.strip()), out + err)
            return parse_madison(out, names)
        with open(os.path.join(scratch, "repos", "probe.repo"), "w") as handle:
            handle.write(text)
        makecache, listing = dnf_commands(module.get_bin_path("dnf", required=True), scratch, names)
        rc, out, err = module.run_command(makecache, environ_update=env)
        if rc != 0:
            found = problems(out + "\n" + err) or [(err or out).strip()]
            raise RepositoryError(classify(found), "; ".join(found), out + err)
        rc, out, err = module.run_command(listing, environ_update=env)
        # dnf list exits 1 when no package matches: that is an answer (no version), not a failure
        if rc not in (0, 1):
            raise RepositoryError("other", "dnf list exited %d: %s" % (rc, err.strip()), out + err)
        return parse_dnf_list(out, names)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def file_command(manager, path, dpkg_deb="dpkg-deb", rpm="rpm"):
    """The read-only command that says a package file's name and version."""
    if manager == "apt":
        return [dpkg_deb, "--showformat=${Package}\\t${Version}\\n", "--show", path]
    return [rpm, "-qp", "--nosignature", "--qf", "%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n", path]


def parse_file(manager, out):
    """(name, version) from file_command's output, or None."""
    line = out.strip().splitlines()[-1] if out.strip() else ""
    name, tab, version = line.partition("\t")
    if not tab:
        return None
    if manager == "dnf" and version.startswith("0:"):
        version = version[2:]
    return name.strip(), version.strip()
