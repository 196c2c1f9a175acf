#!/usr/bin/env bash
# Device-machine driver for the module parameters' read-back (issue 52): what the collection's reader
# (plugins/module_utils/driver/_driver_params.py: parse_proc_params, parse_modinfo, compare - what driver_params,
# driver_modules and the node plan's driver step use) reports for the LOADED driver, beside the host's own
# /proc/driver/nvidia/params, `modinfo -p nvidia` (where modinfo exists) and /sys/module/nvidia/parameters.
# READ-ONLY: no modprobe, no package, nothing written outside $OUT and /tmp (the collection is made importable through a
# link under /tmp). Needs only python3 (the reader imports nothing but the standard library). Run from the repository
# root on a lent GPU machine; writes $OUT/host.txt, $OUT/reader.json and $OUT/verdict.txt, and prints them.
set -o pipefail
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
OUT=${OUT:?}
m() { echo "== $*"; "$@" 2>&1; echo "-- exit $?"; }
COLL=$(mktemp -d /tmp/gpuops-modparams.XXXXXX)
mkdir -p "$COLL/ansible_collections/gpuops"
ln -s "$PWD" "$COLL/ansible_collections/gpuops/nvidia"
touch "$COLL/ansible_collections/__init__.py" "$COLL/ansible_collections/gpuops/__init__.py"
{
  m date -u +%FT%TZ; m uname -r
  m cat /sys/module/nvidia/version
  m head -1 /proc/driver/nvidia/version
  m cat /proc/driver/nvidia/params
  m sh -c 'command -v modinfo || echo "(modinfo not on PATH)"'
  m modinfo -p nvidia
  m ls -la /sys/module/nvidia/parameters
  # the options lines the next load would take (read-only; absent directories just say so)
  m sh -c 'grep -rs "^options nvidia" /etc/modprobe.d /run/modprobe.d /usr/lib/modprobe.d /lib/modprobe.d || true'
} > "$OUT/host.txt" 2>&1
PYTHONPATH=$COLL python3 - "$OUT" > "$OUT/reader.json" 2> "$OUT/reader.err" <<'PY'
import json, shutil, subprocess, sys
from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_params as dp

out = sys.argv[1]
with open("/proc/driver/nvidia/params") as handle:
    raw = handle.read()
reading = dp.parse_proc_params(raw)
modinfo = shutil.which("modinfo")
types, modinfo_rc = None, None
if modinfo:
    p = subprocess.run([modinfo, "-p", "nvidia"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    modinfo_rc = p.returncode
    types = dp.parse_modinfo(p.stdout) if p.returncode == 0 else None
# the host's own lines, split by hand (name: value, quotes kept), to set beside the reader's
host = {}
for line in raw.splitlines():
    name, sep, value = line.partition(":")
    if sep:
        host[name.strip()] = value.strip()
problems = []
by_proc = dict((v, k) for k, v in dp.PROC_NAMES.items())
for proc_name, value in host.items():
    ours = by_proc.get(proc_name, dp.PREFIX + proc_name)
    got = reading.get(ours)
    want = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    if got != want:
        problems.append("%s: the reader says %r, /proc says %r" % (proc_name, got, value))
if types is not None:
    missing = sorted(n for n in reading if n not in types)
    if missing:
        problems.append("named by the reader but not by modinfo -p: %s" % ", ".join(missing))
# declaring exactly what is loaded must converge: no difference, nothing unreadable
diffs, unreadable = dp.compare(dict((n, v) for n, v in reading.items() if v != ""), reading, types or {})
if diffs or unreadable:
    problems.append("the loaded values declared back differ: %s; unreadable %s" % (dp.differences_text(diffs),
                                                                                 unreadable))
json.dump({"reader": reading, "host_lines": host, "modinfo": modinfo, "modinfo_rc": modinfo_rc,
           "modinfo_types": types, "not_in_proc": sorted(n for n in (types or {}) if n not in reading),
           "problems": problems}, sys.stdout, indent=1, sort_keys=True)
with open(out + "/verdict.txt", "w") as handle:
    handle.write("EQUAL: the reader's %d parameters equal /proc/driver/nvidia/params\n" % len(reading) if not problems
                 else "DIFFERENT:\n" + "\n".join(problems) + "\n")
PY
echo "reader exit $?" >> "$OUT/reader.err"
rm -rf "$COLL"
cat "$OUT/host.txt" "$OUT/reader.json" "$OUT/reader.err" "$OUT/verdict.txt"
