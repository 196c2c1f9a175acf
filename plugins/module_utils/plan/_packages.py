# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Packages pinned at one version (PRIVATE to gpuops.nvidia): what the node's package database says, and what a
pin would change.

Used by gpuops.nvidia.gpu_node_plan (its ``packages`` check) and gpuops.nvidia.package_plan (the
container_toolkit role's read and plan). The reads are one read-only command per package manager, run as an argument
list: ``dpkg-query -W -f`` on the Debian family, ``rpm -q --qf`` on the RHEL family. Both honour the environment of
the task (DPKG_ROOT / DPKG_ADMINDIR for dpkg, a throwaway root in the tests).

Version order is the package manager's own: Debian's (dpkg's verrevcmp: epoch, upstream, revision; ``~`` sorts
before anything) and RPM's (rpmvercmp: epoch, version, release; ``~`` before anything, ``^`` after the base). The
two functions below are ports of those algorithms (the Python bindings, python-apt's ``apt_pkg.version_compare``
and rpm's ``labelCompare``, are not on every node's Python); tests/unit/plugins/module_utils/test_packages.py holds
them to the real ``dpkg --compare-versions``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MANAGERS = ("apt", "dnf")
# what the package database must say for "installed" (dpkg's Status field: want, error flag, status)
_DPKG_FORMAT = "${Package}\\t${Version}\\t${Status}\\n"
_RPM_FORMAT = "%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]*$")
VERSION_RE = re.compile(r"^[0-9][A-Za-z0-9.+~^_:-]*$")


class PackageError(Exception):
    """A read of the package database that failed (not: a package that is not installed)."""


def query_command(manager, names, binary):
    """The read-only command listing ``names`` with their versions (and, for dpkg, selection state)."""
    if manager == "apt":
        return [binary, "-W", "-f", _DPKG_FORMAT.replace("\\t", "\t").replace("\\n", "\n")] + list(names)
    if manager == "dnf":
        return [binary, "-q", "--qf", _RPM_FORMAT.replace("\\t", "\t").replace("\\n", "\n")] + list(names)
    raise PackageError("unknown package manager %r (valid: %s)" % (manager, ", ".join(MANAGERS)))


def query_binary(manager):
    return "dpkg-query" if manager == "apt" else "rpm"


def parse_query(manager, names, rc, out, err):
    """{name: {"version": installed version or None, "held": bool, "status": text}} for every name; raises
    PackageError when the tool failed for another reason than packages it does not know."""
    found = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) != (3 if manager == "apt" else 2) or fields[0] not in names:
            continue        # rpm's "package X is not installed" lines, other architectures' names
        if manager == "apt":
            name, version, status = fields
            words = status.split()
            installed = len(words) == 3 and words[2] == "installed"
            entry = {"version": version if installed else None, "held": bool(words) and words[0] == "hold",
                     "status": status}
            if name in found and found[name]["version"] is not None and not installed:
                continue    # a second (multi-arch) line that is not installed does not hide the installed one
        else:
            name, evr = fields
            epoch, dummy, vr = evr.partition(":")
            entry = {"version": vr if epoch in ("", "0") else evr, "held": False, "status": "installed"}
        found[name] = entry
    if rc != 0:
        unknown = [n for n in names if n not in found]
        # dpkg-query exits 1 and rpm with the count of missing names when some are not installed; anything else
        # (no database, a broken tool) is not an answer
        expected = (manager == "apt" and rc == 1) or (manager == "dnf" and 0 < rc <= len(unknown))
        if not unknown or not expected:
            raise PackageError("%s exited %d: %s" % (query_binary(manager), rc, (err or out).strip()))
    for name in names:
        found.setdefault(name, {"version": None, "held": False, "status": "not installed"})
    return found


def read_installed(module, manager, names):
    """The node's package database for ``names`` (see parse_query); PackageError when it cannot be read."""
    binary = module.get_bin_path(query_binary(manager))
    if binary is None:
        raise PackageError("%s not found: this node has no %s package database (package manager %s declared)"
                           % (query_binary(manager), "dpkg" if manager == "apt" else "rpm", manager))
    rc, out, err = module.run_command(query_command(manager, names, binary))
    return parse_query(manager, names, rc, out, err)


# ------------------------------------------------------------------------------------------------ version order
def _digit(c):
    return "0" <= c <= "9" and c != ""


def _alpha(c):
    return "a" <= c <= "z" or "A" <= c <= "Z"


def _dpkg_order(c):
    if c == "" or _digit(c):
        return 0
    if _alpha(c):
        return ord(c)
    if c == "~":
        return -1
    return ord(c) + 256


