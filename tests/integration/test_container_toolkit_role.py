"""The container_toolkit role with Debian's real apt and dpkg, against a local repository built by the test (packages
made with dpkg-deb, nvidia-ctk's stand-in inside, signed with a throwaway gpg key: tests/support/apt_rig.py), each
node installing into its own throwaway root (APT_CONFIG, DPKG_ROOT). This machine's own package set is checked to be
unchanged around the tests. Scenarios share ansible-playbook runs (one host each) to keep the time down.

What a user would notice: check mode reports the change and writes nothing; the apply installs all four packages at
the pin, held, with the repository's key, list and pin as declared; a second run changes nothing and the node plan
finds no work; a new pin upgrades; an older pin is refused (nothing changes); an unknown distribution, an unsigned
repository, a key that does not sign it, a mirror that does not answer, a version the repository lacks and files
that are not the pinned packages are each refused naming the node, with nothing written or installed; the
air-gapped path installs from package files; the dnf branch in check mode (recording stand-ins for rpm and dnf); and
site.yml converges a fresh node in one run (toolkit, then containerd's runtime with the installed nvidia-ctk), a
second run changing nothing."""
import json
import os
import tempfile
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from tests.integration.site_helpers import Site
from tests.support import apt_rig
from tests.support.ansible_run import first_failure, run_playbook

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

OLD, NEW, MISSING = "1.18.1-1", "1.20.0-1", "1.19.0-1"

PLAY = """
- name: The role, then the node plan on its declaration
  hosts: all
  gather_facts: false
  environment: "{{ gpuops_environment }}"
  tasks:
    - name: Pose as another distribution (a host fact, as setup would have gathered it)
      when: fake_os_family is defined
      ansible.builtin.set_fact:
        os_family: "{{ fake_os_family }}"
        cacheable: true
    - name: Apply the role
      ansible.builtin.include_role:
        name: gpuops.nvidia.container_toolkit
    - name: Plan the node from the declaration
      gpuops.nvidia.gpu_node_plan:
        files: "{{ checks.files }}"
        packages: "{{ checks.packages }}"
      vars:
        checks: "{{ [['container_toolkit', __container_toolkit_declared]] | gpuops.nvidia.node_plan_checks }}"
"""


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    before = apt_rig.host_installed()
    made = apt_rig.Rig(tmp_path_factory.mktemp("rig"), (OLD, NEW))
    try:
        yield made
    finally:
        made.close()
    assert apt_rig.host_installed() == before, "this machine's own package set changed"


def node_vars(tmp_path, name, rig, **extra):
    root = apt_rig.Root(tmp_path / name)
    state = str(tmp_path / ("%s.json" % name))
    SimulatedBackend(state, shape="hgx-h200")
    out = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
           "gpuops_environment": dict(root.env, GPUOPS_SIMULATED_GPUS=state),
           "container_toolkit_package_manager": "apt", "container_toolkit_version": OLD,
           "container_toolkit_repo_url": rig.repo.url, "container_toolkit_repo_key": rig.key,
           "container_toolkit_root": root.path}
    out.update(extra)
    return root, out


