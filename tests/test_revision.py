"""The reviser: line operations applied exactly, refused whole, logged, undone; the embedded reviser."""

from __future__ import annotations

import json
import multiprocessing

import numpy as np
import pytest

from memsift.classifiers.encoders import HashingEncoder
from memsift.notes import Note, NoteStore, parse_markdown, text_hash
from memsift.supersession import link_superseded
from memsift.revision import (
    Delete, Replace, RevisionError, Supersede, apply_ops, history, parse_ops, propose, revise, snapshot, undo,
)

SHOP = """\
# memsift notes: shop

<!-- free text above the notes stays as it is -->

## N001 · 2026-01-01 · decision
Payments go through Stripe.

## N002 · 2026-02-01 · constraint · session s1
The geocoding API allows 2,500 calls per day.

## N003 · 2026-03-01 · decision · session s1
We deploy with Helm charts on the k3s cluster.
Staging first, then production.
"""
LINES = SHOP.splitlines()


def line(n: int) -> str:
    return LINES[n - 1]


@pytest.fixture
def store(tmp_path, encoder):
    """A store whose notes.md is `SHOP`, written byte for byte: N001 written by hand, N002 and
    N003 captured (only captured notes may be rewritten by a reviser)."""
    s = NoteStore(tmp_path / "shop", "shop", encoder=encoder)
    s.folder.mkdir()
    s.markdown.write_bytes(SHOP.encode())
    return s


def write(store, text: str) -> None:
    store.markdown.write_bytes(text.encode())


def with_line(n: int, text: str) -> list[str]:
    return LINES[: n - 1] + [text] + LINES[n:]


@pytest.mark.parametrize(
    "op, expected",
    [
        (Replace(9, line(9), "The geocoding API allows 5,000 calls per day."),
         with_line(9, "The geocoding API allows 5,000 calls per day.")),
        (Delete(12, line(12)), LINES[:11] + LINES[12:]),
        (Supersede("N001", "N003"), with_line(5, "## N001 · 2026-01-01 · decision · superseded by N003")),
    ],
)
def test_ops_touch_only_the_lines_they_name(store, op, expected):
    rev = revise(store, [op], backend="test")
    assert store.markdown.read_bytes().decode().splitlines(keepends=True) == [x + "\n" for x in expected]
    assert (rev.backend, rev.ops, rev.sha_after) == ("test", [op.as_dict()], snapshot(store)[1])


def test_revised_file_is_reindexed(store, encoder):
    revise(store, [Supersede("N002", "N003")], backend="test")
    query = "how many geocoding calls per day?"
    hits = store.search(encoder.query([query])[0], query, k=3)
    assert [n.id for n in hits.notes] and "N002" not in [n.id for n in hits.notes]


def test_crlf_and_missing_final_newline_are_kept(store):
    text = SHOP.replace("\n", "\r\n").removesuffix("\r\n")
    write(store, text)
    revise(store, [Replace(13, line(13), "Production only."), Delete(12, line(12)), Replace(2, "", "")], backend="test")
    expected = text.splitlines(keepends=True)
    expected[12], expected[11] = "Production only.", None
    assert store.markdown.read_bytes() == "".join(x for x in expected if x is not None).encode()


def test_a_bom_is_kept(store):
    write(store, "\ufeff" + SHOP)
    revise(store, [Replace(9, line(9), "The geocoding API allows 5,000 calls per day.")], backend="test")
    assert store.markdown.read_bytes() == ("\ufeff" + SHOP.replace(line(9), "The geocoding API allows 5,000 calls per day.")).encode()


