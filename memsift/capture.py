"""Session capture: keep what would spare redoing work, as notes and passages.

For one session's transcript (`capture`):

1. stream the exchanges not captured yet (from the byte offset recorded per session in
   `<memsift home>/capture.sqlite`, so capturing twice adds nothing);
2. mask secrets in each (`memsift.secrets.mask`), before anything is judged or stored;
3. the selector asks the decision model `keep_exchange` ("would keeping this spare redoing
   work, and as what kind of note?") and keeps the exchanges it is sure of, at most
   `MAX_NOTES_PER_SESSION` per session, surest first;
4. each kept exchange becomes a short note (its answer's first sentences, `note_text`) in
   the project's notes, and a passage (`User: ... Assistant: ...`) in its passage store;
5. the reviser (`memsift.revisers`: the embedded one unless another is configured) then
   removes duplicates and marks the notes the new ones replace, by line operations.

Runs of the same session are serialised by a lock file; runs of different sessions only
meet in the notes store, which has its own lock.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .transcript import Exchange, read_exchanges

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
#: Characters of a note and of a passage made from an exchange.
NOTE_CHARS = 400
PASSAGE_CHARS = 1500
#: Characters of the agent's answer the selector reads (its head was trained on summaries).
SELECTOR_ANSWER_CHARS = 800

_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.DOTALL)
_MARKUP = re.compile(r"^\s*(#+|[-*+]|\d+[.)])\s+|\*\*|__|`", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")


@dataclass
class CaptureResult:
    """What one capture run did."""

    session: str
    exchanges: int = 0
    kept: list[str] = field(default_factory=list)  # ids of the notes added
    offset: int = 0
    skipped: str | None = None  # why nothing was read, when nothing was


def plain(text: str) -> str:
    """`text` without code blocks and Markdown markup, whitespace collapsed."""
    return " ".join(_MARKUP.sub("", _CODE_BLOCK.sub(" ", text)).split())


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


def note_text(exchange: Exchange, limit: int = NOTE_CHARS) -> str:
    """A short note from an exchange, at most `limit` characters.

    Extractive, since the embedded model cannot write: the answer's sentences without the
    ones that narrate the work ("Let me check..."), those that carry a reason, a rule or a
    fix first (`_SUBSTANCE`), then the others in order; when the user's message states the
    decision itself ("let's go with X because Y") and is short, it leads the note; when the
    answer says nothing of its own ("Done."), the user's words are the note.
    """
    sentences = [x.strip() for x in _SENTENCE.split(plain(exchange.assistant)) if x.strip()]
    sentences = [x for x in sentences if not _NARRATION.match(x)]
    user = plain(exchange.user)
    lead = ""
    if not sentences or sum(map(len, sentences)) < 40:
        lead, sentences = user, []
    elif len(user) <= _USER_NOTE_CHARS and _USER_DECIDES.search(user):
        lead = user
    ranked = sorted(range(len(sentences)), key=lambda i: (not _SUBSTANCE.search(sentences[i]), i))
    room = limit - len(lead) - (3 if lead else 0)
    chosen: list[int] = []
    for i in ranked:
        if sum(len(sentences[j]) + 1 for j in chosen) + len(sentences[i]) > room and chosen:
            break
        chosen.append(i)
        if sum(len(sentences[j]) + 1 for j in chosen) >= room // 2:
            break
    body = " ".join(sentences[i] for i in sorted(chosen))
    out = (f"{lead} — {body}" if lead and body else lead or body).rstrip(" ;:,")
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def passage_text(exchange: Exchange, limit: int = PASSAGE_CHARS) -> str:
    """The exchange as a passage, `User: ... Assistant: ...`, at most `limit` characters."""
    user = plain(exchange.user)[: limit // 3]
    return f"User: {user} Assistant: {plain(exchange.assistant)}"[:limit].rstrip()


class CaptureState:
    """Per-session capture progress in SQLite (WAL, safe with several writers)."""

    def __init__(self, path: Path) -> None:
        from .config import open_state

        self.db = open_state(
            path,
            """
            CREATE TABLE IF NOT EXISTS sessions (session TEXT PRIMARY KEY, transcript TEXT,
                project TEXT, offset INTEGER DEFAULT 0, exchanges INTEGER DEFAULT 0,
                kept INTEGER DEFAULT 0, at REAL);
            """
        )

    def get(self, session: str) -> tuple[int, int]:
        """`(offset, notes kept so far)` for a session; `(0, 0)` when never captured."""
        row = self.db.execute("SELECT offset, kept FROM sessions WHERE session = ?", (session,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def put(self, session: str, transcript: str, project: str, offset: int, exchanges: int, kept: int) -> None:
        with self.db:
            self.db.execute(
                """INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session) DO UPDATE SET
                   transcript = excluded.transcript, project = excluded.project, offset = excluded.offset,
                   exchanges = sessions.exchanges + excluded.exchanges, kept = excluded.kept, at = excluded.at""",
                (session, transcript, project, offset, exchanges, kept, time.time()),
            )

    def close(self) -> None:
        self.db.close()


def select(exchanges: list[Exchange], model, room: int) -> list[tuple[Exchange, str, float]]:
    """The exchanges worth a note, as `(exchange, kind, P(none))`, surest first, at most `room`.

    Asks `keep_exchange` (its state: the user's message and the start of the answer, secrets
    already masked) and `keep_topic` (the user's message) once per exchange, in one request;
    both must pass (`KEEP_NONE_P`, `TOPIC_NONE_P`).
    """
    from .classifiers import Request, load_question

    if room <= 0:
        return []
    questions = {"keep_exchange": load_question("keep_exchange").question,
                 "keep_topic": load_question("keep_topic").question}
    chosen = []
    for ex in exchanges:
        state = {"exchange": f"{ex.user}\n{plain(ex.assistant)[:SELECTOR_ANSWER_CHARS]}", "message": ex.user}
        answers = model.decide(Request(state, questions))
        p_none = answers["keep_exchange"].p("none")
        kinds = {k: v for k, v in answers["keep_exchange"].probabilities.items() if k != "none"}
        if p_none < KEEP_NONE_P and answers["keep_topic"].p("none") < TOPIC_NONE_P and kinds:
            chosen.append((ex, max(kinds, key=kinds.get), p_none))
    return sorted(chosen, key=lambda c: c[2])[:room]


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

    `final` says the session ended (or is compacting): its last exchange is complete.
    `model` is a `ChoiceModel` with an `encoder` (default: the configured one, `load_model`,
    loaded only when there is something to judge). Raises `OSError` for an unreadable transcript and
    `NotesFormatError` for a notes file memsift cannot rewrite safely (nothing is lost:
    the offset does not move, the next capture retries).
    """
    from filelock import FileLock

    from .config import project_dir, project_root
    from .secrets import mask

    result = CaptureResult(session)
    path = Path(transcript)
    root = project_root(cwd)
    folder = project_dir(root, home)
    (home / "locks").mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.-]", "_", session)[:100]
    with FileLock(str(home / "locks" / f"capture-{safe}.lock"), timeout=60):
        state = CaptureState(home / "capture.sqlite")
        try:
            offset, kept_before = state.get(session)
            size = path.stat().st_size
            if size < offset:
                log.warning("capture %s: %s shrank below the captured offset (%d < %d): reading it again",
                            session, path, size, offset)
                offset = 0
            result.offset = offset
            exchanges = []
            for ex in read_exchanges(path, offset, final=final):
                exchanges.append(replace(ex, user=mask(ex.user).text, assistant=mask(ex.assistant).text))
            result.exchanges = len(exchanges)
            if not exchanges:
                result.skipped = "no complete exchange since the last capture"
                if final and size > offset:
                    log.warning("capture %s: zero exchanges in %d new bytes of %s (format changed?)",
                                session, size - offset, path)
                state.put(session, str(path), str(root), offset, 0, kept_before)  # known to later sweeps
                log.info("capture %s: nothing new in %s (offset %d of %d bytes)", session, path, offset, size)
                return result
            if model is None:  # the configured model, as on the prompt path
                from .classifiers.remote import load_model

                model = load_model(home, strict=False)
            chosen = select(exchanges, model, MAX_NOTES_PER_SESSION - kept_before)
            if kept_before + len(chosen) >= MAX_NOTES_PER_SESSION:
                log.info("capture %s: the session reached its %d notes; later exchanges are not considered",
                         session, MAX_NOTES_PER_SESSION)
            if chosen:
                notes, passages = _store(chosen, folder, root.name, getattr(model, "encoder", None), session, today)
                result.kept = [n.id for n in notes]
                _queue_for_server(home, folder, notes, passages)
            result.offset = exchanges[-1].end
            state.put(session, str(path), str(root), result.offset, len(exchanges), kept_before + len(result.kept))
        finally:
            state.close()
    log.info("capture %s: %d exchanges read, kept %s, offset %d", session, result.exchanges, result.kept, result.offset)
    return result


