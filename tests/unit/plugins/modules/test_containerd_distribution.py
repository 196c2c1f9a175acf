"""containerd_runtime on k3s and RKE2 (their agent generates containerd's config) and the kubelet's containerd:
main() in-process on simulated node roots, with a STAND-IN for the agent's config step
(tests/support/rancher_agent_standin.py, not k3s's code) and Debian's REAL containerd, which loads every config the
stand-in generates from the collection's template (`containerd --config FILE config dump`).
"""
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.support import ctk_env
from tests.support import rancher_agent_standin as agent

from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_config import (  # noqa: E402
    get_in, parse_toml, runtimes_of)
from ansible_collections.gpuops.nvidia.plugins.modules import containerd_runtime  # noqa: E402

RUNTIME = "/usr/bin/nvidia-container-runtime"
K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"


class Node(object):
    def __init__(self, tmp_path, capsys, monkeypatch):
        self.root = tmp_path / "root"
        self.root.mkdir()
        self.private = tmp_path / "private"
        self.private.mkdir()
        self.capsys = capsys
        monkeypatch.setenv("GPUOPS_SIMULATED_GPUS", str(tmp_path / "gpus.json"))
        monkeypatch.setenv("GPUOPS_SIMULATED_ROOT", str(self.root))

    def path(self, path):
        return agent.under(self.root, path)

    def text(self, path):
        with open(self.path(path)) as handle:
            return handle.read()

    def run(self, check=False, diff=True, **extra):
        args = dict(nvidia_ctk_path="/nonexistent/nvidia-ctk")  # never needed on k3s/RKE2
        args.update(extra)
        args.update(_ansible_check_mode=check, _ansible_diff=diff, _ansible_tmpdir=str(self.private),
                    _ansible_keep_remote_files=False)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exc:
                containerd_runtime.main()
        result = json.loads(self.capsys.readouterr().out)
        result["rc"] = exc.value.code
        return result

    def snapshot(self):
        return ctk_env.snapshot(self.root)


@pytest.fixture
def node(tmp_path, capsys, monkeypatch):
    return Node(tmp_path, capsys, monkeypatch)


def dump(path):
    """The real containerd's merged view of a generated config (it must load it)."""
    result = ctk_env.containerd_dump(path)
    assert result.returncode == 0, result.stderr
    return parse_toml(result.stdout, "dump")


def cri(view):
    return view["plugins"]["io.containerd.grpc.v1.cri"]


