#!/usr/bin/env bash
# tier: dev
# The container_toolkit tests run ansible.builtin.apt, which needs Debian's python3-apt bindings (the module finds
# them under /usr/bin/python3 and re-runs itself there). Where the system's python3 lacks them, Debian's python3-apt
# package is unpacked into tools/python3-apt/ WITHOUT installing it (apt-get download + dpkg -x, as
# scripts/lib/deb-tool.sh does for binaries); the tests then put its dist-packages on PYTHONPATH
# (tests/support/apt_rig.py). Nothing is installed on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/tools/python3-apt"
if /usr/bin/python3 -c 'import apt, apt_pkg' >/dev/null 2>&1; then
  echo "python3-apt: the system's ($(/usr/bin/python3 -c 'import apt_pkg; print(apt_pkg.VERSION)'))"
  exit 0
fi
if PYTHONPATH="$dest/usr/lib/python3/dist-packages" /usr/bin/python3 -c 'import apt, apt_pkg' >/dev/null 2>&1; then
  echo "python3-apt: already unpacked in tools/python3-apt"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo "python3-apt: needs apt-get and dpkg (Debian/Ubuntu); the container_toolkit tests will fail without it" >&2
  exit 1
fi
work=$(mktemp -d)
chmod 0777 "$work"     # apt-get download drops privileges to _apt when run as root
(cd "$work" && apt-get download -qq python3-apt)
rm -rf "$dest"
mkdir -p "$dest"
dpkg -x "$work"/python3-apt_*.deb "$dest"
rm -rf "$work"
PYTHONPATH="$dest/usr/lib/python3/dist-packages" /usr/bin/python3 -c 'import apt_pkg; print("python3-apt:", apt_pkg.VERSION)'
