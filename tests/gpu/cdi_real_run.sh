#!/usr/bin/env bash
# Device-machine driver for tests/gpu/test_cdi_real.py: run from the repository root on a lent GPU machine, with an
# nvidia-ctk built from NVIDIA's source at build/nct/nvidia-ctk and ansible-core's wheels in .whl/ (both git-ignored,
# carried; docs/readings/cdi-spec-real-gpu.md says how they were made). Writes its readings under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
CTK=$PWD/build/nct/nvidia-ctk
Q=index,name,uuid,pci.bus_id,driver_version,mig.mode.current,mig.mode.pending,compute_mode,persistence_mode
SYS=(/etc/cdi /var/run/cdi /run/cdi /etc/nvidia-container-runtime)
{
  m date -u +%FT%TZ; m uname -r; m grep PRETTY /etc/os-release; m nproc
  m nvidia-smi -L; m nvidia-smi --query-gpu=$Q --format=csv
  m cat /proc/driver/nvidia/version
  m "$CTK" --version; m sha256sum "$CTK"
  m ls -la "${SYS[@]}"
  # shellcheck disable=SC2016  # expanded by the inner sh
  m sh -c 'for t in nvidia-cdi-hook nvidia-ctk ldconfig ldconfig.real; do printf "%s: " $t; command -v $t || echo "(not on PATH)"; done'
  m python3 -c 'import sys, ansible.release as r; print(sys.executable, sys.version); print("ansible-core", r.__version__)'
  m python3 -m pip show nvidia-ml-py
  m python3 -m pytest --version
} > "$OUT/machine-before.txt"
s=$(date +%s.%N)
GPUOPS_REAL_GPU=1 GPUOPS_NVIDIA_CTK=$CTK GPUOPS_REPORT_DIR=$OUT timeout 420 \
  python3 -m pytest -p no:cacheprovider -v -rA --durations=0 tests/gpu/test_cdi_real.py 2>&1 | tee "$OUT/pytest.log"
rc=$?
e=$(date +%s.%N)
{
  echo "pytest rc=$rc wall_s=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }')"
  m nvidia-smi --query-gpu=$Q --format=csv
  m ls -la "${SYS[@]}"
  m date -u +%FT%TZ
} > "$OUT/machine-after.txt"
cat "$OUT/machine-before.txt" "$OUT/machine-after.txt"
exit $rc
