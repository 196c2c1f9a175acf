"""The collection's playbooks run by AWX's own engine (issue 50): ansible-runner, the library an AWX job runs on, from
a private data directory laid out as AWX lays out a job's (tests/support/awx_runner.py: project/ with the collection
the project sync installs, inventory/hosts as AWX writes it for the job's slice, env/extravars with the survey's
answers as AWX sends them, env/cmdline, env/settings). What AWX would show is read where AWX reads it: the job's
status and rc from the runner, each host's events and the job's artifacts (set_stats) under artifacts/<ident>/."""
import json
import os

import pytest

from tests.support import awx_runner

pytestmark = pytest.mark.slow

LAB_SOURCE = "inventories/lab"
LAB_NODES = ("lab-dgx-a100", "lab-hgx-b200", "lab-hgx-h200")


@pytest.fixture(scope="module")
def lab_inventory():
    """The lab inventory as AWX holds it once a project-sourced inventory was imported (ansible-inventory --export)."""
    return awx_runner.Inventory.import_source(LAB_SOURCE)


def lab_template_vars(jobs_dir, job_id):
    """The lab's two paths that its group_vars derive from inventory_dir, which in a job is the private data
    directory's inventory/ (the inventory is a script there, not the project's file): the job template's extra
    variables name them in the project instead. A fleet inventory has neither."""
    project = awx_runner.project_dir(jobs_dir, job_id)
    return {"gpuops_repo_dir": project,
            "gpu_node_containerd_initial_config": os.path.join(project, "inventories", "lab-files",
                                                               "containerd-config.toml")}


def test_lab_inventory_as_awx_slices_it(lab_inventory):
    """Inventory.get_script_data's rule on the lab: every group with its variables in each slice, the hosts by name
    round-robin ([k-1::N]), a group and _meta.hostvars naming the slice's hosts only."""
    assert sorted(lab_inventory.hosts) == list(LAB_NODES)
    one, two = lab_inventory.script_data(1, 2), lab_inventory.script_data(2, 2)
    assert sorted(one["_meta"]["hostvars"]) == ["lab-dgx-a100", "lab-hgx-h200"]
    assert sorted(two["_meta"]["hostvars"]) == ["lab-hgx-b200"]
    for data in (one, two):
        assert data["gpu_nodes"]["vars"]["ansible_connection"] == "local"
        assert sorted(data["gpu_nodes"]["children"]) == ["mig_nodes", "mps_nodes"]
        assert sorted(data["all"]["children"]) == ["gpu_nodes", "mig_nodes", "mps_nodes"]
    assert one["mig_nodes"]["hosts"] == ["lab-dgx-a100"] and one["mps_nodes"]["hosts"] == ["lab-hgx-h200"]
    assert two["mig_nodes"]["hosts"] == ["lab-hgx-b200"] and "hosts" not in two["mps_nodes"]
    # the group's variables are there even where the slice has none of its hosts; host variables are the host's own
    assert two["mps_nodes"]["vars"] == lab_inventory.groups["mps_nodes"]["vars"]
    assert one["_meta"]["hostvars"]["lab-hgx-h200"]["gpuops_simulated_machine"] == "hgx-h200"
    assert one["_meta"]["hostvars"]["lab-hgx-h200"]["remote_tower_id"] == 3
    assert "gpu_node_compute_mode" not in one["_meta"]["hostvars"]["lab-hgx-h200"]
    assert sorted(lab_inventory.script_data()["_meta"]["hostvars"]) == list(LAB_NODES)


