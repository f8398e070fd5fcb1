"""Circuit breakers for the services memsift depends on, and the notices they owe the agent.

The pattern is Nygard's (Release It!, 2007, "Circuit Breaker"): after a failure the
breaker opens and calls to the service are skipped at once; after `COOLDOWN_S` one call
goes through as a probe (half-open); its success closes the breaker, its failure keeps it
open for another cool-down.

State is one row per service in `<memsift home>/services.sqlite` (WAL), shared by every
hook process and every session. Each transition leaves a notice for the agent: "memory
paused since ..., why" when a breaker opens, "resumed" when it closes. `take_notices`
hands each one out once per session (the hook pastes it as one line), so a pause is told
once, not on every prompt.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path

from .config import open_state, read_state

#: Seconds an open breaker skips its service before letting one probe through.
COOLDOWN_S = 60.0

LABELS = {"cognee": "the Cognee memory server", "decision": "the remote decision model"}

#: What each service's pause means for the user, told when its breaker opens and closes.
#: The memory server holds memories; the decision model holds none: while it is paused the
#: embedded model decides in its place.
PAUSED = {
    "cognee": "memsift: recall from the Cognee memory server is paused since {when} ({reason}); its memories are "
              "unavailable until it answers again. Local notes still work.",
    "decision": "memsift: the remote decision model is paused since {when} ({reason}); memsift decides with its "
                "embedded model until the remote one answers again. Recall still works.",
}
RESUMED = {
    "cognee": "memsift: recall from the Cognee memory server has resumed.",
    "decision": "memsift: the remote decision model answers again and decides from now on.",
}


@dataclass(frozen=True)
class BreakerState:
    """One service's breaker: `state` is closed, open or half-open; `since` (Unix time) is
    when it opened, `reason` why."""

    service: str
    state: str
    since: float | None
    reason: str | None


class Breakers:
    """The breakers of all services, in one SQLite file (see the module docstring)."""

    def __init__(self, path: Path | str, cooldown_s: float = COOLDOWN_S, *, readonly: bool = False) -> None:
        """`readonly` (for `memsift status`): opened by `config.read_state`, so the file must
        exist (`FileNotFoundError`) and only `state` can be called."""
        self.cooldown_s = cooldown_s
        if readonly:
            self.db = read_state(path)
            return
        self.db = open_state(
            path,
            """
            CREATE TABLE IF NOT EXISTS breakers (service TEXT PRIMARY KEY, state TEXT, since REAL,
                reason TEXT, probe_at REAL, epoch INTEGER DEFAULT 0);
            CREATE TABLE IF NOT EXISTS notices (service TEXT, epoch INTEGER, kind TEXT, text TEXT,
                at REAL, PRIMARY KEY (service, epoch, kind));
            CREATE TABLE IF NOT EXISTS told (scope TEXT, service TEXT, epoch INTEGER, kind TEXT,
                given INTEGER, PRIMARY KEY (scope, service, epoch, kind));
            """,
            autocommit=True,
        )

    def state(self, service: str) -> BreakerState:
        """`service`'s breaker (closed when it never failed)."""
        row = self.db.execute("SELECT state, since, reason FROM breakers WHERE service = ?", (service,)).fetchone()
        return BreakerState(service, *row) if row else BreakerState(service, "closed", None, None)

    def allow(self, service: str, now: float | None = None) -> bool:
        """Whether to call `service` now: always when closed; when open, only once per
        cool-down (the probe, which moves it to half-open)."""
        now = time.time() if now is None else now
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT state, probe_at FROM breakers WHERE service = ?", (service,)).fetchone()
            if row is None or row[0] == "closed":
                return True
            if now >= row[1]:
                self.db.execute("UPDATE breakers SET state = 'half-open', probe_at = ? WHERE service = ?",
                                (now + self.cooldown_s, service))
                return True
            return False

    def failure(self, service: str, reason: str, now: float | None = None) -> None:
        """Record a failed call: the breaker opens (or stays open) for another cool-down."""
        now = time.time() if now is None else now
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT state, epoch FROM breakers WHERE service = ?", (service,)).fetchone()
            if row is None or row[0] == "closed":
                epoch = (row[1] if row else 0) + 1
                self.db.execute(
                    "INSERT INTO breakers VALUES (?, 'open', ?, ?, ?, ?) ON CONFLICT(service) DO UPDATE SET "
                    "state = 'open', since = excluded.since, reason = excluded.reason, probe_at = excluded.probe_at, "
                    "epoch = excluded.epoch", (service, now, reason, now + self.cooldown_s, epoch))
                when = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                text = PAUSED.get(service, "memsift: {label} is paused since {when} ({reason}).")
                self.db.execute("INSERT OR IGNORE INTO notices VALUES (?, ?, 'paused', ?, ?)", (
                    service, epoch, text.format(label=LABELS.get(service, service), when=when, reason=reason), now))
            else:
                self.db.execute("UPDATE breakers SET state = 'open', reason = ?, probe_at = ? WHERE service = ?",
                                (reason, now + self.cooldown_s, service))

    def success(self, service: str, now: float | None = None) -> None:
        """Record a successful call: an open or half-open breaker closes."""
        now = time.time() if now is None else now
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT state, epoch FROM breakers WHERE service = ?", (service,)).fetchone()
            if row is None or row[0] == "closed":
                return
            self.db.execute("UPDATE breakers SET state = 'closed', since = NULL, reason = NULL WHERE service = ?",
                            (service,))
            text = RESUMED.get(service, "memsift: {label} has resumed.").format(label=LABELS.get(service, service))
            self.db.execute("INSERT OR IGNORE INTO notices VALUES (?, ?, 'resumed', ?, ?)", (service, row[1], text, now))

    def take_notices(self, scope: str) -> list[str]:
        """The notices `scope` (a session) has not been given yet, oldest first; each is
        given once per scope. A pause already over before the session heard of it is
        not told, nor its end."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            rows = self.db.execute(
                "SELECT n.service, n.epoch, n.kind, n.text FROM notices n WHERE NOT EXISTS (SELECT 1 FROM told t "
                "WHERE t.scope = ? AND t.service = n.service AND t.epoch = n.epoch AND t.kind = n.kind) "
                "ORDER BY n.at", (scope,)).fetchall()
            current = {r[0]: (r[1], r[2]) for r in self.db.execute("SELECT service, epoch, state FROM breakers")}
            out = []
            for service, epoch, kind, text in rows:
                live_epoch, live_state = current.get(service, (0, "closed"))
                heard_pause = self.db.execute(
                    "SELECT 1 FROM told WHERE scope = ? AND service = ? AND epoch = ? AND kind = 'paused' AND given = 1",
                    (scope, service, epoch)).fetchone()
                stale = epoch != live_epoch or (kind == "paused" and live_state == "closed")
                if kind == "resumed" and not heard_pause:
                    stale = True
                if not stale:
                    out.append(text)
                self.db.execute("INSERT OR IGNORE INTO told VALUES (?, ?, ?, ?, ?)",
                                (scope, service, epoch, kind, int(not stale)))
            return out

    def close(self) -> None:
        self.db.close()


class GuardedBackend:
    """A `PassageBackend` whose searches go through `service`'s breaker: skipped at once
    (`BackendUnavailable`) while it is open, and each outcome recorded."""

    def __init__(self, backend, breakers: Breakers, service: str) -> None:
        self.backend, self.breakers, self.service = backend, breakers, service
        self.name = backend.name

    def add(self, passages) -> None:
        self.backend.add(passages)

    def close(self) -> None:
        getattr(self.backend, "close", lambda: None)()
        self.breakers.close()

    def search(self, query, query_vector, k, budget_s):
        from .backends import BackendUnavailable

        if not self.breakers.allow(self.service):
            state = self.breakers.state(self.service)
            raise BackendUnavailable(f"{self.service} paused ({state.reason})")
        try:
            result = self.backend.search(query, query_vector, k, budget_s)
        except BackendUnavailable as exc:
            self.breakers.failure(self.service, str(exc))
            raise
        self.breakers.success(self.service)
        return result
