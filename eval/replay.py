"""Replay test conversations through the recall pipelines and score them (FORMAT.md).

Each conversation gets fresh stores in a temp folder: its notes go into a `NoteStore`
through the same write path as `memsift notes add` (so supersession is linked when they are
written), its passages into the embedded passage backend. Turns are replayed in order with
the previous turns as context and a per-session ledger, exactly as the hook would see them.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ..backends import Passage
from ..backends.sqlite import SQLiteBackend
from ..config import Settings
from ..ledger import Ledger
from ..notes import Note, NoteStore
from ..recall import OriginRecaller, Recaller
from ..transcript import Turn
from .figures import Figures

Genre = Literal[
    "reaction", "finished_work_action", "complete_instruction", "general_knowledge",
    "conversation_question", "new_decision", "past_choice", "resume_work",
    "recurring_problem", "existing_code_task", "past_exchange",
]


class ConversationNote(BaseModel):
    id: str
    date: str
    kind: Literal["decision", "constraint", "incident", "convention", "context"]
    text: str


class ConversationPassage(BaseModel):
    id: str
    date: str
    text: str


class ConversationTurn(BaseModel):
    n: int
    user: str
    assistant: str
    genre: Genre
    needs_recall: bool
    expected: list[str]
    why: str = ""


class Conversation(BaseModel):
    """A test conversation (`memsift-conversation/1`, see `eval/FORMAT.md`)."""

    model_config = ConfigDict(extra="allow")

    format: Literal["memsift-conversation/1"]
    id: str
    language: str
    title: str
    notes: list[ConversationNote]
    passages: list[ConversationPassage]
    turns: list[ConversationTurn]

    @model_validator(mode="after")
    def _ids_known(self) -> "Conversation":
        ids = {n.id for n in self.notes} | {p.id for p in self.passages}
        for t in self.turns:
            unknown = set(t.expected) - ids
            if unknown:
                raise ValueError(f"turn {t.n}: unknown expected ids {sorted(unknown)}")
        return self


class ConversationError(ValueError):
    """A conversation file cannot be read; the message names the file and the problem."""


def load_conversation(path: Path) -> Conversation:
    """Read and validate one conversation file. Raises `ConversationError`."""
    try:
        return Conversation.model_validate_json(Path(path).read_bytes())
    except (OSError, ValidationError) as exc:
        raise ConversationError(f"{path}: {exc}") from None


def conversation_paths(paths: list[str]) -> list[Path]:
    """Expand folders to their `*.json` files, sorted. Raises `ConversationError` if none."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob("*.json")) if p.is_dir() else [p]
    if not out:
        raise ConversationError(f"no conversation files in {', '.join(paths)}")
    return out


def score(conv: Conversation, lines: list[dict], name: str) -> Figures:
    """Figures of one replay (its JSONL lines) against the conversation's labels."""
    f = Figures(name)
    for turn, line in zip(conv.turns, lines):
        ids = {i["id"] for i in line["injected"]}
        f.turns += 1
        f.pasted += bool(ids)
        f.chars += line["chars"]
        f.ms.append(line["ms"])
        if line["genre"] is not None:
            f.genre_known += 1
            f.genre_right += line["genre"] == turn.genre
        if turn.needs_recall:
            f.recall_turns += 1
            f.found += bool(ids & set(turn.expected))
            f.wrong += bool(ids) and not (ids & set(turn.expected))
        else:
            f.quiet += 1
            f.pasted_for_nothing += bool(ids)
    return f


@contextmanager
def conversation_stores(conv: Conversation, encoder, link_supersession: bool = True,
                        backend: str = "embedded") -> Iterator[tuple[NoteStore, object]]:
    """Fresh stores in a temp folder holding the conversation's notes and passages.

    Notes go in through `NoteStore.add`, the write path of `memsift notes add`, so the
    notes they replace are marked superseded as they would be in use. Passages go to the
    embedded SQLite backend, or with `backend="cognee"` to a new dataset on the Cognee
    server of `MEMSIFT_COGNEE_URL` (added, then cognified before the replay starts).
    Raises `ConversationError` when the Cognee server is not configured.
    """
    with tempfile.TemporaryDirectory(prefix=f"memsift-eval-{conv.id}-") as tmp:
        notes = NoteStore(Path(tmp) / "notes", conv.id, encoder=encoder)
        notes.add([Note(n.id, n.date, n.kind, n.text) for n in sorted(conv.notes, key=lambda n: n.date)],
                  link_supersession=link_supersession)
        passages = [Passage(p.id, p.date, p.text) for p in conv.passages]
        if backend == "cognee":
            store = _cognee_dataset(conv, encoder, passages)
        else:
            store = SQLiteBackend(Path(tmp) / "passages.sqlite", encoder)
            store.add(passages)
        try:
            yield notes, store
        finally:
            store.close()


