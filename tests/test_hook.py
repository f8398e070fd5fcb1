"""The Claude Code UserPromptSubmit hook as a real process: it never breaks the agent."""

from __future__ import annotations

import base64
import json
import os

import pytest

from .conftest import run_memsift

NOTE = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit for our German customers."
#: A message the note plainly answers: these tests check the hook, the eval measures the judge.
ASK = "why did we choose Adyen over Stripe?"


def payload(prompt, cwd, **extra):
    return json.dumps({"session_id": "s-1", "transcript_path": "", "cwd": str(cwd), "permission_mode": "default",
                       "hook_event_name": "UserPromptSubmit", "prompt": prompt, **extra}).encode()


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "shop"
    (folder / ".git").mkdir(parents=True)
    done = run_memsift("notes", "add", "--project", str(folder), "--kind", "decision", "--date", "2026-09-01", NOTE)
    assert done.returncode == 0, done.stderr.decode()
    return folder


def hook(stdin: bytes):
    return run_memsift("hook", "user-prompt-submit", stdin=stdin)


def log_text(home) -> str:
    return (home / "logs" / "hook.log").read_text(encoding="utf-8")


def test_recall_prompt_gets_the_note(project, memsift_home):
    done = hook(payload(ASK, project))
    assert done.returncode == 0
    out = json.loads(done.stdout)
    context = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert "[memsift note N001 · 2026-09-01 · decision]" in context and "Adyen" in context
    # the same session never gets the same note twice
    again = hook(payload("remind me: why did we choose Adyen over Stripe?", project))
    assert again.returncode == 0 and b"N001" not in again.stdout


def test_acknowledgement_gets_nothing(project):
    done = hook(payload("ok thanks", project))
    assert (done.returncode, done.stdout) == (0, b"")


@pytest.mark.parametrize(
    "stdin, reason",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON list"),
        (b'{"cwd": "/tmp"}', "'prompt' missing"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"", "not JSON"),
    ],
)
def test_bad_input_exits_0_silently_and_logs_why(stdin, reason, memsift_home):
    done = hook(stdin)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert reason in log_text(memsift_home)


def test_empty_prompt(project, memsift_home):
    done = hook(payload("   ", project))
    assert (done.returncode, done.stdout) == (0, b"")
    assert "empty prompt" in log_text(memsift_home)


def test_two_megabyte_image_paste(project):
    blob = base64.b64encode(os.urandom(1_500_000)).decode()
    done = hook(payload(f"what is wrong in this screenshot? data:image/png;base64,{blob}", project))
    assert done.returncode == 0
    assert done.stdout == b"" or json.loads(done.stdout)["hookSpecificOutput"]


def test_non_ascii_prompt_is_decoded_as_utf8(project):
    prompt = "on avait choisi quel prestataire de paiement déjà, et pourquoi ? 支付"
    done = hook(payload(prompt, project))
    assert done.returncode == 0
    if done.stdout:
        json.loads(done.stdout.decode("ascii"))  # escaped JSON, whatever the console encoding


def test_bad_note_header_is_logged_and_recall_goes_on(project, memsift_home):
    notes_md = next((memsift_home / "projects").glob("shop-*")) / "notes.md"
    notes_md.write_text(notes_md.read_text(encoding="utf-8") + "\n## broken · header\n", encoding="utf-8")
    done = hook(payload(ASK, project))
    assert done.returncode == 0 and b"N001" in done.stdout
    assert "expected '## <id>" in log_text(memsift_home)


def test_internal_error_exits_0_and_logs_why(project, memsift_home):
    notes_md = next((memsift_home / "projects").glob("shop-*")) / "notes.md"
    notes_md.unlink()
    notes_md.mkdir()  # the notes "file" cannot be read at all
    done = hook(payload(ASK, project))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert "IsADirectoryError" in log_text(memsift_home) and "nothing pasted" in log_text(memsift_home)


def test_project_without_memory_loads_no_model(tmp_path, memsift_home):
    done = hook(payload("which payment provider did we pick?", tmp_path))
    assert (done.returncode, done.stdout) == (0, b"")
    assert "no memory yet" in log_text(memsift_home)


def test_transcript_that_is_a_fifo_does_not_block(project, tmp_path):
    fifo = tmp_path / "transcript.jsonl"
    os.mkfifo(fifo)
    done = hook(payload(ASK, project, transcript_path=str(fifo)))
    assert done.returncode == 0 and b"N001" in done.stdout


def test_odd_transcript_lines_and_lone_surrogates(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type": "user", "message": "not a dict"}\n[1]\n', encoding="utf-8")
    done = hook(payload(ASK + " \ud800", project, transcript_path=str(transcript)))  # JSON escape of a lone surrogate
    assert done.returncode == 0 and b"N001" in done.stdout


def test_prompt_text_and_credentials_never_reach_the_log(project, memsift_home):
    secret = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key
    done = hook(payload(f"deploy failed with key {secret}, why did we choose Adyen over Stripe?", project))
    assert done.returncode == 0
    log = log_text(memsift_home)
    assert secret not in log and "deploy failed" not in log


@pytest.mark.parametrize("encode", [
    lambda b: b"\xef\xbb\xbf" + b,                    # UTF-8 with a BOM: Codex on Windows, some shells
    lambda b: b.decode().encode("utf-16"),            # UTF-16 with its BOM (PowerShell's default)
    lambda b: b"\xfe\xff" + b.decode().encode("utf-16-be"),
    lambda b: b.decode().encode("utf-32"),
], ids=["utf-8-bom", "utf-16-le-bom", "utf-16-be-bom", "utf-32-bom"])
def test_stdin_with_a_byte_order_mark_gets_its_recall(project, encode):
    done = hook(encode(payload(ASK, project)))
    assert done.returncode == 0 and b"N001" in done.stdout


def test_capture_hooks_accept_a_bom_too(project, memsift_home):
    done = run_memsift("hook", "session-end", stdin=b"\xef\xbb\xbf" + payload("", project))
    assert done.returncode == 0
    assert "not JSON" not in log_text(memsift_home)


def test_the_same_prompt_hook_fired_twice_at_once_pastes_once(project):
    """Hosts run a plugin's hook and a settings entry's copy of it side by side: the
    ledger lets exactly one of the two paste, whichever claims the note first."""
    import subprocess
    import sys

    for n in range(3):
        stdin = payload(ASK, project, session_id=f"twin-{n}")
        procs = [subprocess.Popen([sys.executable, "-m", "memsift", "hook", "user-prompt-submit"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        for p in procs:  # both are up (model loading) before either reads its payload
            p.stdin.write(stdin)
        for p in procs:
            p.stdin.close()
        outs = [p.stdout.read() for p in procs]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        assert sorted(b"N001" in o for o in outs) == [False, True], outs
        assert b"" in outs  # the other copy says nothing at all
