"""gpu_operator_nodes: what the cluster step checks against the GPU Operator's ClusterPolicy, from the inventory."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.gpu_operator_nodes import gpu_operator_nodes

PLAN = {"nodes": {"a": "mig-mixed", "b": "mps-4", "c": "default"}}


def test_nodes_owners_and_files():
    hostvars = {
        "a": {"gpu_node_mig_owner": "gpu_operator", "gpu_node_kube_node_name": "a.k8s"},
        "b": {"gpu_node_containerd_owner": "collection", "containerd_runtime_config_path": "/k3s/config.toml"},
        "c": {"gpu_node_manage_containerd": "false"},
    }
    out = gpu_operator_nodes(hostvars, ["a", "b", "c"], PLAN)
    assert out["mig_to_operator"] is True
    assert out["nodes"] == [
        {"name": "a.k8s", "profile": "mig-mixed", "containerd_owner": "auto",
         "containerd_files": ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]},
        {"name": "b", "profile": "mps-4", "containerd_owner": "collection",
         "containerd_files": ["/k3s/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]},
        {"name": "c", "profile": "default", "containerd_owner": "auto", "containerd_files": []}]
    assert gpu_operator_nodes({"c": {}}, ["c"], PLAN)["mig_to_operator"] is False


def test_a_node_without_a_profile_is_an_error():
    with pytest.raises(AnsibleFilterError, match="node d has no device plugin profile"):
        gpu_operator_nodes({"d": {}}, ["d"], PLAN)