@pytest.mark.parametrize(
    "ops, reason",
    [
        ([Replace(9, "The geocoding API allows 1 call per day.", "x")], r"line 9 reads"),
        ([Delete(99, "")], r"line 99 does not exist \(the file has 13 lines\)"),
        ([Delete(0, "")], r"line 0 does not exist"),
        ([Replace(9, line(9), "a"), Delete(9, line(9))], r"op 2 .*line 9 is already changed by op 1"),
        ([Replace(9, line(9), "one\ntwo")], r"one line"),
        ([Replace(9, line(9), "one\u2028two")], r"one line"),
        ([Delete(8, line(8))], r"deletes the header of N002 but not its line 9"),
        ([Delete(8, line(8)), Delete(9, line(9)), Replace(10, "", "stray text")], r"but not its line 10"),
        ([Replace(8, line(8), "## N002 2026-02-01 constraint")], r"not a note header"),
        ([Replace(8, line(8), "## N002 · 2026-02-01 · idea · session s1")], r"kind 'idea'"),
        ([Replace(8, line(8), "## N009 · 2026-02-01 · constraint · session s1")], r"rename note N002 to N009"),
        ([Replace(8, line(8), "N002: geocoding")], r"turn the header of N002 into text"),
        ([Replace(9, line(9), "## N004 · 2026-02-01 · context")], r"cannot add notes"),
        ([Replace(9, line(9), "## N001 · 2026-02-01 · context")], r"cannot add notes"),
        ([Delete(9, line(9))], r"N002 would be left with no text"),
        ([Supersede("N009", "N001")], r"there is no note N009"),
        ([Supersede("N001", "N009")], r"there is no note N009"),
        ([Supersede("N001", "N001")], r"cannot supersede itself"),
        ([Supersede("N001", "N003"), Supersede("N003", "N001")], r"cycle"),
        ([Supersede("N001", "N003")] + [Delete(n, line(n)) for n in (11, 12, 13)], r"N003 does not exist after"),
        ([Replace(8, line(8), line(8) + " · superseded by N002")], r"cannot supersede itself"),
    ],
)
def test_invalid_ops_are_refused_and_nothing_changes(store, ops, reason):
    with pytest.raises(RevisionError, match=reason):
        revise(store, ops, backend="test")
    assert store.markdown.read_bytes() == SHOP.encode()
    assert history(store) == []
    with pytest.raises(RevisionError, match=reason):  # the pure function says the same
        apply_ops(SHOP, ops)


def test_supersede_refuses_notes_already_superseded(store):
    revise(store, [Supersede("N001", "N003")], backend="test")
    text, _ = snapshot(store)
    with pytest.raises(RevisionError, match="N001 is already superseded by N003"):
        apply_ops(text, [Supersede("N001", "N002")])
    with pytest.raises(RevisionError, match="N001 is itself superseded by N003"):
        apply_ops(text, [Supersede("N002", "N001")])
    with pytest.raises(RevisionError, match="N001 is superseded by N003, which this deletes"):
        apply_ops(text, [Delete(n, line(n)) for n in (11, 12, 13)])


def test_a_file_that_does_not_parse_is_not_revised(store):
    write(store, SHOP + "\n## broken header\n")
    with pytest.raises(RevisionError, match="does not parse.*fix it by hand"):
        revise(store, [Delete(13, line(13))], backend="test")


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("Sure! I would delete line 9.", r"not JSON"),
        ('{"op": "delete", "line": 9, "old": "x"}', r"a JSON dict, not a list"),
        ('[{"op": "rename", "line": 9}]', r"item 1 .* is not an operation"),
        ('["delete line 9"]', r"is not an operation"),
        ('[{"op": "delete", "line": 9}]', r"delete takes exactly line, old"),
        ('[{"op": "delete", "line": 9, "old": "x", "why": "dup"}]', r"takes exactly"),
        ('[{"op": "delete", "line": "9", "old": "x"}]', r"line must be an integer"),
        ('[{"op": "delete", "line": true, "old": "x"}]', r"line must be an integer"),
        ('[{"op": "supersede", "note": "N001", "by": 3}]', r"by must be a string"),
    ],
)
def test_replies_that_are_not_ops_change_nothing(store, reply, reason):
    with pytest.raises(RevisionError, match=reason):
        revise(store, parse_ops(reply), backend="llm")
    assert store.markdown.read_bytes() == SHOP.encode()


