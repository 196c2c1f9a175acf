"""Record what the REAL ``nvidia-ctk system create-dev-char-symlinks`` does on the simulated roots of
tests/support/dev_char_tree.py (issue 51; docs/readings/dev-char-symlinks-real-ctk.md says how it was built and run).

    sudo python3 tests/support/dev_char_reading.py /path/to/nvidia-ctk OUT.json

Needs root: the real command reads the host's own /proc/devices, /proc/driver/nvidia-caps/mig-minors, PCI sysfs and
/dev (no flag moves them), so each case runs in a chroot of a scratch root holding the tree (device nodes made with
mknod), the binary and the C library it links. Nothing outside the scratch directory is read or written. Not run by
the tests: its output is tests/fixtures/nvidia-ctk/dev-char-symlinks-real.json.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".collections"))
from tests.support import dev_char_tree  # noqa: E402


def _libraries(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = []
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/") and os.path.exists(word):
                paths.append(word)
    return paths


def record(ctk, case):
    change, args, runs = dev_char_tree.CASES[case]
    scratch = tempfile.mkdtemp(prefix="devchar-real-")
    try:
        root = os.path.join(scratch, "root")
        dev_char_tree.prepare(root, case, nodes="mknod")
        os.makedirs(os.path.join(root, "usr/bin"))
        shutil.copy(ctk, os.path.join(root, "usr/bin/nvidia-ctk"))
        for lib in _libraries(ctk):
            os.makedirs(os.path.dirname(root + lib), exist_ok=True)
            shutil.copy(lib, root + lib)
        result = {"args": args, "runs": []}
        for dummy in range(runs):
            done = subprocess.run(["chroot", root, "/usr/bin/nvidia-ctk", "system", "create-dev-char-symlinks"] + args,
                                  capture_output=True, text=True, check=False)
            result["runs"].append({"rc": done.returncode, "stdout": done.stdout,
                                   "messages": dev_char_tree.messages(done.stderr)})
        dev_char = os.path.join(root, "dev/char")
        result["links"] = dev_char_tree.links(dev_char)
        result["dev_char_mode"] = ("%o" % (os.stat(dev_char).st_mode & 0o7777)) if os.path.isdir(dev_char) else None
        return result
    finally:
        shutil.rmtree(scratch)


def main(ctk, out):
    version = subprocess.run([ctk, "--version"], capture_output=True, text=True, check=True).stdout
    data = {"nvidia_ctk_version": version.strip().splitlines(),
            "cases": dict((case, record(ctk, case)) for case in sorted(dev_char_tree.CASES))}
    with open(out, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
