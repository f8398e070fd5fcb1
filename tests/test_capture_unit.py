"""Capture's writes as one unit, with real processes: `python -m memsift capture` killed
(`kill -9`) at each step, or hitting a full disk, then run again; and the project named by
the transcript's own cwd, whatever folder capture runs from.

Each kill happens at a real point where the capture blocks: the test holds a lock the
capture needs next (notes.lock, a SQLite write lock) or makes a server it calls hang.
After the rerun, every note the uninterrupted capture keeps is there exactly once, with
its passage exactly once, the capture row is written, and a third run adds nothing.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from filelock import FileLock

from memsift.backends.sqlite import SQLiteBackend
from memsift.capture import capture
from memsift.config import project_dir, project_root
from memsift.notes import NoteStore
from memsift.outbox import Outbox
from memsift.transcript import session_cwd

from .fakecognee import FakeCognee
from .jsonserver import JSONServer
from .test_capture import CHITCHAT, DECISION, claude_lines, write_jsonl

QUEUE = ("should we use Redis or Postgres for the job queue?",
         "We decided to use Postgres with SKIP LOCKED instead of Redis, because we already run Postgres "
         "and the volume is under 100 jobs per second.")
SESSION = "3f2a9c1e-unit"


def claude_session(path: Path, project: Path) -> None:
    """A Claude Code transcript of a session started in `project` (a `cwd` on each line, as
    Claude Code writes it)."""
    lines = claude_lines([DECISION, QUEUE] + CHITCHAT)
    for line in lines:
        if line["type"] != "file-history-snapshot":
            line["cwd"] = str(project)
    write_jsonl(path, lines)


@pytest.fixture
def s(tmp_path, memsift_home):
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    transcript = tmp_path / f"{SESSION}.jsonl"
    claude_session(transcript, project)
    return SimpleNamespace(home=memsift_home, project=project, elsewhere=elsewhere, transcript=transcript,
                           folder=project_dir(project_root(project), memsift_home), tmp=tmp_path)


def start(s, env: dict | None = None, *args: str) -> subprocess.Popen:
    """`memsift capture` of the session as a real process, run from another folder."""
    command = [sys.executable, "-m", "memsift", "capture", f"--transcript={s.transcript}", f"--session={SESSION}",
               "--final", *args]
    return subprocess.Popen(command, cwd=s.elsewhere, env={**os.environ, "MEMSIFT_HOME": str(s.home), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run(s, env: dict | None = None) -> tuple[int, str, str]:
    proc = start(s, env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode(), err.decode()


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"the capture ended (exit {proc.returncode}) before {what}: {proc.stderr.read().decode()}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"the capture never reached {what}")


def kill9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def stage(home: Path) -> str | None:
    """The stage of the session's write-ahead record, None when there is none."""
    try:
        with sqlite3.connect(home / "capture.sqlite", timeout=10) as db:
            row = db.execute("SELECT stage FROM pending WHERE session = ?", (SESSION,)).fetchone()
    except sqlite3.OperationalError:  # not created yet
        return None
    return row[0] if row else None


def notes_written(s) -> bool:
    md = s.folder / "notes.md"
    return md.exists() and md.read_text().count(f"session {SESSION}") >= 2


def write_lock(path: Path) -> sqlite3.Connection:
    """Hold a SQLite file's write lock (WAL: readers go on, writers wait)."""
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("BEGIN IMMEDIATE")
    return db


@pytest.fixture
def expected(s, tmp_path):
    """(kind, text) of each note the uninterrupted capture keeps, from a run in another home."""
    home = tmp_path / "reference-home"
    done = subprocess.run([sys.executable, "-m", "memsift", "capture", f"--transcript={s.transcript}",
                           f"--session={SESSION}", "--final"], cwd=s.project, capture_output=True,
                          env={**os.environ, "MEMSIFT_HOME": str(home)}, timeout=120)
    assert done.returncode == 0, done.stderr
    notes = NoteStore(project_dir(project_root(s.project), home)).notes()
    assert len(notes) == 2  # the two decisions; the chit-chat keeps nothing
    return sorted((n.kind, n.text) for n in notes)


