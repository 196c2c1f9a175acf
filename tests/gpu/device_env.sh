# shellcheck shell=bash
# Sourced by the device-machine drivers of tests/gpu (cdi_real_run.sh, dra_probe_run.sh), from the repository root on a
# lent GPU machine: ansible-core's wheels from .whl/ (git-ignored, carried) into /tmp/site, the collection importable
# from .collections, and m, which runs a command and records it with its exit status.
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
OUT=${OUT:?}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
mkdir -p .collections/ansible_collections/gpuops && ln -sfn ../../.. .collections/ansible_collections/gpuops/nvidia
m() { echo "== $*"; "$@" 2>&1; echo "-- exit $?"; }
