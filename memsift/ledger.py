"""The per-session ledger: which items memsift already pasted, so none is pasted twice.

One SQLite file under the memsift home (WAL, 10 s busy timeout), keyed by a scope (the
hook uses "<session id>:<project folder>", since item ids are per project), so several
sessions and parallel hooks can write at once; when the host fires the same prompt hook twice
at once, the ledger decides which copy pastes an item (`Ledger.claim`). The eval replay uses
`:memory:`.
"""

from __future__ import annotations

import time
from pathlib import Path

from .config import open_state


class Ledger:
    """Pasted item ids per scope (a session, or a session and a project)."""

    def __init__(self, path: Path | str) -> None:
        self.db = open_state(
            path,
            """
            CREATE TABLE IF NOT EXISTS pasted (scope TEXT, item TEXT, at REAL,
                PRIMARY KEY (scope, item));
            """
        )

    def pasted(self, scope: str) -> set[str]:
        """Ids pasted so far in `scope`."""
        return {r[0] for r in self.db.execute("SELECT item FROM pasted WHERE scope = ?", (scope,))}

    def claim(self, scope: str, items: list[str]) -> list[str]:
        """Record that `items` are pasted in `scope`, and return those this call recorded
        first, in order: an item another process (a twin of the same hook, fired twice for
        one prompt) recorded already is left out. Each insert is atomic on the
        `(scope, item)` key, so of two concurrent claims exactly one gets an item."""
        won = []
        with self.db:
            for item in dict.fromkeys(items):
                cur = self.db.execute("INSERT OR IGNORE INTO pasted VALUES (?, ?, ?)", (scope, item, time.time()))
                if cur.rowcount == 1:
                    won.append(item)
        return won

    def close(self) -> None:
        self.db.close()
