#!/usr/bin/env bash
# Device-machine driver, READ-ONLY, for the modules' bytecode cache (plugins/module_utils/common/_bytecode_cache.py) on a
# lent GPU: gpuops.nvidia.gpu_info (NVML's read-only guard on) run through ansible four times - with an empty cache,
# twice with it filled, and with it off - and the answers compared. Run from the repository root with ansible-core's
# wheels in .whl/ (git-ignored, carried; tests/gpu/device_env.sh). Writes each answer, the CPU of each run, the
# cache directory's listing and the comparison under $OUT (8 files).
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
export GPUOPS_NVML_READ_ONLY=1 ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_STDOUT_CALLBACK=json_results
export ANSIBLE_CALLBACK_PLUGINS=$PWD/tests/support/callback_plugins
CACHE=$(mktemp -d)/bytecode
PY=$(command -v python3)
run() {  # run LABEL CACHE-SETTING
  /usr/bin/time -f "$1 user %U system %S" -a -o "$OUT/times.txt" \
    env GPUOPS_BYTECODE_CACHE="$2" ansible localhost -c local -m gpuops.nvidia.gpu_info \
    -e ansible_python_interpreter="$PY" > "$OUT/$1.json" 2>> "$OUT/errors.txt"
  echo "$1 exit $?" >> "$OUT/summary.txt"
}
run empty "$CACHE"; ls -la "$CACHE" >> "$OUT/summary.txt" 2>&1
run filled-1 "$CACHE"; run filled-2 "$CACHE"; run off off
python3 - "$OUT" > "$OUT/compare.txt" 2>&1 <<'PYEOF'
import json, os, sys
out = sys.argv[1]
keys = ("index", "uuid", "name", "pci_bus_id", "mig_mode", "compute_mode")
seen = {}
for label in ("empty", "filled-1", "filled-2", "off"):
    with open(os.path.join(out, label + ".json")) as handle:
        data = json.load(handle)
    result = data["plays"][0]["tasks"][0]["hosts"]["localhost"]
    facts = result.get("ansible_facts", {}).get("nvidia_gpus", {})
    seen[label] = [dict((k, gpu.get(k)) for k in keys) for gpu in facts.get("gpus", [])]
    print(label, "failed" if result.get("failed") else "ok", facts.get("backend"), len(seen[label]), "GPU(s)")
same = all(seen[label] == seen["empty"] for label in seen)
print("the same GPUs in every run:", same)
print(json.dumps(seen["empty"], indent=1))
sys.exit(0 if same and seen["empty"] else 1)
PYEOF
echo "compare exit $?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt" "$OUT/times.txt" "$OUT/compare.txt"