def play(tmp_path, hosts, check=False, diff=False, **extra):
    """Run PLAY on ``hosts`` ({name: vars}); returns {host: {task name: result}} and the process."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    data, proc = run_playbook(str(playbook), inventory=str(inventory), check=check, diff=diff, extra_vars=extra or None)
    assert data is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = dict((h, {}) for h in hosts)
    for play_data in data["plays"]:
        for task in play_data["tasks"]:
            for host, res in task["hosts"].items():
                out[host].setdefault(task["task"]["name"].split(" : ", 1)[-1], res)   # without the role's name
    return out, data, proc


def changed(data, host):
    return data["stats"][host]["changed"]


REPORT = "Report the package changes (check mode - nothing is installed, and the repository may not be configured yet)"
ALL_OLD_HELD = dict((n, (OLD, "hold ok installed")) for n in apt_rig.PACKAGES)


def dnf_host(tmp_path, rig):
    """A RHEL-family node for check mode: recording stand-ins for rpm and dnf on its PATH (none of the packages
    installed; the repository has OLD and NEW). Returns (root, vars, the stand-ins' call log)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = str(tmp_path / "calls.log")
    for tool in ("rpm", "dnf"):
        path = bindir / tool
        path.write_text(RPM_DNF_STANDIN % {"python": sys.executable, "tool": tool, "log": log, "versions": [OLD, NEW]})
        path.chmod(0o755)
    root, hv = node_vars(tmp_path, "rhel", rig, container_toolkit_package_manager="dnf", container_toolkit_version=NEW,
                         container_toolkit_repo_url="https://nvidia.github.io/libnvidia-container/stable")
    hv["gpuops_environment"]["PATH"] = "%s:%s" % (bindir, os.environ["PATH"])
    for folder in ("etc/pki/rpm-gpg", "etc/yum.repos.d"):       # as on a RHEL-family node
        os.makedirs(os.path.join(root.path, folder))
    return root, hv, log


def check_dnf(res, root, log):
    """The dnf branch in check mode: the repo file NVIDIA documents (the key read from the node), the install reported,
    nothing written, and the commands package_plan built (the rpm query; dnf confined to a scratch directory)."""
    written = res["Create the declared directory of the package files, write the declared repository key and definition"]
    diff = [d for d in written["diff"] if d["after_header"].endswith("nvidia-container-toolkit.repo")][0]
    for line in ("[nvidia-container-toolkit]", "baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch",
                 "repo_gpgcheck=1", "gpgcheck=0", "enabled=1", "sslverify=1",
                 "gpgkey=file://%s/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit" % root.path):
        assert line + "\n" in diff["after"], (line, diff["after"])
    assert "nvidia-container-toolkit: not installed -> %s (install)" % NEW in res[REPORT]["msg"], res[REPORT]
    assert root.files() == set()
    calls = [json.loads(line) for line in open(log)]
    assert calls[0][1:4] == ["-q", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"], calls[0]
    makecache = [c for c in calls if "makecache" in c][0]
    scratch = [a for a in makecache if a.startswith("--setopt=reposdir=")][0].split("=", 2)[2]
    assert scratch.startswith(tempfile.gettempdir()) and not os.path.exists(scratch), scratch
    assert "--setopt=cachedir=%s" % scratch.replace("/repos", "/cache") in makecache


def test_role_check_apply_again_upgrade_downgrade_bad_input_air_gapped_and_dnf(tmp_path, rig):
    """Three runs, one host per scenario: node1 through check mode, apply and apply again; "upgrade" and "downgrade",
    whose toolkit came another way (installed with dpkg alone, at OLD and at NEW), pinned at NEW and at OLD; beside
    them the nodes whose input is refused, the air-gapped node and the dnf node."""
    root, node1 = node_vars(tmp_path, "node1", rig)
    droot, dnf, log = dnf_host(tmp_path, rig)
    uroot, upgrade = node_vars(tmp_path, "upgrade", rig, container_toolkit_version=NEW)
    uroot.dpkg_install(rig.debs[(n, OLD)] for n in apt_rig.PACKAGES)
    nroot, downgrade = node_vars(tmp_path, "downgrade", rig)
    nroot.dpkg_install(rig.debs[(n, NEW)] for n in apt_rig.PACKAGES)
    not_held = dict((n, (NEW, "install ok installed")) for n in apt_rig.PACKAGES)

    # Check mode: the change is reported (files' diffs, the packages), nothing is written or installed.
    res, data, proc = play(tmp_path, {"node1": node1, "rhel": dnf, "upgrade": upgrade}, check=True, diff=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert changed(data, "node1") > 0 and changed(data, "rhel") > 0 and changed(data, "upgrade") > 0
    assert root.files() == set() and root.installed() == {}
    assert "nvidia-container-toolkit: not installed -> %s (install)" % OLD in res["node1"][REPORT]["msg"]
    assert res["node1"]["Plan the node from the declaration"]["steps"]["container_toolkit"], "check mode hid the work"
    assert "nvidia-container-toolkit: %s -> %s (upgrade)" % (OLD, NEW) in res["upgrade"][REPORT]["msg"]
    assert uroot.installed() == dict((n, (OLD, "install ok installed")) for n in apt_rig.PACKAGES)
    check_dnf(res["rhel"], droot, log)

    # Apply: the four packages at the pin, held; the key, the list and the pin as declared. Beside it, each bad input
    # is refused naming the node, nothing installed; the air-gapped node installs from package files; the toolkit
    # installed another way is upgraded to the pin and held, and the newer one is not downgraded.
    bad = {
        "unsigned": dict(container_toolkit_repo_url=rig.unsigned.url),
        "wrong-key": dict(container_toolkit_repo_key=rig.other_key),
        "no-answer": dict(container_toolkit_repo_url="http://127.0.0.1:9/libnvidia-container/stable"),
        "no-version": dict(container_toolkit_version=MISSING),
        "suse": dict(container_toolkit_package_manager="auto", fake_os_family="Suse"),
        "bad-files": dict(container_toolkit_source="files", container_toolkit_package_files=[
            rig.debs[(n, NEW if n == "libnvidia-container1" else OLD)] for n in apt_rig.PACKAGES]),
    }
    roots, hosts = {}, {"node1": node1, "upgrade": upgrade, "downgrade": downgrade}
    for name, extra in bad.items():
        roots[name], hosts[name] = node_vars(tmp_path, name, rig, **extra)
    roots["air-gapped"], hosts["air-gapped"] = node_vars(
        tmp_path, "air-gapped", rig, container_toolkit_source="files",
        container_toolkit_package_files=[rig.debs[(n, OLD)] for n in apt_rig.PACKAGES])
    res, data, proc = play(tmp_path, hosts, diff=True)
    assert first_failure(data, "node1") is None, first_failure(data, "node1")
    assert changed(data, "node1") > 0
    assert root.installed() == ALL_OLD_HELD
    listing = open(os.path.join(root.path, "etc/apt/sources.list.d/nvidia-container-toolkit.list")).read()
    assert "deb [signed-by=%s/usr/share/keyrings/nvidia-container-toolkit-keyring.asc] %s/deb/$(ARCH) /" % (
        root.path, rig.repo.url) in listing
    with open(os.path.join(root.path, "usr/share/keyrings/nvidia-container-toolkit-keyring.asc")) as handle:
        assert handle.read().strip() == rig.key.strip()
    pin = open(os.path.join(root.path, "etc/apt/preferences.d/nvidia-container-toolkit")).read()
    assert "Pin: version %s\n" % OLD in pin and "Package: %s\n" % " ".join(apt_rig.PACKAGES) in pin
    ctk = subprocess.run([os.path.join(root.path, "usr/bin/nvidia-ctk"), "--version"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=False).stdout
    assert "1.18.1" in ctk, ctk
    assert res["node1"]["Report the installed version"]["ansible_facts"]["container_toolkit_installed"] == dict(
        (n, OLD) for n in apt_rig.PACKAGES)
    assert res["node1"]["Plan the node from the declaration"]["steps"]["container_toolkit"] == []

    # the pin moved: all four upgraded in one transaction, held; the pin written
    assert first_failure(data, "upgrade") is None, first_failure(data, "upgrade")
    assert "nvidia-container-toolkit: %s -> %s (upgrade)" % (OLD, NEW) in res["upgrade"]["Show what changes in the packages"]["msg"]
    assert uroot.installed() == dict((n, (NEW, "hold ok installed")) for n in apt_rig.PACKAGES)
    assert "Pin: version %s\n" % NEW in open(os.path.join(uroot.path, "etc/apt/preferences.d/nvidia-container-toolkit")).read()
    assert res["upgrade"]["Plan the node from the declaration"]["steps"]["container_toolkit"] == []

    # an older pin than what is installed: refused before any change
    failure = first_failure(data, "downgrade")
    assert failure is not None and "node downgrade:" in failure["text"] and "refusing to downgrade" in failure["text"], failure
    assert "container_toolkit_allow_downgrade=true" in failure["text"]
    assert nroot.installed() == not_held and not [f for f in nroot.files() if f.startswith("etc/")]

    expect = {
        "unsigned": "its signature does not verify with the given key (or it is not signed)",
        "wrong-key": "its signature does not verify with the given key (or it is not signed)",
        "no-answer": "it does not answer",
        "no-version": "the repository has no nvidia-container-toolkit, nvidia-container-toolkit-base, "
                      "libnvidia-container-tools, libnvidia-container1 at version %s; it has %s, %s" % (MISSING, NEW, OLD),
        "bad-files": "holds libnvidia-container1 %s, not the pinned %s" % (NEW, OLD),
        "suse": "cannot be installed on this distribution (os_family Suse): NVIDIA's repository serves apt",
    }
    for name, words in expect.items():
        failure = first_failure(data, name)
        assert failure is not None, (name, res[name])
        assert ("node %s:" % name) in failure["text"] and words in failure["text"], (name, failure["text"])
        assert roots[name].installed() == {}, name
        if name != "bad-files":     # the package files are copied (declared) before they are read; nothing else
            assert roots[name].files() == set(), (name, roots[name].files())

    gapped = roots["air-gapped"]
    assert first_failure(data, "air-gapped") is None, first_failure(data, "air-gapped")
    assert gapped.installed() == ALL_OLD_HELD
    kept = sorted(f for f in gapped.files() if f.startswith("var/cache/gpuops/container-toolkit/"))
    assert kept == sorted("var/cache/gpuops/container-toolkit/" + os.path.basename(rig.debs[(n, OLD)])
                          for n in apt_rig.PACKAGES)
    assert res["air-gapped"]["Plan the node from the declaration"]["steps"]["container_toolkit"] == []

    # Again: nothing changes, and the node plan finds nothing to do.
    again = {"node1": node1, "upgrade": upgrade, "air-gapped": hosts["air-gapped"]}
    res, data, proc = play(tmp_path, again)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in again:
        assert changed(data, name) == 0, (name, [t for t, r in res[name].items() if r.get("changed")])
        assert res[name]["Plan the node from the declaration"]["steps"]["container_toolkit"] == []
    assert res["upgrade"]["Report the installed version"]["ansible_facts"]["container_toolkit_installed"] == dict(
        (n, NEW) for n in apt_rig.PACKAGES)


def test_site_converges_a_fresh_node_in_one_run_toolkit_then_containerd(tmp_path, rig):
    """site.yml on one lab node with the toolkit on, installed into a throwaway root: containerd's runtime is written
    in the same run by the nvidia-ctk the toolkit installed (the stand-in at the package's version)."""
    node = "lab-hgx-h200"
    site = Site(tmp_path, limit=(node,))
    root = apt_rig.Root(tmp_path / "toolkit-root")
    state = site.state / ("%s.json" % node)
    extra = dict(
        gpu_node_install_container_toolkit=True,
        # (the lab's environment, replaced here, also names the node's root: nvidia-ctk reads its /proc/devices)
        gpuops_environment=dict(root.env, GPUOPS_SIMULATED_GPUS=str(state), GPUOPS_SIMULATED_MACHINE="hgx-h200",
                                GPUOPS_SIMULATED_ROOT=str(site.state / node)),
        container_toolkit_package_manager="apt", container_toolkit_version=OLD,
        container_toolkit_repo_url=rig.repo.url, container_toolkit_repo_key=rig.key,
        container_toolkit_root=root.path,
        containerd_runtime_nvidia_ctk_path=os.path.join(root.path, "usr/bin/nvidia-ctk"))

    res = site.run(check=True, **extra)
    assert res.rc == 0, res
    assert root.installed() == {} and root.files() == set()

    res = site.run(**extra)
    assert res.rc == 0, res
    assert root.installed() == dict((n, (OLD, "hold ok installed")) for n in apt_rig.PACKAGES)
    configured = res.task("Configure containerd's NVIDIA runtime (nvidia-ctk on private copies", node)
    assert configured and configured[-1]["nvidia_ctk_version"] == "1.18.1", configured
    drop_in = (site.state / node / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert "runtimes.nvidia" in drop_in

    res = site.run(**extra)
    assert res.rc == 0 and res.changed(node) == 0, res
    plan = res.task("Read the GPUs and plan every step", node)[0]
    assert plan["steps"]["container_toolkit"] == [] and plan["steps"]["containerd_runtime"] == [], plan["steps"]


RPM_DNF_STANDIN = """#!%(python)s
# TEST STAND-IN for %(tool)s (tests/integration/test_container_toolkit_role.py), NOT the real tool: no rpm or dnf can be
# installed on the machines this project is tested on. It records its arguments and answers as the real tool does for
# a node with none of the packages installed and a repository that has %(versions)s.
import json, sys
with open(%(log)r, "a") as log:
    log.write(json.dumps(sys.argv) + "\\n")
args = sys.argv[1:]
if %(tool)r == "rpm":
    names = [a for a in args if not a.startswith("-") and "%%" not in a]
    for name in names:
        print("package %%s is not installed" %% name)
    sys.exit(len(names))
if "makecache" in args:
    sys.exit(0)
print("Available Packages")
for name in [a for a in args[args.index("--available") + 1:]]:
    for version in %(versions)r:
        print("%%s.x86_64    %%s    nvidia-container-toolkit" %% (name, version))
"""
