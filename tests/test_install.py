"""`memsift install` / `uninstall` in a sandboxed HOME: the host's settings gain memsift's
hooks and nothing else changes, a simulated host run of the installed command pastes a
recall, installing twice changes nothing, and uninstall restores the file byte for byte."""

from __future__ import annotations

import json
import subprocess

import pytest

from memsift.install import HOOK_CODE, InstallError, install, is_hook_command, settings_path, uninstall

NOTE = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit."
# a user's own settings, with formatting json.dumps would not reproduce
CLAUDE_SETTINGS = b'{\r\n  "model": "opus",   "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}\r\n}'


@pytest.fixture
def env(tmp_path):
    return {"HOME": str(tmp_path / "home")}


@pytest.mark.parametrize("host", ["claude", "codex"])
def test_install_run_and_uninstall_byte_for_byte(host, env, tmp_path, memsift_home, scripted):
    path = settings_path(host, env)
    path.parent.mkdir(parents=True)
    original = CLAUDE_SETTINGS if host == "claude" else b'{"description": "mine", "hooks": {}}'
    path.write_bytes(original)
    install(host, memsift_home, env)
    assert install(host, memsift_home, env).startswith("memsift's hooks are already in")
    settings = json.loads(path.read_text())
    commands = {event: [h["command"] for g in groups for h in g["hooks"]] for event, groups in settings["hooks"].items()}
    assert sum(is_hook_command(c) for cs in commands.values() for c in cs) == 5
    if host == "claude":
        assert settings["model"] == "opus" and "notify-send done" in commands["Stop"]

    # a simulated host: the UserPromptSubmit command exactly as written, JSON on stdin
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    from .conftest import run_memsift

    assert run_memsift("notes", "add", "--project", str(project), "--kind", "decision", NOTE).returncode == 0
    (command,) = [c for c in commands["UserPromptSubmit"] if is_hook_command(c)]
    payload = {"session_id": "s1", "transcript_path": "", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
               "prompt": "why did we choose Adyen over Stripe?"}
    done = subprocess.run(["sh", "-c", command], input=json.dumps(payload).encode(), capture_output=True,
                          cwd=project, timeout=120)
    assert done.returncode == 0
    assert NOTE in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]

    assert "restored as it was" in uninstall(host, memsift_home, env)
    assert path.read_bytes() == original


def test_uninstall_after_a_hand_edit_removes_only_memsift(env, memsift_home):
    path = settings_path("claude", env)
    install("claude", memsift_home, env)  # no settings file before
    data = json.loads(path.read_text())
    data["theme"] = "dark"
    path.write_text(json.dumps(data))
    assert "only memsift's entries went" in uninstall("claude", memsift_home, env)
    assert json.loads(path.read_text()) == {"theme": "dark"}


@pytest.mark.parametrize("host", ["claude", "codex"])
def test_install_replaces_the_older_hook_command_and_uninstall_removes_either(host, env, memsift_home):
    """Installs before 2026-12-03 wrote `python -P -m memsift hook <event>`: the next install
    replaces those entries (one memsift entry per event, the new command), and uninstall
    removes them when nothing else was installed since."""
    path = settings_path(host, env)
    path.parent.mkdir(parents=True)
    old = {"type": "command", "command": "/opt/py/bin/python3 -P -m memsift hook user-prompt-submit", "timeout": 10}
    mine = {"type": "command", "command": "notify-send prompt"}
    path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [old]}, {"hooks": [mine]}]}}))
    install(host, memsift_home, env)
    groups = json.loads(path.read_text())["hooks"]["UserPromptSubmit"]
    commands = [h["command"] for g in groups for h in g["hooks"]]
    assert [c for c in commands if is_hook_command(c)] == [c for c in commands if HOOK_CODE in c]
    assert len([c for c in commands if is_hook_command(c)]) == 1 and "notify-send prompt" in commands

    path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [old]}, {"hooks": [mine]}]}}))
    uninstall(host, memsift_home, env)
    assert json.loads(path.read_text()) == {"hooks": {"UserPromptSubmit": [{"hooks": [mine]}]}}


def test_install_without_a_settings_file_and_uninstall_removes_it(env, memsift_home):
    install("codex", memsift_home, env)
    path = settings_path("codex", env)
    assert path.exists()
    uninstall("codex", memsift_home, env)
    assert not path.exists()


@pytest.mark.parametrize("host, which, raw, reason", [
    ("claude", "settings", b"{ not json", "not JSON"),
    ("codex", "mcp", b"[mcp_servers\nbroken = ", "not TOML"),
    ("codex", "mcp", b"model = \"o3\"  # caf\xe9\n", "not UTF-8"),
])
def test_a_file_that_cannot_be_read_stops_the_install_before_anything_changes(env, memsift_home, host, which, raw,
                                                                               reason):
    """Settings that are not JSON, a Codex config.toml that is not TOML or not UTF-8: install
    says so, and neither that file nor the other one it would write is touched."""
    from memsift.install import mcp_path

    path, other = ((settings_path(host, env), mcp_path(host, env)) if which == "settings"
                   else (mcp_path(host, env), settings_path(host, env)))
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    with pytest.raises(InstallError, match=reason):
        install(host, memsift_home, env)
    assert path.read_bytes() == raw and not other.exists()


