"""Whole sessions as training records (batch 5, `training/data/conversations/`).

A session file has the eval conversations' format (`memsift-conversation/1`, see
`../shared/eval/FORMAT.md`): a project's notes and passages as they stood before the
session, and its ~80 user messages labelled with a genre and the items that answer them.
The teachers of batch 5 wrote them (`data/conversations/BRIEF.md`) so that the heads also
learn from what a real session looks like: stores of 40-50 notes and 120-150 passages,
long multi-part messages beside "ok", and a recall turn about one in four.

The records have the shapes of `data/pairs/*.jsonl` and `data/genre/*.jsonl`, so the
training scripts read them as one more project and one more genre file each:

- pairs: `{"type": "note" | "passage", "project", "id", "date", "kind" (notes only), "text", "lang"}` and
  `{"type": "query", "project", "text", "answers", "near": [], "lang"}`; the project is the
  session's `id`, and item ids are prefixed with it (`<id>-N03`) to stay unique across
  projects. Every turn is a query; a turn without `needs_recall` answers to nothing (its
  shortlist is all negatives, as in the cascade).
- genre: `{"text", "genre", "topic": None, "lang", "file": <id>}` (sessions carry no
  `keep_topic` label).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "data" / "conversations"


def load_sessions(folder: Path = FOLDER, exclude: frozenset[str] = frozenset()) -> list[dict]:
    """The session files of `folder` (`*.json`, sorted by name), minus those whose `id` is
    in `exclude`. Raises ValueError on a file of another format."""
    out = []
    for path in sorted(folder.glob("*.json")):
        conv = json.loads(path.read_text(encoding="utf-8"))
        if conv.get("format") != "memsift-conversation/1":
            raise ValueError(f"{path}: not a memsift-conversation/1 file")
        if conv["id"] not in exclude:
            out.append(conv)
    return out


@functools.lru_cache(maxsize=None)
def session_ids(folder: Path = FOLDER, exclude: frozenset[str] = frozenset()) -> frozenset[str]:
    """The `id`s of `load_sessions(folder, exclude)`, read once per process."""
    return frozenset(conv["id"] for conv in load_sessions(folder, exclude))


def pair_records(conv: dict) -> list[dict]:
    """The session's items and its turns as `data/pairs` records (module docstring)."""
    project, lang = conv["id"], conv["language"]
    out = []
    for tier, key in (("note", "notes"), ("passage", "passages")):
        for item in conv[key]:
            record = {"type": tier, "project": project, "id": f"{project}-{item['id']}", "date": item["date"],
                      "text": item["text"], "lang": lang}
            if tier == "note":  # passages carry no kind, as in the cascade
                record["kind"] = item["kind"]
            out.append(record)
    for turn in conv["turns"]:
        answers = [f"{project}-{i}" for i in turn.get("expected", [])] if turn.get("needs_recall") else []
        out.append({"type": "query", "project": project, "text": turn["user"], "answers": answers, "near": [],
                    "lang": lang})
    return out


def genre_records(conv: dict) -> list[dict]:
    """The session's messages as `data/genre` records (module docstring)."""
    return [{"text": t["user"], "genre": t["genre"], "topic": None, "lang": conv["language"], "file": conv["id"]}
            for t in conv["turns"]]
