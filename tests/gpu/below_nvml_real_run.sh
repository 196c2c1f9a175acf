#!/usr/bin/env bash
# Device-machine driver, READ-ONLY, for the driver facts below NVML (issue 34) and the health read (issue 35) on a
# lent GPU: run from the repository root with the wheels of ansible-core in .whl/ (git-ignored, carried; see
# tests/gpu/device_env.sh). Nothing is installed, loaded, unloaded, started or set: NVML's read-only guard is on, and
# the host's own tools are only asked to print (nvidia-smi -q, modinfo -F version, cat of /proc and /sys files).
# Writes the raw readings and both comparisons under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
export GPUOPS_NVML_READ_ONLY=1
Q=index,name,pci.bus_id,driver_version,mig.mode.current,compute_mode,persistence_mode
{
  m date -u +%FT%TZ; m uname -r; m grep PRETTY /etc/os-release
  m nvidia-smi --query-gpu=$Q --format=csv
  m head -n 1 /proc/driver/nvidia/version; m cat /sys/module/nvidia/version; m modinfo -F version nvidia
  m grep -E '^(nvidia|nouveau)' /proc/modules; m ls /proc/driver/nvidia/gpus /proc/driver/nvidia-nvswitch/devices
  # shellcheck disable=SC2016  # (the loop's variables are the inner shell's)
  m sh -c 'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x10de ] && echo "$d $(cat $d/device $d/class $d/subsystem_vendor $d/subsystem_device) $(basename "$(readlink $d/driver)")"; done'
  m sh -c 'ls /sys/firmware/efi/efivars/ 2>/dev/null | grep -c SecureBoot'
  m sh -c 'dmesg 2>&1 | grep -c "NVRM: Xid"'
} > "$OUT/host-before.txt" 2>&1
nvidia-smi -q -x > "$OUT/nvidia-smi-q.xml" 2>&1
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
python3 tests/gpu/driver_facts_vs_host.py > "$OUT/driver-facts-vs-host.txt" 2>&1; echo "driver_facts_vs_host exit $?" | tee -a "$OUT/summary.txt"
python3 tests/gpu/health_vs_smi.py --out "$OUT/health-vs-smi.json" > "$OUT/health-vs-smi.txt" 2>&1; echo "health_vs_smi exit $?" | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=$Q --format=csv > "$OUT/after.csv" 2>&1
grep -v '^==\|^--' "$OUT/host-before.txt" | sed -n 4,5p > /dev/null
tail -n 40 "$OUT/driver-facts-vs-host.txt" "$OUT/health-vs-smi.txt"
