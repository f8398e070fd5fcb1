"""A project's local notes: a Markdown file the user can edit, and a SQLite index beside it.

Layout of `<project dir>/notes.md` (one section per note; everything else is ignored)::

    # memsift notes: shop

    ## N07 · 2026-08-14 · decision
    Payments: Mollie chosen over Stripe because ...

    ## N03 · 2026-06-02 · decision · session 5e1f0c2a · superseded by N07
    Payments go through Stripe ...

A note captured from a session names it (`session <id>`); one added by hand does not.

`index.sqlite` holds each active note's embedding (computed when the note is written) and
an FTS5 table for BM25. It is rebuilt whenever the Markdown's hash changes, into a temp
file swapped in with `os.replace`, so readers never see a half-written index.

Every write takes `notes.lock` (a `filelock` lock, safe across processes and platforms),
re-reads the Markdown under the lock and replaces it atomically: several sessions adding
notes at once never lose or corrupt one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import re
import sqlite3
import stat
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:
    from .classifiers.encoders import Encoder

log = logging.getLogger("memsift")

KINDS = ("decision", "constraint", "incident", "convention", "context")
_HEADER = re.compile(
    r"^## +(?P<id>[A-Za-z0-9][\w.-]*) +· +(?P<date>\d{4}-\d{2}-\d{2}) +· +(?P<kind>\w+)"
    r"(?: +· +session +(?P<session>[\w.-]+))?"
    r"(?: +· +superseded by +(?P<by>[A-Za-z0-9][\w.-]*))? *$"
)
LOCK_TIMEOUT_S = 30.0


class NotesFormatError(ValueError):
    """The notes Markdown cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Note:
    """One note. `session` is the host session it was captured from (None when added by
    hand); `superseded_by` is the id of the newer note that replaces it, if any."""

    id: str
    date: str
    kind: str
    text: str
    superseded_by: str | None = None
    session: str | None = None

    @property
    def active(self) -> bool:
        return self.superseded_by is None


@dataclass(frozen=True)
class NotesFile:
    """A parsed notes file: the text before the first note (kept verbatim), the notes, and
    the problems found when read leniently."""

    preamble: str
    notes: list[Note]
    problems: list[str]


def parse_markdown(text: str, source: str = "notes.md", strict: bool = True) -> NotesFile:
    """Read a notes Markdown file.

    Text above the first note header is the preamble, whatever it holds. Below it, strict
    (before any write): a `## ` line that is not a valid note header, or an id used
    twice, raises `NotesFormatError` naming the file and line, so that nothing is rewritten
    from a file memsift misread. Lenient (for recall): such a line stays in the text of the
    note above it, a repeated id is skipped, and each problem is listed in `problems`.
    """
    text = text.removeprefix("\ufeff")
    notes: list[Note] = []
    problems: list[str] = []
    preamble: list[str] = []
    current: dict | None = None
    body: list[str] = []
    seen: set[str] = set()

    def close() -> None:
        if current is None:
            return
        if current["id"] in seen:
            problem = f"{source}:{current['line']}: note id {current['id']} appears twice"
            if strict:
                raise NotesFormatError(problem)
            problems.append(problem + " (the second is ignored)")
            return
        seen.add(current["id"])
        fields = {k: v for k, v in current.items() if k != "line"}
        notes.append(Note(text="\n".join(body).strip(), **fields))

    for lineno, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line.rstrip()) if line.startswith("## ") else None
        problem = None
        if current is None and not m:
            preamble.append(line)  # above the first note, any text is the user's, `## ` headings too
            continue
        if line.startswith("## ") and not m:
            problem = f"{source}:{lineno}: expected '## <id> · <YYYY-MM-DD> · <kind>', got {line!r}"
        elif m and m["kind"] not in KINDS:
            problem = f"{source}:{lineno}: kind {m['kind']!r} is not one of {', '.join(KINDS)}"
        if problem:
            if strict:
                raise NotesFormatError(problem)
            problems.append(problem + " (read as text)")
            m = None
        if m:
            close()
            current, body = {"id": m["id"], "date": m["date"], "kind": m["kind"], "superseded_by": m["by"],
                             "session": m["session"], "line": lineno}, []
        elif current is not None:
            body.append(line)
        else:
            preamble.append(line)
    close()
    return NotesFile("\n".join(preamble).rstrip(), notes, problems)


