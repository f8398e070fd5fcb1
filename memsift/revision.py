"""Revise a project's notes file by line operations, with an audit log and undo.

A reviser (the deterministic `propose` here, or an LLM whose reply goes through `parse_ops`)
proposes edits as operations on lines of the file; `apply_ops` validates every one before it
applies any, and `revise` writes the result under the store's lock. A line that no operation
names stays byte for byte, with its line ending, and so does a missing final newline.

Each revision is one JSON line of `<folder>/revisions.jsonl`. The text before it is first
saved as `<folder>/revisions/<sha1>.md`, then the notes file is replaced. `undo` restores
those bytes exactly, and only if the file has not changed since, so it never loses an edit.

Lines are numbered from 1 as `parse_markdown` counts them (`str.splitlines`), after any BOM.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import numpy as np

from .classifiers.features import content_tokens
from .notes import Note, NotesFile, NotesFormatError, NoteStore, atomic_write, parse_markdown, text_hash
from .supersession import link_superseded, says_change

log = logging.getLogger("memsift")

#: Token-set Jaccard (on `content_tokens`: case folded, stemmed, stop words dropped) at which
#: two notes of one kind are one note. 0.9 allows one content word in ten to differ: a typo
#: or a reworded aside, not a new fact. Short notes must match exactly.
NEAR_JACCARD = 0.9
#: Cosine at which two notes of one kind are one note. On e5-small-q4, paraphrases of one
#: sentence scored 0.95-0.999, different facts on one subject up to 0.966 ("Postgres 15" /
#: "Postgres 16"): deleting a note costs more than keeping a duplicate, so we stay above.
NEAR_COSINE = 0.97
# Both measures miss what a near duplicate must also share (`_same_note`): its numbers, its
# negations (content_tokens drops "not"), a change cue, and the order of its words ("Mollie
# chosen over Stripe" and the reverse scored a cosine of 0.994 on e5).
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|without|cannot|\w+n't|ne|pas|jamais|aucun\w*|sans|nicht"
    r"|kein\w*|nie|niemals|ohne|nunca|nada|ningun\w*|sin)\b|不|没|別|别|非|无",
    re.IGNORECASE,
)
_FENCE = re.compile(r"```(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL)


class RevisionError(ValueError):
    """A revision or undo was refused; the notes file is unchanged and the message says why."""


class _Op:
    op: ClassVar[str]

    def as_dict(self) -> dict[str, object]:
        """The JSON form, e.g. `{"op": "delete", "line": 7, "old": "..."}`."""
        return {"op": self.op, **asdict(self)}  # type: ignore[call-overload]

    def __str__(self) -> str:
        return json.dumps(self.as_dict(), ensure_ascii=False)


@dataclass(frozen=True)
class Replace(_Op):
    """Replace line `line` (1-based), whose text is `old`, by `new` (one line, no newline)."""

    line: int
    old: str
    new: str
    op: ClassVar[str] = "replace"


@dataclass(frozen=True)
class Delete(_Op):
    """Delete line `line` (1-based), whose text is `old`."""

    line: int
    old: str
    op: ClassVar[str] = "delete"


@dataclass(frozen=True)
class Supersede(_Op):
    """Mark note `note` superseded by the active note `by` (appended to `note`'s header)."""

    note: str
    by: str
    op: ClassVar[str] = "supersede"


Op = Replace | Delete | Supersede
_OPS: dict[str, type[Op]] = {cls.op: cls for cls in (Replace, Delete, Supersede)}


@dataclass(frozen=True)
class Revision:
    """One entry of the audit log: a revision, or (`action == "undo"`) the undo of `undoes`.

    `saved` is the path, relative to the store's folder, of the file's text before it.
    """

    id: str
    time: str
    action: str
    backend: str
    ops: list[dict[str, object]]
    sha_before: str
    sha_after: str
    saved: str
    undoes: str | None = None


def parse_ops(reply: str) -> list[Op]:
    """The operations in an LLM reply: a JSON array, bare or inside a ```json fence.

    :raises RevisionError: the reply is not JSON, not a list, or an item is not a valid
        operation (unknown `op`, missing or extra keys, a value of the wrong type).
    """
    fence = _FENCE.search(reply)
    try:
        data = json.loads(fence[1] if fence else reply)
    except json.JSONDecodeError as exc:
        raise RevisionError(f"the reply is not JSON ({exc}); nothing was changed") from None
    if not isinstance(data, list):
        raise RevisionError(f"the reply is a JSON {type(data).__name__}, not a list of operations")
    return [_as_op(item, k) for k, item in enumerate(data, 1)]


def _as_op(item: object, k: int) -> Op:
    if isinstance(item, _Op):
        return item  # type: ignore[return-value]
    if not isinstance(item, Mapping) or item.get("op") not in _OPS:
        raise RevisionError(f"item {k} ({item!r:.80}) is not an operation: 'op' must be one of {', '.join(_OPS)}")
    cls = _OPS[item["op"]]
    want = {f.name: int if f.type == "int" else str for f in fields(cls)}
    got = {key: value for key, value in item.items() if key != "op"}
    if set(got) != set(want):
        raise RevisionError(f"item {k}: {cls.op} takes exactly {', '.join(want)}, got {', '.join(got) or 'nothing'}")
    for key, typ in want.items():
        if type(got[key]) is not typ:  # `is`, so that true is not a line number
            raise RevisionError(f"item {k}: {key} must be {'an integer' if typ is int else 'a string'}, got {got[key]!r}")
    return cls(**got)


@dataclass(frozen=True)
class _File:
    """A notes file split into lines, with each note's span of line indices (header first)."""

    bom: str
    lines: list[str]  # with their endings
    content: list[str]  # without
    parsed: NotesFile
    spans: dict[str, range]

    @classmethod
    def read(cls, text: str) -> _File:
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        lines = text[len(bom):].splitlines(keepends=True)
        content = [line.splitlines()[0] for line in lines]
        try:
            parsed = parse_markdown(text, strict=True)
        except NotesFormatError as exc:
            raise RevisionError(f"the notes file does not parse ({exc}); fix it by hand first") from None
        heads = [i for i, c in enumerate(content) if c.startswith("## ")] + [len(lines)]
        spans = {n.id: range(heads[k], heads[k + 1]) for k, n in enumerate(parsed.notes)}
        return cls(bom, lines, content, parsed, spans)


def apply_ops(text: str, ops: Iterable[Op | Mapping[str, object]]) -> str:
    """`text` (a whole notes file) with `ops` applied, every op validated before any is applied.

    Only the lines named change, so the preamble changes only where an op names its lines.

    :raises RevisionError: naming the op and the reason: a line out of range, an `old` that
        is not the line's current text, two ops on one line, a line break in `new`, a header
        broken, renamed, added, or deleted without the rest of its note, a note left empty, a
        link to a note that is unknown, deleted, itself or circular; or `text` does not parse.
    """
    checked = [_as_op(op, k) for k, op in enumerate(ops, 1)]
    f = _File.read(text)
    notes = {n.id: n for n in f.parsed.notes}
    edits: dict[int, tuple[str | None, int]] = {}  # line index -> (new text or None, op number)
    for k, op in enumerate(checked, 1):
        try:
            i, new = _check_op(op, f, notes)
        except RevisionError as exc:
            raise RevisionError(f"op {k} {op}: {exc}") from None
        if i in edits:
            raise RevisionError(f"op {k} {op}: line {i + 1} is already changed by op {edits[i][1]}")
        edits[i] = (new, k)

    def fail(i: int, reason: str) -> RevisionError:
        return RevisionError(f"op {edits[i][1]} {checked[edits[i][1] - 1]}: {reason}")

    text_of = [edits[i][0] if i in edits else c for i, c in enumerate(f.content)]
    for nid, span in f.spans.items():
        left = [i for i in span if (t := text_of[i]) is not None and t.strip()]
        if text_of[span.start] is None and left:
            raise fail(span.start, f"deletes the header of {nid} but not its line {left[0] + 1}, which would "
                                   f"join the text above; delete every line of {nid}, or none")
    out = f.bom + "".join(t + line[len(c):] for t, c, line in zip(text_of, f.content, f.lines, strict=True) if t is not None)
    try:
        after = {n.id: n for n in parse_markdown(out, strict=True).notes}
    except NotesFormatError as exc:  # pragma: no cover (each op was checked on its own)
        raise RevisionError(f"the revised file would not parse ({exc}); nothing was changed") from None
    for n in after.values():
        head, was = f.spans[n.id].start, notes[n.id].superseded_by
        if not n.text and notes[n.id].text:
            raise fail(max(i for i in f.spans[n.id] if i in edits), f"{n.id} would be left with no text; delete its header too")
        if n.superseded_by and n.superseded_by != was:
            target: str | None = n.superseded_by
            seen = {n.id}
            while target in after and target not in seen:
                seen.add(target)
                target = after[target].superseded_by
            if n.superseded_by == n.id:
                raise fail(head, "a note cannot supersede itself")
            if n.superseded_by not in after:
                raise fail(head, f"{n.superseded_by} does not exist after this revision")
            if target in seen:
                raise fail(head, f"the 'superseded by' links would form a cycle through {n.id}")
        elif was in notes and was not in after:
            raise fail(f.spans[was].start, f"{n.id} is superseded by {was}, which this deletes; "
                                           f"change {n.id}'s header or delete {n.id} too")
    return out


def _check_op(op: Op, f: _File, notes: dict[str, Note]) -> tuple[int, str | None]:
    """The line index `op` changes and its new text (None: deleted), or `RevisionError`."""
    if isinstance(op, Supersede):
        for nid in (op.note, op.by):
            if nid not in notes:
                raise RevisionError(f"there is no note {nid}")
        if op.note == op.by:
            raise RevisionError("a note cannot supersede itself")
        for nid, role in ((op.note, "already"), (op.by, "itself")):
            if not notes[nid].active:
                raise RevisionError(f"{nid} is {role} superseded by {notes[nid].superseded_by}")
        i = f.spans[op.note].start
        return i, f.content[i].rstrip() + f" · superseded by {op.by}"
    if not 1 <= op.line <= len(f.content):
        raise RevisionError(f"line {op.line} does not exist (the file has {len(f.content)} lines)")
    i = op.line - 1
    if f.content[i] != op.old:
        raise RevisionError(f"line {op.line} reads {f.content[i]!r}, not {op.old!r}")
    if isinstance(op, Delete):
        return i, None
    if op.new.splitlines() not in ([], [op.new]):
        raise RevisionError("new must be one line, without a line break")
    was = next((nid for nid, span in f.spans.items() if span.start == i), None)
    if op.new.startswith("## "):
        try:
            parsed = [n.id for n in parse_markdown(op.new, source="new", strict=True).notes]
        except NotesFormatError as exc:
            raise RevisionError(f"new is not a note header ({exc})") from None
        if len(parsed) != 1:
            raise RevisionError(f"new is not a note header: {op.new!r}")
        (now,) = parsed
        if was != now:
            raise RevisionError(f"new would rename note {was} to {now}" if was else
                                f"new would start a note {now}; a revision cannot add notes")
    elif was is not None:
        raise RevisionError(f"new would turn the header of {was} into text; delete all of {was} instead")
    return i, op.new


def snapshot(store: NoteStore) -> tuple[str, str]:
    """The notes file's text as stored (BOM and line endings kept) and the sha1 of its bytes.

    Propose ops from this text and pass the sha to `revise` as `expected_sha`.

    :raises RevisionError: there is no notes file, or it is not UTF-8.
    """
    try:
        raw = store.markdown.read_bytes()
    except FileNotFoundError:
        raise RevisionError(f"{store.markdown} does not exist") from None
    try:
        return raw.decode("utf-8"), hashlib.sha1(raw).hexdigest()
    except UnicodeDecodeError as exc:
        raise RevisionError(f"{store.markdown} is not UTF-8 ({exc})") from None


def revise(
    store: NoteStore, ops: Iterable[Op | Mapping[str, object]], *, backend: str, expected_sha: str | None = None
) -> Revision | None:
    """Apply `ops` to the store's notes file under its lock, and log the revision.

    `backend` names who proposed the ops (e.g. "embedded"). The index is rebuilt lazily,
    when the store next sees the file's new hash. Returns None, writing nothing, when the
    ops change nothing.

    :raises RevisionError: the file's sha1 is not `expected_sha` (it changed since the ops were
        proposed), or the ops are invalid (see `apply_ops`); the file is then unchanged.
    """
    checked = [_as_op(op, k) for k, op in enumerate(ops, 1)]
    if not checked:
        return None
    with store.lock():
        text, sha = snapshot(store)
        if expected_sha is not None and sha != expected_sha:
            raise RevisionError(f"{store.markdown} changed since these ops were proposed (sha1 {sha[:12]}, "
                                f"expected {expected_sha[:12]}); propose them again from the current file")
        after = apply_ops(text, checked)
        if after == text:
            return None
        return _commit(store, text, sha, after, action="revise", backend=backend, ops=checked)


def undo(store: NoteStore) -> Revision:
    """Restore the notes file as it was before the last revision not yet undone; log the undo.

    :raises RevisionError: there is nothing to undo, or the file changed since that revision
        (by hand or by another revision); the file is then unchanged.
    """
    with store.lock():
        entries = history(store)
        undone = {e.undoes for e in entries if e.action == "undo"}
        pending = [e for e in entries if e.action == "revise" and e.id not in undone]
        if not pending:
            raise RevisionError(f"there is no revision to undo in {store.folder / 'revisions.jsonl'}")
        last, saved = pending[-1], store.folder / pending[-1].saved
        try:
            text, sha = snapshot(store)
        except RevisionError:
            text, sha = "", ""
        if sha != last.sha_after:
            raise RevisionError(
                f"{store.markdown} changed since revision {last.id} of {last.time} (by hand or by another "
                f"revision), and undoing it would lose that change, so nothing was done. The text from before "
                f"{last.id} is in {saved}: compare it with the notes file and copy back what you want.")
        raw = saved.read_bytes()
        if hashlib.sha1(raw).hexdigest() != last.sha_before:
            raise RevisionError(f"{saved} is not the text from before {last.id} (it was edited); nothing was done")
        return _commit(store, text, sha, raw.decode("utf-8"), action="undo", backend=last.backend, undoes=last.id)


def history(store: NoteStore) -> list[Revision]:
    """The audit log, oldest first; a line that cannot be read is skipped with a warning."""
    path = store.folder / "revisions.jsonl"
    if not path.exists():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            out.append(Revision(**json.loads(line)))
        except (ValueError, TypeError) as exc:
            log.warning("%s:%d: skipped (%s)", path, lineno, exc)
    return out


def _commit(
    store: NoteStore, before: str, sha: str, after: str, *, action: str, backend: str,
    ops: Sequence[Op] = (), undoes: str | None = None,
) -> Revision:
    """Save `before`, replace the notes file by `after`, log it; put `before` back if logging fails."""
    saved = f"revisions/{sha}.md"
    if not (store.folder / saved).exists():
        atomic_write(store.folder / saved, before)
    numbers = [int(e.id[1:]) for e in history(store) if re.fullmatch(r"R\d+", e.id)]
    rev = Revision(f"R{max(numbers, default=0) + 1:04d}", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                   action, backend, [op.as_dict() for op in ops], sha, text_hash(after), saved, undoes)
    target = store.markdown.resolve()  # through a symlink, as `NoteStore.add` writes
    atomic_write(target, after)
    try:
        with open(store.folder / "revisions.jsonl", "a+b") as fh:  # appends, whatever the position
            lead = b""
            if fh.seek(0, os.SEEK_END):
                fh.seek(-1, os.SEEK_END)
                lead = b"" if fh.read(1) == b"\n" else b"\n"  # the end of a line torn by a crash
            fh.write(lead + json.dumps(asdict(rev), ensure_ascii=False).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        atomic_write(target, before)  # a change that is not logged could not be undone
        raise
    return rev


def propose(text: str, vectors: Mapping[str, np.ndarray] | None = None) -> list[Op]:
    """The embedded reviser: ops that tidy the notes file `text` (as from `snapshot`).

    Among active notes, oldest first (by date, then place in the file), a note is deleted
    with its whole section when it repeats a note kept before it: the same text up to case
    and spacing, or the same kind, facts (`_same_note`) and a Jaccard >= `NEAR_JACCARD` or a
    cosine >= `NEAR_COSINE`. Links to a deleted note move to its twin. With `vectors` (note id
    -> embedding), `supersession.link_superseded` runs over the remaining active notes and
    each link becomes a `Supersede`. Running it again on the result proposes no deletions.

    :raises RevisionError: `text` does not parse.
    """
    f = _File.read(text)
    active = sorted((n for n in f.parsed.notes if n.active), key=lambda n: (n.date, f.spans[n.id].start))
    unit: dict[str, np.ndarray] = {}
    for n in active:
        v = np.asarray((vectors or {}).get(n.id, 0.0), dtype=np.float32)
        if v.any():
            unit[n.id] = v / np.linalg.norm(v)
    twin: dict[str, str] = {}
    kept: list[Note] = []
    for n in active:
        same = next((k for k in kept if _same_note(k, n, unit)), None)
        if same:
            twin[n.id] = same.id
        else:
            kept.append(n)
    doomed = {i for nid in twin for i in f.spans[nid]}
    i = len(f.lines) - 1
    while i in doomed:
        i -= 1
    if i < len(f.lines) - 1:  # the deletion reaches the end: drop the blank lines it leaves
        while i >= f.spans[f.parsed.notes[0].id].start and not f.content[i].strip():
            doomed.add(i)
            i -= 1
    ops: list[Op] = [Delete(i + 1, f.content[i]) for i in sorted(doomed)]
    for n in f.parsed.notes:
        if n.superseded_by in twin:
            h = f.spans[n.id].start  # only the link changes: other header fields stay as they are
            head = re.sub(r"superseded by +\S+ *$", f"superseded by {twin[n.superseded_by]}", f.content[h])
            ops.append(Replace(h + 1, f.content[h], head))
    rest = [n for n in kept if n.id in unit]
    if len(rest) >= 2:
        linked = link_superseded(rest, {text_hash(n.text): unit[n.id] for n in rest}, new_ids={n.id for n in rest})
        ops += [Supersede(n.id, n.superseded_by) for n in linked if n.superseded_by]
    return ops


def _same_note(a: Note, b: Note, unit: Mapping[str, np.ndarray]) -> bool:
    """Whether `b` repeats `a`: the same text, or a near duplicate that also keeps its numbers,
    negations, change cue and the order of its shared words."""
    x, y = (" ".join(n.text.split()).casefold() for n in (a, b))
    if x == y:
        return True
    if a.kind != b.kind or says_change(x) != says_change(y) or re.findall(r"\d+", x) != re.findall(r"\d+", y):
        return False
    order_x, order_y = ([t for w in s.split() for t in sorted(content_tokens(w))] for s in (x, y))
    shared = set(order_x) & set(order_y)
    same_order = [t for t in dict.fromkeys(order_x) if t in shared] == [t for t in dict.fromkeys(order_y) if t in shared]
    if not same_order or _NEGATION.findall(x) != _NEGATION.findall(y):
        return False
    if a.id in unit and b.id in unit and float(unit[a.id] @ unit[b.id]) >= NEAR_COSINE:
        return True
    tx, ty = content_tokens(a.text), content_tokens(b.text)
    return bool(tx) and len(tx & ty) / len(tx | ty) >= NEAR_JACCARD