def assert_complete(s, expected) -> None:
    """Every note once, its passage once, the capture row at the end of the transcript, no
    record left."""
    notes = NoteStore(s.folder).notes()
    assert sorted((n.kind, n.text) for n in notes) == expected
    assert {n.session for n in notes} == {SESSION}
    with sqlite3.connect(s.folder / "passages.sqlite") as db:
        ids = [r[0] for r in db.execute("SELECT id FROM passages")]
        fts = db.execute("SELECT count(*) FROM passages_fts").fetchone()[0]
    assert sorted(ids) == sorted(f"{n.id}-x" for n in notes) and fts == len(ids)
    with sqlite3.connect(s.home / "capture.sqlite") as db:
        row = db.execute("SELECT offset, exchanges, kept, project FROM sessions WHERE session = ?", (SESSION,)).fetchone()
        left = db.execute("SELECT count(*) FROM pending").fetchone()[0]
    assert row == (s.transcript.stat().st_size, 5, 2, str(s.project)) and left == 0


def rerun_and_check(s, expected, env: dict | None = None) -> None:
    code, out, err = run(s, env)
    assert code == 0, err
    assert "finished the capture cut short" in out or "notes added ['N" in out, out
    assert_complete(s, expected)
    code, out, err = run(s, env)  # a third run adds nothing
    assert code == 0 and "notes added none" in out and "cut short" not in out, out + err
    assert_complete(s, expected)


def test_killed_after_the_record_before_the_notes(s, expected):
    s.folder.mkdir(parents=True)
    with FileLock(str(s.folder / "notes.lock")):  # the capture blocks on it when it writes notes.md
        proc = start(s)
        wait_for(lambda: stage(s.home) == "planned", proc, "its write-ahead record")
        kill9(proc)
    assert not (s.folder / "notes.md").exists()
    rerun_and_check(s, expected)


def test_killed_after_notes_md_before_its_ids_are_recorded(s, expected):
    s.folder.mkdir(parents=True)
    lock = FileLock(str(s.folder / "notes.lock"))
    lock.acquire()
    proc = start(s)
    wait_for(lambda: stage(s.home) == "planned", proc, "its write-ahead record")
    state = write_lock(s.home / "capture.sqlite")  # recording the notes' ids will wait on it
    lock.release()
    wait_for(lambda: notes_written(s), proc, "notes.md")
    kill9(proc)
    state.close()
    assert stage(s.home) == "planned"
    rerun_and_check(s, expected)


def test_killed_after_the_notes_before_the_passages(s, expected):
    SQLiteBackend(s.folder / "passages.sqlite", None).close()
    held = write_lock(s.folder / "passages.sqlite")
    proc = start(s)
    wait_for(lambda: stage(s.home) == "noted", proc, "the passages")
    assert notes_written(s)
    kill9(proc)
    held.close()
    with sqlite3.connect(s.folder / "passages.sqlite") as db:
        assert db.execute("SELECT count(*) FROM passages").fetchone()[0] == 0
    rerun_and_check(s, expected)


def test_killed_in_the_reviser_after_the_passages(s, expected):
    gate = threading.Event()

    def reply(path, body):
        gate.wait(60)
        return 200, {"choices": [{"message": {"content": "[]"}}]}

    server = JSONServer(reply)
    env = {"MEMSIFT_REVISER": "openai", "MEMSIFT_REVISER_URL": server.url, "MEMSIFT_REVISER_MODEL": "m"}
    try:
        proc = start(s, env)
        wait_for(lambda: server.requests, proc, "the reviser")
        assert stage(s.home) == "stored"
        kill9(proc)
        gate.set()
        rerun_and_check(s, expected, env)
        assert len(server.requests) == 2  # the killed run's and the rerun's; the third had nothing to revise
    finally:
        gate.set()
        server.close()


def test_killed_before_the_outbox_then_each_document_is_sent_once(s, expected):
    fake = FakeCognee()
    env = {"MEMSIFT_COGNEE_URL": fake.url, "MEMSIFT_COGNEE_API_KEY": "test-key"}
    try:
        Outbox(s.home / "outbox.sqlite").close()
        held = write_lock(s.home / "outbox.sqlite")
        proc = start(s, env)
        wait_for(lambda: stage(s.home) == "revised", proc, "the outbox")
        kill9(proc)
        held.close()
        assert fake.adds == []
        rerun_and_check(s, expected, env)
        names = [name for add in fake.adds for name in add]
        assert len(names) == len(set(names)) == 4  # two notes, two passages, each sent once
        assert Outbox(s.home / "outbox.sqlite").pending() == []
    finally:
        fake.stop()


