#!/usr/bin/env bash
# Installs what gpuops.nvidia's lab job or tests need, inside this repository, in two tiers:
#   lab   (`make lab`)   .venv/ from requirements-lab.txt, .collections/ (ansible_collections/gpuops/nvidia -> this
#                        checkout, so Ansible finds the collection), and the tools of the pieces marked `# tier: lab`
#   dev   (`make test`, `make check`, `make compat`, ...)  the lab tier, then requirements-dev.txt into .venv and the
#                        pieces marked `# tier: dev` (the other ansible-core versions, the publishing tools, ...)
# Each piece of scripts/setup.d/ owns one tool and names its tier on a `# tier: lab|dev` line.
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
.venv/bin/python -m pip install --quiet -r "${requirements[@]}"
mkdir -p .collections/ansible_collections/gpuops
ln -sfn ../../.. .collections/ansible_collections/gpuops/nvidia
mkdir -p tools/bin
for want in "${tiers[@]}"; do
  for piece in scripts/setup.d/*.sh; do
    [ -e "$piece" ] || continue
    piece_tier=$(sed -n 's/^# tier: *\([a-z]*\).*/\1/p' "$piece" | head -n 1)
    case $piece_tier in
      lab|dev) ;;
      *) echo "setup: $piece has no '# tier: lab' or '# tier: dev' line (lab: make lab needs it; dev: only tests)" >&2
         exit 1 ;;
    esac
    [ "$piece_tier" = "$want" ] || continue
    echo "setup: $piece"
    bash "$piece"
  done
done
echo "setup: done ($tier)"
