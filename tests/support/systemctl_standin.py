"""STAND-IN for systemctl, for tests without systemd. Not the real tool.

Units are read from $FAKE_SYSTEMD_UNIT_DIR at daemon-reload; state lives in $FAKE_SYSTEMD_STATE. start/stop/
restart run the loaded unit's Environment=, ExecStartPre=, ExecStart=, ExecStartPost=, ExecStop= and ExecStopPost=
lines (with systemd's $$ and %% unescaping) so a test exercises the unit text the module renders.

On a simulated node (GPUOPS_SIMULATED_ROOT set, the FAKE_SYSTEMD_* variables not): the state lives in
R/.standin-systemd.json and the units are the files the node's packages installed (R/etc/systemd/system,
R/usr/local/lib/systemd/system, R/lib/systemd/system, R/usr/lib/systemd/system: systemd's order), each loaded when
first named, as systemd loads a new unit file on demand, with its drop-ins (<unit>.d/*.conf; an empty ``ExecStart=``
resets the command list, as in systemd).
Wherever GPUOPS_SIMULATED_ROOT is set, an Exec line's absolute program that exists under the root is run from there (a
program the node's packages installed).
"""
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.stop_points import standin_done  # noqa: E402  pylint: disable=wrong-import-position

sim_root = os.environ.get("GPUOPS_SIMULATED_ROOT") or None
if "FAKE_SYSTEMD_STATE" not in os.environ and sim_root:
    state_path = os.path.join(sim_root, ".standin-systemd.json")
    unit_dirs = [os.path.join(sim_root, d) for d in ("etc/systemd/system", "usr/local/lib/systemd/system",
                                                     "lib/systemd/system", "usr/lib/systemd/system")]
    on_demand = True
else:
    state_path = os.environ["FAKE_SYSTEMD_STATE"]
    unit_dirs = [os.environ["FAKE_SYSTEMD_UNIT_DIR"]]
    on_demand = False


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


def unit_text(name):
    """The unit's file (the first directory's) and, on a simulated node, its drop-ins (<unit>.d/*.conf of every
    directory, in name order), as systemd merges them; None where no file exists."""
    text = None
    for directory in unit_dirs:
        if os.path.isfile(os.path.join(directory, name)):
            with open(os.path.join(directory, name)) as f:
                text = f.read()
            break
    if text is None or not on_demand:
        return text
    dropins = {}
    for directory in reversed(unit_dirs):
        folder = os.path.join(directory, name + ".d")
        for n in (os.listdir(folder) if os.path.isdir(folder) else []):
            if n.endswith(".conf"):
                dropins[n] = os.path.join(folder, n)
    for n in sorted(dropins):
        with open(dropins[n]) as f:
            text += "\n" + f.read()
    return text


def unit(name):
    u = st["units"].setdefault(name, {"active": False, "enabled": False, "loaded": None})
    if u["loaded"] is None and on_demand:
        u["loaded"] = unit_text(name)
    return u


def program(argv):
    """An absolute program the simulated node's packages installed runs from under its root."""
    if sim_root and argv and os.path.isabs(argv[0]):
        rooted = os.path.join(sim_root, argv[0].lstrip("/"))
        if os.path.isfile(rooted):
            return [rooted] + argv[1:]
    return argv


def run_lines(u, keys):
    env = dict(os.environ)
    for line in u["loaded"].splitlines():
        if line.startswith("Environment="):
            k, v = line[len("Environment="):].split("=", 1)
            env[k] = v
    commands = []
    for line in u["loaded"].splitlines():
        key, _sep, value = line.partition("=")
        if key in keys:
            if not value.strip():       # an empty assignment resets the list (how a drop-in replaces ExecStart)
                commands = [c for c in commands if c[0] != key]
                continue
            commands.append((key, value))
    for key in keys:
        for _key, value in [c for c in commands if c[0] == key]:
            argv = program([a.replace("$$", "$").replace("%%", "%") for a in shlex.split(value)])
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
    for directory in unit_dirs:
        for n in (os.listdir(directory) if os.path.isdir(directory) else []):
            if n.endswith(".service"):
                unit(n)["loaded"] = unit_text(n)        # the first directory's file wins, as /etc's over /lib's
elif cmd == "is-active":
    u = unit(args[1])
    print("active" if u["active"] else "inactive")
    rc = 0 if u["active"] else 3
elif cmd == "is-enabled":
    u = unit(args[1])
    if u["loaded"] is None:
        print("Failed to get unit file state for %s: No such file or directory" % args[1], file=sys.stderr)
        rc = 1
    elif u.get("masked"):
        print("masked")
        rc = 1
    else:
        print("enabled" if u["enabled"] else "disabled")
        rc = 0 if u["enabled"] else 1
elif cmd in ("enable", "disable"):
    u = unit(args[1])
    if u["loaded"] is None:
        rc = 1
    elif cmd == "enable" and u.get("masked"):
        print("Failed to enable unit: Unit file %s is masked." % args[1], file=sys.stderr)
        rc = 1
    else:
        u["enabled"] = cmd == "enable"
elif cmd in ("mask", "unmask"):
    # systemd's mask links /etc/systemd/system/<unit> to /dev/null: the unit cannot start or be enabled, a running one
    # keeps running, its enablement is kept apart (unmask gives it back)
    u = unit(args[1])
    u["masked"] = cmd == "mask"
elif cmd == "start":
    u = unit(args[1])
    if u.get("masked"):
        print("Failed to start %s: Unit %s is masked." % (args[1], args[1]), file=sys.stderr)
        rc = 1
    else:
        rc = 0 if (u["loaded"] and (u["active"] or start(u))) else 1
elif cmd == "stop":
    u = unit(args[1])
    if u["active"]:
        run_lines(u, ("ExecStop",))
        run_lines(u, ("ExecStopPost",))
    u["active"] = False
elif cmd == "restart":
    u = unit(args[1])
    if u["active"]:
        run_lines(u, ("ExecStop",))
        run_lines(u, ("ExecStopPost",))
    rc = 0 if (u["loaded"] and start(u)) else 1
else:
    print("fake systemctl: unsupported %s" % args, file=sys.stderr)
    rc = 1
save()
standin_done("systemctl", args)
sys.exit(rc)
