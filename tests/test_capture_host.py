"""Capture under the hosts' real behaviour, with real hook and capture processes: the last
message missing from the transcript at Stop, a 300 KB last message, and transcripts of
100,000 (Claude Code) and 20,000 (Codex) lines."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from memsift.config import project_dir, project_root
from memsift.notes import NoteStore

from .conftest import run_memsift
from .test_capture import CHITCHAT, DECISION, claude_lines, write_jsonl


def wait_for_capture(home, session: str, timeout: float = 90) -> tuple[int, int]:
    """`(offset, exchanges)` once the detached capture of `session` recorded it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        db = home / "capture.sqlite"
        try:
            row = sqlite3.connect(db).execute("SELECT offset, exchanges FROM sessions WHERE session = ?",
                                              (session,)).fetchone() if db.exists() else None
        except sqlite3.OperationalError:  # being created right now
            row = None
        if row:
            return row
        time.sleep(0.2)
    log = home / "logs" / "capture.log"
    pytest.fail("the detached capture never recorded the session: " + (log.read_text() if log.exists() else "no log"))


def without_final_answer(exchanges):
    """Claude Code's transcript as its Stop hook finds it: the last turn's final message is
    not written yet (hosts.md, B2)."""
    lines = claude_lines(exchanges)
    assert lines[-1]["type"] == "assistant"
    return lines[:-1], lines[-1]


def stop(session, transcript, cwd, last_message):
    payload = {"session_id": session, "transcript_path": str(transcript), "cwd": str(cwd), "hook_event_name": "Stop",
               "stop_hook_active": False, "last_assistant_message": last_message}
    done = run_memsift("hook", "stop", stdin=json.dumps(payload).encode())
    assert (done.returncode, done.stdout) == (0, b"")


def notes_of(project, home):
    return NoteStore(project_dir(project_root(project), home)).notes()


def passages_of(project, home) -> int:
    db = project_dir(project_root(project), home) / "passages.sqlite"
    return sqlite3.connect(db).execute("SELECT COUNT(*) FROM passages").fetchone()[0] if db.exists() else 0


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "proj"
    (folder / ".git").mkdir(parents=True)
    return folder


def test_stop_keeps_the_last_message_the_transcript_lacks_and_the_catch_up_adds_nothing(tmp_path, project, memsift_home):
    path = tmp_path / "s.jsonl"
    lines, final = without_final_answer([CHITCHAT[0], DECISION])
    write_jsonl(path, lines)
    stop("lag-1", path, project, DECISION[1])
    assert wait_for_capture(memsift_home, "lag-1")[1] == 2  # the last exchange is complete: the payload says how it ended
    (note,) = notes_of(project, memsift_home)
    assert "Postmark" in note.text and passages_of(project, memsift_home) == 1
    assert not list((memsift_home / "spool").iterdir())  # used, then removed

    # the transcript catches up (the final message lands after the hook), the session goes on and ends
    write_jsonl(path, lines + [final] + claude_lines([CHITCHAT[1]])[1:])
    done = run_memsift("capture", "--transcript", str(path), "--session", "lag-1", "--cwd", str(project), "--final")
    assert done.returncode == 0, done.stderr.decode()
    assert wait_for_capture(memsift_home, "lag-1") == (path.stat().st_size, 3)  # one exchange more, not two
    assert len(notes_of(project, memsift_home)) == 1 and passages_of(project, memsift_home) == 1


def test_stop_when_the_transcript_already_holds_the_last_message(tmp_path, project, memsift_home):
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines([CHITCHAT[0], DECISION]))
    stop("lag-2", path, project, DECISION[1])
    assert wait_for_capture(memsift_home, "lag-2")[1] == 2
    (note,) = notes_of(project, memsift_home)
    assert note.text.count("Postmark through Anymail") == 1  # not the answer twice over


def report(decision: str, size: int) -> str:
    """A pasted load-test report of about `size` characters: tables, log lines and prose
    with "because" here and there, and one sentence that states a decision."""
    rows, i = [], 0
    while sum(map(len, rows)) < size:
        rows.append(f"| GET /thumb/{i} | {i % 90 + 10} ms | {i % 300 + 100} ms | 200 | worker-{i % 8} |")
        if i % 40 == 0:
            rows.append(f"Run {i // 40}: latency rose at step {i % 7} because the cache was cold.")
        if i % 95 == 0:
            rows.append(f"2026-11-30T10:{i % 60:02d}:00Z INFO thumbnailer: rendered {i} images in {i % 50} s")
        if i == 2400:
            rows.append(decision)
        i += 1
    return "Load test report for the thumbnail service.\n\n" + "\n".join(rows)


