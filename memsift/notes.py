"""A project's local notes: a Markdown file the user can edit, and a SQLite index beside it.

`<project dir>/notes.md` holds one section per note (its format: `memsift.notefile`).

`index.sqlite` holds each note's text with its secrets masked (a note edited in by hand
never went through `NoteStore.add`), its embedding (computed when the note is written), an
FTS5 table for BM25, the encoder that wrote it and the Markdown it was built from. Readers
(recall) never embed more than `PROMPT_EMBED_MAX` notes: when the Markdown changed a lot,
or the encoder changed, or the index is gone, a search answers from the notes whose vectors
are known and the store reports `stale`, so that the caller rebuilds it out of the prompt
path (`reindex`: capture, the session-start sweep, `memsift notes reindex`). A note edited
in by hand beyond `MAX_NOTE_CHARS` is indexed by its first `MAX_NOTE_CHARS` characters.
Each index is written into a temp file swapped in with `os.replace`, so readers never see a
half-written one.

Every write takes `notes.lock` (a `filelock` lock, safe across processes and platforms),
re-reads the Markdown under the lock and replaces it atomically: several sessions adding
notes at once never lose or corrupt one. A byte that is not UTF-8 is read leniently (as
U+FFFD, its line reported in `NotesFile.problems`) and written back as it was.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from .notefile import (  # noqa: F401  (the names callers import from here)
    KINDS, MAX_NOTE_CHARS, Note, NotesFile, NotesFormatError, atomic_write, check_note, clean, decode,
    default_preamble, parse_markdown, render_markdown, serial, text_hash,
)

if TYPE_CHECKING:
    from .classifiers.encoders import Encoder

log = logging.getLogger("memsift")

LOCK_TIMEOUT_S = 30.0
#: Times `NoteStore.add` reads the Markdown again when it changed (a hand edit, a deletion)
#: between reading and writing, before it gives up.
ADD_ATTEMPTS = 5
#: The id of any line shaped like a note header, well formed or not (`## N002 - 2026-...`).
_HEADER_ID = re.compile(r"^## +([A-Za-z0-9][\w.-]*)", re.MULTILINE)
#: Notes a search may embed itself when the index lags the Markdown (a note or two edited by
#: hand). Embedding costs 10-30 ms a note on 2 cores (measured here, e5-small-q4), so 8 keep a
#: prompt within about 250 ms of extra work; beyond that the search answers from the vectors
#: it has and the index is rebuilt out of the prompt path.
PROMPT_EMBED_MAX = 8
#: The index's layout; an index of another (older) layout is rewritten from its own vectors,
#: embedding nothing. 2: each note's session and verifier status, for fading and the frame.
INDEX_SCHEMA = "2"
#: Notes a search adds to the shortlist because an older note of their chain matched
#: (`NoteStore.search` with `superseded`): each is one more question for the judge.
SUPERSEDED_EXTRA = 2


def indexed_text(note: Note) -> str:
    """The part of a note the index holds, is judged on and may be pasted: its first
    `MAX_NOTE_CHARS` characters (longer notes only come from editing by hand)."""
    return note.text if len(note.text) <= MAX_NOTE_CHARS else note.text[:MAX_NOTE_CHARS]


@dataclass(frozen=True)
class NoteHits:
    """Retrieval result: candidate notes best first, their cosines and vectors, and the median
    cosine of the query over the `count` active notes. `found_by` maps a candidate that only a
    superseded note of its chain matched to that note's id (`NoteStore.search`)."""

    notes: list[Note]
    cosines: list[float]
    vectors: np.ndarray
    background: float
    count: int
    found_by: dict[str, str] = field(default_factory=dict)


