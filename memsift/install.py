"""`memsift install claude|codex` and `uninstall`: memsift's hooks in the host's user settings,
for users who installed memsift with pip instead of a plugin marketplace.

- Claude Code reads hooks from `~/.claude/settings.json` (`CLAUDE_CONFIG_DIR` moves the
  folder), key `hooks`; Codex from `$CODEX_HOME/hooks.json` (default `~/.codex`), whose root
  holds only `description` and `hooks` (research note `hosts.md`, sections A3 and D1).
- Each event gets one matcher group whose command runs this Python:
  `"<python>" -P -c "import memsift.__main__" hook <event>` (`hook_argv`; `-P`: the project
  folder never shadows memsift). memsift's entries are the ones whose command runs that code
  with `hook`, or `-m memsift hook` (the command of installs before 2026-12-03, which still
  works and is replaced by the next `install`); nothing else in the file is touched, and
  installing twice changes nothing.
- `install` keeps the file's bytes from before (in `<memsift home>/install/<host>.json`);
  `uninstall` puts them back exactly when the file has not changed since, and otherwise
  removes only memsift's entries.
- Codex runs a hook only once the user trusted it (`/hooks` in the TUI); `install` says so.
- The MCP server (`memsift mcp`, the agent's memory tools) is registered beside the hooks,
  as the host's own `mcp add` command would at user scope: Claude Code's
  `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`), key `mcpServers.memsift`; Codex's
  `$CODEX_HOME/config.toml`, table `[mcp_servers.memsift]` (research note `hosts.md`, D3),
  edited with tomlkit so that the user's comments and layout stay. `uninstall` removes
  exactly that entry, and only when it is memsift's (its arguments run `-m memsift mcp`);
  a `memsift` entry of the user's own is never touched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Mapping

from .notefile import atomic_write

#: (host event, memsift hook event, timeout in seconds). Codex caps SessionEnd at 3 s.
EVENTS = (
    ("SessionStart", "session-start", 10),
    ("UserPromptSubmit", "user-prompt-submit", 10),
    ("Stop", "stop", 10),
    ("PreCompact", "pre-compact", 10),
    ("SessionEnd", "session-end", 3),
)
#: The Python code a hook command runs. Importing `memsift.__main__` (it reads `hook <event>`
#: from `sys.argv`) does what `-m memsift` does without runpy, whose imports
#: (`importlib.util`, `contextlib`) cost each prompt about 4.5 ms of a warm hook's 17 ms
#: outside the server here (`bench/hook_bench.py`).
HOOK_CODE = "import memsift.__main__"
#: What marks a hook command as memsift's: either form (`-m`: installs before 2026-12-03).
MARKS = ("-m memsift hook", f"{HOOK_CODE}' hook", f'{HOOK_CODE}" hook')
HOSTS = ("claude", "codex")
#: The MCP server's arguments after the Python, and what marks an entry as memsift's.
MCP_ARGS = ("-P", "-m", "memsift", "mcp")
MCP_MARK = "-m memsift mcp"


class InstallError(ValueError):
    """The host's settings file cannot be edited safely; it was left as it was."""


def settings_path(host: str, env: Mapping[str, str] | None = None) -> Path:
    """The user settings file memsift's hooks go in, for `host` ("claude" or "codex")."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    if host == "claude":
        return Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "settings.json"
    if host == "codex":
        return Path(env.get("CODEX_HOME") or home / ".codex") / "hooks.json"
    raise InstallError(f"unknown host {host!r}: use claude or codex")


def _write(path: Path, data: str | bytes) -> None:
    """Write a host's file atomically, through a symlink (a settings file kept in a dotfiles
    folder stays a link to it)."""
    atomic_write(path.resolve(), data)


def _remove(path: Path) -> None:
    """Remove a host's file that memsift created; a symlink's target is emptied instead, and
    the link stays (the user made it)."""
    if path.is_symlink():
        atomic_write(path.resolve(), b"")
    else:
        path.unlink()


def mcp_path(host: str, env: Mapping[str, str] | None = None) -> Path:
    """The user file the host reads MCP servers from, for `host` ("claude" or "codex")."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    if host == "claude":
        return Path(env.get("CLAUDE_CONFIG_DIR") or home) / ".claude.json"
    if host == "codex":
        return Path(env.get("CODEX_HOME") or home / ".codex") / "config.toml"
    raise InstallError(f"unknown host {host!r}: use claude or codex")


def _mcp_ours(entry: object) -> bool:
    return isinstance(entry, Mapping) and MCP_MARK in " ".join(str(a) for a in entry.get("args") or [])


