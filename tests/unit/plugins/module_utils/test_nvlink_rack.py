"""The clique label as GPU Feature Discovery computes it, and the rack check (plan/_nvlink_rack).

The label is checked against a transcription of GFD's own control flow (NVIDIA/k8s-device-plugin v0.20.0,
internal/lm/imex.go getFabricIDs and go-nvlib v0.12.0 IsFabricAttached) over NVML's raw values, which the collection
turns into facts with _gpu_fabric.facts: the property is that both give the same label, or both none. The rack check
runs on 18 simulated GB200 trays of one rack, with the simulator's fabric faults."""
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_fabric import facts as fabric_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _nvlink_rack as rack
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

NOT_SUPPORTED_RET, SUCCESS = "NOT_SUPPORTED", "SUCCESS"
ZERO = bytes(16)
CLUSTER_A = uuid.UUID("6a130f54-faaa-4b8f-847f-be44ab70f917").bytes
CLUSTER_B = uuid.UUID("dc6e40c4-d722-4357-9ba6-5291dd461278").bytes


def gfd_label(raws):
    """GFD's getFabricIDs + newImexLabeler over raw NVML answers (ret, state, status code, uuid bytes, clique id)."""
    clusters, cliques = {}, {}
    for i, (ret, state, status, cluster, clique) in enumerate(raws):
        if ret == NOT_SUPPORTED_RET:            # IsFabricAttached: ERROR_NOT_SUPPORTED -> false
            continue
        if state != 3:                           # info.State != GPU_FABRIC_STATE_COMPLETED
            continue
        if cluster == ZERO:                      # info.ClusterUuid == [16]uint8{}
            continue
        if status != 0:                          # nvml.Return(info.Status) != SUCCESS
            continue
        clusters.setdefault(str(uuid.UUID(bytes=cluster)), []).append(i)   # uuid.FromBytes(...).String()
        cliques.setdefault("%d" % clique, []).append(i)                     # fmt.Sprintf("%d", info.CliqueId)
    if len(clusters) > 1 or len(cliques) > 1:
        return None
    for c in clusters:
        for q in cliques:
            return c + "." + q
    return None


def as_gpus(raws):
    names = {0: "SUCCESS", 6: "NOT_FOUND", 10: "TIMEOUT"}
    return [{"index": i, "fabric": "not supported" if ret == NOT_SUPPORTED_RET else
             fabric_facts(state, names[status], cluster, clique, 0xAA)}
            for i, (ret, state, status, cluster, clique) in enumerate(raws)]


raw_gpu = st.tuples(st.sampled_from([SUCCESS, SUCCESS, SUCCESS, NOT_SUPPORTED_RET]), st.sampled_from([0, 1, 2, 3, 3, 3]),
                    st.sampled_from([0, 0, 0, 6, 10]), st.sampled_from([CLUSTER_A, CLUSTER_A, CLUSTER_B, ZERO]),
                    st.sampled_from([32766, 32766, 1, 0, 0xFFFFFFFF]))


@settings(max_examples=500, deadline=None)
@given(st.lists(raw_gpu, min_size=0, max_size=8))
def test_the_label_is_gfds_label_or_none_alike(raws):
    got = rack.clique_label(as_gpus(raws))
    assert got["value"] == gfd_label(raws)
    assert (got["reason"] is None) == (got["value"] is not None)


def _tray(clique=32766, cluster=CLUSTER_A, n=4):
    return [{"index": i, "fabric": fabric_facts(3, "SUCCESS", cluster, clique, 0xAA)} for i in range(n)]


def test_the_label_value_and_each_no_label_case_in_words():
    assert rack.clique_label(_tray())["value"] == "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
    mixed = _tray()
    mixed[3] = _tray(clique=7)[3]
    assert rack.clique_label(mixed) == {"value": None, "reason": "the GPUs are in 2 cliques (32766: GPU 0, 1, 2; 7: GPU 3)"}
    other = _tray()
    other[0] = _tray(cluster=CLUSTER_B)[0]
    assert "2 NVLink clusters" in rack.clique_label(other)["reason"]
    hgx = [{"index": 0, "fabric": fabric_facts(3, "SUCCESS", ZERO, 0, 0)}]
    assert rack.clique_label(hgx)["value"] is None and "no GPU is attached" in rack.clique_label(hgx)["reason"]
    # a GPU still in progress is skipped, as GFD skips it: the other three still give the label
    partly = _tray()
    partly[2] = {"index": 2, "fabric": fabric_facts(2, "SUCCESS", ZERO, 0, 0xAA)}
    assert rack.clique_label(partly)["value"] == "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"


