#!/usr/bin/env bash
# Install a pinned Cognee server into its own venv, for memsift's Cognee integration tests.
#
#   usage: .ci/install-cognee.sh [DIR]     (DIR defaults to .ci/.cache/cognee)
#
# Creates DIR/venv with cognee==$COGNEE_VERSION from PyPI (through pip as configured
# on the machine) and prints the venv's python on stdout (progress goes to stderr).
# tests/cognee_server.py finds that python by itself; MEMSIFT_COGNEE_PYTHON overrides it.
# Idempotent: a marker file written after a successful install makes a re-run a no-op.
# Costs ~75-110 s and ~1.6 GB on a fresh 2-core machine (no torch, no model download:
# the tests embed with tests/cognee_stub.py, "tier A" of shared/research/cognee.md).
# Override the interpreter with COGNEE_BASE_PYTHON (3.11 is the tested one).
set -euo pipefail

version="${COGNEE_VERSION:-1.6.5}"
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here/.cache/cognee}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
venv="$dir/venv"
py="$venv/bin/python"
marker="$venv/.memsift-cognee-version"

# Checks the installed distribution's metadata without importing cognee (importing it
# would import litellm, which fetches a price map from the network).
installed_version() {
    [ -x "$py" ] && "$py" -c 'import importlib.metadata as m; print(m.version("cognee"))' 2>/dev/null || true
}

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$version" ] && [ "$(installed_version)" = "$version" ]; then
    echo "cognee $version already installed in $venv" >&2
    echo "$py"
    exit 0
fi

base="${COGNEE_BASE_PYTHON:-}"
if [ -z "$base" ]; then
    if command -v python3.11 >/dev/null 2>&1; then base=python3.11; else base=python3; fi
fi

start=$SECONDS
# A venv without the marker is a half-finished install: start over.
rm -rf "$venv"
echo "installing cognee==$version into $venv with $($base --version 2>&1) (about 1.6 GB, 1-2 min)" >&2
"$base" -m venv "$venv"
# (The grep drops pip's warnings about local index folders that lack a package.)
"$py" -m pip install -q --disable-pip-version-check "cognee==$version" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2

got="$(installed_version)"
if [ "$got" != "$version" ]; then
    echo "error: $venv holds cognee '${got:-nothing}', expected $version" >&2
    exit 1
fi
echo "$version" > "$marker"
# Keep the venv out of git when DIR is inside the repo.
[ -f "$dir/.gitignore" ] || echo '*' > "$dir/.gitignore"
echo "cognee $version installed in $((SECONDS - start)) s" >&2
echo "$py"
