#!/usr/bin/env bash
# A READ-ONLY reading of what the real nvidia-ctk's CDI commands print on a GPU host, for the fixtures in
# tests/fixtures/nvidia-ctk/ (see its README.md for the readings taken with it).
#
#   bash tests/gpu/nvidia_ctk_cdi_reading.sh NVIDIA_CTK OUT_DIR
#
# NVIDIA_CTK is an nvidia-ctk built from NVIDIA/nvidia-container-toolkit's source (never committed here). Only
# read-only commands run: nvidia-smi listings and queries, `nvidia-ctk cdi generate` (NVML getters; it writes
# only the --output file named below, all under OUT_DIR) and `nvidia-ctk cdi list` on a directory under OUT_DIR.
# Nothing sets a GPU setting (no MIG or compute mode, no persistence mode, no reset, no instances), and nothing
# is written to /etc/cdi or /var/run/cdi. OUT_DIR gets:
#   nvidia.yaml        `cdi generate --output=OUT_DIR/nvidia.yaml` (the default name strategies: index and uuid)
#   nvidia.json        the same with --format=json
#   reading.log        every command, its exit code, stdout and stderr, in order
#   reading.tar.gz     everything (the per-command files and the name-strategy variants)
set -u

ctk=$(readlink -f "$1")
out=$(readlink -f "$2")
work=$(mktemp -d /tmp/nct-reading.XXXXXX)
log="$out/reading.log"
: >"$log"

# run NAME COMMAND...: stdout to $work/NAME.out, stderr to $work/NAME.err, both and the exit code to the log.
run() {
    local name=$1 rc start end
    shift
    start=$(date +%s.%N)
    "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    end=$(date +%s.%N)
    {
        printf '===== %s: %s\n' "$name" "$*"
        printf -- '----- exit %s, %s s\n' "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')"
        printf -- '----- stdout\n'
        cat "$work/$name.out"
        printf -- '----- stderr\n'
        cat "$work/$name.err"
    } >>"$log"
}

run date date -u +%Y-%m-%dT%H:%M:%SZ
run uname uname -a
run os-release cat /etc/os-release
run smi-L nvidia-smi -L
run smi-query nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,mig.mode.current,mig.mode.pending,driver_version \
    --format=csv
run smi-q nvidia-smi -q
run driver-version cat /proc/driver/nvidia/version
run dev-nodes sh -c 'ls -l /dev/nvidia* /dev/dri /dev/nvidia-caps 2>&1'
run mig-minors sh -c 'wc -l /proc/driver/nvidia-caps/mig-minors; head -n 30 /proc/driver/nvidia-caps/mig-minors'
run capabilities sh -c 'ls -R /proc/driver/nvidia/capabilities 2>&1 | head -n 60'
run cdi-dirs sh -c 'ls -la /etc/cdi /var/run/cdi 2>&1'
# shellcheck disable=SC2016  # expanded by the inner sh, on purpose
run tools sh -c 'for t in nvidia-cdi-hook nvidia-ctk ldconfig ldconfig.real; do printf "%s: " "$t"; command -v "$t" || echo "(not on PATH)"; done; echo "PATH=$PATH"'
run ctk-version "$ctk" --version
run generate "$ctk" --debug cdi generate --output="$work/nvidia.yaml"
run generate-json "$ctk" cdi generate --format=json --output="$work/nvidia.json"
run generate-stdout "$ctk" cdi generate
run generate-index "$ctk" cdi generate --device-name-strategy=index --output="$work/index.yaml"
run generate-uuid "$ctk" cdi generate --device-name-strategy=uuid --output="$work/uuid.yaml"
run generate-type-index "$ctk" cdi generate --device-name-strategy=type-index --output="$work/type-index.yaml"
run generate-no-all "$ctk" cdi generate --no-all-device --output="$work/no-all.yaml"
mkdir -p "$work/specdir"
cp "$work/nvidia.yaml" "$work/specdir/" 2>/dev/null
run list "$ctk" cdi list --spec-dir="$work/specdir"
run list-json-dir sh -c "mkdir -p '$work/jsondir' && cp '$work/nvidia.json' '$work/jsondir/' && '$ctk' cdi list --spec-dir='$work/jsondir'"
run list-default-dirs "$ctk" cdi list

cp "$work/nvidia.yaml" "$work/nvidia.json" "$out/" 2>/dev/null
tar -czf "$out/reading.tar.gz" -C "$work" .
rm -rf "$work"
