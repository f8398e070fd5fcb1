"""End-to-end tests of the memsift plugin inside the REAL Claude Code CLI.

These run the `claude` binary itself, fully offline:

* `claude plugin validate --strict` on the repo (marketplace + plugin manifest + hooks);
* one `claude -p` turn against a fake Anthropic API on 127.0.0.1 (tests/fakeapi.py),
  with the plugin loaded through `--plugin-dir`, checking that the host loads the plugin,
  that the UserPromptSubmit hook succeeds, and that memsift's recall reaches (or, for a
  trivial prompt, does not reach) the request Claude Code sends to the model.

The tests are skipped when no `claude` binary is found. They look at, in order:
$MEMSIFT_CLAUDE_BIN, .ci/.cache/claude/node_modules/.bin/claude (what
`.ci/install-claude.sh` installs), then `claude` on PATH.

The hook runs memsift with $MEMSIFT_PYTHON, which defaults to the interpreter running
pytest; set MEMSIFT_PYTHON to test another one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .fakeapi import FakeAnthropicAPI

REPO = Path(__file__).resolve().parent.parent
MEMSIFT_PYTHON = os.environ.get("MEMSIFT_PYTHON") or sys.executable
CLI_TIMEOUT = 120  # seconds; a claude call that hangs (e.g. retrying the API) fails the test

NOTE_TEXT = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit for our German customers."
NOTE_DATE = "2026-09-01"
MARKER = "[memsift"


# -- fixtures and helpers ----------------------------------------------------------------


def _find_claude() -> str | None:
    candidates = [
        os.environ.get("MEMSIFT_CLAUDE_BIN"),
        str(REPO / ".ci/.cache/claude/node_modules/.bin/claude"),
        shutil.which("claude"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="session")
def claude_bin() -> str:
    path = _find_claude()
    if path is None:
        pytest.skip("Claude Code CLI not found: set MEMSIFT_CLAUDE_BIN, "
                    "run .ci/install-claude.sh, or put `claude` on PATH")
    return path


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[FakeAnthropicAPI]:
    with FakeAnthropicAPI(tmp_path / "api-requests.jsonl") as api:
        yield api


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    """A from-scratch environment: scratch HOME, no real credentials, no telemetry."""
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no DNS lookups at all
        "MEMSIFT_PYTHON": MEMSIFT_PYTHON,
        "MEMSIFT_HOME": str(tmp_path / "memsift-home"),
        "MEMSIFT_SERVER": "off",  # the hook recalls in its own process; the warm server's test turns it on
    }


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command with a timeout, no stdin, and captured text output."""
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT)
    if check and proc.returncode != 0:
        pytest.fail(f"{cmd[:4]} exited {proc.returncode}\n"
                    f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


@dataclass
class Turn:
    """What one `claude -p` turn produced."""
    events: list[dict[str, Any]]   # the stream-json events printed by the CLI
    model_text: str                # every string in every /v1/messages body, joined
    stderr: str
    hook_log: str                  # memsift's own log, <MEMSIFT_HOME>/logs/hook.log

    def init(self) -> dict[str, Any]:
        return next(e for e in self.events if e.get("type") == "system" and e.get("subtype") == "init")

    def hook_responses(self, hook_event: str) -> list[dict[str, Any]]:
        return [e for e in self.events
                if e.get("subtype") == "hook_response" and e.get("hook_event") == hook_event]

    def describe(self) -> str:
        hooks = [{k: e.get(k) for k in ("hook_event", "outcome", "exit_code", "stdout", "stderr")}
                 for e in self.events if e.get("subtype") == "hook_response"]
        return (json.dumps(hooks, indent=1, ensure_ascii=False)
                + "\n--- claude stderr\n" + self.stderr[-2000:]
                + "\n--- memsift hook.log\n" + self.hook_log[-3000:])


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def claude_turn(claude_bin: str, prompt: str, project: Path, env: dict[str, str],
                api: FakeAnthropicAPI) -> Turn:
    """One non-interactive turn with memsift loaded from the repo, against the fake API."""
    env = dict(env,
               ANTHROPIC_BASE_URL=api.url,
               ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
               CLAUDE_CODE_MAX_RETRIES="0")
    proc = run([claude_bin, "-p", prompt, "--plugin-dir", str(REPO),
                "--output-format", "stream-json", "--verbose", "--include-hook-events"],
               env=env, cwd=project)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bodies = api.message_bodies()
    assert bodies, f"claude sent no /v1/messages request to the fake API\n{proc.stderr[-2000:]}"
    log = Path(env["MEMSIFT_HOME"], "logs", "hook.log")
    return Turn(events, "\n".join(s for b in bodies for s in _strings(b)), proc.stderr,
                log.read_text(encoding="utf-8") if log.exists() else "")


@dataclass
class Project:
    path: Path
    note_add_output: str  # what `memsift notes add` printed (expected to name the note id)


@pytest.fixture
def project(tmp_path: Path, base_env: dict[str, str]) -> Project:
    """A scratch git project with one memsift decision note seeded in it."""
    path = tmp_path / "shop"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=30)
    added = run([MEMSIFT_PYTHON, "-m", "memsift", "notes", "add", "--project", str(path),
                 "--kind", "decision", "--date", NOTE_DATE, NOTE_TEXT], env=base_env, cwd=path)
    return Project(path, added.stdout)


