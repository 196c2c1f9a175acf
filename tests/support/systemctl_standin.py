"""STAND-IN for systemctl, for tests without systemd. Not the real tool.

Units are read from $FAKE_SYSTEMD_UNIT_DIR at daemon-reload; state lives in $FAKE_SYSTEMD_STATE. start/stop/
restart run the loaded unit's Environment=, ExecStartPre=, ExecStart=, ExecStartPost= and ExecStop= lines
(with systemd's $$ and %% unescaping) so a test exercises the unit text the module renders.
"""
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.stop_points import standin_done  # noqa: E402  pylint: disable=wrong-import-position

state_path = os.environ["FAKE_SYSTEMD_STATE"]
unit_dir = os.environ["FAKE_SYSTEMD_UNIT_DIR"]


def load():
    try:
        with open(state_path) as f:
            return json.load(f)
    except (IOError, ValueError):
        return {"units": {}, "calls": []}


st = load()
args = sys.argv[1:]
st["calls"].append(args)


def save():
    with open(state_path, "w") as f:
        json.dump(st, f, indent=1)


def unit(name):
    return st["units"].setdefault(name, {"active": False, "enabled": False, "loaded": None})


def run_lines(u, keys):
    env = dict(os.environ)
    for line in u["loaded"].splitlines():
        if line.startswith("Environment="):
            k, v = line[len("Environment="):].split("=", 1)
            env[k] = v
    for line in u["loaded"].splitlines():
        key, _sep, value = line.partition("=")
        if key in keys:
            argv = [a.replace("$$", "$").replace("%%", "%") for a in shlex.split(value)]
            if subprocess.run(argv, env=env, check=False).returncode != 0:
                return False
    return True


def start(u):
    ok = run_lines(u, ("ExecStartPre",)) and run_lines(u, ("ExecStart",)) and run_lines(u, ("ExecStartPost",))
    u["active"] = ok
    return ok


rc = 0
cmd = args[0] if args else ""
if cmd == "daemon-reload":
    for n in os.listdir(unit_dir):
        if n.endswith(".service"):
            with open(os.path.join(unit_dir, n)) as f:
                unit(n)["loaded"] = f.read()
elif cmd == "is-active":
    u = unit(args[1])
    print("active" if u["active"] else "inactive")
    rc = 0 if u["active"] else 3
elif cmd == "is-enabled":
    u = unit(args[1])
    if u["loaded"] is None:
        print("Failed to get unit file state for %s: No such file or directory" % args[1], file=sys.stderr)
        rc = 1
    else:
        print("enabled" if u["enabled"] else "disabled")
        rc = 0 if u["enabled"] else 1
elif cmd in ("enable", "disable"):
    u = unit(args[1])
    if u["loaded"] is None:
        rc = 1
    else:
        u["enabled"] = cmd == "enable"
elif cmd == "start":
    u = unit(args[1])
    rc = 0 if (u["loaded"] and (u["active"] or start(u))) else 1
elif cmd == "stop":
    u = unit(args[1])
    if u["active"]:
        run_lines(u, ("ExecStop",))
    u["active"] = False
elif cmd == "restart":
    u = unit(args[1])
    if u["active"]:
        run_lines(u, ("ExecStop",))
    rc = 0 if (u["loaded"] and start(u)) else 1
else:
    print("fake systemctl: unsupported %s" % args, file=sys.stderr)
    rc = 1
save()
standin_done("systemctl", args)
sys.exit(rc)
