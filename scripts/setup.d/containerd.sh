#!/usr/bin/env bash
# Installs Debian's containerd binary into tools/ for the tests, WITHOUT installing the package or starting
# a daemon: `apt-get download` fetches the .deb, `dpkg -x` unpacks it under tools/containerd/, and
# tools/bin/containerd links to the unpacked binary. The tests only run `containerd --config FILE config dump`,
# which loads and merges a config without a daemon or socket (see docs/containerd.md).
# Idempotent: does nothing when tools/bin/containerd already runs. Works on a fresh Debian 12 as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
DEST="$ROOT/tools/containerd"
LINK="$ROOT/tools/bin/containerd"

if [ -x "$LINK" ] && "$LINK" --version >/dev/null 2>&1; then
  echo "containerd: already installed ($("$LINK" --version))"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo "containerd: needs apt-get and dpkg (Debian/Ubuntu) to fetch Debian's containerd package" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download drops privileges to _apt when run as root; let it write into the work directory.
chmod 0777 "$work"
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq
else
  # Without root we cannot refresh the lists; use what is there (apt-get download needs no root).
  echo "containerd: not root, skipping apt-get update" >&2
fi
(cd "$work" && apt-get download -qq containerd)
deb=$(ls "$work"/containerd_*.deb)
rm -rf "$DEST"
mkdir -p "$DEST" "$ROOT/tools/bin"
dpkg -x "$deb" "$DEST"
ln -sfn ../containerd/usr/bin/containerd "$LINK"
"$LINK" --version
