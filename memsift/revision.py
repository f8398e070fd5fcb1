"""Revise a project's notes file by line operations, with an audit log and undo.

A reviser (the deterministic `propose` here, or an LLM whose reply goes through `parse_ops`)
proposes edits as operations on lines of the file; `apply_ops` validates every one before it
applies any, and `revise` writes the result under the store's lock. A line that no operation
names stays byte for byte, with its line ending, and so does a missing final newline.

Whoever proposes, `revise` never lets an automatic step delete or rewrite what the user
wrote (`protect`): a note added by hand (no `session` in its header) and the text above the
first note are never deleted or rewritten, and a captured note is deleted only when it
repeats, word for word, a note that stays. A note that changes a value supersedes the older
one (a link in its header), it never deletes it.

Each revision is one JSON line of `<folder>/revisions.jsonl`. The text before it is first
saved as `<folder>/revisions/<sha1>.md`, then the notes file is replaced. `undo` restores
those bytes exactly when the file has not changed since; when it has (a note added, a line
edited by hand, a later revision), it applies the revision's inverse to the file as it is
now (links removed, lines put back, deleted notes re-inserted where they stood) and refuses,
changing nothing, only where a line the revision wrote was changed since.

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
from pathlib import Path
from typing import ClassVar, ContextManager, Protocol

import numpy as np

from .notefile import Note, NotesFile, NotesFormatError, atomic_write, decode, keep_serials, parse_markdown, text_hash
from .supersession import EVENT_KINDS, MIN_COSINE, link_superseded

log = logging.getLogger("memsift")

#: The link at the end of a superseded note's header (before a trailing status, if any).
_LINK = re.compile(r" +· +superseded by +[^\s()]+(?=(?: +· +unverified +\([^()]*\))? *$)")
#: The verifier's status, which stays last in a header (`notefile._HEADER`).
_STATUS = re.compile(r"(?: +· +unverified +\([^()]*\))? *$")
_FENCE = re.compile(r"```(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL)


class RevisionError(ValueError):
    """A revision or undo was refused; the notes file is unchanged and the message says why."""


class Store(Protocol):
    """What revision needs of a notes store (`notes.NoteStore` is one): its folder, its
    Markdown file and its write lock."""

    folder: Path
    markdown: Path

    def lock(self) -> ContextManager[object]: ...


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


@dataclass(frozen=True)
class Retire(_Op):
    """Mark note `note` retired on `date` (YYYY-MM-DD) for `reason`: `· retired <date>` at the
    end of its header. Only the agent's `memsift_forget` (`tools.forget`) retires; `protect`
    refuses it from a reviser."""

    note: str
    date: str
    reason: str
    op: ClassVar[str] = "retire"


Op = Replace | Delete | Supersede | Retire
_OPS: dict[str, type[Op]] = {cls.op: cls for cls in (Replace, Delete, Supersede, Retire)}
#: The retirement at the end of a retired note's header.
_RETIRED = re.compile(r" +· +retired +\d{4}-\d{2}-\d{2}(?=(?: +· +unverified +\([^()]*\))? *$)")


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
            if notes[nid].superseded_by in notes:  # a link to a note deleted by hand hides nothing
                raise RevisionError(f"{nid} is {role} superseded by {notes[nid].superseded_by}")
            if notes[nid].retired:
                raise RevisionError(f"{nid} is retired")
        i = f.spans[op.note].start
        head = _LINK.sub("", f.content[i].rstrip())
        status = _STATUS.search(head)
        return i, head[:status.start()] + f" · superseded by {op.by}" + head[status.start():]
    if isinstance(op, Retire):
        if op.note not in notes:
            raise RevisionError(f"there is no note {op.note}")
        if notes[op.note].retired:
            raise RevisionError(f"{op.note} is already retired (on {notes[op.note].retired})")
        if (by := notes[op.note].superseded_by) in notes:
            raise RevisionError(f"{op.note} is superseded by {by}, so it is never pasted already; retire {by} "
                                f"if that is what no longer holds")
        try:
            dt.date.fromisoformat(op.date)
        except ValueError:
            raise RevisionError(f"date {op.date!r} is not YYYY-MM-DD") from None
        i = f.spans[op.note].start
        head = f.content[i].rstrip()
        status = _STATUS.search(head)  # a verifier's status stays last
        return i, head[:status.start()] + f" · retired {op.date}" + head[status.start():]
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


def snapshot(store: Store) -> tuple[str, str]:
    """The notes file's text as stored (BOM and line endings kept; bytes that are not UTF-8
    as surrogate escapes, `notefile.decode`) and the sha1 of its bytes.

    Propose ops from this text and pass the sha to `revise` as `expected_sha`.

    :raises RevisionError: there is no notes file.
    """
    try:
        raw = store.markdown.read_bytes()
    except FileNotFoundError:
        raise RevisionError(f"{store.markdown} does not exist") from None
    return decode(raw, str(store.markdown))[0], hashlib.sha1(raw).hexdigest()


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def protect(text: str, ops: Iterable[Op | Mapping[str, object]]) -> None:
    """Refuse ops that would delete or rewrite what the user wrote (see the module docstring).

    Allowed: a link (`supersede`, or a `replace` of a header line that changes only its
    `superseded by` part) from a note that is no incident to a note at least as new;
    deleting a blank line; deleting or rewriting a line of a captured note (a `session` in
    its header), except that deleting a captured note's header (the note itself) needs its
    text to repeat, up to case and spacing, a note the ops leave in place.

    :raises RevisionError: naming the op and what it would have changed.
    """
    checked = [_as_op(op, k) for k, op in enumerate(ops, 1)]
    f = _File.read(text)
    owner = {i: n for n in f.parsed.notes for i in f.spans[n.id]}
    gone = {n.id for n in f.parsed.notes
            if any(isinstance(op, Delete) and op.line - 1 == f.spans[n.id].start for op in checked)}
    staying = {_norm(n.text) for n in f.parsed.notes if n.id not in gone}
    by_id = {n.id: n for n in f.parsed.notes}

    def check_link(k: int, op: Op, note: str, by: str) -> None:
        old, new = by_id.get(note), by_id.get(by)
        if old is None or new is None:
            return  # apply_ops says which is missing
        if old.kind in EVENT_KINDS:
            raise RevisionError(f"op {k} {op}: {note} is an incident, an event: nothing supersedes it")
        if new.date < old.date:
            raise RevisionError(f"op {k} {op}: {by} ({new.date}) is older than {note} ({old.date}); "
                                f"only a newer note supersedes")

    for k, op in enumerate(checked, 1):
        if isinstance(op, Supersede):
            check_link(k, op, op.note, op.by)
            continue
        if isinstance(op, Retire):
            raise RevisionError(f"op {k} {op}: no reviser retires a note (the agent's memsift_forget does, "
                                f"when asked)")
        if not 1 <= op.line <= len(f.content):
            continue  # apply_ops checks the rest
        i = op.line - 1
        n = owner.get(i)
        if isinstance(op, Delete) and not f.content[i].strip() or isinstance(op, Replace) and op.new == op.old:
            continue
        if n is None:
            raise RevisionError(f"op {k} {op}: line {op.line} is above the first note, text of the user's "
                                f"that no reviser changes")
        if isinstance(op, Replace) and i == f.spans[n.id].start:
            if _LINK.sub("", op.old.rstrip()) != _LINK.sub("", op.new.rstrip()):
                raise RevisionError(f"op {k} {op}: a reviser changes a header only in its 'superseded by' link")
            if m := _LINK.search(op.new):
                check_link(k, op, n.id, m[0].split()[-1])
            continue
        if n.session is None:
            raise RevisionError(f"op {k} {op}: {n.id} was written by hand, and no reviser deletes or rewrites "
                                f"a note written by hand (`memsift notes edit` does what you choose)")
        if isinstance(op, Delete) and i == f.spans[n.id].start and _norm(n.text) not in staying:
            raise RevisionError(f"op {k} {op}: {n.id} repeats no note that stays; a note that differs from "
                                f"another (a value changed) is kept, and the newer one supersedes the older")


def revise(
    store: Store, ops: Iterable[Op | Mapping[str, object]], *, backend: str, expected_sha: str | None = None
) -> Revision | None:
    """Apply `ops` to the store's notes file under its lock, and log the revision.

    `backend` names who proposed the ops (e.g. "embedded"). The index is rebuilt lazily,
    when the store next sees the file's new hash. Returns None, writing nothing, when the
    ops change nothing.

    :raises RevisionError: the file's sha1 is not `expected_sha` (it changed since the ops were
        proposed), the ops are invalid (see `apply_ops`), or they would delete or rewrite
        what the user wrote (see `protect`); the file is then unchanged.
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
        protect(text, checked)
        if after == text:
            return None
        return commit(store, text, sha, after, action="revise", backend=backend, ops=checked)


