"""STAND-IN for rpm and dnf (NOT the real tools: neither can be installed on the machines this project is tested on),
for the dnf path of the modules that install packages (dcgm_host_engine). Run as ``rpm`` or ``dnf`` (the name it is
called by: see ``install``), it keeps an RPM database and a repository in one JSON file, ``$GPUOPS_RPM_STANDIN``:

    {"installed": {name: "[epoch:]version-release"},
     "available": {name: {"[epoch:]version-release": {relative path: file text}}},
     "calls": [argv, ...]}

and answers the few commands the modules run, in the real tools' shapes:
- ``rpm -q --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n' NAME...``: a line per installed package, ``package NAME
  is not installed`` for the others, exit status the count of those (rpm's own);
- ``rpm -qp [--nosignature] --qf FORMAT FILE``: a package file of this stand-in is a JSON object {"name", "evr"};
  anything else: ``error: FILE: not an rpm package``, exit 1;
- ``dnf install -y SPEC...``: each SPEC a package file or ``NAME-[EPOCH:]VERSION-RELEASE`` (dnf's NEVR form) found in
  ``available``: all installed in one transaction (an earlier version replaced, as ``dnf install`` of an exact version
  does, a lower one included), their files written under ``$GPUOPS_SIMULATED_ROOT``; a SPEC matching nothing:
  ``No match for argument`` and exit 1, nothing installed;
- ``dnf remove -y NAME...``: removes them and their files.
Every call is recorded in ``calls``."""
import json
import os
import sys

_RPM_QF = "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"


def install(bindir):
    """Put ``rpm`` and ``dnf`` commands into ``bindir`` (made) that run this stand-in; returns bindir."""
    os.makedirs(str(bindir), exist_ok=True)
    for tool in ("rpm", "dnf"):
        path = os.path.join(str(bindir), tool)
        with open(path, "w") as handle:
            handle.write("#!%s\n# TEST STAND-IN for %s (tests/support/rpm_dnf_standin.py), NOT the real tool\n"
                         "import sys\nsys.path.insert(0, %r)\nimport rpm_dnf_standin\n"
                         "sys.exit(rpm_dnf_standin.main(%r))\n"
                         % (sys.executable, tool, os.path.dirname(os.path.abspath(__file__)), tool))
        os.chmod(path, 0o755)
    return str(bindir)


def _epochnum(evr):
    return evr if ":" in evr else "0:" + evr


def _load(path):
    with open(path) as handle:
        return json.load(handle)


def _files(state, name, evr, root, write):
    for rel, text in state["available"].get(name, {}).get(evr, {}).items():
        target = os.path.join(root, rel)
        if write:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as handle:
                handle.write(text)
            os.chmod(target, 0o755 if "/bin/" in rel else 0o644)
        elif os.path.exists(target):
            os.remove(target)


def _rpm(state, args):
    if args[:1] == ["-qp"]:
        path = args[-1]
        try:
            package = _load(path)
            print("%s\t%s" % (package["name"], _epochnum(package["evr"])))
            return 0
        except (IOError, OSError, ValueError, KeyError, TypeError):
            sys.stderr.write("error: %s: not an rpm package\n" % path)
            return 1
    if args[:3] != ["-q", "--qf", _RPM_QF]:
        sys.stderr.write("rpm stand-in: unexpected arguments %r\n" % (args,))
        return 2
    missing = 0
    for name in args[3:]:
        if name in state["installed"]:
            sys.stdout.write("%s\t%s\n" % (name, _epochnum(state["installed"][name])))
        else:
            print("package %s is not installed" % name)
            missing += 1
    return missing


def _match(state, spec):
    """(name, evr) of a NAME-[EPOCH:]VERSION-RELEASE spec in the repository, or None."""
    for name, versions in state["available"].items():
        for evr in versions:
            if spec in ("%s-%s" % (name, evr), "%s-%s" % (name, evr.split(":", 1)[-1])):
                return name, evr
    return None


def _dnf(state, args, root):
    verb, rest = args[0], [a for a in args[1:] if not a.startswith("-")]
    if verb == "install":
        chosen = []
        for spec in rest:
            if spec.startswith("/"):
                try:
                    package = _load(spec)
                    chosen.append((package["name"], package["evr"]))
                except (IOError, OSError, ValueError, KeyError):
                    print("Error: %s is not a package file" % spec)
                    return 1
                continue
            found = _match(state, spec)
            if found is None:
                print("No match for argument: %s\nError: Unable to find a match: %s" % (spec, spec))
                return 1
            chosen.append(found)
        for name, evr in chosen:
            if name in state["installed"]:
                _files(state, name, state["installed"][name], root, False)
            state["installed"][name] = evr
            _files(state, name, evr, root, True)
        return 0
    if verb == "remove":
        for name in rest:
            if name in state["installed"]:
                _files(state, name, state["installed"].pop(name), root, False)
        return 0
    sys.stderr.write("dnf stand-in: unexpected arguments %r\n" % (args,))
    return 2


def main(tool):
    path = os.environ["GPUOPS_RPM_STANDIN"]
    state = _load(path)
    state["calls"].append([tool] + sys.argv[1:])
    root = os.environ.get("GPUOPS_SIMULATED_ROOT", "/nonexistent")
    if tool == "rpm":
        rc = _rpm(state, sys.argv[1:])
    else:
        rc = _dnf(state, sys.argv[1:], root)
    with open(path + ".tmp", "w") as handle:
        json.dump(state, handle)
    os.replace(path + ".tmp", path)
    return rc


if __name__ == "__main__":
    sys.exit(main(os.path.basename(sys.argv[0])))
