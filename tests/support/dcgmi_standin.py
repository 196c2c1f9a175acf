"""STAND-IN for NVIDIA DCGM's ``dcgmi`` (the lab inventory and tests), NOT the real tool: it answers only ``dcgmi diag
-r <level> -j`` (level 1 to 4, the same answer at every level) for the simulated node named by GPUOPS_SIMULATED_GPUS.

Where a file ``<state file>.dcgmi.json`` exists (a test puts one of tests/fixtures/dcgm there), it prints that file and
exits as dcgmi does after such a run: 0 when no result failed, else 1 (dcgmi returns the diagnostic's non-zero
dcgmReturn_t then; the collection parses the output whatever the status). Otherwise it prints a run where the
``software`` test of category ``Deployment`` passed on every simulated GPU NVML lists, in the shape dcgmi 4.6.0 writes
(NVIDIA/DCGM at v4.6.0 dcgmi/Diag.cpp ``HelperJsonBuildOutput``; tests/fixtures/dcgm/README.md). Any other command
line is refused, as a stand-in should not pretend to more.
"""
import json
import os
import sys


def _passing(state):
    gpus = [g for g in state["gpus"] if not (g.get("health") or {}).get("missing")]
    results = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": g["index"], "status": "Pass"} for g in gpus]
    return {"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "software", "results": results, "test_summary": {"status": "Pass"}}]}]},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                           "entities": [{"device_id": "0000", "entity_id": g["index"]} for g in gpus]}],
        "metadata": {"version": "4.6.0 (gpuops stand-in)", "Driver Version Detected": state.get("driver_version")}}


def main(argv):
    if len(argv) != 4 or argv[:2] != ["diag", "-r"] or argv[2] not in ("1", "2", "3", "4") or argv[3] != "-j":
        sys.stderr.write("dcgmi stand-in: only 'dcgmi diag -r <1-4> -j' is answered; got %r\n" % (argv,))
        return 2
    path = os.environ.get("GPUOPS_SIMULATED_GPUS")
    if not path:
        sys.stderr.write("dcgmi stand-in: GPUOPS_SIMULATED_GPUS is not set\n")
        return 2
    recorded = path + ".dcgmi.json"
    if os.path.exists(recorded):
        with open(recorded) as handle:
            text = handle.read()
        sys.stdout.write(text)
        return 1 if '"Fail"' in text or "runtime_error" in text else 0
    with open(path) as handle:
        state = json.load(handle)
    sys.stdout.write(json.dumps(_passing(state), indent=3) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
