"""Session capture: keep what would spare redoing work, as notes and passages.

For one session's transcript (`capture`):

1. stream the exchanges not captured yet (from the byte offset recorded per session in
   `<memsift home>/capture.sqlite`, so capturing twice adds nothing), the last one
   completed by the agent's last message when the Stop hook spooled it (`Spool`), in
   batches of `BATCH_EXCHANGES`, never the whole file in memory;
2. mask secrets in each (`memsift.secrets.mask`), before anything is judged or stored;
3. the selector asks the decision model `keep_exchange` ("would keeping this spare redoing
   work, and as what kind of note?"), then `keep_topic` for those that pass, and keeps the
   exchanges it is sure of, at most `MAX_NOTES_PER_SESSION` per session, surest first; once
   a session has them, the rest is read but not judged, and a run stops judging at its
   time limit (`capture_seconds`), the next one going on from there;
4. each kept exchange becomes a short note (its answer's first sentences, `note_text`) in
   the project's notes, and a passage (`User: ... Assistant: ...`) in its passage store;
5. the reviser (`memsift.revisers`: the embedded one unless another is configured) then
   tidies the notes file by line operations;
6. with a Cognee server configured, the notes and passages go to the outbox (`memsift.sync`).

Steps 4-6 and the move of the offset are one unit (a write-ahead record, `PendingCapture`):
the notes and passages to write are committed to `capture.sqlite` before any store is
touched, every step is idempotent (a note of the session with the same text is found, not
added again; a passage or an outbox document is stored once), and the offset moves and the
record goes in one transaction once every store confirmed. A capture killed or failed
midway (`kill -9`, a full disk) leaves the record; the next run for the session (its next
Stop hook, the session-start sweep, `memsift capture`) finishes it first.

The project is named by the folder the transcript says the session started in (its own
`cwd`), so a capture run from elsewhere files the notes where they belong.

Runs of the same session are serialised by a lock file; runs of different sessions only
meet in the notes store, which has its own lock.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .transcript import CONTROL, SENTENCE_BREAK, Exchange, read_exchanges

log = logging.getLogger("memsift")

#: Notes one session may add, in all its captures ("a handful of short notes at most").
MAX_NOTES_PER_SESSION = 5
#: An exchange is kept when the keep_exchange head's P(none) is below this. The head was
#: trained on exchanges half of which are worth keeping; in real sessions perhaps one in ten
#: is, and moving the prior from 1:1 to 9:1 (Saerens, Latinne and Decaestecker, "Adjusting
#: the outputs of a classifier to new a priori probabilities", Neural Computation 2002)
#: puts the 0.5 decision point at P(none) = 0.1.
KEEP_NONE_P = 0.1
#: ... and when the keep_topic head's P(none) on the user's message is below this (the
#: message is about a choice, a constraint or a problem). Set by looking at the dev
#: conversations: with both gates, 6 of their 122 reactions, finished-work actions and
#: complete instructions pass (0.5: 14), against 42 with the first gate alone at 0.2.
TOPIC_NONE_P = 0.3
#: Seconds a capture run judges exchanges at most (`capture_seconds`); past it, it stops
#: after the batch under way, and the next run (the next Stop, the session-start sweep) goes
#: on from there. A host gives a detached capture all the time it needs; the limit keeps a
#: 100,000-line transcript from holding a core (and the session's lock) for many minutes.
CAPTURE_SECONDS = 20.0
#: Exchanges judged together (their texts embedded in one call), and read ahead at most.
BATCH_EXCHANGES = 16
#: Characters of a note and of a passage made from an exchange.
NOTE_CHARS = 400
PASSAGE_CHARS = 1500
#: Characters of the agent's answer the selector reads (`answer_view`). Its head was trained
#: on summaries of at most 305 characters (`training/data/exchanges/`, median 112), so a
#: longer answer is read as its sentences that matter, picked to fit; fewer tokens also make
#: the encoder's pass, capture's main cost, shorter (800 before: 17 s for 80 exchanges).
SELECTOR_ANSWER_CHARS = 320
#: Characters of the user's message the selector reads with the answer (the training
#: exchanges' messages are at most 185; a pasted log gains nothing beyond).
SELECTOR_USER_CHARS = 400

_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.DOTALL)
_MARKUP = re.compile(r"^\s*(#+|[-*+]|\d+[.)])\s+|\*\*|__|`", re.MULTILINE)


@dataclass
class CaptureResult:
    """What one capture run did."""

    session: str
    exchanges: int = 0
    kept: list[str] = field(default_factory=list)  # ids of the notes added
    finished: list[str] = field(default_factory=list)  # ids of the notes of a capture cut short, finished now
    offset: int = 0
    skipped: str | None = None  # why nothing was read, when nothing was


def plain(text: str) -> str:
    """`text` without code blocks, Markdown markup and control characters
    (`transcript.CONTROL`: a coloured log quoted in an answer), whitespace collapsed."""
    return " ".join(_MARKUP.sub("", _CODE_BLOCK.sub(" ", CONTROL.sub(" ", text))).split())


# Sentences that narrate the work instead of stating a result ("Let me check the logs.").
_NARRATION = re.compile(
    r"^(?:i'll|i will|i'm going to|i am going to|let me|let's see|looking at|checking|first,|now,|sure|okay|ok\b|"
    r"great|understood|good question|got it|je vais|voyons|d'accord|compris|parfait|ich werde|lass mich|"
    r"voy a|déjame|vale|好的|我来|让我|首先)", re.IGNORECASE)
# Words that carry a choice and its reason, a rule, or a cause and its fix, in the five languages.
_SUBSTANCE = re.compile(
    r"\b(?:because|since|instead|rather than|chose|chosen|decided|switch|must|never|always|only|limit|"
    r"fix|root cause|caused|due to|so that|parce que|car|au lieu|plutôt|choisi|décidé|jamais|toujours|"
    r"seulement|corrig|cause|weil|statt|anstatt|entschieden|nie|immer|nur|behoben|porque|en lugar|"
    r"decidimos|nunca|siempre|solo|arregl)\b|因为|所以|改为|决定|不要|必须|修复|原因", re.IGNORECASE)
# A user's message that states the decision itself ("let's go with X, because Y").
_USER_DECIDES = re.compile(
    r"\b(?:we decided|let's go with|let's use|we'll use|we will use|we chose|from now on|never|always|"
    r"on a décidé|on part sur|on garde|désormais|jamais|toujours|wir nehmen|ab jetzt|nie|immer|"
    r"vamos a usar|decidimos|a partir de ahora|nunca|siempre)\b|决定|以后|不要再|一律", re.IGNORECASE)
_USER_NOTE_CHARS = 300
# Words that say a choice was made or a cause was found (stronger than `_SUBSTANCE`'s).
_SETTLED = re.compile(
    r"\b(?:we decided|decided to|decision|chose|we'll use|we will use|switched to|going with|must never|must not|"
    r"root cause|fixed by|from now on|on a décidé|décidé|choisi|désormais|cause racine|entschieden|ab jetzt|"
    r"ursache|decidimos|decidido|elegimos|causa raíz|a partir de ahora)\b|决定|改为|根本原因|根因|以后", re.IGNORECASE)


def salience(sentence: str) -> float:
    """How much a sentence of a long answer looks like what capture keeps (a choice and its
    reason, a rule, a cause and its fix): 2 for a settled choice or a found cause
    (`_SETTLED`), plus 1 per distinct cue of `_SUBSTANCE` (at most 3); 0 for none. Used to
    keep the few sentences that matter of an answer too long to keep whole
    (`transcript.read_exchanges`)."""
    cues = {m.group(0).lower() for m in _SUBSTANCE.finditer(sentence)}
    return (2.0 if _SETTLED.search(sentence) else 0.0) + min(len(cues), 3)


def _sentences(exchange: Exchange) -> list[str]:
    """The answer's sentences, plain, then those picked past the part kept of a long answer
    (`Exchange.salient`), without the ones that narrate the work ("Let me check...")."""
    sentences = [x.strip() for x in SENTENCE_BREAK.split(plain(exchange.assistant)) if x.strip()]
    sentences += [x for x in map(plain, exchange.salient) if x and x not in sentences]
    return [x for x in sentences if not _NARRATION.match(x)]


def _pick(sentences: list[str], room: int, fill: float) -> str:
    """Sentences in at most `room` characters, in their order: those `salience` scores
    highest first (the earliest first among equals), until `fill` of `room` is used; the
    first one always, cut if it must be."""
    ranked = sorted(range(len(sentences)), key=lambda i: (-min(salience(sentences[i]), 2), i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        if used + len(sentences[i]) > room and chosen:
            break
        chosen.append(i)
        used += len(sentences[i]) + 1
        if used >= room * fill:
            break
    return " ".join(sentences[i] for i in sorted(chosen))


def answer_view(exchange: Exchange, limit: int = SELECTOR_ANSWER_CHARS) -> str:
    """The agent's answer in at most `limit` characters, as the selector reads it: the plain
    answer when it fits, else the sentences that carry a choice, a rule or a fix first
    (`salience`, `_pick`), from the whole answer however long (`Exchange.salient`)."""
    text = plain(exchange.assistant)
    if len(text) <= limit and not exchange.salient:
        return text
    return _pick(_sentences(exchange), limit, 1.0)[:limit]


def selector_text(exchange: Exchange, view: str | None = None) -> str:
    """The text `keep_exchange` judges: the user's message (its first `SELECTOR_USER_CHARS`)
    and the answer as `answer_view` gives it (or `view`, when the caller has it already), one
    per line. `training/train_heads.py` builds its examples with it too, so a long answer is
    seen the same way in training."""
    return f"{exchange.user[:SELECTOR_USER_CHARS]}\n{answer_view(exchange) if view is None else view}"


def note_text(exchange: Exchange, limit: int = NOTE_CHARS) -> str:
    """A short note from an exchange, at most `limit` characters.

    Extractive, since the embedded model cannot write: the answer's sentences without the
    ones that narrate the work ("Let me check..."), those that carry a reason, a rule or a
    fix first (`salience`), then the others in order, up to half of `limit` (`_pick`); of an
    answer too long to keep whole, its sentences picked past the cut too
    (`Exchange.salient`); when the user's message states the decision itself ("let's go
    with X because Y") and is short, it leads the note; when the answer says nothing of its
    own ("Done."), the user's words are the note.
    """
    sentences = _sentences(exchange)
    user = plain(exchange.user)
    lead = ""
    if not sentences or sum(map(len, sentences)) < 40:
        lead, sentences = user, []
    elif len(user) <= _USER_NOTE_CHARS and _USER_DECIDES.search(user):
        lead = user
    body = _pick(sentences, limit - len(lead) - (3 if lead else 0), 0.5) if sentences else ""
    out = (f"{lead} — {body}" if lead and body else lead or body).rstrip(" ;:,")
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def passage_text(exchange: Exchange, limit: int = PASSAGE_CHARS) -> str:
    """The exchange as a passage, `User: ... Assistant: ...`, at most `limit` characters."""
    user = plain(exchange.user)[: limit // 3]
    return f"User: {user} Assistant: {plain(exchange.assistant)}"[:limit].rstrip()


@dataclass
class PlannedNote:
    """A note a capture will write, and its passage: `text` as the notes store keeps it
    (secrets masked), `id` once the note is in the notes file (None before, or when the
    same text was noted by another writer meanwhile)."""

    kind: str
    date: str
    text: str
    passage: str
    id: str | None = None


@dataclass
class PendingCapture:
    """A capture's write-ahead record: everything its stores will hold, written before any
    of them is touched, so that a capture cut short (killed, a full disk) is finished by
    the next run of the same session instead of lost or done twice.

    `start`/`end` are the byte offsets of the exchanges it covers, `exchanges` how many;
    `stage` is how far it got: `planned`, `noted` (the notes are in the notes file and
    their ids known), `stored` (their passages too), `revised` (the reviser ran).
    """

    session: str
    transcript: str
    project: str
    folder: str
    title: str
    start: int
    end: int
    exchanges: int
    kept_before: int
    notes: list[PlannedNote]
    stage: str = "planned"


class CaptureState:
    """Per-session capture progress in SQLite (WAL, safe with several writers): the offset
    read so far (`sessions`) and the capture under way, if any (`pending`)."""

    SCHEMA = """
        CREATE TABLE IF NOT EXISTS sessions (session TEXT PRIMARY KEY, transcript TEXT,
            project TEXT, offset INTEGER DEFAULT 0, exchanges INTEGER DEFAULT 0,
            kept INTEGER DEFAULT 0, at REAL);
        CREATE TABLE IF NOT EXISTS pending (session TEXT PRIMARY KEY, transcript TEXT,
            project TEXT, folder TEXT, title TEXT, start INTEGER, "end" INTEGER,
            exchanges INTEGER, kept_before INTEGER, notes TEXT, stage TEXT, at REAL);
        """

    def __init__(self, path: Path) -> None:
        """Open (or create) the state at `path`. A file that is not a database (overwritten,
        corrupted) is moved aside to `<path>.corrupt-<unix time>`, logged, and a new state
        started: captures then read their transcripts again from the start, and the notes
        store skips what is noted already (`skip_known`), so capture keeps working instead of
        failing for good. Raises `sqlite3.Error` and `OSError` otherwise."""
        import sqlite3

        from .config import open_state

        try:
            self.db = open_state(path, self.SCHEMA)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in (11, 26):  # SQLITE_CORRUPT, SQLITE_NOTADB
                raise
            aside = Path(f"{path}.corrupt-{int(time.time())}")
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{path}{suffix}").exists():
                    Path(f"{path}{suffix}").rename(f"{aside}{suffix}")
            log.error("capture state %s is not a database (%s): moved to %s, starting a new one", path, exc, aside)
            self.db = open_state(path, self.SCHEMA)

    def project(self, session: str) -> str | None:
        """The project root an earlier capture of `session` filed its notes under, if any."""
        row = self.db.execute("SELECT project FROM sessions WHERE session = ?", (session,)).fetchone()
        return row[0] if row and row[0] else None

    def get(self, session: str) -> tuple[int, int]:
        """`(offset, notes kept so far)` for a session; `(0, 0)` when never captured."""
        row = self.db.execute("SELECT offset, kept FROM sessions WHERE session = ?", (session,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def put(self, session: str, transcript: str, project: str, offset: int, exchanges: int, kept: int) -> None:
        with self.db:
            self._put(session, transcript, project, offset, exchanges, kept)

    def _put(self, session: str, transcript: str, project: str, offset: int, exchanges: int, kept: int) -> None:
        self.db.execute(
            """INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session) DO UPDATE SET
               transcript = excluded.transcript, project = excluded.project, offset = excluded.offset,
               exchanges = sessions.exchanges + excluded.exchanges, kept = excluded.kept, at = excluded.at""",
            (session, transcript, project, offset, exchanges, kept, time.time()),
        )

    def pending(self, session: str) -> PendingCapture | None:
        """The session's unfinished capture, or None."""
        row = self.db.execute(
            'SELECT session, transcript, project, folder, title, start, "end", exchanges, kept_before, notes, stage '
            "FROM pending WHERE session = ?", (session,)).fetchone()
        if row is None:
            return None
        notes = [PlannedNote(**n) for n in json.loads(row[9])]
        return PendingCapture(*row[:9], notes=notes, stage=row[10])

    def pending_sessions(self, project: str) -> list[str]:
        """The sessions of `project` with an unfinished capture."""
        return [r[0] for r in self.db.execute("SELECT session FROM pending WHERE project = ?", (project,))]

    def begin(self, p: PendingCapture) -> None:
        """Write the record (committed, synced by SQLite) before any store is touched."""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (p.session, p.transcript, p.project, p.folder, p.title, p.start, p.end, p.exchanges,
                 p.kept_before, self._notes(p), p.stage, time.time()))

    def advance(self, p: PendingCapture, stage: str) -> None:
        """Record that the capture reached `stage` (and the note ids it knows now)."""
        p.stage = stage
        with self.db:
            self.db.execute("UPDATE pending SET notes = ?, stage = ?, at = ? WHERE session = ?",
                            (self._notes(p), stage, time.time(), p.session))

    def finish(self, p: PendingCapture, kept: int) -> None:
        """Move the session's offset past the capture and drop its record, in one transaction."""
        with self.db:
            self._put(p.session, p.transcript, p.project, p.end, p.exchanges, kept)
            self.db.execute("DELETE FROM pending WHERE session = ?", (p.session,))

    @staticmethod
    def _notes(p: PendingCapture) -> str:
        return json.dumps([asdict(n) for n in p.notes], ensure_ascii=False)

    def close(self) -> None:
        self.db.close()