def test_parse_ops_reads_bare_and_fenced_json():
    ops = [Delete(9, "x"), Replace(1, "a", "b"), Supersede("N001", "N003")]
    reply = json.dumps([op.as_dict() for op in ops])
    assert parse_ops(reply) == ops
    assert parse_ops(f"Here are the edits:\n```json\n{reply}\n```\nDone.") == ops
    assert parse_ops("[]") == []


def test_empty_ops_write_nothing(store):
    assert revise(store, [], backend="test") is None
    assert revise(store, [Replace(2, "", "")], backend="test") is None
    assert history(store) == [] and not (store.folder / "revisions").exists()


def test_log_records_the_revision(store):
    rev = revise(store, [Delete(13, line(13))], backend="embedded")
    (entry,) = [json.loads(x) for x in (store.folder / "revisions.jsonl").read_text().splitlines()]
    assert entry["id"] == rev.id == "R0001" and entry["action"] == "revise" and entry["backend"] == "embedded"
    assert entry["ops"] == [{"op": "delete", "line": 13, "old": line(13)}]
    assert entry["time"].endswith("+00:00")
    assert (store.folder / entry["saved"]).read_bytes() == SHOP.encode()


def test_undo_restores_bytes_and_walks_back(store):
    write(store, SHOP.replace("\n", "\r\n"))
    first = store.markdown.read_bytes()
    revise(store, [Delete(13, line(13))], backend="test")
    second = store.markdown.read_bytes()
    revise(store, [Supersede("N001", "N003")], backend="test")
    assert undo(store).undoes == "R0002"
    assert store.markdown.read_bytes() == second
    assert undo(store).undoes == "R0001"
    assert store.markdown.read_bytes() == first
    with pytest.raises(RevisionError, match="no revision to undo"):
        undo(store)
    assert [(e.id, e.action, e.undoes) for e in history(store)] == [
        ("R0001", "revise", None), ("R0002", "revise", None), ("R0003", "undo", "R0002"), ("R0004", "undo", "R0001")]


def test_undo_after_a_hand_edit_keeps_the_edit(store):
    revise(store, [Supersede("N001", "N003")], backend="test")
    revise(store, [Delete(13, line(13))], backend="test")
    edited = store.markdown.read_bytes() + b"A line typed by hand.\n"
    store.markdown.write_bytes(edited)
    assert undo(store).undoes == "R0002"  # the deleted line goes back where it stood
    assert undo(store, "R0001").undoes == "R0001"  # the link goes, the rest stays
    assert store.markdown.read_bytes() == (SHOP + "A line typed by hand.\n").encode()


def test_undo_of_an_older_revision_keeps_the_later_ones(store):
    revise(store, [Supersede("N001", "N003")], backend="test")
    revise(store, [Replace(9, line(9), "The geocoding API allows 5,000 calls per day.")], backend="test")
    undo(store, "R0001")
    assert store.markdown.read_bytes() == SHOP.replace(line(9), "The geocoding API allows 5,000 calls per day.").encode()
    with pytest.raises(RevisionError, match="R0001 is already undone"):
        undo(store, "R0001")


def test_undo_refuses_when_the_revised_line_was_edited_since(store):
    revise(store, [Replace(9, line(9), "The geocoding API allows 5,000 calls per day.")], backend="test")
    edited = store.markdown.read_bytes().replace(b"5,000", b"6,000")
    store.markdown.write_bytes(edited)
    with pytest.raises(RevisionError, match=r"cannot undo R0001 .*changed since.*revisions/[0-9a-f]{40}\.md"):
        undo(store)
    assert store.markdown.read_bytes() == edited
    assert len(history(store)) == 1


