"""Batch 5's whole sessions read as training records (`training/sessions.py`): the shapes
`train_heads.py` reads from `data/pairs` and `data/genre`, from session files on disk."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

from sessions import genre_records, load_sessions, pair_records  # noqa: E402

SESSION = {
    "format": "memsift-conversation/1", "id": "en-test-01", "language": "en", "title": "t",
    "project": {"name": "demo", "summary": "s"},
    "notes": [{"id": "N01", "date": "2026-01-02", "kind": "constraint", "text": "Never write to the primary."}],
    "passages": [{"id": "P001", "date": "2026-01-01", "text": "User: why replicas? Assistant: load."}],
    "turns": [
        {"n": 1, "user": "ok", "assistant": "a", "genre": "reaction", "needs_recall": False, "expected": [],
         "why": ""},
        {"n": 2, "user": "point the report job at the primary", "assistant": "a", "genre": "new_decision",
         "needs_recall": True, "expected": ["N01", "P001"], "why": "N01 forbids it"},
        {"n": 3, "user": "and the replica again?", "assistant": "a", "genre": "past_choice",
         "needs_recall": False, "expected": ["N01"], "why": "already said"},
    ],
}


def write(folder: Path, conv: dict) -> None:
    (folder / f"{conv['id']}.json").write_text(json.dumps(conv), encoding="utf-8")


def test_a_session_reads_as_one_project_of_pairs(tmp_path):
    write(tmp_path, SESSION)
    [conv] = load_sessions(tmp_path)
    rows = pair_records(conv)
    items = {r["id"]: r for r in rows if r["type"] != "query"}
    assert set(items) == {"en-test-01-N01", "en-test-01-P001"}  # unique across projects
    assert items["en-test-01-N01"]["kind"] == "constraint" and "kind" not in items["en-test-01-P001"]
    queries = [r for r in rows if r["type"] == "query"]
    assert [q["answers"] for q in queries] == [[], ["en-test-01-N01", "en-test-01-P001"], []]  # labels only on needs_recall
    assert {r["project"] for r in rows} == {"en-test-01"}


def test_a_session_reads_as_a_genre_file_without_topics(tmp_path):
    write(tmp_path, SESSION)
    [conv] = load_sessions(tmp_path)
    assert [(g["genre"], g["topic"], g["file"]) for g in genre_records(conv)] == [
        ("reaction", None, "en-test-01"), ("new_decision", None, "en-test-01"), ("past_choice", None, "en-test-01")]


def test_sessions_can_be_left_out_and_other_formats_are_refused(tmp_path):
    write(tmp_path, SESSION)
    write(tmp_path, {**SESSION, "id": "fr-test-01", "language": "fr"})
    assert [c["id"] for c in load_sessions(tmp_path, exclude=frozenset({"en-test-01"}))] == ["fr-test-01"]
    write(tmp_path, {**SESSION, "id": "bad", "format": "other/1"})
    with pytest.raises(ValueError, match="bad.json"):
        load_sessions(tmp_path)
