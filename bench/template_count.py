"""Count what a converged node's re-run costs the controller in template compilations, and the size of the node
plan's module payload (issue 36 item 7; docs/readings/template-count-issue36.md).

ansible-core 2.19 keeps no compiled-template cache: every template string is parsed and compiled by Jinja again in
each worker and at each use. This script runs site.yml over a fleet of one node (a MIG node or an MPS node, shaped
as bench/fleet.py shapes them), first to converge it, then again with Jinja's parse of ansible-core's environment
counted in every process of the ansible-playbook run (the forked workers included): how many template strings were
compiled, where each comes from (file and line, from ansible-core's origin tag) and the CPU seconds spent compiling
them. The first run is not counted. It also lists the module_utils files that ansible-core puts into
gpu_node_plan's AnsiballZ payload (every file an import statement names, module_common.recursive_finder).

Counts do not depend on the machine's load; the compile seconds do (read them as sizes).

Usage: python bench/template_count.py [--node mig|mps] [--top 25] [--json FILE]
       python bench/template_count.py --payload          # only the payload of gpu_node_plan
"""
import argparse
import collections
import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOOK = "--hooked-playbook"
_IN_COLLECTION = os.path.join(".collections", "ansible_collections", "gpuops", "nvidia", "")


def payload(module="gpu_node_plan"):
    """The collection's module_utils files that ansible-core bundles into `module`'s AnsiballZ payload:
    [(path inside the payload, bytes)]."""
    # pylint: disable=import-outside-toplevel
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    # (fleet_common imported the collection as a plain package: ansible-core's loader must import it afresh)
    for name in [n for n in sys.modules if n.split(".")[0] == "ansible_collections"]:
        del sys.modules[name]
    _AnsibleCollectionFinder(paths=[os.path.join(ROOT, ".collections")])._install()
    from ansible._internal._ansiballz import _builder
    from ansible._internal._datatag._tags import Origin
    from ansible.executor import module_common
    path = os.path.join(ROOT, "plugins", "modules", module + ".py")
    with open(path, "rb") as handle:
        data = handle.read()
    zf = zipfile.ZipFile(io.BytesIO(), "w")
    module_common.recursive_finder(module, "ansible_collections.gpuops.nvidia.plugins.modules." + module,
                                   Origin(path=path).tag(data), zf, datetime.datetime(2020, 1, 1),
                                   _builder.ExtensionManager.create(task_vars={}))
    return sorted((i.filename, i.file_size) for i in zf.infolist()
                  if "/gpuops/nvidia/plugins/module_utils/" in i.filename and not i.filename.endswith("__init__.py"))


def hooked_playbook(log, argv):
    """ansible-playbook, with every Jinja parse of ansible-core's template environment written to `log` (one JSON line
    per template string: pid, origin, seconds to parse and compile, its first characters)."""
    # pylint: disable=import-outside-toplevel,protected-access
    from ansible._internal._datatag._tags import Origin
    from ansible._internal._templating import _jinja_bits
    env_class = _jinja_bits.AnsibleEnvironment
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    parse, from_string, expression = env_class._parse, env_class.from_string, env_class.compile_expression
    state = {"depth": 0, "source": None}

    def counted_parse(self, source, *args, **kwargs):
        state["source"] = source
        return parse(self, source, *args, **kwargs)

    def counted_expression(self, source, *args, **kwargs):  # (a conditional: Jinja parses it without _parse)
        state["source"] = source
        return expression(self, source, *args, **kwargs)

    def timed_from_string(self, source, *args, **kwargs):
        state["depth"] += 1
        t0 = time.process_time()
        try:
            return from_string(self, source, *args, **kwargs)
        finally:
            state["depth"] -= 1
            if not state["depth"] and state["source"] is not None:
                text = state["source"]
                origin = Origin.get_tag(text)
                path = os.path.relpath(origin.path, ROOT).replace(_IN_COLLECTION, "") if origin and origin.path else "?"
                where = "%s:%s" % (path, origin.line_num)
                line = json.dumps({"pid": os.getpid(), "where": where, "s": time.process_time() - t0,
                                   "text": " ".join(str(text).split())[:100]}) + "\n"
                os.write(fd, line.encode())
                state["source"] = None

    env_class._parse, env_class.from_string, env_class.compile_expression = (counted_parse, timed_from_string,
                                                                             counted_expression)
    from ansible.cli.playbook import main
    sys.argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook")] + argv
    main()


