#!/usr/bin/env bash
# memsift's Python environment for the plugin: a venv in the plugin's data folder.
#
#   usage: setup.sh PLUGIN_ROOT DATA_DIR PYTHON...
#
# Builds DATA_DIR/venv-<hash> with `PYTHON -m venv` and `pip install PLUGIN_ROOT`, where
# <hash> names the plugin's pyproject.toml, so an updated plugin gets a fresh venv and an
# unchanged one is never rebuilt; then points DATA_DIR/venv-current at it (written to a
# temp file and renamed: readers see the old venv or the new one, never half of one).
# Several sessions starting at once build it once: the first takes DATA_DIR/setup.lock
# (mkdir is atomic; a lock older than 15 minutes is a crashed build and is taken over),
# the others return. MEMSIFT_SETUP_PIP_ARGS adds pip options (a wheelhouse, a proxy).
# Everything goes to DATA_DIR/setup.log; it always exits 0.
set -u
root="$1"; data="$2"; shift 2
mkdir -p "$data" 2>/dev/null || exit 0
exec >>"$data/setup.log" 2>&1
hash="$( (cksum < "$root/pyproject.toml") 2>/dev/null | cut -d' ' -f1)"
venv="$data/venv-$hash"
if [ -n "$hash" ] && [ -f "$venv/.memsift-ready" ]; then
    exit 0
fi
lock="$data/setup.lock"
if ! mkdir "$lock" 2>/dev/null; then
    if [ -n "$(find "$lock" -maxdepth 0 -mmin +15 2>/dev/null)" ]; then
        rm -rf "$lock" && mkdir "$lock" 2>/dev/null || exit 0
    else
        echo "$(date -u +%FT%TZ) another session is building memsift's venv"
        exit 0
    fi
fi
trap 'rm -rf "$lock"' EXIT
echo "$(date -u +%FT%TZ) building $venv with $*"
rm -rf "$venv"
if "$@" -m venv "$venv" && "$venv/bin/python" -m pip install -q --disable-pip-version-check ${MEMSIFT_SETUP_PIP_ARGS:-} "$root" \
        && "$venv/bin/python" -c "import memsift"; then
    touch "$venv/.memsift-ready"
    printf '%s\n' "$venv" > "$data/venv-current.tmp" && mv -f "$data/venv-current.tmp" "$data/venv-current"
    echo "$(date -u +%FT%TZ) ready: $venv"
else
    echo "$(date -u +%FT%TZ) build failed; memsift stays silent until the next session retries"
    rm -rf "$venv"
fi
exit 0
