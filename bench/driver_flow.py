"""Benchmark: the disruption window of a live NVIDIA driver upgrade under the standalone chart (docs/driver.md, "Upgrade
on a live node"): N one-GPU H200 nodes (MIG all-balanced, persistence mode, CDI) converged at driver 570 with their
device plugin pods running, then site.yml declaring 580; per node, cordon to uncordon split into its phases; GPU
resets, driver reloads and reboots taken (0 reboots expected: nothing but the paused pods holds the GPUs).

The node is the one tests/integration/test_site_driver_live.py upgrades, N times: the driver's packages installed with
Debian's real apt and dpkg into each node's scratch root from one local signed repository (tests/support/driver_rig.py:
packages named and versioned like NVIDIA's, NOT NVIDIA's), the modules unloaded and loaded by the kmod stand-ins and
the daemons stopped and started by the systemctl stand-in (tests/support/kmod_standin.py, systemctl_standin.py), the
simulated GPUs losing their MIG layout, compute and persistence mode at the reload; the cluster is bench/chart_flow.py's
(the fake API server, the real helm with the fixture chart, the fake DaemonSet controller, kubelet and device plugin).

Phases per node, in the order the role runs them, each ending at a mark (bench/node_window.py for the cluster's):
- quiesce: cordon -> the node's last GPU pod gone (fake API server's PATCH, fake kubelet's events);
- install: -> the start of gpuops.nvidia.driver_modules (the driver role's apply: package lists refreshed, the apt
  transaction under the loaded 570, pin and hold; "apt" below is the transaction task alone, from the JSON callback's
  per-host task times);
- stop: -> the last daemon stopped (the systemctl stand-in's "stop" in the stand-ins' timed log,
  tests/support/stop_points.py STANDIN_TIMES; the module's own reads of modules, daemons and holders come first);
- unload: -> the last rmmod done (kmod stand-in);
- load: -> the last modprobe done (kmod stand-in);
- restore: -> the GPU pods Running again: the daemons started, the node planned again with the new driver, MIG mode
  and layout, compute and persistence mode, the CDI spec from the new driver's files, the pause lifted, the pods back
  ("relayout" below: the driver_modules task's end -> the pause lifted);
- verify: -> uncordon (the node plan's poll for Ready, the device plugin's allocatable read).

What the fake leaves out, to add for a real node: apt's download of the driver's packages (here a local file://
repository: a real 580 driver is a few hundred MB from NVIDIA's CUDA repository or a mirror), DKMS's module build
against the running kernel's headers (minutes on a real node; none here, and none with Ubuntu's precompiled signed
modules), the kernel's module load and the GPUs' initialisation at modprobe (seconds per GPU on a real H200/B200 node:
the stand-ins write files), nvidia-persistenced and Fabric Manager start-up and the fabric's training on NVSwitch
systems (these nodes have none), and the pods' termination grace period and start (image pull, plugin registration):
the fake ends and starts a pod in 0.2 s. Poll intervals are the role defaults (node_gpu_pods 2 s, verify 5 s); --poll S
sets the role's gpu_node_quiesce_interval and gpu_node_operator_poll_interval (the pods' and the verify's) to S
seconds, as the test of this bench does: its figures then measure the flow, not the default wait between two reads.

Usage: python bench/driver_flow.py [--nodes 1,4] [--forks 10] [--poll SECONDS] [--out DIR]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from fleet_common import SITE, BenchError, Run, inventory, save_report  # noqa: E402  (bench/fleet_common.py)
from node_window import node_marks, phases  # noqa: E402  (bench/node_window.py)
from ansible_collections.gpuops.nvidia.plugins.module_utils.sim._simulator import SimulatedBackend  # noqa: E402
from tests.support import apt_rig, driver_files, driver_rig  # noqa: E402
from tests.support.fake_daemonsets import FakeDaemonSets  # noqa: E402
from tests.support.fake_kube_api import FakeKubeApi  # noqa: E402
from tests.support.stop_points import STANDIN_TIMES  # noqa: E402

HELM = os.path.join(ROOT, "tools", "bin", "helm")
CHART = os.path.join(ROOT, "tests", "fixtures", "charts", "nvidia-device-plugin")
SHAPE = "h200-x1"
OLD, NEW = driver_rig.OLD, driver_rig.NEW
# the tasks of roles/driver/tasks/apt.yml and roles/gpu_node/tasks/driver.yml whose per-host times the bench reads
APT_TASK = "Install the driver's packages at the pin (apt, one transaction)"
MODULES_TASK = "Load the driver (none loaded) or reload it at the pin"
# each phase ends at its mark: the cluster's (bench/node_window.py MARKS) and the node's own (node_driver_marks)
SPANS = (("quiesce", "gone"), ("install", "modules_start"), ("stop", "stopped"), ("unload", "unloaded"),
         ("load", "loaded"), ("restore", "ready"), ("verify", "uncordon"))
PHASES = tuple(phase for phase, mark in SPANS)


def task_times(data, name, host):
    """[(start, end)] of every task whose name contains ``name`` that ran (not skipped) on ``host``."""
    out = []
    for play in data["plays"]:
        for task in play["tasks"]:
            res = task["hosts"].get(host)
            if name in task["task"]["name"] and res is not None and not (res.get("skipped") or "skip_reason" in res):
                out.append(tuple(task.get("times", {}).get(host) or (None, None)))
    return out


def slowest_tasks(data, host, start, end, count=12):
    """[(seconds, task)] of the ``count`` longest tasks that ran on ``host`` between ``start`` and ``end`` (where a
    phase's time goes)."""
    out = []
    for play in data["plays"]:
        for task in play["tasks"]:
            began, done = (task.get("times", {}).get(host) or (None, None))
            res = task["hosts"].get(host) or {}
            if began is not None and start <= began and done <= end and not (res.get("skipped") or "skip_reason" in res):
                out.append((round(done - began, 2), task["task"]["name"]))
    return sorted(out, reverse=True)[:count]


def node_driver_marks(data, standins, host, root):
    """The node's marks of the driver change: the driver_modules task's start and end, the last daemon stopped, the
    last module removed and the last loaded within it (stand-ins' records of this node's root), the apt transaction's
    start and end. Raises BenchError where a record is missing: a figure is measured or not reported."""
    modules = task_times(data, MODULES_TASK, host)
    apt = task_times(data, APT_TASK, host)
    if len(modules) != 1 or len(apt) != 1 or None in modules[0] + apt[0]:
        raise BenchError("%s: expected one apt transaction and one driver_modules run with their times, found %s and %s"
                         % (host, apt, modules))
    start, end = modules[0]
    mine = [(r["time"], r["command"]) for r in standins if r["root"] == root and start <= r["time"] <= end]

    def last(prefix):
        done = [t for t, command in mine if command.startswith(prefix)]
        return max(done) if done else None
    marks = {"modules_start": start, "modules_end": end, "apt_start": apt[0][0], "apt_end": apt[0][1],
             "stopped": last("systemctl stop "), "unloaded": last("rmmod "), "loaded": last("modprobe ")}
    if marks["unloaded"] is None or marks["loaded"] is None:
        raise BenchError("%s: the stand-ins recorded no rmmod or no modprobe during driver_modules: %s" % (host, mine))
    if marks["stopped"] is None:          # no daemon ran: the stop phase is the module's own reads
        marks["stopped"] = min(t for t, command in mine if command.startswith("rmmod "))
    return marks, [command for t, command in mine]


def read_standins(path):
    try:
        with open(path) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (IOError, OSError):
        return []


def loaded(root):
    """The nvidia module's version loaded on the node (its simulated /sys/module/nvidia/version), or None."""
    return (driver_files.read(root, "sys/module/nvidia/version") or "").strip() or None


def ordered(marks):
    keys = ["cordon", "gone", "apt_start", "apt_end", "modules_start", "stopped", "unloaded", "loaded",
            "modules_end", "resume", "ready", "uncordon"]
    return all(marks[a] <= marks[b] for a, b in zip(keys, keys[1:]))


def measure(nodes, forks, poll=None):
    tmp = tempfile.mkdtemp(prefix="gpuops-driver-flow-")
    api = FakeKubeApi(tokens=None).start()
    fake = None
    try:
        rig = driver_rig.DriverRig(os.path.join(tmp, "rig"))
        rig.close()
        state = os.path.join(tmp, "state")
        names = ["node-%03d" % i for i in range(nodes)]
        roots = dict((n, os.path.join(state, n)) for n in names)

        def host_vars(name, dummy_group):
            # the lab node's driver variables (tests/support/driver_rig.node_vars: apt and dpkg pointed at its root)
            return dict(driver_rig.node_vars(roots[name], rig.url, rig.key, OLD, "driver=%s" % OLD),
                        gpu_node_cdi=True, gpu_node_runtime_mode="cdi")
        inv, dummy = inventory(tmp, nodes, SHAPE, mig_share=1.0, host_vars=host_vars)
        for i, name in enumerate(names):
            api.add_node(name, internal_ip="10.1.%d.%d" % (i // 250, i % 250 + 1),
                         labels={"nvidia.com/gpu.present": "true"})
            # the machine made with its host tree (the driver brought by the image at OLD) before the fake
            # controller's own backend, which knows no root, would make it without one
            SimulatedBackend(os.path.join(state, "%s.json" % name), shape=SHAPE, root=roots[name],
                             host_options="driver=%s" % OLD)
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as handle:
            json.dump(api.kubeconfig(), handle)
        chart = os.path.join(tmp, "chart")
        shutil.copytree(CHART, chart)
        fake = FakeDaemonSets(api, dict((n, (os.path.join(state, "%s.json" % n), SHAPE)) for n in names)).start()
        env = {"HOME": tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""}
        common = ["-e", "gpuops_kubeconfig=%s" % kubeconfig, "-e", "cluster_device_plugin_helm=%s" % HELM,
                  "-e", "cluster_device_plugin_chart_path=%s" % chart]
        if poll is not None:
            common += ["-e", "gpu_node_quiesce_interval=%s" % poll, "-e", "gpu_node_operator_poll_interval=%s" % poll]
        first = Run(SITE, inv, forks, env, args=common)
        deadline = time.monotonic() + 120
        while not fake.settled():
            if time.monotonic() > deadline:
                raise BenchError("the fake DaemonSets did not settle within 120 s after the converge at %s" % OLD)
            time.sleep(0.05)

        def backend(name):
            return SimulatedBackend(os.path.join(state, "%s.json" % name), shape=SHAPE).raw_state()
        before = dict((n, backend(n)) for n in names)
        for n in names:
            if loaded(roots[n]) != OLD:
                raise BenchError("%s: not at %s after the converge" % (n, OLD))
        seen = len(api.requests)
        since = api.requests[-1]["time"] if api.requests else 0.0
        standins = os.path.join(tmp, "standins.jsonl")
        run = Run(SITE, inv, forks, dict(env, **{STANDIN_TIMES: standins}),
                  args=common + ["-e", "driver_version=%s" % NEW])
        cluster = node_marks(api.requests[seen:], list(fake.events), names, since)
        records = read_standins(standins)
        out = {"nodes": nodes, "shape": SHAPE, "from": OLD, "to": NEW, "disrupted": len(cluster), "windows": {},
               "marks": {}, "commands": {}, "slowest": {}, "resets": 0, "reboots": 0, "reloads": 0, "loaded": {},
               "converge": first.figures(), "run": run.figures()}
        for n in names:
            new = backend(n)["call_log"][len(before[n]["call_log"]):]
            out["resets"] += sum(1 for c in new if c.get("call") == "reset_gpu")
            # (a boot the call log missed counts too)
            out["reboots"] += max(sum(1 for c in new if c.get("event") == "reboot"),
                                  backend(n)["boot_id"] - before[n]["boot_id"])
            out["reloads"] += sum(1 for c in new if c.get("event") == "driver_loaded")
            out["loaded"][n] = loaded(roots[n])
            if n not in cluster:
                continue
            own, commands = node_driver_marks(run.data, records, n, roots[n])
            marks = dict(cluster[n], **own)
            if not ordered(marks):
                raise BenchError("%s: the marks are out of order: %s" % (n, sorted(marks.items(), key=lambda i: i[1])))
            window = phases(marks, SPANS)
            window.update({"apt": marks["apt_end"] - marks["apt_start"],
                           "relayout": marks["resume"] - marks["modules_end"],
                           "pods_back": marks["ready"] - marks["resume"]})
            out["windows"][n], out["marks"][n], out["commands"][n] = window, marks, commands
            out["slowest"][n] = slowest_tasks(run.data, n, marks["cordon"], marks["uncordon"])
        assert not fake.errors, fake.errors[0]
        return out
    finally:
        if fake is not None:
            fake.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def summary(row):
    windows = list(row["windows"].values())

    def med(key):
        return statistics.median(w[key] for w in windows) if windows else float("nan")

    def top(key):
        return max(w[key] for w in windows) if windows else float("nan")
    return ("| %d | %d/%d | %s | %.1f / %.1f | %.2f | %.1f | %d | %d | %d | %.0f / %.0f |" % (
        row["nodes"], row["disrupted"], row["nodes"], " | ".join("%.2f" % med(p) for p in PHASES),
        med("window"), top("window"), med("apt"), med("relayout"), row["reloads"], row["resets"], row["reboots"],
        row["run"]["wall"], row["run"]["cpu"]))


def report(rows):
    head = ("| nodes | disrupted | quiesce s | install s | stop s | unload s | load s | restore s | verify s | "
            "window s (median / max) | apt s | relayout s | driver reloads | GPU resets | reboots | run wall / CPU s |")
    lines = [head, "|" + "---|" * 16]
    lines += [summary(r) for r in rows]
    return "\n".join(lines)


def bad(row):
    """Why a row is not the expected upgrade (every node disrupted once, at NEW, reloaded once, no reboot), or None."""
    wrong = sorted(n for n, v in row["loaded"].items() if v != row["to"])
    if row["disrupted"] != row["nodes"] or wrong or row["reboots"] or row["reloads"] != row["nodes"]:
        return "disrupted %d/%d, not at %s: %s, reloads %d, reboots %d" % (
            row["disrupted"], row["nodes"], row["to"], wrong, row["reloads"], row["reboots"])
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nodes", default="1,4")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--poll", type=float, help="gpu_node_quiesce_interval and gpu_node_operator_poll_interval, "
                        "seconds (default: the role's)")
    parser.add_argument("--out", help="directory for driver-flow-<cores>cores.md and .json")
    args = parser.parse_args(argv)
    missing = apt_rig.missing_tools()
    if missing or not os.path.exists(HELM):
        print("needs Debian's %s and helm (%s)" % (", ".join(missing) or "tools", HELM))
        return 2
    rows, errors = [], []
    for nodes in [int(n) for n in args.nodes.split(",")]:
        try:
            row = measure(nodes, args.forks, args.poll)
        except BenchError as exc:
            errors.append("%d nodes: %s" % (nodes, exc))
            print("ERROR (%d nodes): %s" % (nodes, exc))
            continue
        rows.append(row)
        print(summary(row))
        sys.stdout.flush()
    text = report(rows)
    print(text)
    problems = [bad(r) for r in rows if bad(r)]
    for problem in problems:
        print("NOT THE EXPECTED UPGRADE: %s" % problem)
    if args.out:
        note = ("Disruption window per node of a live driver upgrade %s -> %s under the standalone chart "
                "(bench/driver_flow.py), %d cores. Phases are medians over the disrupted nodes; the fake starts and "
                "ends pods in 0.2 s, apt reads a local repository, the kmod stand-ins load no real module."
                % (OLD, NEW, os.cpu_count()))
        if args.poll is not None:
            note += (" The pods and the verify were read every %s s (--poll; the role's defaults are 2 and 5 s)."
                     % args.poll)
        save_report(args.out, "driver-flow-%dcores" % os.cpu_count(), note + "\n\n" + text + "\n",
                    {"rows": rows, "errors": errors})
    return 1 if errors or problems else 0


if __name__ == "__main__":
    sys.exit(main())