def undo(store: Store, revision: str | None = None) -> Revision:
    """Undo a revision not yet undone (`revision`, e.g. "R0007"; default: the last one); log the undo.

    When the file is as that revision left it, its bytes from before are restored exactly.
    Otherwise the revision's inverse is applied to the file as it is (`_inverse`), so that
    what changed since (a note added by a capture, a line edited by hand) is kept.

    :raises RevisionError: there is nothing to undo, no such revision, or a line the
        revision wrote has changed since (the message names it and where the text from
        before is saved); the file is then unchanged.
    """
    with store.lock():
        entries = history(store)
        undone = {e.undoes for e in entries if e.action == "undo"}
        pending = [e for e in entries if e.action == "revise" and e.id not in undone]
        if not pending:
            raise RevisionError(f"there is no revision to undo in {store.folder / 'revisions.jsonl'}")
        if revision is None:
            target = pending[-1]
        elif (target := next((e for e in pending if e.id == revision), None)) is None:
            done = revision in undone
            raise RevisionError(f"revision {revision} is {'already undone' if done else 'not in the log'}; "
                                f"`memsift notes history` lists them")
        saved = store.folder / target.saved
        try:
            raw = saved.read_bytes()
        except FileNotFoundError:
            raise RevisionError(f"{saved}, the text from before {target.id}, is missing; nothing was done") from None
        if hashlib.sha1(raw).hexdigest() != target.sha_before:
            raise RevisionError(f"{saved} is not the text from before {target.id} (it was edited); nothing was done")
        before = decode(raw)[0]
        try:
            text, sha = snapshot(store)
        except RevisionError:
            text, sha = "", ""
        if sha == target.sha_after and target is pending[-1]:
            return commit(store, text, sha, before, action="undo", backend=target.backend, undoes=target.id)
        if not text:
            raise RevisionError(f"{store.markdown} is gone; the text from before {target.id} is in {saved}")
        try:
            after, ops = _inverse(text, before, target)
        except RevisionError as exc:
            raise RevisionError(f"cannot undo {target.id} of {target.time}: {exc}; nothing was done. The text from "
                                f"before {target.id} is in {saved}: compare it with the notes file and copy back "
                                f"what you want") from None
        return commit(store, text, sha, after, action="undo", backend=target.backend, ops=ops, undoes=target.id)



