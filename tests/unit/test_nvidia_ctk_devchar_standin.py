"""The nvidia-ctk STAND-IN's `system create-dev-char-symlinks` (tests/support/nvidia_ctk_devchar.py), held to what the
REAL command of NVIDIA/nvidia-container-toolkit v1.20.0 (commit 5505e2f9, built from source) did on the same simulated
roots (tests/support/dev_char_tree.py): tests/fixtures/nvidia-ctk/dev-char-symlinks-real.json, recorded by
tests/support/dev_char_reading.py (docs/readings/dev-char-symlinks-real-ctk.md). A mismatch means the stand-in is
wrong. The real command ran as root in a chroot on device nodes made with mknod; the stand-in runs unprivileged on
the same tree with placeholder files and the links under ROOT/dev/char."""
import json
import os
import subprocess
import sys

import pytest

from tests.support import ctk_env, dev_char_tree

RECORDED = os.path.join(ctk_env.ROOT, "tests", "fixtures", "nvidia-ctk", "dev-char-symlinks-real.json")


def recorded():
    with open(RECORDED) as handle:
        return json.load(handle)


def standin(root, args):
    env = dict(os.environ, GPUOPS_SIMULATED_ROOT=str(root))
    return subprocess.run([sys.executable, ctk_env.STANDIN, "system", "create-dev-char-symlinks"] + list(args)
                          + ["--dev-char-path=%s" % os.path.join(str(root), "dev", "char")],
                          capture_output=True, text=True, check=False, env=env)


def test_the_recording_is_the_real_tool_at_the_cited_commit():
    version = recorded()["nvidia_ctk_version"]
    assert version == ["NVIDIA Container Toolkit CLI version 1.20.0",
                       "commit: 5505e2f94d9aaa08561490db974ba3cd676af209"]
    assert sorted(recorded()["cases"]) == sorted(dev_char_tree.CASES)


@pytest.mark.parametrize("case", sorted(dev_char_tree.CASES))
def test_standin_creates_what_the_real_command_created(tmp_path, case):
    real = recorded()["cases"][case]
    root = tmp_path / "root"
    dev_char_tree.prepare(str(root), case, nodes="file")
    _change, args, runs = dev_char_tree.CASES[case]
    assert args == real["args"] and runs == len(real["runs"])
    for run in real["runs"]:
        result = standin(root, args)
        messages = [line.replace(str(root), "") for line in dev_char_tree.messages(result.stderr)]
        assert (result.returncode, result.stdout) == (run["rc"], run["stdout"]), result.stderr
        assert messages == run["messages"]
    dev_char = os.path.join(str(root), "dev", "char")
    assert dev_char_tree.links(dev_char) == real["links"]
    mode = ("%o" % (os.stat(dev_char).st_mode & 0o7777)) if os.path.isdir(dev_char) else None
    assert mode == real["dev_char_mode"]


def test_recorded_facts_the_collection_relies_on():
    cases = recorded()["cases"]
    every = cases["create-all"]["links"]
    # --create-all: 4 control nodes, MIG config/monitor, and per GPU its node and its 15 GPU instances x (1 + 8 CIs)
    assert len(every) == 4 + 2 + 2 * (1 + 15 * 9)
    assert every["195:254"] == "/dev/nvidia-modeset"          # linked although the tree has no nvidia-modeset
    assert every["195:1"] == "/dev/nvidia1" and every["241:272"] == "/dev/nvidia-caps/nvidia-cap272"
    # an existing name is never replaced, whatever it points to; a second run changes nothing and exits 0
    assert cases["links-present-wrong-and-relative"]["links"]["195:0"] == "/dev/null"
    assert cases["links-present-wrong-and-relative"]["links"]["195:1"] == "../nvidia1"
    assert cases["create-all-twice"]["links"] == every and [r["rc"] for r in cases["create-all-twice"]["runs"]] == [0, 0]
    # the dry run names the links in the log and makes nothing
    assert cases["create-all-dry-run"]["links"] is None
    assert len(cases["create-all-dry-run"]["runs"][0]["messages"]) == len(every)
    # without --create-all: the nodes that exist, NVSwitch nodes left out
    assert sorted(cases["existing"]["links"]) == ["195:0", "195:1", "195:255", "238:0", "238:1", "241:1", "241:2"]
