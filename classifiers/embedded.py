"""The embedded decision model: an encoder plus the shipped heads, no network.

Question ids it answers (the id before the first `.` names the head):

- `genre`, `keep_topic`: `state["message"]`;
- `keep_exchange`: `state["exchange"]`;
- `note_answers.<i>` / `passage_answers.<i>`: `state["message"]` against `state["notes"][i]`
  or `state["passages"][i]` (each a string or a mapping with a `text`, and optionally a
  `date` and a `kind`), judged among the other items of that list (`shortlist_features`).

`Request.local` may carry precomputed vectors so that nothing stored is embedded at query
time: `query_vector` (d,) of the message, `query_vectors` ({text: (d,)}: the query vectors of
any texts the questions embed, as a caller that batches them computed them), `note_vectors` / `passage_vectors` (n, d) aligned with the state's
lists, and `note_background` / `passage_background` (the median cosine of the message over
the whole tier) with `note_count` / `passage_count` (how many items that median is over).
Missing vectors are computed; a missing background is the median of the request's items.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Answer, Request, UnsupportedQuestion
from .encoders import Encoder, load_encoder
from .features import shortlist_features, shrunk_background
from .heads import GENRE_COLUMNS, LogisticHead, SoftmaxHead, TreeHead, load_heads

_TEXT_KEYS = {"genre": "message", "keep_topic": "message", "keep_exchange": "exchange"}
_ITEM_KEYS = {"note_answers": "notes", "passage_answers": "passages"}


class EmbeddedChoiceModel:
    """`ChoiceModel` over an `Encoder` and its trained heads (see `heads.py`)."""

    def __init__(self, encoder: Encoder | None = None) -> None:
        self.encoder = encoder or load_encoder()
        self.heads = load_heads(self.encoder.name)
        self.name = f"embedded:{self.encoder.name}"

    def decide(self, request: Request) -> dict[str, Answer]:
        state, local = request.state, request.local
        cache: dict[tuple[str, str], np.ndarray] = {}  # ("query", text) and (tier, "features"), for this request
        for text, vector in local.get("query_vectors", {}).items():
            cache["query", text] = vector
        if "query_vector" in local:
            cache["query", str(state["message"])] = local["query_vector"]
        answers: dict[str, Answer] = {}
        for qid, question in request.questions.items():
            head_name, _, index = qid.partition(".")
            head = self.heads.get(head_name)
            if head is None:
                raise UnsupportedQuestion(qid)
            if isinstance(head, SoftmaxHead):
                text = str(state[_TEXT_KEYS[head_name]])
                answers[qid] = Answer(question.type, head.probabilities(self._query(text, cache), text))
            else:
                p = self._relevance(head, _ITEM_KEYS[head_name], int(index), state, local, cache)
                answers[qid] = Answer("noul", {"true": p, "false": 1.0 - p})
        return answers

    def embed_query(self, text: str) -> np.ndarray:
        """The query vector of a message, (d,) float32."""
        return self.encoder.query([text])[0]

    def _query(self, text: str, cache: dict) -> np.ndarray:
        if ("query", text) not in cache:
            cache["query", text] = self.embed_query(text)
        return cache["query", text]

    def _relevance(
        self,
        head: LogisticHead | TreeHead,
        tier: str,
        i: int,
        state: Any,
        local: Any,
        cache: dict,
    ) -> float:
        key = (tier, "features")
        if key not in cache:  # the whole shortlist at once: each item is placed among the others
            message = str(state["message"])
            items = [x if isinstance(x, dict) else {"text": x} for x in state[tier]]
            q = self._query(message, cache)
            item_vectors = local.get(f"{tier[:-1]}_vectors")
            if item_vectors is None:
                item_vectors = self.encoder.passage([str(x.get("text", "")) for x in items])
            cos = item_vectors @ q
            median = local.get(f"{tier[:-1]}_background")
            count = local.get(f"{tier[:-1]}_count", len(items))
            background = shrunk_background(float(np.median(cos)) if median is None else median, count, head.background)
            rows = shortlist_features(cos, background, message, items)
            genre = np.zeros((len(items), len(GENRE_COLUMNS)), dtype=np.float32)
            if head.genre:  # the message's genre, as the genre head gives it (one product: microseconds)
                genre[:] = genre_columns(self.heads["genre"].probabilities(q, message))
            cache[key] = head.probabilities(np.hstack([rows, genre]))
        return float(cache[key][i])

    @property
    def thresholds(self) -> dict[str, float]:
        """The P(answers) each relevance head pastes at, where its training chose one
        (`h.threshold`), by head name."""
        return {name: h.threshold for name, h in self.heads.items()
                if not isinstance(h, SoftmaxHead) and h.threshold is not None}

    @property
    def genre_thresholds(self) -> dict[str, dict[str, float]]:
        """The P(answers) each relevance head pastes at for a message of a given genre, where
        its training chose one (`h.genre_thresholds`): `{head name: {genre: threshold}}`."""
        return {name: h.genre_thresholds for name, h in self.heads.items()
                if not isinstance(h, SoftmaxHead) and h.genre_thresholds}


def genre_columns(probabilities: dict[str, float]) -> np.ndarray:
    """`heads.GENRE_COLUMNS` from a genre head's probabilities by genre: their sum over the
    six lookup genres, then each genre, float32 (12,)."""
    from .base import load_question

    lookup = load_question("genre").extra["lookup"]
    by_genre = [probabilities.get(c.removeprefix("genre_"), 0.0) for c in GENRE_COLUMNS[1:]]
    return np.array([sum(probabilities.get(g, 0.0) for g in lookup), *by_genre], dtype=np.float32)