def default_preamble(title: str) -> str:
    return "\n".join([
        f"# memsift notes: {title}",
        "",
        "<!-- One section per note. Edit the text freely; keep each header line's shape:",
        "     ## <id> · <YYYY-MM-DD> · <decision|constraint|incident|convention|context>[ · session <id>][ · superseded by <id>]",
        "     Text above the first note is kept as it is. -->",
    ])


def render_markdown(preamble: str, notes: Iterable[Note]) -> str:
    """The Markdown file: `preamble` verbatim, then `notes` in the order given."""
    out = [preamble]
    for n in notes:
        head = f"## {n.id} · {n.date} · {n.kind}"
        if n.session:
            head += f" · session {n.session}"
        if n.superseded_by:
            head += f" · superseded by {n.superseded_by}"
        out += ["", head, n.text.strip()]
    return "\n".join(out) + "\n"


def check_note(note: Note) -> None:
    """Raise `ValueError` for a note memsift could not write and read back as it is."""
    if note.kind not in KINDS:
        raise ValueError(f"kind {note.kind!r} is not one of {', '.join(KINDS)}")
    try:
        dt.date.fromisoformat(note.date)
    except ValueError:
        raise ValueError(f"date {note.date!r} is not YYYY-MM-DD") from None
    if not note.text.strip():
        raise ValueError("the note's text is empty")
    if any(line.startswith("## ") for line in note.text.splitlines()):
        raise ValueError("a line of the text starts with '## ', which the notes file keeps for note headers")
    if note.session and not re.fullmatch(r"[\w.-]+", note.session):
        raise ValueError(f"session {note.session!r} must be letters, digits, '.', '_' or '-'")
    if note.id and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", note.id):
        raise ValueError(f"id {note.id!r} must be letters, digits, '.', '_' or '-'")


