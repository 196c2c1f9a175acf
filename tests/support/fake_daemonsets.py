"""A fake DaemonSet controller and kubelet, with a fake NVIDIA device plugin, GFD and MPS control daemon, running in a
thread beside the fake API server (fake_kube_api.py), for the standalone chart's node flow.

It is NOT Kubernetes or NVIDIA's code: it does the few things of them that decide whether a node serves exactly the
devices its GPUs have after a change, each rule taken from the real code:

- Which nodes run a DaemonSet's pod: the pod template's ``nodeSelector`` and every required node-affinity term
  (terms ORed, expressions ANDed; operators In, NotIn, Exists, DoesNotExist) against the node's labels
  (kubernetes/kubernetes v1.33 pkg/controller/daemon/daemon_controller.go ``NodeShouldRunDaemonPod``, evaluated by
  staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity). A cordoned node still runs DaemonSet pods:
  the controller gives them the ``node.kubernetes.io/unschedulable`` toleration
  (pkg/controller/daemon/util/daemonset_util.go ``AddOrUpdateDaemonPodTolerations``). Taints are not modelled.
- A pod on a node that no longer matches is deleted by the controller; the kubelet ends it after
  ``terminate_seconds``. A new pod becomes Running and Ready after ``start_seconds`` (the kubelet).
- NVIDIA's device plugin (NVIDIA/k8s-device-plugin v0.20.0, commit 1b826acc6af3079d8923bac395c3124b8861a9a6,
  cmd/nvidia-device-plugin/main.go ``start``): it enumerates the GPUs and registers its resources when it starts,
  and again only when it restarts - on a new kubelet socket, or on SIGHUP, which its config-manager sidecar sends
  when the node's ``nvidia.com/device-plugin.config`` label selects another config. So ``status.allocatable`` is
  computed from the simulated GPUs when the pod starts and when that label changes; a MIG change alone leaves it
  stale. Counting (MIG strategies, replicas, ``.shared`` with renameByDefault) is ``advertised`` below, the same
  rule the fake GPU Operator uses. When the pod ends, its resources are advertised as 0 (the kubelet marks a
  plugin's devices unhealthy when its endpoint stops).
- While a pod of the release (device plugin, GFD, MPS control daemon) or of another DaemonSet named in
  ``holders`` runs on a node, it holds the node's simulated GPUs (SimulatedBackend.hold, with a PID, its container's
  name and a pod cgroup line): a GPU reset then fails IN_USE, as it does on a real node ("In use by another client"),
  and the collection names the pod's process and UID as it would from /proc.
- GFD labels the node ``nvidia.com/mps.capable=true`` while its config uses MPS (the chart's MPS control daemon
  DaemonSet selects on it: deployments/helm/nvidia-device-plugin/templates/daemonset-mps-control-daemon.yml).

- NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1, commit
  fc69d98528027bfe06efff81e6fd99c98ede8ff7): its kubelet plugin is the DaemonSet labelled
  ``app.kubernetes.io/name: nvidia-dra-driver-gpu`` whose name ends ``-kubelet-plugin``
  (deployments/helm/nvidia-dra-driver-gpu/templates/kubeletplugin.yaml, _helpers.tpl). Its pod holds the GPUs like
  the device plugin's. When it becomes Running it enumerates the GPUs ONCE (cmd/gpu-kubelet-plugin/driver.go
  ``NewDriver``) and publishes one ResourceSlice for the node (``dra_slice``): driver ``gpu.nvidia.com``, one pool
  named after the node with one slice; a GPU with MIG disabled is one device of type ``gpu``, a GPU with MIG enabled
  publishes its MIG devices (type ``mig``) and not itself (nvlib.go ``enumerateGpusAndMigDevices``), with the names,
  attributes and capacities of deviceinfo.go ``GetDevice``. The slice is written as the resourceslice controller of
  k8s.io/dynamic-resource-allocation v0.34.0 (vendored there: resourceslice/resourceslicecontroller.go) writes it:
  generateName ``<node>-gpu.nvidia.com-``, a controller ownerReference to the Node (kubeletplugin/draplugin.go), pool
  generation 1 for a new pool; an existing slice is updated in place, its generation kept (one update call). A running
  plugin does not see a MIG change: the slice stays stale until the pod restarts. When the pod ends, the kubelet
  wipes the node's slices of that driver ``dra_wipe_seconds`` later unless a plugin of the driver registered again
  meanwhile (kubernetes v1.34 pkg/kubelet/cm/dra: ``defaultWipingDelay`` 30 s, ``wipeResourceSlices``; scaled down
  here like the pod start and stop times).

Its writes go straight into the fake server's store and are not in ``FakeKubeApi.requests``.
"""