def _read_mcp(host: str, path: Path):
    """(bytes or None, parsed document: a dict for Claude, a tomlkit document for Codex)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    try:
        text = raw.decode("utf-8-sig") if raw is not None else ""
    except UnicodeDecodeError as exc:
        raise InstallError(f"{path} is not UTF-8 ({exc}); fix it first, memsift left it as it was") from None
    if host == "claude":
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise InstallError(f"{path} is not JSON ({exc}); fix it first, memsift left it as it was") from None
        if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
            raise InstallError(f"{path}: expected a JSON object whose 'mcpServers' is an object; left as it was")
        return raw, data
    import tomlkit  # lazy: only install and uninstall of Codex read TOML
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise InstallError(f"{path} is not TOML ({exc}); fix it first, memsift left it as it was") from None
    if not isinstance(doc.get("mcp_servers", {}), Mapping):
        raise InstallError(f"{path}: 'mcp_servers' is not a table; left as it was")
    return raw, doc


def _pinned_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment the MCP entry sets: `MEMSIFT_HOME` when it is set where `install` runs
    (Codex gives an MCP server only a short list of its own variables, which does not hold
    it; the hooks inherit it), so that the tools read the notes the hooks write."""
    env = os.environ if env is None else env
    return {"MEMSIFT_HOME": env["MEMSIFT_HOME"]} if env.get("MEMSIFT_HOME") else {}


def add_mcp(host: str, env: Mapping[str, str] | None = None, python: str = sys.executable) -> str:
    """Register `memsift mcp` (run by `python`) in the host's user MCP servers; a message.
    Idempotent; an entry named memsift that is not memsift's is left as it is (said so).

    Raises `InstallError` when the file cannot be parsed (it is not touched).
    """
    path = mcp_path(host, env)
    raw, doc = _read_mcp(host, path)
    key = "mcpServers" if host == "claude" else "mcp_servers"
    current = (doc.get(key) or {}).get("memsift")
    if current is not None and not _mcp_ours(current):
        return f"{path} already has an MCP server named memsift that is not memsift's own: left as it is"
    pinned = _pinned_env(env)
    if host == "claude":
        entry = {"type": "stdio", "command": python, "args": list(MCP_ARGS), "env": pinned}
        if current == entry:
            return f"memsift's MCP server is already in {path}"
        doc.setdefault("mcpServers", {})["memsift"] = entry
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    else:
        import tomlkit

        if (current is not None and current.get("command") == python and list(current.get("args") or []) == list(MCP_ARGS)
                and dict(current.get("env") or {}) == pinned):
            return f"memsift's MCP server is already in {path}"
        table = tomlkit.table()
        table["command"] = python
        table["args"] = list(MCP_ARGS)
        if pinned:
            table["env"] = tomlkit.inline_table()
            table["env"].update(pinned)
        if "mcp_servers" not in doc:
            doc["mcp_servers"] = tomlkit.table(is_super_table=True)
        doc["mcp_servers"]["memsift"] = table
        text = tomlkit.dumps(doc)
        if raw is None or not raw.strip():
            text = text.lstrip("\n")
    _write(path, text)
    return f"memsift's MCP server (memsift_search, _show, _remember, _forget) added to {path}"


def remove_mcp(host: str, env: Mapping[str, str] | None = None) -> str:
    """Remove memsift's MCP server entry from the host's user file, and nothing else; a message."""
    path = mcp_path(host, env)
    raw, doc = _read_mcp(host, path)
    key = "mcpServers" if host == "claude" else "mcp_servers"
    servers = doc.get(key)
    if raw is None or not servers or not _mcp_ours(servers.get("memsift")):
        return f"no memsift MCP server in {path}"
    del servers["memsift"]
    if not servers:
        del doc[key]
    if not doc:  # the file held memsift's entry alone
        _remove(path)
        return f"memsift's MCP server removed from {path} (its only entry: the file went too)"
    if host == "claude":
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    else:
        import tomlkit

        text = tomlkit.dumps(doc).rstrip("\n") + "\n"
    _write(path, text)
    return f"memsift's MCP server removed from {path}"


def hook_argv(event: str, python: str = sys.executable) -> list[str]:
    """The process a host starts for memsift's hook `event` (`user-prompt-submit`, ...)."""
    return [python, "-P", "-c", HOOK_CODE, "hook", event]


def hook_groups(host: str, python: str = sys.executable) -> dict[str, list[dict]]:
    """memsift's hook entries for `host`, by host event: `hook_argv` as a POSIX shell
    command, and for Codex a cmd.exe one too (`commandWindows`: double quotes)."""
    out = {}
    for event, name, timeout in EVENTS:
        handler = {"type": "command", "command": shlex.join(hook_argv(name, python)), "timeout": timeout}
        if host == "codex":
            handler["commandWindows"] = " ".join(f'"{a}"' if a in (python, HOOK_CODE) else a
                                                 for a in hook_argv(name, python))
        out[event] = [{"hooks": [handler]}]
    return out


def is_hook_command(command: str) -> bool:
    """Whether a host's hook `command` is memsift's (`MARKS`)."""
    return any(mark in command for mark in MARKS)


def _is_ours(handler: object) -> bool:
    return isinstance(handler, dict) and is_hook_command(str(handler.get("command", "")))


def _ours(group: object) -> bool:
    return isinstance(group, dict) and any(_is_ours(h) for h in group.get("hooks") or [])