def select(exchanges: list[Exchange], model, room: int) -> list[tuple[Exchange, str, float]]:
    """The exchanges worth a note, as `(exchange, kind, P(none))`, surest first, at most `room`.

    Two questions, as a cascade: `keep_exchange` (its state: the user's message and the
    answer as `answer_view` gives it, secrets already masked) for every exchange, then
    `keep_topic` (the user's message, or what the answer settles: for an answer too long to
    keep whole the sentences picked from it, `Exchange.salient`, else the answer as
    `answer_view` gives it) only for those that pass it; both must pass
    (`KEEP_NONE_P`, `TOPIC_NONE_P`). With the embedded model the texts of each question are
    embedded in one batch (`Request.local["query_vectors"]`).
    """
    from .classifiers import Request, load_question

    if room <= 0 or not exchanges:
        return []
    keep = {"keep_exchange": load_question("keep_exchange").question}
    topic = {"keep_topic": load_question("keep_topic").question}
    views = [answer_view(ex) for ex in exchanges]
    states = [{"exchange": selector_text(ex, view), "message": ex.user} for ex, view in zip(exchanges, views)]
    vectors = _batch_vectors(model, [st["exchange"] for st in states])
    passed = []
    for ex, state, view in zip(exchanges, states, views):
        answer = model.decide(Request(state, keep, local={"query_vectors": vectors}))["keep_exchange"]
        kinds = {k: v for k, v in answer.probabilities.items() if k != "none"}
        if answer.p("none") < KEEP_NONE_P and kinds:
            passed.append((ex, view, max(kinds, key=kinds.get), answer.p("none")))
    # the topic of the user's message, or of what the answer settles: its sentences picked
    # from a report too long to keep whole (a decision stated in a report the user only asked
    # for), else the answer as the selector read it ("let's decide the queue" -> "we switched
    # to RQ because ...")
    asked = [(ex, kind, p_none, [ex.user, " ".join(ex.salient) if ex.salient else view])
             for ex, view, kind, p_none in passed]
    vectors = _batch_vectors(model, [m for *_, messages in asked for m in messages])
    chosen = [(ex, kind, p_none) for ex, kind, p_none, messages in asked
              if any(model.decide(Request({"message": m}, topic, local={"query_vectors": vectors}))["keep_topic"].p("none")
                     < TOPIC_NONE_P for m in messages)]
    return sorted(chosen, key=lambda c: c[2])[:room]


