"""SIGKILL of the health sweep's quarantine (health_quarantine) at each of its writes, then a re-run completes it (issue
50: kills during a sweep leave no half-marked node). The module runs as its own process (`python -m`, as ansible runs
it on the controller) against the fake API server; the server applies the N-th write and holds its answer
(FakeKubeApi.hold_nth_write), the test SIGKILLs the module there, however loaded the machine is.

After every kill each node is either guarded whole - cordoned by the collection, tainted and carrying its quarantine
record, which one patch writes together - or as it was; a node being released is guarded until its last write. The
re-run leaves every node as an uninterrupted sweep does, and a third run writes nothing."""
import json
import signal
import subprocess
import sys

import pytest
import yaml

from tests.support.ansible_run import module_process_env
from tests.support.fake_kube_api import FakeKubeApi

TAINT = "gpuops.nvidia/gpu-unhealthy"
RECORD = "gpuops.nvidia/health-quarantine"
CORDONED_BY = "gpuops.nvidia/cordoned-by"
CONDITION = "GpuopsNvidiaGpuHealthy"
BAD = {"gpu": 0, "bus_id": "00000000:18:00.0", "kind": "row_remap_failure",
       "message": "GPU 0 (00000000:18:00.0): row remapping failed - the GPU needs service"}
UNHEALTHY = {"healthy": False, "blocking": [BAD], "warnings": []}
HEALTHY = {"healthy": True, "blocking": [], "warnings": []}
NEW = ["gpu-a", "gpu-b", "gpu-c"]        # quarantined by the run: two writes each (the guard, then the condition)
LEAVING = "gpu-d"                        # released by the run: two writes (the condition off, then the guard)
VERDICTS = dict([(n, UNHEALTHY) for n in NEW] + [(LEAVING, HEALTHY), ("gpu-e", HEALTHY)])
WRITES = 2 * len(NEW) + 2


def _start(tmp_path, api_config):
    path = str(tmp_path / "args.json")
    with open(path, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": {"kubeconfig": api_config, "verdicts": VERDICTS,
                                           "breaker_percent": 100}}, handle)
    env = module_process_env(HOME=str(tmp_path))
    for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "KUBECONFIG"):
        env.pop(var, None)
    return subprocess.Popen([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules.health_quarantine",
                             path], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def _run(tmp_path, api_config):
    out, err = _start(tmp_path, api_config).communicate(timeout=120)
    assert out.strip(), err
    return json.loads(out[out.index("{"):])


def _cluster(tmp_path):
    api = FakeKubeApi(tokens=None).start()
    config = str(tmp_path / "kubeconfig")
    with open(config, "w") as handle:
        yaml.safe_dump(api.kubeconfig(), handle)
    for name in sorted(VERDICTS):
        api.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    # gpu-d: quarantined by an earlier sweep, one healthy sweep counted: this run releases it
    node = api.get("", "nodes", LEAVING)
    node["spec"].update(unschedulable=True, taints=[{"key": TAINT, "value": "row_remap_failure",
                                                     "effect": "NoSchedule"}])
    node["metadata"]["annotations"] = {CORDONED_BY: "gpuops.nvidia.gpu_node",
                                       RECORD: json.dumps({"since": "2026-11-29T01:00:00Z", "healthy_sweeps": 1})}
    api.put(node)
    node = api.get("", "nodes", LEAVING)
    node["status"]["conditions"].append({"type": CONDITION, "status": "False", "reason": "RowRemapFailure",
                                         "message": "earlier"})
    api.put(node)
    return api, config


def _parts(api, name):
    node = api.get("", "nodes", name)
    annotations = node["metadata"].get("annotations") or {}
    return {"cordon": bool(node["spec"].get("unschedulable")) and annotations.get(CORDONED_BY) is not None,
            "taint": any(t["key"] == TAINT for t in node["spec"].get("taints") or []),
            "record": RECORD in annotations,
            "condition": any(c["type"] == CONDITION for c in node["status"].get("conditions") or [])}


@pytest.mark.parametrize("write", range(1, WRITES + 1))
def test_sigkill_at_each_write_leaves_no_half_marked_node_and_a_rerun_completes(tmp_path, write):
    api, config = _cluster(tmp_path)
    try:
        api.hold_nth_write(write)
        proc = _start(tmp_path, config)
        try:
            assert api.wait_held(120, running=lambda: proc.poll() is None), proc.communicate()
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            api.release_held()
        assert proc.returncode == -signal.SIGKILL
        assert len(api.writes(accepted=True)) == write
        for name in NEW + [LEAVING]:
            parts = _parts(api, name)
            guard = (parts["cordon"], parts["taint"], parts["record"])
            # the guard is one patch: all of it or none; a condition only on a guarded node
            assert guard in ((True, True, True), (False, False, False)), (write, name, parts)
            assert not parts["condition"] or parts["cordon"], (write, name, parts)
        # the node being released is guarded until its last write
        assert _parts(api, LEAVING)["taint"] or not _parts(api, LEAVING)["condition"]

        again = _run(tmp_path, config)
        assert not again.get("failed"), again
        for name in NEW:
            assert _parts(api, name) == {"cordon": True, "taint": True, "record": True, "condition": True}, name
        assert _parts(api, LEAVING) == {"cordon": False, "taint": False, "record": False, "condition": False}
        third = _run(tmp_path, config)
        assert third["changed"] is False, third
    finally:
        api.stop()