def test_bad_gpu_lists_are_refused_saying_what_is_expected():
    with pytest.raises(ValueError, match="list of gpu_info's GPU entries"):
        rack.clique_label("GPU 0")
    with pytest.raises(ValueError, match="with its fabric facts"):
        rack.clique_label([{"index": 0}])
    with pytest.raises(ValueError, match="neither fabric facts nor"):
        rack.clique_label([{"index": 0, "fabric": {"clique_id": 1}}])


NODES = ["gb-%02d" % n for n in range(1, 19)]


@pytest.fixture(scope="module")
def trays(tmp_path_factory):
    base = tmp_path_factory.mktemp("rack")
    return dict((node, SimulatedBackend(str(base / ("%s.json" % node)), shape="gb200-nvl", rack="rack-a"))
                for node in NODES)


def _read(trays):
    return dict((node, sim.read_all()["gpus"]) for node, sim in trays.items())


def _declared(**extra):
    return dict({"name": "rack-a", "nodes": NODES, "gpus": 72}, **extra)


def test_a_fresh_simulated_rack_is_one_clique_of_72_gpus(trays):
    got = rack.rack_check(_declared(), _read(trays))
    assert got["ready"] is True and got["problems"] == [] and got["gpus"] == 72 and got["clique_id"] == 32766
    value = "%s.%s" % (got["cluster_uuid"], got["clique_id"])
    assert set(got["labels"].values()) == {value}
    assert len(got["labels"]) == 18


def _faulted(trays, node, fault, value, gpus=(0, 1, 2, 3)):
    for index in gpus:
        trays[node].inject_health(index, fault, value)


def _heal(trays, node):
    for index in range(4):
        trays[node].inject_health(index, "healthy", True)


def test_a_tray_in_another_clique_is_named_with_what_to_do(trays):
    _faulted(trays, "gb-07", "fabric_clique_id", 7)
    try:
        got = rack.rack_check(_declared(), _read(trays))
    finally:
        _heal(trays, "gb-07")
    assert got["ready"] is False and got["clique_id"] == 32766 and got["gpus"] == 68
    by_node = [p for p in got["problems"] if p["node"] == "gb-07"]
    assert len(by_node) == 1
    assert by_node[0]["message"].startswith("rack rack-a: node gb-07: GPUs 0, 1, 2, 3: in clique 7, the rack's is 32766")
    assert "NVLink partition" in by_node[0]["message"]
    assert [p["node"] for p in got["problems"]] == ["gb-07", None]
    assert "68 of the declared 72 GPUs" in got["problems"][1]["message"]
    assert got["labels"]["gb-07"].endswith(".7")


def test_a_gpu_whose_fabric_is_not_completed_is_named(trays):
    _faulted(trays, "gb-03", "fabric_state", "in_progress", gpus=(2,))
    _faulted(trays, "gb-04", "fabric_status", "TIMEOUT", gpus=(1,))
    try:
        got = rack.rack_check(_declared(), _read(trays))
    finally:
        _heal(trays, "gb-03")
        _heal(trays, "gb-04")
    messages = dict((p["node"], p["message"]) for p in got["problems"])
    assert "GPU 2: fabric state in_progress, not completed" in messages["gb-03"]
    assert "Fabric Manager" in messages["gb-03"]
    assert "GPU 1: fabric state completed with status TIMEOUT, not SUCCESS" in messages["gb-04"]
    assert got["ready"] is False and got["gpus"] == 70
    # GFD still labels both nodes from their other GPUs
    assert got["labels"]["gb-03"] == got["labels"]["gb-01"]


def test_a_tray_of_another_rack_and_a_short_tray(trays, tmp_path):
    stranger = SimulatedBackend(str(tmp_path / "x.json"), shape="gb200-nvl", rack="rack-b")
    stranger.inject_health(3, "missing", True)
    node_gpus = _read(trays)
    node_gpus["gb-18"] = stranger.read_all()["gpus"]
    got = rack.rack_check(_declared(), node_gpus)
    messages = [p["message"] for p in got["problems"] if p["node"] == "gb-18"]
    assert messages[0].startswith("rack rack-a: node gb-18: GPUs 0, 1, 2: in NVLink cluster ")
    assert "another NVLink domain" in messages[0]
    assert messages[1] == ("rack rack-a: node gb-18: NVML lists 3 GPU(s), a tray of this rack holds 4 - "
                           + rack.FIX_SHORT)


