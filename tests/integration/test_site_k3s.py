"""site.yml on a k3s node and an RKE2 node (issue 51; docs/containerd.md "k3s and RKE2, through their own mechanisms").

Each is a lab node (one simulated H200) whose scratch root has the distribution's layout
(/var/lib/rancher/<dist>/agent/etc/containerd/, /etc/rancher/<dist>/config.yaml, its unit) and is a throwaway apt/dpkg
root, so that the container_toolkit role installs the toolkit's packages (tests/support/apt_rig.py: NOT NVIDIA's
packages) with the real apt and dpkg, and nvidia-container-runtime lands in the root's /usr/bin. The distribution's
agent is a STAND-IN for its containerd-config step (tests/support/rancher_agent_standin.py, NOT k3s's or RKE2's code),
installed at the unit's ExecStart (RKE2 as its tarball installs it: both rke2-server and rke2-agent units, the agent's
enabled); the role's handler restarts the unit the module names through the systemctl STAND-IN
(tests/support/systemctl_standin.py), which runs it. Every config the agent generates in containerd's version 2 layout
is loaded by Debian's REAL containerd (tools/bin/containerd, 1.6.20: `config dump`); it ignores a version 3 config's CRI
sections, so the version 3 one (the k3s node upgraded to a containerd 2 release) is checked by parsing alone.

What a user would notice: check mode reports the toolkit install, shows RKE2's config.yaml and template, and changes
nothing; the apply installs the toolkit, restarts k3s's agent only because that changes what it generates (no file
written), sets RKE2's default-runtime and writes its template (the base and only the runtime the agent does not
generate), restarting each agent once through its own unit (k3s, rke2-agent: not the rke2-server unit also installed),
after which containerd serves the runtimes; a re-run changes nothing and restarts nothing; a distribution upgrade (a new
generated base) keeps the collection's additions, valid for the real containerd, and a re-run after it changes nothing;
a declaration aimed at a second containerd on the k3s node (Docker's, which the kubelet does not talk to) is refused
naming both, changing nothing."""
import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (
    get_in, parse_toml, runtimes_of)
from tests.integration.site_helpers import Site
from tests.support import apt_rig, ctk_env, driver_rig
from tests.support import rancher_agent_standin as agent
from tests.support.ansible_run import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

TOOLKIT = "1.18.1-1"
RUNTIME = "/usr/bin/nvidia-container-runtime"
MODULE_TASK = "Configure containerd's NVIDIA runtime (nvidia-ctk"   # the module's task in the role
SYSTEMCTL = os.path.join(ROOT, "tests", "support", "bin", "systemctl")
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
CONFIG_YAML = "token: lab-token\nnode-label:\n  - gpu=true\n"
# node -> (distribution, its unit, the node's declaration)
NODES = {
    # the role's defaults (runtime nvidia, not the default runtime): the agent generates all of it
    "k3s-gpu": ("k3s", "k3s", {}),
    # a runtime name the agent does not generate (the template carries it), and the node's default runtime
    "rke2-gpu": ("rke2", "rke2-agent", {"containerd_runtime_name": "nvidia-gpu",
                                        "containerd_runtime_set_as_default": True}),
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    before = apt_rig.host_installed()
    made = apt_rig.Rig(tmp_path_factory.mktemp("rig"), (TOOLKIT,))
    try:
        yield made
    finally:
        made.close()
    assert apt_rig.host_installed() == before, "this machine's own package set changed"


def systemctl(root, *args):
    return subprocess.run([SYSTEMCTL] + list(args), env=dict(os.environ, GPUOPS_SIMULATED_ROOT=root),
                          capture_output=True, text=True, check=False)


def rancher_site(tmp_path, rig):
    """The Site over the two nodes (an extra inventory beside the lab's) and their roots: the distribution installed and
    its agent started once (it generated its config before the toolkit was there)."""
    state = tmp_path / "lab-state"
    hosts, roots = {}, {}
    for name, (dist, unit, declared) in NODES.items():
        root = apt_rig.Root(state / name)
        roots[name] = root.path
        hosts[name] = dict(
            declared, gpuops_simulated_machine="h200-x1", gpuops_repo_dir=ROOT,
            gpuops_environment=dict(root.env, **driver_rig.lab_group_environment()),
            gpu_node_install_container_toolkit=True, container_toolkit_package_manager="apt",
            container_toolkit_version=TOOLKIT, container_toolkit_repo_url=rig.repo.url,
            container_toolkit_repo_key=rig.key, container_toolkit_root=root.path,
            gpu_node_containerd_initial_config="",      # the agent generates containerd's config here
            containerd_runtime_restart_method="command",
            # the unit the module names (templated when the handler runs; argument validation sees the default)
            containerd_runtime_restart_command=[SYSTEMCTL, "restart", "{{ containerd_runtime_result.restart_service"
                                                " | default('containerd') }}.service"])
        # RKE2 from its tarball: both of its units installed, the agent's enabled
        agent.make_root(root.path, dist, unit=unit, config_yaml=CONFIG_YAML, tarball=dist == "rke2")
        agent.install_agent(root.path, dist, PYTHON, [ROOT, os.path.join(ROOT, ".collections")])
        started = systemctl(root.path, "start", unit + ".service")
        assert started.returncode == 0 and agent.starts(root.path, dist) == 1, started.stderr
    path = tmp_path / "rancher-nodes.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": {
        "rancher_nodes": {"hosts": hosts}}}}}}))
    return Site(tmp_path, limit=tuple(NODES), gpuops_serial="100%"), ("-i", str(path)), roots