def _verrevcmp(a, b):
    """dpkg's verrevcmp (lib/dpkg/version.c), character for character."""
    i = j = 0
    na, nb = len(a), len(b)

    def at(s, k):
        return s[k] if k < len(s) else ""

    while i < na or j < nb:
        first_diff = 0
        while (i < na and not _digit(a[i])) or (j < nb and not _digit(b[j])):
            ac, bc = _dpkg_order(at(a, i)), _dpkg_order(at(b, j))
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < na and a[i] == "0":
            i += 1
        while j < nb and b[j] == "0":
            j += 1
        while i < na and j < nb and _digit(a[i]) and _digit(b[j]):
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < na and _digit(a[i]):
            return 1
        if j < nb and _digit(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_evr(version):
    """(epoch, version, release) of ``[epoch:]version[-release]``: Debian's upstream-revision and RPM's
    version-release split the same way (the last dash)."""
    epoch, colon, rest = version.partition(":")
    if not colon:
        epoch, rest = "0", version
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch or 0), upstream, revision


def deb_compare(a, b):
    """-1, 0 or 1: Debian version order (dpkg --compare-versions)."""
    ea, ua, ra = _split_evr(a)
    eb, ub, rb = _split_evr(b)
    if ea != eb:
        return -1 if ea < eb else 1
    r = _verrevcmp(ua, ub) or _verrevcmp(ra, rb)
    return (r > 0) - (r < 0)


def _rpmvercmp(a, b):
    """rpm's rpmvercmp (rpmio/rpmvercmp.c)."""
    if a == b:
        return 0
    i = j = 0
    na, nb = len(a), len(b)

    def alnum(c):
        return _digit(c) or _alpha(c)

    while i < na or j < nb:
        while i < na and not alnum(a[i]) and a[i] not in "~^":
            i += 1
        while j < nb and not alnum(b[j]) and b[j] not in "~^":
            j += 1
        ca, cb = a[i] if i < na else "", b[j] if j < nb else ""
        if ca == "~" or cb == "~":
            if ca != "~":
                return 1
            if cb != "~":
                return -1
            i += 1
            j += 1
            continue
        if ca == "^" or cb == "^":
            if not ca:
                return -1
            if not cb:
                return 1
            if ca != "^":
                return 1
            if cb != "^":
                return -1
            i += 1
            j += 1
            continue
        if not (ca and cb):
            break
        si, sj = i, j
        if _digit(ca):
            while i < na and _digit(a[i]):
                i += 1
            while j < nb and _digit(b[j]):
                j += 1
            isnum = True
        else:
            while i < na and _alpha(a[i]):
                i += 1
            while j < nb and _alpha(b[j]):
                j += 1
            isnum = False
        one, two = a[si:i], b[sj:j]
        if not one:
            return -1
        if not two:
            return 1 if isnum else -1
        if isnum:
            one, two = one.lstrip("0"), two.lstrip("0")
            if len(one) != len(two):
                return 1 if len(one) > len(two) else -1
        if one != two:
            return 1 if one > two else -1
    ra, rb = a[i:] if i < na else "", b[j:] if j < nb else ""
    if not ra and not rb:
        return 0
    return -1 if not ra else 1


def rpm_compare(a, b):
    """-1, 0 or 1: RPM [epoch:]version-release order."""
    ea, va, ra = _split_evr(a)
    eb, vb, rb = _split_evr(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _rpmvercmp(va, vb) or (_rpmvercmp(ra, rb) if ra and rb else 0)


def compare(manager, a, b):
    return deb_compare(a, b) if manager == "apt" else rpm_compare(a, b)


# ------------------------------------------------------------------------------------------------ plan
def plan(manager, names, version, installed):
    """[{name, installed, version, action: none | install | upgrade | downgrade}] for the pin."""
    out = []
    for name in names:
        have = installed.get(name, {}).get("version")
        if have is None:
            action = "install"
        else:
            order = compare(manager, have, version)
            action = "none" if order == 0 else ("upgrade" if order < 0 else "downgrade")
        out.append({"name": name, "installed": have, "version": version, "action": action})
    return out


def reasons(entries, installed):
    """Why the node's packages are not as declared (the node plan's step reasons): each entry {name, version,
    manager, hold}."""
    out = []
    for entry in entries:
        seen = installed.get(entry["name"]) or {"version": None, "held": False, "status": "not installed"}
        if seen["version"] is None:
            out.append("package %s is %s, declared %s" % (entry["name"], seen["status"], entry["version"]))
        elif compare(entry["manager"], seen["version"], entry["version"]) != 0:
            out.append("package %s is at %s, declared %s" % (entry["name"], seen["version"], entry["version"]))
        elif entry.get("hold") and entry["manager"] == "apt" and not seen["held"]:
            out.append("package %s is not held (dpkg selection %s)" % (entry["name"], seen["status"].split()[0]))
    return out
