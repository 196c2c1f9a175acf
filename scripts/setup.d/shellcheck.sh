#!/usr/bin/env bash
# tier: dev
# Installs Debian's shellcheck binary into tools/ for `make sanity` (ansible-test's shellcheck test checks the
# repository's shell scripts; without the program it only warns and skips them), without installing the
# package (see scripts/lib/deb-tool.sh).
set -euo pipefail
# shellcheck source=scripts/lib/deb-tool.sh
. "$(dirname "$0")/../lib/deb-tool.sh"
install_deb_tool shellcheck shellcheck usr/bin/shellcheck --version
