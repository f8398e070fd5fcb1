#!/usr/bin/env bash
# Install a pinned Claude Code CLI into a local folder, for memsift's host tests.
#
#   usage: .ci/install-claude.sh [DIR]     (DIR defaults to .ci/.cache/claude)
#
# Prints the path of the `claude` binary on stdout (progress goes to stderr).
# Idempotent: does nothing if DIR already holds the pinned version.
# Needs node and npm (Node 20 is fine: releases after 2.1.197 declare
# engines.node >= 22, so npm prints an EBADENGINE warning, but the CLI is a
# self-contained native binary and runs anyway).
# Override the version with CLAUDE_CODE_VERSION=x.y.z.
set -euo pipefail

version="${CLAUDE_CODE_VERSION:-2.1.332}"
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here/.cache/claude}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bin="$dir/node_modules/.bin/claude"
pkg="$dir/node_modules/@anthropic-ai/claude-code/package.json"

installed_version() {
    [ -f "$pkg" ] && node -p "require(process.argv[1]).version" "$pkg" 2>/dev/null || true
}

# The package's postinstall hard-links the native binary over a stub that
# only prints "claude native binary not installed"; check the real thing runs.
binary_works() {
    [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version "
}

if [ "$(installed_version)" = "$version" ] && binary_works; then
    echo "claude $version already installed in $dir" >&2
    echo "$bin"
    exit 0
fi

# A package.json of its own keeps npm from walking up into the repo.
[ -f "$dir/package.json" ] || echo '{"name": "memsift-ci-claude", "private": true}' > "$dir/package.json"
# Keep the download out of git when DIR is inside the repo.
[ -f "$dir/.gitignore" ] || echo '*' > "$dir/.gitignore"

echo "installing @anthropic-ai/claude-code@$version into $dir (about 180 MB download)" >&2
(cd "$dir" && npm install --no-audit --no-fund --save-exact \
    "@anthropic-ai/claude-code@$version" >&2)

# Newer npm versions may skip install scripts; run the (offline) postinstall by hand.
if ! binary_works; then
    echo "native binary not linked by npm; running install.cjs" >&2
    (cd "$dir/node_modules/@anthropic-ai/claude-code" && node install.cjs >&2)
fi

if ! binary_works; then
    echo "error: $bin does not report version $version" >&2
    exit 1
fi
echo "$bin"
