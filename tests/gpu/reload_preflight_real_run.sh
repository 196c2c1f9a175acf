#!/usr/bin/env bash
# Device-machine driver, READ-ONLY, for issue 47 on a lent GPU: the driver reload's preflight with the real driver
# and its real holders, the open-module table for the real GPUs, a refused node plan carrying the real health
# verdict (tests/gpu/reload_preflight_probe.py). Run from the repository root with ansible-core's wheels in .whl/
# (git-ignored, carried; tests/gpu/device_env.sh). Nothing is stopped, loaded, reset or set. Output under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
export GPUOPS_NVML_READ_ONLY=1 GPUOPS_NODE_LOCK=/tmp/gpuops-probe.lock PYTHONPATH=$PWD/.collections:$PWD:$PYTHONPATH
{
  m date -u +%FT%TZ; m uname -r
  m nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,mig.mode.current,compute_mode,persistence_mode --format=csv
  m grep -E '^nvidia' /proc/modules
  m sh -c 'fuser -v /dev/nvidia* 2>&1'
} > "$OUT/host.txt" 2>&1
python3 tests/gpu/reload_preflight_probe.py > "$OUT/preflight.jsonl" 2>&1
echo "probe exit $?" | tee "$OUT/summary.txt"
tail -c 6000 "$OUT/preflight.jsonl"