def test_undo_puts_a_deleted_note_back_after_a_later_capture(store):
    text, _ = snapshot(store)
    write(store, text + "\n## N004 · 2026-03-02 · decision · session s2\nWe deploy with Helm charts on the k3s cluster.\n"
                        "Staging first, then production.\n")
    revise(store, propose(snapshot(store)[0]), backend="embedded")  # N004 repeats N003: it goes
    assert [n.id for n in parse_markdown(snapshot(store)[0]).notes] == ["N001", "N002", "N003"]
    store.add([Note("", "2026-04-01", "context", "The shop's CDN is Bunny.")])
    undo(store, "R0001")
    assert [n.id for n in parse_markdown(snapshot(store)[0]).notes] == ["N001", "N002", "N003", "N004", "N005"]


def test_a_torn_log_line_is_skipped(store, caplog):
    revise(store, [Delete(13, line(13))], backend="test")
    with open(store.folder / "revisions.jsonl", "a") as fh:
        fh.write('{"id": "R0002", "act')  # a crash in the middle of an append
    assert undo(store).id == "R0002"
    assert store.markdown.read_bytes() == SHOP.encode()
    assert "revisions.jsonl:2: skipped" in caplog.text
    assert [(e.id, e.action) for e in history(store)] == [("R0001", "revise"), ("R0002", "undo")]


def test_a_missing_notes_file_is_refused(tmp_path, encoder):
    store = NoteStore(tmp_path / "none", "none", encoder=encoder)
    with pytest.raises(RevisionError, match="does not exist"):
        revise(store, [Delete(1, "")], backend="test")


def test_expected_sha_mismatch_is_refused(store):
    text, sha = snapshot(store)
    revise(store, [Delete(13, line(13))], backend="test", expected_sha=sha)
    after = store.markdown.read_bytes()
    with pytest.raises(RevisionError, match="changed since these ops were proposed"):
        revise(store, [Replace(9, line(9), "x")], backend="test", expected_sha=sha)
    assert store.markdown.read_bytes() == after


def notes_file(*notes: tuple) -> str:
    """A notes file of `(id, date, kind, text[, session])` tuples."""
    out = ["# memsift notes: p", ""]
    for nid, date, kind, text, *session in notes:
        out += [f"## {nid} · {date} · {kind}" + "".join(f" · session {x}" for x in session), text, ""]
    return "\n".join(out[:-1]) + "\n"


def test_reviser_deletes_only_captured_repeats(store):
    text = notes_file(
        ("N001", "2026-01-01", "decision", "Payments go through Stripe."),
        ("N002", "2026-01-02", "constraint", "The geocoding API allows 2,500 calls per day.", "s1"),
        ("N003", "2026-01-03", "decision", "payments   go through STRIPE.", "s2"),  # a captured repeat
        ("N004", "2026-01-04", "constraint", "The geocoding API allows 2,500 calls per day.", "s3"),  # idem
        ("N005", "2026-01-05", "constraint", "The geocoding API allows 2,500 calls per day!"),  # near, by hand
        ("N006", "2026-01-06", "decision", "Payments go through Stripe."),  # a repeat, by hand
    )
    write(store, text)
    ops = propose(text)
    assert {op.old for op in ops if op.old.startswith("## ")} == {"## N003 · 2026-01-03 · decision · session s2",
                                                                  "## N004 · 2026-01-04 · constraint · session s3"}
    revise(store, ops, backend="embedded")
    after, _ = snapshot(store)
    assert [n.id for n in parse_markdown(after).notes] == ["N001", "N002", "N005", "N006"]
    assert propose(after) == []


def test_a_hand_written_repeat_is_kept_over_the_captured_one():
    text = notes_file(("N001", "2026-01-01", "decision", "Payments go through Stripe.", "s1"),
                      ("N002", "2026-01-02", "decision", "Payments go through Stripe."))
    assert propose(text) == [Delete(3, "## N001 · 2026-01-01 · decision · session s1"),
                             Delete(4, "Payments go through Stripe."), Delete(5, "")]


