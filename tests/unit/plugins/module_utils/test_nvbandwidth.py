"""The burn-in's nvbandwidth check (_nvbandwidth, pure): nvbandwidth v0.8's JSON (as its json_output.cpp writes it,
and as the lab's stand-in prints it) is parsed, every pair of GPUs of a model with a floor is held to it, and what
fails is named - test, pair in nvbandwidth's own direction, GB/s, floor. Property tests: the failures are exactly the
pairs below the floor (or with no bandwidth), CUDA's device order does not change which NVML GPUs are named, and the
per-test cap keeps a count of the rest."""
import json
import os
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _gpu_catalog, _nvbandwidth as nvb
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
STANDIN = os.path.join(ROOT, "tests", "support", "bin", "nvbandwidth")
BUSES = ["00000000:%02X:00.0" % b for b in (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)]
READ_CE = "device_to_device_memcpy_read_ce"


def floor_for(name):
    key = _gpu_catalog.model_key_for_name(name)
    return _gpu_catalog.nvbandwidth_floor_gbps(key) if key else None


def gpus(names):
    return [{"index": i, "name": name, "pci_bus_id": BUSES[i]} for i, name in enumerate(names)]


def document(node, matrices, order=None, error=None):
    """nvbandwidth -j's document for ``node``'s GPUs, CUDA ordinal k being node[order[k]]; ``matrices``: test ->
    matrix by NVML index (None: N/A; a str: a status without matrix)."""
    order = order or list(range(len(node)))
    cases = []
    for test, matrix in matrices.items():
        if isinstance(matrix, str):
            cases.append({"name": test, "status": matrix})
            continue
        cells = [["N/A" if matrix[order[r]][order[c]] is None else format(matrix[order[r]][order[c]], ".6g")
                  for c in range(len(order))] for r in range(len(order))]
        arrow = "->" if "read" in test else "<-"
        cases.append({"name": test, "status": "Passed", "bandwidth_matrix": cells, "sum": 0.0,
                      "bandwidth_description": "memcpy CE GPU(row) %s GPU(column) bandwidth (GB/s)" % arrow})
    root = {"version": "v0.8", "git_version": "66746a3", "Driver Version": "580.95.05", "CUDA Runtime Version": 13000,
            "GPU Device list": [_device(k, node[i]) for k, i in enumerate(order)],
            "testcases": cases}
    if error:
        root["error"] = error
    return json.dumps({"nvbandwidth": root}, indent=3, sort_keys=True)


def _device(ordinal, gpu):
    bus = gpu["pci_bus_id"]
    return "%d: %s (%s:%s:%s): (node-a)" % (ordinal, gpu["name"], bus[:8], bus[9:11].lower(), bus[12:14])


def healthy(n, value=389.5):
    return [[None if r == c else value for c in range(n)] for r in range(n)]


def all_tests(matrix):
    return dict((test, matrix) for test in nvb.TESTS)


def test_the_catalog_floors_follow_nvidia_s_nvlink_figures():
    assert _gpu_catalog.nvbandwidth_floor_gbps("H200") == 315.0            # 900 GB/s bidirectional, 450 one way
    assert _gpu_catalog.nvbandwidth_floor_gbps("H100-SXM5-80GB") == 315.0
    assert _gpu_catalog.nvbandwidth_floor_gbps("A100-SXM4-80GB") == 210.0  # 600
    assert _gpu_catalog.nvbandwidth_floor_gbps("B200") == 630.0            # 1.8 TB/s
    for key in ("L40S", "RTX-PRO-6000", "A30", "H100-NVL", "GH200"):     # no NVLink, or bridges in pairs, or one GPU
        assert _gpu_catalog.nvbandwidth_floor_gbps(key) is None
    assert set(_gpu_catalog.NVLINK_GBPS) <= set(_gpu_catalog.GPU_MODELS)


