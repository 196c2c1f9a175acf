#!/usr/bin/env bash
# Device-machine driver for tests/gpu/test_dra_real.py: run from the repository root on a lent GPU machine, with our
# DRA device probe (scripts/nvidia_facts/dra_device_probe.go, built against NVIDIA's DRA driver v25.8.1's vendored
# go-nvml at build/dra-probe/dra-probe) and ansible-core's wheels in .whl/ (both git-ignored, carried;
# docs/readings/dra-real-gpu.md says how they were made). Read-only on the GPU. Writes its readings under $OUT:
# machine-before.txt, facts.json (our NVML backend), probe.json (NVIDIA's Go calls), pytest.log,
# dra_real_report.json, machine-after.txt.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
PROBE=$PWD/build/dra-probe/dra-probe
Q=index,name,uuid,memory.total,pci.bus_id,driver_version
S=index,uuid,compute_mode,mig.mode.current,mig.mode.pending,persistence_mode
{
  m date -u +%FT%TZ; m uname -r; m grep PRETTY /etc/os-release; m nproc
  m nvidia-smi -L
  m nvidia-smi --query-gpu=$Q --format=csv
  m nvidia-smi --query-gpu=$S --format=csv
  m cat /proc/driver/nvidia/version
  m sha256sum "$PROBE"
  m python3 -c 'import sys, ansible.release as r; print(sys.executable, sys.version); print("ansible-core", r.__version__)'
  m python3 -m pip show nvidia-ml-py
  m python3 -m pytest --version
} > "$OUT/machine-before.txt"

# Our facts, as gpu_info reads them (the collection's NVML backend), and the quantities our templates' memory
# selectors name, which the probe compares with resource.Quantity.Cmp.
PYTHONPATH=$PWD/.collections:$PYTHONPATH python3 - "$OUT/facts.json" > "$OUT/quantities.txt" <<'EOF' || echo "facts: exit $?"
import json, re, sys
from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu._gpu_backend import read_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.plan import _dra
facts = read_facts()
with open(sys.argv[1], "w") as handle:
    json.dump(facts, handle, indent=2, sort_keys=True)
decls = _dra.node_templates({"name": "mps-4", "sharing": "mps", "replicas": 4}, facts["gpus"], "n", per_gpu=True)
print(" ".join(sorted({m for d in decls for s in d["selectors"] for m in re.findall(r"quantity\('([^']*)'\)", s)})))
EOF
# shellcheck disable=SC2046  # one word per quantity
"$PROBE" $(cat "$OUT/quantities.txt") > "$OUT/probe.json" 2> "$OUT/probe-stderr.txt"
echo "probe rc=$? quantities: $(cat "$OUT/quantities.txt")"
rm -f "$OUT/quantities.txt"
[ -s "$OUT/probe-stderr.txt" ] || rm -f "$OUT/probe-stderr.txt"

s=$(date +%s.%N)
GPUOPS_REAL_GPU=1 GPUOPS_DRA_PROBE=$PROBE GPUOPS_REPORT_DIR=$OUT timeout 240 \
  python3 -m pytest -p no:cacheprovider -v -rA --durations=0 tests/gpu/test_dra_real.py 2>&1 | tee "$OUT/pytest.log"
rc=$?
e=$(date +%s.%N)
{
  echo "pytest rc=$rc wall_s=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }')"
  m nvidia-smi --query-gpu=$Q --format=csv
  m nvidia-smi --query-gpu=$S --format=csv
  m date -u +%FT%TZ
} > "$OUT/machine-after.txt"
cat "$OUT/machine-before.txt" "$OUT/probe.json" "$OUT/machine-after.txt"
diff <(sed -n '/--query-gpu/,/-- exit/p' "$OUT/machine-before.txt") \
     <(sed -n '/--query-gpu/,/-- exit/p' "$OUT/machine-after.txt") && echo "nvidia-smi queries: unchanged before/after"
exit $rc