def _batch_vectors(model, texts: list[str]) -> dict:
    """`{text: query vector}` for `texts` in one encoder call, when `model` is the embedded
    model (which reads them); `{}` for any other."""
    from .classifiers.embedded import EmbeddedChoiceModel

    if not texts or not isinstance(model, EmbeddedChoiceModel):
        return {}
    unique = list(dict.fromkeys(texts))
    return dict(zip(unique, model.encoder.query(unique)))


def capture(
    transcript: str | Path,
    session: str,
    cwd: str,
    *,
    final: bool,
    home: Path,
    model=None,
    today: str | None = None,
) -> CaptureResult:
    """Capture the exchanges of one session not captured yet (see the module docstring).

    The project is the one the transcript's own `cwd` names (`transcript.session_cwd`),
    else the one of `cwd` (the hook payload's, or the CLI's folder). `final` says the
    session ended (or is compacting): its last exchange is complete. `model` is a
    `ChoiceModel` with an `encoder` (default: the configured one, `load_model`, loaded only
    when there is something to judge).

    The writes are one unit: a record of the notes and passages to write goes to
    `capture.sqlite` first, each store is written idempotently, and the offset moves (and
    the record goes) only once all confirmed. A capture of the session that was cut short
    is finished first. Raises `OSError` for an unreadable transcript or a failed write (a
    full disk), `sqlite3.Error`, and `NotesFormatError` for a notes file memsift cannot
    rewrite safely; nothing is lost then: the next capture finishes or retries the unit.
    """
    from filelock import FileLock

    (home / "locks").mkdir(parents=True, exist_ok=True)
    with FileLock(str(_lock_path(home, session)), timeout=60):
        result = _capture_locked(Path(transcript), session, cwd, final=final, home=home, model=model, today=today)
    if result.kept or result.finished:
        _flush(home)
    return result