def test_a_slow_link_is_named_with_its_test_direction_and_floor():
    node = gpus(["NVIDIA H200"] * 4)
    matrix = healthy(4)
    matrix[0][3] = 180.0
    parsed = nvb.parse(document(node, all_tests(matrix)))
    assert parsed["version"] == "v0.8" and parsed["driver"] == "580.95.05" and parsed["error"] is None
    found = nvb.verdict(parsed, node, floor_for)
    messages = [f["message"] for f in found["failures"]]
    assert messages[0] == "nvbandwidth device_to_device_memcpy_read_ce: GPU 0 -> GPU 3 180 GB/s below floor 315"
    assert "nvbandwidth device_to_device_memcpy_write_ce: GPU 0 <- GPU 3 180 GB/s below floor 315" in messages
    assert len(messages) == 4 and found["tests"][READ_CE] == {"status": "Passed", "checked": 12, "lowest_gbps": 180.0}
    assert nvb.verdict(nvb.parse(document(node, all_tests(healthy(4)))), node, floor_for)["failures"] == []


def test_errors_waived_missing_tests_and_no_bandwidth_fail_the_check():
    node = gpus(["NVIDIA H100 80GB HBM3"] * 2)
    matrix = [[None, None], [389.0, None]]              # 0 -> 1 could not enable peer access
    tests = {READ_CE: matrix, "device_to_device_memcpy_write_ce": "Waived", "device_to_device_memcpy_read_sm": "Error"}
    found = nvb.verdict(nvb.parse(document(node, tests)), node, floor_for)
    messages = [f["message"] for f in found["failures"]]
    assert messages[0] == ("nvbandwidth device_to_device_memcpy_read_ce: GPU 0 -> GPU 1 no bandwidth measured (N/A: "
                           "peer access could not be enabled) below floor 315")
    assert messages[1].startswith("nvbandwidth device_to_device_memcpy_write_ce: waived by nvbandwidth")
    assert messages[2] == "nvbandwidth device_to_device_memcpy_read_sm: Error"
    assert messages[3] == "nvbandwidth device_to_device_memcpy_write_sm: no result (the run ended before this test)"
    ended = nvb.verdict(nvb.parse(document(node, {}, error="[CUDA_ERROR_NO_DEVICE] no CUDA-capable device")),
                        node, floor_for)
    assert [f["message"] for f in ended["failures"]] == [
        "nvbandwidth could not run its tests: [CUDA_ERROR_NO_DEVICE] no CUDA-capable device"]


def test_v0_8_s_duplicate_error_entry_wins_over_its_running_entry():
    text = json.dumps({"nvbandwidth": {"testcases": [{"name": READ_CE, "status": "Running"},
                                                     {"name": READ_CE, "status": "Error"}]}})
    assert nvb.parse(text)["tests"][READ_CE]["status"] == "Error"


@pytest.mark.parametrize("text", ["", "Segmentation fault", "[]", '{"other": {}}',
                                  '{"nvbandwidth": {"testcases": [{"name": "x", "bandwidth_matrix": [["fast"]]}]}}'])
def test_output_that_is_not_its_json_is_an_error(text):
    with pytest.raises(nvb.NvbandwidthError):
        nvb.parse(text)


def test_the_plan_runs_at_medium_and_above_on_two_gpus_with_a_floor():
    assert nvb.plan(2, gpus(["NVIDIA H200"] * 2), floor_for) == (True, None)
    assert nvb.plan(4, gpus(["NVIDIA B200"] * 8), floor_for) == (True, None)
    run, note = nvb.plan(1, gpus(["NVIDIA H200"] * 8), floor_for)
    assert not run and "medium" in note
    run, note = nvb.plan(3, gpus(["NVIDIA L40S"] * 2), floor_for)
    assert not run and "NVIDIA L40S" in note and "floor" in note
    assert not nvb.plan(3, gpus(["NVIDIA H200"]), floor_for)[0]


