"""_kube_nodes: this host's Node found by name, hostname or InternalIP."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _kube_nodes


def _node(name, hostname=None, ip=None, labels=None):
    addrs = [{"type": "Hostname", "address": hostname or name}]
    if ip:
        addrs.append({"type": "InternalIP", "address": ip})
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"addresses": addrs}}


def test_find_node_methods():
    nodes = [_node("n1", "host-a", "10.0.0.1"),
             _node("n2", "host-b", "10.0.0.2", labels={"kubernetes.io/hostname": "label-host"})]
    assert _kube_nodes.find_node(nodes, node_name="n2")[1] == "name"
    assert _kube_nodes.find_node(nodes, hostnames=["host-a.example.com"])[0]["metadata"]["name"] == "n1"
    assert _kube_nodes.find_node(nodes, hostnames=["label-host"])[0]["metadata"]["name"] == "n2"
    assert _kube_nodes.find_node(nodes, internal_ips=["10.0.0.2"])[1] == "internal_ip"
    with pytest.raises(_kube.KubeError, match="no Kubernetes node matches"):
        _kube_nodes.find_node(nodes, hostnames=["zzz"], method="hostname")
    with pytest.raises(_kube.KubeError, match="give node_name, hostname or internal_ips"):
        _kube_nodes.find_node(nodes)