@pytest.mark.parametrize("old, new", [
    ("Staging runs in AWS region eu-west-1.", "Staging runs in AWS region us-east-1."),
    ("Access tokens expire after one hour.", "Access tokens expire after one day."),
    ("Release branches are cut from main.", "Release branches are cut from develop."),
    ("The geocoding API allows 2,500 calls per day.", "The geocoding API allows 5,000 calls per day."),
    ("生产环境部署在法兰克福。", "生产环境部署在都柏林。"),
])
@pytest.mark.parametrize("sessions", [((), ()), (("s1",), ("s2",)), (("s1",), ())])
def test_a_value_changed_supersedes_and_is_never_deleted(old, new, sessions, e5, tmp_path):
    text = notes_file(("N001", "2026-10-01", "context", old, *sessions[0]),
                      ("N002", "2026-12-01", "context", new, *sessions[1]))
    vectors = dict(zip(["N001", "N002"], e5.passage([old, new])))
    assert propose(text, vectors) == []  # a link from a value changed is made by `notes add`, where the user sees it
    linked = link_superseded(parse_markdown(text).notes, {text_hash(t): v for t, v in zip([old, new], vectors.values())},
                             new_ids={"N002"})
    assert [n.superseded_by for n in linked] == ["N002", None]
    store = NoteStore(tmp_path / "p", "p", encoder=e5)
    store.folder.mkdir()
    write(store, text)
    for nid, line_no in (("N001", 3), ("N002", 6)):  # deleting either note is refused, whoever proposes it
        f = text.splitlines()
        with pytest.raises(RevisionError, match="repeats no note that stays|written by hand"):
            revise(store, [Delete(k, f[k - 1]) for k in (line_no, line_no + 1)], backend="llm")
    assert store.markdown.read_bytes() == text.encode()


def test_reviser_tidies_the_end_of_the_file_and_moves_links(store):
    text = notes_file(
        ("N001", "2026-01-01", "decision", "Payments go through Stripe."),
        ("N002", "2026-01-02", "decision", "Payments go through Adyen."),
        ("N003", "2026-01-03", "decision", "Payments go through Stripe.", "s1"),
    ).replace("## N002 · 2026-01-02 · decision", "## N002 · 2026-01-02 · decision · superseded by N003")
    after = apply_ops(text, propose(text))
    assert after == notes_file(
        ("N001", "2026-01-01", "decision", "Payments go through Stripe."),
        ("N002", "2026-01-02", "decision", "Payments go through Adyen."),
    ).replace("## N002 · 2026-01-02 · decision", "## N002 · 2026-01-02 · decision · superseded by N001")


def test_reviser_links_supersession_from_vectors():
    notes = [("N001", "2026-01-01", "decision", "Payments go through Stripe for the EU shop."),
             ("N002", "2026-01-02", "constraint", "The geocoding API allows 2,500 calls per day."),
             ("N003", "2026-03-01", "decision", "Payments moved from Stripe to Mollie for the EU shop.")]
    text = notes_file(*notes)
    vectors = {"N001": np.array([1.0, 0.0, 0.1]), "N002": np.array([0.0, 1.0, 0.0]),
               "N003": np.array([0.9, 0.0, 0.42])}  # N001 . N003: cos 0.94, a neighbour but no duplicate
    assert propose(text) == []
    assert propose(text, vectors) == [Supersede("N001", "N003")]
    vectors["N003"] = np.array([1.0, 0.0, 0.15])  # cos 0.999, but N003 says something changed
    assert propose(text, vectors) == [Supersede("N001", "N003")]
    after = apply_ops(text, propose(text, vectors))
    assert propose(after, vectors) == []


def _revise_in_process(folder, op, expected_sha, barrier, results):
    store = NoteStore(folder, "shop", encoder=HashingEncoder())
    barrier.wait()
    try:
        revise(store, [op], backend="race", expected_sha=expected_sha)
        results.put("ok")
    except RevisionError as exc:
        results.put(f"refused: {exc}")