def memsift_events(data: dict) -> list[str]:
    """The host event of each memsift handler in parsed settings (one entry per handler)."""
    return [event for event, groups in (data.get("hooks") or {}).items() for g in groups if isinstance(g, dict)
            for h in g.get("hooks") or [] if _is_ours(h)]


def plugin_enabled(data: dict) -> bool:
    """Whether parsed Claude Code settings enable the memsift plugin."""
    return any(k.startswith("memsift@") and v for k, v in (data.get("enabledPlugins") or {}).items())


def read_settings(path: Path) -> dict:
    """A host's settings file parsed ({} when missing). Raises `InstallError` when it is not
    a JSON object whose `hooks` is an object."""
    return _read(path)[1]


def _read(path: Path) -> tuple[bytes | None, dict]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    try:
        data = json.loads(raw.decode("utf-8-sig")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise InstallError(f"{path} is not JSON ({exc}); fix it first, memsift left it as it was") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise InstallError(f"{path}: expected a JSON object whose 'hooks' is an object; left as it was")
    return raw, data


def _without_ours(data: dict) -> dict:
    hooks = {event: [g for g in groups if not _ours(g)] for event, groups in data.get("hooks", {}).items()}
    hooks = {event: groups for event, groups in hooks.items() if groups}
    out = {k: v for k, v in data.items() if k != "hooks"}
    if hooks:
        out["hooks"] = hooks
    return out


def _record_path(host: str, home: Path) -> Path:
    return home / "install" / f"{host}.json"


def install(host: str, home: Path, env: Mapping[str, str] | None = None, python: str = sys.executable) -> str:
    """Add memsift's hooks to the host's settings and its MCP server to the host's user MCP
    servers (`add_mcp`); a message for the user, a line each. Idempotent.

    Raises `InstallError` when either file cannot be parsed (then neither is touched).
    """
    _read_mcp(host, mcp_path(host, env))  # a file that cannot be edited: say so before anything changes
    return _install_hooks(host, home, env, python) + "\n" + add_mcp(host, env, python)


def uninstall(host: str, home: Path, env: Mapping[str, str] | None = None) -> str:
    """Remove memsift's hooks from the host's settings (`_uninstall_hooks`) and its MCP server
    entry (`remove_mcp`); a message for the user, a line each."""
    _read_mcp(host, mcp_path(host, env))
    return _uninstall_hooks(host, home, env) + "\n" + remove_mcp(host, env)


def _install_hooks(host: str, home: Path, env: Mapping[str, str] | None, python: str) -> str:
    """Add memsift's hooks to the host's settings; a message. Raises `InstallError` when the
    settings file is not a JSON object (it is not touched)."""
    path = settings_path(host, env)
    raw, data = _read(path)
    hooks = _without_ours(data).get("hooks", {})
    for event, groups in hook_groups(host, python).items():
        hooks[event] = hooks.get(event, []) + groups
    new = dict(_without_ours(data), hooks=hooks)
    text = json.dumps(new, indent=2, ensure_ascii=False) + "\n"
    if raw is not None and json.loads(raw.decode("utf-8-sig") or "{}") == new:
        return f"memsift's hooks are already in {path}"
    record_path = _record_path(host, home)
    record = json.loads(record_path.read_text()) if record_path.exists() else None
    if record is None or record.get("installed_sha") != hashlib.sha256(raw or b"").hexdigest():
        record = {"path": str(path), "original": None if raw is None else base64.b64encode(raw).decode()}
    record["installed_sha"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    # the record first: if it cannot be written, the settings are not touched either
    record_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(record_path, json.dumps(record) + "\n")
    _write(path, text)
    message = f"memsift's hooks added to {path} ({', '.join(e for e, _, _ in EVENTS)}), running {python}"
    if host == "claude" and plugin_enabled(data):
        message += (". Warning: the memsift plugin is enabled too, so each hook would run twice: disable one "
                    "(`claude plugin disable memsift@memsift`, or `memsift uninstall claude`)")
    if host == "codex":
        message += ". Codex runs them once you trust them: start codex and type /hooks"
    return message


def _uninstall_hooks(host: str, home: Path, env: Mapping[str, str] | None) -> str:
    """Remove memsift's hooks from the host's settings; a message. When the file has not
    changed since `install`, its bytes from before are put back exactly."""
    path = settings_path(host, env)
    record_path = _record_path(host, home)
    record = json.loads(record_path.read_text()) if record_path.exists() else None
    raw, data = _read(path)
    if record and raw is not None and hashlib.sha256(raw).hexdigest() == record.get("installed_sha"):
        if record["original"] is None:
            _remove(path)
        else:
            _write(path, base64.b64decode(record["original"]))
        record_path.unlink()
        return f"{path} restored as it was before `memsift install {host}`"
    if raw is None or not any(_ours(g) for groups in data.get("hooks", {}).values() for g in groups):
        if record:
            record_path.unlink()
        return f"no memsift hooks in {path}"
    _write(path, json.dumps(_without_ours(data), indent=2, ensure_ascii=False) + "\n")
    if record:
        record_path.unlink()
    return f"memsift's hooks removed from {path} (it changed since install, so only memsift's entries went)"
