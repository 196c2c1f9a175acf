"""A stand-in for what NVIDIA's DCGM exporter serves on /metrics, answered through the fake API server's pod proxy
(FakeKubeApi.pod_proxy), for the tests of gpuops.nvidia.dcgm_exporter_verify and the site flow.

It is NOT NVIDIA's exporter. It serves, for the node a pod runs on, the lines NVIDIA's exporter renders
(NVIDIA/dcgm-exporter 4.5.3-4.8.2, commit 691c92762eb551313c825f6efe4ceeee20982801,
internal/pkg/rendermetrics/render_metrics.go: ``# HELP`` and ``# TYPE`` per counter, then per GPU
``FIELD{gpu="<index>",UUID="<uuid>",pci_bus_id="<bus id>",device="nvidia<index>",modelName="<name>",Hostname="<node>"}
VALUE``; the Hostname is the pod's NODE_NAME in Kubernetes, internal/pkg/hostname/hostname.go) for three counters of
etc/default-counters.csv, from the node's simulated GPUs (each GPU the simulator lists; a GPU fallen off the bus is not
listed, as DCGM would not list it). It answers only where the real exporter would be reached and read the node's host
engine: a pod of the chart (app.kubernetes.io/name=dcgm-exporter), on the host network, whose
DCGM_REMOTE_HOSTENGINE_INFO is localhost:<the node's host engine port>, and where the node's host engine runs
(``engines``); elsewhere it does not answer (the API server's 503).
"""

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim import _simulator_health as sim_health
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog as catalog

COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda g: 1980),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
     lambda g: (g.get("health") or {}).get("temperature_c", 29)),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: 71.5),
)


def _model_name(gpu):
    model = catalog.GPU_MODELS.get(gpu.get("model")) or {}
    return model.get("name") or "NVIDIA %s" % gpu.get("model")


def metrics_text(node, gpus, skip=()):
    """The exporter's /metrics for ``gpus`` (simulator GPU records) on ``node``; GPU indexes in ``skip`` have no
    series (a GPU the host engine does not watch)."""
    lines = []
    for field, kind, help_text, value in COUNTERS:
        lines.append("# HELP %s %s" % (field, help_text))
        lines.append("# TYPE %s %s" % (field, kind))
        for gpu in gpus:
            if gpu["index"] in skip:
                continue
            lines.append('%s{gpu="%d",UUID="%s",pci_bus_id="%s",device="nvidia%d",modelName="%s",Hostname="%s"} %s'
                         % (field, gpu["index"], gpu["uuid"], gpu["pci_bus_id"], gpu["index"], _model_name(gpu),
                            node, value(gpu)))
    return "\n".join(lines) + "\n"


class ExporterStandin(object):
    """``nodes``: {node name: simulated GPU state file}. ``engines``: {node: host engine port, or None where no host
    engine runs}; a node not named runs one on 5555. ``skip``: {node: GPU indexes without series}."""

    def __init__(self, nodes, engines=None, skip=None):
        self.nodes = dict(nodes)
        self.engines = dict(engines or {})
        self.skip = dict(skip or {})
        self.served = []        # (node, pod name) of every answer with metrics

    def __call__(self, pod, port, path):
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (meta.get("labels") or {}).get("app.kubernetes.io/name") != "dcgm-exporter":
            return None
        node = spec.get("nodeName")
        container = (spec.get("containers") or [{}])[0]
        ports = [p.get("containerPort") for p in container.get("ports") or []]
        if port not in ports or node not in self.nodes:
            return None
        env = dict((e.get("name"), e.get("value")) for e in container.get("env") or [])
        engine = self.engines.get(node, 5555)
        if engine is None or not spec.get("hostNetwork") or env.get("DCGM_REMOTE_HOSTENGINE_INFO") != \
                "localhost:%d" % engine:
            return None      # the exporter cannot reach the node's host engine: it does not serve
        if path != "/metrics":
            return 404, "404 page not found\n"
        state = SimulatedBackend(self.nodes[node]).raw_state()
        gpus = [g for g in sim_health.listed(state) if not sim_health.is_lost(g)]
        self.served.append((node, meta.get("name")))
        return 200, metrics_text(node, gpus, self.skip.get(node, ()))
