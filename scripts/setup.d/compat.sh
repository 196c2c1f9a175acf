#!/usr/bin/env bash
# tier: dev
# alongside: yes
# Installs one virtualenv per ansible-core that `make compat` tests besides the main one (requirements-lab.txt):
# tools/compat/<version>/ from requirements-compat-<version>.txt, with the Python that file names on its
# `# python: X.Y` line (ansible-core 2.16 and 2.21 support no common controller Python). The Python is found as
# pythonX.Y on PATH, else under pyenv's versions (PYENV_ROOT, default ~/.pyenv). Without it the version is skipped
# here, with a warning, so that `make lab` still works; `make compat` (and so `make test`) then fails, naming it.
# Safe to run again: a version whose requirements are the ones installed (stamp) is left alone. The versions install
# in parallel (pip is mostly one process), each logging to tools/compat/<version>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/tool-venv.sh
. scripts/lib/tool-venv.sh

find_python() {  # X.Y -> the path of a working pythonX.Y, or nothing
  local want=$1 candidate
  for candidate in "$(command -v "python$want" 2>/dev/null || true)" \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want"; do
    [ -x "$candidate" ] || continue
    # a pyenv shim exists for every installed version but runs only the selected ones: ask it for its version
    if [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
      echo "$candidate"
      return 0
    fi
  done
}

mkdir -p tools/compat
pids=()
names=()
for requirements in requirements-compat-*.txt; do
  [ -e "$requirements" ] || continue
  version=${requirements#requirements-compat-}
  version=${version%.txt}
  dest=tools/compat/$version
  if [ -x "$dest/bin/ansible-test" ] && tool_venv_current "$dest" "$requirements" requirements.txt; then
    echo "compat: ansible-core $version already installed in $dest"
    continue
  fi
  want=$(sed -n 's/^# python: *\([0-9.]*\).*/\1/p' "$requirements" | head -n 1)
  if [ -z "$want" ]; then
    echo "compat: $requirements has no '# python: X.Y' line" >&2
    exit 1
  fi
  python=$(find_python "$want")
  if [ -z "$python" ]; then
    echo "compat: WARNING: no Python $want for ansible-core $version (pythonX.Y on PATH or pyenv); skipped:" \
         "make compat and make test will fail until it is installed" >&2
    continue
  fi
  echo "compat: installing ansible-core $version into $dest with $python (log: tools/compat/$version.log)"
  tool_venv_install "$dest" "$python" "$requirements" requirements.txt > "tools/compat/$version.log" 2>&1 &
  pids+=("$!")
  names+=("$version")
done

failed=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    version_text=$("tools/compat/${names[$i]}/bin/python" -c 'import ansible.release; print(ansible.release.__version__)')
    echo "compat: installed ansible-core ${names[$i]}: $version_text"
  else
    echo "compat: installing ansible-core ${names[$i]} failed; tools/compat/${names[$i]}.log:" >&2
    grep -v "^WARNING: Location" "tools/compat/${names[$i]}.log" | tail -n 30 >&2
    failed=1
  fi
done
exit "$failed"
