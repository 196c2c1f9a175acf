"""tests/gpu/fabric_vs_smi.py on this GPU-less machine: a text in nvidia-smi -q's layout (the field names and words of
the public outputs quoted in docs/gpu-info.md) against the simulator's gpu_info facts."""
import importlib.util
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location("fabric_vs_smi", os.path.join(ROOT, "tests", "gpu", "fabric_vs_smi.py"))
fabric_vs_smi = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fabric_vs_smi)


def _smi(gpus):
    """A `nvidia-smi -q` text with a Fabric section per GPU in nvidia-smi's layout, from the given facts."""
    lines = ["==============NVSMI LOG==============", "", "Attached GPUs                             : %d" % len(gpus)]
    for gpu in gpus:
        f = gpu["fabric"]
        lines += ["GPU %s" % gpu["pci_bus_id"], "    Product Name                          : NVIDIA GB200",
                  "    Fabric"]
        state = {"completed": "Completed", "in_progress": "In Progress", "not_started": "Not Started"}[f["state"]]
        lines += ["        State                             : %s" % state,
                  "        Status                            : Success",
                  "        CliqueId                          : %d" % f["clique_id"],
                  "        ClusterUUID                       : %s" % f["cluster_uuid"],
                  "        Health",
                  "            Bandwidth                     : %s" % (
                      "Degraded" if f["health"]["degraded_bandwidth"] else "Full"),
                  "            Route Recovery in progress    : False",
                  "            Route Unhealthy               : %s" % f["health"]["route_unhealthy"],
                  "            Access Timeout Recovery       : False",
                  "    Processes                             : None"]
    return "\n".join(lines) + "\n"


def test_a_simulated_tray_matches_its_nvidia_smi_text_field_by_field(tmp_path):
    sim = SimulatedBackend(str(tmp_path / "t.json"), shape="gb200-nvl", rack="rack-a")
    sim.inject_health(1, "fabric_degraded", True)
    sim.inject_health(2, "fabric_route_unhealthy", True)
    gpus = sim.read_all()["gpus"]
    text = _smi(gpus)
    rows = fabric_vs_smi.rows(gpus, text)
    assert len(rows) == 4 * 8 and all(ours == theirs for dummy, ours, theirs in rows), rows
    # a differing clique is seen as a difference
    sim.inject_health(3, "fabric_clique_id", 7)
    differ = [r for r in fabric_vs_smi.rows(sim.read_all()["gpus"], text) if r[1] != r[2]]
    assert differ == [("gpu3.fabric.clique_id", 7, gpus[3]["fabric"]["clique_id"])]


def test_a_gpu_without_fabric_is_na_on_both_sides(tmp_path):
    gpus = SimulatedBackend(str(tmp_path / "h.json"), shape="h200-x1").read_all()["gpus"]
    text = ("GPU 00000000:00:06.0\n    Fabric\n        State                             : N/A\n"
            "        Status                            : N/A\n        CliqueId                          : N/A\n"
            "        ClusterUUID                       : N/A\n        Health\n"
            "            Bandwidth                     : N/A\n")
    assert fabric_vs_smi.rows(gpus, text) == [("gpu0.fabric", "not supported", "not supported")]
    assert fabric_vs_smi.fabric_sections(text)[0][1]["Health"] == {"Bandwidth": "N/A"}
