"""The everyday commands: log, why, status, pause / resume, doctor."""

from __future__ import annotations

import json

from memsift.doctor import checks, claude_project_folder

from .conftest import run_memsift

NOTE = "Payments: Adyen chosen over Stripe because Stripe lacked SEPA direct debit."


def prompt(project, text, session="s1"):
    payload = {"session_id": session, "transcript_path": "", "cwd": str(project), "prompt": text,
               "hook_event_name": "UserPromptSubmit"}
    done = run_memsift("hook", "user-prompt-submit", stdin=json.dumps(payload).encode())
    assert done.returncode == 0
    return done.stdout


def make_project(tmp_path):
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    assert run_memsift("notes", "add", "--project", str(project), "--kind", "decision", NOTE).returncode == 0
    return project


def test_log_why_status(tmp_path, memsift_home):
    project = make_project(tmp_path)
    assert NOTE.encode() in prompt(project, "why did we pick Adyen over Stripe? key AKIAIOSFODNN7EXAMPLE")
    prompt(project, "ok thanks")
    log = run_memsift("log").stdout.decode()
    lines = log.strip().splitlines()
    assert len(lines) == 2 and "pasted N001" in lines[0] and "reaction" in lines[1]
    why = run_memsift("why", lines[0].split()[0]).stdout.decode()
    assert "genre" in why and "notes" in why and "pasted: N001" in why
    assert "AKIAIOSFODNN7EXAMPLE" not in (memsift_home / "runs.sqlite").read_bytes().decode("latin-1")
    assert run_memsift("why", "999").returncode == 1
    status = run_memsift("status", "--project", str(project)).stdout.decode()
    assert f"project    {project}" in status and "notes      1 active, 0 superseded" in status


def test_pause_and_resume(tmp_path, memsift_home):
    project = make_project(tmp_path)
    ask = "why did we pick Adyen over Stripe?"
    assert run_memsift("pause", "--session", "s1").returncode == 0
    assert prompt(project, ask, "s1") == b"" and NOTE.encode() in prompt(project, ask, "s2")
    run_memsift("pause")
    assert prompt(project, ask, "s3") == b""
    run_memsift("resume")
    run_memsift("resume", "--session", "s1")
    assert NOTE.encode() in prompt(project, ask, "s4")
    run_memsift("pause", "--session", "abcdef12")  # the start of an id, as `memsift log` shows it
    assert prompt(project, ask, "abcdef12-0000-4000-8000-000000000000") == b""
    assert b"paused     abcdef12" in run_memsift("status", "--project", str(project)).stdout


def test_doctor_names_what_claude_code_would_cut(tmp_path):
    home = tmp_path / "home"
    project = tmp_path / "proj"
    env = {"HOME": str(home)}
    memory = claude_project_folder(project, env) / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_text("".join(f"- fact {i}\n" for i in range(1, 251)))
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps({"enabledPlugins": {"memsift@memsift": True}, "hooks": {"UserPromptSubmit": [
        {"hooks": [{"type": "command", "command": "python -P -m memsift hook user-prompt-submit"}]}]}}))
    found = [m for ok, m in checks(project, env) if not ok]
    assert any("would run twice" in m for m in found)
    assert any("from line 201 on ('- fact 201')" in m for m in found)


def test_config_toml_under_the_environment(memsift_home, monkeypatch):
    from memsift.config import cognee_config, environment

    memsift_home.mkdir(parents=True, exist_ok=True)
    (memsift_home / "config.toml").write_text('[cognee]\nurl = "http://127.0.0.1:8000"\napi_key = "k1"\n\n'
                                              '[reviser]\nbackend = "claude"\n')
    assert cognee_config() == type(cognee_config())("http://127.0.0.1:8000", "k1", None)
    assert environment()["MEMSIFT_REVISER"] == "claude"
    monkeypatch.setenv("MEMSIFT_COGNEE_API_KEY", "k2")
    assert cognee_config().api_key == "k2"  # the environment wins
    (memsift_home / "config.toml").write_text("[cognee\nurl=")
    assert cognee_config() is None  # a broken file is ignored, never fatal


def test_notes_show_and_edit(tmp_path, memsift_home):
    project = make_project(tmp_path)
    shown = run_memsift("notes", "show", "N001", "--project", str(project))
    assert shown.returncode == 0 and NOTE.encode() in shown.stdout
    assert run_memsift("notes", "show", "N999", "--project", str(project)).returncode == 1
    editor = tmp_path / "editor.sh"  # an "editor" that appends a line, as a user would
    editor.write_text("#!/bin/sh\nprintf '\\n## N002 · 2026-11-29 · context\\nStaging is wiped on Sundays.\\n' >> \"$1\"\n")
    editor.chmod(0o755)
    edited = run_memsift("notes", "edit", "--project", str(project), env={"EDITOR": str(editor)})
    assert edited.returncode == 0 and b"2 notes" in edited.stdout
    editor.write_text("#!/bin/sh\nprintf '\\n## N003 2026-11-29 context\\nbad header\\n' >> \"$1\"\n")
    broken = run_memsift("notes", "edit", "--project", str(project), env={"EDITOR": str(editor)})
    assert broken.returncode == 1 and b"expected '## <id>" in broken.stderr
