"""`memsift install claude|codex` and `uninstall`: memsift's hooks in the host's user settings,
for users who installed memsift with pip instead of a plugin marketplace.

- Claude Code reads hooks from `~/.claude/settings.json` (`CLAUDE_CONFIG_DIR` moves the
  folder), key `hooks`; Codex from `$CODEX_HOME/hooks.json` (default `~/.codex`), whose root
  holds only `description` and `hooks` (research note `hosts.md`, sections A3 and D1).
- Each event gets one matcher group whose command runs this Python:
  `"<python>" -P -m memsift hook <event>` (`-P`: the project folder never shadows memsift).
  memsift's entries are the ones whose command contains `-m memsift hook`; nothing else in
  the file is touched, and installing twice changes nothing.
- `install` keeps the file's bytes from before (in `<memsift home>/install/<host>.json`);
  `uninstall` puts them back exactly when the file has not changed since, and otherwise
  removes only memsift's entries.
- Codex runs a hook only once the user trusted it (`/hooks` in the TUI); `install` says so.
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

from .notes import atomic_write

#: (host event, memsift hook event, timeout in seconds). Codex caps SessionEnd at 3 s.
EVENTS = (
    ("SessionStart", "session-start", 10),
    ("UserPromptSubmit", "user-prompt-submit", 10),
    ("Stop", "stop", 10),
    ("PreCompact", "pre-compact", 10),
    ("SessionEnd", "session-end", 3),
)
MARK = "-m memsift hook"
HOSTS = ("claude", "codex")


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


def hook_groups(host: str, python: str = sys.executable) -> dict[str, list[dict]]:
    """memsift's hook entries for `host`, by host event."""
    out = {}
    for event, name, timeout in EVENTS:
        handler = {"type": "command", "command": f"{shlex.quote(python)} -P {MARK} {name}", "timeout": timeout}
        if host == "codex":  # cmd.exe on Windows: double quotes
            handler["commandWindows"] = f'"{python}" -P {MARK} {name}'
        out[event] = [{"hooks": [handler]}]
    return out


def _is_ours(handler: object) -> bool:
    return isinstance(handler, dict) and MARK in str(handler.get("command", ""))


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
    """Add memsift's hooks to the host's settings; a message for the user. Idempotent.

    Raises `InstallError` when the settings file is not a JSON object (it is not touched).
    """
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
    atomic_write(path, text)
    message = f"memsift's hooks added to {path} ({', '.join(e for e, _, _ in EVENTS)}), running {python}"
    if host == "claude" and plugin_enabled(data):
        message += (". Warning: the memsift plugin is enabled too, so each hook would run twice: disable one "
                    "(`claude plugin disable memsift@memsift`, or `memsift uninstall claude`)")
    if host == "codex":
        message += ". Codex runs them once you trust them: start codex and type /hooks"
    return message


def uninstall(host: str, home: Path, env: Mapping[str, str] | None = None) -> str:
    """Remove memsift's hooks from the host's settings; a message for the user. When the file
    has not changed since `install`, its bytes from before are put back exactly."""
    path = settings_path(host, env)
    record_path = _record_path(host, home)
    record = json.loads(record_path.read_text()) if record_path.exists() else None
    raw, data = _read(path)
    if record and raw is not None and hashlib.sha256(raw).hexdigest() == record.get("installed_sha"):
        if record["original"] is None:
            path.unlink()
        else:
            atomic_write(path, base64.b64decode(record["original"]))
        record_path.unlink()
        return f"{path} restored as it was before `memsift install {host}`"
    if raw is None or not any(_ours(g) for groups in data.get("hooks", {}).values() for g in groups):
        if record:
            record_path.unlink()
        return f"no memsift hooks in {path}"
    atomic_write(path, json.dumps(_without_ours(data), indent=2, ensure_ascii=False) + "\n")
    if record:
        record_path.unlink()
    return f"memsift's hooks removed from {path} (it changed since install, so only memsift's entries went)"