def test_an_unread_node_and_a_node_without_fabric(trays, tmp_path):
    node_gpus = _read(trays)
    node_gpus.pop("gb-05")
    node_gpus["gb-06"] = SimulatedBackend(str(tmp_path / "h.json"), shape="hgx-h200").read_all()["gpus"][:4]
    node_gpus["gb-08"] = SimulatedBackend(str(tmp_path / "l.json"), shape="l40s-x2").read_all()["gpus"]
    got = rack.rack_check(_declared(), node_gpus)
    messages = {}
    for problem in got["problems"]:
        messages[problem["node"]] = messages.get(problem["node"], "") + problem["message"] + "\n"
    assert messages["gb-05"] == "rack rack-a: node gb-05: " + rack.FIX_UNREAD + "\n"
    assert "GPUs 0, 1, 2, 3: completed without a cluster UUID" in messages["gb-06"]
    assert "GPUs 0, 1: NVML reports no NVLink fabric" in messages["gb-08"]
    assert "NVML lists 2 GPU(s), a tray of this rack holds 4" in messages["gb-08"]


@pytest.mark.parametrize("declared,words", [
    ("rack-a", "a mapping with name, nodes and gpus"),
    ({"name": "", "nodes": ["a"]}, "name must be a non-empty string"),
    ({"name": "r", "nodes": []}, "nodes must be a non-empty list"),
    ({"name": "r", "nodes": ["a", "a"]}, "listed twice: a"),
    ({"name": "r", "nodes": ["a"], "gpus": 0}, "gpus must be a whole number, 1 or more"),
    ({"name": "r", "nodes": ["a"], "gpus": True}, "gpus must be a whole number"),
    ({"name": "r", "nodes": ["a"], "size": 72}, "unknown key(s) size; valid: name, nodes, gpus"),
])
def test_bad_declarations_are_refused_naming_what_is_valid(declared, words):
    with pytest.raises(rack.RackDeclarationError) as err:
        rack.rack_check(declared, {})
    assert words in str(err.value)


def test_a_rack_declared_with_a_count_that_does_not_divide(trays):
    got = rack.rack_check(_declared(nodes=NODES[:17]), _read(trays))
    assert got["ready"] is False and got["problems"][-1]["node"] is None
    assert "68 of the declared 72 GPUs" in got["problems"][-1]["message"]
    assert "72 GPUs do not divide over them" in got["problems"][-1]["message"]


fabric_gpu = st.builds(lambda state, status, cluster, clique: fabric_facts(state, status, cluster, clique, 0xAA),
                       st.sampled_from([2, 3, 3, 3, 3]), st.sampled_from(["SUCCESS"] * 4 + ["TIMEOUT"]),
                       st.sampled_from([CLUSTER_A] * 4 + [CLUSTER_B]), st.sampled_from([32766] * 4 + [7]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(fabric_gpu, min_size=3, max_size=4), min_size=1, max_size=6))
def test_a_rack_is_ready_exactly_when_every_gpu_agrees_and_the_count_is_held(nodes):
    names = ["n%d" % i for i in range(len(nodes))]
    node_gpus = dict((name, [{"index": i, "fabric": f} for i, f in enumerate(fabrics)])
                     for name, fabrics in zip(names, nodes))
    got = rack.rack_check({"name": "r", "nodes": names, "gpus": 4 * len(names)}, node_gpus)
    every = [f for fabrics in nodes for f in fabrics]
    agree = all(f["state"] == "completed" and f["status"] == "SUCCESS" for f in every) and \
        len(set((f["cluster_uuid"], f["clique_id"]) for f in every)) == 1
    assert got["ready"] == (agree and len(every) == 4 * len(names))
    if got["ready"]:
        assert set(got["labels"].values()) == {"%s.%s" % (got["cluster_uuid"], got["clique_id"])}
    else:
        assert got["problems"]
    # every node with a GPU out of the rack's clique, or not completed with SUCCESS, is named
    for name, fabrics in zip(names, nodes):
        off = [f for f in fabrics if f["state"] != "completed" or f["status"] != "SUCCESS"
               or (f["cluster_uuid"], f["clique_id"]) != (got["cluster_uuid"], got["clique_id"])]
        assert bool(off) <= any(p["node"] == name for p in got["problems"])