def _serial(note_id: str) -> int | None:
    """The number of an id memsift assigned (`N007` -> 7), None for any other id."""
    m = re.fullmatch(r"N(\d+)", note_id)
    return int(m[1]) if m else None


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` (a str as UTF-8 with its newlines as they are, or bytes exactly) to
    `path` through a temp file, fsync and `os.replace`; an existing file keeps its
    permissions, a new one gets the umask's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NoteHits:
    """Retrieval result: candidate notes best first, their cosines and vectors, and the median
    cosine of the query over the `count` active notes."""

    notes: list[Note]
    cosines: list[float]
    vectors: np.ndarray
    background: float
    count: int


class NoteStore:
    """The notes of one project, in `folder` (see the module docstring for the files).

    `encoder` embeds notes when they are written; it is only loaded when needed.
    """

    def __init__(self, folder: Path, title: str = "project", encoder: Encoder | None = None) -> None:
        self.folder = Path(folder)
        self.title = title
        self.markdown = self.folder / "notes.md"
        self.index_path = self.folder / "index.sqlite"
        self._encoder = encoder

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from .classifiers.encoders import load_encoder

            self._encoder = load_encoder()
        return self._encoder

    def _lock(self):
        from filelock import FileLock  # lazy: only writers need it

        self.folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.folder / "notes.lock"), timeout=LOCK_TIMEOUT_S)

    def read(self, strict: bool = True) -> NotesFile:
        """The parsed Markdown (see `parse_markdown`); an empty file when there is none.

        Raises `NotesFormatError` for a file that is not UTF-8, or (strict) badly formed.
        """
        try:
            raw = self.markdown.read_bytes()
        except FileNotFoundError:
            return NotesFile(default_preamble(self.title), [], [])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotesFormatError(f"{self.markdown}: not UTF-8 ({exc})") from None
        return parse_markdown(text, str(self.markdown), strict=strict)

    def notes(self) -> list[Note]:
        """Every note in the Markdown, superseded ones included. [] when there is no file."""
        return self.read().notes

    def lock(self):
        """The store's write lock (a `filelock.FileLock`, 30 s timeout); not re-entrant
        across `FileLock` objects, so take it once per operation."""
        return self._lock()

    def add(self, new: Iterable[Note], *, link_supersession: bool = True, skip_known: bool = False) -> list[Note]:
        """Append notes (an empty `id` gets the next `N<nnn>`), mark the notes they replace, reindex.

        The file is appended to, not rewritten: every existing line stays byte for byte,
        except the header lines of the notes the new ones supersede (a `revision.Supersede`
        line operation each). Secrets in the text are masked first (`memsift.secrets`).
        Supersession is decided here, once, when a note is written (`memsift.supersession`),
        never at recall time. Ids are never reused, even after a
        note is deleted by hand. Returns the notes as stored. Raises `NotesFormatError` if
        the existing Markdown cannot be read (it is left untouched) and `ValueError` for a
        note that cannot be written as given (see `check_note`), a duplicate id, or a text
        already noted (skipped instead with `skip_known`).
        """
        from .revision import Supersede, apply_ops
        from .secrets import mask
        from .supersession import link_superseded

        with self._lock():
            current = self.read()
            existing = current.notes
            ids = {n.id for n in existing}
            texts = {n.text: n.id for n in existing if n.active}
            high_water = self.folder / "last_id"
            last = int(high_water.read_text().strip() or 0) if high_water.exists() else 0
            counter = 1 + max([last] + [k for n in existing if (k := _serial(n.id)) is not None])
            added: list[Note] = []
            for note in new:
                note = replace(note, text=mask(note.text.strip()).text)
                check_note(note)
                if not note.id:
                    while f"N{counter:03d}" in ids:
                        counter += 1
                    note = replace(note, id=f"N{counter:03d}")
                if note.id in ids:
                    raise ValueError(f"note id {note.id} already exists")
                if note.text in texts:
                    if skip_known:  # e.g. two sessions captured the same note at once
                        continue
                    raise ValueError(f"this text is already noted as {texts[note.text]}")
                ids.add(note.id)
                texts[note.text] = note.id
                added.append(note)
            if not added:
                return []
            vectors = self._vectors(existing + added)
            text = self.markdown.read_bytes().decode("utf-8") if self.markdown.exists() else default_preamble(self.title) + "\n"
            newline = "\r\n" if "\r\n" in text else "\n"
            if text and not text.endswith(("\n", "\r")):
                text += newline
            text += newline + render_markdown("", added).lstrip("\n").replace("\n", newline)
            notes = existing + added
            if link_supersession:
                linked = link_superseded(notes, vectors, new_ids={n.id for n in added})
                ops = [Supersede(n.id, n.superseded_by) for n, old in zip(linked, notes)
                       if n.superseded_by and not old.superseded_by]
                text, notes = apply_ops(text, ops), linked
            atomic_write(self.markdown.resolve(), text)
            numbers = [k for n in added if (k := _serial(n.id)) is not None]
            if numbers:
                atomic_write(high_water, f"{max([last] + numbers)}\n")
            self._write_index(notes, vectors)
            by_id = {n.id: n for n in notes}
            return [by_id[n.id] for n in added]

    def vectors_by_id(self) -> dict[str, np.ndarray]:
        """Each note's passage embedding (d,) by note id, embedding those not indexed yet."""
        notes = self.notes()
        known = self._vectors(notes)
        return {n.id: known[text_hash(n.text)] for n in notes}

    # -- index -------------------------------------------------------------------------

    def _vectors(self, notes: list[Note]) -> dict[str, np.ndarray]:
        """Passage vectors by text hash: reused from the index, the rest embedded now."""
        known = self._indexed_vectors()
        missing = [n.text for n in notes if text_hash(n.text) not in known]
        if missing:
            for text, vec in zip(missing, self.encoder.passage(missing)):
                known[text_hash(text)] = vec
        return known

    def _indexed_vectors(self) -> dict[str, np.ndarray]:
        if not self.index_path.exists():
            return {}
        try:
            with sqlite3.connect(f"file:{self.index_path}?mode=ro", uri=True) as db:
                encoder = db.execute("SELECT value FROM meta WHERE key = 'encoder'").fetchone()
                if encoder is None or encoder[0] != self.encoder.name:
                    return {}
                rows = db.execute("SELECT sha, vector FROM notes").fetchall()
        except sqlite3.Error:
            return {}
        return {sha: np.frombuffer(blob, dtype=np.float32) for sha, blob in rows}

    def _write_index(self, notes: list[Note], vectors: dict[str, np.ndarray]) -> None:
        md_sha = self._markdown_hash()
        fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".sqlite", dir=self.folder)
        os.close(fd)
        try:
            with sqlite3.connect(tmp) as db:
                db.executescript(
                    """
                    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
                    CREATE TABLE notes (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE, date TEXT,
                        kind TEXT, superseded_by TEXT, text TEXT, sha TEXT, vector BLOB);
                    CREATE VIRTUAL TABLE notes_fts USING fts5(text, content='notes',
                        content_rowid='rowid', tokenize='trigram');
                    """
                )
                db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("markdown_sha", md_sha), ("encoder", self.encoder.name)],
                )
                ids = {n.id for n in notes}
                db.executemany(
                    "INSERT INTO notes (id, date, kind, superseded_by, text, sha, vector) VALUES (?,?,?,?,?,?,?)",
                    [  # a link to a note deleted by hand no longer hides anything
                        (n.id, n.date, n.kind, n.superseded_by if n.superseded_by in ids else None,
                         n.text, text_hash(n.text),
                         np.asarray(vectors[text_hash(n.text)], dtype=np.float32).tobytes())
                        for n in notes
                    ],
                )
                db.execute("INSERT INTO notes_fts (notes_fts) VALUES ('rebuild')")
            os.replace(tmp, self.index_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _markdown_hash(self) -> str:
        try:
            return hashlib.sha1(self.markdown.read_bytes()).hexdigest()
        except FileNotFoundError:
            return ""

    def _fresh_index(self) -> Path | None:
        """The index path, rebuilt first if the Markdown changed since (for example by hand)."""
        if not self.markdown.exists():
            return None
        md_sha = self._markdown_hash()
        if self.index_path.exists():
            try:
                with sqlite3.connect(f"file:{self.index_path}?mode=ro", uri=True) as db:
                    row = db.execute("SELECT value FROM meta WHERE key = 'markdown_sha'").fetchone()
                    enc = db.execute("SELECT value FROM meta WHERE key = 'encoder'").fetchone()
                if row and row[0] == md_sha and enc and enc[0] == self.encoder.name:
                    return self.index_path
            except sqlite3.Error as exc:
                log.warning("notes index %s unreadable (%s): rebuilding", self.index_path, exc)
        with self._lock():
            current = self.read(strict=False)
            for problem in current.problems:
                log.warning("%s", problem)
            log.info("notes changed outside memsift: reindexing %d notes in %s", len(current.notes), self.folder)
            self._write_index(current.notes, self._vectors(current.notes))
        return self.index_path

    def search(self, query_vector: np.ndarray, query_text: str, k: int, exclude: frozenset[str] = frozenset()) -> NoteHits:
        """Active notes not in `exclude`, ranked by `backends.sqlite.hybrid_search`.

        The background is the median cosine over those notes. Raises `NotesFormatError` if
        the Markdown cannot be read.
        """
        from .backends.sqlite import hybrid_search

        path = self._fresh_index()
        empty = NoteHits([], [], np.zeros((0, len(query_vector)), np.float32), 0.0, 0)
        if path is None:
            return empty
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute(
                "SELECT rowid, id, date, kind, text, vector FROM notes WHERE superseded_by IS NULL"
            ).fetchall()
            rows = [r for r in rows if r[1] not in exclude]
            if not rows:
                return empty
            order, cos, matrix, background = hybrid_search(db, rows, "notes_fts", query_vector, query_text, k)
        notes = [Note(id=rows[i][1], date=rows[i][2], kind=rows[i][3], text=rows[i][4]) for i in order]
        return NoteHits(notes, [float(cos[i]) for i in order], matrix[order], background, len(rows))