import copy
import functools
import random
import time

import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

from . import fake_resource_api
from .fake_loop import ReconcileLoop

CONFIG_LABEL = "nvidia.com/device-plugin.config"
DRA_DRIVER = "gpu.nvidia.com"
MPS_CAPABLE = "nvidia.com/mps.capable"


def advertised(gpus, config, strategy):
    """{resource: count} that NVIDIA's device plugin registers for these GPUs with this config (a dict of its
    config file) and MIG strategy; None when the plugin exits instead (MPS with MIG enabled: "sharing using MPS is
    not supported for MIG devices")."""
    counts = {}
    for gpu in gpus:
        if gpu.get("mig_mode_current") == "Enabled" and strategy in ("single", "mixed"):
            for dev in gpu.get("mig_devices") or []:
                res = "nvidia.com/gpu" if strategy == "single" else "nvidia.com/mig-%s" % dev["profile"]
                counts[res] = counts.get(res, 0) + 1
        else:
            counts["nvidia.com/gpu"] = counts.get("nvidia.com/gpu", 0) + 1
    sharing = (config or {}).get("sharing") or {}
    if "mps" in sharing and any(g.get("mig_mode_current") == "Enabled" for g in gpus):
        return None
    block = sharing.get("mps") or sharing.get("timeSlicing") or {}
    for res in block.get("resources") or []:
        name = res["name"] if "/" in res["name"] else "nvidia.com/" + res["name"]
        if name in counts:
            total = counts.pop(name) * int(res["replicas"])
            counts[name + (".shared" if block.get("renameByDefault") else "")] = total
    return counts


@functools.lru_cache(maxsize=64)
def _parsed_text(text):
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _parsed(text):
    """A device plugin config's YAML, parsed once per text: the loop reads the ConfigMap every tick (about a quarter of
    its CPU time was this parse); a copy, so that no caller can change the cached one."""
    return copy.deepcopy(_parsed_text(text))


def set_allocatable(api, node, counts):
    """Replace the node's nvidia.com/* allocatable (and capacity) with ``counts``; None (the plugin ended) keeps
    the names at 0."""
    with api._lock:
        node_obj = api.get("", "nodes", node)
        alloc = node_obj["status"].get("allocatable") or {}
        kept = dict((k, v) for k, v in alloc.items() if not k.startswith("nvidia.com/"))
        if counts is None:
            kept.update((k, "0") for k in alloc if k.startswith("nvidia.com/"))
        else:
            kept.update((k, str(v)) for k, v in counts.items())
        if kept != alloc:
            node_obj["status"]["allocatable"] = kept
            node_obj["status"]["capacity"] = dict(kept)
            api.put(node_obj)


