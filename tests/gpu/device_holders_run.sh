#!/usr/bin/env bash
# Read-only check of the device-holder finder on a lent GPU machine, from the repository root (issue 36 item 4;
# readings in docs/readings/device-holders-real-gpu.md). Changes no GPU setting and resets nothing: it lists who holds
# /dev/nvidia*, starts one process that holds /dev/nvidia0 open read-only, finds it with the collection's finder and
# with fuser/lsof where present, ends it and looks again. Output under $OUT/holders.log.
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1 GPUOPS_NVML_READ_ONLY=1
OUT=${OUT:?}
mkdir -p .collections/ansible_collections/gpuops && ln -sfn ../../.. .collections/ansible_collections/gpuops/nvidia
export PYTHONPATH=$PWD/.collections
m() { echo "== $*"; "$@" 2>&1; echo "-- exit $?"; }
run() {
  m date -u
  m nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,persistence_mode,mig.mode.current --format=csv
  m uname -r
  m sh -c 'ls -l /dev/nvidia* /dev/nvidia-caps 2>&1'
  m cat /proc/self/cgroup
  m sh -c 'command -v fuser lsof'
  m sh -c 'fuser -v /dev/nvidia* /dev/nvidia-caps/* 2>&1'
  m sh -c 'lsof /dev/nvidia* 2>&1'
  m python3 tests/gpu/device_holders_probe.py before
  rm -f /tmp/holder.pid
  (exec -a gpuops-test-holder python3 -c '
import os, time
f = os.open("/dev/nvidia0", os.O_RDONLY)
open("/tmp/holder.pid.tmp", "w").write(str(os.getpid()))
os.rename("/tmp/holder.pid.tmp", "/tmp/holder.pid")
time.sleep(120)') &
  for _ in $(seq 100); do [ -s /tmp/holder.pid ] && break; sleep 0.1; done
  holder=$(cat /tmp/holder.pid)
  echo "holder pid $holder (bash job $!)"
  m cat "/proc/$holder/cgroup"
  m sh -c "ls -l /proc/$holder/fd"
  m sh -c 'fuser -v /dev/nvidia0 2>&1'
  m sh -c 'lsof /dev/nvidia0 2>&1'
  m python3 tests/gpu/device_holders_probe.py with-holder
  kill "$holder"; wait
  m python3 -c 'from ansible_collections.gpuops.nvidia.plugins.module_utils.gpu import _device_holders as d; print(d.describe(d.find_holders()))'
  m nvidia-smi --query-gpu=index,persistence_mode,mig.mode.current,compute_mode --format=csv
}
run 2>&1 | tee "$OUT/holders.log"