@pytest.mark.parametrize("pinned", [False, True])
def test_two_processes_revise_at_once(store, pinned):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    sha = snapshot(store)[1] if pinned else None
    ops = [Replace(9, line(9), "The geocoding API allows 5,000 calls per day."), Delete(13, line(13))]
    procs = [ctx.Process(target=_revise_in_process, args=(store.folder, op, sha, barrier, results)) for op in ops]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = sorted(results.get(timeout=5) for _ in procs)
    if pinned:  # both proposed from one text: the second to get the lock sees it changed
        assert outcomes[0] == "ok" and outcomes[1].startswith("refused: ") and "changed since" in outcomes[1]
    else:  # different lines: each applies on top of the other
        assert outcomes == ["ok", "ok"]
    text, _ = snapshot(store)
    parse_markdown(text, strict=True)
    assert len(history(store)) == outcomes.count("ok")
    for _ in range(outcomes.count("ok")):
        undo(store)
    assert store.markdown.read_bytes() == SHOP.encode()


@pytest.mark.parametrize("new, reason", [
    ("## N002 · 2026-02-01 · context · session s1", r"only in its 'superseded by' link"),  # the kind
    ("## N002 · 2026-02-01 · constraint", r"only in its 'superseded by' link"),  # the session: now "by hand"
    ("## N002 · 2026-02-01 · constraint · session s1 · superseded by N001", r"N001 \(2026-01-01\) is older"),
])
def test_a_reviser_changes_a_header_only_in_its_link(store, new, reason):
    with pytest.raises(RevisionError, match=reason):
        revise(store, [Replace(8, line(8), new)], backend="llm")
    assert store.markdown.read_bytes() == SHOP.encode()


def test_no_reviser_supersedes_an_incident(store):
    write(store, SHOP.replace("## N002 · 2026-02-01 · constraint", "## N002 · 2026-02-01 · incident"))
    with pytest.raises(RevisionError, match="N002 is an incident"):
        revise(store, [Supersede("N002", "N003")], backend="llm")


def test_retire_marks_the_header_only_and_undo_takes_it_back(store):
    from memsift.revision import Retire, commit

    with store.lock():
        text, sha = snapshot(store)
        op = Retire("N003", "2026-12-01", "we moved off k3s")
        commit(store, text, sha, apply_ops(text, [op]), action="revise", backend="mcp", ops=[op])
    after = store.markdown.read_text()
    assert after == SHOP.replace("## N003 · 2026-03-01 · decision · session s1",
                                 "## N003 · 2026-03-01 · decision · session s1 · retired 2026-12-01")
    (n3,) = [n for n in store.notes() if n.id == "N003"]
    assert n3.retired == "2026-12-01" and not n3.active
    assert history(store)[-1].ops[0]["reason"] == "we moved off k3s"
    undo(store)
    assert store.markdown.read_text() == SHOP


def test_retire_is_refused_to_revisers_and_for_a_retired_or_superseded_note(store):
    from memsift.revision import Retire

    with pytest.raises(RevisionError, match="no reviser retires"):
        revise(store, [{"op": "retire", "note": "N001", "date": "2026-12-01", "reason": "x"}], backend="llm")
    text = SHOP.replace("## N001 · 2026-01-01 · decision", "## N001 · 2026-01-01 · decision · superseded by N003")
    with pytest.raises(RevisionError, match="superseded by N003"):
        apply_ops(text, [Retire("N001", "2026-12-01", "x")])
    retired = SHOP.replace("## N001 · 2026-01-01 · decision", "## N001 · 2026-01-01 · decision · retired 2026-11-01")
    with pytest.raises(RevisionError, match="already retired"):
        apply_ops(retired, [Retire("N001", "2026-12-01", "x")])
    with pytest.raises(RevisionError, match="is retired"):
        apply_ops(retired, [Supersede("N001", "N003")])
    assert store.markdown.read_text() == SHOP
