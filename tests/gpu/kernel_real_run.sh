#!/usr/bin/env bash
# Device-machine driver for docs/readings/kernel-readings-real-gpu.md (issue 51): the collection's next-kernel reader
# (`_driver_kernel.read`, as driver_plan calls it, on the real root "/" with the host's own grubby, modinfo and dkms
# where they exist) beside the host's own answers. Read-only: nothing is installed or changed. Run from the
# repository root on a lent GPU machine with ansible-core's wheels in .whl/ (git-ignored, carried); writes under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
{
  m date -u +%FT%TZ; m uname -r; m cat /proc/sys/kernel/osrelease
  # shellcheck disable=SC2016  # expanded by the inner sh
  m sh -c 'for t in grubby grub-editenv modinfo dkms; do printf "%s: " $t; command -v $t || echo "(not on PATH)"; done'
  m ls /boot /lib/modules
  m grubby --default-kernel
  m grub-editenv list
  m modinfo -k "$(uname -r)" -F version nvidia
  m dkms status
  m cat /sys/module/nvidia/version
} > "$OUT/host.txt" 2>&1
PYTHONPATH=$PWD/.collections:$PYTHONPATH m python3 - > "$OUT/reader.txt" <<'PY'
import json, os, shutil, subprocess
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_kernel as k


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


tools = {"grubby": shutil.which("grubby"), "modinfo": [shutil.which("modinfo")] if shutil.which("modinfo") else None,
         "dkms": [shutil.which("dkms")] if shutil.which("dkms") else None}
running = open("/proc/sys/kernel/osrelease").read().strip()
with open("/sys/module/nvidia/version") as handle:
    version = handle.read().strip()
print(json.dumps({"tools": tools, "readings": k.read(run, "/", running, {"version": version, "flavour": "open"}, tools)},
                 indent=1, sort_keys=True))
PY
cat "$OUT/host.txt" "$OUT/reader.txt"