def _queue_for_server(home: Path, folder: Path, notes, passages) -> None:
    """When a Cognee server is configured, put the new notes and passages in the outbox
    (framed as memsift pastes them) and try to send them."""
    from .config import cognee_config

    config = cognee_config()
    if config is None or not (notes or passages):
        return
    from .backends.cognee import dataset_name, frame_passage
    from .recall import Item, frame
    from .sync import flush, queue

    texts = [frame(Item(n.id, "note", n.date, n.text, n.kind)) for n in notes] + [frame_passage(p) for p in passages]
    queue(home, dataset_name(folder.name), texts)
    flush(home, config)


def _store(chosen, folder: Path, title: str, encoder, session: str, today: str | None) -> tuple[list, list]:
    """Append the chosen exchanges as notes and passages, then revise; the notes and
    passages added."""
    from .backends import Passage
    from .backends.sqlite import SQLiteBackend
    from .notes import Note, NoteStore
    from .revisers import EmbeddedReviser, load_reviser, revise_notes

    date = today or dt.date.today().isoformat()
    store = NoteStore(folder, title, encoder=encoder)
    known = {n.text for n in store.notes()}
    notes, sources = [], []
    for ex, kind, _ in chosen:
        text = note_text(ex)
        if text and text not in known:
            known.add(text)
            notes.append(Note("", ex.date or date, kind, text, session=session))
            sources.append(ex)
    added = store.add(notes, link_supersession=False, skip_known=True) if notes else []
    source = {note.text: ex for note, ex in zip(notes, sources)}  # add() masks and may skip: match by text
    passages = [Passage(f"{n.id}-x", n.date, passage_text(source[n.text])) for n in added if n.text in source]
    backend = SQLiteBackend(folder / "passages.sqlite", store.encoder)
    try:
        backend.add(passages)
    finally:
        backend.close()
    if added:
        try:
            reviser = load_reviser()
        except ValueError as exc:
            log.warning("reviser misconfigured (%s): using the embedded reviser", exc)
            reviser = EmbeddedReviser()
        ops, revision = revise_notes(store, reviser)
        if revision is not None:
            log.info("capture %s: revision %s by %s, %d operations", session, revision.id, revision.backend, len(ops))
    return added, passages