def _inverse(text: str, before: str, rev: Revision) -> tuple[str, list[Op]]:
    """`text` with revision `rev` (made on `before`) taken back, and the line ops that did it.

    A `supersede` loses its link, a `retire` its retirement; a `replace` puts the old line back where the new one still
    stands in the same note; a run of deleted lines goes back after the line that preceded it
    in `before`, or at the end of the file when that line is gone.

    :raises RevisionError: a line the revision wrote was changed since.
    """
    now, was = _File.read(text), _File.read(before)
    ops = [_as_op(op, k) for k, op in enumerate(rev.ops, 1)]
    owner_was = {i: nid for nid, span in was.spans.items() for i in span}
    inverse: list[Op] = []
    for op in ops:
        if isinstance(op, Supersede):
            note = next((n for n in now.parsed.notes if n.id == op.note), None)
            if note is None:
                continue  # deleted since: nothing left to unlink
            if note.superseded_by != op.by:
                raise RevisionError(f"{op.note} is no longer superseded by {op.by}")
            h = now.spans[op.note].start
            inverse.append(Replace(h + 1, now.content[h], _LINK.sub("", now.content[h])))
        elif isinstance(op, Retire):
            note = next((n for n in now.parsed.notes if n.id == op.note), None)
            if note is None:
                continue  # deleted since: nothing left to bring back
            if note.retired != op.date:
                raise RevisionError(f"{op.note} is no longer retired on {op.date}")
            h = now.spans[op.note].start
            inverse.append(Replace(h + 1, now.content[h], _RETIRED.sub("", now.content[h])))
        elif isinstance(op, Replace):
            nid = owner_was.get(op.line - 1)
            span = now.spans.get(nid, range(0)) if nid else range(len(now.content))
            hits = [i for i in span if now.content[i] == op.new]
            if len(hits) != 1:
                raise RevisionError(f"line {op.line} of the revision, {op.new!r}, was changed since")
            inverse.append(Replace(hits[0] + 1, op.new, op.old))
    out = apply_ops(text, inverse)
    deleted = sorted(op.line - 1 for op in ops if isinstance(op, Delete))
    runs: list[list[int]] = []
    for i in deleted:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    if runs:
        cur = _File.read(out)
        lines = list(cur.lines)
        newline = "\r\n" if "\r\n" in out else "\n"
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        inserts: dict[int, list[str]] = {}
        for run in runs:
            anchor = run[0] - 1
            nid = owner_was.get(anchor)
            at = len(lines)
            if nid in cur.spans:  # after the line it followed, or at the end of that line's note
                same = [i for i in cur.spans[nid] if cur.content[i] == was.content[anchor]]
                at = same[0] + 1 if same else cur.spans[nid].stop
            elif anchor >= 0 and nid is None and anchor < len(cur.content) and cur.content[anchor] == was.content[anchor]:
                at = anchor + 1  # in the preamble, which no revision changes
            block = [was.content[i] + newline for i in run]
            if at == len(lines) and lines and lines[-1].strip():
                block = [newline] + block
            inserts.setdefault(at, []).extend(block)
        rebuilt = []
        for i in range(len(lines) + 1):
            rebuilt += inserts.get(i, [])
            if i < len(lines):
                rebuilt.append(lines[i])
        out = cur.bom + "".join(rebuilt)
        try:
            restored = parse_markdown(out, strict=True)
        except NotesFormatError as exc:
            raise RevisionError(f"the deleted lines cannot go back ({exc})") from None
        ids = [n.id for n in restored.notes]
        if len(ids) != len(set(ids)):
            raise RevisionError("a deleted note's id is used again by another note")
    return out, inverse


