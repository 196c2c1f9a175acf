#!/usr/bin/env bash
# tier: dev
# alongside: yes
# Installs the publishing checks (requirements-publish.txt: galaxy-importer, antsibull-docs, Sphinx) into their own
# virtualenv, tools/publish/, with the Python that made .venv. Safe to run again: skipped while the requirements are
# the ones installed (scripts/lib/tool-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/tool-venv.sh
. scripts/lib/tool-venv.sh
DEST=tools/publish
PYTHON_BIN=${PYTHON:-python3}
[ -x .venv/bin/python ] && PYTHON_BIN=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
if [ -x "$DEST/bin/antsibull-docs" ] && tool_venv_current "$DEST" requirements-publish.txt; then
  echo "publish-tools: already installed in $DEST"
  exit 0
fi
tool_venv_install "$DEST" "$PYTHON_BIN" requirements-publish.txt
echo "publish-tools: installed in $DEST (antsibull-docs $("$DEST/bin/antsibull-docs" --version 2>/dev/null | head -1))"