def _cognee_dataset(conv: Conversation, encoder, passages: list[Passage]):
    """A fresh dataset on the configured Cognee server holding `passages`, cognified."""
    import uuid

    from ..backends.cognee import CogneeBackend
    from ..config import cognee_config

    config = cognee_config()
    if config is None:
        raise ConversationError("--backend cognee needs MEMSIFT_COGNEE_URL (and MEMSIFT_COGNEE_API_KEY)")
    dataset = f"memsift_eval_{conv.id.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    store = CogneeBackend(config.url, dataset, encoder, api_key=config.api_key, jwt=config.jwt)
    for i in range(0, len(passages), 50):
        store.add(passages[i:i + 50])
    store.wait_cognified(dataset)
    return store


def replay_turns(conv: Conversation, recaller, name: str, use_ledger: bool = True, progress: bool = True) -> list[dict]:
    """The FORMAT.md replay lines of one pipeline over one conversation, turn by turn,
    with the previous turns as context and a per-session ledger (unless `use_ledger` is off)."""
    from tqdm import tqdm

    ledger = Ledger(":memory:")
    lines, previous = [], []
    for turn in tqdm(conv.turns, desc=f"{conv.id} {name}", disable=not progress, leave=False):
        result = recaller.recall(turn.user, previous, ledger.pasted(conv.id) if use_ledger else set())
        ledger.claim(conv.id, [i.id for i in result.items])
        lines.append({
            "conversation": conv.id, "n": turn.n, "genre": result.genre,
            "injected": result.item_chars(), "chars": len(result.text), "ms": round(result.ms, 1),
            "pipeline": name, "trace": result.trace,
        })
        previous.append(Turn(turn.user, turn.assistant))
    ledger.close()
    return lines


def replay(
    conv: Conversation,
    pipelines: list[str],
    model,
    encoder,
    settings: Settings | None = None,
    progress: bool = True,
    backend_name: str = "embedded",
) -> dict[str, list[dict]]:
    """Replay one conversation through each named pipeline (`memsift`, `origin`), its
    passages in the `backend_name` backend (`embedded` or `cognee`).

    Returns the FORMAT.md replay lines per pipeline.
    """
    out: dict[str, list[dict]] = {}
    with conversation_stores(conv, encoder, backend=backend_name) as (notes, backend):
        for name in pipelines:
            if name == "memsift":
                recaller = Recaller(model, encoder, notes, backend, settings)
            elif name == "origin":
                recaller = OriginRecaller(encoder, notes, backend)
            else:
                raise ValueError(f"unknown pipeline {name!r}: use memsift or origin")
            out[name] = replay_turns(conv, recaller, name, progress=progress)
    return out


GENRES = list(Genre.__args__)


def recall_outcomes(runs: list[tuple[Conversation, list[dict]]]) -> dict[str, int]:
    """How each recall turn of memsift's replays ended, by the stage that decided it."""
    outcome: dict[str, int] = {}
    for conv, lines in runs:
        for t, line in zip(conv.turns, lines):
            if not t.needs_recall:
                continue
            ids = {i["id"] for i in line["injected"]}
            steps = {s["step"]: s for s in line["trace"]}
            judged = [c["id"] for s in line["trace"] for c in s.get("candidates", [])]
            if ids & set(t.expected):
                why = "found"
            elif ids:
                why = "wrong item pasted"
            elif "notes" not in steps:
                why = "gate closed"
            elif set(judged) & set(t.expected):
                why = "judged, said no (or already said)"
            elif "topic" in steps and "passages" not in steps:
                why = "topic gate stopped, answer not in notes shortlist"
            else:
                why = "answer not shortlisted"
            outcome[why] = outcome.get(why, 0) + 1
    return outcome


