"""The passage-backend protocol and its value types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np


class BackendUnavailable(RuntimeError):
    """The backend could not answer within its budget (down, slow or misconfigured)."""


@dataclass(frozen=True)
class Passage:
    """An excerpt of an older exchange, as a memory server holds it."""

    id: str
    date: str
    text: str


def exchange_passage_id(note_id: str) -> str:
    """The id of the passage capture keeps beside note `note_id`, from the same exchange
    (`N012` -> `N012-x`): pasting one makes the other redundant."""
    return f"{note_id}-x"


@dataclass(frozen=True)
class SearchResult:
    """Passages best first with their cosines (when known) and the tier's median cosine.

    `vectors` (n, d) are the passages' stored embeddings when the backend keeps them, so the
    relevance judge never embeds a passage at query time; `background` (the median cosine of
    the query over `count` stored passages) is None when the backend cannot tell.
    """

    passages: list[Passage]
    cosines: list[float] = field(default_factory=list)
    vectors: np.ndarray | None = None
    background: float | None = None
    count: int = 0


class PassageBackend(Protocol):
    """Stores passages and searches them within a time budget."""

    name: str

    def add(self, passages: Sequence[Passage]) -> None:
        """Store passages (embedding them now if the backend keeps vectors)."""
        ...

    def search(
        self, query: str, query_vector: np.ndarray | None, k: int, budget_s: float
    ) -> SearchResult:
        """The top `k` passages for `query`. Raises `BackendUnavailable` past `budget_s` seconds."""
        ...
