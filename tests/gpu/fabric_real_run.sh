#!/usr/bin/env bash
# Device-machine driver for tests/gpu/test_gpu_info_real.py (its fabric rows: issue 52) and
# tests/gpu/test_health_sweep_real.py (the health read's fabric entry, built from the same read): run from the
# repository root on a lent GPU machine with ansible-core's wheels in .whl/ (git-ignored, carried). Read-only: no
# GPU setting is changed. Writes its readings under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
Q=index,name,uuid,pci.bus_id,driver_version,mig.mode.current,compute_mode,persistence_mode
{
  m date -u +%FT%TZ; m uname -r; m nproc
  m nvidia-smi --query-gpu=$Q --format=csv
  m cat /proc/driver/nvidia/version
  # shellcheck disable=SC2016  # expanded by the inner sh
  m sh -c 'nvidia-smi -q | sed -n "/^GPU /p;/Fabric/,/^        [A-Z][a-z]* *$/p"'
  # shellcheck disable=SC2016  # expanded by the inner sh
  m sh -c 'for t in nvbandwidth nvcc dcgmi; do printf "%s: " $t; command -v $t || echo "(not on PATH)"; done'
  m python3 -c 'import sys, ansible.release as r; print(sys.version); print("ansible-core", r.__version__)'
  m python3 -m pip show nvidia-ml-py
} > "$OUT/machine-before.txt"
s=$(date +%s.%N)
GPUOPS_REAL_GPU=1 GPUOPS_REPORT_DIR=$OUT timeout 400 python3 -m pytest -p no:cacheprovider -v -rA \
  tests/gpu/test_gpu_info_real.py tests/gpu/test_health_sweep_real.py 2>&1 | tee "$OUT/pytest.log"
rc=$?
e=$(date +%s.%N)
{
  echo "pytest rc=$rc wall_s=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }')"
  m nvidia-smi --query-gpu=$Q --format=csv
  m date -u +%FT%TZ
} > "$OUT/machine-after.txt"
cat "$OUT/machine-before.txt" "$OUT/machine-after.txt"
exit $rc
