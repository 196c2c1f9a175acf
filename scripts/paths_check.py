"""Fails when a tracked file names a directory of the machine it was written on.

A home directory (root's, or one under /home or /Users), the workspace (the folder `work` at the root), a fetched
repository's local mirror (<owner>+<name>/repo) or a session's job folder means nothing on a reader's machine or in
CI. Sources
are named as public repositories at a tag or commit ("NVIDIA/nvidia-container-toolkit at v1.20.0"), instructions use
relative or temporary paths (/tmp/..., build/...), and programs are found by name (PATH, `pyenv which`).
`~/.kube/config` and `$HOME/...` are not flagged: they name the reader's own home, not the writer's.

Usage: python scripts/paths_check.py [FILE ...]   (default: every file `git ls-files` lists). Exit 1 on a finding.
Part of `make check`.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Written in pieces so that this file does not match itself.
_START = r"(?<![\w.~$/-])"
PATTERNS = [
    (re.compile(_START + "/" + r"(?:root|home/[^/\s\"'`]+|Users/[^/\s\"'`]+)/"), "a home directory"),
    (re.compile(_START + "/" + r"work/"), "the workspace"),
    (re.compile(r"\." + r"mirror/[\w.-]+\+[\w.-]+"), "a local mirror of a repository"),
    (re.compile("/tmp/" + r"bash_jobs"), "a session's job folder"),
]
ADVICE = ("name a source as a public repository at a tag or commit, an instruction's path as a relative or temporary "
          "one, a program by name (PATH, `pyenv which`)")


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [name for name in out.decode("utf-8").split("\0") if name]


def findings(path, text):
    """(path, line number, what, the matched text) for each line of ``text`` that names a machine's directory."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in PATTERNS:
            match = pattern.search(line)
            if match:
                found.append((path, number, what, match.group(0)))
    return found


def check(root, names):
    found = []
    for name in names:
        full = os.path.join(root, name)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        with open(full, "rb") as handle:
            data = handle.read()
        if b"\0" in data:
            continue                                     # binary
        found.extend(findings(name, data.decode("utf-8", errors="replace")))
    return found


def main(argv=None):
    names = list(argv if argv is not None else sys.argv[1:]) or tracked_files(ROOT)
    found = check(ROOT, names)
    for path, number, what, text in found:
        print("%s:%d: names %s of the machine it was written on (%s): %s" % (path, number, what, text, ADVICE))
    if found:
        print("paths-check: %d line(s) name a directory of the machine they were written on" % len(found))
        return 1
    print("paths-check: %d tracked files, none names a directory of the machine it was written on" % len(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
