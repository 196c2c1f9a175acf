"""A small fake of NVIDIA's GPU Operator, running in a thread beside the fake API server (fake_kube_api.py).

It is NOT the GPU Operator: it does the few things of it that the collection's operator path depends on, against
the fake API server's objects and the nodes' simulated GPUs (the state files the nodes' modules use):

- ``install()``: what installing the operator's chart leaves in a cluster: the operator namespace, the
  ClusterPolicy ``cluster-policy`` exactly as NVIDIA's chart renders it (tests/fixtures/gpu-operator, admitted
  through the CRD schema like a real create, so schema defaults are filled in) with ``status.namespace``, the
  MIG manager's ``default-mig-parted-config`` ConfigMap (NVIDIA's own file), and the labels the operator puts on
  GPU nodes (``nvidia.com/gpu.present``, ``nvidia.com/gpu.deploy.<operand>=true``, ``nvidia.com/mig.capable`` and,
  on MIG-capable nodes without one, ``nvidia.com/mig.config=all-disabled``; reference/device-plugin.md 3.3).
- the MIG manager (reference/mig.md 1.9; NVIDIA/mig-parted cmd/nvidia-mig-manager): when a node's
  ``nvidia.com/mig.config`` changes (and once for the value it finds first, as the real one does at its start) it
  reads the ConfigMap ``spec.migManager.config.name`` names (key ``config.yaml``), and: an unknown or invalid
  config -> ``nvidia.com/mig.config.state=failed``; GPUs already as the config says -> ``success``; otherwise
  ``pending``, then it applies the config to the node's simulated GPUs -> ``success``, or ``failed`` when the GPUs
  cannot take it (a process holds a GPU whose mode must change, a layout that does not fit). A failed config is not
  retried until the label changes. It applies with this collection's own planner (_mig_plan/_mig_apply: keeps the
  instances it can), not with mig-parted's destroy-everything-and-recreate; it does not pause and restore the
  ``nvidia.com/gpu.deploy.*`` operands, stop host GPU clients, reboot (``rebooting``), or honour
  ``migManager.config.default`` for nodes that lose their label.
- the device plugin, GFD and MPS control daemon, as far as a node's advertised resources go: from the device plugin
  ConfigMap the ClusterPolicy names (the node's ``nvidia.com/device-plugin.config`` key, else the default), the
  ``MIG_STRATEGY`` the operator injects from ``spec.mig.strategy``, and the GPUs, it writes the node's
  ``status.allocatable`` (GPUs x replicas, ``.shared`` with renameByDefault, MIG devices by strategy) - computed here
  independently of the collection's own expectation - and for MPS configs labels the node
  ``nvidia.com/mps.capable=true`` and runs a Ready pod of the DaemonSet ``nvidia-device-plugin-mps-control-daemon``.
  Not modelled: config-manager errors (an unknown key leaves the node as it was), plugin restarts, images, CDI.
- the container toolkit is not modelled at all (it writes no containerd file here).

Its writes go straight into the fake server's store (they bump resourceVersion like any write) and are not in
``FakeKubeApi.requests``, which so holds only what the collection sent.
"""

import copy
import functools
import os
import time

import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import _mig_apply
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_layouts import MigLayoutError, resolve_layout
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan._mig_plan import current_devices, plan_layout
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu import GpuBackendError, NvmlError
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from . import fake_crd
from .fake_daemonsets import advertised, set_allocatable
from .fake_loop import ReconcileLoop

FIXTURES = fake_crd.FIXTURES
POLICY_FIXTURE = os.path.join(FIXTURES, "clusterpolicy-v25.10.1-helm.txt")
MIG_DEFAULT_FIXTURE = os.path.join(FIXTURES, "default-mig-parted-config-v25.10.1.yaml")
POLICY = "cluster-policy"
MPS_DAEMONSET = "nvidia-device-plugin-mps-control-daemon"
OPERANDS = ("driver", "container-toolkit", "device-plugin", "gpu-feature-discovery", "dcgm-exporter",
            "mig-manager", "operator-validator", "node-status-exporter")
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


