# Sourced by run.sh and mcp.sh: finds memsift's Python for the plugin.
#
# Sets `here` (this folder), `root` (the plugin's), `data` (its data folder: CLAUDE_PLUGIN_DATA,
# or PLUGIN_DATA under Codex), `venv_python`, and `py` (an array): MEMSIFT_PYTHON if set, else
# the venv setup.sh built in the data folder, else empty. `system_python` sets `py` to
# python3, python or `py -3` (Git Bash on Windows), whichever is on PATH.

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
data="${CLAUDE_PLUGIN_DATA:-${PLUGIN_DATA:-}}"

# A Python on PATH: python3, python, or the Windows launcher `py -3` (Git Bash).
system_python() {
    for candidate in python3 python; do
        command -v "$candidate" >/dev/null 2>&1 && { py=("$candidate"); return 0; }
    done
    command -v py >/dev/null 2>&1 && { py=(py -3); return 0; }
    return 1
}

venv_python=""
if [ -n "$data" ] && [ -f "$data/venv-current" ]; then
    venv_python="$(cat "$data/venv-current")/bin/python"
    [ -x "$venv_python" ] || venv_python=""
fi

py=()
if [ -n "${MEMSIFT_PYTHON:-}" ] && [ -x "$MEMSIFT_PYTHON" ]; then
    py=("$MEMSIFT_PYTHON")
elif [ -n "$venv_python" ]; then
    py=("$venv_python")
fi