def run(node, top):
    """Converge one node, re-run it with the count; returns the report (a dict)."""
    # (not imported at the top: it imports the collection as a plain package, which the hooked ansible-playbook
    # and the payload's module finder must not find imported)
    from fleet_common import BIN, SITE, ansible_env, inventory  # pylint: disable=import-outside-toplevel
    tmp = tempfile.mkdtemp(prefix="gpuops-tcount-")
    env = ansible_env({"HOME": tmp, "K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_HOST": "", "KUBECONFIG": ""})
    try:
        inv = inventory(tmp, 1, "hgx-h200", 1.0 if node == "mig" else 0.0)[0]
        cmd = [SITE, "-i", inv, "-f", "1"]
        first = subprocess.run([os.path.join(BIN, "ansible-playbook")] + cmd, cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        if first.returncode:
            raise SystemExit("first converge failed: %s %s" % (first.stdout[-2000:], first.stderr[-2000:]))
        log = os.path.join(tmp, "templates.jsonl")
        # (the interpreter of ansible-playbook's own script: the lab's nodes name ansible_playbook_python in files)
        with open(os.path.join(BIN, "ansible-playbook")) as handle:
            python = handle.readline()[2:].strip()
        again = subprocess.run([python, os.path.abspath(__file__), _HOOK, log] + cmd, cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        if "{" not in again.stdout:
            raise SystemExit("re-run gave no JSON (rc %d): %s %s" % (
                again.returncode, again.stdout[-2000:], again.stderr[-2000:]))
        data = json.loads(again.stdout[again.stdout.index("{"):])
        changed = sum(s.get("changed", 0) for s in data["stats"].values())
        if again.returncode or changed:
            tasks = sorted(set(t["task"]["name"] for p in data["plays"] for t in p["tasks"]
                               for r in t["hosts"].values() if r.get("changed") or r.get("failed")))
            raise SystemExit("re-run failed or changed something (rc %d, changed %d, tasks %s): %s" % (
                again.returncode, changed, tasks, again.stderr[-2000:]))
        with open(log) as handle:
            rows = [json.loads(line) for line in handle]
        by_where = collections.Counter(r["where"] for r in rows)
        seconds = collections.Counter()
        for r in rows:
            seconds[r["where"]] += r["s"]
        texts = dict((r["where"], r["text"]) for r in rows)
        return {"node": node, "compiled": len(rows), "distinct": len(set((r["where"], r["text"]) for r in rows)),
                "seconds": sum(r["s"] for r in rows), "processes": len(set(r["pid"] for r in rows)),
                "top": [{"where": w, "count": c, "seconds": round(seconds[w], 4), "text": texts[w]}
                        for w, c in by_where.most_common(top)],
                "by_file": collections.Counter(r["where"].rsplit(":", 1)[0] for r in rows).most_common()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == _HOOK:
        hooked_playbook(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--node", choices=["mig", "mps"], action="append")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--payload", action="store_true", help="only the payload of gpu_node_plan")
    parser.add_argument("--json", help="write the report as JSON to this file")
    args = parser.parse_args()
    files = payload()
    report = {"payload": {"files": len(files), "bytes": sum(entry[1] for entry in files),
                          "names": [entry[0].rsplit("/", 1)[1] for entry in files]}}
    print("gpu_node_plan's payload: %d module_utils files, %.0f KB" % (len(files), report["payload"]["bytes"] / 1000.0))
    print("  " + " ".join(report["payload"]["names"]))
    if not args.payload:
        for node in args.node or ["mig", "mps"]:
            res = report[node] = run(node, args.top)
            print("\n%s node, converged re-run: %d template strings compiled (%d distinct) in %d processes, %.2f s" % (
                node, res["compiled"], res["distinct"], res["processes"], res["seconds"]))
            for entry in res["top"]:
                print("  %4d  %.3f s  %-45s %s" % (entry["count"], entry["seconds"], entry["where"], entry["text"][:70]))
            print("  by file: " + ", ".join("%s %d" % item for item in res["by_file"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