@functools.lru_cache(maxsize=None)
def _fixture(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def fixtures():
    """A copy of the operator's default mig-parted ConfigMap and of the ClusterPolicy its chart installs (the
    fixtures, parsed once per process)."""
    return copy.deepcopy([_fixture(MIG_DEFAULT_FIXTURE), _fixture(POLICY_FIXTURE)])


class FakeGpuOperator(ReconcileLoop):
    """``nodes``: {node name: (simulated GPU state file, machine shape)}."""

    name = "fake-gpu-operator"

    def __init__(self, api, nodes, namespace="gpu-operator", mig_strategy=None, pending_seconds=0.2, poll=0.1):
        self.api, self.nodes, self.namespace = api, dict(nodes), namespace
        self.mig_strategy = mig_strategy
        self.pending_seconds, self.poll = pending_seconds, poll
        self.handled = {}          # node -> the nvidia.com/mig.config value the MIG manager last acted on
        self.history = []          # (node, config, state) in order: what the MIG manager reported
        self._init_loop()          # start(), stop(), errors: tests/support/fake_loop.py
        self._seen = {}            # node -> inputs of the last allocatable computation

    # ---- set-up ----------------------------------------------------------------------------------------------
    def install(self):
        api = self.api
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        default_cm, policy = fixtures()
        default_cm["metadata"]["namespace"] = self.namespace
        api.put(default_cm)
        spec = policy["spec"]
        if self.mig_strategy:
            spec["mig"] = {"strategy": self.mig_strategy}
        else:
            spec["mig"] = {}        # helm install ... --set mig.strategy=  (each node's config decides)
        invalid = fake_crd.admit(api, "clusterpolicies", "ClusterPolicy", policy, POLICY)
        if invalid:
            raise ValueError("the fixture ClusterPolicy does not pass its own CRD: %s" % invalid[1]["message"])
        policy["status"] = {"namespace": self.namespace, "state": "ready"}
        api.put(policy)
        for name in self.nodes:
            self._label_gpu_node(name)
        return self

    def _backend(self, node):
        path, shape = self.nodes[node]
        return SimulatedBackend(path, shape=shape)

    def _label_gpu_node(self, name):
        node = self.api.get("", "nodes", name)
        if node is None:
            return
        labels = node["metadata"].setdefault("labels", {})
        gpus = self._backend(name).read_all()["gpus"]
        mig_capable = any(g.get("mig_supported") for g in gpus)
        labels.setdefault("nvidia.com/gpu.present", "true")
        for operand in OPERANDS:
            labels.setdefault("nvidia.com/gpu.deploy.%s" % operand, "true")
        labels["nvidia.com/mig.capable"] = "true" if mig_capable else "false"
        default = (self._policy_spec().get("migManager") or {}).get("config", {}).get("default", "all-disabled")
        if mig_capable and default == "all-disabled":
            labels.setdefault(MIG_CONFIG, "all-disabled")
        self.api.put(node)

    # ---- the loop ----------------------------------------------------------------------------------------------

    def reconcile(self):
        for name in sorted(self.nodes):
            node = self.api.get("", "nodes", name)
            if node is None:
                continue
            self._mig_manager(name, node)
            self._device_plugin(name)

    # ---- helpers -------------------------------------------------------------------------------------------------
    def _policy_spec(self):
        return (self.api.get("nvidia.com", "clusterpolicies", POLICY) or {}).get("spec") or {}

    def _configmap(self, name):
        return self.api.get("", "configmaps", name, self.namespace) if name else None

    def _set_labels(self, name, changes):
        with self.api._lock:
            node = self.api.get("", "nodes", name)
            labels = node["metadata"].setdefault("labels", {})
            if all(labels.get(k) == v for k, v in changes.items() if v is not None) and \
                    not any(k in labels for k, v in changes.items() if v is None):
                return
            for key, value in changes.items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
            self.api.put(node)

    def _report(self, name, config, state):
        self.history.append((name, config, state))
        self._set_labels(name, {MIG_STATE: state})

    # ---- MIG manager ---------------------------------------------------------------------------------------------
    def _mig_manager(self, name, node):
        spec = self._policy_spec()
        labels = node["metadata"].get("labels") or {}
        if (spec.get("migManager") or {}).get("enabled") is False \
                or labels.get("nvidia.com/gpu.deploy.mig-manager", "true") == "false":
            self.handled.pop(name, None)      # no MIG manager pod: the next one starts afresh
            return
        value = labels.get(MIG_CONFIG)
        if not value or self.handled.get(name) == value:
            return
        self.handled[name] = value
        cm_name = ((spec.get("migManager") or {}).get("config") or {}).get("name") or "default-mig-parted-config"
        text = ((self._configmap(cm_name) or {}).get("data") or {}).get("config.yaml")
        try:
            doc = yaml.safe_load(text or "") or {}
            backend = self._backend(name)
            gpus = backend.read_all()["gpus"]
            resolved = resolve_layout(gpus, config=doc, config_name=value)
        except (MigLayoutError, yaml.YAMLError, GpuBackendError):
            self._report(name, value, "failed")       # assert --valid-config fails
            return
        if self._matches(gpus, resolved):
            self._report(name, value, "success")
            return
        self._report(name, value, "pending")
        time.sleep(self.pending_seconds)
        try:
            for gpu in gpus:
                spec_ = resolved["gpus"].get(gpu["index"])
                if spec_ is None:
                    continue
                entry = _mig_apply.apply_mode(backend, gpu, "Enabled" if spec_["mig_enabled"] else "Disabled",
                                              allow_reset=True)
                if entry["pending"]:
                    raise MigLayoutError("MIG mode change pending on GPU %d: %s" % (gpu["index"], entry["reason"]))
            gpus = backend.read_all()["gpus"]
            plans = plan_layout(gpus, resolved, force=False)
            _mig_apply.apply_layout_plans(backend, plans)
        except (MigLayoutError, NvmlError, GpuBackendError):
            self._report(name, value, "failed")
            return
        self._report(name, value, "success")

    @staticmethod
    def _matches(gpus, resolved):
        by_index = dict((g["index"], g) for g in gpus)
        for index, spec in resolved["gpus"].items():
            gpu = by_index[index]
            if gpu.get("mig_mode_current") != ("Enabled" if spec["mig_enabled"] else "Disabled"):
                return False
            if spec["mig_enabled"] and current_devices(gpu) != dict(spec["mig_devices"]):
                return False
        return True

    # ---- device plugin / GFD / MPS daemon ----------------------------------------------------------------------
    def _device_plugin(self, name):
        spec = self._policy_spec()
        node = self.api.get("", "nodes", name)
        labels = node["metadata"].get("labels") or {}
        dp_config = (spec.get("devicePlugin") or {}).get("config") or {}
        cm = self._configmap(dp_config.get("name"))
        path = self.nodes[name][0]
        key = (labels.get("nvidia.com/device-plugin.config"), dp_config.get("name"), dp_config.get("default"),
               (cm or {}).get("metadata", {}).get("resourceVersion"), (spec.get("mig") or {}).get("strategy"),
               os.path.getmtime(path) if os.path.exists(path) else None)
        if self._seen.get(name) == key:
            return
        self._seen[name] = key
        config = {}
        if dp_config.get("name"):
            choice = labels.get("nvidia.com/device-plugin.config") or dp_config.get("default")
            text = ((cm or {}).get("data") or {}).get(choice)
            if text is None:
                return          # config-manager: "specified config ... does not exist"; the plugin keeps its config
            config = yaml.safe_load(text) or {}
        strategy = (spec.get("mig") or {}).get("strategy") or (config.get("flags") or {}).get("migStrategy") or "none"
        mps = "mps" in (config.get("sharing") or {})
        counts = advertised(self._backend(name).read_all()["gpus"], config, strategy)
        if counts is None:
            return              # the plugin exits: "sharing using MPS is not supported for MIG devices"
        set_allocatable(self.api, name, counts)
        self._set_labels(name, {"nvidia.com/mps.capable": "true" if mps else "false"})
        self._mps_pod(name, mps)

    def _mps_pod(self, name, wanted):
        pod_name = "%s-%s" % (MPS_DAEMONSET, name)
        have = self.api.get("", "pods", pod_name, self.namespace)
        if wanted and have is None:
            self.api.put({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": pod_name, "namespace": self.namespace,
                                       "labels": {"app": MPS_DAEMONSET},
                                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                            "name": MPS_DAEMONSET, "uid": "fake"}]},
                          "spec": {"nodeName": name, "containers": [{"name": "mps-control-daemon-ctr",
                                                                     "image": "fake"}]},
                          "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        elif not wanted and have is not None:
            with self.api._lock:
                self.api.objects.pop(("", "pods", self.namespace, pod_name), None)
