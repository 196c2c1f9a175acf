#!/usr/bin/env bash
# Installs the publishing checks (requirements-publish.txt: galaxy-importer, antsibull-docs, Sphinx) into their own
# virtualenv, tools/publish/, with the Python that made .venv. Safe to run again: skipped while the requirements are
# the ones installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=tools/publish
STAMP=$DEST/.requirements
PYTHON_BIN=${PYTHON:-python3}
[ -x .venv/bin/python ] && PYTHON_BIN=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
if [ -x "$DEST/bin/antsibull-docs" ] && [ -f "$STAMP" ] && cmp -s "$STAMP" requirements-publish.txt; then
  echo "publish-tools: already installed in $DEST"
  exit 0
fi
rm -rf "$DEST"
"$PYTHON_BIN" -m venv "$DEST"
"$DEST/bin/python" -m pip install --quiet --upgrade pip
"$DEST/bin/python" -m pip install --quiet -r requirements-publish.txt
cp requirements-publish.txt "$STAMP"
echo "publish-tools: installed in $DEST ($("$DEST/bin/antsibull-docs" --version 2>/dev/null | head -1))"