def assert_plugin_loaded(turn: Turn) -> None:
    init = turn.init()
    names = [p.get("name") for p in init.get("plugins", [])]
    assert "memsift" in names, f"memsift not among loaded plugins: {init.get('plugins')}"
    errors = [e for e in init.get("plugin_errors") or [] if "memsift" in json.dumps(e)]
    assert not errors, f"plugin errors: {errors}"
    responses = turn.hook_responses("UserPromptSubmit")
    assert responses, f"no UserPromptSubmit hook_response event\n{turn.describe()}"
    assert all(r.get("outcome") == "success" for r in responses), turn.describe()
    # The hook always exits 0, so its own log is where a crash would show.
    assert " ERROR " not in turn.hook_log, f"memsift logged an error\n{turn.describe()}"


# -- tests -------------------------------------------------------------------------------


def test_plugin_validates_strict(claude_bin: str, base_env: dict[str, str]) -> None:
    # The repo root holds the marketplace (its hooks are checked too); the plugin
    # manifest itself is validated through its file path.
    for target in (REPO, REPO / ".claude-plugin/plugin.json"):
        proc = run([claude_bin, "plugin", "validate", "--strict", str(target)],
                   env=base_env, check=False)
        assert proc.returncode == 0, f"validate {target}:\n{proc.stdout}\n{proc.stderr}"
        assert "Validation passed" in proc.stdout


def test_recall_reaches_the_model(claude_bin: str, project: Project, base_env: dict[str, str],
                                  fake_api: FakeAnthropicAPI) -> None:
    turn = claude_turn(claude_bin, "why did we choose Adyen over Stripe?",
                       project.path, base_env, fake_api)
    assert_plugin_loaded(turn)
    framing = re.search(rf"\[memsift note (\S+) · {NOTE_DATE} · decision\]", turn.model_text)
    assert framing, f"no memsift note in the model request\n{turn.describe()}"
    assert NOTE_TEXT in turn.model_text
    note_id = framing.group(1)
    assert note_id in project.note_add_output, \
        f"note id {note_id!r} not in `notes add` output {project.note_add_output!r}"


def test_recall_through_the_warm_server(claude_bin: str, project: Project, base_env: dict[str, str],
                                       fake_api: FakeAnthropicAPI) -> None:
    """With `memsift serve` up, the plugin's hook is its thin client: the same note reaches
    the model, answered by the server."""
    from .conftest import start_server, stop_servers

    env = {k: v for k, v in base_env.items() if k != "MEMSIFT_SERVER"}
    home = Path(env["MEMSIFT_HOME"])
    start_server(home, env)
    try:
        turn = claude_turn(claude_bin, "why did we choose Adyen over Stripe?", project.path, env, fake_api)
    finally:
        stop_servers(home)
    assert_plugin_loaded(turn)
    assert NOTE_TEXT in turn.model_text
    assert "user-prompt-submit done in" in turn.hook_log and "(memsift serve)" in turn.hook_log, turn.describe()


def test_small_talk_injects_nothing(claude_bin: str, project: Project, base_env: dict[str, str],
                                    fake_api: FakeAnthropicAPI) -> None:
    turn = claude_turn(claude_bin, "ok thanks", project.path, base_env, fake_api)
    assert_plugin_loaded(turn)
    assert MARKER not in turn.model_text, \
        f"memsift injected context for small talk\n{turn.describe()}"


