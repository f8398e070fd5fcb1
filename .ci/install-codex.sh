#!/usr/bin/env bash
# Install a pinned OpenAI Codex CLI into a local folder, for memsift's host tests.
#
#   usage: .ci/install-codex.sh [DIR]     (DIR defaults to .ci/.cache/codex)
#
# Prints the path of the `codex` binary on stdout (progress goes to stderr).
# Idempotent: does nothing if DIR already holds the pinned version. Needs node and npm.
# Override the version with CODEX_VERSION=x.y.z (0.171.0 is the one the research note
# hostcli.md measured offline).
set -euo pipefail

version="${CODEX_VERSION:-0.171.0}"
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here/.cache/codex}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bin="$dir/node_modules/.bin/codex"

binary_works() {
    [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q " $version\$"
}

if binary_works; then
    echo "codex $version already installed in $dir" >&2
    echo "$bin"
    exit 0
fi

# A package.json of its own keeps npm from walking up into the repo.
[ -f "$dir/package.json" ] || echo '{"name": "memsift-ci-codex", "private": true}' > "$dir/package.json"
# Keep the download out of git when DIR is inside the repo.
[ -f "$dir/.gitignore" ] || echo '*' > "$dir/.gitignore"

echo "installing @openai/codex@$version into $dir (about 165 MB download)" >&2
(cd "$dir" && npm install --no-audit --no-fund --save-exact "@openai/codex@$version" >&2)

if ! binary_works; then
    echo "error: $bin does not report version $version" >&2
    exit 1
fi
echo "$bin"
