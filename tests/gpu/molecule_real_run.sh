#!/usr/bin/env bash
# Device-machine driver for the molecule scenarios gpu and gpu-readonly on a real GPU host, READ-ONLY: run from the
# repository root on a lent GPU machine with the wheels of ansible-core and molecule (and their dependencies) in
# .whl/ (git-ignored, carried; docs/readings/molecule-gpu-real.md lists them). The host is tested on itself (local
# connection, a CI runner's case): its current state is read with nvidia-smi and declared in an inventory written
# here (MIG off, the compute mode and persistence mode each GPU has), with NVML's read-only guard on and every
# mutating NVML call attempted logged, containerd and systemd unmanaged, the boot-time units written under a scratch
# directory. Then site.yml with mig_allow_reboot=true on that local connection, which must be refused before anything
# is read or changed. Refuses to run where the GPUs' state cannot be declared as one node (MIG on, mixed compute modes).
# Writes its readings under $OUT.
set -o pipefail
# shellcheck source=tests/gpu/device_env.sh
. tests/gpu/device_env.sh
Q=index,name,uuid,pci.bus_id,driver_version,mig.mode.current,mig.mode.pending,compute_mode,persistence_mode
SCRATCH=$(mktemp -d)
CALLS=$OUT/nvml-calls.jsonl
: > "$CALLS"
{
  m date -u +%FT%TZ; m uname -r; m grep PRETTY /etc/os-release; m nproc
  m nvidia-smi -L; m nvidia-smi --query-gpu=$Q --format=csv
  m python3 -c 'import sys, ansible.release as r, pynvml; print(sys.version); print("ansible-core", r.__version__)'
  m molecule --version
  m python3 -m pip show nvidia-ml-py
} > "$OUT/machine-before.txt"
nvidia-smi --query-gpu=$Q --format=csv,noheader > "$SCRATCH/before.csv" || exit 4

# The declaration: the host's current state.
mig=$(nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader | sort -u | tr -d ' ')
modes=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | sort -u | tr -d ' ')
pers=$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader | sort -u | tr -d ' ')
case "$mig" in Disabled|"[N/A]") ;; *) echo "MIG mode is '$mig': this driver declares MIG off only"; exit 5 ;; esac
case "$modes" in Default|Exclusive_Process|Prohibited) ;; *) echo "compute modes '$modes': not one mode"; exit 5 ;; esac
case "$pers" in Enabled) pers=true ;; Disabled) pers=false ;; *) echo "persistence modes '$pers'"; exit 5 ;; esac
mkdir -p "$SCRATCH/inventory"
cat > "$SCRATCH/inventory/hosts.yml" <<EOF
all:
  children:
    gpu_nodes:
      hosts:
        gpu-host:
          ansible_connection: local
          ansible_python_interpreter: "{{ ansible_playbook_python }}"
          gpu_node_sharing: none
          gpu_node_compute_mode: $modes
          compute_mode_persistence: $pers
          compute_mode_manage_systemd: false
          compute_mode_unit_directory: $SCRATCH/units
          mig_manage_systemd: false
          mig_root: $SCRATCH/root
          gpu_node_manage_containerd: false
          gpu_node_install_nvml: false
          gpuops_environment:
            GPUOPS_NVML_READ_ONLY: "1"
            GPUOPS_NVML_CALL_LOG: $CALLS
EOF
sed "s#$SCRATCH#<scratch>#g; s#$OUT#<out>#g" "$SCRATCH/inventory/hosts.yml" > "$OUT/inventory.yml"

export HOME=$SCRATCH/home ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1 NO_COLOR=1 MOLECULE_NO_LOG=false
export GPUOPS_MOLECULE_INVENTORY=$SCRATCH/inventory
rc=0
for scenario in gpu gpu-readonly; do
  s=$(date +%s.%N)
  (cd extensions && timeout 240 molecule test -s "$scenario") > "$OUT/molecule-$scenario.log" 2>&1
  r=$?
  e=$(date +%s.%N)
  echo "molecule test -s $scenario: rc=$r wall_s=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }')" \
    | tee -a "$OUT/machine-after.txt"
  [ $r -eq 0 ] || rc=$r
done
# The on-host case's refusal: site.yml with mig_allow_reboot=true over this local connection must stop in its
# validation play, before any module reads or changes the GPU.
ansible-playbook -i "$SCRATCH/inventory" site.yml -e mig_allow_reboot=true > "$OUT/local-reboot-refused.log" 2>&1
r=$?
echo "site.yml -e mig_allow_reboot=true (local connection): rc=$r (must fail)" | tee -a "$OUT/machine-after.txt"
grep -q "mig_allow_reboot=true with ansible_connection=local" "$OUT/local-reboot-refused.log" && [ $r -ne 0 ] || rc=7
nvidia-smi --query-gpu=$Q --format=csv,noheader > "$SCRATCH/after.csv"
{
  m nvidia-smi --query-gpu=$Q --format=csv
  if cmp -s "$SCRATCH/before.csv" "$SCRATCH/after.csv"; then echo "GPU state before/after: EQUAL"
  else echo "GPU state before/after: DIFFERENT"; diff "$SCRATCH/before.csv" "$SCRATCH/after.csv"; rc=6; fi
  echo "mutating NVML calls attempted (lines of the call log): $(wc -l < "$CALLS")"
  m ls -la "$SCRATCH/units"
  m date -u +%FT%TZ
} >> "$OUT/machine-after.txt"
grep -h -E "PLAY RECAP|^gpu-host|Running .* > |actions=|Idempotence|INFO|WARNING|ERROR" "$OUT"/molecule-*.log | head -80
cat "$OUT/machine-before.txt" "$OUT/machine-after.txt"
exit $rc
