"""STAND-IN for NVIDIA's nvidia-cuda-mps-control, for tests without a GPU. Not the real tool.

It keeps the daemon's state in $CUDA_MPS_PIPE_DIRECTORY/.fake-mps-state.json and answers the commands the
gpuops.nvidia.mps_control module sends, in the formats NVIDIA documents (get_default_active_thread_percentage
-> "25.0", get_default_device_pinned_mem_limit -> "8G"/"4606M", PID lists one per line). What the real daemon
prints for an index with no limit is not documented; this stand-in prints "0" (an assumption). Tests add
servers/clients by editing the state file ("servers": {"<pid>": [client pids]}). Every command is appended to
"call_log" so tests can prove that check mode sent no set_*/quit command.
"""
import json
import os
import re
import sys

pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
state_path = os.path.join(pipe, ".fake-mps-state.json")


def load():
    try:
        with open(state_path) as f:
            return json.load(f)
    except (IOError, ValueError):
        return {"running": False, "pct": 100.0, "limits": {}, "servers": {}, "call_log": []}


def save(st):
    if not os.path.isdir(pipe):
        if not st["running"]:
            return  # a client call with no daemon leaves no trace, like the real tool
        os.makedirs(pipe)
    with open(state_path + ".tmp", "w") as f:
        json.dump(st, f, indent=1)
    os.replace(state_path + ".tmp", state_path)


st = load()
if sys.argv[1:] == ["-d"]:
    st["call_log"].append("-d")
    if st["running"]:
        save(st)
        print("An instance of this daemon is already running")
        sys.exit(1)
    st.update(running=True, pct=100.0, limits={}, servers={})
    st["log_dir"] = os.environ.get("CUDA_MPS_LOG_DIRECTORY")
    save(st)
    sys.exit(0)
if sys.argv[1:]:
    print("usage: nvidia-cuda-mps-control [-d | -f]", file=sys.stderr)
    sys.exit(2)

rc = 0
for line in sys.stdin.read().splitlines():
    cmd = line.split()
    if not cmd:
        continue
    st["call_log"].append(line.strip())
    if not st["running"]:
        print("Cannot find MPS control daemon process")
        rc = 1
        break
    name, args = cmd[0], cmd[1:]
    if name == "get_server_list" and not args:
        for pid in sorted(st["servers"], key=int):
            print(pid)
    elif name == "get_client_list" and len(args) == 1:
        for pid in st["servers"].get(args[0], []):
            print(pid)
    elif name == "get_default_active_thread_percentage" and not args:
        print("%.1f" % st["pct"])
    elif name == "set_default_active_thread_percentage" and len(args) == 1 and re.match(r"^[0-9]+$", args[0]) \
            and 1 <= int(args[0]) <= 100:
        st["pct"] = float(args[0])
        print("%.1f" % st["pct"])
    elif name == "get_default_device_pinned_mem_limit" and len(args) == 1 and args[0].isdigit():
        mib = st["limits"].get(args[0])
        print("0" if not mib else ("%dG" % (mib // 1024) if mib % 1024 == 0 else "%dM" % mib))
    elif name == "set_default_device_pinned_mem_limit" and len(args) == 2 and args[0].isdigit() \
            and re.match(r"^[1-9][0-9]*[MG]$", args[1]):
        n = int(args[1][:-1])
        st["limits"][args[0]] = n * 1024 if args[1].endswith("G") else n
    elif name == "quit" and not args:
        st["running"] = False
        st["servers"] = {}
    else:
        print("Invalid command: %s" % line.strip())
        rc = 1
        break
save(st)
sys.exit(rc)
