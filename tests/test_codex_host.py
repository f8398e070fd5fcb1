"""The real Codex CLI (0.171.0, offline) running memsift's hooks as `memsift install codex`
writes them: Codex lists them without warnings, runs them once trusted, and the recall
reaches the request it sends to the model (a fake Responses API on 127.0.0.1).

Skipped without the CLI: `.ci/install-codex.sh` installs it (`.ci/run` does), or set
MEMSIFT_CODEX_BIN. The mechanics are in the research note `hostcli.md`, section 3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsift.install import is_hook_command

from .fakeapi import FakeAnthropicAPI

REPO = Path(__file__).resolve().parent.parent
NOTE = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit for our German customers."
EVENTS = {"sessionStart", "userPromptSubmit", "stop", "preCompact", "sessionEnd"}


def codex_bin() -> str:
    for candidate in (os.environ.get("MEMSIFT_CODEX_BIN"), str(REPO / ".ci/.cache/codex/node_modules/.bin/codex"),
                      shutil.which("codex")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("Codex CLI not found: run .ci/install-codex.sh or set MEMSIFT_CODEX_BIN")


@pytest.fixture
def sandbox(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
           "LANG": "C.UTF-8", "TERM": "dumb", "SHELL": shutil.which("bash") or "/bin/bash",
           "MEMSIFT_HOME": str(tmp_path / "memsift-home")}
    return env


def memsift(*args, env, cwd=None):
    done = subprocess.run([sys.executable, "-m", "memsift", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def hooks_list(codex: str, env: dict, cwd: Path) -> dict:
    """`codex app-server` JSON-RPC: initialize, then hooks/list for `cwd`."""
    proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=cwd)

    def call(id_, method, params):
        proc.stdin.write(json.dumps({"id": id_, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        deadline = time.time() + 30
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if msg.get("id") == id_:
                return msg
        pytest.fail(f"codex app-server gave no answer to {method}")

    try:
        call(1, "initialize", {"clientInfo": {"name": "memsift-tests", "version": "0"}})
        proc.stdin.write(json.dumps({"method": "initialized"}) + "\n")
        proc.stdin.flush()
        return call(2, "hooks/list", {"cwds": [str(cwd)]})["result"]["data"][0]
    finally:
        proc.stdin.close()
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("server", ["in-process", "warm server"])
def test_codex_runs_the_installed_hooks_and_the_recall_reaches_the_model(sandbox, tmp_path, server, request):
    from .conftest import start_server, stop_servers

    codex = codex_bin()
    request.addfinalizer(lambda: stop_servers(Path(sandbox["MEMSIFT_HOME"])))
    if server == "warm server":  # the hook is then the thin client of `memsift serve`
        start_server(Path(sandbox["MEMSIFT_HOME"]), sandbox)
    else:
        sandbox["MEMSIFT_SERVER"] = "off"
    project = tmp_path / "shop"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    memsift("notes", "add", "--project", str(project), "--kind", "decision", "--date", "2026-09-01", NOTE, env=sandbox)
    print(memsift("install", "codex", env=sandbox))

    listed = hooks_list(codex, sandbox, project)
    ours = [h for h in listed["hooks"] if is_hook_command(h["command"])]
    assert {h["eventName"] for h in ours} == EVENTS, listed
    assert not listed["warnings"] and not listed["errors"], listed
    assert all(h["trustStatus"] == "untrusted" for h in ours)  # Codex asks the user first
    with open(Path(sandbox["CODEX_HOME"]) / "config.toml", "a", encoding="utf-8") as fh:  # what /hooks writes
        for h in ours:
            fh.write(f'\n[hooks.state."{h["key"]}"]\ntrusted_hash = "{h["currentHash"].split("/")[0]}"\n')
    relisted = hooks_list(codex, sandbox, project)["hooks"]
    assert {h["trustStatus"] for h in relisted if is_hook_command(h["command"])} == {"trusted"}

    with FakeAnthropicAPI(tmp_path / "requests.jsonl") as api:
        env = dict(sandbox, FAKE_KEY="sk-fake-for-tests")
        done = subprocess.run(
            [codex, "-c", "analytics.enabled=false", "-c", "model_provider=fake", "-c",
             f'model_providers.fake={{name="fake",base_url="{api.url}/v1",wire_api="responses",env_key="FAKE_KEY",'
             'request_max_retries=0,stream_max_retries=0}', "-m", "fake-model", "exec", "--skip-git-repo-check",
             "why did we choose Adyen over Stripe?"],
            env=env, cwd=project, capture_output=True, text=True, timeout=120)
        bodies = [e["body"] for e in api.requests() if e.get("path", "").endswith("/responses")]
    output = done.stdout + done.stderr
    assert "hook: UserPromptSubmit Completed" in output, output[-3000:]
    developer = [json.dumps(item, ensure_ascii=False) for b in bodies for item in b.get("input", [])
                 if isinstance(item, dict) and item.get("role") == "developer"]
    assert any("[memsift note" in d and "Adyen supports SEPA direct debit" in d for d in developer), output[-3000:]
    if server == "warm server":
        log = (Path(sandbox["MEMSIFT_HOME"]) / "logs" / "hook.log").read_text(encoding="utf-8")
        assert "(memsift serve)" in log, log[-3000:]

    print(memsift("uninstall", "codex", env=sandbox))
    assert not [h for h in hooks_list(codex, sandbox, project)["hooks"] if is_hook_command(h["command"])]


def test_codex_offers_the_mcp_tools_install_registers_and_a_tool_call_returns_the_note(sandbox, tmp_path):
    """`memsift install codex` registers `memsift mcp` in config.toml: Codex starts it, offers
    its tools to the model (a `mcp__memsift` namespace), and a scripted call of
    memsift_search gets the note that answers; uninstall takes the entry out again."""
    import tomllib

    codex = codex_bin()
    sandbox["MEMSIFT_SERVER"] = "off"
    project = tmp_path / "shop"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    memsift("notes", "add", "--project", str(project), "--kind", "decision", "--date", "2026-09-01", NOTE, env=sandbox)
    memsift("install", "codex", env=sandbox)
    config = Path(sandbox["CODEX_HOME"]) / "config.toml"
    entry = tomllib.loads(config.read_text())["mcp_servers"]["memsift"]
    assert entry["args"] == ["-P", "-m", "memsift", "mcp"] and entry["env"] == {"MEMSIFT_HOME": sandbox["MEMSIFT_HOME"]}

    with FakeAnthropicAPI(tmp_path / "requests.jsonl",
                          tool_call=("memsift_search", {"query": "why did we choose Adyen over Stripe?"})) as api:
        done = subprocess.run(
            [codex, "-c", "analytics.enabled=false", "-c", "model_provider=fake", "-c",
             f'model_providers.fake={{name="fake",base_url="{api.url}/v1",wire_api="responses",env_key="FAKE_KEY",'
             'request_max_retries=0,stream_max_retries=0}', "-m", "fake-model",
             # an optional MCP server gets 1 s to start before a turn goes on without it; ours takes
             # about 2 s here (the SDK's import), and `exec`'s first turn starts at once
             "-c", "mcp_optional_startup_grace_ms=0",
             "exec", "--skip-git-repo-check", "ok go ahead"],
            env=dict(sandbox, FAKE_KEY="sk-fake-for-tests"), cwd=project, capture_output=True, text=True, timeout=120)
        bodies = [e["body"] for e in api.requests() if e.get("path", "").endswith("/responses")]
    output = done.stdout + done.stderr
    namespaces = [t for b in bodies for t in b.get("tools", []) if t.get("name") == "mcp__memsift"]
    assert namespaces, output[-3000:]
    assert {t["name"] for t in namespaces[0]["tools"]} == {"memsift_search", "memsift_show", "memsift_remember",
                                                           "memsift_forget"}
    outputs = [json.dumps(item, ensure_ascii=False) for b in bodies for item in b.get("input", [])
               if isinstance(item, dict) and item.get("type") == "function_call_output"]
    assert any("[memsift note N001 · 2026-09-01 · decision]" in o and NOTE in o for o in outputs), output[-3000:]

    memsift("uninstall", "codex", env=sandbox)
    assert "memsift" not in tomllib.loads(config.read_text()).get("mcp_servers", {}) if config.exists() else True