def test_install_command(memsift_home, tmp_path):
    from .conftest import run_memsift

    home = tmp_path / "h"
    done = run_memsift("install", "claude", env={"HOME": str(home)})
    assert done.returncode == 0 and b"hooks added" in done.stdout
    assert run_memsift("uninstall", "claude", env={"HOME": str(home)}).returncode == 0
    assert not (home / ".claude" / "settings.json").exists()


def test_doctor_is_happy_after_install_codex_and_warns_about_a_double_claude_setup(env, memsift_home, tmp_path):
    from memsift.doctor import checks

    install("codex", memsift_home, env)
    found = checks(tmp_path, env)
    codex = [(ok, m) for ok, m in found if m.startswith("Codex")]
    assert codex and codex[0][0], codex
    mcp = [(ok, m) for ok, m in found if m.startswith("MCP server")]
    assert mcp[0][0] and "lists its 4 tools" in mcp[0][1] and "config.toml" in mcp[0][1], mcp
    settings = settings_path("claude", env)
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"enabledPlugins": {"memsift@memsift": True}}))
    assert "run twice" in install("claude", memsift_home, env)


def test_a_failed_install_leaves_the_settings_alone(env, tmp_path):
    path = settings_path("claude", env)
    path.parent.mkdir(parents=True)
    path.write_bytes(CLAUDE_SETTINGS)
    not_a_folder = tmp_path / "afile"
    not_a_folder.write_text("x")
    with pytest.raises(OSError):
        install("claude", not_a_folder, env)
    assert path.read_bytes() == CLAUDE_SETTINGS


CODEX_CONFIG = '''# my Codex settings
model = "o4-mini"  # the cheap one

[features]
hooks = true

[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-mcp"]
'''


def test_mcp_server_registered_for_codex_and_removed_exactly(env, memsift_home, tmp_path):
    import tomllib

    from memsift.install import mcp_path

    path = mcp_path("codex", env)
    path.parent.mkdir(parents=True)
    path.write_text(CODEX_CONFIG)
    message = install("codex", memsift_home, env, python="/opt/py/bin/python3")
    assert "MCP server" in message and str(path) in message
    text = path.read_text()
    assert text.startswith(CODEX_CONFIG)  # the user's lines and comments stay as they were
    parsed = tomllib.loads(text)
    assert parsed["mcp_servers"]["memsift"] == {"command": "/opt/py/bin/python3", "args": ["-P", "-m", "memsift", "mcp"]}
    assert parsed["mcp_servers"]["docs"]["command"] == "npx"
    assert "already" in install("codex", memsift_home, env, python="/opt/py/bin/python3").splitlines()[1]
    uninstall("codex", memsift_home, env)
    assert path.read_text() == CODEX_CONFIG


def test_mcp_server_registered_for_claude_beside_the_hosts_own_state(env, memsift_home):
    from memsift.install import mcp_path

    path = mcp_path("claude", env)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"numStartups": 3, "projects": {"/x": {"allowedTools": []}},
             "mcpServers": {"docs": {"type": "stdio", "command": "npx", "args": ["docs-mcp"], "env": {}}}}
    path.write_text(json.dumps(state))
    install("claude", memsift_home, env, python="/opt/py/bin/python3")
    data = json.loads(path.read_text())
    assert data["mcpServers"]["memsift"] == {"type": "stdio", "command": "/opt/py/bin/python3",
                                             "args": ["-P", "-m", "memsift", "mcp"], "env": {}}
    assert data["numStartups"] == 3 and data["mcpServers"]["docs"]["command"] == "npx"
    data["numStartups"] = 4  # the host rewrites its state file all the time
    path.write_text(json.dumps(data))
    uninstall("claude", memsift_home, env)
    assert json.loads(path.read_text()) == dict(state, numStartups=4)


def test_a_users_own_memsift_server_is_left_alone(env, memsift_home):
    from memsift.install import mcp_path

    path = mcp_path("claude", env)
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = {"mcpServers": {"memsift": {"type": "http", "url": "http://127.0.0.1:9000/mcp"}}}
    path.write_text(json.dumps(mine))
    assert "not memsift's own" in install("claude", memsift_home, env)
    uninstall("claude", memsift_home, env)
    assert json.loads(path.read_text()) == mine


def test_the_registered_command_serves_the_tools(env, memsift_home, tmp_path):
    """The MCP entry `install` writes, started as the host starts it, lists memsift's tools."""
    import asyncio
    import sys

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from memsift.install import mcp_path

    install("claude", memsift_home, env)
    entry = json.loads(mcp_path("claude", env).read_text())["mcpServers"]["memsift"]
    assert entry["command"] == sys.executable
    project = tmp_path / "shop"
    project.mkdir()

    async def names():
        params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(project),
                                       env={"MEMSIFT_HOME": str(memsift_home)})
        async with Client(params, read_timeout_seconds=60) as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    assert asyncio.run(names()) == ["memsift_forget", "memsift_remember", "memsift_search", "memsift_show"]


def test_install_writes_through_a_symlinked_settings_file(env, memsift_home, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_bytes(CLAUDE_SETTINGS)
    path = settings_path("claude", env)
    path.parent.mkdir(parents=True)
    path.symlink_to(dotfiles / "settings.json")
    install("claude", memsift_home, env)
    assert path.is_symlink() and HOOK_CODE in (dotfiles / "settings.json").read_text()
    uninstall("claude", memsift_home, env)
    assert path.is_symlink() and (dotfiles / "settings.json").read_bytes() == CLAUDE_SETTINGS