def test_a_300_kb_last_message_keeps_the_one_decision_it_holds(tmp_path, project, memsift_home):
    decision = ("We decided to move thumbnail rendering from Pillow to libvips, because Pillow used 2 GB "
                "per worker under load and libvips stays under 300 MB.")
    text = report(decision, 300_000)
    assert len(text) >= 300_000 and text.index(decision) > 100_000
    path = tmp_path / "s.jsonl"
    user = "run the load test on the thumbnail service and write up what you found and what we do about it"
    lines, _ = without_final_answer([CHITCHAT[0], (user, "x")])
    write_jsonl(path, lines)
    stop("big-answer", path, project, text)
    assert wait_for_capture(memsift_home, "big-answer")[1] == 2
    notes = notes_of(project, memsift_home)
    assert len(notes) == 1 and "libvips" in notes[0].text and len(notes[0].text) <= 400


def run_with_rss(args: list[str], env: dict) -> tuple[int, str, float]:
    """Run `python -m memsift ...`: its exit code, its output (stdout and stderr) and its
    max RSS in MB (`os.wait4`)."""
    proc = subprocess.Popen([sys.executable, "-m", "memsift", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **env})
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, usage.ru_maxrss / 1024


def claude_transcript(path, lines: int, cwd) -> None:
    """A Claude Code transcript of `lines` lines: short exchanges of routine work, each with
    tool calls and 1.5 KB tool results (the bulk of real transcripts)."""
    tool_output = "collected 212 items ... " + "." * 1500
    with open(path, "w", encoding="utf-8") as fh:
        n = 0
        while n < lines:
            i = n
            for entry in (
                {"type": "user", "uuid": f"u{i}", "cwd": str(cwd), "message": {"role": "user", "content": f"run the tests again ({i})"}},
                {"type": "assistant", "uuid": f"a{i}", "message": {"id": f"m{i}", "content": [{"type": "tool_use", "name": "Bash", "input": {}}]}},
                {"type": "user", "uuid": f"t{i}", "message": {"content": [{"type": "tool_result", "content": tool_output}]}},
                {"type": "assistant", "uuid": f"b{i}", "message": {"id": f"n{i}", "content": [{"type": "text", "text": "All 212 tests pass."}]}},
            ):
                fh.write(json.dumps(entry) + "\n")
                n += 1


