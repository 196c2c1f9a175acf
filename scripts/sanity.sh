#!/usr/bin/env bash
# `make sanity`: ansible-test sanity on a copy of this checkout laid out as ansible_collections/gpuops/nvidia.
# ansible-test insists on that path and on a git repository, so the tracked and untracked-but-not-ignored files
# (what a commit would contain) are copied to a scratch directory, which gets its own `git init`.
# Extra arguments go to ansible-test, e.g. `make sanity SANITY_ARGS="--test pylint"`.
# SANITY_VENV names the virtual environment whose ansible-test and Python run it (default .venv, the main
# ansible-core); scripts/compat.py passes tools/compat/<version> to run the sanity tests of another ansible-core.
# The first run creates one virtual environment per test under ~/.ansible/test/venv (several minutes);
# later runs reuse them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv=${SANITY_VENV:-.venv}
case $venv in /*) ;; *) venv="$root/$venv" ;; esac
py=$venv/bin/python
if [ ! -x "$venv/bin/ansible-test" ]; then
  echo "sanity: no ansible-test in $venv (run make setup)" >&2
  exit 1
fi
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# ansible-test fetches get-pip.py from ci-files.testing.ansible.com, unreachable here; it skips the download
# when a copy is cached. Ask ansible-test which pip version it bootstraps and cache our stand-in under that name
# (see the header of scripts/ansible-test-get-pip.py). A real get-pip.py already cached is left alone.
pipver=$("$py" - "$pyver" <<'PY'
import sys
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version=sys.argv[1]))["pip"])
PY
)
cache="$HOME/.ansible/test/cache/get_pip_${pipver//./_}.py"
mkdir -p "$(dirname "$cache")"
if [ ! -e "$cache" ] || grep -q "Stand-in for get-pip.py" "$cache"; then
  # copy, then rename: make test runs the sanity tests of several ansible-core versions at once, and one of them
  # may be reading this file while another writes it
  tmp_pip=$(mktemp "$cache.XXXXXX")
  cp scripts/ansible-test-get-pip.py "$tmp_pip"
  mv -f "$tmp_pip" "$cache"
fi

# Issue 7's rule: no ignore entry without a comment saying why.
for ignore in tests/sanity/ignore-*.txt; do
  [ -e "$ignore" ] || continue
  if grep -nv ' # ..' "$ignore" >&2; then
    echo "sanity: the lines above in $ignore have no comment (' # why') saying why they are ignored" >&2
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/gpuops/nvidia"
mkdir -p "$dest"
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
  # a file deleted in the worktree but still in the index is listed too: copy only what exists
  [ -e "$f" ] || [ -L "$f" ] || continue
  printf '%s\0' "$f"
done | tar -C "$root" --null -T - -cf - | tar -C "$dest" -xf -
cd "$dest"
git init -q .
git add -A
# One commit, so tests that compare against the repository's history see a clean tree.
git -c user.name=sanity -c user.email=sanity@localhost commit -q -m sanity
echo "sanity: ansible-test $("$venv/bin/ansible-test" --version) on Python $pyver in $dest"
"$venv/bin/ansible-test" sanity --python "$pyver" --requirements --color "${ANSIBLE_TEST_COLOR:-auto}" "$@"
echo "sanity: passed in ${SECONDS}s"