@pytest.mark.parametrize("dist,unit", [("k3s", "k3s"), ("rke2", "rke2-agent")])
def test_converge_through_the_agents_own_detection(node, dist, unit):
    """The toolkit installed after the agent's last start: the agent must restart (its generated config lacks the
    runtime), config.yaml gets default-runtime, no template is written; after the restart a re-run changes nothing."""
    agent.make_root(node.root, dist, unit=unit, config_yaml="token: secret\nnode-label:\n  - gpu=true\n")
    agent.start(node.root, dist)
    agent.install_executable(node.root, RUNTIME)
    check = node.run(check=True, set_as_default=True)
    assert check["rc"] == 0 and check["changed"] and check["restart_required"], check
    assert "default-runtime" not in node.text("/etc/rancher/%s/config.yaml" % dist)
    first = node.run(set_as_default=True)
    assert first["changed"] and first["restart_required"] and first["restart_service"] == unit
    assert first["distribution"] == dist and first["detected_runtimes"] == ["nvidia"]
    assert first["files_changed"] == ["/etc/rancher/%s/config.yaml" % dist]
    assert node.text("/etc/rancher/%s/config.yaml" % dist) == (
        'token: secret\nnode-label:\n  - gpu=true\ndefault-runtime: "nvidia"\n')
    assert not os.path.exists(node.path("/var/lib/rancher/%s/agent/etc/containerd/config.toml.tmpl" % dist))
    generated = "/var/lib/rancher/%s/agent/etc/containerd/config.toml" % dist
    agent.start(node.root, dist)  # the handler's restart
    view = cri(dump(node.path(generated)))
    assert view["containerd"]["default_runtime_name"] == "nvidia"
    assert view["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == RUNTIME
    before = node.snapshot()
    again = node.run(set_as_default=True)
    assert not again["changed"] and not again["restart_required"], again
    assert node.snapshot() == before


def test_runtime_the_agent_does_not_generate_goes_into_a_template_that_survives_an_upgrade(node):
    """A runtime_path outside the agent's PATH: the template holds the base and only that runtime; the real
    containerd loads what the agent renders from it, before and after a distribution upgrade (a new base)."""
    path = "/opt/nvidia/bin/nvidia-container-runtime"
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    agent.install_executable(node.root, path)
    first = node.run(runtime_name="nvidia-opt", runtime_path=path, distribution="k3s")
    assert first["changed"] and first["restart_required"]
    template = node.text(K3S_DIR + "/config.toml.tmpl")
    assert template.count('{{ template "base" . }}') == 1 and "nvidia-opt" in template
    assert "sandbox" not in template and "cni" not in template  # nothing of the base copied
    for release in (1, 2):
        agent.start(node.root, "k3s", release=release)
        view = cri(dump(node.path(K3S_DIR + "/config.toml")))
        runtime = view["containerd"]["runtimes"]["nvidia-opt"]
        assert runtime["options"]["BinaryName"] == path and runtime["options"]["SystemdCgroup"] is True
        assert view["cni"]["bin_dir"].endswith("release-%d/bin" % release)  # the new base is in force
        again = node.run(runtime_name="nvidia-opt", runtime_path=path, distribution="k3s")
        assert not again["changed"] and not again["restart_required"], again


def test_check_mode_and_diff_write_nothing(node):
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    before = node.snapshot()
    result = node.run(check=True, runtime_name="gpu", runtime_path="/opt/x/nvidia-container-runtime")
    assert result["changed"] and node.snapshot() == before
    (entry,) = result["diff"]
    assert entry["after_header"] == K3S_DIR + "/config.toml.tmpl"
    assert entry["before"] == "" and "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.'gpu']" in entry[
        "after"]
    assert any("not installed yet" in w for w in result["trap_warnings"])


def test_containerd_2_gets_the_v3_template(node):
    agent.make_root(node.root, "rke2")
    agent.start(node.root, "rke2", containerd_major=2)
    result = node.run(runtime_name="gpu", runtime_path="/opt/x/nvidia-container-runtime")
    assert result["template_path"] == "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl"
    text = agent.start(node.root, "rke2", containerd_major=2)
    tree = parse_toml(text, "generated")  # one table each: a duplicate would not parse
    assert get_in(runtimes_of(tree, 3), ["gpu", "options", "BinaryName"]) == "/opt/x/nvidia-container-runtime"


def test_cdi_on_containerd_1_is_refused_naming_why(node):
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    result = node.run(cdi_enabled=True)
    assert result["rc"] == 1 and not result["changed"]
    assert "duplicated tables" in result["msg"] and "enable_cdi" in result["msg"]


def test_the_administrators_own_template_is_not_overwritten(node):
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    with open(node.path(K3S_DIR + "/config.toml.tmpl"), "w") as handle:
        handle.write('{{ template "base" . }}\n')
    result = node.run(runtime_name="gpu", runtime_path="/opt/x/nvidia-container-runtime")
    assert result["rc"] == 1 and "administrator's own template" in result["msg"]


def test_two_containerds_declaration_aimed_at_the_wrong_one_is_refused_naming_both(node):
    """Docker's containerd next to k3s's: the kubelet (k3s's own) talks to k3s's socket, so a plain containerd
    declaration is refused, naming both; nothing is written."""
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    os.makedirs(node.path("/etc/containerd"))
    with open(node.path("/etc/containerd/config.toml"), "w") as handle:
        handle.write('version = 2\ndisabled_plugins = ["cri"]\n')
    before = node.snapshot()
    result = node.run(distribution="containerd", config_path="/etc/containerd/config.toml")
    assert result["rc"] == 1 and not result["changed"]
    assert "containerd's containerd (config /etc/containerd/config.toml, socket /run/containerd/containerd.sock)" \
        in result["msg"]
    assert "k3s's containerd (config %s/config.toml, socket /run/k3s/containerd/containerd.sock)" % K3S_DIR \
        in result["msg"]
    assert "distribution: k3s" in result["msg"]
    assert node.snapshot() == before


def test_kubeadm_kubelet_on_plain_containerd_refuses_a_k3s_declaration(node):
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    os.makedirs(node.path("/var/lib/kubelet"))
    with open(node.path("/var/lib/kubelet/kubeadm-flags.env"), "w") as handle:
        handle.write('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock'
                     ' --pod-infra-container-image=registry.k8s.io/pause:3.9"\n')
    result = node.run(distribution="k3s")
    assert result["rc"] == 1
    assert "/var/lib/kubelet/kubeadm-flags.env" in result["msg"] and "k3s's containerd" in result["msg"]


def test_plain_containerds_own_socket_comes_from_its_config(node, tmp_path):
    """A plain containerd listening where its [grpc] address says, next to k3s: the kubelet's endpoint names that
    socket, so auto is plain containerd (config_path as the module writes it), and k3s is refused naming both."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _containerd_distribution as dist
    from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._containerd_target import TargetError
    agent.make_root(node.root, "k3s")
    config = tmp_path / "containerd.toml"
    config.write_text('version = 2\n[grpc]\n  address = "/run/custom/containerd.sock"\n')
    os.makedirs(node.path("/etc/default"))
    with open(node.path("/etc/default/kubelet"), "w") as handle:
        handle.write("KUBELET_EXTRA_ARGS=--container-runtime-endpoint=unix:///var/run/custom/containerd.sock\n")
    kind, found = dist.target({"config_path": str(config), "distribution": "auto"})
    assert kind == "containerd" and found.socket == "/run/custom/containerd.sock"
    with pytest.raises(TargetError) as exc:
        dist.target({"config_path": str(config), "distribution": "k3s"})
    assert "/etc/default/kubelet" in str(exc.value) and "socket /run/custom/containerd.sock" in str(exc.value)


def test_a_config_yaml_d_file_overriding_the_declared_default_is_refused_naming_it(node):
    agent.make_root(node.root, "k3s")
    agent.start(node.root, "k3s")
    os.makedirs(node.path("/etc/rancher/k3s/config.yaml.d"))
    with open(node.path("/etc/rancher/k3s/config.yaml.d/50-runtime.yaml"), "w") as handle:
        handle.write("default-runtime: runc\n")
    assert node.run()["rc"] == 0  # set_as_default false: runc as the default is the administrator's choice
    result = node.run(set_as_default=True)
    assert result["rc"] == 1 and "/etc/rancher/k3s/config.yaml.d/50-runtime.yaml sets default-runtime: runc" \
        in result["msg"] and "set_as_default" in result["msg"]


def test_rke2_tarball_with_both_units_restarts_the_enabled_one_and_refuses_to_guess(node):
    """RKE2's tarball installs rke2-server and rke2-agent; the node enables one. The agent node's restart names
    rke2-agent (restarting rke2-server would start a server there); with neither enabled, a restart that is needed is
    refused naming both units and the fix, nothing written; a converged node is left alone, with a warning."""
    agent.make_root(node.root, "rke2", unit="rke2-agent", tarball=True)
    agent.start(node.root, "rke2")
    agent.install_executable(node.root, RUNTIME)
    result = node.run(set_as_default=True)
    assert result["rc"] == 0 and result["restart_service"] == "rke2-agent", result
    agent.start(node.root, "rke2")
    os.unlink(node.path("/etc/systemd/system/multi-user.target.wants/rke2-agent.service"))
    assert node.run(set_as_default=True)["restart_service"] is None   # nothing to restart: no refusal
    before = node.snapshot()
    result = node.run(set_as_default=False)                             # default-runtime to take out: a restart
    assert result["rc"] == 1 and not result["changed"], result
    assert "the rke2-server and rke2-agent units are both installed and neither is enabled" in result["msg"]
    assert "systemctl enable rke2-server or rke2-agent" in result["msg"]
    assert node.snapshot() == before
