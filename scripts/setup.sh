#!/usr/bin/env bash
# Installs everything gpuops.nvidia's lab job and tests need, inside this repository:
#   .venv/         Python packages (requirements-dev.txt)
#   .collections/  ansible_collections/gpuops/nvidia -> this checkout, so Ansible finds the collection
#   tools/         binaries fetched by scripts/setup.d/*.sh (each piece owns its own tool)
# Needs only the package registries (PyPI, Debian, npm). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements-dev.txt
mkdir -p .collections/ansible_collections/gpuops
ln -sfn ../../.. .collections/ansible_collections/gpuops/nvidia
mkdir -p tools/bin
for piece in scripts/setup.d/*.sh; do
  [ -e "$piece" ] || continue
  echo "setup: $piece"
  bash "$piece"
done
echo "setup: done"
