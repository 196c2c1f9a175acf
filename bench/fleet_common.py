"""What bench/fleet.py and its measurements (fleet_compare, fleet_floor, fleet_slices) share: the repository paths,
the fleet inventory, one ansible-playbook run and its shape, the empty play that mirrors it, and report writing.

fleet.py is the command line; it and the three measurement modules import this one, which imports none of them,
so the bench's import graph has no cycle.
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, ".collections"))

# MACHINE_SHAPES: re-exported, the bench modules read the machine shapes from here
# pylint: disable=unused-import
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_catalog import MACHINE_SHAPES  # noqa: E402,F401
# pylint: enable=unused-import
from tests.support.ansible_run import BIN, ansible_env  # noqa: E402

SITE = os.path.join(ROOT, "site.yml")


def inventory(tmp, nodes, shape, mig_share=0.5, extra=None, repo=ROOT, host_vars=None):
    """An inventory directory like inventories/lab with `nodes` nodes of `shape` (the lab group_vars of the checkout
    at `repo`, default this one); returns its path. `host_vars(name, group_vars)`, where given, returns more variables
    of node `name` (`group_vars`: the gpu_nodes group's, as written)."""
    inv = os.path.join(tmp, "inventory")
    shutil.copytree(os.path.join(repo, "inventories", "lab", "group_vars"), os.path.join(inv, "group_vars"))
    # The lab's gpu_nodes.yml finds the repository and the containerd seed config from inventory_dir: point them
    # at this checkout, and every node's state and files at the temporary directory.
    path = os.path.join(inv, "group_vars", "gpu_nodes.yml")
    with open(path) as handle:
        group = yaml.safe_load(handle)
    group.update({"gpuops_repo_dir": repo,
                  "gpu_node_containerd_initial_config": os.path.join(repo, "inventories", "lab-files",
                                                                     "containerd-config.toml"),
                  "gpuops_lab_state_dir": os.path.join(tmp, "state")})
    group.update(extra or {})
    with open(path, "w") as handle:
        yaml.safe_dump(group, handle)
    mig = nodes - int(nodes * (1 - mig_share))
    hosts = dict(("node-%03d" % i, {"gpuops_simulated_machine": shape}) for i in range(nodes))
    for name, host in hosts.items():
        host.update(host_vars(name, group) if host_vars else {})
    names = sorted(hosts)
    groups = {"mig_nodes": {"hosts": dict((n, hosts[n]) for n in names[:mig])},
              "mps_nodes": {"hosts": dict((n, hosts[n]) for n in names[mig:])}}
    with open(os.path.join(inv, "hosts.yml"), "w") as handle:
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": groups}}}}, handle)
    return inv, mig


class BenchError(Exception):
    """A run that is an error, not a figure: a failed host, no output, changes on the re-run."""


class Run(object):
    """One ansible-playbook run: wall and CPU seconds, load before, the JSON callback's output."""

    def __init__(self, playbook, inv, forks, env, args=(), cwd=ROOT):
        cmd = [os.path.join(BIN, "ansible-playbook"), playbook, "-i", inv, "-f", str(forks)] + list(args)
        self.load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=ansible_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
        self.wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        try:
            self.data = json.loads(proc.stdout[proc.stdout.index("{"):])
        except ValueError:
            raise BenchError("%s: no JSON output (rc %d): %s %s" % (playbook, proc.returncode, proc.stdout[-2000:],
                                                                    proc.stderr[-2000:]))
        self.stats = self.data["stats"]
        failed = sorted(h for h, s in self.stats.items() if s.get("failures") or s.get("unreachable"))
        if failed or proc.returncode != 0:
            msgs = [(h, t["task"]["name"], r.get("msg")) for p in self.data["plays"] for t in p["tasks"]
                    for h, r in t["hosts"].items() if r.get("failed")]
            raise BenchError("%s failed (rc %d) on %d host(s) %s: %s %s" % (
                playbook, proc.returncode, len(failed), failed[:5], msgs[:3], proc.stderr[-1000:]))

    def figures(self):
        return {"wall": self.wall, "cpu": self.cpu, "load": self.load,
                "changed": sum(s.get("changed", 0) for s in self.stats.values())}

    def changed_hosts(self):
        return sorted(h for h, s in self.stats.items() if s.get("changed"))

    def changed_tasks(self):
        return sorted(set((t["task"]["name"], h) for p in self.data["plays"] for t in p["tasks"]
                          for h, r in t["hosts"].items() if r.get("changed")))


def _skipped(res):
    return bool(res.get("skipped") or "skip_reason" in res)


def batches(data):
    """The run's shape, per play and serial batch: its hosts, and per task whether it ran a module (a result with
    `invocation`) or only controller-side code (set_fact, debug, assert, include_*), its loop length, and the
    hosts it ran on and skipped."""
    out = []
    for p in data["plays"]:
        batch = {"name": p["play"]["name"], "hosts": set(), "tasks": []}
        for t in p["tasks"]:
            results = t["hosts"]
            batch["hosts"].update(results)
            ran = sorted(h for h, r in results.items() if not _skipped(r))
            items = max([len(results[h].get("results", [])) for h in ran] or [0])
            module = any("invocation" in r or any("invocation" in i for i in r.get("results", []))
                         for r in results.values())
            batch["tasks"].append({"name": t["task"]["name"], "module": module, "loop": items, "ran": ran,
                                   "skipped": sorted(h for h, r in results.items() if _skipped(r)),
                                   "action": t["task"].get("action"),
                                   "args": dict((h, r["invocation"]["module_args"]) for h, r in results.items()
                                                if "invocation" in r)})
        batch["hosts"] = sorted(batch["hosts"])
        out.append(batch)
    return out


def task_counts(shape, host):
    """(tasks run, tasks skipped) on one host."""
    ran = sum(1 for b in shape for t in b["tasks"] if host in t["ran"])
    return ran, sum(1 for b in shape for t in b["tasks"] if host in t["skipped"])


def _given(value):
    """A module's reported arguments without the options it reports as None (not given): given as None, some
    count as present (mutually_exclusive)."""
    if isinstance(value, dict):
        return dict((k, _given(v)) for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return [_given(v) for v in value]
    return value


def runs_real(task, real):
    """Whether empty_playbook runs this task of the shape for real: a module task, without a loop, of an action in
    `real`."""
    return bool(task["module"] and task.get("action") in real and not task["loop"])


def empty_playbook(tmp, shape, real=(), name="empty.yml", stand_in=None):
    """The same batches and tasks, each task replaced by ansible.builtin.ping (where it ran a module) or an
    ansible.builtin.debug (controller-side code), run on the same hosts, skipped on the same hosts, with the same
    loop lengths and run_once: what Ansible itself costs for that run. A module task whose action is in `real`
    (without a loop) runs that module again instead, on each host with the arguments it had there and the node's
    gpuops_environment (bench/fleet_floor.py's floor play). `stand_in` ({action: module}) mirrors such a task of an
    action in it by that module, without arguments, instead of a ping (bench/fleet_floor.py's imports play)."""
    plays = []
    for batch in shape:
        tasks = []
        for i, t in enumerate(batch["tasks"]):
            hosts = sorted(set(t["ran"]) | set(t["skipped"]))
            if not hosts:  # meta tasks (flush_handlers) report no host result
                continue
            task = {"name": "Task %d" % i}
            if stand_in and runs_real(t, stand_in):
                task[stand_in[t["action"]]] = None
            elif runs_real(t, real):
                args = dict((h, _given(a)) for h, a in t["args"].items())
                keys = sorted(set(k for a in args.values() for k in a))
                task[t["action"]] = dict((k, "{{ __args[inventory_hostname][%r] | default(omit) }}" % k)
                                         for k in keys)
                task["vars"] = {"__args": args}
                task["environment"] = "{{ gpuops_environment | default({}) }}"
            else:
                task.update({"ansible.builtin.ping": None} if t["module"] else {"ansible.builtin.debug": {"msg": ""}})
            if t["loop"]:
                task["loop"] = list(range(t["loop"]))
            if len(hosts) == 1 and len(batch["hosts"]) > 1:
                task["run_once"] = True
            if t["skipped"]:
                task.setdefault("vars", {})["__on"] = t["ran"]
                task["when"] = "inventory_hostname in __on"
            tasks.append(task)
        if not batch["hosts"]:
            # a play whose every node left it in a meta task (site.yml's DCGM scrape: end_host where there is nothing
            # to scrape) has no host result to mirror, and ansible-playbook refuses a play of no hosts
            continue
        plays.append({"name": "Empty: " + batch["name"], "hosts": ",".join(batch["hosts"]), "gather_facts": False,
                      "tasks": tasks})
    path = os.path.join(tmp, name)
    with open(path, "w") as handle:
        yaml.safe_dump(plays, handle, sort_keys=False)
    return path


def save_report(out, name, text, data):
    """NAME.md (the report) and NAME.json (its figures) under `out` (made if missing)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name + ".md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(out, name + ".json"), "w") as handle:
        json.dump(data, handle, indent=1)


def pyplot():
    """(matplotlib.pyplot with the file-only Agg backend, None), or (None, the note that the plot is skipped) where
    matplotlib does not import."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return None, "plot skipped: matplotlib does not import (%s)" % exc
    return plt, None


def markdown_table(header, lines):
    """A Markdown table: a header row, its rule, one row per line."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def current_commit():
    """The commit the bench measures (git describe of this checkout, or GPUOPS_BENCH_COMMIT)."""
    if os.environ.get("GPUOPS_BENCH_COMMIT"):  # a run from an exported copy of the tree (no .git)
        return os.environ["GPUOPS_BENCH_COMMIT"]
    proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
    return proc.stdout.strip() or "unknown"