def test_a_gpu_without_a_floor_leaves_its_pairs_unchecked_with_a_note():
    node = gpus(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA L40S"])
    matrix = healthy(3)
    matrix[0][2] = matrix[2][0] = 25.0                  # PCIe to the L40S: no floor, not a failure
    found = nvb.verdict(nvb.parse(document(node, all_tests(matrix))), node, floor_for)
    assert found["failures"] == [] and found["tests"][READ_CE]["checked"] == 2
    assert found["notes"] == ["no bandwidth floor in the catalog for NVIDIA L40S: pairs with these GPUs were not "
                              "checked"]


def test_command_errors():
    assert nvb.command_errors("nvbandwidth") == [] and nvb.command_errors("/usr/local/bin/nvbandwidth") == []
    for bad in ("", " ", "nvbandwidth\x00", " nvbandwidth", None, ["nvbandwidth"]):
        (error,) = nvb.command_errors(bad)
        assert "nvbandwidth must be a command name" in error


SIZES = st.integers(min_value=2, max_value=8)


@st.composite
def runs(draw):
    n = draw(SIZES)
    values = st.one_of(st.none(), st.floats(min_value=0, max_value=900, allow_nan=False), st.just(389.5))
    matrix = [[None if r == c else draw(values) for c in range(n)] for r in range(n)]
    order = draw(st.permutations(list(range(n))))
    return n, matrix, order


@settings(max_examples=60, deadline=None, database=None)
@given(runs())
def test_property_failures_are_exactly_the_pairs_below_the_floor_in_any_cuda_order(run):
    n, matrix, order = run
    node = gpus(["NVIDIA H200"] * n)
    parsed = nvb.parse(document(node, {READ_CE: matrix}, order=order))
    found = nvb.verdict(parsed, node, floor_for)
    # the cell as printed: six significant digits
    slow = set((r, c) for r in range(n) for c in range(n) if r != c and
               (matrix[r][c] is None or float(format(matrix[r][c], ".6g")) < 315.0))
    links = [f["link"] for f in found["failures"] if f["test"] == "nvbandwidth " + READ_CE and f["link"]]
    named = set(tuple(int(part) for part in link.replace("GPU ", "").split(" -> ")) for link in links)
    assert named <= slow and len(named) == len(links) == min(len(slow), nvb.MAX_PAIRS_PER_TEST)
    rest = [f for f in found["failures"] if f["test"] == "nvbandwidth " + READ_CE and not f["link"]]
    assert len(rest) == (1 if len(slow) > nvb.MAX_PAIRS_PER_TEST else 0)
    if rest:
        assert ": %d more pairs below floor" % (len(slow) - nvb.MAX_PAIRS_PER_TEST) in rest[0]["message"]
    assert found["tests"][READ_CE]["checked"] == n * (n - 1)
    # the three other tests are missing from this run: each is named, nothing else fails
    assert len(found["failures"]) == len(links) + len(rest) + 3
    # the NVML index order run names the same pairs
    same = nvb.verdict(nvb.parse(document(node, {READ_CE: matrix})), node, floor_for)
    assert same["failures"] == found["failures"]


@settings(max_examples=40, deadline=None, database=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=8))
def test_property_cells_read_back_as_printed(values):
    text = json.dumps({"nvbandwidth": {"testcases": [{"name": READ_CE, "status": "Passed",
                                                      "bandwidth_matrix": [[format(v, ".6g") for v in values]]}]}})
    assert nvb.parse(text)["tests"][READ_CE]["matrix"] == [[float(format(v, ".6g")) for v in values]]


def test_the_lab_stand_in_prints_what_the_parser_reads(tmp_path):
    path = str(tmp_path / "state.json")
    SimulatedBackend(path, shape="hgx-b200").read_all()
    env = dict(os.environ, GPUOPS_SIMULATED_GPUS=path)
    with open(path + ".nvbandwidth.json", "w") as handle:
        json.dump({"links": [{"from": 6, "to": 1, "gbps": 412.25, "tests": ["device_to_device_memcpy_write_sm"]}]},
                  handle)
    proc = subprocess.run(nvb.argv(STANDIN), env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    node = [{"index": i, "name": "NVIDIA B200", "pci_bus_id": "00000000:%s:00.0" % b}
            for i, b in enumerate(("07", "0F", "47", "4E", "87", "90", "B7", "BD"))]
    found = nvb.verdict(nvb.parse(proc.stdout), node, floor_for)
    assert [f["message"] for f in found["failures"]] == [
        "nvbandwidth device_to_device_memcpy_write_sm: GPU 6 <- GPU 1 412.2 GB/s below floor 630"]
    with open(path + ".nvbandwidth.json", "w") as handle:
        json.dump({"error": "[CUDA_ERROR_SYSTEM_NOT_READY] system not yet initialized"}, handle)
    proc = subprocess.run(nvb.argv(STANDIN), env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "system not yet initialized" in nvb.parse(proc.stdout)["error"]
