#!/usr/bin/env bash
# memsift hook launcher for Claude Code.
#
#   usage: run.sh EVENT [ARGS...]      e.g. run.sh user-prompt-submit
#
# Runs `python -m memsift hook EVENT ...` with the hook's stdin and stdout
# passed straight through. It always exits 0: a failing hook must never
# block or break the agent (on UserPromptSubmit, exit 2 erases the prompt).

# Pick the interpreter: an explicit override, then the plugin's own venv,
# then whatever Python is on PATH.
py=""
if [ -n "${MEMSIFT_PYTHON:-}" ] && [ -x "$MEMSIFT_PYTHON" ]; then
    py="$MEMSIFT_PYTHON"
elif [ -n "${CLAUDE_PLUGIN_DATA:-}" ] && [ -x "$CLAUDE_PLUGIN_DATA/venv/bin/python" ]; then
    py="$CLAUDE_PLUGIN_DATA/venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then
    py="python3"
elif command -v python >/dev/null 2>&1; then
    py="python"
fi

# No Python at all: stay silent.
[ -n "$py" ] || exit 0

# Same as `"$py" -m memsift hook "$@"`, in one process, but silent when
# memsift is not installed for this interpreter (find_spec does not import it).
# PYTHONSAFEPATH keeps the project folder (the hook's cwd) off sys.path, so a
# `memsift/` folder in whatever repo Claude runs in is never imported.
PYTHONSAFEPATH=1 "$py" -c '
import importlib.util, runpy
if importlib.util.find_spec("memsift"):
    runpy.run_module("memsift", run_name="__main__", alter_sys=True)
' hook "$@"
exit 0