def test_capture_hooks_fire_and_capture_the_session(claude_bin: str, project: Project,
                                                    base_env: dict[str, str],
                                                    fake_api: FakeAnthropicAPI) -> None:
    """The real CLI fires the plugin's Stop (and SessionEnd) hooks, which hand the
    session's transcript to a detached capture; capture records the session."""
    import sqlite3
    import time

    turn = claude_turn(claude_bin, "ok thanks", project.path, base_env, fake_api)
    assert_plugin_loaded(turn)
    log = Path(base_env["MEMSIFT_HOME"], "logs", "hook.log")
    started = [line for line in log.read_text(encoding="utf-8").splitlines() if "memsift capture" in line]
    assert any("hook stop: started" in line for line in started), f"Stop started no capture\n{turn.describe()}"
    assert any("hook session-start: started" in line and "--sweep" in line for line in started)
    db = Path(base_env["MEMSIFT_HOME"], "capture.sqlite")
    deadline = time.time() + 90
    rows: list = []
    while time.time() < deadline and not rows:
        if db.exists():
            with sqlite3.connect(db) as conn:
                rows = conn.execute("SELECT session, transcript FROM sessions").fetchall()
        time.sleep(0.3)
    assert rows, "the detached capture never recorded the session\n" + turn.describe()
    session, transcript = rows[0]
    assert Path(transcript).name == f"{session}.jsonl" and Path(base_env["HOME"]) in Path(transcript).parents


def test_installed_from_the_local_marketplace(claude_bin: str, project: Project, base_env: dict[str, str],
                                              fake_api: FakeAnthropicAPI) -> None:
    """`claude plugin marketplace add` + `claude plugin install`, as a user does; then a turn
    without --plugin-dir runs the installed copy's hooks and the recall reaches the model."""
    run([claude_bin, "plugin", "marketplace", "add", str(REPO)], env=base_env)
    run([claude_bin, "plugin", "install", "memsift@memsift"], env=base_env)
    listed = run([claude_bin, "plugin", "list", "--json"], env=base_env).stdout
    assert "memsift@memsift" in listed
    env = dict(base_env, ANTHROPIC_BASE_URL=fake_api.url, ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
               CLAUDE_CODE_MAX_RETRIES="0")
    proc = run([claude_bin, "-p", "why did we choose Adyen over Stripe?", "--output-format", "stream-json",
                "--verbose", "--include-hook-events"], env=env, cwd=project.path)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert "memsift" in [p.get("name") for p in init.get("plugins", [])], init.get("plugins")
    text = "\n".join(s for b in fake_api.message_bodies() for s in _strings(b))
    assert NOTE_TEXT in text and "[memsift note" in text


def test_mcp_tools_reach_the_model_and_a_tool_call_returns_the_note(claude_bin: str, project: Project,
                                                                    base_env: dict[str, str], tmp_path: Path) -> None:
    """The plugin's MCP server (`.mcp.json`): Claude Code starts it, its four tools reach the
    model request, the session-start line too, and a scripted call of memsift_search gets
    the note that answers, as the tool result in the next request."""
    search = "mcp__plugin_memsift_memsift__memsift_search"
    with FakeAnthropicAPI(tmp_path / "api-tools.jsonl",
                          tool_call=("memsift_search", {"query": "why did we choose Adyen over Stripe?"})) as api:
        env = dict(base_env, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
                   CLAUDE_CODE_MAX_RETRIES="0",
                   ENABLE_TOOL_SEARCH="false")  # MCP tools in `tools` itself, not deferred behind ToolSearch
        proc = run([claude_bin, "-p", "ok go ahead", "--plugin-dir", str(REPO), "--allowedTools", search,
                    "--output-format", "stream-json", "--verbose", "--include-hook-events"], env=env, cwd=project.path)
        bodies = api.message_bodies()
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert {"name": "plugin:memsift:memsift", "status": "connected", "source": "plugin"} in init["mcp_servers"], init
    offered = {t.get("name") for b in bodies for t in b.get("tools", [])}
    assert {f"mcp__plugin_memsift_memsift__memsift_{n}" for n in ("search", "show", "remember", "forget")} <= offered
    text = "\n".join(s for b in bodies for s in _strings(b))
    assert "memsift holds 1 note for this project" in text and "memsift_search" in text  # the session-start line
    results = [block for b in bodies for m in b.get("messages", []) if isinstance(m.get("content"), list)
               for block in m["content"] if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results, f"no tool result reached the model\n{proc.stdout[-3000:]}"
    result = json.dumps(results[0], ensure_ascii=False)
    assert "[memsift note " in result and NOTE_TEXT in result and '"is_error": true' not in result
