"""The local log of hook runs, and the pause switch: what `memsift log`, `memsift why`,
`memsift status` and `memsift pause` read and write.

Every prompt the hook handles is one row of `<memsift home>/runs.sqlite` (WAL): when, the
session and project, the prompt's length (never its text, as in the hook log), the
genre, what was pasted, how long it took, the cascade's whole trace, any notice, and the
error when the hook failed. A capture that fails (run by hand or detached by a hook) is a
row too, of event `capture`, so that `memsift status` shows it beside the hooks' errors.
Nothing here leaves the machine.

`<memsift home>/pause.json` pauses recall for every session (`{"all": true}`) or for some
(`{"sessions": [...]}`); the hook then pastes nothing and says so in this log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .config import name_text, open_state, read_state


class RunLog:
    """Rows of hook runs in SQLite. `readonly` (for the commands that only read): the file
    is opened by `config.read_state`, so it must exist (`FileNotFoundError`) and nothing is
    written; `record` then raises `sqlite3.OperationalError`."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        if readonly:
            self.db = read_state(path)
            return
        self.db = open_state(
            path,
            """
            CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, at REAL, event TEXT, session TEXT,
                project TEXT, prompt_chars INTEGER, genre TEXT, pasted TEXT, chars INTEGER, ms REAL, trace TEXT,
                notices TEXT, error TEXT);
            """
        )

    def record(self, event: str, session: str = "", project: str = "", prompt_chars: int = 0, genre: str | None = None,
               pasted: list[str] = (), chars: int = 0, ms: float = 0.0, trace: Any = None,
               notices: list[str] = (), error: str | None = None) -> int:
        """Add one run; its number. A folder name that is not UTF-8 (`project`) is stored with
        U+FFFD for its undecodable bytes."""
        project = name_text(project)
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (at, event, session, project, prompt_chars, genre, pasted, chars, ms, trace, notices, "
                "error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (time.time(), event, session, project, prompt_chars, genre,
                 json.dumps(list(pasted)), chars, round(ms, 1), json.dumps(trace, ensure_ascii=False),
                 json.dumps(list(notices), ensure_ascii=False), error))
            return int(cur.lastrowid)

    def last(self, n: int = 20) -> list[dict[str, Any]]:
        """The last `n` runs, oldest first."""
        return self._rows("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (n,))[::-1]

    def get(self, run_id: int) -> dict[str, Any] | None:
        """Run `run_id`, or None."""
        rows = self._rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        return rows[0] if rows else None

    def errors(self, n: int = 3) -> list[dict[str, Any]]:
        """The last `n` failed runs (hooks and captures), newest first."""
        return self._rows("SELECT * FROM runs WHERE error IS NOT NULL ORDER BY id DESC LIMIT ?", (n,))

    def _rows(self, sql: str, args: tuple) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, args)
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            run = dict(zip(names, row))
            for key in ("pasted", "trace", "notices"):
                run[key] = json.loads(run[key]) if run[key] else None
            out.append(run)
        return out

    def close(self) -> None:
        self.db.close()


def record_failure(home: Path, event: str, exc: BaseException, ms: float = 0.0, session: str = "",
                   project: str = "") -> None:
    """A failed run (a hook, or `capture`) in `<home>/runs.sqlite`: the exception's type and
    where it was raised, never its message (which may quote a prompt or a transcript; the
    traceback goes to the hook or capture log). Best effort: never raises."""
    import traceback

    try:
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
        runs = RunLog(home / "runs.sqlite")
        try:
            runs.record(event, session, project, ms=ms, error=f"{type(exc).__name__}{where}")
        finally:
            runs.close()
    except Exception:  # e.g. a read-only or full home: the log file, if any, still says why
        pass


def pause_path(home: Path) -> Path:
    return home / "pause.json"


def paused(home: Path, session: str) -> bool:
    """Whether recall is paused for `session` (or for all); a paused id may be a prefix."""
    try:
        data = json.loads(pause_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    # a session may be named by the start of its id, as `memsift log` shows it
    return bool(data.get("all")) or any(session.startswith(s) for s in data.get("sessions") or [] if s)


def set_pause(home: Path, on: bool, session: str | None = None) -> dict:
    """Pause or resume recall for one session or all; the new state."""
    from .notes import atomic_write

    try:
        data = json.loads(pause_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    sessions = set(data.get("sessions") or [])
    if session:
        sessions = sessions | {session} if on else sessions - {session}
        data["sessions"] = sorted(sessions)
    else:
        data = {"all": on, "sessions": [] if not on else sorted(sessions)}
    home.mkdir(parents=True, exist_ok=True)
    atomic_write(pause_path(home), json.dumps(data) + "\n")
    return data


def pause_state(home: Path) -> str:
    """"no", "all sessions", or the paused session ids."""
    try:
        data = json.loads(pause_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no"
    if data.get("all"):
        return "all sessions"
    return ", ".join(data.get("sessions") or []) or "no"