class NoteStore:
    """The notes of one project, in `folder` (see the module docstring for the files).

    `encoder` embeds notes when they are written; it is only loaded when needed. After a
    write, `warnings` lists what could not be done beside it (the index or the id counter not
    written, for example on a full disk: the Markdown holds the note, the index is rebuilt
    later); after a search, `stale` says the index lags the Markdown.
    """

    def __init__(self, folder: Path, title: str = "project", encoder: Encoder | None = None) -> None:
        self.folder = Path(folder)
        self.title = title
        self.markdown = self.folder / "notes.md"
        self.index_path = self.folder / "index.sqlite"
        self._encoder = encoder
        self.warnings: list[str] = []
        self.stale = False
        self._masked: dict[str, str] = {}  # text hash -> the text with its secrets masked

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from .classifiers.encoders import load_encoder

            self._encoder = load_encoder()
        return self._encoder

    def lock(self, timeout: float = LOCK_TIMEOUT_S):
        """The store's write lock (a `filelock.FileLock`, `timeout` seconds); not re-entrant
        across `FileLock` objects, so take it once per operation."""
        from filelock import FileLock  # lazy: only writers need it

        self.folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.folder / "notes.lock"), timeout=timeout)


    def read(self, strict: bool = True) -> NotesFile:
        """The parsed Markdown (see `notefile.parse_markdown`); an empty file when there is none.

        Bytes that are not UTF-8 read as U+FFFD, each such line listed in `problems`, as is
        each note longer than `MAX_NOTE_CHARS`, and each note superseded by one that is no
        longer in the file (it reads as active: the link hides nothing). Raises
        `NotesFormatError` (strict) for a file badly formed.
        """
        return self._load(strict)[1]

    def _raw(self) -> bytes | None:
        """The Markdown's bytes as they are now (None: no file), to tell whether it changed."""
        try:
            return self.markdown.read_bytes()
        except FileNotFoundError:
            return None

    def _load(self, strict: bool) -> tuple[str, NotesFile]:
        """The Markdown as stored, for writers (bytes that are not UTF-8 kept as surrogate
        escapes, `notefile.decode`, so that writing it back keeps them; the default preamble
        when there is no file), and its parse as `read` gives it, from one read of the file."""
        try:
            raw = self.markdown.read_bytes()
        except FileNotFoundError:
            return default_preamble(self.title) + "\n", NotesFile(default_preamble(self.title), [], [])
        text, problems = decode(raw, str(self.markdown))
        parsed = parse_markdown(clean(text), str(self.markdown), strict=strict)
        ids = {n.id for n in parsed.notes}
        notes = []
        for n in parsed.notes:
            if len(n.text) > MAX_NOTE_CHARS:
                problems.append(f"{self.markdown}: note {n.id} has {len(n.text):,} characters; memsift recalls "
                                f"only its first {MAX_NOTE_CHARS:,}: split it with `memsift notes edit`")
            if n.superseded_by and n.superseded_by not in ids:  # the newer note was deleted by hand
                problems.append(f"{self.markdown}: note {n.id} is marked superseded by {n.superseded_by}, which is not "
                                f"in the file, so {n.id} is recalled again; fix its header with `memsift notes edit`")
                n = replace(n, superseded_by=None)
            notes.append(n)
        return text, replace(parsed, notes=notes, problems=problems + parsed.problems)

    def notes(self) -> list[Note]:
        """Every note in the Markdown, superseded ones included, read leniently as recall
        reads it (`read(strict=False)`: a mistyped header is text of the note above). []
        when there is no file."""
        return self.read(strict=False).notes

    def add(self, new: Iterable[Note], *, link_supersession: bool = True, skip_known: bool = False) -> list[Note]:
        """Append notes (an empty `id` gets the next `N<nnn>`), mark the notes they replace, reindex.

        The file is appended to, not rewritten: every existing line stays byte for byte.
        Secrets in the text are masked first (`memsift.secrets`). Supersession is decided
        here, once, when a note is written (`memsift.supersession`), never at recall time;
        each link is a `revision.Supersede` on the older note's header, logged as a revision
        (backend "add") that `memsift notes undo` reverts. Ids are never reused, even after
        a note is deleted by hand. Returns the notes as stored.

        The existing Markdown is read leniently (`read(strict=False)`): appending rewrites
        none of its lines, so a mistyped header stays as it is, reported in `warnings`, and
        its id is not given again.

        Raises `ValueError` for a note that cannot be written as given (see
        `notefile.check_note`), a duplicate id, or a text already noted (skipped instead
        with `skip_known`), and `OSError` when the Markdown cannot be written (then nothing
        was added), or kept changing under it (an editor takes no lock: when the file
        changed between reading and writing, by a hand edit or a deletion, it is read again
        and the notes appended to it as it is now, up to `ADD_ATTEMPTS` times, so the
        change is never undone). What fails after the Markdown is written (the index, the id counter,
        the revision log) is logged and listed in `warnings` instead.
        """
        from .revision import RevisionError, Supersede, apply_ops, commit
        from .secrets import mask
        from .supersession import link_superseded, min_cosine

        self.warnings = []
        new = list(new)
        with self.lock():
            for attempt in range(ADD_ATTEMPTS):
                before = self._raw()
                text, current = self._load(strict=False)  # appending rewrites nothing: a line misread stays as it is
                existing = current.notes
                for problem in current.problems:
                    self._warn(problem)
                ids = {n.id for n in existing} | set(_HEADER_ID.findall(text))  # ids in mistyped headers too
                texts = {n.text: n.id for n in existing if n.active}
                high_water = self.folder / "last_id"
                try:
                    last = int(high_water.read_text().strip() or 0)
                except (FileNotFoundError, ValueError):
                    last = 0
                counter = 1 + max([last] + [k for i in ids if (k := serial(i)) is not None])
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
                newline = "\r\n" if "\r\n" in text else "\n"
                if text and not text.endswith(("\n", "\r")):
                    text += newline
                text += newline + render_markdown("", added).lstrip("\n").replace("\n", newline)
                # the user's editor (or `rm`) takes no lock: if the file changed since it was
                # read, writing would undo that change, so read it again and start over
                if self._raw() == before:
                    atomic_write(self.markdown.resolve(), text)
                    break
                log.info("%s changed while notes were being added (attempt %d): reading it again", self.markdown,
                         attempt + 1)
            else:
                raise OSError(f"{self.markdown} kept changing while memsift added notes; nothing was added "
                              "(try again once it is saved)")
            notes = existing + added
            if link_supersession:
                linked = link_superseded(notes, vectors, new_ids={n.id for n in added},
                                         cosine=min_cosine(self.encoder.name))
                ops = [Supersede(n.id, n.superseded_by) for n, old in zip(linked, notes)
                       if n.superseded_by and not old.superseded_by]
                if ops:
                    try:
                        commit(self, text, text_hash(text), apply_ops(text, ops), action="revise", backend="add", ops=ops)
                        notes = linked
                    except (OSError, RevisionError) as exc:
                        self._warn(f"the notes were added, but marking {', '.join(op.note for op in ops)} superseded "
                                   f"failed ({exc}); `memsift notes revise` proposes it again")
            numbers = [k for n in added if (k := serial(n.id)) is not None]
            if numbers:
                try:
                    atomic_write(high_water, f"{max([last] + numbers)}\n")
                except OSError as exc:
                    self._warn(f"could not record the last note id in {high_water} ({exc})")
            try:
                self._write_index(notes, vectors)
            except (OSError, sqlite3.Error) as exc:
                self._warn(f"the notes were added, but the index could not be written ({exc}); it is rebuilt "
                           f"on a later search or by `memsift notes reindex`")
            by_id = {n.id: n for n in notes}
            return [by_id[n.id] for n in added]

    def _warn(self, message: str) -> None:
        log.info("%s: %s", self.folder, message)  # the caller shows `warnings`: logged, not printed twice
        self.warnings.append(message)

    def vectors_by_id(self) -> dict[str, np.ndarray]:
        """Each note's passage embedding (d,) by note id, embedding those not indexed yet."""
        notes = self.notes()
        known = self._vectors(notes)
        return {n.id: known[text_hash(n.text)] for n in notes}

    def reindex(self, wait: float = 600.0) -> int | None:
        """Rebuild the index from the Markdown, embedding every note it lacks (out of the
        prompt path: capture, the session-start sweep, `memsift notes reindex`). Returns the
        number of notes embedded (0, writing nothing, when the index is up to date), or None
        when another reindex of the store ran for `wait` seconds (0: do not wait; it does the
        job): one runs at a time (`reindex.lock`). The embedding runs outside the notes lock;
        the index is written under it, from the Markdown as it is then.

        Raises `OSError` or `sqlite3.Error` when the index cannot be written.
        """
        from filelock import FileLock, Timeout

        if not self.markdown.exists():
            return 0
        try:
            with FileLock(str(self.folder / "reindex.lock"), timeout=wait):
                return self._reindex()
        except Timeout:
            log.info("notes reindex of %s: another one is running", self.folder)
            return None

    def _reindex(self) -> int:
        meta: dict[str, str] = {}
        before = self._indexed_vectors(meta)
        if (meta.get("encoder") == self.encoder.name and meta.get("missing") == "0"
                and meta.get("schema") == INDEX_SCHEMA and meta.get("markdown_sha") == self._markdown_state()["markdown_sha"]):
            return 0  # up to date
        fresh = self._embed([n for n in self.read(strict=False).notes if text_hash(indexed_text(n)) not in before])
        with self.lock():
            current = self.read(strict=False)
            vectors = {**before, **fresh}
            late = self._embed([n for n in current.notes if text_hash(indexed_text(n)) not in vectors])
            self._write_index(current.notes, {**vectors, **late})
        log.info("reindexed %d notes in %s (%d embedded)", len(current.notes), self.folder, len(fresh) + len(late))
        return len(fresh) + len(late)

    # -- index -------------------------------------------------------------------------

    def _masked_text(self, text: str) -> str:
        """`text` as the index holds it: secrets masked (`memsift.secrets`), since a note
        edited in by hand was never masked; cached by the text's hash, from the index too."""
        sha = text_hash(text)
        if sha not in self._masked:
            from .secrets import mask

            self._masked[sha] = mask(text).text
        return self._masked[sha]

    def _embed(self, notes: list[Note]) -> dict[str, np.ndarray]:
        """Embeddings of the notes' `indexed_text`, secrets masked first, by the hash of the
        text as it is in the file."""
        texts = list(dict.fromkeys(indexed_text(n) for n in notes))
        if not texts:
            return {}
        return {text_hash(t): v for t, v in zip(texts, self.encoder.passage([self._masked_text(t) for t in texts]))}

    def _vectors(self, notes: list[Note]) -> dict[str, np.ndarray]:
        """Passage vectors by text hash (of `indexed_text`, which is the text for every note
        written through memsift): reused from the index, the rest embedded now."""
        known = self._indexed_vectors({})
        known.update(self._embed([n for n in notes if text_hash(indexed_text(n)) not in known]))
        for n in notes:  # callers look vectors up by the note's own text
            known.setdefault(text_hash(n.text), known[text_hash(indexed_text(n))])
        return known

    def _index_meta(self) -> dict[str, str]:
        """The index's meta table ({} when there is no readable index): all a prompt reads
        of it when it is up to date."""
        if not self.index_path.exists():
            return {}
        try:
            with sqlite3.connect(f"file:{self.index_path}?mode=ro", uri=True) as db:
                return dict(db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error as exc:
            log.warning("notes index %s unreadable (%s)", self.index_path, exc)
            return {}

    def _indexed_vectors(self, meta: dict[str, str]) -> dict[str, np.ndarray]:
        """The index's vectors by text hash ({} when it is missing, unreadable or written by
        another encoder); fills `meta` with its meta table."""
        if not self.index_path.exists():
            return {}
        try:
            with sqlite3.connect(f"file:{self.index_path}?mode=ro", uri=True) as db:
                meta.update(db.execute("SELECT key, value FROM meta").fetchall())
                if meta.get("encoder") != self.encoder.name:
                    return {}
                rows = db.execute("SELECT sha, vector, text FROM notes").fetchall()
        except sqlite3.Error as exc:
            log.warning("notes index %s unreadable (%s)", self.index_path, exc)
            return {}
        self._masked.update((sha, text) for sha, _, text in rows)
        return {sha: np.frombuffer(blob, dtype=np.float32) for sha, blob, _ in rows}

    def _markdown_state(self) -> dict[str, str]:
        """The Markdown's sha1, size and mtime (ns), as the index's meta table records them."""
        st = os.stat(self.markdown)
        return {"markdown_sha": hashlib.sha1(self.markdown.read_bytes()).hexdigest(),
                "markdown_size": str(st.st_size), "markdown_mtime_ns": str(st.st_mtime_ns)}

    def _write_index(self, notes: list[Note], vectors: dict[str, np.ndarray]) -> None:
        """Index the notes whose `indexed_text` has a vector in `vectors`; the others are
        counted in meta `missing` (a later `reindex` embeds them)."""
        state = self._markdown_state() if self.markdown.exists() else {"markdown_sha": ""}
        rows = [n for n in notes if text_hash(indexed_text(n)) in vectors]
        fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".sqlite", dir=self.folder)
        os.close(fd)
        try:
            with sqlite3.connect(tmp) as db:
                db.executescript(
                    """
                    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
                    CREATE TABLE notes (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE, date TEXT,
                        kind TEXT, superseded_by TEXT, text TEXT, sha TEXT, session TEXT, unverified TEXT,
                        retired TEXT, vector BLOB);
                    CREATE VIRTUAL TABLE notes_fts USING fts5(text, content='notes',
                        content_rowid='rowid', tokenize='trigram');
                    """
                )
                db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [*state.items(), ("encoder", self.encoder.name), ("missing", str(len(notes) - len(rows))),
                     ("schema", INDEX_SCHEMA)],
                )
                ids = {n.id for n in notes}
                db.executemany(
                    "INSERT INTO notes (id, date, kind, superseded_by, text, sha, session, unverified, retired, vector) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [  # a link to a note deleted by hand no longer hides anything
                        (n.id, n.date, n.kind, n.superseded_by if n.superseded_by in ids else None,
                         self._masked_text(indexed_text(n)), text_hash(indexed_text(n)), n.session, n.unverified,
                         n.retired,
                         np.asarray(vectors[text_hash(indexed_text(n))], dtype=np.float32).tobytes())
                        for n in rows
                    ],
                )
                db.execute("INSERT INTO notes_fts (notes_fts) VALUES ('rebuild')")
            os.replace(tmp, self.index_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _fresh_index(self) -> Path | None:
        """The index path, brought up to date with the Markdown when that costs at most
        `PROMPT_EMBED_MAX` embeddings; otherwise (or when another process holds the lock)
        the index as it is, with `stale` set. None when there are no notes to search."""
        self.stale = False
        if not self.markdown.exists():
            return None
        meta = self._index_meta()
        st = os.stat(self.markdown)
        same_encoder = meta.get("encoder") == self.encoder.name and meta.get("schema") == INDEX_SCHEMA
        if same_encoder and (meta.get("markdown_size"), meta.get("markdown_mtime_ns")) == (str(st.st_size), str(st.st_mtime_ns)):
            unchanged = True  # the common case: no need to hash the file
        else:
            unchanged = same_encoder and meta.get("markdown_sha") == self._markdown_state()["markdown_sha"]
        if unchanged and meta.get("missing", "0") == "0":
            return self.index_path
        from filelock import Timeout

        known = self._indexed_vectors({})
        try:
            with self.lock(timeout=0.5):
                current = self.read(strict=False)
                missing = [n for n in current.notes if text_hash(indexed_text(n)) not in known]
                if unchanged and missing:
                    self.stale = True  # already written from this Markdown, as far as it could be
                    return self.index_path
                for problem in current.problems:
                    log.warning("%s", problem)
                if len(missing) <= PROMPT_EMBED_MAX:
                    known.update(self._embed(missing))
                    missing = []
                else:
                    self.stale = True
                    log.warning("notes index of %s lacks %d notes: answering from the %d indexed; "
                                "`memsift notes reindex` (or the next capture) rebuilds it",
                                self.folder, len(missing), len(current.notes) - len(missing))
                self._write_index(current.notes, known)
        except Timeout:
            log.info("notes of %s are being written by another process: searching the index as it is", self.folder)
            self.stale = True
        except (OSError, sqlite3.Error) as exc:
            log.warning("could not update the notes index of %s (%s): searching it as it is", self.folder, exc)
            self.stale = True
        return self.index_path if self.index_path.exists() else None

    def search(self, query_vector: np.ndarray, query_text: str, k: int, exclude: frozenset[str] = frozenset(),
               *, superseded: bool = False, include_superseded: bool = False) -> NoteHits:
        """Active notes not in `exclude`, ranked by `backends.sqlite.hybrid_search`; with
        `include_superseded` (the agent asked for them), superseded notes too; a retired note
        never.

        With `superseded`, a superseded note that would have made the shortlist (its cosine
        at least the `k`-th active one's, or a full-text hit) brings in the newest note of its
        chain, when that one is active, not in `exclude` and not shortlisted already: at most
        `SUPERSEDED_EXTRA` are added after the others, and `NoteHits.found_by` names the
        older note that found each. The older note itself is never a candidate, so that what
        is judged is what may be pasted. A message worded like an older note still finds what
        replaced it, and the shortlist of the active notes stays as it is.

        The background is the median cosine over the active notes. Sets `stale` when the index
        lags the Markdown (see `_fresh_index`). Raises `NotesFormatError` if the Markdown
        cannot be read.
        """
        from .backends.sqlite import hybrid_search

        path = self._fresh_index()
        empty = NoteHits([], [], np.zeros((0, len(query_vector)), np.float32), 0.0, 0)
        if path is None:
            return empty
        found_by: dict[str, str] = {}
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                every = db.execute(
                    "SELECT rowid, id, date, kind, text, superseded_by, session, unverified, vector FROM notes "
                    "WHERE retired IS NULL"
                ).fetchall()
                rows = [r for r in every if (r[5] is None or include_superseded) and r[1] not in exclude]
                if not rows:
                    return empty
                order, cos, matrix, background = hybrid_search(db, rows, "notes_fts", query_vector, query_text, k)
                older = [r for r in every if r[5] is not None and r[1] not in exclude] if superseded else []
                if older:
                    links = {r[1]: r[5] for r in every}
                    position = {r[1]: i for i, r in enumerate(rows)}
                    shortlisted = {rows[i][1] for i in order}
                    top = sorted(cos, reverse=True)
                    floor = top[k - 1] if len(top) >= k else -np.inf
                    old_order, old_cos, _, _ = hybrid_search(db, older, "notes_fts", query_vector, query_text, k)
                    for rank, j in enumerate(old_order):
                        if old_cos[j] < floor and rank < min(k, len(older)):
                            continue  # ranked below the active shortlist, and no full-text hit
                        head = _newest(links, older[j][1])
                        if head in position and head not in shortlisted and len(found_by) < SUPERSEDED_EXTRA:
                            order.append(position[head])
                            shortlisted.add(head)
                            found_by[head] = older[j][1]
        except sqlite3.Error as exc:
            log.warning("notes index %s unreadable (%s): no notes searched", path, exc)
            self.stale = True
            return empty
        notes = [Note(id=rows[i][1], date=rows[i][2], kind=rows[i][3], text=rows[i][4], session=rows[i][6],
                      unverified=rows[i][7]) for i in order]
        return NoteHits(notes, [float(cos[i]) for i in order], matrix[order], background, len(rows), found_by)


def _newest(links: dict[str, str | None], note_id: str) -> str | None:
    """The note at the end of `note_id`'s supersession chain, following `links` (note id ->
    the id that supersedes it, or None), or None for a chain that ends in a cycle."""
    seen = {note_id}
    while (by := links.get(note_id)) in links:
        if by in seen:
            return None
        seen.add(by)
        note_id = by
    return note_id
