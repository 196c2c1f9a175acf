"""scripts/paths_check.py (`make check`, issue 36): a tracked file that names a directory of the machine it was
written on is found, with the file, the line and what to do instead; the user's own home (~, $HOME) is not."""
import importlib.util
import os
import subprocess
import sys

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("paths_check", os.path.join(ROOT, "scripts", "paths_check.py"))
paths_check = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(paths_check)

# Assembled from pieces so that this file passes the check it tests.
HOME = "/" + "root/.pyenv/versions/3.9.18/bin/python3.9"
USER_HOME = "/" + "home/dev/src/gpuops"
WORK = "/" + "work/main/build/nct/nvidia-ctk"
MIRROR = "git clone /tmp/.mirror/NVIDIA" + "+nvidia-container-toolkit/repo x"


def test_machine_paths_are_found_with_line_and_kind():
    text = "\n".join(["fine: ~/.kube/config and $HOME/.ansible", "python = " + HOME, "ok /tmp/nct-src",
                      "cd " + USER_HOME, "-o " + WORK, MIRROR, "relative build/nct/nvidia-ctk"])
    found = [(number, what) for _path, number, what, _text in paths_check.findings("f.md", text)]
    assert found == [(2, "a home directory"), (4, "a home directory"), (5, "the workspace"),
                     (6, "a local mirror of a repository")]


def test_a_path_inside_another_path_or_a_url_is_not_a_machine_path():
    # a URL's path, a relative path and system paths (assembled: the repository's own check reads this file too)
    text = "\n".join(["https://example.invalid" + "/wo" + "rk/x", "src" + "/wo" + "rk/x", "/var/lib/kubelet/pods",
                      "/usr/local/bin/python3.9"])
    assert paths_check.findings("f.md", text) == []


def test_the_command_fails_naming_the_file_and_passes_on_the_repository(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("build it into %s\n" % WORK)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paths_check.py"), str(bad)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "%s:1: names the workspace" % bad in proc.stdout and "public repository at a tag or commit" in proc.stdout
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paths_check.py")], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout
