#!/usr/bin/env bash
# tier: lab
# Installs Debian's containerd binary into tools/ for the tests, WITHOUT installing the package or starting
# a daemon (see scripts/lib/deb-tool.sh). The tests only run `containerd --config FILE config dump`, which
# loads and merges a config without a daemon or socket (see docs/containerd.md).
set -euo pipefail
# shellcheck source=scripts/lib/deb-tool.sh
. "$(dirname "$0")/../lib/deb-tool.sh"
install_deb_tool containerd containerd usr/bin/containerd --version
