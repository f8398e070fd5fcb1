"""The notes store: Markdown the user can edit, atomic writes, several writers at once, supersession."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from memsift.config import project_dir, project_root
from memsift.notes import Note, NotesFormatError, NoteStore, parse_markdown, render_markdown, text_hash
from memsift.supersession import link_superseded, says_change

from .conftest import run_memsift


def test_markdown_round_trip():
    notes = [
        Note("N01", "2026-06-02", "decision", "Payments go through Stripe.", superseded_by="N02"),
        Note("N02", "2026-09-01", "decision", "Payments moved from Stripe to Adyen.\nSecond line."),
    ]
    parsed = parse_markdown(render_markdown("# my notes\n\nfree text stays", notes))
    assert parsed.notes == notes
    assert parsed.preamble == "# my notes\n\nfree text stays"


def test_bad_header_names_file_and_line():
    text = "# memsift notes: x\n\n## N01 · 2026-06-02 · decision\nok\n\n## N02 2026-06-03 decision\nbad\n"
    with pytest.raises(NotesFormatError, match=r"notes.md:6"):
        parse_markdown(text)
    with pytest.raises(NotesFormatError, match="kind 'idea'"):
        parse_markdown("## N01 · 2026-06-02 · idea\nx\n")
    lenient = parse_markdown(text, strict=False)  # recall reads on, keeping the line as text
    assert [n.id for n in lenient.notes] == ["N01"]
    assert "## N02 2026-06-03 decision" in lenient.notes[0].text
    assert "notes.md:6" in lenient.problems[0]


def test_add_assigns_ids_and_searches(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    a, b = store.add([Note("", "2026-01-01", "decision", "We deploy with Helm charts on the k3s cluster."),
                      Note("", "2026-01-02", "constraint", "The geocoding API allows 2,500 calls per day.")])
    assert (a.id, b.id) == ("N001", "N002")
    q = encoder.query(["how many geocoding calls per day do we get?"])[0]
    hits = store.search(q, "how many geocoding calls per day do we get?", k=1)
    assert hits.notes[0].id == "N002"
    assert hits.vectors.shape == (len(hits.notes), encoder.dim)


def test_a_mistyped_header_stays_as_it_is_and_adding_goes_on(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.add([Note("", "2026-01-01", "decision", "first")])
    broken = store.markdown.read_text(encoding="utf-8") + "\n## N002 - 2026-01-02 - decision\nsecond\n"
    store.markdown.write_text(broken, encoding="utf-8")
    (added,) = store.add([Note("", "2026-01-03", "decision", "third")])
    assert added.id == "N003"  # N002 is taken by the mistyped header, to be fixed by hand
    assert store.markdown.read_text(encoding="utf-8").startswith(broken)
    assert any("expected '## <id> · <YYYY-MM-DD> · <kind>'" in w for w in store.warnings)


def test_hand_edit_is_reindexed(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.add([Note("", "2026-01-01", "decision", "Logs ship to Loki.")])
    text = store.markdown.read_text(encoding="utf-8").replace("Logs ship to Loki.", "Logs ship to Datadog now.")
    store.markdown.write_text(text, encoding="utf-8")
    q = encoder.query(["datadog"])[0]
    assert "Datadog" in store.search(q, "datadog", k=1).notes[0].text


def test_superseded_note_leaves_search(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.add([Note("N1", "2026-01-01", "decision", "Transactional email goes out through Amazon SES.")])
    store.add([Note("N2", "2026-02-01", "decision", "Transactional email moved from Amazon SES to Postmark.")],
              link_supersession=False)
    # mark by hand, as the user (or the reviser) would
    text = store.markdown.read_text(encoding="utf-8").replace("## N1 · 2026-01-01 · decision", "## N1 · 2026-01-01 · decision · superseded by N2")
    store.markdown.write_text(text, encoding="utf-8")
    q = encoder.query(["which email provider?"])[0]
    assert [n.id for n in store.search(q, "email provider", k=5).notes] == ["N2"]


def test_link_superseded_needs_neighbours_and_a_change_cue():
    notes = [
        Note("A", "2026-01-01", "decision", "Email goes through SES."),
        Note("B", "2026-02-01", "decision", "Email moved from SES to Postmark."),
        Note("C", "2026-03-01", "convention", "Tests run with pytest."),
        Note("D", "2026-04-01", "decision", "Email also has a dunning stream."),
    ]
    v = {"A": [1, 0, 0], "B": [0.95, 0.31, 0], "C": [0, 0, 1], "D": [0.93, 0.36, 0]}
    vectors = {text_hash(n.text): np.array(v[n.id], dtype=np.float32) / np.linalg.norm(v[n.id]) for n in notes}
    linked = {n.id: n.superseded_by for n in link_superseded(notes, vectors, new_ids={"B", "C", "D"})}
    assert linked == {"A": "B", "B": None, "C": None, "D": None}  # D says no change


@pytest.mark.parametrize("text", ["We switched to Postmark.", "On a remplacé Stripe par Adyen.",
                                  "Wir nutzen SES nicht mehr.", "Ya no usamos SES.", "邮件服务改为 Postmark。",
                                  # a value raised or cut, the new value given
                                  "Session TTL raised from 6h to 24h.", "Overspend tolerance tightened to 1% (was 2%).",
                                  "Seuil du potassium relevé à 6,5 mmol/L.", "Timeout auf 5 s reduziert.",
                                  "Ventana reducida de 30 a 15 minutos.", "db-hpc01 is decommissioned.",
                                  "超时调整为 10 分钟。"])
def test_change_cues_in_five_languages(text):
    assert says_change(text)


@pytest.mark.parametrize("text", ["The worker autoscales from 2 to 8 tasks.", "Support ouvert de 8h à 18h.",
                                  "Der Cache erhöht die Latenz beim Kaltstart.", "Horario de 8 a 15 h.",
                                  "The migration job raised an error.", "他调到别的组了。"])
def test_a_range_or_a_verb_without_a_new_value_is_not_a_change(text):
    assert not says_change(text)


def test_project_root_is_the_git_root(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "src" / "deep").mkdir(parents=True)
    assert project_root(tmp_path / "repo" / "src" / "deep") == (tmp_path / "repo").resolve()
    assert project_root(tmp_path) == tmp_path.resolve()
    assert project_dir(tmp_path / "repo").name.startswith("repo-")


def test_concurrent_writers_lose_nothing(tmp_path):
    """Four processes add five notes each to one project at the same time."""
    project = tmp_path / "proj"
    project.mkdir()
    script = (
        "import sys\n"
        "from memsift.cli import main\n"
        "w = sys.argv[1]\n"
        "for i in range(5):\n"
        "    assert main(['notes', 'add', '--project', sys.argv[2], '--kind', 'context', f'writer {w} note {i}']) == 0\n"
    )
    env = {"MEMSIFT_ENCODER": "hashing-v1"}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w), str(project)], env={**os.environ, **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for w in range(4)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read().decode()
    listed = run_memsift("notes", "list", "--project", str(project), env=env)
    texts = [line for line in listed.stdout.decode().splitlines() if line.startswith("N")]
    assert len(texts) == 20
    assert len({t.split(" · ")[0] for t in texts}) == 20  # 20 distinct ids
    store = NoteStore(project_dir(project_root(project)), encoder=None)
    assert len(store.notes()) == 20


def test_text_outside_notes_and_a_bom_survive_a_write(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.folder.mkdir(parents=True)
    store.markdown.write_text("\ufeff# our notes\n\nkeep this line\n\n## N1 · 2026-01-01 · decision\nfirst\n### a subheading\nmore\n",
                              encoding="utf-8")
    store.add([Note("", "2026-01-02", "context", "second")])
    text = store.markdown.read_text(encoding="utf-8")
    assert "keep this line" in text and "### a subheading\nmore" in text
    assert [n.id for n in store.notes()] == ["N1", "N002"]


@pytest.mark.parametrize("note, error", [
    (Note("", "29/11/2026", "context", "x"), "YYYY-MM-DD"),
    (Note("", "2026-11-29", "context", "   "), "empty"),
    (Note("", "2026-11-29", "context", "Checklist:\n## Steps\n1. tag"), "'## '"),
    (Note("", "2026-11-29", "idea", "x"), "kind"),
])
def test_notes_that_could_not_be_read_back_are_refused(tmp_path, encoder, note, error):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    with pytest.raises(ValueError, match=error):
        store.add([note])
    assert not store.markdown.exists()


def test_ids_are_never_reused_and_duplicates_refused(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.add([Note("", "2026-01-01", "context", "one"), Note("", "2026-01-01", "context", "two")])
    text = store.markdown.read_text(encoding="utf-8")
    store.markdown.write_text(text[: text.index("## N002")], encoding="utf-8")  # the user deletes N002
    (added,) = store.add([Note("", "2026-01-02", "context", "three")])
    assert added.id == "N003"
    with pytest.raises(ValueError, match="already noted as N001"):
        store.add([Note("", "2026-01-03", "context", "one")])


def test_a_link_to_a_deleted_note_hides_nothing(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.folder.mkdir(parents=True)
    store.markdown.write_text("## N1 · 2026-01-01 · decision · superseded by N9\nEmail goes through SES.\n", encoding="utf-8")
    q = encoder.query(["email"])[0]
    assert [n.id for n in store.search(q, "email", k=3).notes] == ["N1"]


def test_symlinked_notes_file_stays_a_symlink(tmp_path, encoder):
    store = NoteStore(tmp_path / "p", "p", encoder=encoder)
    store.folder.mkdir(parents=True)
    target = tmp_path / "repo-notes.md"
    target.write_text("# kept in the repo\n", encoding="utf-8")
    store.markdown.symlink_to(target)
    store.add([Note("", "2026-01-01", "context", "one")])
    assert store.markdown.is_symlink() and "one" in target.read_text(encoding="utf-8")


def test_add_appends_and_leaves_every_existing_line_byte_for_byte(tmp_path, encoder):
    store = NoteStore(tmp_path, encoder=encoder)
    hand = (
        "# my notes\r\n\r\nwritten by hand   \r\n\r\n"
        "## N01 · 2026-06-02 · decision\r\nPayments go through Stripe for the EU shop.\r\n\r\n\r\n"
        "## N02 · 2026-06-03 · context · session abc-1\r\nThe staging DB is refreshed on Mondays.  \r\n"
    )
    store.markdown.write_bytes(hand.encode("utf-8"))
    (new,) = store.add([Note("", "2026-09-01", "decision",
                             "Payments moved from Stripe to Adyen for the EU shop.", session="s-2")])
    after = store.markdown.read_bytes().decode("utf-8")
    before_lines, after_lines = hand.split("\r\n"), after.split("\r\n")
    changed = [i for i, (a, b) in enumerate(zip(before_lines, after_lines)) if a != b]
    assert all(before_lines[i].startswith("## N01") for i in changed)  # only a superseded header
    assert after.startswith(hand.split("## N01")[0]) and "\n" not in after.replace("\r\n", "")
    assert after.endswith(f"## {new.id} · 2026-09-01 · decision · session s-2\r\n"
                          "Payments moved from Stripe to Adyen for the EU shop.\r\n")
    assert [n.session for n in store.notes()] == [None, "abc-1", "s-2"]


def test_headings_above_the_first_note_are_the_users(tmp_path, encoder):
    store = NoteStore(tmp_path, encoder=encoder)
    store.markdown.write_text("# notes\n## About this file\nmine\n\n## N01 · 2026-06-02 · decision\nok\n", encoding="utf-8")
    (new,) = store.add([Note("", "2026-06-03", "context", "Staging is wiped on Sundays.")])
    assert store.markdown.read_text(encoding="utf-8").startswith("# notes\n## About this file\nmine\n\n## N01")
    assert [n.id for n in store.notes()] == ["N01", new.id]
