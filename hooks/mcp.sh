#!/usr/bin/env bash
# memsift's MCP server for the Claude Code plugin (`.mcp.json`): `python -m memsift mcp`
# with the hook's Python (find-python.sh), on the host's stdin and stdout.
#
# PYTHONSAFEPATH keeps the project folder (the server's cwd) off sys.path, as for the hooks.
# When memsift is not installed for that Python yet (the plugin's venv is built in the
# background at the first session start), it says so on stderr and exits 1: the host then
# lists the server as failed, and the next session starts it.

. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/find-python.sh"
[ "${#py[@]}" -gt 0 ] || system_python || { echo "memsift mcp: no Python found (python3, python or py)" >&2; exit 1; }
export PYTHONSAFEPATH=1
exec "${py[@]}" -c '
import importlib.util, runpy, sys
if not importlib.util.find_spec("memsift"):
    sys.exit("memsift mcp: memsift is not installed for " + sys.executable + " yet (the plugin builds its "
             "environment at session start); start a new session in a minute")
runpy.run_module("memsift", run_name="__main__", alter_sys=True)
' mcp "$@"