def test_site_as_an_awx_job(tmp_path, lab_inventory):
    """site.yml as a job template's Run job limited to lab-hgx-h200: successful, the node converged, its events and
    the play's stats where AWX reads them, the roles run from the collection the project sync installed."""
    jobs, state = tmp_path / "jobs", tmp_path / "lab-state"
    jobs.mkdir()
    job = awx_runner.Job("site.yml", lab_inventory, 4711, "GPU fleet - site", limit="lab-hgx-h200",
                         template_vars=lab_template_vars(jobs, 4711), survey={"gpuops_lab_state_dir": str(state)})
    out = awx_runner.run(job, jobs, env={"HOME": str(tmp_path)})
    assert (out.status, out.rc) == ("successful", 0), out

    pdd = awx_runner.private_data_dir(jobs, 4711)
    # the layout the job ran from: the runner's command names the job's inventory script and extra-vars file
    with open(os.path.join(out.artifact_dir, "command")) as handle:
        command = json.load(handle)
    assert command["cwd"] == os.path.join(pdd, "project")
    args = command["command"]
    assert args[0] == "ansible-playbook" and args[-1] == "site.yml", args
    assert args[args.index("-i") + 1] == os.path.join(pdd, "inventory", "hosts")
    assert args[args.index("-e") + 1] == "@" + os.path.join(pdd, "env", "extravars")
    assert args[args.index("-l") + 1] == "lab-hgx-h200"
    with open(os.path.join(pdd, "env", "extravars")) as handle:
        extravars = handle.read()
    assert "!unsafe 'gpuops_lab_state_dir': !unsafe '%s'" % state in extravars, extravars
    assert "!unsafe 'awx_job_id': 4711" in extravars, extravars

    # the node's events, and only its
    assert out.hosts() == ["lab-hgx-h200"], out.hosts()
    events = out.host_events("lab-hgx-h200")
    kinds = set(e["event"] for e in events)
    assert {"runner_on_start", "runner_on_ok"} <= kinds, kinds
    assert not kinds & {"runner_on_failed", "runner_on_unreachable"}, out
    changed = [e["event_data"]["task"] for e in events if e["event"] == "runner_on_ok" and e["event_data"]["res"].get(
        "changed")]
    assert changed, kinds
    # the roles ran from requirements_collections/ (the project sync's install), not from the checkout's .collections
    installed = os.path.join(pdd, "requirements_collections", "ansible_collections", "gpuops", "nvidia") + os.sep
    task_paths = [e["event_data"]["task_path"] for e in events if e["event_data"].get("task_path")]
    assert task_paths and all(p.startswith(installed) for p in task_paths), [p for p in task_paths
                                                                             if not p.startswith(installed)][:3]
    assert any(p.startswith(installed + "roles" + os.sep) for p in task_paths), task_paths[:3]
    assert out.stats["changed"] == {"lab-hgx-h200": len(changed)}, out.stats
    assert out.stats["failures"] == {} and out.stats["dark"] == {}, out.stats
    # what the converge did to the simulated node: the NVIDIA runtime's drop-in in its scratch containerd config
    drop_in = state / "lab-hgx-h200" / "etc" / "containerd" / "conf.d" / "99-nvidia.toml"
    assert "nvidia-container-runtime" in drop_in.read_text()
    assert not (state / "lab-dgx-a100").exists() and not (state / "lab-hgx-b200").exists()