def _capture_locked(path: Path, session: str, cwd: str, *, final: bool, home: Path, model, today: str | None) -> CaptureResult:
    """`capture`, under the session's lock."""
    from .config import project_dir
    from .secrets import mask

    result = CaptureResult(session)
    state = CaptureState(home / "capture.sqlite")
    try:
        pending = state.pending(session)
        if pending is not None:
            result.finished = _finish(state, pending, home, getattr(model, "encoder", None))
        root = _project(path, cwd, session, state.project(session))
        folder = project_dir(root, home)
        offset, kept_before = state.get(session)
        size = path.stat().st_size
        if size < offset:
            log.warning("capture %s: %s shrank below the captured offset (%d < %d): reading it again",
                        session, path, size, offset)
            offset = 0
        result.offset = offset
        spool = Spool(home, session)
        last_answer = spool.read()
        room = MAX_NOTES_PER_SESSION - kept_before
        seconds = capture_seconds()
        deadline = time.monotonic() + seconds
        chosen: list[tuple[Exchange, str, float]] = []
        end = offset
        stopped = None  # why the exchanges after `end` wait for the next capture
        for batch in _batches(read_exchanges(path, offset, final=final, last_answer=last_answer, salience=salience)):
            result.exchanges += len(batch)
            end = batch[-1].end
            if len(chosen) >= room:  # the session has its notes: the rest is read, not judged
                continue
            if model is None:  # the configured model, as on the prompt path, loaded only when needed
                from .classifiers.remote import load_model

                model = load_model(home, strict=False)
            masked = [replace(ex, user=mask(ex.user).text, assistant=mask(ex.assistant).text,
                              salient=tuple(mask(x).text for x in ex.salient)) for ex in batch]
            chosen = sorted(chosen + select(masked, model, room - len(chosen)), key=lambda c: c[2])
            if len(chosen) >= room:
                log.info("capture %s: the session reached its %d notes; later exchanges are not considered",
                         session, MAX_NOTES_PER_SESSION)
            elif time.monotonic() > deadline:
                stopped = f"the {seconds:g} s time limit"
                break
        if not result.exchanges:
            result.skipped = "no complete exchange since the last capture"
            if final and size > offset:
                log.warning("capture %s: zero exchanges in %d new bytes of %s (format changed?)",
                            session, size - offset, path)
            state.put(session, str(path), str(root), offset, 0, kept_before)  # known to later sweeps
            spool.done()  # no exchange is open for it: the one it answered was captured already
            log.info("capture %s: nothing new in %s (offset %d of %d bytes)", session, path, offset, size)
            return result
        unit = PendingCapture(session, str(path), str(root), str(folder), root.name, offset, end,
                              result.exchanges, kept_before, _plan(chosen, folder, root.name, session, today))
        if unit.notes:
            state.begin(unit)
            result.kept = _finish(state, unit, home, getattr(model, "encoder", None))
        else:
            state.finish(unit, kept_before)
        result.offset = unit.end
        if stopped:
            result.skipped = f"stopped at {stopped}; the next capture goes on from offset {unit.end}"
            log.info("capture %s: stopped at %s after %d exchanges; the next capture resumes at offset %d",
                     session, stopped, result.exchanges, unit.end)
        else:
            spool.done()  # the last answer is in: the exchange it completed is captured
    finally:
        state.close()
    log.info("capture %s: %d exchanges read, kept %s, offset %d", session, result.exchanges, result.kept, result.offset)
    return result


