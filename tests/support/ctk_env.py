"""Test helpers for containerd_runtime: the nvidia-ctk STAND-IN and Debian's real containerd binary.

The nvidia-ctk used by the tests is tests/support/nvidia_ctk_standin.py, a stand-in that reproduces the real
tool's documented outputs (shared/reference/containerd.md); it is NOT NVIDIA's nvidia-ctk. containerd is the
real binary from Debian's package, unpacked into tools/ by scripts/setup.d/containerd.sh.
"""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "tests", "support", "nvidia_ctk_standin.py")
CONTAINERD = os.path.join(ROOT, "tools", "bin", "containerd")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "containerd")


def fixture_text(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def real_ctk_text(name):
    """tests/fixtures/nvidia-ctk/NAME: an input, or what the REAL nvidia-ctk wrote (the bytes below the recording's
    ``# ---`` header line)."""
    with open(os.path.join(ROOT, "tests", "fixtures", "nvidia-ctk", name)) as handle:
        text = handle.read()
    marker = "# ---\n"
    return text[text.index(marker) + len(marker):] if marker in text else text


def require_containerd():
    """The real containerd binary; fails (never skips) when setup did not install it."""
    if not (os.path.isfile(CONTAINERD) and os.access(CONTAINERD, os.X_OK)):
        pytest.fail("containerd is missing at %s: run `make setup` (scripts/setup.d/containerd.sh)" % CONTAINERD)
    return CONTAINERD


def ctk_wrapper(directory, version="1.20.0", log=None):
    """Write an executable ``nvidia-ctk`` (the stand-in pinned to ``version``) into ``directory``."""
    os.makedirs(str(directory), exist_ok=True)
    path = os.path.join(str(directory), "nvidia-ctk")
    lines = ["#!/bin/sh", "# STAND-IN for nvidia-ctk (tests only), not NVIDIA's tool",
             "NVIDIA_CTK_STANDIN_VERSION=%s" % version, "export NVIDIA_CTK_STANDIN_VERSION"]
    if log:
        lines += ["NVIDIA_CTK_STANDIN_CALL_LOG=%s" % log, "export NVIDIA_CTK_STANDIN_CALL_LOG"]
    lines.append('exec "%s" "%s" "$@"' % (sys.executable, STANDIN))
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.chmod(path, 0o755)
    return path


def run_standin(args, version="1.20.0"):
    env = dict(os.environ, NVIDIA_CTK_STANDIN_VERSION=version)
    return subprocess.run([sys.executable, STANDIN] + list(args), env=env, capture_output=True, text=True, check=False)


def containerd_dump(config_path):
    """``containerd --config FILE config dump`` with the real binary -> CompletedProcess."""
    return subprocess.run([require_containerd(), "--config", str(config_path), "config", "dump"],
                          capture_output=True, text=True, check=False)


def snapshot(directory):
    """{relative path: (bytes, mtime_ns, mode, uid, gid)} of every file under ``directory``."""
    out = {}
    for dirpath, _dirs, files in os.walk(str(directory)):
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, str(directory))] = (handle.read(), st.st_mtime_ns, st.st_mode,
                                                              st.st_uid, st.st_gid)
    return out


def copy_fixture(name, dest):
    os.makedirs(os.path.dirname(str(dest)), exist_ok=True)
    shutil.copyfile(os.path.join(FIXTURES, name), str(dest))
    return str(dest)