def test_health_sweep_as_a_job_sliced_in_two(tmp_path, lab_inventory, kube_api):
    """health.yml as a scheduled job template with job_slice_count 2 over the lab's three nodes, with the cluster's
    "OpenShift or Kubernetes API Bearer Token" credential (a fake API server listing the three as GPU nodes): AWX's
    workflow runs two jobs, each with its slice's inventory (by name round-robin: lab-dgx-a100 and lab-hgx-h200,
    then lab-hgx-b200) and the same awx_workflow_job_id; the survey's answers as AWX sends them (text questions
    strings, integer questions integers). Each slice succeeds, names only its nodes in its events, reads each of them
    once, decides under the sweep's Lease held as "AWX job <its id>" with the credential's token, marks no healthy
    node, writes its report (JSON and HTML) into gpuops_health_report_dir and publishes the report's totals and page
    as the job's artifacts (set_stats, in its playbook_on_stats event)."""
    jobs, state, reports = tmp_path / "jobs", tmp_path / "lab-state", tmp_path / "reports"
    jobs.mkdir()
    for node in LAB_NODES:
        kube_api.add_node(node, labels={"nvidia.com/gpu.present": "true"})
    credential = {"host": kube_api.url, "bearer_token": kube_api.token, "verify_ssl": False}
    for number, job_id, nodes in ((1, 5101, ["lab-dgx-a100", "lab-hgx-h200"]), (2, 5102, ["lab-hgx-b200"])):
        template_vars = lab_template_vars(jobs, job_id)
        template_vars.update(gpuops_health_release_after=2, gpuops_health_window_hours=24)    # docs/awx.md's template
        survey = {"gpuops_lab_state_dir": str(state), "gpuops_health_report_dir": str(reports),   # text questions
                  "gpuops_health_breaker_percent": 10, "gpuops_health_breaker_max_nodes": 10}    # integer questions
        job = awx_runner.Job("health.yml", lab_inventory, job_id, "GPU fleet - health sweep", launch_type="scheduled",
                             template_vars=template_vars, survey=survey, workflow_job_id=5100, slice_number=number,
                             slice_count=2, kubernetes_credential=credential)
        seen = len(kube_api.requests)
        out = awx_runner.run(job, jobs, env={"HOME": str(tmp_path)})
        assert (out.status, out.rc) == ("successful", 0), out
        with open(os.path.join(out.pdd, "env", "extravars")) as handle:
            extravars = handle.read()
        for line in ("!unsafe 'awx_workflow_job_id': 5100", "!unsafe 'awx_job_id': %d" % job_id,
                     "!unsafe 'gpuops_health_breaker_max_nodes': 10",
                     "!unsafe 'gpuops_health_report_dir': !unsafe '%s'" % reports, "gpuops_health_release_after: 2"):
            assert line + "\n" in extravars, (line, extravars)

        # the slice's events name its nodes only, and each was read once
        assert out.hosts() == nodes, (number, out.hosts())
        for node in nodes:
            reads = [e for e in out.host_events(node) if e["event"] == "runner_on_ok"
                     and e["event_data"]["task_action"] == "gpuops.nvidia.gpu_health_read"]
            assert len(reads) == 1, (number, node, [e["event"] for e in out.host_events(node)])
        assert sorted(out.stats["ok"]) == nodes and out.stats["failures"] == {}, out.stats
        # the job's artifacts: the report's totals over the slice's nodes and the page it wrote, which is there with
        # its JSON: this job's sweep (its awx_job_id) over the slice's nodes
        totals = out.artifacts["gpuops_health_report"]
        assert (totals["nodes"], totals["healthy"], totals["quarantined"]) == (len(nodes), len(nodes), 0), totals
        page = out.artifacts["gpuops_health_report_path"]
        assert os.path.dirname(page) == str(reports) and page.endswith(".html") and os.path.isfile(page), page
        with open(page[:-len(".html")] + ".json") as handle:
            report = json.load(handle)
        assert report["sweep"]["id"] == str(job_id), report["sweep"]
        assert [(row["node"], row["state"], row["gpus"]) for row in report["nodes"]] == [
            (node, "healthy", 8) for node in nodes], report["nodes"]
        assert report["totals"] == totals, (report["totals"], totals)

        # the cluster part ran with the credential's token, under the sweep's Lease taken and given back as this job
        requests = kube_api.requests[seen:]
        assert requests and all(r["authorization"] == "Bearer" and r.get("code") != 401 for r in requests), requests
        holders = [(r["body"]["spec"].get("holderIdentity") or "") for r in kube_api.writes(accepted=True)
                   if r in requests and r["path"].endswith("/leases/gpuops-nvidia-health-sweep")
                   or r in requests and r["path"].endswith("/leases") and r["body"]["metadata"]["name"] ==
                   "gpuops-nvidia-health-sweep"]
        assert len(holders) == 2 and holders[0].startswith("AWX job %d " % job_id) and holders[1] == "", holders
    # no healthy node marked: no taint, none cordoned
    for node in LAB_NODES:
        spec = kube_api.get("", "nodes", node)["spec"]
        assert not spec.get("taints") and not spec.get("unschedulable"), (node, spec)