def generated(root, dist):
    return agent.under(root, "/var/lib/rancher/%s/agent/etc/containerd/config.toml" % dist)


def dump(root, dist):
    """The real containerd's view of what the agent generated (it must load it)."""
    result = ctk_env.containerd_dump(generated(root, dist))
    assert result.returncode == 0, result.stderr
    return parse_toml(result.stdout, "dump")["plugins"]["io.containerd.grpc.v1.cri"]


def units_called(root):
    """The systemctl stand-in's calls on the node (its state file)."""
    with open(agent.under(root, "/.standin-systemd.json")) as handle:
        return json.load(handle)["calls"]


def read(root, path):
    with open(agent.under(root, path)) as handle:
        return handle.read()


def snapshot(site, names=tuple(NODES)):
    """Each node's files but those its simulated host brought (the kernel's views, the image's driver files)."""
    return dict((name, site.files(name)) for name in names)


def test_k3s_and_rke2_converge_through_their_agents_survive_an_upgrade_and_refuse_the_wrong_containerd(tmp_path, rig):
    site, args, roots = rancher_site(tmp_path, rig)
    k3s, rke2 = roots["k3s-gpu"], roots["rke2-gpu"]
    tmpl = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl"

    # check mode: the toolkit's install reported and, on RKE2 (no nvidia-ctk needed there), the distribution's files as
    # they would be written although the toolkit is not installed yet; k3s has no file to change (its agent generates
    # the runtime once the toolkit is there); nothing written, no agent restarted
    before = snapshot(site)
    res = site.run(check=True, diff=True, args=args)
    assert res.rc == 0, res
    assert res.changed("k3s-gpu") > 0 and res.changed("rke2-gpu") > 0, res
    assert [r for r in res.task(MODULE_TASK, "k3s-gpu") if not r.get("skipped")] == []
    (checked,) = [r for r in res.task(MODULE_TASK, "rke2-gpu") if not r.get("skipped")]
    shown = dict((d["after_header"], d["after"]) for d in checked["diff"])
    assert sorted(shown) == ["/etc/rancher/rke2/config.yaml", tmpl], shown
    assert shown["/etc/rancher/rke2/config.yaml"] == CONFIG_YAML + 'default-runtime: "nvidia-gpu"\n'
    assert "'nvidia-gpu'" in shown[tmpl] and '{{ template "base" . }}' in shown[tmpl], shown
    # the agent restarts for the files it reads (the runtime is not installed yet: nothing else to detect)
    assert sorted(checked["restart_reasons"]) == ["%s changes" % p for p in sorted(shown)], checked
    assert snapshot(site) == before
    assert [agent.starts(k3s, "k3s"), agent.starts(rke2, "rke2")] == [1, 1]

    # apply: the toolkit installed, then each distribution's own mechanisms, one restart of its own unit
    res = site.run(args=args)
    assert res.rc == 0, res
    for name, root in roots.items():
        assert os.access(agent.under(root, RUNTIME), os.X_OK), name
    configured = dict((name, [r for r in res.task(MODULE_TASK, name) if not r.get("skipped")]) for name in NODES)
    # k3s: no file written; its agent restarts (through its own unit) because the toolkit's install changes what it
    # generates, and only for that (the step ran because the toolkit was installed: the plan had found no work)
    (k3s_result,) = configured["k3s-gpu"]
    assert k3s_result["files_changed"] == [] and k3s_result["restart_service"] == "k3s", k3s_result
    assert k3s_result["restart_reasons"] == [
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml: no runtime 'nvidia'"], k3s_result
    assert configured["rke2-gpu"][-1]["restart_service"] == "rke2-agent", configured
    assert [agent.starts(k3s, "k3s"), agent.starts(rke2, "rke2")] == [2, 2]
    assert units_called(rke2) == [["start", "rke2-agent.service"], ["restart", "rke2-agent.service"]]  # not the server
    assert read(k3s, "/etc/rancher/k3s/config.yaml") == CONFIG_YAML
    assert not os.path.exists(agent.under(k3s, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl"))
    view = dump(k3s, "k3s")
    assert view["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == RUNTIME
    assert view["containerd"].get("default_runtime_name", "runc") == "runc"
    # RKE2: default-runtime in its config.yaml (every other line kept); the template extends the base with only the
    # runtime the agent does not generate
    assert read(rke2, "/etc/rancher/rke2/config.yaml") == CONFIG_YAML + 'default-runtime: "nvidia-gpu"\n'
    template = read(rke2, tmpl)
    assert template.startswith("# Managed by gpuops.nvidia") and template.count('{{ template "base" . }}') == 1
    assert "'nvidia-gpu'" in template and "sandbox" not in template and "'nvidia'" not in template, template
    view = dump(rke2, "rke2")
    runtimes = view["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["BinaryName"] == RUNTIME          # the agent's own
    assert runtimes["nvidia-gpu"]["options"]["BinaryName"] == RUNTIME      # the collection's addition
    assert runtimes["nvidia-gpu"]["options"]["SystemdCgroup"] is True
    assert view["containerd"]["default_runtime_name"] == "nvidia-gpu"

    # a re-run changes nothing and restarts nothing
    before = snapshot(site)
    res = site.run(args=args)
    assert res.rc == 0, res
    for name in NODES:
        assert res.changed(name) == 0, res
        plan = res.task("Read the GPUs and plan every step", name)[0]
        assert plan["steps"]["containerd_runtime"] == [] and plan["steps"]["container_toolkit"] == [], plan["steps"]
    assert snapshot(site) == before

    # a distribution upgrade restarts the agent with a new base (k3s: a release with containerd 2, version 3)
    agent.upgrade(k3s, "k3s", release=2, containerd_major=2)
    agent.upgrade(rke2, "rke2", release=2, containerd_major=1)
    for root, unit in ((k3s, "k3s"), (rke2, "rke2-agent")):
        assert systemctl(root, "restart", unit + ".service").returncode == 0
    view = dump(rke2, "rke2")
    assert view["cni"]["bin_dir"].endswith("release-2/bin")                # the new base is in force
    assert view["containerd"]["runtimes"]["nvidia-gpu"]["options"]["BinaryName"] == RUNTIME
    assert view["containerd"]["default_runtime_name"] == "nvidia-gpu"
    with open(generated(k3s, "k3s")) as handle:
        v3 = parse_toml(handle.read(), "k3s v3")
    assert v3["version"] == 3 and get_in(runtimes_of(v3, 3), ["nvidia", "options", "BinaryName"]) == RUNTIME
    assert "io.containerd.grpc.v1.cri" not in v3["plugins"] and "release-2" in str(v3["plugins"])
    before = snapshot(site)
    res = site.run(args=args)
    assert res.rc == 0, res
    assert all(res.changed(name) == 0 for name in NODES), res
    assert snapshot(site) == before and [agent.starts(k3s, "k3s"), agent.starts(rke2, "rke2")] == [3, 3]

    # a second containerd on the k3s node (Docker's), and the declaration aimed at it: refused naming both
    os.makedirs(agent.under(k3s, "/etc/containerd"))
    with open(agent.under(k3s, "/etc/containerd/config.toml"), "w") as handle:
        handle.write('disabled_plugins = ["cri"]\n')
    site.limit = ("k3s-gpu",)
    before = snapshot(site, ("k3s-gpu",))
    res = site.run(args=args + ("-e", "containerd_runtime_distribution=containerd"))
    assert res.rc != 0, res
    (failure,) = [f for f in res.failures() if f[0] == "k3s-gpu"]
    assert "containerd's containerd (config %s/etc/containerd/config.toml, socket /run/containerd/containerd.sock)" % (
        k3s) in failure[2], failure
    assert "k3s's containerd (config /var/lib/rancher/k3s/agent/etc/containerd/config.toml, socket " \
        "/run/k3s/containerd/containerd.sock)" in failure[2], failure
    assert snapshot(site, ("k3s-gpu",)) == before and agent.starts(k3s, "k3s") == 3
