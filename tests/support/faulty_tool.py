"""A wrapper that runs a real tool (helm, containerd) and makes its n-th "mutating" invocation fail, for the
fault-injection tests of site.yml. Usage: faulty_tool.py CONFIG.json ARGS... where CONFIG holds
  real: the real binary; match: the words that make an invocation count (e.g. ["upgrade", "rollback"]);
  counter: a file counting the matching invocations so far; fail_at: the one that fails (0: none, only count).
The failing invocation does nothing and exits 1 with a message on stderr, as a tool that broke would."""
import fcntl
import json
import os
import sys


def main():
    with open(sys.argv[1]) as handle:
        conf = json.load(handle)
    args = sys.argv[2:]
    if any(word in args for word in conf["match"]):
        with open(conf["counter"], "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            n = int(handle.read() or 0) + 1
            handle.seek(0)
            handle.truncate()
            handle.write(str(n))
        if n == conf["fail_at"]:
            sys.stderr.write("Error: %s failed (fault injected by the test at invocation %d: %s)\n"
                             % (os.path.basename(conf["real"]), n, " ".join(args)))
            sys.exit(1)
    os.execv(conf["real"], [conf["real"]] + args)


if __name__ == "__main__":
    main()
