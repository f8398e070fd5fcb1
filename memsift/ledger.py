"""The per-session ledger: which items memsift already pasted, so none is pasted twice.

One SQLite file under the memsift home (WAL, 10 s busy timeout), keyed by a scope (the
hook uses "<session id>:<project folder>", since item ids are per project), so several
sessions and parallel hooks can write at once. The eval replay uses `:memory:`.
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

    def record(self, scope: str, items: list[str]) -> None:
        """Remember that `items` were pasted in `scope`."""
        with self.db:
            self.db.executemany(
                "INSERT OR IGNORE INTO pasted VALUES (?, ?, ?)", [(scope, i, time.time()) for i in items]
            )

    def close(self) -> None:
        self.db.close()
