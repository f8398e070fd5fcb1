"""SQLite retrieval shared by the notes index and the embedded passage backend.

A table of items with an embedding blob, and an FTS5 table over their text with the trigram
tokenizer (it matches inside words and in scripts without spaces, such as Chinese).
Retrieval is hybrid: the top `k` by cosine, plus up to two of the BM25 top 8 that cosine
missed.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..classifiers.features import CJK_CHARS
from .base import BackendUnavailable, Passage, SearchResult

_FTS_WORD = re.compile(r"\w{3,}", re.UNICODE)
#: Characters of a passage's text that a search returns: more than recall ever reads of an
#: item (`Settings.max_chars` + `recall.MASK_MARGIN_CHARS` to paste, `recall.JUDGE_CHARS` to
#: judge), so that a prompt's cost does not grow with the longest passage stored.
MAX_RESULT_CHARS = 8000
_CJK_CHAR = re.compile(f"[{CJK_CHARS}]")


def fts_query(text: str, limit: int = 24) -> str:
    """An FTS5 MATCH expression: the message's longest distinct words, quoted, OR-ed.

    Words shorter than 3 characters cannot match the trigram tokenizer and are dropped;
    CJK runs are cut into 3-character windows. Returns "" when nothing is left.
    """
    words: list[str] = []
    for w in _FTS_WORD.findall(text.lower()[:4000]):
        if _CJK_CHAR.search(w):
            words += [w[i : i + 3] for i in range(len(w) - 2)]
        else:
            words.append(w)
    ranked = sorted(set(words), key=lambda w: (-len(w), w))[:limit]
    return " OR ".join('"' + w.replace('"', "") + '"' for w in ranked)


def hybrid_search(
    db: sqlite3.Connection,
    rows: Sequence[tuple],
    fts_table: str,
    query_vector: np.ndarray,
    query_text: str,
    k: int,
) -> tuple[list[int], np.ndarray, np.ndarray, float]:
    """Rank `rows` (each `(rowid, ..., vector_blob)`, the blob last) for a query.

    Returns the positions in `rows` best first, the cosines of all rows, the rows' vector
    matrix (n, d) and the median cosine over all rows (the per-query background).
    """
    matrix = np.stack([np.frombuffer(r[-1], dtype=np.float32) for r in rows])
    cos = matrix @ query_vector
    order = [int(i) for i in np.argsort(-cos)[:k]]
    terms = fts_query(query_text)
    if terms:
        pos = {r[0]: i for i, r in enumerate(rows)}
        hits = db.execute(
            f"SELECT rowid FROM {fts_table} WHERE {fts_table} MATCH ? ORDER BY bm25({fts_table}) LIMIT 8",
            (terms,),
        ).fetchall()
        order += [pos[h[0]] for h in hits if h[0] in pos and pos[h[0]] not in order][:2]
    return order, cos, matrix, float(np.median(cos))


def reembed_passages(path: Path | str, encoder) -> int:
    """`SQLiteBackend.reembed` of the passages file at `path`, opened and closed here: what
    the sweep and `memsift notes reindex` run after an encoder change. Returns how many were
    embedded; raises `sqlite3.Error`."""
    backend = SQLiteBackend(path, encoder)
    try:
        return backend.reembed()
    finally:
        backend.close()


class SQLiteBackend:
    """The embedded `PassageBackend`: passages, their e5 vectors and FTS5 in one SQLite file.

    Safe with several processes: WAL journal, a 10 s busy timeout, and every `add` in one
    transaction. `encoder` embeds passages when they are added.
    """

    name = "sqlite"

    def __init__(self, path: Path | str, encoder) -> None:
        self.path = str(path)
        self.encoder = encoder
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        self.db.executescript(
            """
            PRAGMA journal_mode = WAL;
            CREATE TABLE IF NOT EXISTS passages (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE,
                date TEXT, text TEXT, encoder TEXT, vector BLOB);
            CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(text, content='passages',
                content_rowid='rowid', tokenize='trigram');
            """
        )

    def add(self, passages: Sequence[Passage]) -> None:
        """Store passages not stored yet (by id), their secrets masked (`memsift.secrets`)."""
        from ..secrets import mask

        new = [Passage(p.id, p.date, mask(p.text).text) for p in passages
               if not self.db.execute("SELECT 1 FROM passages WHERE id = ?", (p.id,)).fetchone()]
        if not new:
            return
        vectors = self.encoder.passage([p.text for p in new])
        with self.db:
            for p, vec in zip(new, vectors):
                cur = self.db.execute(
                    "INSERT OR IGNORE INTO passages (id, date, text, encoder, vector) VALUES (?,?,?,?,?)",
                    (p.id, p.date, p.text, self.encoder.name, np.asarray(vec, np.float32).tobytes()),
                )
                if cur.rowcount:
                    self.db.execute(
                        "INSERT INTO passages_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, p.text)
                    )

    def stale(self) -> int:
        """How many passages were embedded by another encoder than `encoder` (search skips
        them until `reembed`)."""
        return self.db.execute("SELECT count(*) FROM passages WHERE encoder IS NOT ?", (self.encoder.name,)).fetchone()[0]

    def reembed(self, batch: int = 32) -> int:
        """Embed again, with `encoder`, the passages another encoder embedded (after an
        encoder change: a vector of one encoder means nothing to another). Commits per
        `batch` passages, so an interrupted run keeps what it did and a rerun goes on.
        Returns how many were embedded. Raises `sqlite3.Error`."""
        done = 0
        while True:
            rows = self.db.execute("SELECT rowid, text FROM passages WHERE encoder IS NOT ? LIMIT ?",
                                   (self.encoder.name, batch)).fetchall()
            if not rows:
                return done
            vectors = self.encoder.passage([r[1] for r in rows])
            with self.db:
                for (rowid, _), vec in zip(rows, vectors):
                    self.db.execute("UPDATE passages SET encoder = ?, vector = ? WHERE rowid = ?",
                                    (self.encoder.name, np.asarray(vec, np.float32).tobytes(), rowid))
            done += len(rows)

    def search(self, query: str, query_vector: np.ndarray | None, k: int, budget_s: float) -> SearchResult:
        """The top `k` passages for `query` (`hybrid_search`), each text cut to its first
        `MAX_RESULT_CHARS`. Raises `BackendUnavailable` past `budget_s`."""
        start = time.monotonic()
        if query_vector is None:
            query_vector = self.encoder.query([query])[0]
        rows = self.db.execute(
            "SELECT rowid, id, date, substr(text, 1, ?), vector FROM passages WHERE encoder = ?",
            (MAX_RESULT_CHARS, self.encoder.name),
        ).fetchall()
        if not rows:
            return SearchResult([])
        order, cos, matrix, background = hybrid_search(self.db, rows, "passages_fts", query_vector, query, k)
        if time.monotonic() - start > budget_s:
            raise BackendUnavailable(f"sqlite search took more than {budget_s:.1f} s")
        return SearchResult(
            passages=[Passage(rows[i][1], rows[i][2], rows[i][3]) for i in order],
            cosines=[float(cos[i]) for i in order],
            vectors=matrix[order],
            background=background,
            count=len(rows),
        )

    def close(self) -> None:
        self.db.close()
