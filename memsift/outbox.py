"""The outbox: what memsift must push to a memory server, written down before it is sent.

Pushes never happen on the hook's path and never get lost: `put` writes each document to
`<memsift home>/outbox.sqlite` first (idempotent: a document is its dataset and the SHA-256
of its text); `flush` sends what is due, removes a document only once the server confirmed
it, and on failure schedules the next attempt with capped exponential backoff. Several
processes may flush at once: each claims its documents with a lease, so none is sent twice
by two of them. (The transactional-outbox pattern: Richardson, Microservices Patterns,
2018, ch. 3.)
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .config import open_state

log = logging.getLogger("memsift")

#: Backoff after the n-th failed attempt: BACKOFF_BASE_S * 2**(n-1), at most BACKOFF_MAX_S.
BACKOFF_BASE_S = 5.0
BACKOFF_MAX_S = 3600.0
#: Seconds a flushing process holds its claim on documents being sent.
LEASE_S = 120.0


@dataclass(frozen=True)
class Document:
    """One document to push: its dataset, a name derived from its content, and its text."""

    dataset: str
    name: str
    text: str
    sha: str


def document(dataset: str, text: str) -> Document:
    """The document for `text` in `dataset`, named `memsift-<sha256[:16]>.txt` (the server
    treats a new name with the same content as the same data, and the same name with other
    content as a conflict, so content names make replays idempotent)."""
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Document(dataset, f"memsift-{sha[:16]}.txt", text, sha)


class Outbox:
    """Pending pushes in SQLite (WAL, 10 s busy timeout)."""

    def __init__(self, path: Path | str) -> None:
        self.db = open_state(
            path,
            """
            CREATE TABLE IF NOT EXISTS outbox (dataset TEXT, sha TEXT, name TEXT, text TEXT,
                attempts INTEGER DEFAULT 0, due REAL, lease REAL DEFAULT 0, error TEXT, created REAL,
                PRIMARY KEY (dataset, sha));
            """,
            autocommit=True,
        )

    def put(self, dataset: str, texts: Sequence[str], now: float | None = None) -> int:
        """Queue texts for `dataset`; returns how many were new (a text already queued, or
        sent and still queued, is not queued twice)."""
        now = time.time() if now is None else now
        docs = [document(dataset, t) for t in texts]
        with self.db:
            before = self.db.total_changes
            self.db.executemany(
                "INSERT OR IGNORE INTO outbox (dataset, sha, name, text, due, created) VALUES (?, ?, ?, ?, ?, ?)",
                [(d.dataset, d.sha, d.name, d.text, now, now) for d in docs])
            return self.db.total_changes - before

    def pending(self, dataset: str | None = None) -> list[Document]:
        """Every document not confirmed yet, oldest first."""
        rows = self.db.execute(
            "SELECT dataset, name, text, sha FROM outbox WHERE ? IS NULL OR dataset = ? ORDER BY created, sha",
            (dataset, dataset)).fetchall()
        return [Document(*r) for r in rows]

    def flush(self, send: Callable[[str, list[Document]], None], now: float | None = None, limit: int = 50) -> tuple[int, str | None]:
        """Send the due documents, one call of `send(dataset, documents)` per dataset.

        `send` returns once the server confirmed every document, and raises on anything
        else. Confirmed documents are removed; a failed batch is retried later (backoff by
        attempts). Returns (documents confirmed, the first error or None); stops at the
        first failure, since the server is then likely down for the others too.
        """
        now = time.time() if now is None else now
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            rows = self.db.execute(
                "SELECT dataset, name, text, sha FROM outbox WHERE due <= ? AND lease <= ? ORDER BY created, sha LIMIT ?",
                (now, now, limit)).fetchall()
            self.db.executemany("UPDATE outbox SET lease = ? WHERE dataset = ? AND sha = ?",
                                [(now + LEASE_S, r[0], r[3]) for r in rows])
        batches: dict[str, list[Document]] = {}
        for r in rows:
            batches.setdefault(r[0], []).append(Document(*r))
        sent = 0
        for k, (dataset, docs) in enumerate(batches.items()):
            try:
                send(dataset, docs)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
                untried = [d for batch in list(batches.values())[k + 1:] for d in batch]
                with self.db:
                    for d in docs:
                        self._reschedule(d, error, now)
                    self.db.executemany("UPDATE outbox SET lease = 0 WHERE dataset = ? AND sha = ?",
                                        [(d.dataset, d.sha) for d in untried])
                log.warning("outbox: %d documents for %s not sent (%s); retried later", len(docs), dataset, error)
                return sent, error
            with self.db:
                self.db.executemany("DELETE FROM outbox WHERE dataset = ? AND sha = ?", [(d.dataset, d.sha) for d in docs])
            sent += len(docs)
        return sent, None

    def _reschedule(self, d: Document, error: str, now: float) -> None:
        """One more failed attempt: due again after the backoff, lease released."""
        self.db.execute(
            "UPDATE outbox SET attempts = attempts + 1, lease = 0, error = ?, "
            "due = ? + MIN(?, ? * (1 << attempts)) WHERE dataset = ? AND sha = ?",
            (error, now, BACKOFF_MAX_S, BACKOFF_BASE_S, d.dataset, d.sha))

    def close(self) -> None:
        self.db.close()