#: A session whose transcript has not changed for this long is taken as ended by a sweep.
SWEEP_QUIET_S = 30 * 60
#: Transcripts a sweep captures at most, newest first.
SWEEP_MAX = 20


def sweep(cwd: str, *, home: Path, exclude: str = "", folder: Path | None = None, model=None) -> list[CaptureResult]:
    """Capture, as ended, the project's other sessions that have uncaptured exchanges.

    Candidates are the sessions capture has seen for this project and, for Claude Code,
    the other transcripts in `folder` (the host keeps one folder per project; the session
    id is the file name). A transcript written to in the last `SWEEP_QUIET_S` seconds is
    left alone: that session may still be running. Errors on one transcript are logged
    and the sweep goes on.
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
    finally:
        state.close()
    results = []
    for _, session, path in sorted(todo, reverse=True)[:SWEEP_MAX]:
        try:
            results.append(capture(path, session, cwd, final=True, home=home, model=model))
        except Exception as exc:
            from .runlog import record_failure

            log.exception("sweep: capture of %s (%s) failed", session, path)
            record_failure(home, "capture", exc, session=session, project=root)
    from .config import cognee_config

    config = cognee_config()
    if config is not None:  # what earlier sessions could not send goes now, if the server is back
        from .sync import flush

        flush(home, config)
    return results
