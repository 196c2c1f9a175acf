#!/usr/bin/env bash
# Installs Debian's shellcheck binary into tools/ for `make sanity` (ansible-test's shellcheck test checks the
# repository's shell scripts; without the program it only warns and skips them). Like containerd.sh it does not
# install the package: `apt-get download` fetches the .deb, `dpkg -x` unpacks it under tools/shellcheck/, and
# tools/bin/shellcheck links to the unpacked binary.
# Idempotent: does nothing when tools/bin/shellcheck already runs. Works on a fresh Debian 12 as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
DEST="$ROOT/tools/shellcheck"
LINK="$ROOT/tools/bin/shellcheck"

if [ -x "$LINK" ] && "$LINK" --version >/dev/null 2>&1; then
  echo "shellcheck: already installed ($("$LINK" --version | sed -n 's/^version: //p'))"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo "shellcheck: needs apt-get and dpkg (Debian/Ubuntu) to fetch Debian's shellcheck package" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download drops privileges to _apt when run as root; let it write into the work directory.
chmod 0777 "$work"
# Try with the package lists as they are (containerd.sh may have just refreshed them); refresh once if needed.
if ! (cd "$work" && apt-get download -qq shellcheck); then
  if [ "$(id -u)" != 0 ]; then
    echo "shellcheck: download failed and not root, cannot refresh the package lists" >&2
    exit 1
  fi
  apt-get update -qq
  (cd "$work" && apt-get download -qq shellcheck)
fi
deb=$(ls "$work"/shellcheck_*.deb)
rm -rf "$DEST"
mkdir -p "$DEST" "$ROOT/tools/bin"
dpkg -x "$deb" "$DEST"
ln -sfn ../shellcheck/usr/bin/shellcheck "$LINK"
"$LINK" --version