def test_the_session_start_sweep_finishes_a_capture_cut_short(s, expected):
    SQLiteBackend(s.folder / "passages.sqlite", None).close()
    held = write_lock(s.folder / "passages.sqlite")
    proc = start(s)
    wait_for(lambda: stage(s.home) == "noted", proc, "the passages")
    kill9(proc)
    held.close()
    # the session may still be running (its transcript is fresh): only the record is finished
    done = subprocess.run([sys.executable, "-m", "memsift", "capture", "--sweep", f"--cwd={s.project}"],
                          capture_output=True, env={**os.environ, "MEMSIFT_HOME": str(s.home)}, timeout=120)
    assert done.returncode == 0 and b"finished the capture cut short" in done.stdout, done.stderr
    assert_complete(s, expected)
    code, out, err = run(s)
    assert code == 0 and "notes added none" in out, out + err
    assert_complete(s, expected)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs, unmounted afterwards; skipped where mounting is not allowed."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    if sys.platform != "linux":
        pytest.skip("tmpfs mounts are a Linux feature")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system of `folder` to the last byte; the filler file."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                pass
    return filler


def test_full_disk_midway_fails_in_one_line_and_the_rerun_finishes(s, expected, small_disk):
    s.home = small_disk / "memsift-home"
    s.folder = project_dir(project_root(s.project), s.home)
    SQLiteBackend(s.folder / "passages.sqlite", None).close()
    held = write_lock(s.folder / "passages.sqlite")
    proc = start(s)
    wait_for(lambda: stage(s.home) == "noted", proc, "the passages")
    filler = fill(small_disk)
    held.close()  # the capture goes on, to a full disk
    out, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 1, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "is full" in err and "nothing is lost" in err, err
    assert notes_written(s)
    filler.unlink()
    rerun_and_check(s, expected)


# -- the project is the transcript's own -------------------------------------------------


def test_capture_from_another_folder_files_notes_under_the_transcripts_project(s, expected):
    code, out, err = run(s)  # the CLI's cwd is `elsewhere`, the transcript's is `shop`
    assert code == 0, err
    assert_complete(s, expected)
    assert not project_dir(project_root(s.elsewhere), s.home).exists()


def test_codex_rollout_names_its_project_by_session_meta(s, scripted, encoder):
    rollout = s.tmp / "rollout-2026-11-29T10-00-00-abc.jsonl"
    user, answer = DECISION
    write_jsonl(rollout, [
        {"type": "session_meta", "payload": {"id": "abc", "cwd": str(s.project), "originator": "codex_cli_rs"}},
        {"type": "turn_context", "payload": {"cwd": str(s.project), "approval_policy": "on-request"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": user}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text": answer}]}},
    ])
    model = scripted(keep={"Postmark": "decision"}, encoder=encoder)
    result = capture(rollout, "abc", str(s.elsewhere), final=True, home=s.home, model=model)
    assert len(result.kept) == 1
    assert [n.session for n in NoteStore(s.folder).notes()] == ["abc"]
    assert not project_dir(project_root(s.elsewhere), s.home).exists()


def test_session_cwd_reads_both_hosts_and_falls_back(s, tmp_path, scripted, encoder):
    assert session_cwd(s.transcript) == str(s.project)
    codex = tmp_path / "rollout.jsonl"
    write_jsonl(codex, [{"type": "turn_context", "payload": {"cwd": "/srv/app"}}])
    assert session_cwd(codex) == "/srv/app"
    bare = tmp_path / "bare.jsonl"
    write_jsonl(bare, claude_lines([DECISION]))  # no cwd anywhere: the given cwd names the project
    assert session_cwd(bare) is None
    capture(bare, "bare", str(s.project), final=True, home=s.home, model=scripted(keep={"Postmark": "decision"},
                                                                                  encoder=encoder))
    assert [n.session for n in NoteStore(s.folder).notes()] == ["bare"]
    gone = tmp_path / "gone.jsonl"  # a session folder that no longer exists: filed under its name, not elsewhere
    lines = claude_lines([DECISION])
    for line in lines:
        line["cwd"] = str(tmp_path / "deleted")
    write_jsonl(gone, lines)
    capture(gone, "gone", str(s.elsewhere), final=True, home=s.home, model=scripted(keep={"Postmark": "decision"},
                                                                                    encoder=encoder))
    assert [n.session for n in NoteStore(project_dir(project_root(tmp_path / "deleted"), s.home)).notes()] == ["gone"]
    assert "gone" not in [n.session for n in NoteStore(project_dir(project_root(s.elsewhere), s.home)).notes()]
