"""Reviser backends against real local servers: OpenAI-compatible chat, Anthropic Messages,
and a `claude -p` stand-in; a bad reply changes nothing and the embedded reviser runs."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from memsift.notes import NoteStore
from memsift.revisers import EmbeddedReviser, load_reviser, revise_notes
from memsift.revision import history, undo

from .jsonserver import JSONServer

NOTES = """# memsift notes: shop

## N001 · 2026-06-02 · decision
Payments go through Stripe.

## N002 · 2026-09-01 · decision
Payments moved to Adyen: Stripe's fees for cards issued outside the EU were too high.

## N003 · 2026-09-02 · context
The deploy token is ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij (rotate it).
"""
# the token above is a made-up value of GitHub's documented `ghp_` + 36 characters shape


def llm_server(reply: str, status: int = 200) -> JSONServer:
    """A local server answering both chat APIs with the reply text `reply`."""

    def answer(path, body):
        if path.endswith("/chat/completions"):
            return status, {"choices": [{"message": {"role": "assistant", "content": reply}}]}
        return status, {"content": [{"type": "text", "text": reply}], "role": "assistant"}

    return JSONServer(answer)


@pytest.fixture
def store(tmp_path, encoder):
    s = NoteStore(tmp_path / "notes", encoder=encoder)
    s.folder.mkdir(parents=True)
    s.markdown.write_text(NOTES, encoding="utf-8")
    return s


SUPERSEDE = '```json\n[{"op": "supersede", "note": "N001", "by": "N002"}]\n```'


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_llm_ops_are_applied_logged_and_undone(api, store):
    server = llm_server(SUPERSEDE)
    try:
        env = {"MEMSIFT_REVISER": api, "MEMSIFT_REVISER_URL": server.url + ("/v1" if api == "openai" else ""),
               "MEMSIFT_REVISER_MODEL": "m", "MEMSIFT_REVISER_KEY": "test-key"}
        ops, revision = revise_notes(store, load_reviser(env))
    finally:
        server.close()
    assert revision is not None and revision.backend == api
    assert "## N001 · 2026-06-02 · decision · superseded by N002" in store.markdown.read_text()
    (request,) = server.requests
    prompt = json.dumps(request["body"], ensure_ascii=False)
    assert "3| ## N001 · 2026-06-02 · decision" in prompt
    assert "ghp_ABCDEFGHIJ" not in prompt and "[SECRET:" in prompt  # masked before it leaves
    undo(store)
    assert store.markdown.read_text() == NOTES


@pytest.mark.parametrize("reply,status", [("sure! I would merge N001 into N002.", 200), ("[{\"op\": \"delete\", \"line\": 4, \"old\": \"wrong text\"}]", 200),
                                          ("{}", 500)])
def test_a_bad_llm_reply_changes_nothing_it_proposed(reply, status, store, caplog):
    server = llm_server(reply, status)
    try:
        env = {"MEMSIFT_REVISER": "openai", "MEMSIFT_REVISER_URL": server.url, "MEMSIFT_REVISER_MODEL": "m"}
        ops, revision = revise_notes(store, load_reviser(env))
    finally:
        server.close()
    assert "reviser openai failed" in caplog.text
    embedded_ops, _ = revise_notes(store, EmbeddedReviser(), dry_run=True)
    assert embedded_ops == []  # what ran instead was the embedded reviser, and it is done
    assert all(r.backend == "embedded" for r in history(store))


def test_claude_cli_backend(tmp_path, store):
    fake = tmp_path / "claude"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.stdin.read()\nprint({SUPERSEDE!r})\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    ops, revision = revise_notes(store, load_reviser({"MEMSIFT_REVISER": "claude", "MEMSIFT_CLAUDE_BIN": str(fake)}))
    assert revision is not None and revision.backend == "claude"
    assert "superseded by N002" in store.markdown.read_text()


@pytest.mark.parametrize("env,message", [
    ({"MEMSIFT_REVISER": "gpt"}, "use embedded, claude, openai or anthropic"),
    ({"MEMSIFT_REVISER": "openai", "MEMSIFT_REVISER_MODEL": "m"}, "needs MEMSIFT_REVISER_URL"),
    ({"MEMSIFT_REVISER": "anthropic"}, "needs MEMSIFT_REVISER_MODEL"),
])
def test_misconfiguration_is_a_clear_error(env, message):
    with pytest.raises(ValueError, match=message):
        load_reviser(env)


def test_notes_revise_and_undo_commands(store, tmp_path, memsift_home):
    from .conftest import run_memsift

    project = tmp_path / "proj"
    project.mkdir()
    from memsift.config import project_dir, project_root

    folder = project_dir(project_root(project), memsift_home)
    folder.mkdir(parents=True)
    (folder / "notes.md").write_text(NOTES + "\n## N004 · 2026-09-03 · decision · session 5e1f\nPayments go through Stripe.\n")
    before = (folder / "notes.md").read_bytes()
    env = {"MEMSIFT_ENCODER": "hashing-v1"}
    dry = run_memsift("notes", "revise", "--dry-run", "--project", str(project), env=env)
    assert dry.returncode == 0 and b'"op": "delete"' in dry.stdout and (folder / "notes.md").read_bytes() == before
    done = run_memsift("notes", "revise", "--project", str(project), env=env)
    assert done.returncode == 0 and b"applied as R0001" in done.stdout
    assert b"N004" not in (folder / "notes.md").read_bytes()
    back = run_memsift("notes", "undo", "--project", str(project), env=env)
    assert back.returncode == 0 and (folder / "notes.md").read_bytes() == before
    again = run_memsift("notes", "undo", "--project", str(project), env=env)
    assert again.returncode == 1 and b"memsift notes undo:" in again.stderr
