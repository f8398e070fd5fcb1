"""A chain of supersessions resolves to its newest note: shown whole, pasted only at its end."""

from __future__ import annotations

import datetime as dt

import pytest

from memsift.notes import Note, NoteStore
from memsift.recall import Recaller
from memsift.revision import Supersede, revise
from memsift.supersession import chain

from .conftest import run_memsift

NOTES = [
    Note("N1", "2026-01-01", "context", "Staging runs in eu-west-1 on Kubernetes with autoscaling.", session="s1"),
    Note("N2", "2026-03-01", "context", "Moved to us-east-1 last week.", session="s2"),
    Note("N3", "2026-06-01", "context", "Now ap-south-1, for the latency to Mumbai.", session="s3"),
] + [  # active notes that share a word with the message, so that the newest link alone ranks below them
    Note(f"N{10 + i}", "2026-06-02", "convention", text) for i, text in enumerate([
        "Staging deploys need a green CI run first.", "Kubernetes manifests live in the infra repository.",
        "Autoscaling thresholds are reviewed every quarter.", "Staging data is wiped every Sunday night.",
        "Kubernetes secrets come from the vault operator.", "Staging uses the sandbox payment keys.",
    ])
]
MESSAGE = "does staging still run in eu-west-1 on kubernetes with autoscaling?"


@pytest.fixture
def store(tmp_path, encoder):
    store = NoteStore(tmp_path / "notes", "shop", encoder=encoder)
    store.add(NOTES, link_supersession=False)
    revise(store, [Supersede("N1", "N2")], backend="test")
    revise(store, [Supersede("N2", "N3")], backend="test")
    return store


def test_chain_lists_oldest_to_newest():
    notes = [Note("N1", "2026-01-01", "context", "a", superseded_by="N2"),
             Note("N2", "2026-02-01", "context", "b", superseded_by="N3"), Note("N3", "2026-03-01", "context", "c")]
    assert chain(notes, "N1") == chain(notes, "N2") == chain(notes, "N3") == ["N1", "N2", "N3"]
    assert chain(notes[2:], "N3") == ["N3"]


def test_only_the_oldest_shares_the_words_and_the_newest_is_pasted(store, encoder, scripted):
    q = encoder.query([MESSAGE])[0]
    assert "N3" not in [n.id for n in store.search(q, MESSAGE, 5).notes]  # by its own words, N3 is not found
    hits = store.search(q, MESSAGE, 5, superseded=True)
    assert hits.found_by == {"N3": "N1"} and hits.notes[-1].id == "N3"
    assert not {"N1", "N2"} & {n.id for n in hits.notes}  # an older link is never a candidate
    model = scripted(answers={"N1": 0.99, "N2": 0.99, "N3": 0.9})
    result = Recaller(model, encoder, store, None, today=dt.date(2026, 6, 10)).recall(MESSAGE)
    assert [i.id for i in result.items] == ["N3"]
    assert "[memsift note N3 · 2026-06-01 · context] Now ap-south-1" in result.text
    assert "eu-west-1" not in result.text and "us-east-1" not in result.text


def test_an_older_link_is_never_pasted_once_the_newest_was(store, encoder, scripted):
    model = scripted(answers={"N1": 0.99, "N2": 0.99, "N3": 0.9})
    result = Recaller(model, encoder, store, None).recall(MESSAGE, pasted={"N3"})
    assert not {"N1", "N2", "N3"} & {i.id for i in result.items}


def test_notes_show_prints_the_chain(store, tmp_path, monkeypatch):
    project = tmp_path / "shop"
    project.mkdir()
    from memsift.config import project_dir, project_root

    folder = project_dir(project_root(project))
    folder.mkdir(parents=True)
    (folder / "notes.md").write_bytes(store.markdown.read_bytes())
    out = run_memsift("notes", "show", "N2", "--project", str(project))
    assert out.returncode == 0, out.stderr
    assert "chain: N1 -> N2 -> N3 (pasted: N3)" in out.stdout.decode()
