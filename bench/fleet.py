"""Benchmark: a converge playbook over a fleet of simulated GPU nodes: first converge, idempotent re-run, and how
much of the re-run is Ansible's own overhead.

For each fleet size (--nodes, e.g. 1,10,25,50,100) it builds an inventory of that many simulated nodes (local
connection, one simulator state file and one scratch root per node, --shape), then runs with --forks:
1. the playbook (first converge), 2. the playbook again (must report 0 changed), 3. an "empty" play with the same
number of tasks per host as the re-run executed (ansible.builtin.ping for each task that ran, a `when: false` task
for each skipped one): the cost of Ansible alone. Times are wall-clock on this machine; per node = total / nodes.

The playbook is an argument (--playbook), so the same bench runs site.yml once it exists; the default is
bench/playbooks/roles_converge.yml (gpu_info + the mig role with all-balanced + the compute_mode role).

Usage: python bench/fleet.py [--playbook PATH] [--nodes 1,10,25,50] [--forks 10] [--shape hgx-h200]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.ansible_run import BIN, ansible_env  # noqa: E402

DEFAULT_PLAYBOOK = os.path.join(ROOT, "bench", "playbooks", "roles_converge.yml")


def inventory(tmp, nodes, shape, extra_vars):
    hosts = {}
    for i in range(nodes):
        name = "node-%03d" % i
        d = os.path.join(tmp, name)
        os.makedirs(os.path.join(d, "units"))
        hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "gpuops_environment": {"GPUOPS_SIMULATED_GPUS": os.path.join(d, "state.json"),
                                     "GPUOPS_SIMULATED_MACHINE": shape},
              "mig_config_name": "all-balanced", "mig_root": os.path.join(d, "root"), "mig_manage_systemd": False,
              "mig_manage_services": False, "mig_boot_python": sys.executable, "mig_allow_reset": True,
              "compute_mode_unit_directory": os.path.join(d, "units"), "compute_mode_manage_systemd": False}
        hv.update(extra_vars)
        hosts[name] = hv
    path = os.path.join(tmp, "inventory.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"all": {"hosts": hosts}}, handle)
    return path


def play(playbook, inv, forks):
    cmd = [os.path.join(BIN, "ansible-playbook"), playbook, "-i", inv, "-f", str(forks)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    dt = time.perf_counter() - t0
    try:
        data = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise SystemExit("%s: no JSON output (rc %d): %s %s" % (playbook, proc.returncode, proc.stdout[-2000:],
                                                                proc.stderr[-2000:]))
    failed = dict((h, s) for h, s in data["stats"].items() if s.get("failures") or s.get("unreachable"))
    if failed:
        msgs = [r.get("msg") for p in data["plays"] for t in p["tasks"] for h, r in t["hosts"].items()
                if h in failed and r.get("failed")]
        raise SystemExit("%s failed on %d host(s): %s: %s" % (playbook, len(failed), sorted(failed)[:5], msgs[:2]))
    return dt, data


def task_counts(data, host):
    ran = skipped = 0
    for p in data["plays"]:
        for t in p["tasks"]:
            r = t["hosts"].get(host)
            if r is None:
                continue
            if r.get("skipped"):
                skipped += 1
            else:
                ran += 1
    return ran, skipped


def empty_play(tmp, ran, skipped):
    tasks = [{"name": "Task %d" % i, "ansible.builtin.ping": None} for i in range(ran)]
    tasks += [{"name": "Skipped %d" % i, "ansible.builtin.ping": None, "when": False} for i in range(skipped)]
    path = os.path.join(tmp, "empty.yml")
    with open(path, "w") as handle:
        yaml.safe_dump([{"name": "Empty play, same task count", "hosts": "all", "gather_facts": False,
                         "tasks": tasks}], handle, sort_keys=False)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--playbook", default=DEFAULT_PLAYBOOK)
    parser.add_argument("--nodes", default="1,10", help="comma-separated fleet sizes (default 1,10)")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--shape", default="hgx-h200")
    parser.add_argument("-e", "--extra", action="append", default=[], help="KEY=VALUE host var for every node")
    args = parser.parse_known_args()[0]
    extra = dict(kv.split("=", 1) for kv in args.extra)
    print("playbook: %s; forks %d; shape %s; %d CPU(s) on this machine" % (
        os.path.relpath(args.playbook, ROOT), args.forks, args.shape, os.cpu_count() or 0))
    header = ("nodes", "first converge s", "per node s", "re-run s", "per node s", "changed on re-run",
              "tasks per host (ran/skipped)", "empty play s", "Ansible overhead of the re-run")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for nodes in [int(n) for n in args.nodes.split(",")]:
        tmp = tempfile.mkdtemp(prefix="gpuops-fleet-")
        try:
            inv = inventory(tmp, nodes, args.shape, extra)
            first, _data = play(args.playbook, inv, args.forks)
            again, data = play(args.playbook, inv, args.forks)
            changed = sum(s.get("changed", 0) for s in data["stats"].values())
            ran, skipped = task_counts(data, "node-000")
            empty, _data = play(empty_play(tmp, ran, skipped), inv, args.forks)
            print("| %d | %.1f | %.2f | %.1f | %.2f | %d | %d/%d | %.1f | %.0f%% |" % (
                nodes, first, first / nodes, again, again / nodes, changed, ran, skipped, empty,
                100.0 * empty / again))
            sys.stdout.flush()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
