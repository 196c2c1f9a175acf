#!/usr/bin/env bash
# Shared by scripts/setup.d/*.sh: put one binary from a Debian package into tools/ WITHOUT installing the
# package (no maintainer scripts, no daemon): `apt-get download` fetches the .deb, `dpkg -x` unpacks it under
# tools/<name>/, and tools/bin/<name> links to the binary. Idempotent: does nothing when the link already runs.
#
# usage: install_deb_tool NAME PACKAGE PATH_IN_PACKAGE VERSION_ARGS...
#   e.g. install_deb_tool containerd containerd usr/bin/containerd --version

install_deb_tool() {
  local name=$1 package=$2 path=$3
  shift 3
  local root dest link work deb
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  dest="$root/tools/$name"
  link="$root/tools/bin/$name"

  if [ -x "$link" ] && "$link" "$@" >/dev/null 2>&1; then
    echo "$name: already installed ($("$link" "$@" | head -n 1))"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    echo "$name: needs apt-get and dpkg (Debian/Ubuntu) to fetch Debian's $package package" >&2
    return 1
  fi

  work=$(mktemp -d)
  # apt-get download drops privileges to _apt when run as root; let it write into the work directory.
  chmod 0777 "$work"
  # Try with the package lists as they are (an earlier piece may have just refreshed them); refresh once if needed.
  if ! (cd "$work" && apt-get download -qq "$package"); then
    if [ "$(id -u)" != 0 ]; then
      echo "$name: download failed and not root, cannot refresh the package lists" >&2
      rm -rf "$work"
      return 1
    fi
    apt-get update -qq
    (cd "$work" && apt-get download -qq "$package")
  fi
  deb=$(ls "$work"/"${package}"_*.deb)
  rm -rf "$dest"
  mkdir -p "$dest" "$root/tools/bin"
  dpkg -x "$deb" "$dest"
  rm -rf "$work"
  ln -sfn "../$name/$path" "$link"
  "$link" "$@"
}
