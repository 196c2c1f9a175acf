"""site.yml with a burn-in declared (gpu_node_burn_in; issue 50 item 3), on one lab node without a cluster, the lab's
dcgmi stand-in answering: the first converge burns the node in (dcgmi diag -r 1, recorded on the node) and a re-run
does not; a higher level burns it in again, and a diagnostic that fails a test keeps the node out (the health gate
fails it, naming the test) until a burn-in passes; so does a slow GPU pair in nvbandwidth's check at medium (the lab's
nvbandwidth stand-in, one link injected), named; the converged node's next re-run runs nothing."""
import json
import shutil

import pytest

from tests.integration.site_helpers import Site
from tests.support.ansible_run import ROOT

pytestmark = pytest.mark.slow

NODE = "lab-hgx-h200"
FAILED = "%s/tests/fixtures/dcgm/diag-r1-pending-row-remap.json" % ROOT
TASK = "Burn the node in (DCGM's diagnostic, once per driver version and level)"


def test_a_node_is_burned_in_once_and_kept_out_while_its_burn_in_fails(tmp_path):
    site = Site(tmp_path, limit=(NODE,))
    record = site.state / NODE / "var" / "lib" / "gpuops" / "burn-in.json"

    first = site.run(gpu_node_burn_in="quick")
    assert first.rc == 0, first
    assert [r.get("changed") for r in first.task(TASK, NODE)] == [True], first.task(TASK, NODE)
    passed = json.loads(record.read_text())
    assert passed["level"] == "quick" and passed["verdict"] == "pass" and passed["driver"]
    # quick is dcgmi's alone: the record says the bandwidth check was not run, and why
    assert passed["bandwidth"]["ran"] is False and "medium level and above" in passed["bandwidth"]["note"], passed

    again = site.run(gpu_node_burn_in="quick")
    assert again.rc == 0 and again.changed(NODE) == 0 and again.task(TASK, NODE) == [], again
    assert json.loads(record.read_text()) == passed

    # a higher level, and the diagnostic fails a test: recorded, and the node is kept out by the health gate
    shutil.copy(FAILED, str(site.state / ("%s.json.dcgmi.json" % NODE)))
    failed = site.run(gpu_node_burn_in="medium")
    assert failed.rc != 0, failed
    assert [r.get("changed") for r in failed.task(TASK, NODE)] == [True]
    kept = json.loads(record.read_text())
    assert kept["level"] == "medium" and kept["verdict"] == "fail" and kept["failures"], kept
    (message,) = [r["msg"] for r in failed.task("GPU health - fail this node", NODE)]
    assert "keeps it out of service" in message and "burn-in failed a test" in message, message
    assert kept["failures"][0]["test"] in message

    # the diagnostic passes, one GPU pair is slow in nvbandwidth's check: failed, the pair named, the node kept out
    (site.state / ("%s.json.dcgmi.json" % NODE)).unlink()
    slow = site.state / ("%s.json.nvbandwidth.json" % NODE)
    slow.write_text(json.dumps({"links": [{"from": 0, "to": 3, "gbps": 180.0,
                                           "tests": ["device_to_device_memcpy_read_ce"]}]}))
    linked = site.run(gpu_node_burn_in="medium")
    assert linked.rc != 0, linked
    assert [r.get("changed") for r in linked.task(TASK, NODE)] == [True]
    (message,) = [r["msg"] for r in linked.task("GPU health - fail this node", NODE)]
    assert "nvbandwidth device_to_device_memcpy_read_ce: GPU 0 -> GPU 3 180 GB/s below floor 315" in message, message
    assert json.loads(record.read_text())["verdict"] == "fail"

    # the link mended: burned in again (the failed record is never enough), both checks pass, the node converges
    slow.unlink()
    healed = site.run(gpu_node_burn_in="medium")
    assert healed.rc == 0, healed
    assert [r.get("changed") for r in healed.task(TASK, NODE)] == [True]
    mended = json.loads(record.read_text())
    assert mended["verdict"] == "pass" and mended["bandwidth"]["ran"] is True, mended
    assert mended["bandwidth"]["tests"]["device_to_device_memcpy_read_ce"]["checked"] == 56
    quiet = site.run(gpu_node_burn_in="medium")
    assert quiet.rc == 0 and quiet.changed(NODE) == 0 and quiet.task(TASK, NODE) == [], quiet
