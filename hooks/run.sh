#!/usr/bin/env bash
# memsift hook launcher for Claude Code and Codex plugins.
#
#   usage: run.sh EVENT      e.g. run.sh user-prompt-submit
#
# Runs memsift's hook EVENT (as `python -m memsift hook EVENT` would) with the hook's stdin
# and stdout passed straight through. It always exits 0: a failing hook must never block or
# break the agent (on UserPromptSubmit, exit 2 erases the prompt).
#
# The Python: MEMSIFT_PYTHON if set, else the venv the plugin built in its data folder
# (CLAUDE_PLUGIN_DATA, or PLUGIN_DATA under Codex), else python3, python or `py -3` if
# memsift is installed there. On session-start, when the plugin's venv is missing or
# stale, setup.sh builds it in the background, detached (the session does not wait; the
# hooks stay silent until it is ready).

. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/find-python.sh"

# Session start: (re)build the plugin's venv if it is missing or stale. setup.sh returns at
# once when it is current, and runs detached, so the session never waits for it.
if [ "${1:-}" = "session-start" ] && [ -n "$data" ] && [ -z "${MEMSIFT_PYTHON:-}" ]; then
    keep=("${py[@]}")
    if system_python; then
        if command -v setsid >/dev/null 2>&1; then
            setsid nohup bash "$here/setup.sh" "$root" "$data" "${py[@]}" </dev/null >/dev/null 2>&1 &
        else
            nohup bash "$here/setup.sh" "$root" "$data" "${py[@]}" </dev/null >/dev/null 2>&1 &
        fi
    fi
    py=("${keep[@]}")
fi

[ "${#py[@]}" -gt 0 ] || system_python || exit 0

# Same as `"$py" -m memsift hook "$@"`, in one process, but silent when memsift is not
# installed for this interpreter, and without runpy (`-m`), whose imports cost each prompt
# about 4.5 ms (memsift/install.py, HOOK_CODE). PYTHONSAFEPATH keeps the project folder (the
# hook's cwd) off sys.path, so a `memsift/` folder in whatever repo the agent runs in is
# never imported.
PYTHONSAFEPATH=1 "${py[@]}" -c '
try:
    import memsift
except ImportError:
    raise SystemExit(0)
import memsift.__main__
' hook "$@"
exit 0
