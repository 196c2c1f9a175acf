#!/usr/bin/env bash
# Shared by scripts/setup.d/*.sh: a tool's own virtualenv under tools/, made from pinned requirements files, so a
# tool's pins never move the main .venv. The files' concatenation is kept as the venv's stamp (DEST/.requirements):
# the venv is current while the stamp equals them, and is made anew (never patched) when they change.
#
# usage: tool_venv_current DEST REQUIREMENTS...        exit 0 when DEST's stamp equals the files (and DEST has a python)
#        tool_venv_install DEST PYTHON REQUIREMENTS... (re)create DEST with PYTHON and install the files, then stamp

tool_venv_current() {
  local dest=$1
  shift
  [ -x "$dest/bin/python" ] && [ -f "$dest/.requirements" ] && cmp -s "$dest/.requirements" <(cat "$@")
}

tool_venv_install() {
  local dest=$1 python=$2 requirements
  shift 2
  rm -rf "$dest"
  "$python" -m venv "$dest"
  "$dest/bin/python" -m pip install --quiet --upgrade pip
  for requirements in "$@"; do
    "$dest/bin/python" -m pip install --quiet -r "$requirements"
  done
  cat "$@" > "$dest/.requirements"
}
