#!/usr/bin/env bash
# Device-machine driver, READ-ONLY (issue 34 items 5, 6, 9; issue 35 item 4): on a lent GPU, from the repository
# root with ansible-core's wheels in .whl/ (tests/gpu/device_env.sh), the modules that would change a node run in
# CHECK MODE only and report what a real run would do:
# - driver_services (persistenced and the Fabric Manager): its systemctl is a guard that answers only the read-only
#   verbs (is-enabled, is-active) through the host's systemctl and refuses every other verb (exit 1, logged), so a
#   check-mode defect could not start or enable anything;
# - gpu_health_reset with no GPU blocked (GPUOPS_NVML_READ_ONLY=1: the backend refuses any mutating NVML call);
# - gpu_info with health: the driver section's Fabric Manager and fabric fields next to nvidia-smi -q.
# Writes the raw results under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
export GPUOPS_NVML_READ_ONLY=1
guard=$(mktemp -d)/systemctl
cat > "$guard" <<'GUARD'
#!/bin/sh
echo "$*" >> "${GUARD_LOG:?}"
case "$1" in
  is-enabled|is-active) exec systemctl "$@" ;;
  *) echo "guard: refused systemctl $*" >&2; exit 1 ;;
esac
GUARD
chmod +x "$guard"
export GUARD_LOG="$OUT/systemctl-calls.txt"
: > "$GUARD_LOG"
run_module() {   # name, args json: one module in check mode, its JSON result in $OUT/<name>.json
  printf '{"ANSIBLE_MODULE_ARGS": %s}' "$2" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
doc["ANSIBLE_MODULE_ARGS"].update({"_ansible_check_mode": True, "_ansible_diff": True})
print(json.dumps(doc))' > "$OUT/$1.args.json"
  (cd .collections && python3 -m "ansible_collections.gpuops.nvidia.plugins.modules.$1" "$OUT/$1.args.json") \
    > "$OUT/$1.json" 2>&1
  echo "$1 exit $?" | tee -a "$OUT/summary.txt"
}
{ m nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,compute_mode,mig.mode.current --format=csv
  m systemctl is-enabled nvidia-persistenced.service nvidia-fabricmanager.service
  m systemctl is-active nvidia-persistenced.service nvidia-fabricmanager.service
  # shellcheck disable=SC2016  # (dpkg-query's own ${Package} fields, not the shell's)
  m sh -c 'dpkg-query -W -f "\${Package} \${Version}\n" "nvidia-fabricmanager*" 2>&1 | head'
} > "$OUT/host-before.txt" 2>&1
run_module driver_services "{\"persistenced\": true, \"fabric_manager\": \"auto\", \"root\": \"/\", \"systemctl\": \"$guard\"}"
run_module gpu_health_reset '{}'
run_module gpu_info '{"health": true}'
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,compute_mode,mig.mode.current --format=csv > "$OUT/after.csv" 2>&1
grep -c "refused" "$GUARD_LOG" >/dev/null && echo "guard refused: $(grep -v '^is-' "$GUARD_LOG" | tr '\n' ';')" | tee -a "$OUT/summary.txt"
echo "systemctl calls: $(tr '\n' ';' < "$GUARD_LOG")" | tee -a "$OUT/summary.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
for name in ("driver_services", "gpu_health_reset", "gpu_info"):
    try:
        doc = json.load(open("%s/%s.json" % (out, name)))
    except ValueError:
        print(name, "no JSON:", open("%s/%s.json" % (out, name)).read()[-600:])
        continue
    keep = {k: doc.get(k) for k in ("changed", "failed", "msg", "units", "deferred", "fabric", "planned", "resets",
                                     "not_reset", "persistence")} if name != "gpu_info" else {
        "driver": doc.get("driver"), "failed": doc.get("failed"), "msg": doc.get("msg")}
    print(name, json.dumps(keep, sort_keys=True, default=str)[:3000])
PY