def codex_rollout(path, lines: int, cwd) -> None:
    """A Codex rollout of `lines` lines, in the same spirit."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "session_meta", "payload": {"id": "x", "cwd": str(cwd)}}) + "\n")
        n, i = 1, 0
        while n < lines:
            for entry in (
                {"type": "event_msg", "payload": {"type": "user_message", "message": f"run the linter again ({i})"}},
                {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": "{}"}},
                {"type": "response_item", "payload": {"type": "function_call_output", "output": "ok " + "." * 1500}},
                {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                      "content": [{"type": "output_text", "text": "No lint errors."}]}},
            ):
                fh.write(json.dumps(entry) + "\n")
                n += 1
            i += 1


@pytest.mark.parametrize("host, lines", [("claude", 100_000), ("codex", 20_000)])
def test_a_huge_transcript_is_captured_in_bounded_runs_that_resume(tmp_path, project, memsift_home, host, lines):
    path = tmp_path / ("s.jsonl" if host == "claude" else "rollout.jsonl")
    (claude_transcript if host == "claude" else codex_rollout)(path, lines, project)
    size = path.stat().st_size
    args = ["capture", "--transcript", str(path), "--session", f"huge-{host}", "--cwd", str(project), "--final"]
    env = {"MEMSIFT_CAPTURE_SECONDS": "2"}
    code, out, rss = run_with_rss(args, env)
    assert code == 0, out
    offset, exchanges = wait_for_capture(memsift_home, f"huge-{host}")
    assert 0 < offset < size and exchanges > 0  # gave up at the time limit, its progress kept
    assert rss < 250, f"max RSS {rss:.0f} MB for a {size / 1e6:.0f} MB file"  # streamed, never held whole
    code, out, _ = run_with_rss(args, env)
    assert code == 0 and "time limit" in out, out
    later, more = wait_for_capture(memsift_home, f"huge-{host}")
    assert later > offset and more > exchanges  # the next run went on from there
    assert notes_of(project, memsift_home) == []  # routine work: nothing worth a note


def test_the_spool_keeps_what_a_later_stop_wrote(tmp_path):
    from memsift.capture import Spool

    first = Spool(tmp_path, "abc")
    first.write("the first turn's last message")
    Spool(tmp_path, "abc-def").write("another session's")  # a session id that extends this one's
    assert first.read() == "the first turn's last message"
    time.sleep(0.01)
    Spool(tmp_path, "abc").write("the next turn's")  # a Stop while the capture of the first runs
    first.done()
    assert Spool(tmp_path, "abc").read() == "the next turn's"
    assert Spool(tmp_path, "abc-def").read() == "another session's"
    assert all(oct(p.stat().st_mode)[-3:] == "600" for p in (tmp_path / "spool").iterdir())


def test_the_last_answer_is_added_once(tmp_path):
    from memsift.transcript import read_exchanges

    path = tmp_path / "s.jsonl"
    lines, final = without_final_answer([DECISION])
    write_jsonl(path, lines)
    (ex,) = read_exchanges(path, last_answer=DECISION[1])
    assert ex.assistant == DECISION[1] and ex.end == path.stat().st_size
    write_jsonl(path, lines + [final])
    (ex,) = read_exchanges(path, last_answer="  " + DECISION[1] + "\n")
    assert ex.assistant == DECISION[1]
    assert list(read_exchanges(path, ex.end, last_answer=DECISION[1])) == []  # the catch-up lines: nothing


def test_a_corrupt_capture_state_is_moved_aside_and_capture_goes_on(tmp_path, project, memsift_home):
    memsift_home.mkdir(parents=True, exist_ok=True)
    (memsift_home / "capture.sqlite").write_bytes(os.urandom(3000))
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines([CHITCHAT[0]]))
    done = run_memsift("capture", "--transcript", str(path), "--session", "c-1", "--cwd", str(project), "--final")
    assert done.returncode == 0, done.stderr.decode()
    assert wait_for_capture(memsift_home, "c-1")[1] == 1
    assert list(memsift_home.glob("capture.sqlite.corrupt-*"))


def test_a_corrupt_passage_store_leaves_the_notes_answering(tmp_path, project, memsift_home):
    from .test_hook import ASK, NOTE, payload

    run_memsift("notes", "add", "--project", str(project), "--kind", "decision", "--date", "2026-09-01", NOTE)
    (project_dir(project_root(project), memsift_home) / "passages.sqlite").write_bytes(os.urandom(3000))
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project))
    assert done.returncode == 0 and b"N001" in done.stdout


def test_a_hook_with_no_home_at_all_exits_0(tmp_path):
    done = run_memsift("hook", "stop", stdin=b"{}", env={"MEMSIFT_HOME": "~nouser-memsift-test/x"})
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_terminal_escapes_in_an_answer_never_reach_a_note_a_paste_or_the_terminal(tmp_path, project, memsift_home):
    from .test_hook import NOTE, payload

    ansi = "\x1b[2J\x1b]0;pwned\x07\x1b[31m"
    answer = f"{ansi}We decided to switch the job queue from Celery to RQ because Celery's workers leaked memory.\x1b[0m\x00"
    path = tmp_path / "s.jsonl"
    write_jsonl(path, claude_lines([("let's decide the job queue, Celery keeps leaking", answer)]))
    done = run_memsift("capture", "--transcript", str(path), "--session", "ansi", "--cwd", str(project), "--final")
    assert done.returncode == 0, done.stderr.decode()
    markdown = (project_dir(project_root(project), memsift_home) / "notes.md").read_text(encoding="utf-8")
    assert "RQ" in markdown and "\x1b" not in markdown and "\x00" not in markdown and "\x07" not in markdown
    with open(project_dir(project_root(project), memsift_home) / "notes.md", "a", encoding="utf-8") as fh:
        fh.write(f"\n## N900 · 2026-09-01 · decision\n\n{ansi}{NOTE}\n")
    listed = run_memsift("notes", "list", "--project", str(project)).stdout.decode()
    assert "\x1b" not in listed and "\\x1b[2J" in listed
    pasted = run_memsift("hook", "user-prompt-submit", stdin=payload("why did we choose Adyen over Stripe?", project)).stdout
    assert b"N900" in pasted and b"\\u001b" not in pasted
