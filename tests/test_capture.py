"""Capture: transcripts of both hosts read from an offset, the selector, notes and passages
written once, secrets masked, the hooks handing the work to a detached process."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from memsift.capture import MAX_NOTES_PER_SESSION, capture, note_text, sweep
from memsift.notes import NoteStore
from memsift.config import project_dir, project_root
from memsift.transcript import Exchange, read_exchanges

from .conftest import run_memsift

# AWS's documented example key pair (https://docs.aws.amazon.com/IAM/latest/UserGuide/security-creds.html)
FAKE_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
FAKE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def claude_lines(exchanges: list[tuple[str, str]]) -> list[dict]:
    """A Claude Code transcript for (user, assistant) pairs, with the noise a real one has."""
    out: list[dict] = [{"type": "file-history-snapshot", "snapshot": {}}]
    for i, (user, answer) in enumerate(exchanges):
        out += [
            {"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": user}},
            {"type": "attachment", "attachment": {"type": "hook_additional_context",
                                                  "content": ["memsift recall: ...\n[memsift note N01 · 2026-01-01 · decision] x"]}},
            {"type": "assistant", "uuid": f"a{i}", "message": {"id": f"m{i}", "content": [
                {"type": "thinking", "thinking": "let me look"}, {"type": "tool_use", "name": "Bash", "input": {}}]}},
            {"type": "user", "uuid": f"t{i}", "message": {"content": [{"type": "tool_result", "content": "ok"}]}},
            {"type": "assistant", "uuid": f"b{i}", "message": {"id": f"n{i}", "content": [{"type": "text", "text": answer}]}},
        ]
    return out


def write_jsonl(path, lines, tail: str = "") -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + tail, encoding="utf-8")


DECISION = ("let's drop SES for transactional mail, the account got put under review again",
            "Switched transactional email to Postmark through Anymail's Postmark backend. SES was dropped "
            "because the bounce rate review blocked sending twice. Invoices use the outbound stream.")
CHITCHAT = [("ok thanks", "You're welcome."), ("run the tests", "All 212 tests pass."), ("lgtm", "Great.")]


def test_claude_exchanges_skip_tools_attachments_and_partial_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines([DECISION, ("and the tests?", "They pass.")]), tail='{"type": "user", "mess')
    held = list(read_exchanges(path))
    assert [(e.user, e.assistant) for e in held] == [DECISION]  # the last one may go on
    # a line still being written may end the answer: even a final read waits for it
    assert [(e.user, e.assistant) for e in read_exchanges(path, final=True)] == [DECISION]
    write_jsonl(path, claude_lines([DECISION, ("and the tests?", "They pass.")]))
    resumed = list(read_exchanges(path, held[-1].end, final=True))
    assert [(e.user, e.assistant) for e in resumed] == [("and the tests?", "They pass.")]
    assert resumed[-1].end == path.stat().st_size


def test_codex_rollout_exchanges(tmp_path):
    path = tmp_path / "rollout-2026-11-29T10-00-00-abc.jsonl"
    lines = [
        {"type": "session_meta", "payload": {"id": "abc", "cwd": "/p"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "why is the queue on JetStream?"}},
        {"type": "response_item", "payload": {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "memsift recall: [memsift note N02 · 2026-01-01 · decision] x"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": "{}"}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Core NATS dropped pings during deploys."}]}},
        {"type": "event_msg", "payload": {"type": "agent_message", "message": "Core NATS dropped pings during deploys."}},
    ]
    write_jsonl(path, lines)
    got = list(read_exchanges(path, final=True))
    assert [(e.user, e.assistant) for e in got] == [("why is the queue on JetStream?", "Core NATS dropped pings during deploys.")]


def test_oversized_line_is_skipped(tmp_path, monkeypatch):
    import memsift.transcript as transcript

    monkeypatch.setattr(transcript, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "s.jsonl"
    big = {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x" * 5000}]}}
    lines = claude_lines([DECISION])
    write_jsonl(path, lines[:3] + [big] + lines[3:] + claude_lines([("next", "ok")])[1:2])
    got = list(read_exchanges(path))
    assert [(e.user, e.assistant) for e in got] == [DECISION]


def make_model(scripted, encoder):
    return scripted(keep={"Postmark": "decision", "quota": "constraint", "incident": "incident"}, encoder=encoder)


def test_capture_keeps_a_decision_once_and_masks_secrets(tmp_path, memsift_home, scripted, encoder):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    user, answer = DECISION
    answer += f" The SES key {FAKE_KEY_ID} / {FAKE_SECRET} is revoked."
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines(CHITCHAT[:2] + [(user, answer)] + CHITCHAT[2:]))
    model = make_model(scripted, encoder)

    first = capture(path, "sess-1", str(project), final=True, home=memsift_home, model=model, today="2026-11-29")
    assert first.exchanges == 4 and len(first.kept) == 1
    store = NoteStore(project_dir(project_root(project), memsift_home), encoder=encoder)
    (note,) = store.notes()
    assert (note.kind, note.session, note.date) == ("decision", "sess-1", "2026-11-29")
    assert note.text.startswith("Switched transactional email to Postmark")
    folder = project_dir(project_root(project), memsift_home)
    everything = (folder / "notes.md").read_text() + repr(sqlite3.connect(folder / "passages.sqlite").execute(
        "SELECT text FROM passages").fetchall())
    assert FAKE_SECRET not in everything and FAKE_KEY_ID not in everything
    assert "User: let's drop SES" in everything

    again = capture(path, "sess-1", str(project), final=True, home=memsift_home, model=model)
    assert (again.exchanges, again.kept) == (0, [])
    assert len(store.notes()) == 1


def test_chitchat_keeps_nothing(tmp_path, memsift_home, scripted, encoder):
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines(CHITCHAT))
    result = capture(path, "chat", str(tmp_path), final=True, home=memsift_home, model=make_model(scripted, encoder))
    assert result.exchanges == 3 and result.kept == []
    assert not (project_dir(project_root(tmp_path), memsift_home) / "notes.md").exists()


def test_a_session_keeps_a_handful_at_most(tmp_path, memsift_home, scripted, encoder):
    path = tmp_path / "s.jsonl"
    pairs = [(f"incident number {i} on worker {i}", f"Incident {i}: worker w{i} ran out of memory on job j{i}; "
              f"fixed by capping batch size to {i * 10}.") for i in range(MAX_NOTES_PER_SESSION + 3)]
    write_jsonl(path, claude_lines(pairs[:4]))
    model = make_model(scripted, encoder)
    first = capture(path, "busy", str(tmp_path), final=False, home=memsift_home, model=model)
    assert len(first.kept) == 3  # the 4th exchange may still go on
    write_jsonl(path, claude_lines(pairs))
    second = capture(path, "busy", str(tmp_path), final=True, home=memsift_home, model=model)
    assert len(first.kept) + len(second.kept) == MAX_NOTES_PER_SESSION


def test_sweep_captures_ended_sessions_only(tmp_path, memsift_home, scripted, encoder):
    folder = tmp_path / "claude-project"
    folder.mkdir()
    old, recent, current = folder / "old.jsonl", folder / "recent.jsonl", folder / "current.jsonl"
    for p in (old, recent, current):
        write_jsonl(p, claude_lines([DECISION]))
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    os.utime(current, (hour_ago, hour_ago))
    results = sweep(str(tmp_path), home=memsift_home, exclude="current", folder=folder, model=make_model(scripted, encoder))
    assert [r.session for r in results] == ["old"] and len(results[0].kept) == 1
    assert sweep(str(tmp_path), home=memsift_home, exclude="current", folder=folder,
                 model=make_model(scripted, encoder)) == []


def test_note_text_is_short_and_plain():
    answer = "## Done\n**Switched** to `Postmark`. Reason: SES review.\n```python\nEMAIL_BACKEND = 'x'\n```\n" + "More. " * 200
    text = note_text(Exchange("use postmark", answer, 0, 0))
    assert text.startswith("Done Switched to Postmark. Reason: SES review.")
    assert "```" not in text and "EMAIL_BACKEND" not in text and len(text) <= 400


@pytest.mark.parametrize("event", ["stop", "session-end"])
def test_capture_hooks_return_at_once_and_capture_in_the_background(tmp_path, memsift_home, event):
    project = tmp_path / "proj"
    project.mkdir()
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines([DECISION, ("thanks", "You're welcome.")]))
    payload = {"session_id": f"bg-{event}", "transcript_path": str(path), "cwd": str(project), "hook_event_name": event}
    start = time.perf_counter()
    done = run_memsift("hook", event, stdin=json.dumps(payload).encode(), env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert done.returncode == 0 and done.stdout == b""
    assert time.perf_counter() - start < 5
    deadline = time.time() + 60
    while time.time() < deadline:
        db = memsift_home / "capture.sqlite"
        try:  # the detached capture may be creating the database right now
            row = sqlite3.connect(db).execute("SELECT offset, exchanges FROM sessions WHERE session = ?",
                                              (f"bg-{event}",)).fetchone() if db.exists() else None
        except sqlite3.OperationalError:
            row = None
        if row:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the detached capture never recorded the session: " + (memsift_home / "logs" / "capture.log").read_text())
    assert row[1] == (1 if event == "stop" else 2)  # Stop leaves the last exchange for later


def test_capture_hook_with_bad_input_exits_0(memsift_home):
    done = run_memsift("hook", "session-end", stdin=b"not json")
    assert done.returncode == 0 and done.stdout == b""
    assert "bad hook input" in (memsift_home / "logs" / "hook.log").read_text()


def test_notes_carry_the_date_of_their_session(tmp_path, memsift_home, scripted, encoder):
    lines = claude_lines([DECISION])
    for line in lines:
        line["timestamp"] = "2026-03-04T10:11:12.000Z"
    path = tmp_path / "s.jsonl"
    write_jsonl(path, lines)
    capture(path, "old", str(tmp_path), final=True, home=memsift_home, model=make_model(scripted, encoder), today="2026-11-29")
    (note,) = NoteStore(project_dir(project_root(tmp_path), memsift_home), encoder=encoder).notes()
    assert note.date == "2026-03-04"


def test_hook_payload_values_cannot_pass_for_options(tmp_path, memsift_home):
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines([DECISION]))
    payload = {"session_id": "--final", "transcript_path": str(path), "cwd": str(tmp_path), "hook_event_name": "SessionEnd"}
    done = run_memsift("hook", "session-end", stdin=json.dumps(payload).encode(), env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert done.returncode == 0
    deadline = time.time() + 60
    while time.time() < deadline and not (memsift_home / "capture.sqlite").exists():
        time.sleep(0.2)
    time.sleep(1)
    rows = sqlite3.connect(memsift_home / "capture.sqlite").execute("SELECT session FROM sessions").fetchall()
    assert rows == [("--final",)]


def test_the_same_answer_to_two_exchanges_is_kept_for_both(tmp_path):
    path = tmp_path / "rollout.jsonl"
    lines = []
    for ask in ("run the linter", "run the tests"):
        lines += [{"type": "event_msg", "payload": {"type": "user_message", "message": ask}},
                  {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                        "content": [{"type": "output_text", "text": "Done."}]}}]
    write_jsonl(path, lines)
    assert [(e.user, e.assistant) for e in read_exchanges(path, final=True)] == [
        ("run the linter", "Done."), ("run the tests", "Done.")]