def history(store: Store) -> list[Revision]:
    """The audit log, oldest first; a line that cannot be read is skipped with a warning."""
    path = store.folder / "revisions.jsonl"
    if not path.exists():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            out.append(Revision(**json.loads(line)))
        except (ValueError, TypeError) as exc:
            log.warning("%s:%d: skipped (%s)", path, lineno, exc)
    return out


def commit(
    store: Store, before: str, sha: str, after: str, *, action: str, backend: str,
    ops: Sequence[Op] = (), undoes: str | None = None,
) -> Revision:
    """Save `before` (whose bytes have sha1 `sha`), replace the notes file by `after`, log it.

    Call it under the store's lock. If the log cannot be written, `before` is put back (a
    change that is not logged could not be undone) and the error raised.

    :raises OSError: the saved copy, the notes file or the log could not be written.
    """
    saved = f"revisions/{sha}.md"
    if not (store.folder / saved).exists():
        atomic_write(store.folder / saved, before)
    keep_serials(store.folder, [before])  # a note this deletes keeps its id
    numbers = [int(e.id[1:]) for e in history(store) if re.fullmatch(r"R\d+", e.id)]
    rev = Revision(f"R{max(numbers, default=0) + 1:04d}", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                   action, backend, [op.as_dict() for op in ops], sha, text_hash(after), saved, undoes)
    target = store.markdown.resolve()  # through a symlink, as `NoteStore.add` writes
    atomic_write(target, after)
    try:
        line = json.dumps(asdict(rev), ensure_ascii=False)
        if any("\udc80" <= c <= "\udcff" for c in line):  # a byte that was not UTF-8: keep it as an escape
            line = json.dumps(asdict(rev))
        with open(store.folder / "revisions.jsonl", "a+b") as fh:  # appends, whatever the position
            lead = b""
            if fh.seek(0, os.SEEK_END):
                fh.seek(-1, os.SEEK_END)
                lead = b"" if fh.read(1) == b"\n" else b"\n"  # the end of a line torn by a crash
            fh.write(lead + line.encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        atomic_write(target, before)
        raise
    return rev


def propose(text: str, vectors: Mapping[str, np.ndarray] | None = None, cosine: float = MIN_COSINE) -> list[Op]:
    """The embedded reviser: ops that tidy the notes file `text` (as from `snapshot`).

    It deletes only repeats: a captured note whose text is, up to case and spacing, that of
    an active note kept before it (oldest first, by date then place in the file; a note
    written by hand is kept over a captured repeat, and is never deleted). Links to a deleted
    note move to its twin. With `vectors` (note id -> embedding),
    `supersession.link_superseded` runs over the remaining active notes and each link
    becomes a `Supersede`: a newer note that says something changed supersedes the older
    one whose subject it restates (`shown=False`: the links `notes add` makes from a value
    changed, which it prints, are never made here). Running it again on the result proposes nothing.
    `cosine`: the least cosine of a link on the scale of the encoder of `vectors`
    (`supersession.min_cosine`).

    :raises RevisionError: `text` does not parse.
    """
    f = _File.read(text)
    ids = {n.id for n in f.parsed.notes}  # a link to a note deleted by hand hides nothing
    active = sorted((n for n in f.parsed.notes if n.superseded_by not in ids),
                    key=lambda n: (n.date, f.spans[n.id].start))
    unit: dict[str, np.ndarray] = {}
    for n in active:
        v = np.asarray((vectors or {}).get(n.id, 0.0), dtype=np.float32)
        if v.any():
            unit[n.id] = v / np.linalg.norm(v)
    twin: dict[str, str] = {}
    first: dict[str, Note] = {}
    for n in active:
        kept = first.setdefault(_norm(n.text), n)
        if kept is n:
            continue
        if n.session is not None:
            twin[n.id] = kept.id
        elif kept.session is not None:  # the user's own repeat stays; the captured one goes
            twin[kept.id] = n.id
            first[_norm(n.text)] = n

    def final(nid: str) -> str:
        while nid in twin:
            nid = twin[nid]
        return nid

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
            head = re.sub(r"(superseded by +)[^\s()]+(?=(?: +· +unverified +\([^()]*\))? *$)",
                          rf"\g<1>{final(n.superseded_by)}", f.content[h])
            ops.append(Replace(h + 1, f.content[h], head))
    rest = [n for n in active if n.id not in twin and n.id in unit]
    if len(rest) >= 2:
        linked = link_superseded(rest, {text_hash(n.text): unit[n.id] for n in rest}, new_ids={n.id for n in rest},
                                 shown=False, cosine=cosine)  # nobody sees these links made: only the surest
        ops += [Supersede(n.id, n.superseded_by) for n in linked if n.superseded_by]
    return ops