def _semver(text):
    """A version as NVIDIA's plugin publishes it (semver.MustParse(...).String()): three numeric parts, leading
    zeros dropped ("580.65.06" -> "580.65.6", "9.0" -> "9.0.0")."""
    parts = [str(int(p)) for p in str(text).split(".")[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _quantity(number):
    """A resource.Quantity of BinarySI format as the API returns it (canonical form: the largest binary suffix
    that keeps an integer)."""
    for suffix, factor in (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20),
                           ("Ki", 1 << 10)):
        if number and number % factor == 0:
            return "%d%s" % (number // factor, suffix)
    return str(number)


def dra_devices(facts):
    """The devices NVIDIA's DRA kubelet plugin publishes for these GPU facts (SimulatedBackend.read_all()): what it
    reads from NVML, taken here from the simulator. The device minor number is the GPU's index (the simulator has no
    minor numbers; on a DGX they coincide). Not simulated, so not published: ``brand``, the
    ``resource.kubernetes.io/pcieRoot`` attribute, and the MIG capacities copyEngines, decoders, encoders,
    jpegEngines and ofaEngines."""
    devices = []
    common = {"driverVersion": {"version": _semver(facts["driver_version"])},
              "cudaDriverVersion": {"version": _semver(facts["cuda_driver_version"])}}
    for gpu in facts["gpus"]:
        minor = gpu.get("minor", gpu["index"])
        attrs = dict(common, productName={"string": gpu["name"]}, architecture={"string": gpu["architecture"]},
                     cudaComputeCapability={"version": _semver(gpu["compute_capability"])},
                     pcieBusID={"string": gpu["pci_bus_id"]})
        if gpu.get("mig_mode_current") != "Enabled":
            devices.append({"name": "gpu-%d" % minor,
                            "attributes": dict(attrs, type={"string": "gpu"}, uuid={"string": gpu["uuid"]}),
                            "capacity": {"memory": {"value": _quantity(gpu["memory_total_bytes"])}}})
            continue
        profiles = dict((p["id"], p) for p in gpu.get("gi_profiles") or [])
        gi_profile_ids = dict((gi["id"], gi["profile_id"]) for gi in gpu.get("gpu_instances") or [])
        for dev in gpu.get("mig_devices") or []:
            profile = profiles[gi_profile_ids[dev["gi_id"]]]
            start, size = dev["placement"]["start"], dev["placement"]["size"]
            capacity = {"multiprocessors": {"value": str(profile["sms"])},
                        "memory": {"value": _quantity(profile["memory_mib"] * 1024 * 1024)}}
            for i in range(start, start + size):
                capacity["memorySlice%d" % i] = {"value": "1"}
            devices.append({"name": "gpu-%d-mig-%d-%d-%d" % (minor, profile["id"], start, size),
                            "attributes": dict(attrs, type={"string": "mig"}, uuid={"string": dev["uuid"]},
                                               parentUUID={"string": gpu["uuid"]},
                                               profile={"string": dev["gi_profile"]}),
                            "capacity": capacity})
    return devices


def dra_slices(api, node, driver=DRA_DRIVER):
    """The ResourceSlices of ``driver`` for ``node`` in the fake server's store."""
    with api._lock:
        return [copy.deepcopy(o) for (g, p, ns, n), o in sorted(api.objects.items())
                if g == "resource.k8s.io" and p == "resourceslices"
                and (o.get("spec") or {}).get("nodeName") == node and o["spec"].get("driver") == driver]


def _expression_matches(labels, expr):
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError("operator %r is not modelled by the fake DaemonSet controller" % op)


def should_run(pod_spec, labels):
    """Whether a DaemonSet's pod belongs on a node with these labels."""
    labels = labels or {}
    if any(labels.get(k) != v for k, v in ((pod_spec or {}).get("nodeSelector") or {}).items()):
        return False
    affinity = ((pod_spec or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    if not terms:
        return True
    return any(all(_expression_matches(labels, e) for e in term.get("matchExpressions") or []) for term in terms)


def _env(pod_spec, name):
    for container in (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or []):
        for env in container.get("env") or []:
            if env.get("name") == name and "value" in env:
                return env["value"]
    return None


class FakeDaemonSets(ReconcileLoop):
    """``nodes``: {node name: (simulated GPU state file, machine shape)}; ``holders``: label selectors (dicts) of
    other DaemonSets whose pods hold the GPUs (a DCGM exporter, say)."""

    name = "fake-daemonsets"

    def __init__(self, api, nodes, holders=(), start_seconds=0.2, terminate_seconds=0.2, poll=0.05,
                 dra_wipe_seconds=0.5):
        self.api, self.nodes, self.holders = api, dict(nodes), list(holders)
        self.start_seconds, self.terminate_seconds, self.poll = start_seconds, terminate_seconds, poll
        self.dra_wipe_seconds = dra_wipe_seconds
        self._dra_published = {}   # DRA kubelet plugin pod key -> node it published for
        self._dra_wipes = {}       # node -> time the kubelet wipes its gpu.nvidia.com slices
        self.events = []           # (time, node, what) in order: pods started/ended, plugin (re)registrations
        self._init_loop()          # start(), stop(), errors: tests/support/fake_loop.py
        self._started = {}         # pod key -> time it was created
        self._ending = {}          # pod key -> time the controller deleted it
        self._plugin_seen = {}     # pod key -> the config label the plugin last registered with
        self._serial = 0

    # ---- a converged cluster handed on (tests/support/converged_lab.py) -------------------------------------------
    def settled(self):
        """Whether nothing is under way: every node runs exactly the pods its DaemonSets' placement gives it, all
        Running; none is ending; no slice wipe is due."""
        if self._ending or self._dra_wipes:
            return False
        daemonsets = [d for d in self._objects("daemonsets") if d.get("kind") == "DaemonSet"]
        for node_name in self.nodes:
            node = self.api.get("", "nodes", node_name)
            labels = (node or {}).get("metadata", {}).get("labels") or {}
            pods = dict((p["metadata"]["ownerReferences"][0]["name"], p) for p in self.pods_on(node_name))
            want = set(d["metadata"]["name"] for d in daemonsets
                       if node is not None and should_run(d["spec"]["template"].get("spec") or {}, labels))
            if set(pods) != want or any(p["status"].get("phase") != "Running" for p in pods.values()):
                return False
        return True

    def snapshot(self):
        """What the controller knows beyond the API server's store (its pods are there, the GPUs' holds are in the
        state files): which plugins registered or published with what, and its pod numbering. Call it settled and
        stopped; ``restore`` gives it to a new controller over the restored store (the events are not handed on: a
        test reads those of its own runs)."""
        assert self.settled(), "snapshot of fake DaemonSets with pods starting or ending"
        return {"plugin_seen": sorted(self._plugin_seen.items()), "dra_published": sorted(self._dra_published.items()),
                "started": sorted(self._started.items()), "serial": self._serial}

    def restore(self, data):
        """Load what ``snapshot`` returned (before ``start``)."""
        self._plugin_seen = dict((tuple(k), v) for k, v in data["plugin_seen"])
        self._dra_published = dict((tuple(k), v) for k, v in data["dra_published"])
        self._started = dict((tuple(k), v) for k, v in data["started"])
        self._serial = data["serial"]
        return self

    # ---- what the API server holds ------------------------------------------------------------------------------
    def _objects(self, plural):
        with self.api._lock:
            return [dict(o) for (g, p, ns, n), o in self.api.objects.items() if p == plural and g in ("", "apps")]

    def pods_on(self, node):
        return [p for p in self._objects("pods") if (p.get("spec") or {}).get("nodeName") == node
                and any(r.get("kind") == "DaemonSet" for r in p["metadata"].get("ownerReferences") or [])]

    @staticmethod
    def kind(daemonset):
        """device-plugin, gfd, mps-control-daemon, dra-kubelet-plugin or None, by the charts' DaemonSet names."""
        name = daemonset["metadata"]["name"]
        app = daemonset["metadata"].get("labels", {}).get("app.kubernetes.io/name")
        if app == "nvidia-dra-driver-gpu":
            return "dra-kubelet-plugin" if name.endswith("-kubelet-plugin") else None
        if app != "nvidia-device-plugin":
            return None
        if name.endswith("-gpu-feature-discovery"):
            return "gfd"
        if name.endswith("-mps-control-daemon"):
            return "mps-control-daemon"
        return "device-plugin"

    def _holds(self, daemonset):
        labels = daemonset["metadata"].get("labels") or {}
        return self.kind(daemonset) is not None or any(
            all(labels.get(k) == v for k, v in sel.items()) for sel in self.holders)

    # ---- the loop ----------------------------------------------------------------------------------------------
    def reconcile(self):
        now = time.time()
        daemonsets = [d for d in self._objects("daemonsets") if d.get("kind") == "DaemonSet"]
        for node_name in sorted(self.nodes):
            node = self.api.get("", "nodes", node_name)
            if node is None:
                continue
            labels = node["metadata"].get("labels") or {}
            pods = dict((p["metadata"]["ownerReferences"][0]["name"], p) for p in self.pods_on(node_name))
            for ds in daemonsets:
                spec = ds["spec"]["template"].get("spec") or {}
                have = pods.get(ds["metadata"]["name"])
                if should_run(spec, labels) and have is None:
                    self._create_pod(ds, node_name)
                elif have is not None and not should_run(spec, labels):
                    self._end_pod(ds, have, node_name, now)
                elif have is not None:
                    self._kubelet(ds, have, node_name, now)
            for name, pod in pods.items():
                if not [d for d in daemonsets if d["metadata"]["name"] == name]:
                    self._end_pod(None, pod, node_name, now)      # its DaemonSet was deleted (helm uninstall)
            due = self._dra_wipes.get(node_name)
            if due is not None and now >= due:
                del self._dra_wipes[node_name]
                self._wipe_slices(node_name, now)

    def _key(self, pod):
        return (pod["metadata"].get("namespace"), pod["metadata"]["name"])

    def _create_pod(self, ds, node):
        self._serial += 1
        meta = ds["metadata"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "%s-%s-%d" % (meta["name"], node, self._serial),
                            "namespace": meta.get("namespace"),
                            "labels": dict(ds["spec"]["template"].get("metadata", {}).get("labels") or {}),
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                                 "uid": meta.get("uid", "")}]},
               "spec": dict(ds["spec"]["template"].get("spec") or {}, nodeName=node),
               "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}
        self.api.put(pod)
        self._started[self._key(pod)] = time.time()
        self.events.append((time.time(), node, "created %s" % pod["metadata"]["name"]))

    def _kubelet(self, ds, pod, node, now):
        key = self._key(pod)
        if pod["status"].get("phase") != "Running":
            if now - self._started.get(key, now) < self.start_seconds:
                return
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            self.api.put(pod)
            self.events.append((now, node, "running %s" % pod["metadata"]["name"]))
            if self._holds(ds):
                self._hold(node, pod)
        if self.kind(ds) == "device-plugin":
            self._device_plugin(ds, pod, node)
        elif self.kind(ds) == "dra-kubelet-plugin":
            self._dra_plugin(pod, node, now)
        elif self.kind(ds) == "gfd":
            self._gfd(ds, node)

    def _hold(self, node, pod):
        """The pod's process holds the node's simulated GPUs, as the real backend would find it in /proc: a PID, its
        first container's name as the command, and the cgroup kubelet's systemd driver gives a containerd container
        (kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<id>.scope), so the reset names the pod's UID."""
        uid = pod["metadata"].get("uid") or ""
        containers = pod["spec"].get("containers") or [{}]
        cgroup = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/" \
                 "cri-containerd-%s.scope\n" % (uid.replace("-", "_"), (uid.replace("-", "") * 2)[:64])
        self._backend(node).hold("pod %s/%s" % self._key(pod), pid=100000 + self._serial_of(pod),
                                 command=containers[0].get("name") or pod["metadata"]["name"], cgroup=cgroup)

    @staticmethod
    def _serial_of(pod):
        return int(pod["metadata"]["name"].rsplit("-", 1)[-1])

    def _end_pod(self, ds, pod, node, now):
        key = self._key(pod)
        if key not in self._ending:
            self._ending[key] = now
            meta = dict(pod["metadata"], deletionTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            self.api.put(dict(pod, metadata=meta))
            return
        if now - self._ending[key] < self.terminate_seconds:
            return
        with self.api._lock:
            self.api.objects.pop(("", "pods", key[0], key[1]), None)
        self._ending.pop(key, None)
        self._started.pop(key, None)
        self._backend(node).release("pod %s/%s" % key)
        self.events.append((now, node, "ended %s" % pod["metadata"]["name"]))
        if ds is not None and self.kind(ds) == "device-plugin" and self._plugin_seen.pop(key, None) is not None:
            self._set_allocatable(node, None)
        if self._dra_published.pop(key, None) is not None and not [
                k for k, n in self._dra_published.items() if n == node]:
            self._dra_wipes[node] = now + self.dra_wipe_seconds     # the plugin unregistered: wipe after the delay
            self.events.append((now, node, "DRA plugin unregistered: slices wiped in %ss" % self.dra_wipe_seconds))

    # ---- the release's daemons --------------------------------------------------------------------------------
    def _backend(self, node):
        path, shape = self.nodes[node]
        return SimulatedBackend(path, shape=shape)

    def _config(self, ds, node):
        """(config dict, MIG strategy) the device plugin on this node reads: the node's config label, else the
        chart's default, from the release's ConfigMap."""
        spec = ds["spec"]["template"].get("spec") or {}
        label = (self.api.get("", "nodes", node)["metadata"].get("labels") or {}).get(CONFIG_LABEL)
        names = [v["configMap"]["name"] for v in spec.get("volumes") or [] if v.get("configMap")]
        config = {}
        if names:
            cm = self.api.get("", "configmaps", names[0], ds["metadata"].get("namespace", ""))
            text = ((cm or {}).get("data") or {}).get(label or _env(spec, "DEFAULT_CONFIG") or "")
            config = _parsed(text) if text else {}
        strategy = _env(spec, "MIG_STRATEGY") or ((config or {}).get("flags") or {}).get("migStrategy") or "none"
        return config or {}, strategy

    def _device_plugin(self, ds, pod, node):
        key = self._key(pod)
        label = (self.api.get("", "nodes", node)["metadata"].get("labels") or {}).get(CONFIG_LABEL)
        if key in self._plugin_seen and self._plugin_seen[key] == label:
            return                 # running: it does not see a MIG change until it restarts
        config, strategy = self._config(ds, node)
        # a GPU NVML reports lost is not among the devices it registers (a GPU NVML does not list never is)
        counts = advertised(self._backend(node).read_all(skip_lost=True)["gpus"], config, strategy)
        self._plugin_seen[key] = label
        self._set_allocatable(node, counts)
        self.events.append((time.time(), node, "registered %s" % (counts,)))

    def _dra_plugin(self, pod, node, now):
        key = self._key(pod)
        if key in self._dra_published:
            return                 # running: it enumerated the GPUs once, at start
        self._dra_published[key] = node
        if self._dra_wipes.pop(node, None) is not None:
            self.events.append((now, node, "DRA plugin registered again: wipe cancelled"))
        devices = dra_devices(self._backend(node).read_all())
        node_obj = self.api.get("", "nodes", node)
        with self.api._lock:
            current = dra_slices(self.api, node)
            if current:
                slice_obj = current[0]
                for extra in current[1:]:    # the controller keeps one slice per desired slice
                    self.api.objects.pop(("resource.k8s.io", "resourceslices", "", extra["metadata"]["name"]), None)
                slice_obj["spec"] = dict(slice_obj["spec"], devices=devices)
                what = "updated"
            else:
                name = "%s-%s-%s" % (node, DRA_DRIVER, "".join(random.choice("bcdfghjklmnpqrstvwxz2456789")
                                                               for dummy in range(5)))
                slice_obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                             "metadata": {"name": name, "generateName": "%s-%s-" % (node, DRA_DRIVER),
                                          "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                               "uid": node_obj["metadata"].get("uid", ""),
                                                               "controller": True}]},
                             "spec": {"driver": DRA_DRIVER, "nodeName": node, "devices": devices,
                                      "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}
                what = "published"
            errors = fake_resource_api.errors("resourceslices", slice_obj, current[0] if current else None)
            if errors:
                raise ValueError("fake DRA plugin on %s wrote an invalid ResourceSlice: %s" % (node, errors))
            self.api.put(slice_obj)
        self.events.append((now, node, "%s slice %s: %d devices (%s)" % (
            what, slice_obj["metadata"]["name"], len(devices), ", ".join(d["name"] for d in devices))))

    def _wipe_slices(self, node, now):
        gone = dra_slices(self.api, node)
        with self.api._lock:
            for slice_obj in gone:
                self.api.objects.pop(("resource.k8s.io", "resourceslices", "", slice_obj["metadata"]["name"]), None)
        if gone:
            self.events.append((now, node, "wiped slices %s" % ", ".join(s["metadata"]["name"] for s in gone)))

    def _gfd(self, ds, node):
        config, dummy = self._config(ds, node)
        mps = "mps" in ((config or {}).get("sharing") or {})
        node_obj = self.api.get("", "nodes", node)
        labels = node_obj["metadata"].setdefault("labels", {})
        if labels.get(MPS_CAPABLE) != ("true" if mps else "false"):
            labels[MPS_CAPABLE] = "true" if mps else "false"
            self.api.put(node_obj)

    def _set_allocatable(self, node, counts):
        set_allocatable(self.api, node, counts)
