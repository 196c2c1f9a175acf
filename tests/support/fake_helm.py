"""A helm stand-in for tests of the cluster-facing helm commands.

The real helm (tools/bin/helm, installed by scripts/setup.d/helm.sh) cannot run `upgrade --install` against the
fake API server in tests/support/fake_kube_api.py: helm's release storage talks protobuf to the API, which the fake
does not speak. So this script:

- passes `version`, `show` and `template` through to the real helm (FAKE_HELM_REAL), so chart metadata and
  rendering are real;
- emulates `list`, `get values`, `history`, `upgrade --install`, `rollback` and `uninstall` on a JSON state file
  (FAKE_HELM_STATE), printing output in the shapes real helm 3/4 print for `-o json` (recorded from helm);
- logs every argv and whether credentials came through the environment (never argv) in the state file;
- FAKE_HELM_FAIL_UPGRADE=<n>: the next n upgrades fail after recording a failed revision, like a failed rollout.
"""
import json
import os
import subprocess
import sys
import time

STATE = os.environ["FAKE_HELM_STATE"]
REAL = os.environ.get("FAKE_HELM_REAL")


def load():
    if os.path.exists(STATE):
        with open(STATE) as handle:
            return json.load(handle)
    return {"releases": {}, "log": [], "fail_upgrades": int(os.environ.get("FAKE_HELM_FAIL_UPGRADE") or 0)}


def save(state):
    with open(STATE + ".tmp", "w") as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.replace(STATE + ".tmp", STATE)


def opt(args, name, default=None):
    if name in args:
        return args[args.index(name) + 1]
    return default


def now():
    return time.strftime("%Y-%m-%d %H:%M:%S.000000000 +0000 UTC", time.gmtime())


def release_row(name, ns, rev):
    return {"name": name, "namespace": ns, "revision": str(rev["revision"]), "updated": rev["updated"],
            "status": rev["status"], "chart": rev["chart"], "app_version": rev["app_version"]}


def main(argv):
    state = load()
    state["log"].append({"argv": argv, "env_token": "HELM_KUBETOKEN" in os.environ,
                         "env_server": os.environ.get("HELM_KUBEAPISERVER"),
                         "kubeconfig": os.environ.get("KUBECONFIG")})
    save(state)
    verb = argv[0]
    if verb in ("version", "show", "template"):
        proc = subprocess.run([REAL] + argv, capture_output=True, text=True, check=False)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        return proc.returncode
    ns = opt(argv, "--namespace", "default")
    releases = state["releases"]
    if verb == "list":
        flt = opt(argv, "--filter", "")
        name = flt.strip("^$").replace("\\", "")
        rows = []
        for key, revs in sorted(releases.items()):
            rns, rname = key.split("/", 1)
            if rns == ns and (not name or rname == name):
                rows.append(release_row(rname, rns, revs[-1]))
        print(json.dumps(rows))
        return 0
    if verb == "get" and argv[1] == "values":
        key = "%s/%s" % (ns, argv[2])
        if key not in releases:
            sys.stderr.write("Error: release: not found\n")
            return 1
        print(json.dumps(releases[key][-1]["values"] or None))
        return 0
    if verb == "history":
        key = "%s/%s" % (ns, argv[1])
        if key not in releases:
            sys.stderr.write("Error: release: not found\n")
            return 1
        print(json.dumps([{"revision": r["revision"], "updated": r["updated"], "status": r["status"],
                           "chart": r["chart"], "app_version": r["app_version"], "description": r["description"]}
                          for r in releases[key]]))
        return 0
    if verb == "upgrade":
        assert "--install" in argv, argv
        name = argv[argv.index("--install") + 1]
        chart = argv[argv.index("--install") + 2]
        show = [REAL, "show", "chart", chart]
        if opt(argv, "--repo"):
            show += ["--repo", opt(argv, "--repo")]
        if opt(argv, "--version"):
            show += ["--version", opt(argv, "--version")]
        proc = subprocess.run(show, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            return proc.returncode
        import yaml
        meta = yaml.safe_load(proc.stdout)
        with open(opt(argv, "--values")) as handle:
            values = yaml.safe_load(handle)
        key = "%s/%s" % (ns, name)
        revs = releases.setdefault(key, [])
        rev = {"revision": len(revs) + 1, "updated": now(), "chart": "%s-%s" % (meta["name"], meta["version"]),
               "app_version": str(meta.get("appVersion", "")), "values": values}
        state = load()
        failing = state.get("fail_upgrades", 0) > 0
        if failing:
            state["fail_upgrades"] -= 1
            rev.update(status="failed", description="Upgrade \"%s\" failed: context deadline exceeded" % name)
            state["releases"].setdefault(key, []).append(rev)
            save(state)
            sys.stderr.write("Error: UPGRADE FAILED: context deadline exceeded\n")
            return 1
        for old in state["releases"].setdefault(key, []):
            if old["status"] == "deployed":
                old["status"] = "superseded"
        rev.update(status="deployed", description="Install complete" if rev["revision"] == 1 else "Upgrade complete")
        state["releases"][key].append(rev)
        save(state)
        print('Release "%s" has been upgraded. Happy Helming!' % name)
        return 0
    if verb == "rollback":
        name, target = argv[1], int(argv[2])
        key = "%s/%s" % (ns, name)
        state = load()
        revs = state["releases"].get(key)
        if not revs:
            sys.stderr.write("Error: release: not found\n")
            return 1
        src = [r for r in revs if r["revision"] == target][0]
        for old in revs:
            if old["status"] in ("deployed", "failed"):
                old["status"] = "superseded" if old["status"] == "deployed" else old["status"]
        revs.append(dict(src, revision=len(revs) + 1, status="deployed", updated=now(),
                         description="Rollback to %d" % target))
        save(state)
        print("Rollback was a success! Happy Helming!")
        return 0
    if verb == "uninstall":
        key = "%s/%s" % (ns, argv[1])
        state = load()
        state["releases"].pop(key, None)
        save(state)
        print('release "%s" uninstalled' % argv[1])
        return 0
    sys.stderr.write("fake helm: unsupported command %r\n" % argv)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
