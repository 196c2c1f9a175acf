#!/usr/bin/env bash
# Installs what gpuops.nvidia's lab job or tests need, inside this repository, in two tiers:
#   lab   (`make lab`)   .venv/ from requirements-lab.txt, .collections/ (ansible_collections/gpuops/nvidia -> this
#                        checkout, so Ansible finds the collection), and the tools of the pieces marked `# tier: lab`
#   dev   (`make test`, `make check`, `make compat`, ...)  the lab tier, then requirements-dev.txt into .venv and the
#                        pieces marked `# tier: dev` (the other ansible-core versions, the publishing tools, ...)
# Each piece of scripts/setup.d/ owns one tool and names its tier on a `# tier: lab|dev` line. A piece that also has
# a `# alongside: yes` line only fetches from a registry into a directory of its own (no apt or dpkg lock, nothing
# another piece reads): it starts in the background as soon as .venv exists, logging to tools/setup-logs/<piece>.log
# (printed when it ends), while .venv's requirements and the other pieces install in order. The installs mostly wait
# on the registries, so side by side they take about as long as the slowest one (in git history:
# docs/readings/test-time-session5.md at 413884d).
# Needs only the package registries (PyPI, Debian, npm). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-dev}
case $tier in
  lab) requirements=(requirements-lab.txt); tiers=(lab) ;;
  dev) requirements=(requirements-dev.txt); tiers=(lab dev) ;;
  *) echo "setup: unknown tier '$tier'; valid: lab (what make lab needs), dev (everything make test needs)" >&2
     exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
mkdir -p tools/bin tools/setup-logs

pieces=()   # every piece of the wanted tiers, in tier order (lab first), each once
for want in "${tiers[@]}"; do
  for piece in scripts/setup.d/*.sh; do
    [ -e "$piece" ] || continue
    piece_tier=$(sed -n 's/^# tier: *\([a-z]*\).*/\1/p' "$piece" | head -n 1)
    case $piece_tier in
      lab|dev) ;;
      *) echo "setup: $piece has no '# tier: lab' or '# tier: dev' line (lab: make lab needs it; dev: only tests)" >&2
         exit 1 ;;
    esac
    if [ "$piece_tier" = "$want" ]; then pieces+=("$piece"); fi
  done
done
alongside() { grep -q '^# alongside: *yes' "$1"; }

bg_pids=()
bg_pieces=()
for piece in "${pieces[@]}"; do
  alongside "$piece" || continue
  log=tools/setup-logs/$(basename "$piece" .sh).log
  echo "setup: $piece (alongside, log: $log)"
  setsid bash "$piece" > "$log" 2>&1 &   # its own process group (pid = pgid), so that it can be stopped whole
  bg_pids+=("$!")
  bg_pieces+=("$piece")
done
stop_alongside() {  # a failure below must not leave the background installs running
  local pid
  for pid in "${bg_pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap stop_alongside EXIT

.venv/bin/python -m pip install --quiet -r "${requirements[@]}"
mkdir -p .collections/ansible_collections/gpuops
ln -sfn ../../.. .collections/ansible_collections/gpuops/nvidia
for piece in "${pieces[@]}"; do
  alongside "$piece" && continue
  echo "setup: $piece"
  bash "$piece"
done

failed=0
for i in "${!bg_pids[@]}"; do
  log=tools/setup-logs/$(basename "${bg_pieces[$i]}" .sh).log
  if wait "${bg_pids[$i]}"; then
    echo "setup: ${bg_pieces[$i]} done:"
    sed 's/^/  /' "$log"
  else
    echo "setup: ${bg_pieces[$i]} FAILED; $log:" >&2
    tail -n 40 "$log" >&2
    failed=1
  fi
done
trap - EXIT
[ "$failed" = 0 ] || exit 1
echo "setup: done ($tier)"