def details(runs: list[tuple[Conversation, list[dict]]], out: IO[str]) -> None:
    """Print, for memsift's replays: the genre confusion matrix, the lookup/no-lookup split,
    figures per language, and why each recall turn was or was not found."""
    from ..classifiers import load_question

    lookup = set(load_question("genre").extra["lookup"])
    pairs = [(t, line) for conv, lines in runs for t, line in zip(conv.turns, lines)]
    short = {g: "".join(w[0] for w in g.split("_")) for g in GENRES}
    print("\ngenre confusion (rows: labelled, columns: predicted)", file=out)
    print(" " * 24 + "".join(f"{short[g]:>5}" for g in GENRES), file=out)
    for g in GENRES:
        row = [sum(1 for t, line in pairs if t.genre == g and line["genre"] == p) for p in GENRES]
        print(f"{g:<24}" + "".join(f"{n:>5}" for n in row), file=out)
    split = sum((t.genre in lookup) == (line["genre"] in lookup) for t, line in pairs)
    print(f"lookup / no-lookup split by predicted genre: {split}/{len(pairs)}", file=out)
    gate = [next((s for s in line["trace"] if s["step"] == "genre"), {}) for _, line in pairs]
    opened = sum(1 for g in gate if g.get("lookup_p", 0) >= Settings().lookup_p)
    print(f"gate opened on {opened}/{len(pairs)} turns", file=out)

    print("\nper language", file=out)
    for lang in sorted({conv.language for conv, _ in runs}):
        total = Figures(lang)
        for conv, lines in runs:
            if conv.language == lang:
                total.add(score(conv, lines, lang))
        print(total.row(), file=out)

    outcome = recall_outcomes(runs)
    print("\nrecall turns by outcome: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome.items())), file=out)


def run_eval(
    paths: list[str], pipelines: list[str], replay_file: IO[str] | None, out: IO[str], show_details: bool = False,
    backend: str = "embedded", report: str | None = None,
) -> dict[str, Figures]:
    """`memsift eval`: replay and score every conversation, print the table, return the totals."""
    from ..classifiers.remote import load_model

    files = conversation_paths(paths)  # fails before the model loads
    model = load_model()  # MEMSIFT_DECISION_*: a remote model, with the embedded one behind it
    encoder = model.encoder
    remote = getattr(model, "remote", None)
    print(f"memsift eval: decision model {model.name}, passages in the {backend} backend", file=out)
    totals = {name: Figures(f"TOTAL {name}") for name in pipelines}
    runs: list[tuple[Conversation, list[dict]]] = []
    per_conversation: dict[str, dict[str, Figures]] = {}
    for path in files:
        conv = load_conversation(path)
        lines = replay(conv, pipelines, model, encoder, backend_name=backend)
        if "memsift" in lines:
            runs.append((conv, lines["memsift"]))
        for name in pipelines:
            figures = score(conv, lines[name], f"{conv.id} {name}")
            per_conversation.setdefault(conv.id, {})[name] = figures
            totals[name].add(figures)
            print(figures.row(), file=out, flush=True)
            if replay_file is not None:
                for line in lines[name]:
                    replay_file.write(json.dumps(line, ensure_ascii=False) + "\n")
    for name in pipelines:
        print(totals[name].row(), file=out)
    if remote is not None:
        fell_back = sum(1 for e in model.events if e["source"] == "embedded")
        turns = max(totals["memsift"].turns if "memsift" in totals else 1, 1)
        print(f"decision model {remote.name}: {remote.usage.calls} calls, {remote.usage.input_tokens:,} input tokens "
              f"({remote.usage.input_tokens / turns:,.0f} per message), ${remote.usage.cost_usd:.4f} "
              f"(${remote.usage.cost_usd / turns:.6f} per message at ${remote.usage.price_per_mtok}/M); "
              f"{fell_back} of {len(model.events)} requests answered by the embedded model", file=out)
    if show_details and runs:
        details(runs, out)
    if report:
        from .report import write_report

        write_report(report, per_conversation, recall_outcomes(runs))
        print(f"report written to {report}", file=out)
    return totals