def capture_seconds() -> float:
    """The time limit of a capture run in seconds: `MEMSIFT_CAPTURE_SECONDS` (`[capture]
    seconds` in config.toml), else `CAPTURE_SECONDS`; a value that is not a positive number
    is logged and ignored."""
    from .config import environment

    raw = environment().get("MEMSIFT_CAPTURE_SECONDS", "").strip()
    if raw:
        try:
            if float(raw) > 0:
                return float(raw)
        except ValueError:
            pass
        log.warning("MEMSIFT_CAPTURE_SECONDS=%r is not a positive number: using %g s", raw[:40], CAPTURE_SECONDS)
    return CAPTURE_SECONDS


def _batches(exchanges, size: int = BATCH_EXCHANGES):
    """`exchanges` (an iterator) in lists of `size`, the last one shorter."""
    batch: list[Exchange] = []
    for ex in exchanges:
        batch.append(ex)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class Spool:
    """The agent's last message of a session as the host's `Stop` payload gave it
    (`last_assistant_message`), kept for the capture that runs next.

    Claude Code writes that message to the transcript after its Stop hooks ran (hosts.md,
    B2), so the Stop hook spools it (`write`) and capture completes the session's last
    exchange with it (`transcript.read_exchanges`, `last_answer`). Files are
    `<home>/spool/<session>-<sha256 prefix>.txt` (folder 0700, files 0600, written
    atomically); `read` takes the newest, `done` removes it and older ones once the exchange
    is captured, never a newer one a later Stop wrote meanwhile. At most `MAX_CHARS`
    characters are kept.
    """

    MAX_CHARS = 4 * 1024 * 1024

    def __init__(self, home: Path, session: str) -> None:
        self.folder = home / "spool"
        self.prefix = _file_name(session) + "-"
        self._read: Path | None = None

    def _files(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.folder.glob(f"{glob_escape(self.prefix)}{'[0-9a-f]' * 16}.txt"):
            try:
                found.append((path.stat().st_mtime_ns, path))
            except OSError:
                continue  # removed meanwhile
        return sorted(found)

    def write(self, text: str) -> Path:
        """Spool `text` (cut to `MAX_CHARS`); the file written. Raises `OSError`."""
        import hashlib
        import os
        import tempfile

        data = text[: self.MAX_CHARS].encode("utf-8", "replace")
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.folder / f"{self.prefix}{hashlib.sha256(data).hexdigest()[:16]}.txt"
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")  # 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def read(self) -> str | None:
        """The newest spooled message, or None."""
        for _, path in reversed(self._files()):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            self._read = path
            return text
        return None

    @classmethod
    def prune(cls, home: Path, max_age_s: float) -> None:
        """Remove spooled messages older than `max_age_s` seconds (a session whose capture
        never ran again); errors are ignored."""
        cutoff = time.time() - max_age_s
        for path in (home / "spool").glob("*.txt"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                continue

    def done(self) -> None:
        """Remove the message `read` returned and any older one (never one written since)."""
        if self._read is None:
            return
        try:
            newest = self._read.stat().st_mtime_ns
        except OSError:
            return
        for mtime, path in self._files():
            if mtime <= newest:
                path.unlink(missing_ok=True)


def glob_escape(text: str) -> str:
    """`text` with the characters `Path.glob` reads as patterns bracketed."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def finish_pending(session: str, *, home: Path, model=None) -> CaptureResult | None:
    """Finish the session's capture that was cut short, if there is one (under the
    session's lock, as `capture`); its result, or None when there was none. Raises as
    `capture`."""
    from filelock import FileLock

    with FileLock(str(_lock_path(home, session)), timeout=60):
        state = CaptureState(home / "capture.sqlite")
        try:
            pending = state.pending(session)
            if pending is None:
                return None
            result = CaptureResult(session, offset=pending.end)
            result.finished = _finish(state, pending, home, getattr(model, "encoder", None))
        finally:
            state.close()
    _flush(home)
    log.info("capture %s: finished the capture cut short, notes %s", session, result.finished)
    return result


def _file_name(session: str) -> str:
    """`session` as part of a file name: word characters, `.` and `-` kept, at most 100."""
    return re.sub(r"[^\w.-]", "_", session)[:100]


def _lock_path(home: Path, session: str) -> Path:
    return home / "locks" / f"capture-{_file_name(session)}.lock"


def _project(path: Path, cwd: str, session: str, known: str | None = None) -> Path:
    """The project root the session belongs to: that of the folder its transcript says it
    started in. When that folder is gone, the project an earlier capture of the session
    used (`known`), else the transcript's folder as it was (its notes then wait under that
    name); `cwd` only when the transcript names no folder."""
    from .config import project_root
    from .transcript import session_cwd

    given = project_root(cwd)
    try:
        own = session_cwd(path)
    except OSError:
        own = None  # read_exchanges reports the unreadable file
    if not own:
        return given
    if not Path(own).is_dir():
        root = Path(known) if known else project_root(own)
        log.warning("capture %s: the transcript's cwd %s is not a folder here: filing under %s", session, own[:300], root)
        return root
    root = project_root(own)
    if root != given:
        log.info("capture %s: the transcript's cwd %s names project %s, not %s (from %s): using the transcript's",
                 session, own[:300], root, given, cwd)
    return root


def _plan(chosen, folder: Path, title: str, session: str, today: str | None) -> list[PlannedNote]:
    """The notes and passages the chosen exchanges make: texts masked as the notes store
    keeps them, those already noted and those the store could not write left out."""
    from .notes import Note, NoteStore, check_note
    from .secrets import mask

    date = today or dt.date.today().isoformat()
    known = {n.text for n in NoteStore(folder, title).notes()}
    planned = []
    for ex, kind, _ in chosen:
        text = mask(note_text(ex).strip()).text
        if not text or text in known:
            continue
        day = ex.date or date
        try:
            dt.date.fromisoformat(day)
        except ValueError:
            day = date  # a transcript's odd timestamp
        try:
            check_note(Note("", day, kind, text, session=session))
        except ValueError as exc:
            log.warning("capture %s: an exchange's note cannot be written (%s); left out", session, exc)
            continue
        known.add(text)
        planned.append(PlannedNote(kind, day, text, passage_text(ex)))
    return planned


def _finish(state: CaptureState, unit: PendingCapture, home: Path, encoder) -> list[str]:
    """Write what `unit` records to every store, each step idempotent, then move the offset;
    the ids of its notes. Run on a new unit and on one a killed capture left behind."""
    from .backends import Passage
    from .backends.base import exchange_passage_id
    from .backends.sqlite import SQLiteBackend
    from .notes import NoteStore

    store = NoteStore(Path(unit.folder), unit.title, encoder=encoder)
    if unit.stage == "planned":
        _write_notes(store, unit)
        state.advance(unit, "noted")
    noted = [n for n in unit.notes if n.id]
    passages = [Passage(exchange_passage_id(n.id), n.date, n.passage) for n in noted]
    if unit.stage == "noted":
        if passages:
            backend = SQLiteBackend(Path(unit.folder) / "passages.sqlite", store.encoder)
            try:
                backend.add(passages)  # by id: a passage stored before the interruption is not added again
            finally:
                backend.close()
        state.advance(unit, "stored")
    if unit.stage == "stored":
        if noted:
            _revise(store, unit.session)
        state.advance(unit, "revised")
    _queue_for_server(home, Path(unit.folder), noted, passages)  # by content hash: idempotent
    state.finish(unit, unit.kept_before + len(noted))
    return [n.id for n in noted]


def _write_notes(store, unit: PendingCapture) -> None:
    """Put the unit's notes in the notes file, setting their ids: a note of this session
    with the same text (written before an interruption) is the one, the others are added."""
    from .notes import Note

    existing = store.notes()
    by_id = {n.id: n for n in existing}
    mine = {n.text: n.id for n in existing if n.session == unit.session}
    for n in unit.notes:
        if not (n.id and n.id in by_id and by_id[n.id].session == unit.session):
            n.id = mine.get(n.text)
    missing = [n for n in unit.notes if not n.id]
    if missing:
        added = store.add([Note("", n.date, n.kind, n.text, session=unit.session) for n in missing],
                          link_supersession=False, skip_known=True)
        ids = {n.text: n.id for n in added}
        for n in missing:
            n.id = ids.get(n.text)  # None: the text was noted meanwhile by another writer


def _revise(store, session: str) -> None:
    """Run the configured reviser over the notes. A failure of it is logged, not raised (the
    notes and passages are stored; the next capture revises again), except `OSError`."""
    from .revisers import EmbeddedReviser, load_reviser, revise_notes

    try:
        reviser = load_reviser()
    except ValueError as exc:
        log.warning("reviser misconfigured (%s): using the embedded reviser", exc)
        reviser = EmbeddedReviser()
    try:
        ops, revision = revise_notes(store, reviser)
    except OSError:
        raise
    except Exception as exc:
        log.warning("capture %s: the reviser failed (%s: %s); the notes stay as written",
                    session, type(exc).__name__, str(exc)[:300])
        return
    if revision is not None:
        log.info("capture %s: revision %s by %s, %d operations", session, revision.id, revision.backend, len(ops))


def _queue_for_server(home: Path, folder: Path, notes: list[PlannedNote], passages) -> None:
    """When a Cognee server is configured, put the notes and passages in the outbox (framed
    as memsift pastes them; the outbox keeps a text once)."""
    from .config import cognee_config

    if cognee_config() is None or not (notes or passages):
        return
    from .backends.cognee import dataset_name, frame_passage
    from .recall import Item, frame
    from .sync import queue

    texts = [frame(Item(n.id, "note", n.date, n.text, n.kind)) for n in notes] + [frame_passage(p) for p in passages]
    queue(home, dataset_name(folder.name), texts)


def _flush(home: Path) -> None:
    """Try to send the outbox, when a Cognee server is configured (what fails stays queued)."""
    from .config import cognee_config

    config = cognee_config()
    if config is not None:
        from .sync import flush

        flush(home, config)


#: A session whose transcript has not changed for this long is taken as ended by a sweep.
SWEEP_QUIET_S = 30 * 60
#: Transcripts a sweep captures at most, newest first.
SWEEP_MAX = 20
#: A spooled last message this old is dropped by the sweep: its session's transcript holds
#: it long since.
SPOOL_MAX_AGE_S = 7 * 24 * 3600


def _reindex(root: Path, home: Path, encoder) -> None:
    """Bring the project's notes index up to date with its Markdown (after an encoder change,
    a bulk edit or a lost index, which the prompt hook leaves to this), and its local passages
    to the current encoder (`SQLiteBackend.reembed`), logging a failure."""
    from .config import project_dir
    from .notes import NoteStore

    store = NoteStore(project_dir(root, home), root.name, encoder=encoder)
    if store.markdown.exists():
        try:
            store.reindex(wait=0)  # one already running does the job
        except Exception as exc:
            _log_failure(f"sweep: reindexing the notes of {root}", exc)
    passages = store.folder / "passages.sqlite"
    if passages.exists():  # vectors of an earlier encoder are embedded again
        from .backends.sqlite import reembed_passages

        try:
            reembed_passages(passages, store.encoder)
        except Exception as exc:
            _log_failure(f"sweep: re-embedding the passages of {root}", exc)


def _verify(root: Path, home: Path) -> None:
    """Check the claims of the project's notes against the project as it is now
    (`memsift.verify`), logging a failure: the sweep goes on."""
    from .config import project_dir
    from .notes import NoteStore

    store = NoteStore(project_dir(root, home), root.name)
    if not store.markdown.exists():
        return
    try:
        from .verify import verify

        verify(store, root)
    except Exception as exc:
        _log_failure(f"sweep: verifying the notes of {root}", exc)


def sweep(cwd: str, *, home: Path, exclude: str = "", folder: Path | None = None, model=None) -> list[CaptureResult]:
    """Capture, as ended, the project's other sessions that have uncaptured exchanges.

    Candidates are the sessions capture has seen for this project and, for Claude Code,
    the other transcripts in `folder` (the host keeps one folder per project; the session
    id is the file name). A transcript written to in the last `SWEEP_QUIET_S` seconds is
    left alone: that session may still be running. A capture of the project cut short
    (`PendingCapture`) is finished in any case. Errors on one transcript are logged and the
    sweep goes on. Last, the notes' claims are checked (`memsift.verify`) and the project's
    notes index is rebuilt where it lags the Markdown (`NoteStore.reindex`).
    """
    from .config import project_root

    root = str(project_root(cwd))
    candidates: dict[str, Path] = {}
    state = CaptureState(home / "capture.sqlite")
    try:
        for session, transcript in state.db.execute(
            "SELECT session, transcript FROM sessions WHERE project = ?", (root,)
        ):
            candidates[session] = Path(transcript)
        if folder is not None and folder.is_dir():
            for path in folder.glob("*.jsonl"):
                candidates.setdefault(path.stem, path)
        now = time.time()
        todo = []
        for session, path in candidates.items():
            try:
                st = path.stat()
            except OSError:
                continue
            if session != exclude and now - st.st_mtime >= SWEEP_QUIET_S and st.st_size > state.get(session)[0]:
                todo.append((st.st_mtime, session, path))
        todo = sorted(todo, reverse=True)[:SWEEP_MAX]
        # a capture cut short is finished whether or not its session still runs: it only
        # writes what its record holds
        unfinished = [s for s in state.pending_sessions(root) if s != exclude and s not in {t[1] for t in todo}]
    finally:
        state.close()
    results = []
    for session in unfinished:
        try:
            done = finish_pending(session, home=home, model=model)
            if done is not None:
                results.append(done)
        except Exception as exc:
            from .runlog import record_failure

            _log_failure(f"sweep: finishing the capture of {session} cut short", exc)
            record_failure(home, "capture", exc, session=session, project=root)
    for _, session, path in todo:
        try:
            results.append(capture(path, session, cwd, final=True, home=home, model=model))
        except Exception as exc:
            from .runlog import record_failure

            _log_failure(f"sweep: capture of {session} ({path})", exc)
            record_failure(home, "capture", exc, session=session, project=root)
    _verify(Path(root), home)  # before the reindex, which then indexes the statuses it wrote
    _reindex(Path(root), home, getattr(model, "encoder", None))
    Spool.prune(home, SPOOL_MAX_AGE_S)
    from .config import cognee_config

    config = cognee_config()
    if config is not None:  # what earlier sessions could not send goes now, if the server is back
        from .sync import flush

        flush(home, config)
    return results


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota) is full: `OSError` ENOSPC or
    EDQUOT, or SQLite's SQLITE_FULL (13, https://sqlite.org/rescode.html#full)."""
    import errno
    import sqlite3

    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    return isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == 13


def _log_failure(what: str, exc: Exception) -> None:
    """A failure in the log: one line for what the machine did (a full disk, a file that
    cannot be opened, a locked database), the traceback for anything else (a bug)."""
    import sqlite3

    if isinstance(exc, (OSError, sqlite3.Error)):
        log.error("%s failed: %s: %s", what, type(exc).__name__, exc)
    else:
        log.exception("%s failed", what)
